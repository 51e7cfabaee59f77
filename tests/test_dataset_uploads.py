"""Uploads of a dataset write (issue G, item 2), on a real SeaweedFS through
the proxy (tests/fault_proxy.py): a part goes up while it is being encoded,
even the first part of a stream whose length is unknown, whose name
(``data.parquet`` or ``part-00000.parquet``) depends on whether a second
part follows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import pds

ROWS_PER_BATCH = 100_000
BATCHES = 40  # 4M rows of random int64: 32 MB, incompressible


def _batches(seed: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    return [
        pa.record_batch({"v": pa.array(rng.integers(-(2**62), 2**62, ROWS_PER_BATCH), pa.int64())})
        for _ in range(BATCHES)
    ]


def _stream(batches: list[pa.RecordBatch], faulty: Any, seen: list[bool]) -> Iterator[pa.RecordBatch]:
    """Yield *batches*; before the last, wait up to 10 s for an upload request
    of the first part, and note whether one came (the part is not complete
    yet, so its name is not known either)."""
    for i, b in enumerate(batches):
        if i == len(batches) - 1:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not faulty.proxy.requests(path=r"/part-00000\.parquet"):
                time.sleep(0.05)
            seen.append(bool(faulty.proxy.requests(path=r"/part-00000\.parquet")))
        yield b


@pytest.mark.spec("G-2")
def test_a_first_part_of_unknown_length_uploads_before_it_is_named(faulty: Any) -> None:
    """Unknown length with a row cap it does not reach: the part goes up as
    ``part-00000.parquet`` while it is still being encoded, and is renamed
    ``data.parquet`` when it proves the only one."""
    batches = _batches(1)
    seen: list[bool] = []
    ds = pds.ParquetDatasetStore(faulty.store, compression="none", max_rows_per_file=5_000_000)
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, _stream(batches, faulty, seen))
    manifest = ds.write_dataset(reader, "d")
    assert manifest.parts == ["data.parquet"]
    assert seen == [True]
    # Nothing is left under the provisional name.
    assert sorted(f.name for f in faulty.direct.list_files("d")) == ["_SUCCESS", "data.parquet", "manifest.json"]
    got = pds.ParquetDatasetStore(faulty.open()).read_dataset("d", verify=True)
    assert got.equals(pa.Table.from_batches(batches))


@pytest.mark.spec("G-2")
def test_a_refused_rename_keeps_the_provisional_name(faulty: Any) -> None:
    """The store refuses to copy the part to ``data.parquet`` (as S3 does
    above 5 GiB): the part keeps ``part-00000.parquet``, which the manifest
    lists, and nothing is left under the other name."""
    batches = _batches(3)
    faulty.proxy.fail("PUT", r"/d/data\.parquet$", status=400, times=None)
    ds = pds.ParquetDatasetStore(faulty.store, compression="none", max_rows_per_file=5_000_000)
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches))
    manifest = ds.write_dataset(reader, "d")
    assert faulty.proxy.requests("PUT", r"/d/data\.parquet$")  # the copy was tried
    faulty.proxy.clear()
    assert manifest.parts == ["part-00000.parquet"]
    assert sorted(f.name for f in faulty.direct.list_files("d")) == ["_SUCCESS", "manifest.json", "part-00000.parquet"]
    got = pds.ParquetDatasetStore(faulty.open()).read_dataset("d", verify=True)
    assert got.equals(pa.Table.from_batches(batches))


@pytest.mark.spec("G-2")
def test_a_stream_of_two_parts_is_named_as_before(faulty: Any) -> None:
    batches = _batches(2)
    seen: list[bool] = []
    ds = pds.ParquetDatasetStore(faulty.store, compression="none", max_rows_per_file=3_000_000)
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, _stream(batches, faulty, seen))
    manifest = ds.write_dataset(reader, "d")
    assert manifest.parts == ["part-00000.parquet", "part-00001.parquet"]
    assert seen == [True]
    got = pds.ParquetDatasetStore(faulty.open()).read_dataset("d", verify=True)
    assert got.equals(pa.Table.from_batches(batches))
