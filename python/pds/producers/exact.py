"""Exact conversions between Python values, Arrow columns and a declared
column type: what a row-form ``Produce`` is handed and what it emits, what a
batched ``Produce`` returns, and the changes given to a source.

One rule for every path: a value is accepted only if the declared type
holds it exactly. Accepted: the same type; integers of any width (range
checked); an integer into a float column when the float holds it exactly;
a float into an integer column when it has no fractional part and is in
range; any float into a float column (rounded to a float32 column's
precision, but a finite value never becomes infinite); an integer or a
decimal into a decimal column without losing digits; str and large str;
bytes and large bytes (a fixed-size binary column checks the length);
date32 and date64 (whole days); timestamps, times and durations between
units without losing precision (a timestamp with a time zone only into a
column with one, a naive one only into a naive column); nulls into any
column; lists, structs (the same field names) and maps, element by
element under this rule. Refused: everything else, in particular a bool
into a number column (or a number into a bool column), str into bytes and
bytes into str, a date into a timestamp column and back, a number into a
temporal column, and text that looks like a number.

Temporal values handed to a row-form ``Produce`` are the same Python types
whether pandas is installed or not: ``datetime.datetime`` (with its time
zone if the column has one), ``datetime.time`` and ``datetime.timedelta``
for every unit. Only a nanosecond-unit value that is not a whole
microsecond (which those types cannot hold) comes as a ``pandas.Timestamp``
or ``pandas.Timedelta`` (subclasses of ``datetime``/``timedelta``; pandas is
needed for them, else :class:`Unrepresentable`); a ``time64[ns]`` value with
nanoseconds has no exact Python type and is :class:`Unrepresentable`.
"""

from __future__ import annotations

import datetime
import importlib.util
import operator
import zoneinfo
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Inexact", "Unrepresentable", "conform", "from_python", "needs_care", "show", "to_python"]


class Inexact(ValueError):
    """A value the declared type cannot hold exactly (``value`` and ``reason``)."""

    def __init__(self, value: Any, reason: str) -> None:
        super().__init__(f"value {show(value)}: {reason}")
        self.value = value
        self.reason = reason


class Unrepresentable(ValueError):
    """A stored value that has no exact Python value to hand to ``Produce``."""


def show(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


# -- type kinds --------------------------------------------------------------------


def _kind(t: pa.DataType) -> str:
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "str"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        return "bytes"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_duration(t):
        return "duration"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "list"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_dictionary(t):
        return "dictionary"
    return "other"


_SAME_KIND = {"bool", "int", "float", "decimal", "str", "bytes", "date", "time", "duration"}
_ACROSS = {("int", "float"), ("float", "int"), ("int", "decimal")}


def _refusal(src: pa.DataType, dst: pa.DataType) -> str | None:
    """Why no value of *src* can go exactly into *dst*, or ``None`` if some
    can (the values are then checked by a safe cast)."""
    if src.equals(dst):
        return None
    a, b = _kind(src), _kind(dst)
    if a == "null":
        return None
    if a == "dictionary":
        return _refusal(src.value_type, dst)
    if b == "dictionary":
        return _refusal(src, dst.value_type)
    if a == b and a in _SAME_KIND:
        return None
    if (a, b) in _ACROSS:
        return None
    if a == b == "timestamp":
        if (src.tz is None) != (dst.tz is None):
            return "a naive timestamp and one with a time zone are not the same instant type"
        return None
    if a == b == "list":
        return _refusal(src.value_type, dst.value_type)
    if a == b == "map":
        return _refusal(src.key_type, dst.key_type) or _refusal(src.item_type, dst.item_type)
    if a == b == "struct":
        names_a = sorted(src.field(i).name for i in range(src.num_fields))
        names_b = sorted(dst.field(i).name for i in range(dst.num_fields))
        if names_a != names_b:
            return f"struct fields {names_a} are not {names_b}"
        for i in range(dst.num_fields):
            f = dst.field(i)
            why = _refusal(src.field(src.get_field_index(f.name)).type, f.type)
            if why:
                return f"field {f.name!r}: {why}"
        return None
    return f"a {src} value is not of type {dst}"


def _first_value(arr: pa.Array) -> Any:
    valid = arr.drop_null() if arr.null_count else arr
    return to_python(valid.slice(0, 1))[0] if len(valid) else None


def _cast(arr: pa.Array, dst: pa.DataType) -> pa.Array:
    src = arr.type
    if pa.types.is_dictionary(src):
        return _cast(arr.dictionary_decode(), dst)
    if pa.types.is_dictionary(dst):
        return _cast(arr, dst.value_type).dictionary_encode().cast(dst)
    if _kind(src) == "int" and _kind(dst) == "decimal":
        # Arrow casts an integer only to a decimal wide enough for any of
        # its values; the safe cast to the declared one checks each value.
        wide = pa.decimal256(76, dst.scale) if dst.scale <= 56 else None
        if wide is None:
            raise pa.ArrowInvalid(f"no exact path from {src} to {dst}")
        return arr.cast(wide).cast(dst)
    out = arr.cast(dst)
    if _kind(src) == "float" and _kind(dst) == "float" and dst.bit_width < src.bit_width:
        grew = pc.and_(pc.is_inf(out), pc.invert(pc.is_inf(arr)))
        if pc.any(grew).as_py():
            raise pa.ArrowInvalid(f"a finite value does not fit in {dst}")
    return out


def _one_value(one: pa.Array) -> Any:
    """The value of the one-value array *one*, to name it: as Python has it,
    or as Arrow shows it where Python has no such value (an instant past
    year 9999 in UTC, say)."""
    try:
        return to_python(one)[0]
    except (OverflowError, ValueError):
        return one[0]


def conform(arr: pa.Array | pa.ChunkedArray, dst: pa.DataType) -> pa.Array:
    """*arr* as type *dst*, exactly (see the module docs); :class:`Inexact`
    naming the first value that does not fit."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if arr.type.equals(dst):
        return arr
    why = _refusal(arr.type, dst)
    if why is not None:
        raise Inexact(_first_value(arr), why)
    try:
        return _cast(arr, dst)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError) as e:
        # Find the first value that does not fit, to name it.
        for i in range(len(arr)):
            one = arr.slice(i, 1)
            try:
                _cast(one, dst)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
                raise Inexact(_one_value(one), f"does not fit exactly in {dst}: {e}") from e
        raise Inexact(_first_value(arr), f"does not fit exactly in {dst}: {e}") from e


# -- Python values -> Arrow ----------------------------------------------------------


def _is_sequence(v: Any) -> bool:
    return isinstance(v, (list, tuple)) or (hasattr(v, "tolist") and hasattr(v, "ndim") and v.ndim == 1)


_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _td_us(d: datetime.timedelta) -> int:
    return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds


def _temporal_ns_or_us(values: list[Any], t: pa.DataType) -> pa.Array:
    """Timestamp, duration and time values as exact integers: microseconds
    where every value is whole microseconds, else nanoseconds; then the
    safe cast to *t*'s unit checks that nothing is lost."""
    kind = _kind(t)
    us: list[int | None] = []
    extra_ns: list[int] = []  # per value: nanoseconds beyond the microsecond
    for v in values:
        if v is None or v != v:  # None, or pandas.NaT
            us.append(None)
            extra_ns.append(0)
            continue
        if kind == "timestamp":
            if not isinstance(v, datetime.datetime):
                raise Inexact(v, f"a {t} column takes datetime.datetime (or pandas.Timestamp) values")
            aware = v.tzinfo is not None and v.utcoffset() is not None
            if aware != (t.tz is not None):
                raise Inexact(
                    v,
                    f"a {t} column takes {'time-zone aware' if t.tz else 'naive'} datetimes",
                )
            value = getattr(v, "value", None)  # pandas.Timestamp: exact nanoseconds since the epoch
            if isinstance(value, int) and not isinstance(value, bool):
                us.append(value // 1000)
                extra_ns.append(value % 1000)
                continue
            base = _EPOCH_UTC if aware else _EPOCH
            us.append(_td_us(v - base))
            extra_ns.append(0)
        elif kind == "duration":
            if not isinstance(v, datetime.timedelta):
                raise Inexact(v, f"a {t} column takes datetime.timedelta (or pandas.Timedelta) values")
            value = getattr(v, "value", None)
            if isinstance(value, int) and not isinstance(value, bool):
                us.append(value // 1000)
                extra_ns.append(value % 1000)
                continue
            us.append(_td_us(v))
            extra_ns.append(0)
        else:  # time
            if not isinstance(v, datetime.time):
                raise Inexact(v, f"a {t} column takes datetime.time values")
            if v.tzinfo is not None:
                raise Inexact(v, f"a {t} column holds no time zone")
            us.append(((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond)
            extra_ns.append(0)
    if kind == "timestamp":
        as_us, as_ns = pa.timestamp("us", t.tz), pa.timestamp("ns", t.tz)
    elif kind == "duration":
        as_us, as_ns = pa.duration("us"), pa.duration("ns")
    else:
        as_us, as_ns = pa.time64("us"), pa.time64("ns")
    try:
        if any(extra_ns):
            ns_vals = [None if u is None else u * 1000 + e for u, e in zip(us, extra_ns, strict=True)]
            arr = pa.array(ns_vals, pa.int64()).cast(as_ns)
        else:
            arr = pa.array(us, pa.int64()).cast(as_us)
    except (pa.ArrowInvalid, OverflowError) as e:
        for v, u in zip(values, us, strict=True):
            if u is not None and not -(2**63) <= u * (1000 if any(extra_ns) else 1) < 2**63:
                raise Inexact(v, f"out of the range of {t}") from e
        raise Inexact(values[0], f"out of the range of {t}: {e}") from e
    return arr


_DATETIMES = frozenset({datetime.datetime, type(None)})
_tzinfo_of = operator.attrgetter("tzinfo")


def _plain_datetimes(values: list[Any], t: pa.DataType) -> pa.Array | None:
    """Timestamp values as a ``timestamp('us', t.tz)`` array in bulk where
    every value is a plain ``datetime.datetime`` (or ``None``) that is naive
    for a naive column, or carries a ``zoneinfo``/``timezone`` zone (which
    always has an offset) for a zoned one; else ``None``: the careful path
    (pandas values, other zones, a mismatch to name)."""
    if not set(map(type, values)) <= _DATETIMES:
        return None
    zones = set(map(_tzinfo_of, filter(None, values)))
    if t.tz is None:
        if zones - {None}:
            return None
    elif not all(isinstance(z, (zoneinfo.ZoneInfo, datetime.timezone)) for z in zones):
        return None
    return pa.array(values, pa.timestamp("us", t.tz))


def from_python(values: list[Any], t: pa.DataType) -> pa.Array:
    """*values* (Python objects) as an array of type *t*, exactly (see the
    module docs); :class:`Inexact` naming the first value that is not."""
    kind = _kind(t)
    if kind == "dictionary":
        return conform(from_python(values, t.value_type), t)
    if kind in ("timestamp", "duration", "time"):
        fast = _plain_datetimes(values, t) if kind == "timestamp" else None
        return conform(fast if fast is not None else _temporal_ns_or_us(values, t), t)
    if kind == "list":
        mask: list[bool] = []
        offsets: list[int] = [0]
        flat: list[Any] = []
        for v in values:
            if v is None:
                mask.append(True)
            elif _is_sequence(v):
                seq = v.tolist() if not isinstance(v, (list, tuple)) else v
                if pa.types.is_fixed_size_list(t) and len(seq) != t.list_size:
                    raise Inexact(v, f"a {t} value holds {t.list_size} items, not {len(seq)}")
                flat.extend(seq)
                mask.append(False)
            else:
                raise Inexact(v, f"a {t} value is a list or tuple")
            offsets.append(len(flat))
        child = from_python(flat, t.value_type)
        m = pa.array(mask, pa.bool_()) if any(mask) else None
        if pa.types.is_fixed_size_list(t):
            if m is not None:  # a null list still takes list_size (null) items
                child_vals: list[Any] = []
                it = iter(to_python(child))
                for is_null in mask:
                    child_vals.extend([None] * t.list_size if is_null else [next(it) for _ in range(t.list_size)])
                child = from_python(child_vals, t.value_type)
            return pa.FixedSizeListArray.from_arrays(child, type=t, mask=m)
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        off = pa.array(offsets, pa.int64() if cls is pa.LargeListArray else pa.int32())
        return cls.from_arrays(off, child, type=t, mask=m)
    if kind == "map":
        mask, offsets = [], [0]
        keys: list[Any] = []
        items: list[Any] = []
        for v in values:
            if v is None:
                mask.append(True)
            else:
                pairs = list(v.items()) if isinstance(v, Mapping) else v if _is_sequence(v) else None
                if pairs is None or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
                    raise Inexact(v, f"a {t} value is a dict or a list of (key, item) pairs")
                for k, i in pairs:
                    if k is None:
                        raise Inexact(v, "a map key is never null")
                    keys.append(k)
                    items.append(i)
                mask.append(False)
            offsets.append(len(keys))
        return pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()),
            from_python(keys, t.key_type),
            from_python(items, t.item_type),
            type=t,
            mask=pa.array(mask, pa.bool_()) if any(mask) else None,
        )
    if kind == "struct":
        names = [t.field(i).name for i in range(t.num_fields)]
        wanted = set(names)
        mask = []
        for v in values:
            if v is None:
                mask.append(True)
                continue
            if not isinstance(v, Mapping) or set(v.keys()) != wanted:
                raise Inexact(v, f"a {t} value is a dict of exactly the fields {names}")
            mask.append(False)
        children = [
            from_python([None if v is None else v[n] for v in values], t.field(i).type) for i, n in enumerate(names)
        ]
        return pa.StructArray.from_arrays(
            children, fields=list(t), mask=pa.array(mask, pa.bool_()) if any(mask) else None
        )
    if kind == "decimal":
        # Arrow's conversion takes ints and Decimals only, never rounding.
        for v in values:
            if v is not None and (isinstance(v, (bool, float)) or not isinstance(v, (int, _decimal_type()))):
                raise Inexact(v, f"a {t} column takes int or decimal.Decimal values")
        try:
            return pa.array(values, type=t)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            raise Inexact(_first_failing(values, t), f"does not fit exactly in {t}: {e}") from e
    # Scalars: Arrow infers each value's own type, then the exact cast.
    try:
        arr = pa.array(values)
    except OverflowError as e:
        # Inference stops at int64; Python ints convert exactly (range
        # checked) into an unsigned column.
        if kind == "int" and all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values):
            try:
                return pa.array(values, type=t)
            except (pa.ArrowInvalid, OverflowError) as e2:
                raise Inexact(_first_failing(values, t), f"is out of the range of {t} ({e2})") from e2
        raise Inexact(_first_failing(values, t), f"is not of type {t} ({e})") from e
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise Inexact(_first_failing(values, t), f"is not of type {t} ({e})") from e
    if _kind(arr.type) in ("list", "struct", "map") and kind not in ("list", "struct", "map"):
        raise Inexact(_first_value_py(values), f"is not of type {t}")
    return conform(arr, t)


def _decimal_type() -> type:
    import decimal

    return decimal.Decimal


def _first_value_py(values: list[Any]) -> Any:
    return next((v for v in values if v is not None), None)


def _first_failing(values: list[Any], t: pa.DataType) -> Any:
    """The first value that does not convert alone (the first value of
    another Python type than the first if each converts alone)."""
    present = [v for v in values if v is not None]
    if len(present) <= 1:
        return present[0] if present else None
    for v in present:
        try:
            from_python([v], t)
        except Inexact:
            return v
    first = _first_value_py(values)
    return next((v for v in values if v is not None and type(v) is not type(first)), first)


# -- Arrow -> Python values -----------------------------------------------------------


def _has_ns(t: pa.DataType) -> bool:
    k = _kind(t)
    if k in ("timestamp", "time", "duration"):
        return bool(t.unit == "ns")
    if k == "list":
        return _has_ns(t.value_type)
    if k == "map":
        return _has_ns(t.key_type) or _has_ns(t.item_type)
    if k == "struct":
        return any(_has_ns(t.field(i).type) for i in range(t.num_fields))
    if k == "dictionary":
        return _has_ns(t.value_type)
    return False


def _ns_leaf(arr: pa.Array) -> list[Any]:
    t = arr.type
    k = _kind(t)
    us = pa.timestamp("us", t.tz) if k == "timestamp" else pa.duration("us") if k == "duration" else pa.time64("us")
    try:
        exact = arr.cast(us)
    except pa.ArrowInvalid:
        pass
    else:
        return to_python(exact)
    coarse = to_python(arr.cast(us, safe=False))
    ns = arr.cast(pa.int64()).to_pylist()
    for i, n in enumerate(ns):
        if n is None or n % 1000 == 0:
            continue
        if k == "time":
            raise Unrepresentable(
                f"the {t} value {n} ns past midnight has nanoseconds, which datetime.time cannot hold; "
                "declare the column time64('us') or keep it as an int64 of nanoseconds"
            )
        try:
            import pandas as pd  # type: ignore[import-untyped]
        except ImportError:
            raise Unrepresentable(
                f"the {t} value {n} has nanoseconds, which datetime cannot hold: "
                f"it is handed to Produce as a pandas.{'Timestamp' if k == 'timestamp' else 'Timedelta'}, "
                "and pandas is not installed"
            ) from None
        coarse[i] = pd.Timestamp(n, unit="ns", tz=t.tz) if k == "timestamp" else pd.Timedelta(n, unit="ns")
    return list(coarse)


# -- fast leaves: the values ``to_pylist`` gives, without a Scalar per value --------

#: Kinds whose ``to_pylist`` is already fast (no Scalar per value).
_PLAIN_KINDS = frozenset({"null", "bool", "int", "float", "str", "bytes"})

#: numpy (optional for pyarrow >= 16) builds the temporal values in bulk.
_HAVE_NUMPY = importlib.util.find_spec("numpy") is not None
_NEEDS_NUMPY = frozenset({"date", "timestamp", "duration", "time"})
_US = {"s": 1_000_000, "ms": 1_000, "us": 1}
#: datetime's range in microseconds since the epoch.
_DT_MIN_US = -62_135_596_800_000_000
_DT_MAX_US = 253_402_300_799_999_999
#: date's range in days since the epoch.
_DATE_MIN, _DATE_MAX = -719_162, 2_932_896
#: timedelta's range in microseconds.
_TD_MAX_US = 86_400_000_000 * 999_999_999
_DAY_US = 86_400_000_000


def _range(arr: pa.Array, t: pa.DataType) -> tuple[int, int] | None:
    """*arr*'s least and greatest integer values (``None`` if all null)."""
    mm = pc.min_max(arr.view(t)).as_py()
    if mm["min"] is None:
        return None
    return int(mm["min"]), int(mm["max"])


def _fast_leaf(arr: pa.Array, k: str) -> list[Any] | None:
    """``arr.to_pylist()`` for a date32, timestamp, duration, time, decimal
    or dictionary column, built in bulk (numpy, or one string cast), or
    ``None`` where this has no fast path (a value out of the Python type's
    range, a nanosecond unit: left to the careful path, which says why)."""
    t = arr.type
    n = len(arr)
    if k in _NEEDS_NUMPY and not _HAVE_NUMPY:
        return None
    if k == "dictionary":
        return to_python(arr.dictionary_decode())
    if k == "decimal":
        # The string cast writes each value as Decimal's constructor reads
        # it back: the digits and the exponent that to_pylist gives.
        dec = _decimal_type()
        return [None if s is None else dec(s) for s in arr.cast(pa.string()).to_pylist()]
    if k == "date":
        if not pa.types.is_date32(t):
            return None
        r = _range(arr, pa.int32())
        if r is None:
            return [None] * n
        if r[0] < _DATE_MIN or r[1] > _DATE_MAX:
            return None
        return list(arr.to_numpy(zero_copy_only=False).tolist())
    if k not in ("timestamp", "duration", "time") or t.unit not in _US:
        return None
    raw = pa.int32() if t.bit_width == 32 else pa.int64()
    r = _range(arr, raw)
    if r is None:
        return [None] * n
    lo, hi = r[0] * _US[t.unit], r[1] * _US[t.unit]
    if k == "duration":
        if not -_TD_MAX_US <= lo <= hi <= _TD_MAX_US:
            return None
        return list(arr.to_numpy(zero_copy_only=False).astype("timedelta64[us]").tolist())
    if k == "time":
        if not 0 <= lo <= hi < _DAY_US:
            return None
        us = arr.cast(raw).cast(pa.int64())
        if t.unit != "us":
            us = pc.multiply(us, _US[t.unit])
        on_day0 = us.cast(pa.timestamp("us")).to_numpy(zero_copy_only=False).tolist()
        return [None if d is None else d.time() for d in on_day0]
    if not _DT_MIN_US <= lo <= hi <= _DT_MAX_US:
        return None
    naive: list[Any] = arr.to_numpy(zero_copy_only=False).astype("datetime64[us]").tolist()
    if t.tz is None:
        return naive
    # As pyarrow's own conversion, ``d.replace(tzinfo=UTC).astimezone(tz)``
    # (which is this, the offset from UTC being zero), in half the time.
    tz = pa.lib.string_to_tzinfo(t.tz)
    fromutc = tz.fromutc
    return [None if d is None else fromutc(d.replace(tzinfo=tz)) for d in naive]


def to_python(arr: pa.Array | pa.ChunkedArray) -> list[Any]:
    """*arr*'s values as Python objects, the same whether pandas is
    installed or not (see the module docs)."""
    if isinstance(arr, pa.ChunkedArray):
        return [v for c in arr.chunks for v in to_python(c)]
    t = arr.type
    k = _kind(t)
    if k in _PLAIN_KINDS:
        return list(arr.to_pylist())
    try:
        fast = _fast_leaf(arr, k)
    except ImportError:  # numpy found but unusable: the careful path
        fast = None
    if fast is not None:
        return fast
    if not _has_ns(t):
        return list(arr.to_pylist())
    if k in ("timestamp", "time", "duration"):
        return _ns_leaf(arr)
    if k == "dictionary":
        return to_python(arr.dictionary_decode())
    valid = arr.is_valid().to_pylist()
    if k == "struct":
        children = [to_python(c) for c in arr.flatten()]
        names = [t.field(i).name for i in range(t.num_fields)]
        if not children:
            return [{} if ok else None for ok in valid]
        rows = zip(*children, strict=True)
        return [dict(zip(names, row, strict=True)) if ok else None for ok, row in zip(valid, rows, strict=True)]
    if k == "map":  # physically a list of (key, item) structs
        entries = pa.struct([t.key_field, t.item_field])
        arr = arr.view(pa.list_(pa.field("entries", entries, nullable=False)))
    lengths = pc.list_value_length(arr).to_pylist()
    if k == "map":
        keys, items = (to_python(c) for c in pc.list_flatten(arr).flatten())
        flat: list[Any] = list(zip(keys, items, strict=True))
    else:
        flat = to_python(pc.list_flatten(arr))
    out: list[Any] = []
    pos = 0
    for ok, n in zip(valid, lengths, strict=True):
        if not ok:
            out.append(None)
            continue
        out.append(flat[pos : pos + n])
        pos += n
    return out


def needs_care(schema: pa.Schema) -> bool:
    """Whether ``to_pylist`` would hand out other types than :func:`to_python`
    for a column of *schema* (nanosecond temporal values)."""
    return any(_has_ns(f.type) for f in schema)
