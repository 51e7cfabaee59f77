"""Partition mapping: the rows of a table asset's partitions, as a filter on
its partition column(s) (``partition_expr``).

A time window is ``start <= column < end`` with the bounds in the column's
type: a ``date`` (whole-day windows only), a ``timestamp`` with a time zone
(the instants), a ``timestamp`` without one (the wall-clock time in the
partitions definition's time zone), or a string (the bounds formatted with the
partitions definition's own ``fmt``, which must sort as time does: ISO
formats such as ``%Y-%m-%d`` do). Wall-clock columns (a timestamp without a
time zone, or a string) are refused for windows shorter than a day in a time
zone with daylight saving time: the hour repeated when the clocks go back
would be two partitions with the same bounds. A static or dynamic key is ``column ==
key``, the key parsed as the column's type. Multi-partitions map each
dimension to its column with a dict. Every key is checked against the
column's type before any I/O.
"""

from __future__ import annotations

import datetime
import itertools
import re
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat
from dagster import MultiPartitionKey, MultiPartitionsDefinition, PartitionsDefinition, TimeWindowPartitionsDefinition

__all__ = ["PartitionSlice", "partition_slice"]

Condition = tuple[str, str, Any]


@dataclass(frozen=True)
class PartitionSlice:
    """The rows of some partitions of a table asset.

    ``conditions`` (all must hold) select them, pushed down to the scan.
    ``exact`` is ``True`` when they select those rows and no others;
    otherwise (partitions that are not one rectangle of dimension keys, or
    time windows with gaps) they select more, and ``expression``, which is
    always exact, must be applied too.
    """

    conditions: list[Condition]
    expression: pc.Expression
    exact: bool
    columns: list[str]
    description: str


def _field(schema: pa.Schema, column: object, asset: str) -> pa.Field:
    if not isinstance(column, str):
        raise TypeError(f"asset {asset}: partition_expr must be a column name (str), got {column!r}")
    index = schema.get_field_index(column)
    if index < 0:
        raise ValueError(
            f"asset {asset}: partition_expr names column {column!r}, which the table does not have "
            f"(columns: {', '.join(schema.names)})"
        )
    return schema.field(index)


_ORDER = ("%Y", "%m", "%d", "%H", "%M", "%S", "%f")


def _check_sortable(fmt: str, column: str, asset: str) -> None:
    """A string column compares as text: the format must put the larger
    units first, zero-padded (``%Y-%m-%d``, ``%Y-%m-%d-%H:%M``, ...)."""
    directives = [d for d in re.findall(r"%-?.", fmt) if d != "%%"]
    if not directives or directives != list(_ORDER[: len(directives)]):
        raise ValueError(
            f"asset {asset}: partition column {column!r} is a string, compared as text, and the partitions' "
            f"format {fmt!r} does not sort as time does; use a format with the larger units first "
            "(such as %Y-%m-%d), or a date or timestamp column"
        )


def _time_value(when: datetime.datetime, field: pa.Field, fmt: str, tz: str, asset: str) -> Any:
    """A window bound in the type of *field*."""
    t = field.type
    if pat.is_dictionary(t):
        t = t.value_type
    if pat.is_date(t):
        if (when.hour, when.minute, when.second, when.microsecond) != (0, 0, 0, 0):
            raise ValueError(
                f"asset {asset}: partition column {field.name!r} is a {t}, and a partition window bound "
                f"{when.isoformat()} is not midnight: a date column can hold whole-day partitions only"
            )
        return when.date()
    if pat.is_timestamp(t):
        if t.tz is not None:
            return when
        return when.replace(tzinfo=None)  # wall-clock time in the partitions' time zone
    if pat.is_string(t) or pat.is_large_string(t) or t == pa.string_view():
        _check_sortable(fmt, field.name, asset)
        return when.strftime(fmt)
    raise ValueError(
        f"asset {asset}: partition column {field.name!r} is {t}; time-window partitions need a date, "
        f"timestamp or string column (partitions in time zone {tz})"
    )


def _is_wall_clock(field: pa.Field) -> bool:
    """Whether *field* holds wall-clock times: a timestamp without a time
    zone, or a string (formatted times)."""
    t = field.type.value_type if pat.is_dictionary(field.type) else field.type
    if pat.is_timestamp(t):
        return t.tz is None
    return bool(pat.is_string(t) or pat.is_large_string(t) or t == pa.string_view())


def _check_unambiguous(time: TimeWindowPartitionsDefinition, key: str, field: pa.Field, asset: str) -> None:
    """Refuse sub-daily windows of a time zone with daylight saving time on
    a wall-clock column: when the clocks go back, two windows (the hour
    repeated) have the same wall-clock bounds, so neither's rows can be told
    apart (and one window's bounds are equal: it selects nothing). Refused
    for every partition, not only those at the change, so that a pipeline
    does not fail once a year."""
    if not _is_wall_clock(field):
        return
    window = time.time_window_for_partition_key(key)
    utc = datetime.UTC
    if window.end.astimezone(utc) - window.start.astimezone(utc) >= datetime.timedelta(hours=23):
        return
    tz = str(time.timezone)
    try:
        zone = zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return
    year = window.start.year
    offsets = {datetime.datetime(year, month, 1, tzinfo=zone).utcoffset() for month in range(1, 13)}
    if len(offsets) > 1:
        kind = "a timestamp without a time zone" if pat.is_timestamp(field.type) else "a string"
        raise ValueError(
            f"asset {asset}: partition column {field.name!r} is {kind}, which holds wall-clock times, and the "
            f"partitions are shorter than a day in time zone {tz!r}, which has daylight saving time: when the "
            "clocks go back, two partitions have the same wall-clock bounds, and their rows cannot be told apart. "
            "Use a timestamp column with a time zone (such as pa.timestamp('us', tz='UTC')), or partitions in "
            "UTC; nothing was written"
        )


def _key_value(key: str, field: pa.Field, asset: str, writing: bool) -> Any:
    """A static partition key parsed as the type of *field*."""
    t = field.type.value_type if pat.is_dictionary(field.type) else field.type
    if pat.is_string(t) or pat.is_large_string(t) or t == pa.string_view():
        return key
    try:
        if pat.is_boolean(t):
            if key.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return key.lower() == "true"
        if pat.is_date(t):
            return datetime.date.fromisoformat(key)
        if pat.is_timestamp(t):
            value = datetime.datetime.fromisoformat(key)
            if (value.tzinfo is None) != (t.tz is None):
                raise ValueError("the time zone of the key and the column's disagree")
            return value
        return pa.scalar(key).cast(t).as_py()
    except (ValueError, TypeError, pa.ArrowException) as exc:
        raise ValueError(
            f"asset {asset}: partition key {key!r} does not parse as partition column {field.name!r}'s type "
            f"{t} ({exc}); nothing was {'written' if writing else 'read'}"
        ) from None


def _scalar(value: Any, field: pa.Field) -> pc.Expression:
    t = field.type.value_type if pat.is_dictionary(field.type) else field.type
    return pc.scalar(pa.scalar(value, type=t))


@dataclass
class _Dimension:
    column: str
    field: pa.Field
    time: TimeWindowPartitionsDefinition | None


def _dimensions(
    partitions_def: PartitionsDefinition, partition_expr: object, schema: pa.Schema, asset: str
) -> dict[str | None, _Dimension]:
    """Each dimension's column (``None`` names the only dimension)."""
    if isinstance(partitions_def, MultiPartitionsDefinition):
        if not isinstance(partition_expr, Mapping):
            raise TypeError(
                f"asset {asset} has multi-partitions: partition_expr must be a dict of dimension to column, "
                f"got {partition_expr!r}"
            )
        out: dict[str | None, _Dimension] = {}
        for dim in partitions_def.partitions_defs:
            if dim.name not in partition_expr:
                raise ValueError(f"asset {asset}: partition_expr has no column for partition dimension {dim.name!r}")
            sub = dim.partitions_def
            column = partition_expr[dim.name]
            time = sub if isinstance(sub, TimeWindowPartitionsDefinition) else None
            out[dim.name] = _Dimension(column, _field(schema, column, asset), time)
        return out
    time = partitions_def if isinstance(partitions_def, TimeWindowPartitionsDefinition) else None
    return {None: _Dimension(str(partition_expr), _field(schema, partition_expr, asset), time)}


def partition_slice(
    partitions_def: PartitionsDefinition,
    keys: Sequence[str],
    partition_expr: object,
    schema: pa.Schema,
    asset: str,
    *,
    writing: bool = True,
) -> PartitionSlice:
    """The rows of partitions *keys* of *asset*, whose table has *schema*.

    *writing* is true for a write of the partitions, false for a read.
    Windows shorter than a day on a wall-clock column in a time zone with
    daylight saving time are refused only for a write: a read of a table
    written before that was refused still loads (a window at the clocks
    going back then selects the rows of both repeated hours, or none).

    Raises:
        ValueError: *partition_expr* is missing or names no column, a key
            does not parse as its column's type, or a column's type cannot
            hold the partitions (an integer column for time windows, hourly
            windows on a date column, a string format that does not sort as
            time does, windows shorter than a day in a time zone with
            daylight saving time on a timestamp column without a time zone
            or a string column; only if *writing*). All before any I/O.
        TypeError: *partition_expr* has the wrong shape.
    """
    if partition_expr is None:
        raise ValueError(
            f"asset {asset} is partitioned but has no 'partition_expr' metadata naming its partition column: "
            'set @asset(metadata={"partition_expr": "column"}) (a dict of dimension to column for multi-partitions)'
        )
    if not keys:
        raise ValueError(f"asset {asset}: no partition keys")
    dims = _dimensions(partitions_def, partition_expr, schema, asset)

    def parts(key: str) -> dict[str | None, str]:
        if isinstance(partitions_def, MultiPartitionsDefinition):
            by_dim = key.keys_by_dimension if isinstance(key, MultiPartitionKey) else None
            if by_dim is None:
                by_dim = partitions_def.get_partition_key_from_str(key).keys_by_dimension
            return {dim: value for dim, value in by_dim.items()}
        return {None: key}

    per_key = [parts(k) for k in keys]
    conditions: list[Condition] = []
    exact = True
    # One expression per key, for exactness; typed values per (dimension, key).
    key_exprs: list[pc.Expression] = []
    typed: dict[tuple[str | None, str], tuple[Any, Any] | Any] = {}
    for name, dim in dims.items():
        dim_keys = sorted({p[name] for p in per_key})
        if dim.time is not None:
            if writing:
                _check_unambiguous(dim.time, dim_keys[0], dim.field, asset)
            windows = sorted(dim.time.time_window_for_partition_key(k) for k in dim_keys)
            for k in dim_keys:
                w = dim.time.time_window_for_partition_key(k)
                typed[(name, k)] = (
                    _time_value(w.start, dim.field, dim.time.fmt, str(dim.time.timezone), asset),
                    _time_value(w.end, dim.field, dim.time.fmt, str(dim.time.timezone), asset),
                )
            lo = _time_value(windows[0].start, dim.field, dim.time.fmt, str(dim.time.timezone), asset)
            hi = _time_value(windows[-1].end, dim.field, dim.time.fmt, str(dim.time.timezone), asset)
            conditions += [(dim.column, ">=", lo), (dim.column, "<", hi)]
            if any(a.end != b.start for a, b in itertools.pairwise(windows)):
                exact = False
        else:
            values = [_key_value(k, dim.field, asset, writing) for k in dim_keys]
            typed.update({(name, k): v for k, v in zip(dim_keys, values, strict=True)})
            conditions.append((dim.column, "==", values[0]) if len(values) == 1 else (dim.column, "in", values))
    sizes = [len({p[name] for p in per_key}) for name in dims]
    if len(set(map(tuple, (sorted(p.items(), key=lambda i: str(i[0])) for p in per_key)))) != reduce(
        lambda a, b: a * b, sizes, 1
    ):
        exact = False
    for p in per_key:
        terms = []
        for name, dim in dims.items():
            value = typed[(name, p[name])]
            col = pc.field(dim.column)
            if dim.time is not None:
                lo, hi = value
                terms.append((col >= _scalar(lo, dim.field)) & (col < _scalar(hi, dim.field)))
            else:
                terms.append(col == _scalar(value, dim.field))
        key_exprs.append(reduce(lambda a, b: a & b, terms))
    expression = reduce(lambda a, b: a | b, key_exprs)
    shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    return PartitionSlice(
        conditions=conditions,
        expression=expression,
        exact=exact,
        columns=[d.column for d in dims.values()],
        description=f"partition{'s' if len(keys) > 1 else ''} {shown}",
    )
