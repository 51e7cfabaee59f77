"""Reading a pds dataset with Spark's own Parquet reader (``engine="spark"``).

pds decides *what* is read: ``_SUCCESS`` is checked and the manifest read on
the driver, so the DataFrame covers exactly the parts of one commit, with the
schema the manifest records. Spark's vectorized Parquet reader then decodes
those part files on the executors, with its own column pruning and filter
pushdown. This is the fastest way into Spark (no Python worker in the scan),
at two costs: the cluster must be able to open the parts' URLs with a Hadoop
filesystem (``file://`` always; ``s3://`` only where an S3 filesystem serves
that scheme, as on EMR or with ``spark.hadoop.fs.s3.impl`` set to S3A), and
columns come back nullable, as from any Spark file source. The file list is
fixed when the DataFrame is made: after the dataset is overwritten, actions
on it fail (``engine="pds"`` reads the manifest again for each query).

Refused up front, with a ``ValueError`` that suggests ``engine="pds"``: keys
with characters Spark would expand as a glob, column types Spark's Parquet
reader cannot read as pds writes them (second and nanosecond timestamps,
``date64``, ``float16``, durations, times), and column names that differ
only in case (Spark matches names case-insensitively).

Filter tuples become Spark Columns that keep the tuples' semantics (see
:mod:`pds.spark.filters`): on floating columns a NaN never satisfies ``==``,
``<``, ``<=``, ``>``, ``>=`` and always satisfies ``!=``, unlike Spark SQL,
which orders NaN above every number and equal to itself. Tuples go through
the same JSON normalisation as the ``filters`` option of ``engine="pds"``, so
both engines accept the same values. One difference remains: ``in`` on a
floating column matches ``0.0`` and ``-0.0`` to each other here, not in
pyarrow.
"""

from __future__ import annotations

import datetime
import urllib.parse
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.types as pat
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DecimalType, StructType, TimestampNTZType, TimestampType
from remote_store import Store

from pds.spark._schema import arrow_to_spark
from pds.spark._snapshot import dataset_snapshot, project
from pds.spark.filters import FilterTuple, filters_from_json, filters_to_json

__all__ = ["GLOB_CHARS", "check_readable", "filters_to_column", "read_natively", "read_parts", "spark_root"]

GLOB_CHARS = frozenset("*?[]{}\\")
"""Characters Spark would expand as a glob in a path it is given."""


def _literal(value: Any, spark_type: Any) -> Column:
    """*value* as a Spark literal of the column's type, exactly.

    Temporal and decimal values (uint64 columns read as ``DECIMAL(20,0)``)
    go through their ISO / decimal text and a Spark cast, so no Python-side
    time zone, float rounding or ``long`` overflow is involved.
    """
    if isinstance(spark_type, DecimalType | DateType | TimestampType | TimestampNTZType):
        text = value.isoformat() if isinstance(value, datetime.date) else str(value)
        return F.lit(text).cast(spark_type)
    return F.lit(value).cast(spark_type)


def _col(name: str) -> Column:
    """The top-level column *name*, quoted (any character, backticks included)."""
    return F.col("`" + name.replace("`", "``") + "`")


def _condition(item: FilterTuple, arrow_type: pa.DataType, spark_type: Any) -> Column:
    column, op, value = item
    col = _col(column)
    if op == "is_null":
        return col.isNull()
    if op == "is_not_null":
        return col.isNotNull()
    if op in ("in", "not in"):
        member = col.isin([_literal(v, spark_type) for v in value])
        return member if op == "in" else col.isNotNull() & ~member
    lit = _literal(value, spark_type)
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


def filters_to_column(filters: Sequence[FilterTuple], schema: pa.Schema) -> Column | None:
    """The AND of filter tuples as a Spark Column over a DataFrame of *schema*.

    Raises:
        ValueError: as the ``filters`` option (:func:`pds.spark.filters.filters_from_json`).
    """
    spark_schema = arrow_to_spark(schema)
    out: Column | None = None
    for item in filters_from_json(filters_to_json(filters), schema):
        one = _condition(item, schema.field(item[0]).type, spark_schema[item[0]].dataType)
        out = one if out is None else out & one
    return out


def _unreadable(t: pa.DataType) -> bool:
    """Whether Spark's Parquet reader fails on a column of Arrow type *t* as pds writes it."""
    if pat.is_timestamp(t):
        return t.unit in ("s", "ns")
    if pat.is_date64(t) or pat.is_float16(t) or pat.is_duration(t) or pat.is_time(t):
        return True
    if pat.is_dictionary(t):
        return _unreadable(t.value_type)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return _unreadable(t.value_type)
    if pat.is_map(t):
        return _unreadable(t.key_type) or _unreadable(t.item_type)
    if pat.is_struct(t):
        return any(_unreadable(t.field(i).type) for i in range(t.num_fields))
    return False


def check_readable(schema: pa.Schema) -> None:
    """Refuse a dataset Spark's Parquet reader cannot read (see the module docstring).

    Raises:
        ValueError: naming the columns, and suggesting ``engine='pds'``.
    """
    bad = [f"{f.name} ({f.type})" for f in schema if _unreadable(f.type)]
    if bad:
        raise ValueError(
            f"engine='spark': Spark's Parquet reader cannot read column(s) {', '.join(bad)}; use engine='pds'"
        )
    lowered: dict[str, str] = {}
    for name in schema.names:
        other = lowered.setdefault(name.lower(), name)
        if other != name:
            raise ValueError(
                f"engine='spark': columns {other!r} and {name!r} differ only in case, which Spark "
                "cannot tell apart; use engine='pds'"
            )


def spark_root(url: str) -> str:
    """The store URL as a path Hadoop resolves to the objects pds wrote.

    pds percent-decodes a store URL's path (``my%20lake`` is the folder or
    prefix ``my lake``); Hadoop would take ``%20`` literally, so the path is
    given decoded.
    """
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.scheme}://{parsed.netloc}{urllib.parse.unquote(parsed.path)}".rstrip("/")


def read_parts(spark: SparkSession, urls: Sequence[str], schema: pa.Schema) -> DataFrame:
    """The part files at *urls* read by Spark's Parquet reader, with the dataset *schema*.

    Raises:
        ValueError: a URL with a character Spark would expand as a glob, or
            a schema :func:`check_readable` refuses.
    """
    check_readable(schema)
    for url in urls:
        if GLOB_CHARS.intersection(url):
            raise ValueError(
                f"engine='spark' cannot read {url!r}: Spark would expand {sorted(GLOB_CHARS.intersection(url))} "
                "as a glob; use engine='pds'"
            )
    spark_schema: StructType = arrow_to_spark(schema)
    return spark.read.schema(spark_schema).parquet(*urls)


def read_natively(
    spark: SparkSession,
    store: Store,
    key: str,
    url: str,
    location: str,
    columns: Sequence[str] | None,
    tuples: Sequence[FilterTuple],
    expression: str | Column | None,
) -> DataFrame:
    """``read_dataset(..., engine="spark")``: one commit's parts through Spark's Parquet reader.

    *url* is the store's URL and *location* the dataset's key below it.

    Raises:
        DatasetIncomplete / NotFound / ManifestCorrupted: as the data source's reader.
        ValueError: an unknown or repeated column, a bad filter tuple, or
            what :func:`read_parts` refuses.
    """
    snapshot = dataset_snapshot(store, key)
    if columns is not None:
        project(snapshot.schema, columns)  # unknown or repeated names fail here
    base = f"{spark_root(url)}/{location.strip('/')}"
    df = read_parts(spark, [f"{base}/{name}" for name in snapshot.manifest.parts], snapshot.schema)
    condition = filters_to_column(tuples, snapshot.schema) if tuples else None
    if condition is not None:
        df = df.where(condition)
    if expression is not None:
        df = df.where(expression)
    if columns is not None:
        df = df.select(*[_col(c) for c in columns])
    return df
