"""Row filters as ``(column, op, value)`` tuples: from Spark, to pyarrow, to JSON.

A *filter tuple* names one top-level column, an operator and a value:

==========================  ===============================================
op                          keeps the rows where
==========================  ===============================================
``"=="``, ``"!="``          the column equals / differs from *value*
``"<"``, ``"<="``,          the column compares so with *value*
``">"``, ``">="``
``"in"``                    the column is one of *value* (a list)
``"not in"``                the column is not null and none of *value*
``"is_null"``               the column is null (*value* is ``None``)
``"is_not_null"``           the column is not null (*value* is ``None``)
==========================  ===============================================

A list of tuples is their AND. A null column value never satisfies a
comparison, ``"in"`` or ``"not in"`` (SQL three-valued logic, as in Spark).
Comparisons follow pyarrow.compute, so a NaN is never ``<``, ``>`` or ``==``
anything; :func:`translate_filter` therefore leaves to Spark the Spark
filters whose answer would differ on NaN.

:func:`spark_filters_to_tuples` and :func:`translate_filter` turn PySpark's
pushed-down ``pyspark.sql.datasource.Filter`` objects into tuples, accepting
only those whose result is exactly Spark's; :func:`apply_filter_tuples`
evaluates tuples on a ``pyarrow.Table``. The same tuples are the input for
row-group pruning in the Rust core.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from pds._filters import exact_conditions

__all__ = [
    "COMPARISONS",
    "OPS",
    "FilterTuple",
    "apply_filter_tuples",
    "check_filter_tuples",
    "filter_columns",
    "filter_expression",
    "filters_from_json",
    "filters_to_json",
    "spark_filters_to_tuples",
    "split_for_core",
    "translate_filter",
]

FilterOp: TypeAlias = Literal["==", "!=", "<", "<=", ">", ">=", "in", "not in", "is_null", "is_not_null"]
FilterTuple: TypeAlias = tuple[str, str, Any]
"""``(column, op, value)``; see the module docstring for the operators."""
CoreCondition: TypeAlias = tuple[str, str, pa.Array | None]
"""A condition for the Rust core's ``read_part(..., filter=...)``: values as an Arrow array."""

COMPARISONS: Final = ("==", "!=", "<", "<=", ">", ">=")
"""The binary comparison operators."""
_SETS: Final = ("in", "not in")
_NULLS: Final = ("is_null", "is_not_null")
OPS: Final = (*COMPARISONS, *_SETS, *_NULLS)
"""Every operator a filter tuple may use."""

_BATCH_FILTER_NAMES: Final = {
    "EqualTo": "==",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
}


class _Unsupported(Exception):
    """A value or filter that cannot be evaluated exactly."""


# -- values --------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _scalar(value: object, arrow_type: pa.DataType, *, from_text: bool) -> pa.Scalar:
    """*value* as a scalar of *arrow_type*, exactly, or raise :class:`_Unsupported`.

    Python types must match the column's kind (an int never becomes a bool,
    a float never an int, a naive datetime never a zoned timestamp), and the
    scalar must convert back to *value*, so a lossy conversion (a float the
    column's float32 cannot hold, microseconds a millisecond column drops, a
    decimal with too many digits) is refused rather than rounded. With
    *from_text*, a str for a date, timestamp or decimal column is parsed by
    Arrow's cast (JSON has no such types).
    """
    if value is None:
        raise _Unsupported("a null value never compares true")
    t = arrow_type
    if from_text and isinstance(value, str) and (pat.is_temporal(t) or pat.is_decimal(t)):
        try:
            value = pa.array([value]).cast(t)[0].as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise _Unsupported(f"cannot read {value!r} as {t}: {exc}") from None
    if pat.is_boolean(t):
        ok = isinstance(value, bool)
    elif pat.is_integer(t):
        ok = _is_int(value)
    elif pat.is_floating(t):
        ok = (_is_int(value) or isinstance(value, float)) and not (isinstance(value, float) and math.isnan(value))
    elif pat.is_decimal(t):
        ok = _is_int(value) or isinstance(value, decimal.Decimal)
    elif pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t):
        ok = isinstance(value, str)
    elif pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t) or pat.is_binary_view(t):
        ok = isinstance(value, bytes | bytearray)
        if isinstance(value, bytearray):
            value = bytes(value)
    elif pat.is_date(t):
        ok = type(value) is datetime.date
    elif pat.is_timestamp(t):
        ok = isinstance(value, datetime.datetime) and (value.tzinfo is None) == (t.tz is None)
    else:
        ok = False
    if not ok:
        raise _Unsupported(f"a {type(value).__name__} value does not compare exactly with a {t} column")
    try:
        scalar = pa.scalar(value, type=t)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise _Unsupported(f"{value!r} does not fit a {t} column: {exc}") from None
    if scalar.as_py() != value:
        raise _Unsupported(f"{value!r} is not exactly representable in a {t} column")
    return scalar


def _column_type(schema: pa.Schema, column: object) -> pa.DataType:
    if not isinstance(column, str) or schema.get_field_index(column) < 0:
        raise _Unsupported(f"no column {column!r}")
    return schema.field(column).type


def _expression(column: str, op: str, value: Any, arrow_type: pa.DataType) -> pa.Expression:
    """One exact condition (values of the column's type) as a pyarrow Expression."""
    field = pc.field(column)
    value_type = arrow_type.value_type if pat.is_dictionary(arrow_type) else arrow_type
    if op == "is_null":
        return field.is_null()
    if op == "is_not_null":
        return field.is_valid()
    if op in _SETS:
        member = field.isin(pa.array(value, type=value_type))
        return member if op == "in" else field.is_valid() & ~member
    scalar = pa.scalar(value, type=value_type)
    return {
        "==": field == scalar,
        "!=": field != scalar,
        "<": field < scalar,
        "<=": field <= scalar,
        ">": field > scalar,
        ">=": field >= scalar,
    }[op]


def _normalize(
    item: object, schema: pa.Schema, *, from_text: bool = False, spark: bool = False
) -> tuple[list[FilterTuple], pa.Expression]:
    """Check one tuple against *schema*; return it as exact tuples and as an expression.

    Caller-given tuples are made exact (:func:`pds._filters.exact_conditions`:
    ``x >= 1.5`` on integers is ``x >= 2``, out-of-range values answer by
    rule), so the pds engine, ``engine="spark"`` and the data source agree.
    With *spark* (filters Spark pushes down), a value the column cannot hold
    exactly is refused instead, and so is what pyarrow would answer
    differently from Spark.

    Raises:
        _Unsupported: a malformed tuple, or (with *spark*) an inexact value.
        TypeError: a value of another kind than the column (not with *spark*).
    """
    if not isinstance(item, tuple | list) or len(item) != 3:
        raise _Unsupported(f"a filter must be a (column, op, value) tuple, got {item!r}")
    column, op, value = item
    arrow_type = _column_type(schema, column)
    if op in _NULLS and value is not None:
        raise _Unsupported(f"{op!r} takes no value (use None), got {value!r}")
    if op not in OPS:
        raise _Unsupported(f"unknown filter op {op!r}; expected one of {', '.join(OPS)}")
    if spark:
        if op in COMPARISONS:
            if pat.is_floating(arrow_type) and op in (">", ">="):
                # Spark orders NaN above every number; pyarrow never says NaN > x.
                raise _Unsupported("'>' and '>=' on a floating column differ from Spark on NaN")
            value = _scalar(value, arrow_type, from_text=from_text).as_py()
        elif op in _SETS:
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                raise _Unsupported(f"{op!r} needs a list of values, got {value!r}")
            values = list(value)
            if any(v is None for v in values):
                if op == "not in":
                    raise _Unsupported("'not in' with a null value is never true in SQL")
                values = [v for v in values if v is not None]  # a null never matches
            value = [_scalar(v, arrow_type, from_text=from_text).as_py() for v in values]
        exact = [(column, op, value)]
    else:
        try:
            exact = exact_conditions(column, op, value, schema)
        except ValueError as exc:
            raise _Unsupported(str(exc)) from None
    expr: pa.Expression | None = None
    for c, o, v in exact:
        one = _expression(c, o, v, arrow_type)
        expr = one if expr is None else expr & one
    assert expr is not None
    return exact, expr


# -- Spark -----------------------------------------------------------------------


def _column_of(spark_filter: Any) -> str:
    path = getattr(spark_filter, "attribute", None)
    if not isinstance(path, tuple) or len(path) != 1 or not isinstance(path[0], str):
        raise _Unsupported("only top-level columns are pushed down")
    return path[0]


def _spark_tuple(spark_filter: Any) -> FilterTuple:
    """The tuple for one Spark filter, by class name (PySpark >= 4.1 filters)."""
    kind = type(spark_filter).__name__
    if kind == "Not":
        child = spark_filter.child
        inner = type(child).__name__
        column = _column_of(child)
        if inner == "EqualTo":
            return (column, "!=", child.value)
        if inner == "In":
            return (column, "not in", list(child.value))
        if inner == "IsNull":
            return (column, "is_not_null", None)
        if inner == "IsNotNull":
            return (column, "is_null", None)
        if inner == "EqualNullSafe" and child.value is None:
            return (column, "is_not_null", None)
        raise _Unsupported(f"Not({inner}) is not pushed down")
    column = _column_of(spark_filter)
    if kind in _BATCH_FILTER_NAMES:
        return (column, _BATCH_FILTER_NAMES[kind], spark_filter.value)
    if kind == "EqualNullSafe":
        # a <=> v is a = v for a non-null v (null rows: false either way).
        value = spark_filter.value
        return (column, "is_null", None) if value is None else (column, "==", value)
    if kind == "In":
        return (column, "in", list(spark_filter.value))
    if kind == "IsNull":
        return (column, "is_null", None)
    if kind == "IsNotNull":
        return (column, "is_not_null", None)
    raise _Unsupported(f"{kind} is not pushed down")


def translate_filter(spark_filter: object, schema: pa.Schema) -> FilterTuple | None:
    """One PySpark ``Filter`` as a filter tuple, or ``None`` if it must stay with Spark.

    Accepted: ``EqualTo``, ``EqualNullSafe``, ``GreaterThan(OrEqual)``,
    ``LessThan(OrEqual)``, ``In``, ``IsNull``, ``IsNotNull``, and ``Not`` of
    ``EqualTo``, ``In``, ``IsNull``, ``IsNotNull`` and ``EqualNullSafe(a,
    NULL)``, on a top-level column of *schema* (the dataset's Arrow schema)
    with a value the column holds exactly. Refused, so Spark evaluates them:
    nested columns, string pattern filters, ``>``/``>=`` on floating columns
    and NaN values (Spark orders NaN above all numbers), ``NOT IN`` with a
    null, values of another type than the column, and anything else.

    Never raises for a filter it does not know; returns ``None``.
    """
    try:
        item = _spark_tuple(spark_filter)
        normalized, _ = _normalize(item, schema, spark=True)
    except (_Unsupported, AttributeError, TypeError):
        return None
    return normalized[0]


def spark_filters_to_tuples(filters: Iterable[object], schema: pa.Schema) -> list[FilterTuple]:
    """The filter tuples for the PySpark filters that can be evaluated exactly.

    *filters* is the AND list PySpark hands to ``DataSourceReader.pushFilters``;
    *schema* is the dataset's Arrow schema. Filters that :func:`translate_filter`
    refuses are left out (Spark must still evaluate those).
    """
    out: list[FilterTuple] = []
    for f in filters:
        item = translate_filter(f, schema)
        if item is not None:
            out.append(item)
    return out


# -- evaluation --------------------------------------------------------------------


def check_filter_tuples(filters: Sequence[object], schema: pa.Schema, *, from_text: bool = False) -> list[FilterTuple]:
    """Validate caller-given filter tuples against *schema* and normalize their values.

    With *from_text*, str values for date, timestamp and decimal columns are
    parsed (as :func:`filters_from_json` needs).

    Raises:
        ValueError: an unknown column or op, a malformed tuple, or a value
            the column cannot hold exactly (the message says which).
    """
    if isinstance(filters, tuple) and len(filters) == 3 and isinstance(filters[0], str):
        filters = [filters]  # a single tuple
    out: list[FilterTuple] = []
    for item in filters:
        try:
            normalized, _ = _normalize(item, schema, from_text=from_text)
        except _Unsupported as exc:
            raise ValueError(f"invalid filter {item!r}: {exc}") from None
        out.extend(normalized)
    return out


def filter_expression(filters: Sequence[FilterTuple], schema: pa.Schema) -> pa.Expression | None:
    """The AND of *filters* as a ``pyarrow.compute.Expression``, or ``None`` if empty.

    Raises:
        ValueError: as :func:`check_filter_tuples`.
    """
    expr: pa.Expression | None = None
    for item in filters:
        try:
            _, one = _normalize(item, schema)
        except _Unsupported as exc:
            raise ValueError(f"invalid filter {item!r}: {exc}") from None
        expr = one if expr is None else expr & one
    return expr


def apply_filter_tuples(table: pa.Table, filters: Sequence[FilterTuple]) -> pa.Table:
    """The rows of *table* that satisfy every tuple in *filters*.

    Raises:
        ValueError: a tuple names a column *table* lacks, or is invalid.
    """
    expr = filter_expression(filters, table.schema)
    if expr is None:
        return table
    return table.filter(expr)


def _is_floating(t: pa.DataType) -> bool:
    return bool(pat.is_floating(t) or (pat.is_dictionary(t) and pat.is_floating(t.value_type)))


def split_for_core(filters: Sequence[FilterTuple], schema: pa.Schema) -> tuple[list[CoreCondition], list[FilterTuple]]:
    """Split *filters* into conditions for the Rust core and a residual for pyarrow.

    The core prunes row groups by their statistics and filters rows while
    decoding. Its float comparisons use IEEE total order (``-0.0 < 0.0``,
    NaN equal to itself and above all numbers), unlike pyarrow and Spark, so
    conditions on floating columns stay in the residual, evaluated by
    :func:`apply_filter_tuples` after the read.

    Raises:
        ValueError: as :func:`check_filter_tuples`.
    """
    core: list[CoreCondition] = []
    residual: list[FilterTuple] = []
    for column, op, value in check_filter_tuples(filters, schema):
        arrow_type = schema.field(column).type
        if _is_floating(arrow_type):
            residual.append((column, op, value))
            continue
        value_type = arrow_type.value_type if pat.is_dictionary(arrow_type) else arrow_type
        if op in _NULLS:
            core.append((column, op, None))
        elif op in _SETS:
            core.append((column, op, pa.array(value, type=value_type)))
        else:
            core.append((column, op, pa.array([value], type=value_type)))
    return core, residual


def filter_columns(filters: Sequence[FilterTuple]) -> list[str]:
    """The columns *filters* read, in first-use order, without repeats."""
    seen: dict[str, None] = {}
    for column, _, _ in filters:
        seen.setdefault(column, None)
    return list(seen)


# -- JSON (the ``filters`` data source option) ----------------------------------------------


def _json_value(value: object) -> object:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"filter values must be finite, got {value!r}")
        return value
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_value(v) for v in value]
    raise ValueError(f"filter value of type {type(value).__name__} cannot be sent as an option")


def _from_json_value(value: object) -> object:
    if isinstance(value, dict):
        if set(value) != {"base64"} or not isinstance(value["base64"], str):
            raise ValueError(f"unexpected object in filters: {value!r}")
        return base64.b64decode(value["base64"], validate=True)
    if isinstance(value, list):
        return [_from_json_value(v) for v in value]
    return value


def filters_to_json(filters: Sequence[FilterTuple]) -> str:
    """*filters* as the JSON text of the ``filters`` option: ``[[column, op, value], ...]``.

    Dates, datetimes and decimals become ISO / decimal strings (parsed back
    by the column's type), bytes become ``{"base64": ...}``.

    Raises:
        ValueError: a malformed tuple, or a value JSON cannot carry (NaN, ...).
    """
    out = []
    for item in filters:
        if not isinstance(item, tuple | list) or len(item) != 3:
            raise ValueError(f"a filter must be a (column, op, value) tuple, got {item!r}")
        column, op, value = item
        out.append([column, op, _json_value(value)])
    return json.dumps(out)


def filters_from_json(text: str, schema: pa.Schema) -> list[FilterTuple]:
    """Parse the ``filters`` option and check it against *schema*.

    Raises:
        ValueError: not a JSON list of ``[column, op, value]`` triples, or a
            triple :func:`check_filter_tuples` rejects.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option 'filters' is not JSON: {exc}") from None
    if not isinstance(raw, list) or not all(isinstance(t, list) and len(t) == 3 for t in raw):
        raise ValueError("option 'filters' must be a JSON list of [column, op, value] triples")
    items = [(t[0], t[1], _from_json_value(t[2])) for t in raw]
    return check_filter_tuples(items, schema, from_text=True)
