"""Spark writes to pds tables match the DataFrame's columns to the table's
by name, as local ``Table.append`` / ``upsert`` do (issue S2, item 1.4).

A DataFrame whose columns come in another order than the table's lands
each value in its own column (the primary key included), through
``format("pds")`` appends and overwrites and ``pds.spark.upsert``. A column
whose name matches but whose type does not (an int32 key for an int64
table among them) is ``pds.SchemaMismatch`` naming it, raised on the
driver before any Spark job runs, as the local calls raise it. One local
Spark session (conftest) and small tables keep this quick on 2 cores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from remote_store import Store

import pds
import pds.spark
from pds.errors import SchemaMismatch

from helpers import files

pytestmark = pytest.mark.spec("S2-1.4")

Lake = tuple[str, dict[str, str], Store]

SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int64()), ("a", pa.string()), ("b", pa.string())])
"""The table's columns: two of each type, so that a write by position
puts values in another column of the same type without any error."""


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "n": pa.array([1000 + i for i in ids], pa.int64()),
            "a": [f"a-{tag}{i}" for i in ids],
            "b": [f"b-{tag}{i}" for i in ids],
        },
        schema=SCHEMA,
    )


def _frame(spark: SparkSession, rows: pa.Table, order: list[str], *, shuffled: bool = True) -> DataFrame:
    """*rows* as a DataFrame with its columns in *order*; *shuffled*: in 2
    partitions (Spark's adaptive execution runs that shuffle when the write
    is planned, before it asks the data source for a writer, so a refusal
    test leaves it out to see that no job at all runs)."""
    df = spark.createDataFrame(rows.select(order))
    return df.repartition(2) if shuffled else df


def _content(store: Store, key: str) -> list[dict[str, Any]]:
    """The table's latest rows, by id, in the table's column order."""
    return sorted(pds.Table.open(store, key).to_arrow().to_pylist(), key=lambda r: r["id"])


def _save(df: DataFrame, url: str, options: dict[str, str], key: str, mode: str) -> None:
    df.write.format("pds").option("store", url).options(**options).mode(mode).save(key)


def test_format_appends_and_overwrites_match_columns_by_name(spark_session: SparkSession, file_store: Lake) -> None:
    url, options, store = file_store
    pds.Table.create(store, "t", data=_rows([1, 2, 3], "v0-"), primary_key="id")
    # Types line up by position: a write by position fails nowhere, it swaps values.
    _save(_frame(spark_session, _rows([10, 11, 12], "v1-"), ["n", "id", "b", "a"]), url, options, "t", "append")
    assert _content(store, "t") == _rows([1, 2, 3], "v0-").to_pylist() + _rows([10, 11, 12], "v1-").to_pylist()
    table = pds.Table.open(store, "t")
    assert (table.schema, table.primary_key) == (SCHEMA, "id"), "the table's schema stays"

    # An overwrite takes the DataFrame's schema, its order included.
    _save(_frame(spark_session, _rows([20, 21], "v2-"), ["b", "a", "n", "id"]), url, options, "t", "overwrite")
    table = pds.Table.open(store, "t")
    assert table.schema.names == ["b", "a", "n", "id"]
    assert _content(store, "t") == _rows([20, 21], "v2-").select(["b", "a", "n", "id"]).to_pylist()
    # ... and later appends go by name against that order.
    _save(_frame(spark_session, _rows([30], "v3-"), SCHEMA.names), url, options, "t", "append")
    expected = pa.concat_tables([_rows([20, 21], "v2-"), _rows([30], "v3-")]).select(["b", "a", "n", "id"])
    assert _content(store, "t") == expected.to_pylist()


def test_spark_upsert_matches_columns_by_name(spark_session: SparkSession, file_store: Lake) -> None:
    url, options, store = file_store
    # Other physical string types than Spark's (as polars and pandas give them):
    # Spark reads both as strings, and its strings are cast back to them.
    views = pa.schema([("id", pa.int64()), ("n", pa.int64()), ("a", pa.string_view()), ("b", pa.large_string())])
    pds.Table.create(store, "t", data=_rows([1, 2, 3, 4], "old").cast(views), primary_key="id")
    df = _frame(spark_session, _rows([2, 4, 7], "new"), ["n", "id", "b", "a"])  # "n" where the key is
    assert pds.spark.upsert(df, url, "t", **options) == 1
    expected = sorted(_rows([1, 3], "old").to_pylist() + _rows([2, 4, 7], "new").to_pylist(), key=lambda r: r["id"])
    assert pds.Table.open(store, "t").schema == views
    assert _content(store, "t") == expected
    read = spark_session.read.format("pds").option("store", url).options(**options).load("t")
    assert [f.dataType.simpleString() for f in read.schema.fields] == ["bigint", "bigint", "string", "string"]
    assert sorted((r.asDict() for r in read.collect()), key=lambda r: r["id"]) == expected


def _append(url: str, options: dict[str, str]) -> Callable[[DataFrame], object]:
    return lambda df: _save(df, url, options, "t", "append")


def _upsert(url: str, options: dict[str, str]) -> Callable[[DataFrame], object]:
    return lambda df: pds.spark.upsert(df, url, "t", **options)


@contextmanager
def _refused(spark: SparkSession, error: type[Exception], match: str) -> Iterator[None]:
    """The body raises *error* holding pds's ``SchemaMismatch`` message that
    matches *match* (Spark wraps what a data source's ``writer()`` raises in
    an ``AnalysisException`` quoting it), and runs no Spark job."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    with pytest.raises(error, match=match) as info:
        yield
    if error is not SchemaMismatch:
        assert "pds.errors.SchemaMismatch: schema mismatch on table" in str(info.value)
    assert set(tracker.getJobIdsForGroup(None)) == before, "a Spark job ran before the check"


@pytest.mark.parametrize(
    ("write", "error"), [(_append, AnalysisException), (_upsert, SchemaMismatch)], ids=["append", "upsert"]
)
def test_other_types_are_schema_mismatch_naming_the_column_before_any_job(
    spark_session: SparkSession,
    file_store: Lake,
    write: Callable[[str, dict[str, str]], Callable[[DataFrame], object]],
    error: type[Exception],
) -> None:
    url, options, store = file_store
    table = pds.Table.create(store, "t", data=_rows([1, 2], "old"), primary_key="id")
    before = files(store, "t")
    run = write(url, options)
    local = getattr(table, "append" if write is _append else "upsert")

    # "b" holds ints in the DataFrame, strings in the table (columns permuted too).
    wrong_b = _frame(spark_session, _rows([5], "x"), ["b", "a", "n", "id"], shuffled=False).withColumn(
        "b", F.lit(7).cast("long")
    )
    with _refused(spark_session, error, r'"t": "b" is bigint in the DataFrame, string in the table \('):
        run(wrong_b)

    # An int32 key for the int64 table: refused as locally (schema_mode="strict", the default).
    int_key = pa.table({"id": pa.array([5], pa.int32()), "n": [1], "a": ["a"], "b": ["b"]})
    with pytest.raises(SchemaMismatch, match='"id" is Int32 in the data, Int64 in the table'):
        local(int_key)
    df = spark_session.createDataFrame(int_key)
    assert df.schema["id"].dataType.simpleString() == "int"
    with _refused(spark_session, error, r'"t": "id" is int in the DataFrame, bigint in the table \('):
        run(df)
    # A missing and an extra column are named too.
    renamed = spark_session.createDataFrame(_rows([5], "x")).withColumnRenamed("b", "c")
    with _refused(spark_session, error, r'"t": "b" is missing; "c" is not in the table \('):
        run(renamed)
    assert files(store, "t") == before, "nothing written"
    assert _content(store, "t") == _rows([1, 2], "old").to_pylist()

    # Cast to the table's bigint key, it is written.
    run(df.withColumn("id", F.col("id").cast("long")))
    assert [r["id"] for r in _content(store, "t")] == [1, 2, 5]
