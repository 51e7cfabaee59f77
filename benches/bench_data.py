"""The benchmark's deterministic data: one table, or a lazy stream of any size.

Columns (the issue's mix): ``id`` int64 (0, 1, 2, ... in order, so row-group
statistics can prune a range filter), ``ts`` timestamp[us], ``category`` a
string with 50 values, ``value`` float64, ``uid`` a 32-character hex string
(high cardinality, close to incompressible).

Every batch is a pure function of (seed, first row, row count): the same
arguments give the same bytes on any machine with the same numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

__all__ = [
    "CATEGORIES",
    "NUMERIC_SCHEMA",
    "SCHEMA",
    "STREAM_BATCH_ROWS",
    "make_batch",
    "make_table",
    "numeric_batch",
    "stream_reader",
    "stream_rows_for",
]

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us")),
        ("category", pa.string()),
        ("value", pa.float64()),
        ("uid", pa.string()),
    ]
)

# The "numeric" stream: four random columns, 32 bytes a row, no dictionary to
# build and nothing to compress (a write's memory at its plainest).
NUMERIC_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.float64()), ("d", pa.float64())])
# Rows per generated batch of each stream.
STREAM_BATCH_ROWS = {"mixed": 65_536, "numeric": 1 << 20}

CATEGORIES = pa.array([f"category-{i:02d}" for i in range(50)], pa.string())
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_UID_CHARS = 32
_EPOCH_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z


def _uids(rng: np.random.Generator, rows: int) -> pa.Array:
    """*rows* random 32-char lowercase hex strings, built straight into Arrow buffers."""
    raw = np.frombuffer(rng.bytes(rows * _UID_CHARS // 2), dtype=np.uint8)
    text = np.empty(rows * _UID_CHARS, dtype=np.uint8)
    text[0::2] = _HEX[raw >> 4]
    text[1::2] = _HEX[raw & 0x0F]
    offsets = np.arange(0, rows * _UID_CHARS + 1, _UID_CHARS, dtype=np.int32)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(text))


def make_batch(start: int, rows: int, seed: int) -> pa.RecordBatch:
    """Rows ``start .. start + rows - 1`` of the data set for *seed*."""
    rng = np.random.default_rng([seed, start, rows])
    ids = np.arange(start, start + rows, dtype=np.int64)
    ts = _EPOCH_US + ids * 250_000 + rng.integers(0, 250_000, rows)
    codes = rng.integers(0, len(CATEGORIES), rows, dtype=np.int32)
    category = pa.DictionaryArray.from_arrays(pa.array(codes), CATEGORIES).cast(pa.string())
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids),
            pa.array(ts, pa.timestamp("us")),
            category,
            pa.array(rng.normal(100.0, 25.0, rows)),
            _uids(rng, rows),
        ],
        schema=SCHEMA,
    )


def make_table(rows: int, seed: int, chunk_rows: int = 1 << 20) -> pa.Table:
    """The whole table of *rows* rows (chunks of *chunk_rows*)."""
    batches = [make_batch(s, min(chunk_rows, rows - s), seed) for s in range(0, rows, chunk_rows)]
    return pa.Table.from_batches(batches, schema=SCHEMA)


def numeric_batch(start: int, rows: int, seed: int) -> pa.RecordBatch:
    """Rows ``start .. start + rows - 1`` of the numeric stream for *seed*."""
    rng = np.random.default_rng([seed, start, rows])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(rng.integers(0, 1 << 62, rows)),
            pa.array(rng.integers(0, 1 << 62, rows)),
            pa.array(rng.random(rows)),
            pa.array(rng.random(rows)),
        ],
        schema=NUMERIC_SCHEMA,
    )


def _stream_kind(data: str) -> tuple[Callable[[int, int, int], pa.RecordBatch], pa.Schema]:
    """The batch maker and schema of stream *data* ("mixed" or "numeric")."""
    return (numeric_batch, NUMERIC_SCHEMA) if data == "numeric" else (make_batch, SCHEMA)


def stream_rows_for(target_bytes: int, seed: int, data: str = "mixed") -> int:
    """How many rows of *data* make about *target_bytes* of Arrow data (measured on one batch)."""
    batch_rows = STREAM_BATCH_ROWS[data]
    sample = _stream_kind(data)[0](0, batch_rows, seed)
    return max(1, round(target_bytes / (int(sample.nbytes) / batch_rows)))


def stream_reader(rows: int, seed: int, data: str = "mixed") -> pa.RecordBatchReader:
    """A RecordBatchReader over *rows* rows of *data* ("mixed": SCHEMA, or
    "numeric"), generated one batch of STREAM_BATCH_ROWS at a time as it is read."""
    make, schema = _stream_kind(data)
    batch_rows = STREAM_BATCH_ROWS[data]

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, rows, batch_rows):
            yield make(start, min(batch_rows, rows - start), seed)

    return pa.RecordBatchReader.from_batches(schema, batches())
