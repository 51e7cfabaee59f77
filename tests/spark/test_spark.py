"""pds on real local Spark: the ``pds`` data source and the mapInArrow helpers.

One SparkSession (``local[2,2]``: two cores, ``spark.task.maxFailures=2``)
serves the whole file. Every dataset Spark writes is read back with
``pds.ParquetDatasetStore`` and with ``remote_store.ext.parquet`` and
compared, rows sorted, with the data written.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import remote_store.ext.parquet as rsp
from pyspark import TaskContext, cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import datasource as sds
from pyspark.sql.types import LongType, StringType, StructField, StructType
from remote_store import AlreadyExists, Store
from store_kinds import REMOTE

import pds
import pds.spark
from pds import _core
from pds.errors import DatasetIncomplete
from pds.spark._arrow_conf import MAX_BYTES_PER_BATCH, UNCAPPED
from pds.spark._job import WriteJob, WriteSettings, spark_store
from pds.spark.datasource import PdsDataSource, PdsTableWriter, PdsWriter
from pds.spark.filters import (
    apply_filter_tuples,
    filters_from_json,
    filters_to_json,
    spark_filters_to_tuples,
    split_for_core,
    translate_filter,
)

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"

# The test data sources below are defined here; executors get them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- fixtures ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark(spark_session: SparkSession) -> SparkSession:
    """The run's local Spark (conftest), with a data source whose tasks fail on demand."""
    spark_session.dataSource.register(FlakyPdsDataSource)
    return spark_session


# -- data and checks ----------------------------------------------------------------


def rich_table(n: int, offset: int = 0) -> pa.Table:
    """Every common Spark type, nulls included (no NaN: tables are compared with equals)."""
    ids = range(offset, offset + n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "i32": pa.array([None if i % 7 == 0 else i * 3 for i in ids], pa.int32()),
            "f": pa.array([None if i % 13 == 0 else i / 4 for i in ids], pa.float64()),
            "s": pa.array([None if i % 5 == 0 else f"s{i % 9}" for i in ids], pa.string()),
            "b": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
            "d": pa.array([datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in ids], pa.date32()),
            "ts": pa.array([1_700_000_000_000_000 + i * 3_600_000_001 for i in ids], pa.timestamp("us", tz="UTC")),
            "dec": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
            "bin": pa.array([bytes([i % 256, 7]) for i in ids], pa.binary()),
            "arr": pa.array([[i, None] if i % 3 else [] for i in ids], pa.list_(pa.int64())),
            "st": pa.array([{"a": i, "b": str(i)} for i in ids]),
            "m": pa.array([[("k", i)] for i in ids], pa.map_(pa.string(), pa.int64())),
        }
    )


def spark_df(spark: SparkSession, table: pa.Table, partitions: int | None = None) -> DataFrame:
    """*table* as a DataFrame: 2 partitions (local[2]), or *partitions* by hash of id."""
    df = spark.createDataFrame(table)
    return df if partitions is None else df.repartition(partitions, "id")


def written_schema(df: DataFrame) -> pa.Schema:
    """What pds records for a DataFrame: PySpark's Arrow schema, timestamps in UTC."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema, timezone="UTC")


def by_id(table: pa.Table) -> pa.Table:
    return table.sort_by("id").combine_chunks()


def dataset_files(store: Store, key: str) -> set[str]:
    if not store.exists(key):
        return set()
    return {str(f.path)[len(key) + 1 :] for f in store.list_files(key, recursive=True)}


def check_dataset(store: Store, key: str, expected: pa.Table) -> pds.DatasetManifest:
    """The dataset reads back as *expected* with pds and remote-store; nothing else is left in its folder."""
    ours = pds.ParquetDatasetStore(store)
    manifest = ours.read_manifest(key)
    assert manifest.row_count == expected.num_rows
    assert manifest.schema() == expected.schema
    assert manifest.part_info is not None
    assert [p.name for p in manifest.part_info] == manifest.parts
    assert sum(p.row_count for p in manifest.part_info) == expected.num_rows
    assert dataset_files(store, key) == {*manifest.parts, "manifest.json", "_SUCCESS"}
    pds_table = ours.read_dataset(key, verify=True)
    assert pds_table.schema == expected.schema
    assert by_id(pds_table).equals(by_id(expected))
    rs_table = rsp.ParquetDatasetStore(store).read_dataset(key)
    assert by_id(rs_table.cast(expected.schema)).equals(by_id(expected))
    return manifest


def spark_rows(df: DataFrame, schema: pa.Schema) -> pa.Table:
    """*df* collected as Arrow, with the given schema (timestamps back in UTC)."""
    return by_id(df.toArrow().cast(schema))


def plan_of(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


# -- a data source that fails write tasks, to test retries --------------------------------


class FlakyWriter(PdsWriter):
    """Uploads its parts like ``PdsWriter``, then fails partition 1 (first attempt, or always)."""

    def __init__(self, writer: PdsWriter, always: bool, marker_dir: str) -> None:
        super().__init__(writer.job)
        self._always = always
        self._marker_dir = marker_dir

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
        message = super().write(iterator)
        ctx = TaskContext.get()
        assert ctx is not None
        if ctx.partitionId() == 1 and (self._always or ctx.attemptNumber() == 0):
            names = [p.name for p in message.task.parts]
            marker = Path(self._marker_dir) / f"attempt-{ctx.taskAttemptId()}.json"
            marker.write_text(json.dumps(names))
            raise RuntimeError(f"injected failure after uploading {names}")
        return message


class FlakyPdsDataSource(PdsDataSource):
    """``format("pds_flaky")``: pds, with options ``fail`` (first|always) and ``marker_dir``."""

    @classmethod
    def name(cls) -> str:
        return "pds_flaky"

    def writer(self, schema: StructType, overwrite: bool) -> sds.DataSourceWriter:
        always = self.options.pop("fail", "first") == "always"
        marker_dir = self.options.pop("marker_dir")
        inner = super().writer(schema, overwrite)
        if isinstance(inner, PdsTableWriter):
            return FlakyTableWriter(inner, always, marker_dir)
        assert isinstance(inner, PdsWriter)
        return FlakyWriter(inner, always, marker_dir)


class FlakyTableWriter(PdsTableWriter):
    """Uploads its data files like ``PdsTableWriter``, then fails partition 1 (first attempt, or always)."""

    def __init__(self, writer: PdsTableWriter, always: bool, marker_dir: str) -> None:
        super().__init__(writer._job)
        self._always = always
        self._marker_dir = marker_dir

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
        message = super().write(iterator)
        ctx = TaskContext.get()
        assert ctx is not None
        if ctx.partitionId() == 1 and (self._always or ctx.attemptNumber() == 0):
            names = [f["path"] for f in message.files.files]
            marker = Path(self._marker_dir) / f"attempt-{ctx.taskAttemptId()}.json"
            marker.write_text(json.dumps(names))
            raise RuntimeError(f"injected failure after uploading {names}")
        return message


def fail_once_mid_stream(marker: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: the first attempt of partition 1 touches
    *marker* and fails at its fourth batch; every other task passes its
    batches through."""

    def fail_once(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        assert ctx is not None
        for i, batch in enumerate(batches):
            if i == 3 and ctx.partitionId() == 1 and ctx.attemptNumber() == 0:
                Path(marker).touch()
                raise RuntimeError("injected failure mid-stream")
            yield batch

    return fail_once


def failed_attempt_parts(marker_dir: Path) -> list[str]:
    return [name for f in sorted(marker_dir.glob("attempt-*.json")) for name in json.loads(f.read_text())]


# -- the data source: write and read -----------------------------------------------------


@pytest.mark.spec("SPARK-001")
def test_format_roundtrip_on_file(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    """format("pds") with no registration call writes a dataset pds and remote-store read back."""
    url, _, store = file_store
    table = rich_table(300)
    df = spark_df(spark, table, partitions=3)
    df.write.format("pds").option("store", url).mode("append").save("sales/2024")
    expected = table.cast(written_schema(df))
    manifest = check_dataset(store, "sales/2024", expected)
    assert manifest.dataset_key == "sales/2024"
    assert manifest.compression == "zstd"
    assert len(manifest.parts) == 3  # one per non-empty task
    back = spark.read.format("pds").option("store", url).load("sales/2024")
    assert back.schema == df.schema
    assert spark_rows(back, expected.schema).equals(by_id(expected))


@pytest.mark.spec("SPARK-001")
@pytest.mark.s3
@pytest.mark.parametrize("kind", REMOTE)
def test_format_roundtrip_on_a_server(spark: SparkSession, kind: str, request: pytest.FixtureRequest) -> None:
    """Executors write to S3 and GCS through the Rust core alone (no hadoop-aws
    or gcs-connector jars)."""
    url, options, store = request.getfixturevalue(f"{kind}_store")
    table = rich_table(200)
    df = spark_df(spark, table)
    df.write.format("pds").option("store", url).options(**options).mode("append").save("orders")
    expected = table.cast(written_schema(df))
    check_dataset(store, "orders", expected)
    back = spark.read.format("pds").option("store", url).options(**options).load("orders")
    assert spark_rows(back, expected.schema).equals(by_id(expected))


@pytest.mark.spec("SPARK-002")
def test_write_options_reach_the_manifest(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    url, _, store = file_store
    table = rich_table(250).select(["id", "s", "ts"])
    df = spark_df(spark, table)
    (
        df.write.format("pds")
        .option("store", url)
        .option("compression", "snappy")
        .option("max_rows_per_file", 50)
        .option("row_group_size", 20)
        .option("run_id", "run-42")
        .option("metadata", json.dumps({"team": "sales", "env": "test"}))
        .mode("append")
        .save("opts")
    )
    manifest = check_dataset(store, "opts", table.cast(written_schema(df)))
    assert manifest.compression == "snappy"
    assert manifest.run_id == "run-42"
    assert manifest.metadata == {"team": "sales", "env": "test"}
    assert manifest.part_info is not None
    assert all(p.row_count <= 50 for p in manifest.part_info)
    assert len(manifest.parts) >= 5
    assert manifest.parts == sorted(manifest.parts)  # partition order, then part index
    first = pds.ParquetDatasetStore(store).store.read_bytes(f"opts/{manifest.parts[0]}")
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(pa.py_buffer(first)).metadata
    assert meta.row_group(0).column(0).compression == "SNAPPY"
    assert all(meta.row_group(i).num_rows <= 20 for i in range(meta.num_row_groups))


@pytest.mark.spec("SPARK-001")
def test_empty_dataframe_writes_a_readable_dataset(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    url, _, store = file_store
    schema = StructType([StructField("id", LongType(), False), StructField("s", StringType(), True)])
    df = spark.createDataFrame([], schema)
    df.write.format("pds").option("store", url).mode("append").save("empty")
    expected = pa.table({"id": pa.array([], pa.int64()), "s": pa.array([], pa.string())}, schema=written_schema(df))
    manifest = check_dataset(store, "empty", expected)
    assert len(manifest.parts) == 1
    back = spark.read.format("pds").option("store", url).load("empty")
    assert back.schema == schema
    assert back.count() == 0


# -- save modes ------------------------------------------------------------------------


@pytest.mark.spec("SPARK-003")
def test_append_on_an_existing_dataset_raises_already_exists(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    url, _, store = file_store
    df = spark.range(10)
    df.write.format("pds").option("store", url).mode("append").save("once")
    before = dataset_files(store, "once")
    with pytest.raises(Exception, match="AlreadyExists") as info:
        spark.range(5).write.format("pds").option("store", url).mode("append").save("once")
    assert "write-once" in str(info.value)
    assert dataset_files(store, "once") == before
    assert pds.ParquetDatasetStore(store).read_dataset("once").num_rows == 10


@pytest.mark.spec("SPARK-003")
def test_default_mode_is_refused_by_spark(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    """PySpark's Python data sources take only append and overwrite; the default errorifexists fails."""
    url, _, store = file_store
    with pytest.raises(Exception, match=r"(?i)append|overwrite"):
        spark.range(3).write.format("pds").option("store", url).save("nomode")
    assert not store.exists("nomode")


@pytest.mark.spec("SPARK-003")
def test_overwrite_replaces_the_dataset(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    url, _, store = file_store
    spark_df(spark, rich_table(100)).write.format("pds").option("store", url).mode("append").save("k")
    old_parts = set(pds.ParquetDatasetStore(store).read_manifest("k").parts)
    table = rich_table(40, offset=1000)
    df = spark_df(spark, table)
    df.write.format("pds").option("store", url).mode("overwrite").save("k")
    manifest = check_dataset(store, "k", table.cast(written_schema(df)))
    assert not old_parts & set(manifest.parts)
    # overwrite also creates
    df.write.format("pds").option("store", url).mode("overwrite").save("fresh")
    check_dataset(store, "fresh", table.cast(written_schema(df)))


@pytest.mark.spec("SPARK-003")
def test_overwrite_may_read_the_dataset_it_replaces(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    """The old dataset stays readable until the commit, so a job can rewrite what it reads."""
    url, _, store = file_store
    spark.range(0, 100, numPartitions=2).write.format("pds").option("store", url).mode("append").save("self")
    src = spark.read.format("pds").option("store", url).load("self")
    src.where("id % 2 = 0").write.format("pds").option("store", url).mode("overwrite").save("self")
    ids = pds.ParquetDatasetStore(store).read_dataset("self").column("id").to_pylist()
    assert sorted(ids) == list(range(0, 100, 2))
    check_dataset(
        store,
        "self",
        pa.table({"id": pa.array(sorted(ids), pa.int64())}, schema=pa.schema([("id", pa.int64(), False)])),
    )


# -- retries and failures ----------------------------------------------------------------


@pytest.mark.spec("SPARK-004")
def test_a_retried_task_leaves_no_duplicate_or_leftover_parts(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store], tmp_path: Path
) -> None:
    """Partition 1 uploads its parts, then fails; its retry's parts are the ones committed."""
    url, _, store = file_store
    markers = tmp_path / "markers"
    markers.mkdir()
    table = rich_table(300)
    df = spark_df(spark, table)
    (
        df.write.format("pds_flaky")
        .option("store", url)
        .option("marker_dir", str(markers))
        .option("max_rows_per_file", 30)
        .mode("append")
        .save("retried")
    )
    failed = failed_attempt_parts(markers)
    assert failed, "the first attempt of partition 1 uploaded parts before failing"
    manifest = check_dataset(store, "retried", table.cast(written_schema(df)))  # exact rows, no extra files
    assert not set(failed) & set(manifest.parts)
    assert not set(failed) & dataset_files(store, "retried")


@pytest.mark.spec("SPARK-004")
def test_a_failed_job_leaves_no_success_and_no_parts(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store], tmp_path: Path
) -> None:
    url, _, store = file_store
    markers = tmp_path / "markers"
    markers.mkdir()
    df = spark_df(spark, rich_table(120))

    def failing(key: str, mode: str) -> None:
        with pytest.raises(Exception, match="injected failure"):
            (
                df.write.format("pds_flaky")
                .option("store", url)
                .option("fail", "always")
                .option("marker_dir", str(markers))
                .mode(mode)
                .save(key)
            )

    failing("doomed", "append")
    assert len(failed_attempt_parts(markers)) >= 2  # both attempts uploaded parts
    assert dataset_files(store, "doomed") == set()  # abort removed every part of the job
    assert not pds.ParquetDatasetStore(store).dataset_exists("doomed")

    # A failed overwrite leaves the dataset it would have replaced intact.
    keep = rich_table(30, offset=500)
    keep_df = spark_df(spark, keep)
    keep_df.write.format("pds").option("store", url).mode("append").save("kept")
    failing("kept", "overwrite")
    check_dataset(store, "kept", keep.cast(written_schema(keep_df)))


@pytest.mark.spec("SPARK-004")
def test_commit_takes_one_attempt_per_partition_and_abort_removes_all(tmp_path: Path) -> None:
    """Speculative duplicates (two attempts of one partition) as the driver sees them, without Spark."""
    store = pds.open_store(tmp_path.as_uri())
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    job = WriteJob.start(store, "spec", schema, WriteSettings(max_rows_per_file=5), overwrite=False)
    rows = pa.record_batch({"id": pa.array(range(12), pa.int64())}).cast(schema)
    first = job.write_task([rows], identity=(0, 0, 100, 1))
    duplicate = job.write_task([rows], identity=(0, 1, 101, 1))
    other = job.write_task([pa.record_batch({"id": pa.array([99], pa.int64())})], identity=(1, 0, 102, 1))
    empty = job.write_task([], identity=(2, 0, 103, 1))
    assert len(first.parts) == 3
    assert not empty.parts
    assert not {p.name for p in first.parts} & {p.name for p in duplicate.parts}
    with pytest.raises(RuntimeError, match="two task attempts"):
        job.commit([first, duplicate, other, empty])
    manifest = job.commit([other, duplicate, empty])
    assert manifest.parts == [p.name for p in (*duplicate.parts, *other.parts)]
    check_dataset(store, "spec", pa.table({"id": pa.array([*range(12), 99], pa.int64())}, schema=schema))

    doomed = WriteJob.start(store, "doomed", schema, WriteSettings(), overwrite=False)
    written = doomed.write_task([rows], identity=(0, 0, 7, 1))
    doomed.write_task([rows], identity=(1, 0, 8, 1))  # a failed attempt: the driver never hears of it
    assert len({f for f in dataset_files(store, "doomed") if f.startswith("part-")}) == 2
    assert "_WRITING" in dataset_files(store, "doomed")  # the job's claim on the key
    doomed.abort([written, None])
    assert dataset_files(store, "doomed") == set()

    # A task still being killed may finish its upload after the first sweep: abort keeps
    # sweeping until the job's prefix has stayed empty for its settle time.
    late = WriteJob.start(store, "late", schema, WriteSettings(), overwrite=False)
    timer = threading.Timer(0.4, lambda: late.write_task([rows], identity=(3, 0, 9, 1)))
    timer.start()
    late.abort([], settle=1.0)
    timer.join()
    assert dataset_files(store, "late") == set()


@pytest.mark.spec("SPARK-005")
def test_repeated_jobs_in_forked_workers(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    """The Rust runtime works in every (forked, reused) Python worker, job after job."""
    url, _, store = file_store
    for i in range(3):
        spark.range(0, 50 + i, numPartitions=2).write.format("pds").option("store", url).mode("append").save(f"r{i}")
        assert spark.read.format("pds").option("store", url).load(f"r{i}").count() == 50 + i
    assert [pds.ParquetDatasetStore(store).read_manifest(f"r{i}").row_count for i in range(3)] == [50, 51, 52]


# -- reading: projection and filters ---------------------------------------------------------


@pytest.mark.spec("SPARK-006")
def test_projection(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    url, _, _ = file_store
    table = rich_table(100)
    df = spark_df(spark, table)
    df.write.format("pds").option("store", url).mode("append").save("p")
    expected = table.cast(written_schema(df))

    def read() -> Any:
        return spark.read.format("pds").option("store", url)

    by_option = read().option("columns", "s, id").load("p")
    assert by_option.columns == ["s", "id"]
    assert spark_rows(by_option, expected.select(["s", "id"]).schema).equals(by_id(expected.select(["s", "id"])))

    by_schema = read().schema("id BIGINT, d DATE").load("p")
    assert spark_rows(by_schema, expected.select(["id", "d"]).schema).equals(by_id(expected.select(["id", "d"])))

    with pytest.raises(Exception, match="unknown column"):
        read().option("columns", json.dumps(["id", "nope"])).load("p")


FILTER_CASES = [
    # (Spark SQL predicate, the same predicate in pyarrow, with Spark's NaN rules, pushed entirely?)
    ("id = 17", pc.field("id") == 17, True),
    ("i32 > 30 AND i32 <= 90", (pc.field("i32") > 30) & (pc.field("i32") <= 90), True),
    ("s IN ('s1', 's4')", pc.field("s").isin(["s1", "s4"]), True),
    ("s NOT IN ('s1', 's4')", pc.field("s").is_valid() & ~pc.field("s").isin(["s1", "s4"]), True),
    ("s IS NULL OR id = 3", pc.field("s").is_null() | (pc.field("id") == 3), False),
    ("s IS NOT NULL AND s <> 's2'", pc.field("s").is_valid() & (pc.field("s") != "s2"), True),
    ("f < 5.5", pc.field("f") < 5.5, True),
    ("f > 20", (pc.field("f") > 20) | pc.is_nan(pc.field("f")), False),  # Spark: NaN > 20
    ("d >= DATE'2024-02-10'", pc.field("d") >= pa.scalar(datetime.date(2024, 2, 10)), True),
    (
        "ts < TIMESTAMP'2023-11-16 12:00:00'",  # session time zone: America/New_York
        pc.field("ts") < pa.scalar(datetime.datetime(2023, 11, 16, 17, 0, tzinfo=datetime.UTC)),
        True,
    ),
    (
        "dec <= CAST(3.5 AS DECIMAL(10, 2))",
        pc.field("dec") <= pa.scalar(decimal.Decimal("3.50"), pa.decimal128(10, 2)),
        True,
    ),
    ("b", pc.field("b") == True, True),  # noqa: E712 - an Arrow expression
    ("s LIKE 's1%'", pc.starts_with(pc.field("s"), "s1"), False),
]


@pytest.fixture(scope="module")
def filter_data(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pa.Table]:
    """A dataset with NaN and null floats, for the filter tests."""
    url = tmp_path_factory.mktemp("filters").as_uri()
    table = rich_table(240).set_column(
        2, "f", pa.array([float("nan") if i % 11 == 0 else (None if i % 13 == 0 else i / 4) for i in range(240)])
    )
    spark_df(spark, table).write.format("pds").option("store", url).option("max_rows_per_file", 40).mode("append").save(
        "f"
    )
    return url, table


@pytest.mark.spec("SPARK-007")
@pytest.mark.parametrize(("predicate", "expression", "pushed"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filters_match_pyarrow(
    spark: SparkSession, filter_data: tuple[str, pa.Table], predicate: str, expression: pc.Expression, pushed: bool
) -> None:
    """Spark's answer with pushdown equals pyarrow's on the same data; pushable filters leave no Filter node."""
    url, table = filter_data
    want = sorted(table.filter(expression).column("id").to_pylist())
    spark.conf.set(PUSHDOWN, "true")
    try:
        df = spark.read.format("pds").option("store", url).option("pushFilters", "true").load("f").where(predicate)
        got = sorted(r.id for r in df.select("id").collect())
        plan = plan_of(df)
    finally:
        spark.conf.unset(PUSHDOWN)
    assert got == want
    assert ("Filter " in plan) != pushed, plan


@pytest.mark.spec("SPARK-007")
def test_filters_without_pushdown(spark: SparkSession, filter_data: tuple[str, pa.Table]) -> None:
    """PySpark's default (no pushdown): Spark filters the rows the reader returns."""
    url, table = filter_data
    predicate = " OR ".join(f"({c[0]})" for c in FILTER_CASES[1:4])
    expression = FILTER_CASES[1][1] | FILTER_CASES[2][1] | FILTER_CASES[3][1]
    df = spark.read.format("pds").option("store", url).load("f").where(predicate)
    assert "Filter " in plan_of(df)
    assert sorted(r.id for r in df.select("id").collect()) == sorted(table.filter(expression).column("id").to_pylist())


@pytest.mark.spec("SPARK-007")
def test_push_filters_needs_the_spark_conf(spark: SparkSession, filter_data: tuple[str, pa.Table]) -> None:
    url, _ = filter_data
    with pytest.raises(Exception, match="filterPushdown"):
        spark.read.format("pds").option("store", url).option("pushFilters", "true").load("f").where("id = 1").collect()


@pytest.mark.spec("SPARK-007")
def test_filters_option(spark: SparkSession, filter_data: tuple[str, pa.Table]) -> None:
    """The ``filters`` option is applied by the read tasks, with or without Spark's pushdown."""
    url, table = filter_data
    filters = [("d", ">=", datetime.date(2024, 3, 1)), ("s", "in", ["s2", "s3"]), ("i32", "is_not_null", None)]
    df = spark.read.format("pds").option("store", url).option("filters", filters_to_json(filters)).load("f")
    want = apply_filter_tuples(table, filters)
    assert sorted(r.id for r in df.select("id").collect()) == sorted(want.column("id").to_pylist())
    assert want.num_rows > 0


TUPLE_CASES = [
    [("id", "==", 17)],
    [("i32", ">", 30), ("i32", "<=", 90)],
    [("s", "in", ["s1", "s4"])],
    [("s", "not in", ["s1", "s4"])],
    [("s", "is_null", None)],
    [("s", "is_not_null", None), ("s", "!=", "s2")],
    [("f", "<", 5.5)],
    [("f", ">", 20.0)],  # NaN rows excluded, as pyarrow says (Spark SQL would keep them)
    [("f", "!=", 2.5)],  # NaN rows kept, as pyarrow says (Spark SQL would too; nulls dropped)
    [("f", "==", 2.5)],
    [("d", ">=", datetime.date(2024, 2, 10))],
    [("ts", "<", datetime.datetime(2023, 11, 16, 17, 0, tzinfo=datetime.UTC))],
    [("dec", "<=", decimal.Decimal("3.5"))],
    [("b", "==", True), ("bin", "!=", bytes([3, 7]))],
    # Values the column cannot hold: compared exactly, by every engine alike.
    [("id", ">=", 17.5)],
    [("id", "!=", 2.5)],
    [("id", "==", 2.5)],
    [("i32", "<", 2**40)],
    [("id", ">", -(2**70))],
    [("id", "in", [1, 1.5, 2**70, 3])],
    [("dec", "<", decimal.Decimal("3.555"))],
]


@pytest.mark.spec("SPARK-007")
@pytest.mark.parametrize("filters", TUPLE_CASES, ids=[repr(c) for c in TUPLE_CASES])
def test_engine_spark_filter_tuples_match_pyarrow(
    spark: SparkSession, filter_data: tuple[str, pa.Table], filters: list[tuple[str, str, Any]]
) -> None:
    """Tuples on Spark's reader give the same rows as on the pds reader and in pyarrow, NaN included."""
    url, table = filter_data
    want = sorted(apply_filter_tuples(table, filters).column("id").to_pylist())
    native = pds.spark.read_dataset(spark, url, "f", columns=["id"], filter=filters, engine="spark")
    assert "PythonDataSource" not in plan_of(native)
    assert sorted(r.id for r in native.collect()) == want
    ours = pds.spark.read_dataset(spark, url, "f", columns=["id"], filter=filters)
    assert sorted(r.id for r in ours.collect()) == want
    plain = pds.ParquetDatasetStore(pds.open_store(url)).read_dataset("f", columns=["id"], filter=filters)
    assert sorted(plain.column("id").to_pylist()) == want


@pytest.mark.spec("SPARK-006")
def test_engine_spark_reads_one_commit_with_spark_parquet(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    """Only the manifest's parts are read (a stray part in the folder is not), in the manifest's schema."""
    url, _, store = file_store
    table = rich_table(150)
    df = spark_df(spark, table)
    pds.spark.write_dataset(df, url, "n", max_rows_per_file=40)
    expected = table.cast(written_schema(df))
    stray = rich_table(5, offset=1000)
    pds.ParquetDatasetStore(store).write_dataset(stray.cast(written_schema(df)), "other")
    other = pds.ParquetDatasetStore(store).read_manifest("other").parts[0]
    store.copy(f"other/{other}", "n/part-99999-stray.parquet")

    back = pds.spark.read_dataset(spark, url, "n", engine="spark")
    plan = plan_of(back)
    assert "FileScan parquet" in plan and "PythonDataSource" not in plan, plan
    assert back.count() == 150
    assert spark_rows(back, expected.schema).equals(by_id(expected))
    assert all(f.nullable for f in back.schema.fields)

    some = pds.spark.read_dataset(
        spark, url, "n", columns=["s", "id"], filter="id < 10 AND s IS NOT NULL", engine="spark"
    )
    assert some.columns == ["s", "id"]
    want = table.filter((pc.field("id") < 10) & pc.field("s").is_valid())
    assert sorted(r.id for r in some.collect()) == sorted(want.column("id").to_pylist())
    assert "PushedFilters: [" in plan_of(some)


def test_engine_spark_checks_before_reading(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    url, _, store = file_store
    spark_df(spark, rich_table(10)).write.format("pds").option("store", url).mode("append").save("x[1]")
    store.delete("x[1]/_SUCCESS")
    with pytest.raises(DatasetIncomplete):
        pds.spark.read_dataset(spark, url, "x[1]", engine="spark")
    pds.spark.write_dataset(spark_df(spark, rich_table(10)), url, "g[1]")
    with pytest.raises(ValueError, match="glob"):
        pds.spark.read_dataset(spark, url, "g[1]", engine="spark")
    assert pds.spark.read_dataset(spark, url, "g[1]").count() == 10  # the pds engine reads it
    with pytest.raises(ValueError, match="unknown column"):
        pds.spark.read_dataset(spark, url, "g[1]", columns=["nope"], engine="spark")
    with pytest.raises(ValueError, match="engine"):
        pds.spark.read_dataset(spark, url, "g[1]", engine="arrow")  # type: ignore[arg-type]


def test_engine_spark_on_escaped_roots_child_stores_and_uint64(spark: SparkSession, tmp_path: Path) -> None:
    """A file:// root with %20 and a child store resolve to the same files pds wrote; uint64 values
    above 2**63 compare exactly; string dates filter as with the pds engine."""
    root = tmp_path / "my lake"
    url = root.as_uri()  # file:///.../my%20lake
    assert "%20" in url
    store = pds.open_store(url).child("team a")
    big = 2**63 + 5
    table = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "u": pa.array([1, 2, big - 1, big, big + 1, None], pa.uint64()),
            "d": pa.array([datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in range(6)], pa.date32()),
        }
    )
    pds.ParquetDatasetStore(store, max_rows_per_file=2).write_dataset(table, "t")
    assert (root / "team a" / "t" / "_SUCCESS").exists()
    native = pds.spark.read_dataset(spark, store, "t", engine="spark")
    assert sorted(r.id for r in native.collect()) == list(range(6))
    cases: list[tuple[list[tuple[str, str, Any]], list[int]]] = [
        ([("u", ">=", big)], [3, 4]),
        ([("d", ">=", "2024-01-04")], [3, 4, 5]),  # a string, parsed by the column's type
        ([("u", "in", [big - 1, 2])], [1, 2]),
    ]
    for filters, want in cases:
        got = pds.spark.read_dataset(spark, store, "t", columns=["id"], filter=filters, engine="spark")
        assert sorted(r.id for r in got.collect()) == want, filters
        ours = pds.spark.read_dataset(spark, store, "t", columns=["id"], filter=filters)
        assert sorted(r.id for r in ours.collect()) == want, filters


def test_engine_spark_refuses_what_spark_parquet_cannot_read(spark: SparkSession, tmp_path: Path) -> None:
    url = tmp_path.as_uri()
    datasets = pds.ParquetDatasetStore(pds.open_store(url))
    datasets.write_dataset(pa.table({"t": pa.array([1000, 2000], pa.timestamp("ns"))}), "ns")
    with pytest.raises(ValueError, match=r"cannot read column\(s\) t \(timestamp\[ns\]\)"):
        pds.spark.read_dataset(spark, url, "ns", engine="spark")
    assert pds.spark.read_dataset(spark, url, "ns").count() == 2  # the pds engine reads it
    datasets.write_dataset(pa.table({"a": [1], "A": [2]}), "case")
    with pytest.raises(ValueError, match="differ only in case"):
        pds.spark.read_dataset(spark, url, "case", engine="spark")


def test_byte_cap_nesting_and_refusals(spark: SparkSession, caplog: pytest.LogCaptureFixture) -> None:
    """Nested pds jobs share the lifted cap; a session that refuses the conf only logs."""
    from pds.spark._arrow_conf import arrow_byte_cap_lifted

    with arrow_byte_cap_lifted(spark) as outer:
        assert outer
        with arrow_byte_cap_lifted(spark) as inner:
            assert inner
        assert spark.conf.get(MAX_BYTES_PER_BATCH, None) == UNCAPPED
    assert spark.conf.get(MAX_BYTES_PER_BATCH, None) is None

    class Refusing:
        """A conf that fails the way a stopped session or a locked-down cluster does."""

        def get(self, key: str, default: object = None) -> object:
            return None

        def set(self, key: str, value: str) -> None:
            raise RuntimeError("conf is read-only here")

        def unset(self, key: str) -> None:
            raise RuntimeError("conf is read-only here")

    class Session:
        conf = Refusing()

    with arrow_byte_cap_lifted(Session()) as lifted:  # type: ignore[arg-type]
        assert not lifted
    assert "could not set" in caplog.text

    class NoUnset(Refusing):
        """Takes the value, then fails to restore it: the job's outcome must not change."""

        value: object = None

        def get(self, key: str, default: object = None) -> object:
            return self.value

        def set(self, key: str, value: str) -> None:
            self.value = value

    class Session2:
        conf = NoUnset()

    with arrow_byte_cap_lifted(Session2()) as lifted:  # type: ignore[arg-type]
        assert lifted
        assert Session2.conf.value == UNCAPPED
    assert "could not restore" in caplog.text


@pytest.mark.spec("SPARK-006")
def test_a_single_part_is_read_one_row_group_per_partition(spark: SparkSession, tmp_path: Path) -> None:
    """A one-part dataset (ParquetDatasetStore's default) spreads over tasks by row group."""
    url = tmp_path.as_uri()
    table = rich_table(1000)
    pds.ParquetDatasetStore(pds.open_store(url), row_group_size=100).write_dataset(table, "one")

    def load(split: str | None = None) -> DataFrame:
        reader = spark.read.format("pds").option("store", url)
        return (reader if split is None else reader.option("splitRowGroups", split)).load("one")

    auto = load()
    assert auto.rdd.getNumPartitions() == 10
    assert spark_rows(auto, table.schema).equals(by_id(table))
    assert load("false").rdd.getNumPartitions() == 1
    assert spark_rows(load("false"), table.schema).equals(by_id(table))
    filters = [("id", ">=", 250), ("id", "<", 420), ("f", "<", 90.0)]
    pruned = spark.read.format("pds").option("store", url).option("filters", filters_to_json(filters)).load("one")
    want = apply_filter_tuples(table, filters)
    assert sorted(r.id for r in pruned.select("id").collect()) == sorted(want.column("id").to_pylist())
    with pytest.raises(Exception, match="splitRowGroups"):
        load("sometimes").collect()

    many = tmp_path / "many"
    spark_df(spark, rich_table(200), partitions=8).write.format("pds").option("store", many.as_uri()).option(
        "row_group_size", 10
    ).mode("append").save("m")
    info = pds.ParquetDatasetStore(pds.open_store(many.as_uri())).read_manifest("m").part_info
    assert info is not None
    parts = len([p for p in info if p.row_count])
    assert parts >= 8
    df = spark.read.format("pds").option("store", many.as_uri()).load("m")
    assert df.rdd.getNumPartitions() == parts  # enough parts: one partition each, no footer reads
    assert df.count() == 200
    split = spark.read.format("pds").option("store", many.as_uri()).option("splitRowGroups", "true").load("m")
    assert split.rdd.getNumPartitions() == sum(-(-p.row_count // 10) for p in info)
    assert split.count() == 200


# -- mapInArrow helpers ------------------------------------------------------------------------


@pytest.mark.spec("SPARK-008")
@pytest.mark.s3
@pytest.mark.parametrize("kind", REMOTE)
def test_helpers_roundtrip_on_a_server(spark: SparkSession, kind: str, request: pytest.FixtureRequest) -> None:
    url, options, store = request.getfixturevalue(f"{kind}_store")
    table = rich_table(180)
    df = spark_df(spark, table)
    manifest = pds.spark.write_dataset(df, url, "h", max_rows_per_file=40, run_id="r1", **options)
    assert manifest == pds.ParquetDatasetStore(store).read_manifest("h")
    assert manifest.run_id == "r1"
    assert len(manifest.parts) >= 5
    expected = table.cast(written_schema(df))
    check_dataset(store, "h", expected)

    back = pds.spark.read_dataset(spark, url, "h", **options)
    assert spark_rows(back, expected.schema).equals(by_id(expected))
    some = pds.spark.read_dataset(
        spark,
        url,
        "h",
        columns=["id", "s"],
        filter=[("d", "<", datetime.date(2024, 2, 1)), ("s", "!=", "s3")],
        **options,
    )
    want = apply_filter_tuples(expected, [("d", "<", datetime.date(2024, 2, 1)), ("s", "!=", "s3")]).select(["id", "s"])
    assert some.columns == ["id", "s"]
    assert spark_rows(some, want.schema).equals(by_id(want))


@pytest.mark.spec("SPARK-008")
def test_helpers_with_a_store_and_modes(spark: SparkSession, tmp_path: Path) -> None:
    store = pds.open_store((tmp_path / "lake").as_uri()).child("team")
    df = spark_df(spark, rich_table(60))
    pds.spark.write_dataset(df, store, "x")
    with pytest.raises(pds.errors.AlreadyExists, match="write-once"):
        pds.spark.write_dataset(df, store, "x")
    table = rich_table(25, offset=100)
    df2 = spark_df(spark, table)
    pds.spark.write_dataset(df2, store, "x", mode="overwrite", compression="lz4")
    manifest = check_dataset(store, "x", table.cast(written_schema(df2)))
    assert manifest.compression == "lz4"
    assert (tmp_path / "lake" / "team" / "x" / "_SUCCESS").exists()
    back = pds.spark.read_dataset(spark, store, "x", columns=["id"], filter="i32 IS NULL OR id < 103")
    want = table.filter(pc.field("i32").is_null() | (pc.field("id") < 103)).column("id").to_pylist()
    assert sorted(r.id for r in back.collect()) == sorted(want)
    with pytest.raises(ValueError, match="contradicts"):
        pds.spark.write_dataset(df2, store, "y", mode="append", overwrite=True)


@pytest.mark.spec("SPARK-008")
def test_helper_write_survives_a_task_retry(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store], tmp_path: Path
) -> None:
    """The first attempt of partition 1 fails mid-stream, after some of its parts were uploaded."""
    url, _, store = file_store
    table = rich_table(200)
    marker = str(tmp_path / "injected")
    src = spark_df(spark, table)
    df = src.mapInArrow(fail_once_mid_stream(marker), src.schema)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        pds.spark.write_dataset(df, url, "retry", max_rows_per_file=10)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert Path(marker).exists()
    check_dataset(store, "retry", table.cast(written_schema(df)))


def _tasks_byte_cap(spark: SparkSession, url: str, key: str) -> set[str | None]:
    """Write with the helper; return the byte cap the job's tasks saw (as a column of the data)."""

    def tag(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        assert ctx is not None
        seen = ctx.getLocalProperty(MAX_BYTES_PER_BATCH)
        for batch in batches:
            yield pa.RecordBatch.from_pydict(
                {"id": batch.column(0), "cap": pa.array([seen] * batch.num_rows, pa.string())}
            )

    schema = StructType([StructField("id", LongType(), False), StructField("cap", StringType(), True)])
    df = spark.range(0, 40, numPartitions=2).mapInArrow(tag, schema)
    pds.spark.write_dataset(df, url, key)
    table = pds.ParquetDatasetStore(pds.open_store(url)).read_dataset(key)
    assert table.num_rows == 40
    return set(table.column("cap").to_pylist())


def test_helper_lifts_the_arrow_byte_cap_only_for_its_job(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    """Unset: lifted while the job runs, unset again after. Set by the user: kept."""
    url, _, _ = file_store
    assert spark.conf.get(MAX_BYTES_PER_BATCH, None) is None
    assert _tasks_byte_cap(spark, url, "lifted") == {UNCAPPED}
    assert spark.conf.get(MAX_BYTES_PER_BATCH, None) is None
    spark.conf.set(MAX_BYTES_PER_BATCH, "1000000")
    try:
        assert _tasks_byte_cap(spark, url, "kept") == {"1000000"}
        assert spark.conf.get(MAX_BYTES_PER_BATCH) == "1000000"
    finally:
        spark.conf.unset(MAX_BYTES_PER_BATCH)


def test_helper_restores_the_byte_cap_when_the_job_fails(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    url, _, _ = file_store

    def boom(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        raise RuntimeError("injected failure")
        yield from batches

    df = spark.range(0, 10, numPartitions=1).mapInArrow(boom, "id long")
    with pytest.raises(Exception, match="injected failure"):
        pds.spark.write_dataset(df, url, "failed")
    assert spark.conf.get(MAX_BYTES_PER_BATCH, None) is None


@pytest.mark.spec("SPARK-008")
def test_helper_write_failure_cleans_up(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    url, _, store = file_store

    def always_fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        assert ctx is not None
        for batch in batches:
            if ctx.partitionId() == 1:
                raise RuntimeError("injected failure")
            yield batch

    src = spark_df(spark, rich_table(90))
    spark.sparkContext.setJobGroup("callers-group", "the caller's own job group")
    try:
        with pytest.raises(Exception, match="injected failure"):
            pds.spark.write_dataset(src.mapInArrow(always_fail, src.schema), url, "gone")
        assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") == "callers-group"
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert dataset_files(store, "gone") == set()


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.spec("SPARK-009")
def test_reading_an_uncommitted_dataset_fails(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    url, _, store = file_store
    with pytest.raises(Exception, match="DatasetIncomplete"):
        spark.read.format("pds").option("store", url).load("missing")
    spark.range(4).write.format("pds").option("store", url).mode("append").save("half")
    store.delete("half/_SUCCESS")
    with pytest.raises(Exception, match="_SUCCESS"):
        spark.read.format("pds").option("store", url).load("half").collect()


@pytest.mark.spec("SPARK-009")
def test_bad_options_fail_before_any_task(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    url, _, store = file_store

    def write() -> Any:
        return spark.range(3).write.format("pds").mode("append")

    with pytest.raises(Exception, match=r"needs \.option"):
        write().save("a")
    with pytest.raises(Exception, match="memory://"):
        write().option("store", "memory://").save("a")
    with pytest.raises(Exception, match="compression codec"):
        write().option("store", url).option("compression", "zip").save("a")
    with pytest.raises(Exception, match="unknown S3 option"):
        write().option("store", "s3://bucket/x").option("secret_acess_key", "hunter2").save("a")
    assert dataset_files(store, "a") == set()


@pytest.mark.spec("SPARK-009")
def test_credentials_are_not_in_reprs_or_errors(spark: SparkSession) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    with pytest.raises(Exception, match="unknown S3 option") as info:
        spark.range(3).write.format("pds").mode("append").option("store", "s3://bucket/x").option(
            "secret_access_key", secret
        ).option("bogus", "1").save("a")
    assert secret not in str(info.value)
    s = spark_store("s3://bucket/x", secret_access_key=secret, access_key_id="AK", region="r")
    assert secret not in repr(s)
    assert secret not in repr(s.unwrap(pds.ObjectStoreBackend))


def _with_marked_secrets(kind: str, options: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """*options* with secrets that carry unique markers, and the markers: on
    S3 the secret key; on GCS a bearer token and the key JSON's private key
    (the emulator reads neither)."""
    if kind == "s3":
        return options, [options["secret_access_key"]]
    markers = ["tok-" + uuid.uuid4().hex, "pk-" + uuid.uuid4().hex]
    key = {**json.loads(options["service_account_key"]), "private_key": markers[1]}
    return {**options, "token": markers[0], "service_account_key": json.dumps(key)}, markers


@pytest.mark.s3
@pytest.mark.spec("H-5")
@pytest.mark.parametrize("kind", REMOTE)
def test_credentials_are_not_in_spark_plans(spark: SparkSession, kind: str, request: pytest.FixtureRequest) -> None:
    """Spark's plans (what the UI and event log record) do not carry the source's secret options."""
    url, options, _ = request.getfixturevalue(f"{kind}_store")
    options, secrets = _with_marked_secrets(kind, options)
    spark.range(4).write.format("pds").option("store", url).options(**options).mode("append").save("r")
    df = spark.read.format("pds").option("store", url).options(**options).load("r").where("id > 1")
    assert df.count() == 2
    qe = df._jdf.queryExecution()
    plans = [qe.toString(), qe.executedPlan().toString(), qe.analyzed().toString()]
    assert all("RelationV2" in text for text in plans[::2])
    assert all(secret not in text for text in plans for secret in secrets)


EVENT_LOGGED_JOB = r"""
import json, sys
from pyspark.sql import SparkSession
import pds.spark

log_dir, jobs = sys.argv[1], json.loads(sys.argv[2])
spark = (
    SparkSession.builder.master("local[2]").appName("pds-event-log")
    .config("spark.ui.enabled", "false").config("spark.eventLog.enabled", "true")
    .config("spark.eventLog.dir", log_dir).config("spark.eventLog.compress", "false")
    .getOrCreate()
)
for url, options in jobs:
    spark.range(5).write.format("pds").option("store", url).options(**options).mode("append").save("d")
    df = spark.read.format("pds").option("store", url).options(**options).load("d").where("id > 1")
    assert df.count() == 3
    df.explain("formatted")
    pds.spark.write_dataset(spark.range(3), url, "h", **options)
    assert pds.spark.read_dataset(spark, url, "h", **options).count() == 3
spark.stop()
print("done")
"""


@pytest.mark.s3
@pytest.mark.spec("H-5")
def test_credentials_are_not_in_the_event_log(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A Spark application with its event log on (what the history server
    shows: plans, SQL metrics, job and stage descriptions) writes and reads
    through ``format("pds")`` and the helpers on S3 and GCS: the log holds
    the scans' plans and none of the stores' secrets."""
    jobs, secrets = [], []
    for kind in REMOTE:
        url, options, _ = request.getfixturevalue(f"{kind}_store")
        options, marked = _with_marked_secrets(kind, options)
        jobs.append((url, options))
        secrets += marked
    log_dir = tmp_path / "events"
    log_dir.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", EVENT_LOGGED_JOB, log_dir.as_uri(), json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-3000:]
    logged = "".join(p.read_text(errors="replace") for p in log_dir.rglob("*") if p.is_file())
    assert "SparkListenerSQLExecutionStart" in logged and "BatchScan pds" in logged
    assert all(secret not in logged for secret in secrets)
    assert all(secret not in done.stdout + done.stderr for secret in secrets)


@pytest.mark.spec("H-5")
def test_azure_store_urls_reach_the_rust_store_from_spark(spark: SparkSession) -> None:
    """``format("pds")`` and the helpers take ``az://`` / ``abfss://`` URLs
    with Azure options (no Azure server here: a refused option, and a
    connection refused by an empty port, show where they went), and never
    echo the account key."""
    key = base64.b64encode(uuid.uuid4().bytes * 4).decode()
    options = {"account": "devstoreaccount1", "account_key": key, "endpoint": "http://127.0.0.1:9/devstoreaccount1"}
    options |= {"allow_http": "true", "max_retries": "0"}
    with pytest.raises(Exception, match="unknown Azure option") as refused:
        spark.range(3).write.format("pds").option("store", "az://lake/x").options(**options).option("bogus", "1").mode(
            "append"
        ).save("a")
    with pytest.raises(Exception, match=r"127\.0\.0\.1:9") as unreachable:
        spark.read.format("pds").option("store", "abfss://lake/x").options(**options).load("a").count()
    with pytest.raises(Exception, match=r"127\.0\.0\.1:9") as helper:
        pds.spark.read_dataset(spark, "az://lake/x", "a", **options)
    for caught in (refused, unreachable, helper):
        assert key not in str(caught.value)


# -- discovery and translation (no Spark job) ------------------------------------------------------


@pytest.mark.spec("SPARK-001")
def test_pyspark_discovers_the_pds_source_without_registration() -> None:
    """PySpark's own lookup worker finds ``pyspark_pds.DefaultSource`` under the name "pds"."""
    from pyspark.serializers import read_int
    from pyspark.sql.worker import lookup_data_sources
    from pyspark.worker_util import pickleSer

    out = io.BytesIO()
    lookup_data_sources._main(io.BytesIO(), out)
    out.seek(0)
    found = {}
    for _ in range(read_int(out)):
        name = out.read(read_int(out)).decode("utf-8")
        found[name] = pickleSer._read_with_length(out)
    assert found.get("pds") is PdsDataSource


SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("u", pa.uint8()),
        ("f", pa.float64()),
        ("f32", pa.float32()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("ms")),
        ("dec", pa.decimal128(6, 2)),
        ("st", pa.struct([("a", pa.int32())])),
    ]
)
UTC_NOON = datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.UTC)


@pytest.mark.spec("SPARK-007")
@pytest.mark.parametrize(
    ("spark_filter", "expected"),
    [
        (sds.EqualTo(("i",), 3), ("i", "==", 3)),
        (sds.Not(sds.EqualTo(("s",), "x")), ("s", "!=", "x")),
        (sds.GreaterThan(("i",), 3), ("i", ">", 3)),
        (sds.LessThanOrEqual(("f",), 2.5), ("f", "<=", 2.5)),
        (sds.In(("s",), ("a", None, "b")), ("s", "in", ["a", "b"])),
        (sds.Not(sds.In(("i",), (1, 2))), ("i", "not in", [1, 2])),
        (sds.IsNull(("d",)), ("d", "is_null", None)),
        (sds.Not(sds.IsNull(("d",))), ("d", "is_not_null", None)),
        (sds.EqualNullSafe(("i",), None), ("i", "is_null", None)),
        (sds.EqualNullSafe(("i",), 4), ("i", "==", 4)),
        (sds.EqualTo(("b",), True), ("b", "==", True)),
        (sds.GreaterThanOrEqual(("d",), datetime.date(2024, 1, 2)), ("d", ">=", datetime.date(2024, 1, 2))),
        (sds.LessThan(("ts",), UTC_NOON), ("ts", "<", UTC_NOON)),
        (sds.EqualTo(("dec",), decimal.Decimal("1.5")), ("dec", "==", decimal.Decimal("1.50"))),
        (sds.EqualTo(("f32",), 0.5), ("f32", "==", 0.5)),
        # refused: Spark must evaluate these
        (sds.GreaterThan(("f",), 1.0), None),  # NaN > 1.0 in Spark
        (sds.EqualTo(("f",), float("nan")), None),
        (sds.EqualTo(("f32",), 0.1), None),  # not exact in float32
        (sds.Not(sds.In(("i",), (1, None))), None),
        (sds.EqualTo(("i",), 1.5), None),
        (sds.EqualTo(("i",), True), None),
        (sds.EqualTo(("b",), 1), None),
        (sds.EqualTo(("u",), -1), None),
        (sds.EqualTo(("ntz",), datetime.datetime(2024, 1, 1, 0, 0, 0, 1)), None),  # ms column
        (sds.EqualTo(("ntz",), UTC_NOON), None),  # zoned value, naive column
        (sds.EqualTo(("dec",), decimal.Decimal("1.555")), None),
        (sds.EqualTo(("st", "a"), 1), None),
        (sds.EqualTo(("nope",), 1), None),
        (sds.StringStartsWith(("s",), "a"), None),
        (sds.Not(sds.GreaterThan(("i",), 1)), None),
        (sds.EqualTo(("s",), None), None),
    ],
    ids=repr,
)
def test_translate_filter(spark_filter: Any, expected: tuple[str, str, Any] | None) -> None:
    assert translate_filter(spark_filter, SCHEMA) == expected
    assert spark_filters_to_tuples([spark_filter], SCHEMA) == ([] if expected is None else [expected])


@pytest.mark.spec("SPARK-007")
def test_split_for_core_keeps_float_conditions_in_pyarrow(tmp_path: Path) -> None:
    """The Rust core filters and prunes row groups; float conditions (IEEE total order there) stay in pyarrow."""
    t = pa.table(
        {
            "id": pa.array(range(100), pa.int64()),
            "f": pa.array([-0.0 if i % 10 == 0 else i / 2 for i in range(100)], pa.float64()),
            "s": pa.array([None if i % 3 == 0 else f"v{i % 4}" for i in range(100)]),
        }
    )
    filters = [("id", ">=", 20), ("s", "in", ["v1", "v2"]), ("f", "<=", 0.0), ("f", "!=", 45.5)]
    core, residual = split_for_core(filters, t.schema)
    assert [(c, op) for c, op, _ in core] == [("id", ">="), ("s", "in")]
    assert core[0][2] == pa.array([20], pa.int64())
    assert residual == [("f", "<=", 0.0), ("f", "!=", 45.5)]
    store = pds.open_store(tmp_path.as_uri())
    pds.ParquetDatasetStore(store, row_group_size=10).write_dataset(t, "t")
    rust = store.unwrap(pds._core.RustStore)
    part = pds.ParquetDatasetStore(store).read_manifest("t").parts[0]
    got = apply_filter_tuples(pds._core.read_part(rust, f"t/{part}", columns=["id", "f", "s"], filter=core), residual)
    want = apply_filter_tuples(t, filters)
    assert got.equals(want)
    assert want.num_rows > 0  # -0.0 <= 0.0, as Spark and pyarrow say


@pytest.mark.spec("SPARK-007")
def test_filter_tuples_evaluate_with_sql_nulls_and_json_round_trip() -> None:
    t = pa.table(
        {
            "i": pa.array([1, 2, None, 4], pa.int32()),
            "s": pa.array(["a", None, "c", "d"]),
            "d": pa.array([datetime.date(2024, 1, n) for n in (1, 2, 3, 4)]),
            "ts": pa.array([UTC_NOON + datetime.timedelta(hours=n) for n in range(4)], pa.timestamp("us", tz="UTC")),
            "dec": pa.array([decimal.Decimal(n) for n in range(4)], pa.decimal128(6, 2)),
            "bin": pa.array([b"x", b"y", b"z", None]),
        }
    )
    ids = lambda fs: apply_filter_tuples(t, fs).column("i").to_pylist()  # noqa: E731
    assert ids([("i", "not in", [1])]) == [2, 4]  # the null row is not "not in"
    assert ids([("i", "!=", 1)]) == [2, 4]
    assert ids([("s", "in", ["a", "d"])]) == [1, 4]
    assert ids([("s", "is_null", None)]) == [2]
    assert ids([("i", ">", 1), ("s", "is_not_null", None)]) == [4]
    filters = [
        ("d", ">", datetime.date(2024, 1, 1)),
        ("ts", "<=", UTC_NOON + datetime.timedelta(hours=2)),
        ("dec", "in", [decimal.Decimal(1), decimal.Decimal(2)]),
        ("bin", "==", b"y"),
    ]
    parsed = filters_from_json(filters_to_json(filters), t.schema)
    assert parsed == filters
    assert ids(parsed) == [2]
    with pytest.raises(ValueError, match="no column"):
        apply_filter_tuples(t, [("zz", "==", 1)])
    with pytest.raises(ValueError, match="unknown filter op"):
        apply_filter_tuples(t, [("i", "~", 1)])
    # A value the column cannot hold compares exactly: here, no row.
    assert apply_filter_tuples(t, filters_from_json(json.dumps([["i", "==", 2**40]]), t.schema)).num_rows == 0
    with pytest.raises(TypeError, match="does not compare"):
        filters_from_json(json.dumps([["i", "==", "x"]]), t.schema)


# -- tables (issue D-12) ------------------------------------------------------------


def _table_rows(n: int, offset: int = 0) -> pa.Table:
    ids = range(offset, offset + n)
    return pa.table({"id": pa.array(ids, pa.int64()), "customer": pa.array([f"c{i % 5}" for i in ids], pa.string())})


def _read_ids(spark: SparkSession, url: str, options: dict[str, str], key: str, **extra: Any) -> list[int]:
    reader = spark.read.format("pds").option("store", url)
    for k, v in {**options, **extra}.items():
        reader = reader.option(k, v)
    return sorted(r["id"] for r in reader.load(key).select("id").collect())


@pytest.mark.spec("D-12")
@pytest.mark.spec("S-5")
@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_spark_creates_appends_overwrites_and_time_travels_a_table(
    spark: SparkSession, kind: str, request: pytest.FixtureRequest
) -> None:
    url, options, store = request.getfixturevalue(f"{kind}_store")

    def write(rows: pa.Table, mode: str, **extra: str) -> None:
        w = spark_df(spark, rows).write.format("pds").option("store", url)
        for k, v in {**options, **extra}.items():
            w = w.option(k, v)
        w.mode(mode).save("events")

    write(_table_rows(100), "append", table="true", primary_key="id", row_group_size="10")
    t = pds.Table.open(store, "events")
    assert (t.version, t.primary_key) == (0, "id")
    assert t.files().num_rows == 2, "one file per task, one commit per job"
    write(_table_rows(50, offset=100), "append")  # the key holds a table: no option needed
    assert t.refresh() == 1
    assert _read_ids(spark, url, options, "events") == list(range(150))
    version = pds.spark.delete(url, "events", [("id", "<", 20)], **options)
    assert version == 2
    assert _read_ids(spark, url, options, "events") == list(range(20, 150))
    assert _read_ids(spark, url, options, "events", versionAsOf="1") == list(range(150))
    created = {h["version"]: h["created_at"] for h in t.history()}
    stamp = created[0].isoformat()
    assert _read_ids(spark, url, options, "events", timestampAsOf=stamp) == list(range(100))
    filtered = (
        spark.read.format("pds")
        .option("store", url)
        .options(**options)
        .option("filters", '[["id", ">=", 140]]')
        .load("events")
    )
    assert sorted(r["id"] for r in filtered.collect()) == list(range(140, 150))
    write(_table_rows(10, offset=1000), "overwrite")
    assert t.refresh() == 3
    assert t.history(1)[0]["operation"] == "overwrite"
    assert _read_ids(spark, url, options, "events") == list(range(1000, 1010))
    assert _read_ids(spark, url, options, "events", versionAsOf="2") == list(range(20, 150))
    # S-5: the change feed of the overwrite shows every row it replaced.
    feed = t.changes(3, 3).read_all()
    kinds = sorted(zip(feed["_change_type"].to_pylist(), feed["id"].to_pylist(), strict=True))
    assert kinds == [("delete", i) for i in range(20, 150)] + [("insert", i) for i in range(1000, 1010)]
    with pytest.raises(Exception, match="versionAsOf"):
        spark.read.format("pds").option("store", url).options(**options).option("versionAsOf", "x").load(
            "events"
        ).collect()


@pytest.mark.spec("D-12")
def test_a_retried_table_task_leaves_no_duplicate_and_no_orphan(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store], tmp_path: Path
) -> None:
    url, _, store = file_store
    markers = tmp_path / "markers"
    markers.mkdir()
    pds.Table.create(store, "t", _table_rows(1).schema)
    df = spark_df(spark, _table_rows(300))
    df.write.format("pds_flaky").option("store", url).option("marker_dir", str(markers)).mode("append").save("t")
    failed = failed_attempt_parts(markers)
    assert failed, "the first attempt of partition 1 uploaded files before failing"
    t = pds.Table.open(store, "t")
    assert t.version == 1
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(300))
    referenced = set(t.files().column("path").to_pylist())
    on_store = {k for k in dataset_files(store, "t") if k.startswith("data/")}
    assert on_store == referenced, "no orphan from the failed attempt"
    assert not set(failed) & referenced
    # A job that fails in every attempt commits nothing and leaves nothing.
    with pytest.raises(Exception, match="injected failure"):
        (
            df.write.format("pds_flaky")
            .option("store", url)
            .option("fail", "always")
            .option("marker_dir", str(markers))
            .mode("append")
            .save("t")
        )
    assert pds.Table.open(store, "t").version == 1
    assert {k for k in dataset_files(store, "t") if k.startswith("data/")} == referenced


# -- keys are exclusive; one writer per dataset key (issue #15, S-2 and S-3) ---------------------


def _all_objects(store: Store) -> dict[str, int]:
    listed, _ = store.unwrap(_core.RustStore).list("", recursive=True)
    return {o.key: o.size for o in listed}


@pytest.mark.spec("S-3")
def test_spark_writers_never_nest_keys(spark: SparkSession, file_store: tuple[str, dict[str, str], Store]) -> None:
    """Both Spark writers (dataset and table; data source and helper) refuse a key at, inside
    or around another kind's, before any task runs, and change nothing."""
    url, _, store = file_store
    data = pa.table({"id": pa.array([1, 2], pa.int64())})
    pds.Table.create(store, "t", data=data)
    pds.ParquetDatasetStore(store).write_dataset(data, "outer/d")
    pds.Pipeline.create(store, "p")
    df = spark_df(spark, rich_table(10))
    before = _all_objects(store)

    def save(key: str, mode: str, **options: str) -> None:
        df.write.format("pds").option("store", url).options(**options).mode(mode).save(key)

    with pytest.raises(AlreadyExists, match='inside the table at "t"'):
        pds.spark.write_dataset(df, url, "t/x")
    with pytest.raises(AlreadyExists, match="a pipeline is stored there"):
        pds.spark.write_dataset(df, url, "p", mode="overwrite")
    with pytest.raises(AlreadyExists, match='the dataset at "outer/d" lies inside it'):
        pds.spark.write_dataset(df, url, "outer", mode="overwrite")
    with pytest.raises(Exception, match=r'inside the pipeline at \\?"p\\?"'):
        save("p/x", "append")
    with pytest.raises(Exception, match="a dataset is stored there"):
        save("outer/d", "append", table="true")
    with pytest.raises(Exception, match=r'the dataset at \\?"outer/d\\?" lies inside it'):
        save("outer", "overwrite", table="true")
    with pytest.raises(Exception, match="a pipeline is stored there"):
        save("p", "append", table="true")
    assert _all_objects(store) == before
    # An append to the table still works.
    ids = spark_df(spark, pa.table({"id": pa.array([3, 4], pa.int64())}))
    ids.write.format("pds").option("store", url).mode("append").save("t")
    assert sorted(pds.Table.open(store, "t").to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]


class _Gate:
    """An Arrow stream for ``write_dataset`` that stops after its first batch until released."""

    def __init__(self, table: pa.Table, per_batch: int) -> None:
        self.batches = table.to_batches(max_chunksize=per_batch)
        self.schema = table.schema
        self.started = threading.Event()
        self.go = threading.Event()

    def reader(self) -> pa.RecordBatchReader:
        def gen() -> Iterator[pa.RecordBatch]:
            yield self.batches[0]
            self.started.set()
            assert self.go.wait(120)
            yield from self.batches[1:]

        return pa.RecordBatchReader.from_batches(self.schema, gen())


def _python_writer(
    store: Store, key: str, gate: _Gate, *, overwrite: bool = False
) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(
                pds.ParquetDatasetStore(store, max_rows_per_file=5).write_dataset(
                    gate.reader(), key, overwrite=overwrite
                )
            )
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.mark.spec("S-2")
def test_a_python_writer_holding_the_claim_makes_spark_writes_fail(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    url, _, store = file_store
    python_rows = pa.table({"id": pa.array(range(20), pa.int64())})
    gate = _Gate(python_rows, per_batch=5)
    thread, outcome = _python_writer(store, "k", gate)
    assert gate.started.wait(60)
    held = _all_objects(store)
    assert "k/_WRITING" in held
    df = spark_df(spark, pa.table({"id": pa.array(range(100, 110), pa.int64())}))
    with pytest.raises(AlreadyExists, match="in progress"):
        pds.spark.write_dataset(df, url, "k")
    with pytest.raises(Exception, match="AlreadyExists"):
        df.write.format("pds").option("store", url).mode("append").save("k")
    assert _all_objects(store) == held  # the Spark writes left nothing
    gate.go.set()
    thread.join(60)
    assert isinstance(outcome[0], pds.DatasetManifest), outcome
    back = pds.ParquetDatasetStore(store).read_dataset("k", verify=True)
    assert back.sort_by("id").equals(python_rows)
    assert not store.exists("k/_WRITING")


@pytest.mark.spec("S-2")
def test_spark_and_python_writers_racing_for_a_key_never_mix(
    spark: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    """Exactly one of the two writers commits, with its own rows only; the other
    gets AlreadyExists. Spark claims first, Python claims first, and an overwrite
    by Spark takes the key from a Python writer mid-write."""
    url, _, store = file_store
    python_rows = pa.table({"id": pa.array(range(20), pa.int64())})
    spark_rows_ = pa.table({"id": pa.array(range(100, 130), pa.int64())})
    df = spark_df(spark, spark_rows_, partitions=3)
    ours = pds.ParquetDatasetStore(store)

    def dataset(key: str) -> pa.Table:
        return ours.read_dataset(key, verify=True).sort_by("id")

    # 1. Spark claims first (its tasks take a second): the Python writer is
    # refused before it writes anything.
    def slowly(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time

        time.sleep(1.0)
        yield from batches

    slow_df = df.mapInArrow(slowly, df.schema)
    gate = _Gate(python_rows, per_batch=5)
    spark_outcome: list[Any] = []
    spark_thread = threading.Thread(target=lambda: spark_outcome.append(pds.spark.write_dataset(slow_df, url, "a")))
    spark_thread.start()
    for _ in range(600):
        if store.exists("a/_WRITING"):
            break
        threading.Event().wait(0.05)
    thread, outcome = _python_writer(store, "a", gate)
    gate.go.set()
    thread.join(60)
    spark_thread.join(120)
    assert isinstance(outcome[0], AlreadyExists), outcome
    assert isinstance(spark_outcome[0], pds.DatasetManifest), spark_outcome
    assert dataset("a").equals(spark_rows_.cast(dataset("a").schema))
    assert not store.exists("a/_WRITING")

    # 2. Both start at once, repeatedly: exactly one wins, with its rows only.
    for round_ in range(3):
        key = f"race{round_}"
        gate = _Gate(python_rows, per_batch=5)
        gate.go.set()
        barrier = threading.Barrier(2)
        results: dict[str, Any] = {}

        def spark_side(key: str = key, barrier: threading.Barrier = barrier, results: dict[str, Any] = results) -> None:
            barrier.wait()
            try:
                results["spark"] = pds.spark.write_dataset(df, url, key)
            except Exception as exc:  # noqa: BLE001 - inspected below
                results["spark"] = exc

        spark_thread = threading.Thread(target=spark_side)
        spark_thread.start()
        barrier.wait()
        try:
            results["python"] = pds.ParquetDatasetStore(store, max_rows_per_file=5).write_dataset(gate.reader(), key)
        except Exception as exc:  # noqa: BLE001 - inspected below
            results["python"] = exc
        spark_thread.join(120)
        won = {who for who, r in results.items() if isinstance(r, pds.DatasetManifest)}
        assert len(won) == 1, results
        loser = ({"spark", "python"} - won).pop()
        assert isinstance(results[loser], AlreadyExists), results
        expected = spark_rows_ if won == {"spark"} else python_rows
        got = dataset(key)
        assert got.equals(expected.cast(got.schema)), (won, got)
        assert not store.exists(f"{key}/_WRITING")

    # 3. A Spark overwrite takes the key from a Python writer that wrote its first
    # part and waits: Spark commits its rows only, the Python writer fails.
    gate = _Gate(python_rows, per_batch=5)
    thread, outcome = _python_writer(store, "b", gate)
    assert gate.started.wait(60)
    pds.spark.write_dataset(df, url, "b", mode="overwrite")
    gate.go.set()
    thread.join(60)
    assert isinstance(outcome[0], AlreadyExists), outcome
    got = dataset("b")
    assert got.equals(spark_rows_.cast(got.schema))
    assert not store.exists("b/_WRITING")
