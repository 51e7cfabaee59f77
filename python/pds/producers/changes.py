"""``pds.Changes``: what an update does to a source, or what a version did
to a stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = ["Changes", "as_arrow", "as_table"]


def as_table(data: Any, what: str) -> pa.Table | None:
    """*data* as a ``pyarrow.Table`` (``None`` stays ``None``): a Table, a
    RecordBatch, a RecordBatchReader or any object exporting the Arrow
    PyCapsule stream interface (polars, DuckDB, ...)."""
    if data is None:
        return None
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data).read_all()
    raise TypeError(
        f"{what} must be Arrow data (a pyarrow Table or anything with __arrow_c_stream__), got {type(data).__name__}"
    )


def as_arrow(data: Any, what: str) -> pa.Table | pa.RecordBatchReader | None:
    """Like :func:`as_table`, but a stream stays a stream (read once, as it
    is consumed): a RecordBatchReader, or an object with only
    ``__arrow_c_stream__`` (not a table or batch)."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if data is not None and not isinstance(data, (pa.Table, pa.RecordBatch)) and hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    return as_table(data, what)


def _spark_frame(data: Any) -> bool:
    """Whether *data* is a Spark DataFrame (classic or Connect), without
    importing PySpark."""
    return type(data).__module__.split(".")[0] == "pyspark" and hasattr(data, "mapInArrow")


@dataclass(frozen=True, init=False)
class Changes:
    """Changes to the keys of a source (the seed's update pairs).

    *upserts* holds the new rows: key and value columns. Every key that
    appears there loses all of its earlier rows and gets exactly these. A
    stream (``RecordBatchReader``) is read once, sorted within the
    pipeline's sort budget: it need not fit in memory.
    *deletes* holds keys (the key columns, and only those: another column
    is a ``SchemaMismatch`` naming it when the update checks the changes)
    that lose all their rows. A key may be upserted or deleted, not both
    (``ValueError``). Keys not
    mentioned keep their rows.

    A Spark DataFrame is kept as it is, unread: ``pds.spark.update_pipeline``
    reads it on the executors (``Pipeline.update`` reads it on the driver,
    through its Arrow stream).

    ``Pipeline.changes`` returns the same type: for a stage's version, the
    upserts are every row of each target key the version changed, and the
    deletes the keys it left with no row.
    """

    upserts: pa.Table | pa.RecordBatchReader | None
    deletes: pa.Table | None

    def __init__(self, upserts: Any = None, deletes: Any = None) -> None:
        object.__setattr__(self, "upserts", upserts if _spark_frame(upserts) else as_arrow(upserts, "upserts"))
        object.__setattr__(self, "deletes", deletes if _spark_frame(deletes) else as_table(deletes, "deletes"))

    def __repr__(self) -> str:
        def rows(t: pa.Table | pa.RecordBatchReader | None) -> str:
            return "0" if t is None else "a stream of" if isinstance(t, pa.RecordBatchReader) else str(t.num_rows)

        return f"Changes(upserts={rows(self.upserts)} rows, deletes={rows(self.deletes)} keys)"
