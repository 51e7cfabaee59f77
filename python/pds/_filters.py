"""Exact filter semantics, shared by every engine (pds, ``engine="spark"``, the data source).

A condition ``(column, op, value)`` compares the column with *value* exactly,
as a number line does, whatever the column's type: ``("id", ">=", 1.5)`` on an
integer column keeps 2 and up; ``("u8", "<", 300)`` on ``uint8`` keeps every
non-null row; ``("id", "==", 2.5)`` keeps none. :func:`exact_conditions`
rewrites each condition into ones whose values are exactly of the column's
type, so that no engine ever casts a value lossily:

========================================  ==========================================
condition on an integer column            becomes
========================================  ==========================================
``x >= 1.5``                              ``x >= 2``
``x < 1.5``                               ``x < 2``
``x == 1.5``, ``x == 300`` on ``uint8``   no row: ``x is_null`` and ``x is_not_null``
``x != 2.5``, ``x < 300`` on ``uint8``    every non-null row: ``x is_not_null``
``x in [1, 1.5, 2**70]``                  ``x in [1]``
========================================  ==========================================

Decimals, timestamps (a value finer than the column's unit) and floating
columns (a value the column's precision cannot hold) are rewritten the same
way, at the column's scale, unit or precision. A value of another kind
(``"abc"`` or ``True`` for a number, a number for a string, a naive datetime
for a zoned column) raises ``TypeError``; a ``str`` is read as a date, time
stamp or decimal for such columns (JSON has no such types). Nulls never
satisfy a comparison, ``in`` or ``not in`` (SQL). NaN: ``!=`` keeps every
non-null row of an integer column, the other comparisons none.
"""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Iterable
from fractions import Fraction
from typing import Any, Final, TypeAlias

import pyarrow as pa
import pyarrow.types as pat

__all__ = ["COMPARISONS", "NULL_OPS", "SET_OPS", "core_conditions", "exact_conditions"]

COMPARISONS: Final = ("==", "!=", "<", "<=", ">", ">=")
SET_OPS: Final = ("in", "not in")
NULL_OPS: Final = ("is_null", "is_not_null")

Condition: TypeAlias = tuple[str, str, Any]

_NONE: Final = "none"  # no row matches
_ALL: Final = "all"  # every non-null row matches


def _never(column: str) -> list[Condition]:
    return [(column, "is_null", None), (column, "is_not_null", None)]


def _every(column: str) -> list[Condition]:
    return [(column, "is_not_null", None)]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return _is_int(v) or isinstance(v, float | decimal.Decimal)


#: Decimal exponents beyond which a value is further from 0 (or closer to
#: it) than any value a column holds: float64 reaches 1.8e308 and 4.9e-324,
#: decimals 1e76 at scales up to 76, integers 9.2e18.
_FAR: Final = 400


def _fraction(v: int | float | decimal.Decimal) -> Fraction | str:
    """*v* exactly, or ``"nan"`` / ``"+inf"`` / ``"-inf"``. A decimal whose
    exponent is beyond :data:`_FAR` (``1e999999999``) is taken as the value
    just beyond it with its sign, which compares with every column value as
    *v* does (and costs no billion-digit integer)."""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "+inf" if v > 0 else "-inf"
    if isinstance(v, decimal.Decimal):
        if v.is_nan():
            return "nan"
        if v.is_infinite():
            return "+inf" if v > 0 else "-inf"
        if v and abs(v.adjusted()) > _FAR:
            sign = -1 if v < 0 else 1
            far = 10 ** (_FAR + 1)
            return Fraction(sign * far) if v.adjusted() > 0 else Fraction(sign, far)
    return Fraction(v)


def _incompatible(column: str, t: pa.DataType, value: object) -> TypeError:
    return TypeError(
        f"filter on {column!r}: a {type(value).__name__} value ({value!r}) does not compare with a {t} column"
    )


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pat.is_dictionary(t) else t


def _parse_text(column: str, t: pa.DataType, value: str) -> object:
    """A date, time stamp or decimal written as text, read exactly (at
    microseconds for time stamps, any scale for decimals: the comparison
    then rounds by rule, never the parse)."""
    try:
        if pat.is_decimal(t):
            return decimal.Decimal(value.strip())
        if pat.is_timestamp(t):
            return pa.array([value]).cast(pa.timestamp("us", tz=t.tz))[0].as_py()
        parsed: object = pa.array([value]).cast(t)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, decimal.InvalidOperation) as exc:
        raise TypeError(f"filter on {column!r}: cannot read {value!r} as {t}: {exc}") from None
    return parsed


_INT_RANGES: Final = {
    8: (-(2**7), 2**7 - 1),
    16: (-(2**15), 2**15 - 1),
    32: (-(2**31), 2**31 - 1),
    64: (-(2**63), 2**63 - 1),
}


def _int_range(t: pa.DataType) -> tuple[int, int]:
    if pat.is_unsigned_integer(t):
        return 0, 2**t.bit_width - 1
    return _INT_RANGES[t.bit_width]


def _on_integers(op: str, v: Fraction | str, lo: int, hi: int) -> tuple[str, int] | str:
    """``x op v`` for integers x in ``[lo, hi]``: an exact ``(op, int)``, or a constant."""
    if v == "nan":
        return _ALL if op == "!=" else _NONE
    if v in ("+inf", "-inf"):
        above = v == "+inf"  # v lies above every integer
        if op == "==":
            return _NONE
        if op == "!=":
            return _ALL
        return _ALL if (op in ("<", "<=")) == above else _NONE
    assert isinstance(v, Fraction)
    floor, ceil = math.floor(v), math.ceil(v)
    if op == "==":
        return ("==", floor) if floor == v and lo <= floor <= hi else _NONE
    if op == "!=":
        return ("!=", floor) if floor == v and lo <= floor <= hi else _ALL
    if op == "<":  # x < v  <=>  x < ceil(v)
        return _ALL if ceil > hi else _NONE if ceil <= lo else ("<", ceil)
    if op == "<=":  # x <= floor(v)
        return _ALL if floor >= hi else _NONE if floor < lo else ("<=", floor)
    if op == ">":  # x > floor(v)
        return _NONE if floor >= hi else _ALL if floor < lo else (">", floor)
    # x >= ceil(v)
    return _NONE if ceil > hi else _ALL if ceil <= lo else (">=", ceil)


def _units(t: pa.DataType) -> Fraction:
    """Column units per microsecond (Python datetimes hold microseconds)."""
    return {"s": Fraction(1, 10**6), "ms": Fraction(1, 1000), "us": Fraction(1), "ns": Fraction(1000)}[t.unit]


_EPOCH: Final = datetime.datetime(1970, 1, 1)
_EPOCH_UTC: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _micros(value: datetime.datetime) -> int:
    delta = value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)
    return (delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds


def _nearest_float(v: Fraction, t: pa.DataType) -> float:
    """*v* rounded to the float column type *t* (one of the two values of
    *t* around it), or an infinity beyond the type's range."""
    try:
        f = float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf
    if pat.is_float32(t):
        import numpy as np

        with np.errstate(over="ignore"):
            f = float(np.float32(f))
    return f


def _next_float(f: float, toward: float, t: pa.DataType) -> float:
    """The value of the float type *t* next to *f* toward *toward*."""
    if pat.is_float32(t):
        import numpy as np

        return float(np.nextafter(np.float32(f), np.float32(toward)))
    return math.nextafter(f, toward)


def _float_bounds(v: Fraction, t: pa.DataType) -> tuple[float, float]:
    """The column values just below and just above *v* (a value the column cannot hold)."""
    f = _nearest_float(v, t)
    if math.isinf(f):  # beyond the largest finite value of t
        largest = _next_float(math.inf, 0.0, t)
        return (largest, math.inf) if f > 0 else (-math.inf, -largest)
    lower = f if Fraction(f) < v else _next_float(f, -math.inf, t)
    upper = f if Fraction(f) > v else _next_float(f, math.inf, t)
    return lower, upper


def _representable_float(v: Fraction, t: pa.DataType) -> float | None:
    f = _nearest_float(v, t)
    return f if not math.isinf(f) and Fraction(f) == v else None


def _comparison(column: str, t: pa.DataType, op: str, value: object) -> tuple[str, object] | str:
    """One comparison on a column of value type *t*: exact ``(op, value)`` or a constant."""
    if value is None:
        raise ValueError(f"filter on {column!r}: compare with None using 'is_null' / 'is_not_null', not {op!r}")
    if isinstance(value, str) and (pat.is_temporal(t) or pat.is_decimal(t)):
        value = _parse_text(column, t, value)
    if pat.is_integer(t) or pat.is_decimal(t):
        if not _is_number(value):
            raise _incompatible(column, t, value)
        v = _fraction(value)  # type: ignore[arg-type]
        if pat.is_integer(t):
            lo, hi = _int_range(t)
            out = _on_integers(op, v, lo, hi)
            return out if isinstance(out, str) else (out[0], out[1])
        scale = Fraction(10) ** t.scale
        bound = 10**t.precision - 1
        out = _on_integers(op, v * scale if isinstance(v, Fraction) else v, -bound, bound)
        if isinstance(out, str):
            return out
        return out[0], decimal.Decimal(out[1]).scaleb(-t.scale)
    if pat.is_floating(t):
        if not _is_number(value):
            raise _incompatible(column, t, value)
        v = _fraction(value)  # type: ignore[arg-type]
        if isinstance(v, str):
            return op, float(v)  # NaN and infinities: IEEE semantics, left to the engines
        exact = _representable_float(v, t)
        if exact is not None:
            return op, exact
        lower, upper = _float_bounds(v, t)
        if op == "==":
            return _NONE
        if op == "!=":
            return _ALL
        # No column value equals v: "< v" is "<= the value below", "> v" is ">= the one above".
        return ("<=", lower) if op in ("<", "<=") else (">=", upper)
    if pat.is_timestamp(t):
        if not isinstance(value, datetime.datetime):
            raise _incompatible(column, t, value)
        if (value.tzinfo is None) != (t.tz is None):
            raise TypeError(
                f"filter on {column!r}: a {'naive' if value.tzinfo is None else 'zoned'} datetime does not compare "
                f"with a {t} column"
            )
        out = _on_integers(op, Fraction(_micros(value)) * _units(t), -(2**63), 2**63 - 1)
        if isinstance(out, str):
            return out
        return out[0], pa.scalar(out[1], pa.int64()).cast(t).as_py()
    if pat.is_date(t):
        if isinstance(value, datetime.datetime) or not isinstance(value, datetime.date):
            raise _incompatible(column, t, value)
        return op, value
    if pat.is_boolean(t):
        if not isinstance(value, bool):
            raise _incompatible(column, t, value)
        return op, value
    if pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t):
        if not isinstance(value, str):
            raise _incompatible(column, t, value)
        return op, value
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_binary_view(t) or pat.is_fixed_size_binary(t):
        if not isinstance(value, bytes | bytearray):
            raise _incompatible(column, t, value)
        return op, bytes(value)
    try:
        scalar = pa.scalar(value, type=t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        raise _incompatible(column, t, value) from None
    if scalar.as_py() != value:
        raise _incompatible(column, t, value)
    return op, value


def exact_conditions(column: str, op: str, value: object, schema: pa.Schema) -> list[Condition]:
    """Rewrite ``(column, op, value)`` into conditions whose values are
    exactly of the column's type (see the module docs). Their AND is the
    original condition.

    Raises:
        TypeError: the value's kind does not compare with the column's type.
        ValueError: an unknown column or op, or a malformed value.
    """
    if schema.get_field_index(column) < 0:
        raise ValueError(f"filter on unknown column {column!r}; the dataset has {schema.names}")
    t = _value_type(schema.field(column).type)
    if op in NULL_OPS:
        return [(column, op, None)]
    if op in COMPARISONS:
        out = _comparison(column, t, op, value)
        if out == _NONE:
            return _never(column)
        if out == _ALL:
            return _every(column)
        assert isinstance(out, tuple)
        return [(column, out[0], out[1])]
    if op in SET_OPS:
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise ValueError(f"filter on {column!r}: {op!r} needs a list of values, got {value!r}")
        kept: list[object] = []
        for v in value:
            if v is None:
                if op == "not in":
                    return _never(column)  # SQL: x NOT IN (..., NULL) is never true
                continue  # a null never equals anything
            one = _comparison(column, t, "==", v)
            if isinstance(one, tuple):
                kept.append(one[1])
        if op == "in":
            return [(column, "in", kept)] if kept else _never(column)
        return [(column, "not in", kept)] if kept else _every(column)
    raise ValueError(f"unknown filter operator {op!r}; use {', '.join((*COMPARISONS, *SET_OPS, *NULL_OPS))}")


def core_conditions(filters: Iterable[Condition], schema: pa.Schema) -> list[tuple[str, str, pa.Array | None]]:
    """*filters* made exact (:func:`exact_conditions`), with their values as
    Arrow arrays of the column's value type, as the Rust core takes them.

    Raises:
        TypeError / ValueError: as :func:`exact_conditions`.
    """
    out: list[tuple[str, str, pa.Array | None]] = []
    for column, op, value in filters:
        for c, o, v in exact_conditions(column, op, value, schema):
            t = _value_type(schema.field(c).type)
            if o in NULL_OPS:
                out.append((c, o, None))
            elif o in SET_OPS:
                out.append((c, o, pa.array(list(v), type=t)))
            else:
                out.append((c, o, pa.array([v], type=t)))
    return out
