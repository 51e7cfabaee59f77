"""Spark <-> Arrow schemas, with PySpark's own converters.

Spark's Python data source checks that every batch a reader returns equals
``to_arrow_schema(spark_schema, timezone="UTC")`` (types and nullability), so
both directions go through PySpark's converters, and a dataset written by
Spark records exactly that Arrow schema.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.types as pat
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from pds import _core
from pds.errors import SchemaMismatch

__all__ = [
    "arrow_to_spark",
    "check_write_schema",
    "conform_batches",
    "merge_write_schema",
    "nullable_schema",
    "spark_read_target",
    "spark_readable",
    "spark_to_arrow",
    "to_arrow",
]

SPARK_TIMEZONE = "UTC"
"""The zone of ``TimestampType`` columns in Arrow, as Spark's Python data source expects."""


_TAKES_TIMEZONE = "timezone" in inspect.signature(to_arrow_schema).parameters
"""PySpark >= 4.0's ``to_arrow_schema`` takes ``timezone`` and checks struct field names;
3.5's takes only the schema (and maps ``TimestampType`` to UTC microseconds, as 4.x with UTC)."""


def _duplicate_struct_fields(t: DataType) -> list[str]:
    """Names repeated inside a struct anywhere in *t* (3.5's ``to_arrow_schema`` does not check)."""
    if isinstance(t, StructType):
        names = t.fieldNames()
        found = sorted({n for n in names if names.count(n) > 1})
        return found + [d for f in t.fields for d in _duplicate_struct_fields(f.dataType)]
    if isinstance(t, ArrayType):
        return _duplicate_struct_fields(t.elementType)
    if isinstance(t, MapType):
        return _duplicate_struct_fields(t.keyType) + _duplicate_struct_fields(t.valueType)
    return []


def to_arrow(schema: StructType, *, check_struct_names: bool = False) -> pa.Schema:
    """PySpark's ``to_arrow_schema(schema, timezone="UTC")`` on every supported PySpark.

    Raises:
        ValueError: with *check_struct_names*, a struct repeating a field name
            (on PySpark >= 4.0 PySpark's own error).
    """
    if _TAKES_TIMEZONE:
        return to_arrow_schema(
            schema, timezone=SPARK_TIMEZONE, error_on_duplicated_field_names_in_struct=check_struct_names
        )
    if check_struct_names:
        dupes = [d for f in schema.fields for d in _duplicate_struct_fields(f.dataType)]
        if dupes:
            raise ValueError(f"duplicate field names {dupes} in a struct: rename them before writing a pds dataset")
    return to_arrow_schema(schema)


def spark_to_arrow(schema: StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema: PySpark's ``to_arrow_schema``, timestamps in UTC.

    Raises:
        ValueError: duplicate column names (a Parquet file cannot hold them).
        pyspark.errors.PySparkTypeError: a type Arrow cannot represent.
    """
    names = schema.fieldNames()
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate column names {dupes}: rename them before writing a pds dataset")
    return to_arrow(schema, check_struct_names=True)


def spark_read_target(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark requires of the batches a reader returns for *schema*."""
    return to_arrow(schema)


def _readable_type(t: pa.DataType) -> pa.DataType:
    """*t* widened to a type Spark has, losslessly (as Spark's Parquet reader does)."""
    if pat.is_uint8(t):
        return pa.int16()
    if pat.is_uint16(t):
        return pa.int32()
    if pat.is_uint32(t):
        return pa.int64()
    if pat.is_uint64(t):
        return pa.decimal128(20, 0)
    if pat.is_float16(t):
        return pa.float32()
    if pat.is_date64(t):
        return pa.date32()
    if pat.is_string_view(t):
        return pa.string()
    if pat.is_binary_view(t):
        return pa.binary()
    if (
        pat.is_list(t)
        or pat.is_large_list(t)
        or pat.is_fixed_size_list(t)
        or pat.is_list_view(t)
        or pat.is_large_list_view(t)
    ):
        return pa.list_(_readable_field(t.value_field))
    if pat.is_map(t):
        return pa.map_(_readable_field(t.key_field), _readable_field(t.item_field))
    if pat.is_struct(t):
        return pa.struct([_readable_field(t.field(i)) for i in range(t.num_fields)])
    if pat.is_dictionary(t):
        return _readable_type(t.value_type)
    return t


def _readable_field(f: pa.Field) -> pa.Field:
    return f.with_type(_readable_type(f.type))


def spark_readable(schema: pa.Schema) -> pa.Schema:
    """*schema* with unsigned ints, float16 and date64 widened to types Spark
    has, and view types (``string_view``, ...) as their plain variants."""
    return pa.schema([_readable_field(f) for f in schema], metadata=schema.metadata)


def arrow_to_spark(schema: pa.Schema) -> StructType:
    """The Spark schema a dataset of Arrow *schema* reads as; nullability is kept.

    Unsigned ints widen (uint64 to ``DECIMAL(20,0)``), float16 to float,
    date64 to a date; view types read as their plain variants. Naive
    timestamps read as ``TimestampNTZType``.

    Raises:
        pyspark.errors.PySparkTypeError: a type Spark cannot represent.
    """
    spark_schema: StructType = from_arrow_schema(spark_readable(schema), prefer_timestamp_ntz=True)
    return spark_schema


def _spark_type(t: pa.DataType) -> DataType | None:
    """The Spark type a column of Arrow type *t* reads as (:func:`arrow_to_spark`);
    ``None`` if Spark has none."""
    try:
        return arrow_to_spark(pa.schema([pa.field("c", t)])).fields[0].dataType
    except (TypeError, ValueError, NotImplementedError):  # PySparkTypeError is a TypeError
        return None


def _type_key(t: DataType) -> object:
    """*t* without nullability, struct fields by name: two Spark types with
    one key hold the same values."""
    if isinstance(t, StructType):
        return ("struct", tuple(sorted((f.name, _type_key(f.dataType)) for f in t.fields)))
    if isinstance(t, ArrayType):
        return ("array", _type_key(t.elementType))
    if isinstance(t, MapType):
        return ("map", _type_key(t.keyType), _type_key(t.valueType))
    return t.simpleString()


def _casts(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether pyarrow casts *source* to *target* (tried on no value)."""
    try:
        pa.array([], type=source).cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _fits(given: pa.DataType, table: pa.DataType) -> bool:
    """Whether a DataFrame column of Arrow type *given* holds the values of
    a table column of type *table*: the same type, or the type Spark reads
    the table's as (and pyarrow casts it back)."""
    if given == table:
        return True
    mine, theirs = _spark_type(given), _spark_type(table)
    return mine is not None and theirs is not None and _type_key(mine) == _type_key(theirs) and _casts(given, table)


def merge_write_schema(data: pa.Schema, table: pa.Schema, key: str) -> pa.Schema:
    """The schema a Spark append in ``schema_mode="merge"`` writes, as
    ``pds.Table.append(..., schema_mode="merge")`` computes it: the table's
    columns (a column Spark reads as the DataFrame's keeps the table's type,
    as in :func:`check_write_schema`; another type must widen the table's
    exactly, int to bigint say), then the DataFrame's new columns, nullable.
    A nullable table column the DataFrame lacks is written as nulls. No I/O.

    Raises:
        pds.SchemaMismatch: a column that neither fits nor widens, or a
            not-nullable table column the DataFrame lacks (naming each).
    """
    fields = []
    for f in data:
        index = table.get_field_index(f.name)
        fits = index >= 0 and _fits(f.type, table.field(index).type)
        fields.append(table.field(index) if fits else f)
    merged: pa.Schema = _core.table_merge_schema(table, pa.schema(fields), key)
    return merged


def _shown(spark: DataType | None, arrow: pa.DataType) -> str:
    return spark.simpleString() if spark is not None else f"{arrow} (a type Spark lacks)"


def check_write_schema(data: pa.Schema, table: pa.Schema, key: str) -> None:
    """Check, before any Spark job, that a DataFrame of Arrow schema *data*
    (:func:`spark_to_arrow` of its Spark schema) may be written to the
    table of schema *table*: the same column names, in any order (they are
    matched by name), each column of the type Spark reads the table's
    column as (:func:`arrow_to_spark`: ``bigint`` for int64 and uint32,
    ``string`` for every string variant, ``timestamp`` for any unit and
    zone ...), up to nullability and the order of struct fields. Such a
    column is cast to the table's type as the tasks write it, so a
    DataFrame read from the table can always be written back. Any other type
    is refused, as ``pds.Table.append`` refuses it in ``schema_mode="strict"``
    (an int column for a bigint table, too: cast it first).

    Raises:
        pds.SchemaMismatch: naming every column that is missing, not in the
            table, or of another type (Spark's names for both types).
    """
    problems: list[str] = []
    for field in table:
        name = json.dumps(field.name)
        index = data.get_field_index(field.name)
        if index < 0:
            problems.append(f"{name} is missing")
            continue
        given = data.field(index).type
        if _fits(given, field.type):
            continue
        mine, theirs = _spark_type(given), _spark_type(field.type)
        shown = f"{name} is {_shown(mine, given)} in the DataFrame, {_shown(theirs, field.type)} in the table"
        if _shown(mine, given) == _shown(theirs, field.type):
            shown += f" (Arrow {given} cannot become {field.type})"
        problems.append(shown)
    problems.extend(f"{json.dumps(f.name)} is not in the table" for f in data if table.get_field_index(f.name) < 0)
    if problems:
        raise SchemaMismatch(
            f"schema mismatch on table {json.dumps(key)}: {'; '.join(problems)} "
            "(a Spark write matches columns by name; cast or rename the DataFrame's columns to the table's: "
            f"{', '.join(f'{f.name} {_shown(_spark_type(f.type), f.type)}' for f in table)})",
            path=key,
        )


def nullable_schema(schema: pa.Schema) -> pa.Schema:
    """*schema* with every column nullable: the schema a table task's
    batches cross into Rust with. Rust's Arrow import refuses a batch
    declared not nullable that holds a null with a bare Arrow error, before
    pds sees it; declared nullable, the batch reaches the table writer,
    which checks it against the table's schema (``check_not_null`` in
    src/table/write.rs) and raises ``SchemaMismatch`` naming the column.
    Relabels only, no copy."""
    return pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)


def conform_batches(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """*batches* with *schema*'s columns, matched by name and cast to its
    types; empty batches are dropped.

    Zero-copy where the names and types already match (Spark's batches
    usually do, up to the time zone label of timestamps). A nullable column
    of *schema* that the batches lack is filled with nulls (a merge append
    of a DataFrame without it, see :func:`merge_write_schema`).

    Nulls are not counted here: a table task conforms to
    :func:`nullable_schema` and the Rust table writer checks the table's
    nullability (one check, for every writer); a null in a column declared
    not nullable fails Rust's Arrow import.

    Raises:
        pds.SchemaMismatch: a batch with a column *schema* lacks, or without
            a not-nullable column of *schema*, or a value its column's type
            cannot hold (naming the column).
    """
    names = set(schema.names)
    required = {f.name for f in schema if not f.nullable}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if batch.schema.equals(schema):
            yield batch
            continue
        given = set(batch.schema.names)
        if not given <= names or not required <= given or len(given) != batch.num_columns:
            raise SchemaMismatch(f"a batch has the columns {batch.schema.names}, the schema {schema.names}")
        arrays = []
        for field in schema:
            if field.name not in given:
                arrays.append(pa.nulls(batch.num_rows, field.type))
                continue
            col = batch.column(field.name)
            if col.type != field.type:
                try:
                    col = col.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    raise SchemaMismatch(
                        f"column {field.name!r} ({col.type}) cannot become {field.type}: {exc}"
                    ) from None
            arrays.append(col)
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
