"""``Table.upsert`` streams its input: rows are uploaded as they arrive and
only the key column is kept. A stream's bad keys (null at its batch,
repeated or NaN at its end) and a failing input leave the table and the
store as they were; a streamed upsert gives what the same rows in a
``pyarrow.Table`` give. Also through a Dagster asset whose output is a
stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from remote_store import Store

import pds
from pds import DataError, Table
from pds.dagster import PdsIOManager

from helpers import files

pytestmark = pytest.mark.spec("K-1")

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("x", pa.float64())])


def batch(ids: list[int], tag: str) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(ids, pa.int64()), "name": [f"{tag}{i}" for i in ids], "x": [float(i) for i in ids]},
        schema=SCHEMA,
    )


def small_files(store: Store) -> Table:
    """A keyed table whose data files roll over every few thousand rows, so
    that a stream of a few batches makes several files."""
    t = Table.create(store, "t", schema=SCHEMA, primary_key="id", row_group_size=1000, target_file_size=32 * 1024)
    t.append(pa.Table.from_batches([batch(list(range(0, 20_000)), "old")]))
    return t


def content(t: Table) -> dict[int, tuple[str, float]]:
    got = t.to_arrow().to_pylist()
    out = {r["id"]: (r["name"], r["x"]) for r in got}
    assert len(out) == len(got), "a key occurs twice"
    return out


def test_a_streamed_upsert_uploads_as_it_reads_and_equals_the_in_memory_one(fast_store: Store, tmp_path: Path) -> None:
    t = small_files(fast_store)
    before = set(files(fast_store, "t/data"))
    seen_uploading: list[bool] = []
    # Replaced keys scattered over the old files, and new keys, in 6 batches.
    chunks = [list(range(k, 20_000, 97)) + list(range(30_000 + k * 1000, 30_000 + k * 1000 + 800)) for k in range(6)]

    def stream() -> Iterator[pa.RecordBatch]:
        for i, ids in enumerate(chunks):
            # Files of this upsert reach the store before its last batch is read.
            seen_uploading.append(bool(set(files(fast_store, "t/data")) - before))
            yield batch(ids, f"new{i}-")

    version = t.upsert(pa.RecordBatchReader.from_batches(SCHEMA, stream()))
    assert version == 2
    assert seen_uploading[-1], "no file was uploaded before the stream's last batch"

    # The same rows as one pa.Table, on a twin table: the same content.
    twin = small_files(pds.open_store((tmp_path / "twin").as_uri()))
    twin.upsert(pa.Table.from_batches([batch(ids, f"new{i}-") for i, ids in enumerate(chunks)]))
    assert content(Table.open(fast_store, "t")) == content(twin)
    assert t.history(1)[0]["operation"] == "upsert"


def test_a_streamed_upsert_holds_its_keys_not_its_rows(tmp_path: Path) -> None:
    """40 batches of 4 MiB: the batches already encoded are released (the
    kept keys are copies, not views that would keep each batch alive)."""
    store = pds.open_store((tmp_path / "m").as_uri())
    schema = pa.schema([("id", pa.int64()), ("blob", pa.binary())])
    t = Table.create(store, "w", schema=schema, primary_key="id", row_group_size=5000, target_file_size=16 * 2**20)
    held: list[int] = []
    base = pa.total_allocated_bytes()

    def stream() -> Iterator[pa.RecordBatch]:
        for k in range(40):
            held.append(pa.total_allocated_bytes() - base)
            ids = pa.array(range(k * 1000, k * 1000 + 1000), pa.int64())
            yield pa.record_batch({"id": ids, "blob": pa.array([b"x" * 4096] * 1000, pa.binary())}, schema=schema)

    t.upsert(pa.RecordBatchReader.from_batches(schema, stream()))
    assert t.to_arrow(columns=["id"]).num_rows == 40_000
    # The whole input is 160 MiB; a row group's batches (5 MiB each) are held while encoded.
    assert max(held) < 80 * 2**20, [h >> 20 for h in held]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([[1, 2, 3], [4, 2, 5]], r"repeats primary keys of \"id\": 2 among them"),
        ([[1, 2, 3], [4, None, 5]], r"null keys"),
    ],
)
def test_bad_keys_in_a_stream_commit_nothing_and_leave_no_file(
    fast_store: Store, bad: list[list[int | None]], message: str
) -> None:
    t = small_files(fast_store)
    objects = files(fast_store, "t")
    read: list[int] = []

    def stream() -> Iterator[pa.RecordBatch]:
        for i, ids in enumerate(bad):
            read.append(i)
            yield pa.record_batch(
                {"id": pa.array(ids, pa.int64()), "name": ["n"] * len(ids), "x": [0.0] * len(ids)}, schema=SCHEMA
            )
        # A bad batch stops the read; a repeated key is only known at the end.
        for i in range(2, 5):
            read.append(i)
            yield batch(list(range(100_000 + i * 10, 100_000 + i * 10 + 10)), "more")

    with pytest.raises(ValueError, match=message):
        t.upsert(pa.RecordBatchReader.from_batches(SCHEMA, stream()))
    assert Table.open(fast_store, "t").version == 1
    assert files(fast_store, "t") == objects
    if "null" in message:
        assert read == [0, 1], "the stream was read past its null key"


def test_nan_keys_in_a_stream_are_refused(fast_store: Store) -> None:
    schema = pa.schema([("k", pa.float64()), ("v", pa.int64())])
    t = Table.create(fast_store, "f", schema=schema, primary_key="k")
    objects = files(fast_store, "f")
    rows = [pa.record_batch({"k": [1.0, 2.0], "v": [1, 2]}, schema=schema)]
    rows.append(pa.record_batch({"k": [math.nan], "v": [3]}, schema=schema))
    with pytest.raises(ValueError, match="NaN"):
        t.upsert(pa.RecordBatchReader.from_batches(schema, iter(rows)))
    assert files(fast_store, "f") == objects


def test_a_failing_input_stream_commits_nothing(fast_store: Store) -> None:
    t = small_files(fast_store)
    objects = files(fast_store, "t")

    def stream() -> Iterator[pa.RecordBatch]:
        yield batch(list(range(0, 5000)), "a")
        yield batch(list(range(50_000, 55_000)), "b")
        raise RuntimeError("the source went away")

    with pytest.raises(DataError, match="the source went away"):
        t.upsert(pa.RecordBatchReader.from_batches(SCHEMA, stream()))
    assert Table.open(fast_store, "t").version == 1
    assert files(fast_store, "t") == objects
    assert content(t)[0] == ("old0", 0.0)


def test_a_dagster_upsert_asset_streams_its_output(tmp_path: Path) -> None:
    root = (tmp_path / "lake").as_uri()
    store = pds.open_store(root)
    small_files(store)  # the asset's table: key "t"
    before = set(files(store, "t/data"))
    uploading: list[bool] = []

    @dg.asset(key="t", metadata={"pds/format": "table", "pds/write_mode": "upsert", "pds/primary_key": "id"})
    def t() -> pa.RecordBatchReader:
        def stream() -> Iterator[pa.RecordBatch]:
            for k in range(4):
                uploading.append(bool(set(files(store, "t/data")) - before))
                yield batch(list(range(k * 5000, k * 5000 + 4000)), f"d{k}-")

        return pa.RecordBatchReader.from_batches(SCHEMA, stream())

    result = dg.materialize([t], resources={"io_manager": PdsIOManager(root_uri=root)})
    assert result.success
    meta = result.asset_materializations_for_node("t")[0].metadata
    assert meta["dagster/row_count"].value == 16_000
    assert meta["pds/version"].value == 2
    assert uploading[-1], "the output was collected before any upload"
    got = content(Table.open(store, "t"))
    assert len(got) == 20_000
    assert got[3999] == ("d0-3999", 3999.0)
    assert got[4001] == ("old4001", 4001.0)
    assert got[5000] == ("d1-5000", 5000.0)
    assert got[19_999] == ("old19999", 19_999.0)
