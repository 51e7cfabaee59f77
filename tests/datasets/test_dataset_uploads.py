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

from helpers import kill_while_held

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


def _single_part(faulty: Any, seed: int, *, overwrite: bool = False) -> tuple[Any, pa.Table]:
    """Write one part of unknown length, big enough to go up under its
    provisional name first; the manifest and the rows."""
    batches = _batches(seed)
    ds = pds.ParquetDatasetStore(faulty.store, compression="none", max_rows_per_file=5_000_000)
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches))
    return ds.write_dataset(reader, "d", overwrite=overwrite), pa.Table.from_batches(batches)


def _only_listed_parts(faulty: Any, manifest: Any, rows: pa.Table) -> None:
    """The manifest's parts, and nothing else, are under the key, and they
    read back exactly."""
    faulty.proxy.clear()
    names = sorted(f.name for f in faulty.direct.list_files("d"))
    assert names == sorted(["_SUCCESS", "manifest.json", *manifest.parts]), names
    assert pds.ParquetDatasetStore(faulty.open()).read_dataset("d", verify=True).equals(rows)


@pytest.mark.spec("G-2")
@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("PUT", r"/d/data\.parquet$", None),  # the copy
        # The delete of the provisional name (S3 deletes in bulk: the first
        # delete of the write is that one).
        ("POST", r"^/[^/]+$", "delete"),
    ],
)
def test_a_lost_reply_of_the_rename_leaves_one_name(faulty: Any, method: str, path: str, query: str | None) -> None:
    """The store applies a step of the move but its reply is lost: the part
    ends under exactly one name, which the manifest lists."""
    rule = faulty.proxy.drop_reply(method, path, query=query)
    manifest, rows = _single_part(faulty, 4)
    assert rule.exhausted, "the reply was not lost"
    assert len(manifest.parts) == 1
    _only_listed_parts(faulty, manifest, rows)


@pytest.mark.spec("G-2")
def test_a_failing_delete_of_the_provisional_name_keeps_it(faulty: Any) -> None:
    """The copy succeeds but the provisional name cannot be deleted (every
    try fails): the copy is removed instead, and the part keeps
    ``part-00000.parquet``."""
    tries = 1 + int(faulty.options["max_retries"])
    rule = faulty.proxy.fail("POST", r"^/[^/]+$", query="delete", status=503, times=tries)
    manifest, rows = _single_part(faulty, 5)
    assert rule.exhausted
    assert manifest.parts == ["part-00000.parquet"]
    _only_listed_parts(faulty, manifest, rows)


@pytest.mark.spec("G-2")
def test_an_overwrite_of_a_single_part_dataset_renames_over_nothing_old(faulty: Any) -> None:
    """A dataset of one ``data.parquet`` overwritten by another of one part
    of unknown length: the new part takes the name, and the old rows are
    gone."""
    _single_part(faulty, 6)
    manifest, rows = _single_part(faulty, 7, overwrite=True)
    assert len(manifest.parts) == 1
    _only_listed_parts(faulty, manifest, rows)


KILLED_WRITER = r"""
import json, sys
import numpy as np, pyarrow as pa, pds
url, options = sys.argv[1], json.loads(sys.argv[2])
rng = np.random.default_rng(9)
batches = [pa.record_batch({"v": pa.array(rng.integers(-(2**62), 2**62, 100_000), pa.int64())}) for _ in range(40)]
ds = pds.ParquetDatasetStore(pds.open_store(url, **options), compression="none", max_rows_per_file=5_000_000)
ds.write_dataset(pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches)), "d")
"""


@pytest.mark.spec("G-2")
def test_a_writer_killed_between_the_copy_and_the_delete(faulty: Any) -> None:
    """SIGKILL while the part is under both names (the copy done, the delete
    of the provisional name in flight and never applied): nothing is
    committed, readers see no dataset, and the next writer's dataset holds
    only its own rows."""
    import json
    import sys

    def both_names() -> None:
        names = {f.name for f in faulty.direct.list_files("d")}
        assert {"data.parquet", "part-00000.parquet"} <= names, names

    argv = [sys.executable, "-c", KILLED_WRITER, faulty.url, json.dumps(faulty.options)]
    rule = kill_while_held(faulty.proxy, "POST", r"^/[^/]+$", argv, check=both_names, query="delete")
    assert rule.exhausted
    faulty.proxy.clear()
    with pytest.raises(pds.DatasetIncomplete):
        pds.ParquetDatasetStore(faulty.open()).read_dataset("d")
    manifest, rows = _single_part(faulty, 8, overwrite=True)
    _only_listed_parts(faulty, manifest, rows)
