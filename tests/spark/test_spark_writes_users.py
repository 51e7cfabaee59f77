"""Spark writes as a new user meets them: ``schema_mode`` on table appends,
``partitionBy``, where pds's reason shows in an error, and a session whose
Python workers cannot import pds.

Every test runs a real local Spark (the ``spark_session`` fixture) on a
``file://`` store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from remote_store import Store

import pds
import pds.errors
import pds.spark

HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


def _df(spark: SparkSession, rows: pa.Table) -> DataFrame:
    return spark.createDataFrame(rows.to_pandas())


def _write(df: DataFrame, url: str, key: str, mode: str = "append", **options: str) -> None:
    w = df.write.format("pds").option("store", url)
    for k, v in options.items():
        w = w.option(k, v)
    w.mode(mode).save(key)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def lake(tmp_path: Path) -> tuple[str, Store, Path]:
    root = tmp_path / "lake"
    root.mkdir()
    return root.as_uri(), pds.open_store(root.as_uri()), root


# -- 1. schema_mode on table appends ----------------------------------------------


def test_a_merge_append_adds_columns_and_widens_as_table_append_does(
    spark_session: SparkSession, lake: tuple[str, Store, Path]
) -> None:
    spark = spark_session
    url, store, _ = lake
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "n": pa.array([10, 20], pa.int32())})
    # Spark's schema for the second write: n widens int -> bigint, "extra" is new.
    second = pa.table(
        {
            "extra": pa.array(["x", None], pa.string()),
            "id": pa.array([3, 4], pa.int64()),
            "n": pa.array([2**40, 5], pa.int64()),
        }
    )
    _write(_df(spark, first), url, "t", table="true")
    _write(_df(spark, second), url, "t", schema_mode="merge")

    table = pds.Table.open(store, "t")
    assert table.version == 1
    # The same appends through the Python API give the same schema.
    pds.Table.create(store, "py", schema=table.at(version=0).schema)
    py = pds.Table.open(store, "py")
    py.append(pa.table({"id": pa.array([1, 2], pa.int64()), "n": pa.array([10, 20], pa.int32())}))
    py.append(_df(spark, second).toArrow(), schema_mode="merge")
    assert table.schema.equals(pds.Table.open(store, "py").schema)
    assert table.schema.names == ["id", "n", "extra"]
    assert table.schema.field("n").type == pa.int64()
    change = table.history(1)[0]["schema_change"]
    assert change and change == pds.Table.open(store, "py").history(1)[0]["schema_change"], change

    got = spark.read.format("pds").option("store", url).load("t").orderBy("id").collect()
    assert [(r["id"], r["n"], r["extra"]) for r in got] == [(1, 10, None), (2, 20, None), (3, 2**40, "x"), (4, 5, None)]

    # merge: a DataFrame without a nullable column of the table appends nulls for it.
    _write(_df(spark, pa.table({"id": pa.array([5], pa.int64())})), url, "t", schema_mode="merge")
    assert table.refresh() == 2 and table.schema.names == ["id", "n", "extra"]
    last = pds.Table.open(store, "t").to_arrow(filter=[("id", "==", 5)])
    assert last.to_pylist() == [{"id": 5, "n": None, "extra": None}]


def test_strict_stays_the_default_and_a_bad_schema_mode_fails_before_any_job(
    spark_session: SparkSession, lake: tuple[str, Store, Path]
) -> None:
    spark = spark_session
    url, store, root = lake
    _write(spark.range(3), url, "t", table="true")
    before = _files(root)
    wider = spark.range(3).selectExpr("id", "cast(id as string) as extra")
    with pytest.raises(Exception, match=r'"extra" is not in the table'):
        _write(wider, url, "t")
    with pytest.raises(Exception, match=r"option 'schema_mode' must be strict or merge, got 'mrege'"):
        _write(wider, url, "t", schema_mode="mrege")
    # merge cannot turn an int64 column into a string one: refused on the driver.
    with pytest.raises(Exception, match=r"SchemaMismatch"):
        _write(spark.range(3).selectExpr("cast(id as string) as id"), url, "t", schema_mode="merge")
    # Datasets are written once: merge has nothing to merge into.
    with pytest.raises(Exception, match=r"schema_mode' merge adds columns to a table"):
        _write(spark.range(3), url, "d", schema_mode="merge")
    assert _files(root) == before, "nothing was written"
    assert pds.Table.open(store, "t").version == 0


# -- 2. partitionBy ------------------------------------------------------------------


@pytest.mark.parametrize("existing", ["none", "dataset", "table"])
@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_partition_by_is_refused_before_anything_is_written(
    spark_session: SparkSession, lake: tuple[str, Store, Path], existing: str, mode: str
) -> None:
    """pds keys hold no Hive partitions. Spark refuses ``partitionBy`` for a
    Python data source before it calls pds (the guide documents the message
    and what to do instead): nothing is written, an existing key is left
    as it was."""
    spark = spark_session
    url, _, root = lake
    if existing == "dataset":
        _write(spark.range(3), url, "k")
    elif existing == "table":
        _write(spark.range(3), url, "k", table="true")
    before = _files(root)
    with pytest.raises(Exception, match=r"partitioning or clustering columns do not match"):
        spark.range(6).selectExpr("id", "id % 2 as day").write.format("pds").option("store", url).partitionBy(
            "day"
        ).mode(mode).save("k")
    assert _files(root) == before


# -- 3. pds's reason first -------------------------------------------------------------


@pytest.fixture
def hidden_traceback(spark_session: SparkSession) -> Iterator[SparkSession]:
    """The session with Spark's conf that leaves Python tracebacks out of errors."""
    old = spark_session.conf.get(HIDE_TRACEBACK, "false")
    spark_session.conf.set(HIDE_TRACEBACK, "true")
    try:
        yield spark_session
    finally:
        spark_session.conf.set(HIDE_TRACEBACK, old)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]


def test_with_spark_s_hide_traceback_conf_the_first_line_holds_pds_s_reason(
    hidden_traceback: SparkSession, lake: tuple[str, Store, Path]
) -> None:
    """The guide's advice: ``format("pds")`` runs pds's checks in a Spark
    Python worker, so Spark wraps them; with the conf the error's first line
    names pds's exception and reason, for a bad option, a schema mismatch on
    append, a write-once dataset and a read of a missing key."""
    spark = hidden_traceback
    url, store, _ = lake
    _write(spark.range(3), url, "t", table="true")
    _write(spark.range(3), url, "d")
    cases: list[tuple[Any, str]] = [
        (lambda: _write(spark.range(3), url, "x", compression="zip"), "ValueError: unknown compression codec 'zip'"),
        (
            lambda: _write(spark.range(3), url, "t", schema_mode="mrege"),
            "ValueError: option 'schema_mode' must be strict or merge",
        ),
        (
            lambda: _write(spark.range(3).selectExpr("id", "id as extra"), url, "t"),
            'SchemaMismatch: schema mismatch on table "t": "extra" is not in the table',
        ),
        (lambda: _write(spark.range(3), url, "d"), "AlreadyExists: Dataset already exists at 'd'"),
        (
            lambda: spark.read.format("pds").option("store", url).load("nope").collect(),
            "DatasetIncomplete: No committed dataset at 'nope'",
        ),
    ]
    for call, reason in cases:
        with pytest.raises(Exception) as info:
            call()
        assert reason in _first_line(info.value), str(info.value)[:2000]
    assert pds.Table.open(store, "t").version == 0


def test_a_helper_job_failing_on_a_pds_error_raises_that_error_first(
    spark_session: SparkSession, lake: tuple[str, Store, Path]
) -> None:
    """A task of ``pds.spark.upsert`` meets a null in a not-nullable column:
    the user catches pds's SchemaMismatch, its message first, with Spark's
    exception as its cause; nothing is committed and the job's files are
    removed. ``format("pds")`` relays the same reason (Spark's wrapping)."""
    spark = spark_session
    url, store, root = lake
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.int64(), False)])
    pds.Table.create(store, "t", schema=schema, primary_key="id")
    before = _files(root)
    df = spark.createDataFrame([(1, None), (2, 3)], "id bigint, v bigint")
    with pytest.raises(pds.SchemaMismatch) as info:
        pds.spark.upsert(df, url, "t")
    reason = 'schema mismatch on table "t": column "v" is not nullable in the table, and the data holds 1 null value(s)'
    assert str(info.value).startswith(reason), str(info.value)
    assert info.value.__cause__ is not None and "Python worker" in str(info.value.__cause__)
    with pytest.raises(
        Exception, match=r'pds\.errors\.SchemaMismatch: schema mismatch on table "t": column "v" is not nullable'
    ):
        _write(df, url, "t")
    assert pds.Table.open(store, "t").version == 0
    assert _files(root) == before


def test_task_error_rebuilds_pds_errors_only() -> None:
    from pds.spark.helpers import task_error

    relayed = RuntimeError(
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in f\nremote_store.ext.parquet.DatasetIncomplete: No committed dataset '
        "at 'k': _SUCCESS marker missing | path='k'\n\tat org.apache.spark.Foo"
    )
    found = task_error(relayed)
    assert isinstance(found, pds.errors.DatasetIncomplete)
    assert found.path == "k" and str(found).startswith("No committed dataset at 'k'")
    assert task_error(RuntimeError("Traceback:\nValueError: not pds's")) is None
    assert task_error(RuntimeError("pds.errors.NoSuchClass: x")) is None
    # The user's code caught a pds error and raised its own: that one failed the task.
    chained = RuntimeError(
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
        "pds.errors.NotFound: nothing at 'k' | path='k'\n\nDuring handling of the above exception, "
        'another exception occurred:\n\nTraceback (most recent call last):\n  File "x.py", line 3, in f\n'
        "ValueError: the user's own reason\n\tat org.apache.spark.Foo"
    )
    assert task_error(chained) is None


# -- 4. workers without pds ----------------------------------------------------------


def _python_without_pds() -> str | None:
    for exe in ("/usr/bin/python3", str(Path(sys.base_prefix) / "bin" / "python3")):
        if Path(exe).exists() and subprocess.run([exe, "-c", "import pds"], capture_output=True).returncode != 0:
            return exe
    return None


def test_without_pyspark_python_the_errors_name_it(tmp_path: Path) -> None:
    """A new user runs the venv's Python with neither ``PYSPARK_PYTHON`` set
    nor the venv on the PATH: Spark starts ``python3`` from the PATH, which
    lacks pds. ``pds.spark.register`` and the helpers raise SparkWorkerError
    naming ``PYSPARK_PYTHON`` before any job; a bare ``format("pds")``
    fails in Spark with ``DATA_SOURCE_NOT_FOUND`` (no pds code runs), which
    ``explain_worker_failure`` turns into the same advice."""
    base = _python_without_pds()
    if base is None:
        pytest.skip("needs a python3 without pds")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(base)
    script = textwrap.dedent(
        f"""
        from pyspark.sql import SparkSession
        import pds.spark
        from pds.spark._workers import explain_worker_failure

        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        print("EXEC", spark.sparkContext.pythonExec)
        for call in (lambda: pds.spark.register(spark),
                     lambda: pds.spark.write_dataset(spark.range(3), {tmp_path.as_uri()!r}, "d")):
            try:
                call()
                print("RESULT NO ERROR")
            except pds.spark.SparkWorkerError as exc:
                print("RESULT", type(exc).__name__, exc)
        try:
            spark.range(3).write.format("pds").option("store", {tmp_path.as_uri()!r}).mode("append").save("d")
            print("RESULT NO ERROR")
        except Exception as exc:
            print("RESULT", "explained:", explain_worker_failure(exc))
        spark.stop()
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "EXEC python3" in done.stdout, done.stdout
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert len(results) == 3, done.stdout
    for line in results[:2]:
        assert line.startswith("RESULT SparkWorkerError"), line
        assert "'python3'" in line and "PYSPARK_PYTHON" in line, line
    assert results[2].startswith("RESULT explained: ") and "PYSPARK_PYTHON" in results[2], results[2]
    assert not (tmp_path / "d").exists()
