"""Filters, row-group pruning and streaming reads (issue B), on every store.

Results are compared with pyarrow's own filtering of the same data.
"""

from __future__ import annotations

import datetime as dt
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from remote_store import Store

import pds
from pds import ParquetDatasetStore

from helpers import garble_chunks, sample

N = 5000

CASES = [
    ([("id", "<", 1234)], pc.field("id") < 1234),
    ([("id", ">=", 4990)], pc.field("id") >= 4990),
    ([("id", "==", 777)], pc.field("id") == 777),
    ([("id", "!=", 0), ("price", "<=", 10.0)], (pc.field("id") != 0) & (pc.field("price") <= 10.0)),
    ([("name", "==", "name-5")], pc.field("name") == "name-5"),
    ([("name", "in", ["name-1", "name-2"])], pc.field("name").isin(["name-1", "name-2"])),
    ([("id", "not in", list(range(100, 5000)))], ~pc.field("id").isin(list(range(100, 5000)))),
    ([("maybe", "is_null")], pc.field("maybe").is_null()),
    ([("maybe", "is_not_null"), ("id", "<", 20)], pc.field("maybe").is_valid() & (pc.field("id") < 20)),
    (
        [("ts", ">", dt.datetime(2023, 11, 14, 22, 13, 20, 4000, tzinfo=dt.UTC))],
        pc.field("ts")
        > pa.scalar(dt.datetime(2023, 11, 14, 22, 13, 20, 4000, tzinfo=dt.UTC), pa.timestamp("us", "UTC")),
    ),
]


@pytest.fixture
def written(store: Store) -> tuple[ParquetDatasetStore, pa.Table]:
    ds = ParquetDatasetStore(store, max_rows_per_file=1500, row_group_size=250)
    table = sample(N)
    ds.write_dataset(table, "t")
    return ds, table


@pytest.mark.spec("B-FILTER")
@pytest.mark.parametrize(("tuples", "expr"), CASES)
def test_filter_matches_pyarrow(written: tuple[ParquetDatasetStore, pa.Table], tuples, expr) -> None:  # type: ignore[no-untyped-def]
    ds, table = written
    expected = table.filter(expr)
    assert ds.read_dataset("t", filter=tuples).equals(expected)
    assert ds.read_dataset("t", filter=expr).equals(expected)
    # With a projection that leaves the filter columns out.
    assert ds.read_dataset("t", columns=["price"], filter=tuples).equals(expected.select(["price"]))
    assert ds.read_dataset("t", columns=["price"], filter=expr).equals(expected.select(["price"]))
    streamed = ds.iter_batches("t", filter=tuples, batch_size=100).read_all()
    assert streamed.equals(expected)


@pytest.mark.spec("B-FILTER")
@pytest.mark.parametrize(
    ("flt", "exc"),
    [
        ([("nope", "==", 1)], ValueError),
        ([("id", "~", 1)], ValueError),
        ([("id", "==", None)], ValueError),
        ([("id", "in", "abc")], TypeError),
        ([("id",)], TypeError),
        ("id < 3", TypeError),
        ([("id", "==", object())], TypeError),
    ],
)
def test_bad_filters(written: tuple[ParquetDatasetStore, pa.Table], flt: object, exc: type[Exception]) -> None:
    ds, _ = written
    with pytest.raises(exc):
        ds.read_dataset("t", filter=flt)  # type: ignore[arg-type]


@pytest.mark.spec("B-SCAN")
def test_iter_batches_streams_everything_in_order(written: tuple[ParquetDatasetStore, pa.Table]) -> None:
    ds, table = written
    reader = ds.iter_batches("t", columns=["name", "id"], batch_size=64)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema == table.select(["name", "id"]).schema
    sizes = []
    batches = []
    for b in reader:
        sizes.append(b.num_rows)
        batches.append(b)
    assert max(sizes) <= 64
    assert pa.Table.from_batches(batches, reader.schema).equals(table.select(["name", "id"]))


@pytest.mark.spec("B-SCAN")
def test_iter_batches_checks_before_returning(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=10)
    ds.write_dataset(sample(30), "k")
    store.delete("k/part-00001.parquet")
    with pytest.raises(pds.DatasetIncomplete):
        ds.iter_batches("k")
    with pytest.raises(pds.DatasetIncomplete):
        ds.iter_batches("missing")


def _corrupt_first_row_group(store: Store, key: str) -> None:
    raw = bytearray(store.read_bytes(key))
    garble_chunks(raw, lambda g, _: g == 0)
    store.write(key, bytes(raw), overwrite=True)


@pytest.mark.spec("B-PRUNE")
def test_pruned_row_groups_are_never_fetched(store: Store) -> None:
    """Row group 0 of the only part is garbage: any read that touches it fails.
    A filter its statistics rule out still succeeds, so it was never fetched."""
    ds = ParquetDatasetStore(store, row_group_size=100)
    table = sample(1000)
    ds.write_dataset(table, "p")
    _corrupt_first_row_group(store, "p/data.parquet")
    with pytest.raises((pds.PartCorrupted, pa.ArrowException)):
        ds.read_dataset("p")
    got = ds.read_dataset("p", filter=[("id", ">=", 100)])
    assert got.equals(table.filter(pc.field("id") >= 100))
    assert ds.iter_batches("p", filter=[("id", ">", 500)]).read_all().num_rows == 499


@pytest.mark.spec("B-SCAN")
def test_iter_batches_on_a_larger_dataset_reads_a_bounded_window(fast_store: Store) -> None:
    ds = ParquetDatasetStore(fast_store, max_rows_per_file=100_000, row_group_size=20_000)
    table = pa.table({"v": pa.array(range(600_000), pa.int64())})
    ds.write_dataset(table, "big")
    total = 0
    for batch in ds.iter_batches("big", batch_size=10_000):
        total += batch.num_rows
    assert total == 600_000


def _corrupt_column(store: Store, key: str, column: str) -> None:
    raw = bytearray(store.read_bytes(key))
    index = pq.ParquetFile(io.BytesIO(bytes(raw))).metadata.schema.names.index(column)
    garble_chunks(raw, lambda _, c: c == index)
    store.write(key, bytes(raw), overwrite=True)


@pytest.mark.spec("B-RANGE")
def test_only_projected_column_chunks_are_read(store: Store) -> None:
    """The `name` chunks are garbage in every row group: reading them fails, but a
    projection without `name` succeeds, so those byte ranges were never decoded
    (on pds's backend: never fetched)."""
    ds = ParquetDatasetStore(store, row_group_size=200)
    table = sample(1000)
    ds.write_dataset(table, "c")
    _corrupt_column(store, "c/data.parquet", "name")
    with pytest.raises((pds.PartCorrupted, pa.ArrowException)):
        ds.read_dataset("c")
    assert ds.read_dataset("c", columns=["id", "price"]).equals(table.select(["id", "price"]))
    assert ds.iter_batches("c", columns=["ts"]).read_all().equals(table.select(["ts"]))


@pytest.mark.spec("B-FILTER")
@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
@pytest.mark.parametrize("value", [0.0, -0.0, 1.0, float("nan")])
def test_float_filters_follow_ieee_like_pyarrow(fast_store: Store, op: str, value: float) -> None:
    table = pa.table({"f": pa.array([-0.0, 0.0, float("nan"), 2.0, None, -3.5, 1.0], pa.float64())})
    ds = ParquetDatasetStore(fast_store, row_group_size=2)
    ds.write_dataset(table, "f")
    exprs = {
        "==": pc.field("f") == value,
        "!=": pc.field("f") != value,
        "<": pc.field("f") < value,
        "<=": pc.field("f") <= value,
        ">": pc.field("f") > value,
        ">=": pc.field("f") >= value,
    }
    expected = table.filter(exprs[op])
    got = ds.read_dataset("f", filter=[("f", op, value)])
    assert got.num_rows == expected.num_rows
    assert [str(v) for v in got.column("f").to_pylist()] == [str(v) for v in expected.column("f").to_pylist()]


@pytest.mark.spec("B-SCAN")
def test_scan_part_streams_and_can_stop_early(fast_store: Store) -> None:
    """One part as a stream: closing it after one batch stops the decoder; the store stays usable."""
    ds = ParquetDatasetStore(fast_store, row_group_size=10_000)
    table = pa.table({"v": pa.array(range(100_000), pa.int64()), "w": pa.array(range(100_000), pa.float64())})
    ds.write_dataset(table, "s")
    rust = fast_store.unwrap(pds._core.RustStore)
    reader = pds._core.scan_part(rust, "s/data.parquet", columns=["w", "v"], batch_size=4096)
    assert reader.schema.names == ["w", "v"]
    first = reader.read_next_batch()
    assert first.num_rows == 4096
    reader.close()
    full = pds._core.scan_part(rust, "s/data.parquet", batch_size=4096).read_all()
    assert full.equals(table)
    with pytest.raises(pds.errors.NotFound):
        pds._core.scan_part(rust, "s/missing.parquet")
    with pytest.raises(ValueError, match="unknown column"):
        pds._core.scan_part(rust, "s/data.parquet", columns=["nope"])


@pytest.mark.spec("B-SCAN")
def test_scan_part_reports_a_corrupt_row_group_mid_stream(fast_store: Store) -> None:
    """Row group 0 is fine, the rest garbage: the first batches arrive, then an error naming the part."""
    ds = ParquetDatasetStore(fast_store, row_group_size=1000)
    ds.write_dataset(sample(5000), "m")
    raw = bytearray(fast_store.read_bytes("m/data.parquet"))
    garble_chunks(raw, lambda g, _: g >= 1)
    fast_store.write("m/data.parquet", bytes(raw), overwrite=True)
    reader = pds._core.scan_part(fast_store.unwrap(pds._core.RustStore), "m/data.parquet", batch_size=500)
    assert reader.read_next_batch().num_rows == 500
    with pytest.raises(pds.PartCorrupted, match=r"m/data\.parquet"):
        reader.read_all()
