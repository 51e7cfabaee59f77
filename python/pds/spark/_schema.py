"""Spark <-> Arrow schemas, with PySpark's own converters.

Spark's Python data source checks that every batch a reader returns equals
``to_arrow_schema(spark_schema, timezone="UTC")`` (types and nullability), so
both directions go through PySpark's converters, and a dataset written by
Spark records exactly that Arrow schema.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.types as pat
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

__all__ = ["arrow_to_spark", "conform_batches", "spark_read_target", "spark_readable", "spark_to_arrow"]

SPARK_TIMEZONE = "UTC"
"""The zone of ``TimestampType`` columns in Arrow, as Spark's Python data source expects."""


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
    return to_arrow_schema(schema, timezone=SPARK_TIMEZONE, error_on_duplicated_field_names_in_struct=True)


def spark_read_target(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark requires of the batches a reader returns for *schema*."""
    return to_arrow_schema(schema, timezone=SPARK_TIMEZONE)


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
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
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
    """*schema* with unsigned ints, float16 and date64 widened to types Spark has."""
    return pa.schema([_readable_field(f) for f in schema], metadata=schema.metadata)


def arrow_to_spark(schema: pa.Schema) -> StructType:
    """The Spark schema a dataset of Arrow *schema* reads as; nullability is kept.

    Unsigned ints widen (uint64 to ``DECIMAL(20,0)``), float16 to float,
    date64 to a date. Naive timestamps read as ``TimestampNTZType``.

    Raises:
        pyspark.errors.PySparkTypeError: a type Spark cannot represent.
    """
    spark_schema: StructType = from_arrow_schema(spark_readable(schema), prefer_timestamp_ntz=True)
    return spark_schema


def conform_batches(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """*batches* cast, column by column, to *schema*; empty batches are dropped.

    Zero-copy where the types already match (Spark's batches usually do, up
    to the time zone label of timestamps).

    Raises:
        ValueError: a batch with another number of columns.
        pyarrow.ArrowInvalid: a value the target type cannot hold.
    """
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if batch.num_columns != len(schema):
            raise ValueError(f"a batch has {batch.num_columns} columns, the dataset schema {len(schema)}")
        if batch.schema.equals(schema):
            yield batch
            continue
        arrays = [
            col if col.type == field.type else col.cast(field.type)
            for col, field in zip(batch.columns, schema, strict=True)
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
