"""Pipelines updated on Spark at their seams with user code (issue S2), the
same as locally: a ``Produce`` that raises is a ``ProduceError`` naming the
stage and the key (row form) or the first and last keys of the call
(batched form, ``failed on keys A … B``), of the user's exception class;
deletes with a column that is not a key column are ``SchemaMismatch``
naming it, before any Spark job. Each case runs on a real local Spark
(file://) against a twin pipeline updated with ``Pipeline.update``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession, functions
from pyspark.sql.types import LongType

import pds
import pds.spark
from pds import Changes, Pipeline, ProduceError, SchemaMismatch


def _twins(tmp_path: Path, declare: Any) -> tuple[Pipeline, Pipeline]:
    """Two pipelines declared by *declare(p)* on one file:// lake: the
    first updated on Spark, the second (its twin) locally."""
    url = (tmp_path / "lake").as_uri()
    made = []
    for key in ("pipelines/on-spark", "pipelines/local"):
        p = Pipeline.create(url, key)
        declare(p)
        made.append(p)
    return made[0], made[1]


def _same_failure(spark: SparkSession, p: Pipeline, twin: Pipeline, data: pa.Table) -> tuple[Any, Any]:
    """The ``ProduceError`` of updating source ``s`` of *p* on Spark and of
    *twin* locally with *data*; checked to be alike and to commit nothing."""
    with pytest.raises(ProduceError) as local:
        twin.update({"s": data})
    with pytest.raises(ProduceError) as on_spark:
        pds.spark.update_pipeline(spark, p, {"s": spark.createDataFrame(data)})
    got, want = on_spark.value, local.value
    assert str(got) == str(want)
    assert (got.stage, got.key, got.last_key) == (want.stage, want.key, want.last_key)
    assert isinstance(want, ZeroDivisionError)
    assert isinstance(got, ZeroDivisionError), f"not the user's class: {type(got).__mro__}"
    assert p.refresh() == 0 and twin.refresh() == 0
    return got, want


# -- section 3: a Produce's error names its key, or a batched call's keys ----------


@pytest.mark.spec("S2-3")
@pytest.mark.parametrize(
    ("key", "data", "first", "last"),
    [
        pytest.param({"k": pa.int64()}, {"k": list(range(1, 26))}, 1, 25, id="int"),
        pytest.param({"a": pa.int64(), "b": pa.int64()}, {"a": [1, 3], "b": [2, 4]}, (1, 2), (3, 4), id="compound"),
        # Keys whose reprs hold the message's own separators (": Name: ", " … ").
        pytest.param(
            {"k": pa.string()}, {"k": ["a … b: Weird: c", "m", "z: Odd: …"]}, "a … b: Weird: c", "z: Odd: …", id="str"
        ),
    ],
)
def test_a_batched_produce_failing_on_spark_names_its_keys_as_locally(
    spark: SparkSession, tmp_path: Path, key: dict[str, pa.DataType], data: dict[str, list[Any]], first: Any, last: Any
) -> None:
    def declare(p: Pipeline) -> None:
        src = p.source("s", key=key, value={"x": pa.int64()})

        @p.stage("b", sources=[src], key=key, value={"x": pa.int64()}, batched=True)
        def b(groups: pa.Table) -> pa.Table:
            raise ZeroDivisionError("no")

    p, twin = _twins(tmp_path, declare)
    rows = len(next(iter(data.values())))
    got, _ = _same_failure(spark, p, twin, pa.table({**data, "x": list(range(rows))}))
    assert str(got) == f"stage 'b' failed on keys {first!r} … {last!r}: ZeroDivisionError: no"
    assert (got.key, got.last_key) == (first, last)


@pytest.mark.spec("S2-3")
@pytest.mark.parametrize(
    ("keys", "bad"),
    [
        pytest.param([5, 7, 9], 7, id="int"),
        pytest.param(["a", "z: Odd: 1", "zz"], "z: Odd: 1", id="str"),
    ],
)
def test_a_row_produce_failing_on_spark_names_its_key_as_locally(
    spark: SparkSession, tmp_path: Path, keys: list[Any], bad: Any
) -> None:
    key_type = pa.int64() if isinstance(bad, int) else pa.string()

    def declare(p: Pipeline) -> None:
        src = p.source("s", key={"k": key_type}, value={"x": pa.int64()})

        @p.stage("r", sources=[src], key={"k": key_type}, value={"x": pa.int64()})
        def r(k: Any, values: Iterator[dict[str, Any]]) -> Iterator[tuple[Any, int]]:
            if k == bad:
                raise ZeroDivisionError("no")
            for v in values:
                yield k, v["x"]

    p, twin = _twins(tmp_path, declare)
    got, _ = _same_failure(spark, p, twin, pa.table({"k": pa.array(keys, key_type), "x": list(range(len(keys)))}))
    assert str(got) == f"stage 'r' failed on key {bad!r}: ZeroDivisionError: no"
    assert (got.key, got.last_key) == (bad, bad)


# -- section 4: deletes with a column that is not a key column are refused ----------


def _marked(spark: SparkSession, t: pa.Table, marker: Path) -> DataFrame:
    """*t* as a DataFrame whose evaluation by any Spark job touches *marker*."""
    path = str(marker)

    def touch(v: int) -> int:
        with open(path, "a"):
            pass
        return v

    mark = functions.udf(touch, LongType(), useArrow=False)
    return spark.createDataFrame(t).withColumn("k", mark(functions.col("k")))


@pytest.mark.spec("S2-4")
def test_deletes_with_a_column_that_is_not_a_key_are_refused_on_spark_before_any_job(
    spark: SparkSession, tmp_path: Path
) -> None:
    def declare(p: Pipeline) -> None:
        p.source("a", key={"k": pa.int64()}, value={"x": pa.int64()})
        p.source("b", key={"k": pa.int64()}, value={"x": pa.int64()})

    p, twin = _twins(tmp_path, declare)
    start = pa.table({"k": [1, 2, 3], "x": [10, 20, 30]})
    for q in (p, twin):
        assert q.update({"a": start, "b": start}) == 1
    ups = pa.table({"k": [4], "x": [40]})
    dels = pa.table({"k": [1], "x": [99]})

    with pytest.raises(SchemaMismatch) as local:
        twin.update({"a": ups, "b": Changes(deletes=dels)})
    assert str(local.value) == "source 'b' deletes: extra columns ['x']; deletes hold only the key columns ['k']"
    # Source a's upserts come first and are fine: their check job would run
    # before b's deletes are looked at, were b not refused first.
    marker = tmp_path / "evaluated"
    changes = {"a": _marked(spark, ups, marker), "b": Changes(deletes=_marked(spark, dels, marker))}
    with pytest.raises(SchemaMismatch) as on_spark:
        pds.spark.update_pipeline(spark, p, changes)
    assert str(on_spark.value) == str(local.value)
    assert not marker.exists(), "a Spark job ran before the deletes were refused"
    assert p.refresh() == 1
    assert p.read("b").to_pylist() == start.to_pylist()
    # The same as a (upserts, deletes) pair.
    with pytest.raises(SchemaMismatch, match=r"source 'b' deletes: extra columns \['x'\]"):
        pds.spark.update_pipeline(spark, p, {"b": (None, _marked(spark, dels, marker))})
    assert not marker.exists()

    # Only the key columns: the rows are deleted (and the marker shows the jobs ran).
    assert pds.spark.update_pipeline(spark, p, {"b": Changes(deletes=_marked(spark, dels.select(["k"]), marker))}) == 2
    assert marker.exists()
    assert p.read("b").to_pylist() == [{"k": 2, "x": 20}, {"k": 3, "x": 30}]


# -- WriteJob.write_task raises what its docstring says ----------------------------


@pytest.mark.spec("S2-1.4")
def test_write_task_refuses_a_value_its_column_cannot_hold_as_its_docstring_says(tmp_path: Path) -> None:
    """Executor side, without Spark: the first batch's bad value is
    ``SchemaMismatch`` naming the column, nothing uploaded; a later batch's
    is a ``DataError`` carrying it, the parts already uploaded removed."""
    from pds.spark._job import WriteJob, WriteSettings

    store = pds.open_store(tmp_path.as_uri())
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False)])
    job = WriteJob.start(store, "k", schema, WriteSettings(max_rows_per_file=5), overwrite=False)
    good = pa.record_batch({"id": pa.array(range(12), pa.int64())})
    bad = pa.record_batch({"id": pa.array([2**40], pa.int64())})
    parts = tmp_path / "k"
    with pytest.raises(SchemaMismatch, match=r"column 'id' \(int64\) cannot become int32"):
        job.write_task([bad, good], identity=(0, 0, 1, 1))
    assert not list(parts.rglob("*.parquet"))
    with pytest.raises(pds.DataError, match=r"column 'id' \(int64\) cannot become int32"):
        job.write_task([good, bad], identity=(0, 0, 2, 1))
    assert not list(parts.rglob("*.parquet")), "the parts of the first batch were removed"
    assert len(job.write_task([good], identity=(0, 0, 3, 1)).parts) == 3
    assert len(list(parts.rglob("*.parquet"))) == 3  # where the checks above looked
