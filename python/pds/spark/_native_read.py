"""Reading a pds dataset with Spark's own Parquet reader (``engine="spark"``).

pds decides *what* is read: ``_SUCCESS`` is checked and the manifest read on
the driver, so the DataFrame covers exactly the parts of one commit, with the
schema the manifest records. Spark's vectorized Parquet reader then decodes
those part files on the executors, with its own column pruning and filter
pushdown. This is the fastest way into Spark (no Python worker in the scan),
at two costs: the cluster must be able to open the parts' URLs with a Hadoop
filesystem (``file://`` always; ``s3://`` only where an S3 filesystem serves
that scheme, as on EMR or with ``spark.hadoop.fs.s3.impl`` set to S3A), and
columns come back nullable, as from any Spark file source.

Filter tuples become Spark Columns that keep the tuples' semantics (see
:mod:`pds.spark.filters`): on floating columns a NaN never satisfies ``==``,
``<``, ``<=``, ``>``, ``>=`` and always satisfies ``!=``, unlike Spark SQL,
which orders NaN above every number and equal to itself.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.types as pat
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pds.spark._schema import arrow_to_spark
from pds.spark.filters import FilterTuple, check_filter_tuples

__all__ = ["GLOB_CHARS", "filters_to_column", "read_parts"]

GLOB_CHARS = frozenset("*?[]{}\\")
"""Characters Spark would expand as a glob in a path it is given."""


def _literal(value: Any, arrow_type: pa.DataType, spark_type: Any) -> Column:
    """*value* as a Spark literal of the column's type, exactly.

    Temporal and decimal values go through their ISO / decimal text and a
    Spark cast, so no Python-side time zone or float rounding is involved.
    """
    if isinstance(value, datetime.datetime | datetime.date | decimal.Decimal) or pat.is_temporal(arrow_type):
        text = value.isoformat() if isinstance(value, datetime.date) else str(value)
        return F.lit(text).cast(spark_type)
    return F.lit(value).cast(spark_type)


def _condition(item: FilterTuple, arrow_type: pa.DataType, spark_type: Any) -> Column:
    column, op, value = item
    col = F.col(f"`{column}`")
    if op == "is_null":
        return col.isNull()
    if op == "is_not_null":
        return col.isNotNull()
    if op in ("in", "not in"):
        member = col.isin([_literal(v, arrow_type, spark_type) for v in value])
        return member if op == "in" else col.isNotNull() & ~member
    lit = _literal(value, arrow_type, spark_type)
    compared = {
        "==": col == lit,
        "!=": col != lit,
        "<": col < lit,
        "<=": col <= lit,
        ">": col > lit,
        ">=": col >= lit,
    }[op]
    if pat.is_floating(arrow_type):
        # The tuples' (IEEE) answer for NaN, not Spark SQL's.
        return (compared | F.isnan(col)) if op == "!=" else (compared & ~F.isnan(col))
    return compared


def filters_to_column(filters: Sequence[object], schema: pa.Schema) -> Column | None:
    """The AND of filter tuples as a Spark Column over a DataFrame of *schema*.

    Raises:
        ValueError: as :func:`pds.spark.filters.check_filter_tuples`.
    """
    spark_schema = arrow_to_spark(schema)
    out: Column | None = None
    for item in check_filter_tuples(filters, schema):
        one = _condition(item, schema.field(item[0]).type, spark_schema[item[0]].dataType)
        out = one if out is None else out & one
    return out


def read_parts(spark: SparkSession, urls: Sequence[str], schema: pa.Schema) -> DataFrame:
    """The part files at *urls* read by Spark's Parquet reader, with the dataset *schema*.

    Raises:
        ValueError: a URL with a character Spark would expand as a glob.
    """
    for url in urls:
        if GLOB_CHARS.intersection(url):
            raise ValueError(
                f"engine='spark' cannot read {url!r}: Spark would expand {sorted(GLOB_CHARS.intersection(url))} "
                "as a glob; use engine='pds'"
            )
    spark_schema: StructType = arrow_to_spark(schema)
    return spark.read.schema(spark_schema).parquet(*urls)
