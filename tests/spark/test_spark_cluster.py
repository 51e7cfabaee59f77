"""Every Spark path of pds on separate executors: Spark's ``local-cluster``
master (conftest's ``spark_cluster``: two executor JVMs of one core, each
with its own Python workers, as on a real cluster), not ``local[2]``, whose
tasks run inside the driver's JVM.

Each result is compared with the local engine's (pds without Spark) on the
same data: a dataset written and read through ``format("pds")`` and the
helpers; a table created, appended to and upserted; a pipeline built and
updated; task attempts failed on purpose (the retry's result equals the
local engine's, nothing duplicated, nothing left); a pipeline update whose
tasks' store requests (through the fault proxy) fail; and executors that
take their S3 credentials from their own environment, with none in the
tasks. The stores are SeaweedFS S3 (conftest).

The cluster session starts once for the run (20-90 s) and these tests run
after all others (conftest).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.sql import DataFrame, SparkSession
from remote_store import Store
from store_kinds import BUCKET, CLUSTER_MASTER, Faulty
from test_spark import (
    FlakyPdsDataSource,
    by_id,
    check_dataset,
    dataset_files,
    fail_once_mid_stream,
    failed_attempt_parts,
    rich_table,
    spark_rows,
    written_schema,
)
from test_spark_pipeline_faults import (
    KEY,
    STAGE,
    TASK_PART,
    Latched,
    base,
    check_committed,
    content,
    log_text,
    recompute,
    referenced,
)
from test_spark_pipeline_faults import build as build_faulty_case
from test_spark_pipeline_update import (
    EVENTS,
    KEYS,
    Model,
    check,
    declare,
    garbage,
    initial,
    local,
    on_spark,
)

import pds
import pds.spark

# The first test also starts the cluster (executor JVMs on a busy machine): a longer limit.
pytestmark = [pytest.mark.s3, pytest.mark.timeout(900)]

# The task functions below are defined here; executors get them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- where tasks run --------------------------------------------------------------------------


def executor_jvm() -> int:
    """The pid of the executor JVM this Python worker serves (its nearest
    ancestor running ``CoarseGrainedExecutorBackend``), or 0 if none is
    (a ``local`` master's workers serve the driver's JVM). Linux only."""
    pid = os.getpid()
    while pid > 1:
        if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return 0


def traced(marks: Path) -> Callable[[], None]:
    """A function for tasks: it records the task's executor JVM as a file
    ``jvm-<pid>`` in *marks* (a folder every executor reaches: one machine)."""
    folder = str(marks)

    def trace() -> None:
        Path(folder, f"jvm-{executor_jvm()}").touch()

    return trace


def jvms(marks: Path) -> set[int]:
    """The executor JVMs that :func:`traced` recorded in *marks*."""
    return {int(f.name.removeprefix("jvm-")) for f in marks.glob("jvm-*")}


def driver_jvm(spark: SparkSession) -> int:
    return int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]


def test_tasks_run_in_two_executor_jvms_with_their_own_python_workers(spark_cluster: SparkSession) -> None:
    """The session is what the other tests need: a local-cluster master,
    two executors, tasks spread over both, in JVMs other than the driver's,
    whose Python workers import the driver's pds."""
    assert spark_cluster.sparkContext.master == CLUSTER_MASTER

    def where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pds as worker_pds

        for batch in batches:
            yield pa.record_batch(
                {
                    "jvm": pa.array([executor_jvm()] * batch.num_rows, pa.int64()),
                    "python": pa.array([os.getpid()] * batch.num_rows, pa.int64()),
                    "pds": pa.array([worker_pds.__file__] * batch.num_rows, pa.string()),
                }
            )

    rows = spark_cluster.range(0, 80, numPartitions=8).mapInArrow(where, "jvm long, python long, pds string").collect()
    executors = {r.jvm for r in rows}
    assert len(executors) == 2 and 0 not in executors, f"tasks ran in {executors}"
    assert driver_jvm(spark_cluster) not in executors
    assert os.getpid() not in {r.python for r in rows}
    assert {r.pds for r in rows} == {pds.__file__}


# -- datasets ---------------------------------------------------------------------------------


def local_dataset(store: Store, key: str, table: pa.Table) -> pa.Table:
    """*table* written and read back by the local engine (no Spark)."""
    ours = pds.ParquetDatasetStore(store)
    ours.write_dataset(table, key)
    return ours.read_dataset(key)


def test_a_dataset_written_and_read_on_executors_equals_the_local_engines(
    spark_cluster: SparkSession, s3_store: tuple[str, dict[str, str], Store]
) -> None:
    url, options, store = s3_store
    table = rich_table(600)
    df = spark_cluster.createDataFrame(table).repartition(4, "id")
    want = local_dataset(store, "local", table.cast(written_schema(df)))

    df.write.format("pds").option("store", url).options(**options).option("max_rows_per_file", 100).mode("append").save(
        "source"
    )
    manifest = check_dataset(store, "source", want)
    assert len(manifest.parts) >= 4, "every task wrote parts"
    pds.spark.write_dataset(df, url, "helper", max_rows_per_file=100, **options)
    check_dataset(store, "helper", want)

    # Read by the executors: what the local engine wrote, and what Spark wrote.
    for key in ("local", "source"):
        back = spark_cluster.read.format("pds").option("store", url).options(**options).load(key)
        assert spark_rows(back, want.schema).equals(by_id(want)), key
    back = pds.spark.read_dataset(spark_cluster, url, "helper", **options)
    assert spark_rows(back, want.schema).equals(by_id(want))


# -- tables -----------------------------------------------------------------------------------


def orders(ids: range | list[int], tag: str) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "customer": pa.array([f"{tag}{i % 17}" for i in ids], pa.string()),
            "amount": pa.array([i * 0.5 for i in ids], pa.float64()),
        }
    )


def table_rows(store: Store, key: str) -> list[dict[str, Any]]:
    return by_id(pds.Table.open(store, key).to_arrow()).to_pylist()


def test_a_table_appended_upserted_and_read_on_executors_equals_the_local_engines(
    spark_cluster: SparkSession, s3_store: tuple[str, dict[str, str], Store]
) -> None:
    url, options, store = s3_store
    first, more, changed = (
        orders(range(300), "a"),
        orders(range(300, 520), "b"),
        orders([*range(250, 350, 3), 600], "c"),
    )
    twin = pds.Table.create(store, "local", data=first, primary_key="id")

    def spark_df(t: pa.Table) -> DataFrame:
        return spark_cluster.createDataFrame(t).repartition(3, "id")

    writer = spark_df(first).write.format("pds").option("store", url).options(**options)
    writer.option("table", "true").option("primary_key", "id").mode("append").save("events")
    assert table_rows(store, "events") == table_rows(store, "local")

    spark_df(more).write.format("pds").option("store", url).options(**options).mode("append").save("events")
    twin.append(more)
    assert table_rows(store, "events") == table_rows(store, "local")

    pds.spark.upsert(spark_df(changed), url, "events", **options)
    twin.upsert(changed)
    rows = table_rows(store, "events")
    assert rows == table_rows(store, "local")
    assert len(rows) == 521 and len({r["id"] for r in rows}) == 521, "an upserted row was duplicated"
    assert pds.Table.open(store, "events").version == twin.version

    back = spark_cluster.read.format("pds").option("store", url).options(**options).load("events")
    assert by_id(back.toArrow()).to_pylist() == rows


# -- pipelines --------------------------------------------------------------------------------


def flaky_hook(marks: Path, fail: set[tuple[str, Any]]) -> Callable[[str, Any], None]:
    """A hook for ``declare`` (tests/spark/test_spark_pipeline_update.py): it
    records each task's executor JVM and fails the first attempt of a task
    that produces one of *fail* (``(stage, key)``), after touching
    ``failed-<stage>-<key>`` in *marks*."""
    trace = traced(marks)
    folder = str(marks)

    def hook(stage: str, key: Any) -> None:
        ctx = TaskContext.get()
        if ctx is None:
            return  # the local engine
        trace()
        if ctx.attemptNumber() == 0 and (stage, key) in fail:
            Path(folder, f"failed-{stage}-{key}").touch()
            raise RuntimeError(f"injected failure at {stage} {key!r}")

    return hook


def test_a_pipeline_built_and_updated_on_executors_with_retried_tasks_equals_the_local_engines(
    spark_cluster: SparkSession, seaweed: Any, tmp_path: Path
) -> None:
    """The tests' pipeline of tests/spark/test_spark_pipeline_update.py (a chain, a
    merge, a join, compound keys) on S3, built and then updated on the
    cluster, with the first attempt of some Produce tasks failing; a twin
    updated by the local engine; both equal a recompute, nothing left over."""
    url, options = f"s3://{BUCKET}/cluster-{uuid.uuid4().hex[:12]}", seaweed.store_options()
    marks = tmp_path / "marks"
    marks.mkdir()
    hook = flaky_hook(marks, {("by_user", 47), ("by_user", 71), ("totals", "u9")})
    p = declare(url, "pipelines/spark", hook=hook, **options)
    twin = declare(url, "pipelines/local", **options)
    events: Model = {}
    scores: Model = {}
    step = initial(90, events, scores)
    assert pds.spark.update_pipeline(spark_cluster, p, on_spark(spark_cluster, step)) == 1
    assert twin.update(local(step)) == 1
    check(p, twin, events, scores, "built on the cluster")
    failed = {f.name for f in marks.glob("failed-*")}
    assert failed == {"failed-by_user-47", "failed-by_user-71", "failed-totals-u9"}, failed

    # Changes to events only (scores and its stages are left alone), on the failing keys.
    ups = pa.table({"id": [10, 47, 71, 95], "user": ["u9", "u9", "u2", "new"], "n": [5, 6, 7, 8]}, schema=EVENTS)
    for r in ups.to_pylist():
        events[r["id"]] = [{"user": r["user"], "n": r["n"]}]
    del events[3], events[60]
    step = {"events": (ups, pa.table({"id": [3, 60]}, schema=KEYS))}
    for f in marks.glob("failed-*"):
        f.unlink()
    assert pds.spark.update_pipeline(spark_cluster, p, on_spark(spark_cluster, step)) == 2
    assert twin.update(local(step)) == 2
    check(p, twin, events, scores, "updated on the cluster")
    assert {f.name for f in marks.glob("failed-*")} >= {"failed-by_user-47", "failed-by_user-71"}
    assert garbage(p) == [], "the failed attempts' files were removed"

    ran = jvms(marks)
    assert len(ran) == 2 and 0 not in ran and driver_jvm(spark_cluster) not in ran, f"Produce ran in {ran}"
    got = pds.spark.read_stage(spark_cluster, p, "all_users").toArrow()
    assert sorted(got.to_pylist(), key=repr) == sorted(twin.read("all_users").to_pylist(), key=repr)


# -- retries of write tasks -------------------------------------------------------------------


def test_write_tasks_failing_once_on_executors_leave_the_local_engines_result(
    spark_cluster: SparkSession, s3_store: tuple[str, dict[str, str], Store], tmp_path: Path
) -> None:
    """The first attempt of a task fails after uploading (``format("pds")``
    of a dataset and of a table, test_spark's ``pds_flaky`` source) or in
    the middle of its stream (the helper): Spark runs it again, on either
    executor; the result equals the local engine's, without the failed
    attempts' files."""
    url, options, store = s3_store
    spark_cluster.dataSource.register(FlakyPdsDataSource)
    table = rich_table(300)
    df = spark_cluster.createDataFrame(table).repartition(3, "id")
    want = local_dataset(store, "local", table.cast(written_schema(df)))

    markers = tmp_path / "dataset"
    markers.mkdir()
    flaky = df.write.format("pds_flaky").option("store", url).options(**options).option("marker_dir", str(markers))
    flaky.option("max_rows_per_file", 30).mode("append").save("source")
    failed = failed_attempt_parts(markers)
    assert failed, "the first attempt of partition 1 uploaded parts before failing"
    manifest = check_dataset(store, "source", want)
    assert not set(failed) & set(manifest.parts)

    markers = tmp_path / "table"
    markers.mkdir()
    rows = orders(range(200), "t")
    pds.Table.create(store, "twin", data=rows)
    flaky = spark_cluster.createDataFrame(rows).repartition(3, "id").write.format("pds_flaky").option("store", url)
    flaky.options(**options).option("marker_dir", str(markers)).option("table", "true").mode("append").save("table")
    failed = failed_attempt_parts(markers)
    assert failed, "the first attempt of partition 1 uploaded files before failing"
    assert table_rows(store, "table") == table_rows(store, "twin")
    referenced = set(pds.Table.open(store, "table").files().column("path").to_pylist())
    assert {k for k in dataset_files(store, "table") if k.startswith("data/")} == referenced, "an orphan was left"
    assert not set(failed) & referenced

    marker = str(tmp_path / "mid-stream")
    spark_cluster.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        pds.spark.write_dataset(
            df.mapInArrow(fail_once_mid_stream(marker), df.schema), url, "helper", max_rows_per_file=10, **options
        )
    finally:
        spark_cluster.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert Path(marker).exists(), "the first attempt of partition 1 failed"
    check_dataset(store, "helper", want)


# -- a pipeline update under store faults -----------------------------------------------------


def test_a_pipeline_update_whose_executors_meet_store_faults_equals_the_local_engines(
    spark_cluster: SparkSession, faulty: Any
) -> None:
    """tests/spark/test_spark_pipeline_faults.py's case on the cluster: every try
    of one reduce task's PUT of a ``by_user`` content part (through the fault proxy, which
    the executors' requests pass too) fails with 503, so that task fails and
    Spark runs it again; the committed version equals the local twin's and
    a recompute, and nothing the failed attempt wrote is left."""
    case = build_faulty_case(faulty)
    folder = "content"
    rule = Latched("PUT", base(faulty) + TASK_PART.format(stage=STAGE, folder=folder), "fail", status=503, times=None)
    faulty.proxy.add_rule(rule)
    assert pds.spark.update_pipeline(spark_cluster, case.p, case.changes(spark_cluster)) == 2
    faulty.proxy.clear_rules()
    what = f"every try of a {STAGE} {folder} PUT failing on an executor"
    assert rule.latched is not None and rule.hits > 1, f"{what}: no such request:\n{log_text(faulty)}"
    hit = [e for e in faulty.proxy.log if e.path == rule.latched and e.method == "PUT"]
    assert hit and all(e.rule is not None for e in hit), f"{what}: the part was written after all:\n{log_text(faulty)}"
    key = f"{KEY}/{rule.latched.split(f'/{KEY}/', 1)[1]}"
    assert key not in referenced(faulty, 2)
    assert not faulty.direct.exists(key), f"{what}: the failed attempt's part was left behind"
    check_committed(faulty, case, what)


# -- credentials from the executors' environment ----------------------------------------------


def executor_view(store: Store, secret: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A task function: the names of *store*'s options as an executor
    unpickles them, and whether its own environment holds *secret*."""

    def seen(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = sorted(store.unwrap(pds.ObjectStoreBackend).options)
        for batch in batches:
            n = batch.num_rows
            yield pa.record_batch(
                {
                    "options": pa.array([",".join(got)] * n),
                    "env": pa.array([os.environ.get("AWS_SECRET_ACCESS_KEY") == secret] * n),
                }
            )

    return seen


def test_executors_take_s3_credentials_from_their_own_environment(
    spark_cluster: SparkSession, seaweed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store options without keys: the driver signs with the keys of its
    environment, each executor with those of its own (conftest's
    ``spark.executorEnv.AWS_*``), and no key is in the tasks. A dataset
    (the helper and ``format("pds")``) and a pipeline update then work as
    with keys in the options."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    keys = ("access_key_id", "secret_access_key")
    options = {k: v for k, v in seaweed.store_options().items() if k not in keys}
    url = f"s3://{BUCKET}/env-{uuid.uuid4().hex[:12]}"
    store = pds.open_store(url, **options)
    table = orders(range(120), "e")
    df = spark_cluster.createDataFrame(table).repartition(2, "id")
    secret = seaweed.secret_key

    rows = df.mapInArrow(executor_view(store, secret), "options string, env boolean").distinct().collect()
    assert [(r.options.split(","), r.env) for r in rows] == [(sorted(options), True)]

    pds.spark.write_dataset(df, url, "helper", **options)
    check_dataset(store, "helper", local_dataset(store, "local", table.cast(written_schema(df))))

    twin = pds.Table.create(store, "orders_local", data=table, primary_key="id")
    pds.Table.create(store, "orders", data=table, primary_key="id")
    changed = orders([*range(100, 140, 2), 500], "f")
    pds.spark.upsert(spark_cluster.createDataFrame(changed).repartition(2, "id"), url, "orders", **options)
    twin.upsert(changed)
    assert table_rows(store, "orders") == table_rows(store, "orders_local")

    case = build_faulty_case(Faulty(proxy=None, url=url, options=options, store=store, direct=store))
    assert pds.spark.update_pipeline(spark_cluster, case.p, case.changes(spark_cluster)) == 2
    assert case.twin.update(case.local_changes()) == 2
    assert content(case.p) == content(case.twin) == recompute(case.after)


def test_a_store_that_pickles_no_secret_gives_executors_none_and_they_sign_with_their_own(
    spark_cluster: SparkSession, seaweed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys in the store options, ``pickle_secrets=False``, none in the
    driver's environment: the driver signs with the options' keys, the
    executors get the store without them (what a task unpickles) and sign
    with their own environment's (conftest's ``spark.executorEnv.AWS_*``).
    A dataset written with the helper and read through ``format("pds")``
    equals the local engine's."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    options = seaweed.store_options()
    url = f"s3://{BUCKET}/nosecret-{uuid.uuid4().hex[:12]}"
    store = pds.open_store(url, pickle_secrets=False, **options)
    table = orders(range(150), "n")
    df = spark_cluster.createDataFrame(table).repartition(2, "id")
    secret = seaweed.secret_key

    rows = df.mapInArrow(executor_view(store, secret), "options string, env boolean").distinct().collect()
    shared = sorted(k for k in options if k not in ("access_key_id", "secret_access_key"))
    assert [(r.options.split(","), r.env) for r in rows] == [(shared, True)]

    want = local_dataset(store, "local", table.cast(written_schema(df)))
    pds.spark.write_dataset(df, url, "helper", pickle_secrets=False, **options)
    check_dataset(store, "helper", want)
    back = pds.spark.read_dataset(spark_cluster, url, "helper", pickle_secrets=False, **options)
    assert spark_rows(back, want.schema).equals(by_id(want))
