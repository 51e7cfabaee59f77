"""Key ranges cut by Spark's own range partitioning (``repartitionByRange``).

Where no stored part fixes the ranges (a source's first build), Spark can
range-partition the rows by the key columns itself, in the JVM, with no
Python task before the shuffle, provided it orders the keys as pds does
(:func:`ordered_alike`). Each task then applies its
partition as one range (:data:`ALL`), and the driver gives the results
their ranges in partition order (:func:`tiled`); the stitch checks that
they follow each other in key order, so a disagreement fails the update
instead of committing parts out of order.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql import types as st

__all__ = ["ALL", "ordered_alike", "partition_index", "tiled"]

#: Every key: the range such a task applies its partition in.
ALL = json.dumps({"lo": None, "hi": None})


def partition_index() -> int:
    """The running task's partition (0 outside a Spark task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def ordered_alike(spark: st.DataType, arrow: pa.DataType) -> bool:
    """Whether Spark orders values of *spark* as pds orders them once
    conformed to *arrow* (Spark's range partitioning by such columns is
    then pds's key order)."""
    if isinstance(spark, (st.ByteType, st.ShortType, st.IntegerType, st.LongType)):
        return bool(pa.types.is_integer(arrow))
    if isinstance(spark, st.StringType):  # the binary collation only
        return spark == st.StringType() and str(arrow) in ("string", "large_string", "string_view")
    if isinstance(spark, st.DateType):
        return bool(pa.types.is_date(arrow))
    if isinstance(spark, (st.TimestampType, st.TimestampNTZType)):
        return bool(pa.types.is_timestamp(arrow))
    if isinstance(spark, st.BooleanType):
        return bool(pa.types.is_boolean(arrow))
    if isinstance(spark, st.DayTimeIntervalType):
        return bool(pa.types.is_duration(arrow))
    return False


def _first_key(done: dict[str, Any]) -> Any:
    """A result's least key as its files record it: its first content
    part's first key, or (a partition holding only deleted keys, which a
    first build's change feed records) its first update file's; ``None``
    if it wrote nothing."""
    update = done.get("update") or {}
    for files in (done["content"]["parts"], update.get("rows") or [], update.get("deleted") or []):
        if files:
            return files[0]["first_key"]
    return None


def tiled(applied: list[tuple[int, str]]) -> list[str]:
    """The results (``(partition, JSON)``: a ``content`` of ``range`` and
    ``parts``, an ``update``) of tasks that each applied one partition of a
    Spark range partitioning as one range, in their partitions' order (each
    partition's keys precede the next one's), each given the range from its
    first key to the next result's (the first and last unbounded), as the
    stitch takes them. A result that wrote nothing is left out. The stitch
    checks the order: parts out of their range fail the update, they are
    never committed. (A partition's deleted keys may precede its first
    content part's key: its range then starts above them, and its update
    files still follow the previous partition's, which is the order the
    stitched update needs.)"""
    found = []
    for _, meta in sorted(applied, key=lambda a: a[0]):
        done = json.loads(meta)
        if _first_key(done) is not None:
            found.append(done)
    firsts = [_first_key(d) for d in found]
    for i, done in enumerate(found):
        done["content"]["range"] = {"lo": firsts[i] if i else None, "hi": firsts[i + 1] if i + 1 < len(found) else None}
    return [json.dumps(d) for d in found]
