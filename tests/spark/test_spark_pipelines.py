"""Pipelines read from Spark (issue F, the read side): ``pds.spark.read_stage``
and ``spark.read.format("pds").option("pipeline", ...)`` on a real local
Spark, against what ``Pipeline.read`` returns, on file and S3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from store_kinds import REMOTE, lake_url

import pds
import pds.spark


@pytest.fixture(scope="session")
def spark(spark_session: SparkSession) -> SparkSession:
    """The run's local Spark (conftest)."""
    return spark_session


@pytest.fixture(params=["file", *REMOTE])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    return lake_url(request.param, tmp_path, request)


def build(url: str, options: dict[str, str]) -> pds.Pipeline:
    """events(user, n) -> per_user (row form) and per_bucket (batched) -> both (a merge)."""
    p = pds.Pipeline.create(url, "pipelines/demo", target_rows=50, **options)
    events = p.source("events", key={"id": pa.int64()}, value={"user": pa.string(), "n": pa.int64()})

    @p.stage("per_user", sources=[events], key={"user": pa.string()}, value={"n": pa.int64()})
    def per_user(key: Any, rows: Any) -> Any:
        for r in rows:
            yield r["user"], {"n": r["n"]}

    @p.stage("per_bucket", sources=[events], key={"user": pa.string()}, value={"n": pa.int64()}, batched=True)
    def per_bucket(groups: pa.Table) -> pa.Table:
        return pa.table({"user": [f"b{i % 3}" for i in groups["id"].to_pylist()], "n": groups["n"], "id": groups["id"]})

    p.merge("both", [per_user, per_bucket])
    ids = list(range(400))
    p.update({"events": pa.table({"id": ids, "user": [f"u{i % 37}" for i in ids], "n": [i * 3 for i in ids]})})
    p.update(
        {
            "events": pds.Changes(
                upserts=pa.table({"id": [5, 900], "user": ["new", "u1"], "n": [-1, 7]}),
                deletes=pa.table({"id": list(range(100, 140))}),
            )
        }
    )
    return p


def rows(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


@pytest.mark.spec("F-read")
def test_read_stage_is_pipeline_read_for_every_node_and_version(
    spark: SparkSession, store_url: tuple[str, dict[str, str]]
) -> None:
    url, options = store_url
    p = build(url, options)
    assert p.version == 2
    for node in ("events", "per_user", "per_bucket", "both"):
        for version in (None, 1, 2):
            expected = p.read(node, version=version)
            df = pds.spark.read_stage(spark, p, node, version=version)
            got = df.toArrow()
            assert got.schema.names == expected.schema.names, node
            assert rows(got) == rows(expected), (node, version)
    # One partition per stored key-range part: the read is split.
    assert pds.spark.read_stage(spark, p, "events").rdd.getNumPartitions() > 2


@pytest.mark.spec("F-read")
def test_the_data_source_reads_a_pipeline_node(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    p = build(url, {})
    df = (
        spark.read.format("pds")
        .option("store", url)
        .option("pipeline", "pipelines/demo")
        .option("stage", "per_user")
        .load()
    )
    assert rows(df.toArrow()) == rows(p.read("per_user"))
    # A stage's parts hold disjoint key ranges in order: the rows come sorted.
    users = [r["user"] for r in df.select("user").collect()]
    assert users == sorted(users)
    old = spark.read.format("pds").option("store", url).option("pipeline", "pipelines/demo").option("version", "1")
    assert old.option("stage", "events").load().count() == 400


@pytest.mark.spec("F-read")
def test_pipeline_reads_refuse_what_they_cannot_do(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    p = build(url, {})

    def base() -> Any:  # a DataFrameReader keeps its options: a fresh one each time
        return spark.read.format("pds").option("store", url).option("pipeline", "pipelines/demo")

    with pytest.raises(Exception, match=r"has no node 'nope'.*its nodes: events, per_user"):
        base().option("stage", "nope").load()
    with pytest.raises(Exception, match=r'option\("stage", name\)'):
        base().load()
    with pytest.raises(Exception, match="no pipeline"):
        spark.read.format("pds").option("store", url).option("pipeline", "absent").option("stage", "x").load()
    with pytest.raises(Exception, match=r"option 'version' must be an integer >= 0"):
        base().option("stage", "events").option("version", "-3").load()
    with pytest.raises(ValueError, match="version"):
        pds.spark.read_stage(spark, p, "events", version=-1)
    with pytest.raises(TypeError, match=r"pds\.Pipeline"):
        pds.spark.read_stage(spark, "pipelines/demo", "events")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="memory://"):
        mem = pds.Pipeline.create("memory://", "p")
        pds.spark.read_stage(spark, mem, "x")
    df = spark.createDataFrame([(1,)], "id long")
    with pytest.raises(Exception, match="update_pipeline"):
        df.write.format("pds").option("store", url).option("pipeline", "pipelines/demo").mode("append").save()
