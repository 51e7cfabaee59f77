"""Arrow in through the C stream interface (any producer), a pyarrow Table out."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest
from remote_store import Store

import pds

from helpers import sample


def test_record_batch_reader_is_streamed(store: Store) -> None:
    table = sample(1000)
    pulled: list[int] = []

    def batches():  # type: ignore[no-untyped-def]
        for b in table.to_batches(max_chunksize=100):
            pulled.append(b.num_rows)
            yield b

    reader = pa.RecordBatchReader.from_batches(table.schema, batches())
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=300)
    assert ds.write_dataset(reader, "r").row_count == 1000
    assert sum(pulled) == 1000
    assert ds.read_dataset("r").equals(table)


def test_polars_dataframe(store: Store) -> None:
    df = pl.DataFrame({"a": [1, 2, 3], "b": ["x", "y", None]})
    ds = pds.ParquetDatasetStore(store)
    ds.write_dataset(df, "pl")  # type: ignore[arg-type]
    back = pl.from_arrow(ds.read_dataset("pl"))
    assert isinstance(back, pl.DataFrame)
    assert back.equals(df)


def test_record_batch(store: Store) -> None:
    batch = sample(10).to_batches()[0]
    ds = pds.ParquetDatasetStore(store)
    ds.write_dataset(batch, "rb")  # type: ignore[arg-type]
    assert ds.read_dataset("rb").equals(pa.Table.from_batches([batch]))


@pytest.mark.parametrize(
    "arr",
    [
        pa.array([[1, 2], None, [3]], pa.list_(pa.int64())),
        pa.array([{"x": 1, "y": "a"}, None], pa.struct([("x", pa.int64()), ("y", pa.string())])),
        pa.array(["a", "b", "a"]).dictionary_encode(),
        pa.array([b"\x00\x01", None], pa.binary()),
        pa.array([1.5, None], pa.float32()),
        pa.array([True, None, False]),
        pa.array(["2026-01-01"], pa.string()).cast(pa.date32()),
        pa.array([12345], pa.decimal128(10, 2)),
        pa.array(["big"], pa.large_string()),
    ],
)
def test_types_round_trip(fast_store: Store, arr: pa.Array) -> None:
    table = pa.table({"c": arr})
    ds = pds.ParquetDatasetStore(fast_store)
    ds.write_dataset(table, "t")
    assert ds.read_dataset("t").equals(table)
    assert ds.read_schema("t") == table.schema


def test_read_result_is_not_copied_into_pyarrow(fast_store: Store) -> None:
    """The result's buffers are Rust's, imported through the C stream: pyarrow's own
    allocator holds none of them."""
    table = pa.table({"v": pa.array(range(2_000_000), pa.int64())})
    ds = pds.ParquetDatasetStore(fast_store)
    ds.write_dataset(table, "big")
    del table
    before = pa.total_allocated_bytes()
    got = ds.read_dataset("big")
    assert got.num_rows == 2_000_000
    assert got.nbytes >= 16_000_000
    assert pa.total_allocated_bytes() - before < 1_000_000
