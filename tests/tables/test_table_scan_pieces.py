"""Table scans at the peers' pace (issue T, item 2): a file decoded in
row-range pieces on several tasks at once, deletes applied to the decoded
batches (scattered row positions by a bitmap, key ranges by a comparison a
row), and batches of 65,536 rows by default.

Every case compares the rows a scan returns, in order, with a model computed
by pyarrow on the data written: whatever the parallelism (one piece or
several per file), the row-group layout, the deletes (scattered, contiguous,
key ranges), the projection (with or without the key column the key-range
deletes need) and the filter. On memory, file and SeaweedFS S3.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from remote_store import Store

import pds
from pds import PartCorrupted, Table, _core

from helpers import chunk_ranges, files

ROWS = 300_000  # Above twice the smallest piece (128 Ki rows): a file splits.


def data(start: int, n: int, seed: int) -> pa.Table:
    """ids start..start+n (shuffled within blocks of 1,000 when seed is odd:
    unsorted keys), customer c<id * 7919 % 1000>, amount id / 4."""
    ids = list(range(start, start + n))
    if seed % 2:
        rng = random.Random(seed)
        for at in range(0, n, 1000):
            block = ids[at : at + 1000]
            rng.shuffle(block)
            ids[at : at + 1000] = block
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "customer": pa.array([f"c{i * 7919 % 1000}" for i in ids], pa.string()),
            "amount": pa.array([i / 4 for i in ids], pa.float64()),
        }
    )


def scan(t: Table, parallelism: int, **kw: object) -> pa.Table:
    """The table read through the core with this many decode tasks."""
    reader = _core.table_scan(
        t._native,
        t._path,
        version=t.version,
        columns=kw.get("columns"),
        filter=kw.get("filter"),
        batch_size=kw.get("batch_size"),
        parallelism=parallelism,
    )
    return reader.read_all()


@pytest.mark.spec("T-2")
@pytest.mark.parametrize("seed", [0, 1])
def test_pieces_and_late_deletes_return_the_model_rows_in_order(fast_store: Store, seed: int) -> None:
    rng = random.Random(seed)
    layout = {"row_group_size": 70_000} if seed else {}
    model = data(0, ROWS, seed)
    t = Table.create(fast_store, "t", data=model, primary_key="id", **layout)
    model = pa.concat_tables([model, data(ROWS, 50_000, seed)])
    t.append(data(ROWS, 50_000, seed))
    # Scattered: 10 % of customers; contiguous key ranges, one across the
    # two files; a single row.
    gone = [f"c{c}" for c in rng.sample(range(1000), 100)]
    t.delete([("customer", "in", gone)])
    ranges = [(5_000, 9_999), (140_000, 170_000), (ROWS - 100, ROWS + 100)]
    for lo, hi in ranges:
        t.delete([("id", ">=", lo), ("id", "<=", hi)])
    t.delete([("id", "==", 250_001)])
    keep = pc.invert(pc.is_in(model["customer"], pa.array(gone)))
    for lo, hi in ranges:
        keep = pc.and_(keep, pc.invert(pc.and_(pc.greater_equal(model["id"], lo), pc.less_equal(model["id"], hi))))
    keep = pc.and_(keep, pc.not_equal(model["id"], 250_001))
    expected = model.filter(keep)

    for parallelism in (1, 2, 3):
        got = scan(t, parallelism)
        assert got.equals(expected), parallelism
        # Without the key column: the key-range deletes still apply, and the
        # key is not returned.
        got = scan(t, parallelism, columns=["amount", "customer"], batch_size=10_000)
        assert got.column_names == ["amount", "customer"]
        assert got.equals(expected.select(["amount", "customer"])), parallelism
        assert max(b.num_rows for b in got.to_batches()) <= 10_000
    # A pushed-down filter with the deletes (a row filter in the decoder).
    got = t.to_arrow(columns=["id"], filter=[("amount", ">=", 30_000.0)])
    assert got.equals(expected.filter(pc.greater_equal(expected["amount"], 30_000.0)).select(["id"]))
    # The public scan: its batches are decoded 65,536 rows at a time by
    # default (fewer come out where rows were deleted after decoding).
    batches = list(t.scan())
    assert pa.Table.from_batches(batches).equals(expected)
    assert 50_000 < max(b.num_rows for b in batches) <= 65_536


@pytest.mark.spec("T-2")
def test_a_scan_is_a_stream_polars_and_duckdb_take_without_a_copy(fast_store: Store) -> None:
    polars = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    t = Table.create(fast_store, "t", data=data(0, ROWS, 0), primary_key="id")
    t.delete([("customer", "==", "c7")])
    expected = ROWS - ROWS // 1000
    reader = t.scan(columns=["id"])
    assert hasattr(reader, "__arrow_c_stream__")
    assert polars.from_arrow(reader).height == expected
    reader = t.scan(columns=["id", "amount"])
    assert duckdb.sql("select count(*), sum(id) from reader").fetchall()[0][0] == expected


@pytest.mark.spec("T-2")
def test_clustered_deletes_are_skipped_by_the_decoder_in_every_piece(fast_store: Store) -> None:
    """Deletes in a few long runs (not scattered) stay a row selection the
    decoder skips, intersected with each piece's rows."""
    model = data(0, ROWS, 0)
    t = Table.create(fast_store, "t", data=model, primary_key="id", row_group_size=100_000)
    # Not the key: row positions, in two runs, one across a piece boundary.
    t.delete([("amount", ">=", 36_000.0), ("amount", "<", 39_000.0)])
    t.delete([("amount", ">=", 10_000.0), ("amount", "<", 10_001.0)])
    expected = model.filter(
        pc.invert(
            pc.or_(
                pc.and_(pc.greater_equal(model["amount"], 36_000.0), pc.less(model["amount"], 39_000.0)),
                pc.and_(pc.greater_equal(model["amount"], 10_000.0), pc.less(model["amount"], 10_001.0)),
            )
        )
    )
    for parallelism in (1, 2, 4):
        assert scan(t, parallelism).equals(expected), parallelism
        assert scan(t, parallelism, columns=["customer"]).equals(expected.select(["customer"]))


@pytest.mark.spec("T-2")
@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_a_flipped_byte_read_by_a_piece_is_corruption_not_other_values(tmp_path: Path, parallelism: int) -> None:
    """Pieces fetch whole column chunks, whose checksums are checked: a byte
    flipped in the second half of an uncompressed float column (a change
    that decodes to other values without the check) fails the scan as
    ``PartCorrupted`` however many pieces read the file."""
    store = pds.open_store((tmp_path / "lake").as_uri())
    model = data(0, ROWS, 0)
    t = Table.create(store, "t", data=model, primary_key="id", compression="uncompressed")
    (key,) = [k for k in files(store, "t") if k.endswith(".parquet")]
    path = tmp_path / "lake" / key
    raw = bytearray(path.read_bytes())
    (amount,) = [r for g, c, r in chunk_ranges(bytes(raw)) if (g, c) == (0, 2)]
    at = amount.start + len(amount) * 3 // 4  # a plain page, past the dictionary's fallback
    raw[at] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(PartCorrupted):
        scan(t, parallelism)
