"""Functions for pipelines that want calls rather than a format.

- :func:`write_dataset` writes a DataFrame with ``mapInArrow``: each task
  uploads its parts through the Rust core and returns their names; the
  driver commits. Same parts, manifest and retry rules as the data source.
- :func:`read_dataset` reads a dataset into a DataFrame (through the data
  source), with a projection and filters.
- :func:`register` registers the data source on a session explicitly.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType
from remote_store import RemoteStoreError, Store

import pds.errors
from pds.backend import ObjectStoreBackend
from pds.manifest import DatasetManifest, PartInfo
from pds.producers.pipeline import Pipeline
from pds.spark._arrow_conf import arrow_byte_cap_lifted
from pds.spark._job import TaskParts, WriteJob, WriteSettings, check_dataset_key, spark_store
from pds.spark._job_group import tagged, wait_for_tasks
from pds.spark._native_read import read_natively
from pds.spark._schema import spark_read_target, spark_to_arrow
from pds.spark._table_job import TableWriteJob
from pds.spark._version import require_data_source_api
from pds.spark._workers import check_workers, explain_worker_failure
from pds.spark.filters import FilterTuple, filters_to_json

__all__ = ["delete", "read_dataset", "read_stage", "register", "write_dataset"]

_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

_PARTS_SCHEMA = StructType(
    [
        StructField("name", StringType(), nullable=False),
        StructField("row_count", LongType(), nullable=False),
        StructField("size_bytes", LongType(), nullable=False),
        StructField("sha256", StringType(), nullable=False),
        StructField("footer_bytes", LongType(), nullable=True),
        StructField("partition_id", IntegerType(), nullable=False),
        StructField("attempt_number", IntegerType(), nullable=False),
        StructField("task_attempt_id", LongType(), nullable=False),
    ]
)
"""The rows each write task returns: one per part it wrote."""

_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Register the ``pds`` data source on *spark* (``spark.dataSource.register``).

    Not needed where ``pyspark_pds`` is importable (PySpark finds it), but
    harmless: registering again replaces the entry with the same class.

    On a local master it first checks that Spark's Python workers import
    pds (they run ``PYSPARK_PYTHON``, else ``python3`` from the PATH).

    Raises:
        pds.spark.SparkVersionError: PySpark < 4.0 (no Python data source
            API); the message names the helpers that work there.
        pds.spark.SparkWorkerError: the workers' Python cannot import pds;
            the message names the fix (set ``PYSPARK_PYTHON``).
    """
    require_data_source_api("pds.spark.register")
    from pds.spark.datasource import PdsDataSource

    check_workers(spark)
    spark.dataSource.register(PdsDataSource)
    _registered.add(spark)


def _ensure_registered(spark: SparkSession) -> None:
    if spark not in _registered:
        register(spark)


def _write_mode(mode: str | None, overwrite: bool | None) -> bool:
    """``overwrite`` as a bool from either spelling.

    Raises:
        ValueError: an unknown mode, or a mode that contradicts *overwrite*.
    """
    if mode is None:
        return bool(overwrite)
    if mode not in ("append", "overwrite"):
        raise ValueError(f"mode must be 'append' or 'overwrite', got {mode!r}")
    if overwrite is not None and overwrite != (mode == "overwrite"):
        raise ValueError(f"mode={mode!r} contradicts overwrite={overwrite!r}")
    return mode == "overwrite"


def _parts_batch(task: TaskParts) -> pa.RecordBatch:
    parts = task.parts
    n = len(parts)
    return pa.RecordBatch.from_pydict(
        {
            "name": [p.name for p in parts],
            "row_count": [p.row_count for p in parts],
            "size_bytes": [p.size_bytes for p in parts],
            "sha256": [p.sha256 for p in parts],
            "footer_bytes": [p.footer_bytes for p in parts],
            "partition_id": [task.partition_id] * n,
            "attempt_number": [task.attempt_number] * n,
            "task_attempt_id": [task.task_attempt_id] * n,
        },
        schema=spark_read_target(_PARTS_SCHEMA),
    )


def _write_partition(job: WriteJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: write this task's parts, yield one row per part."""
    task = job.write_task(batches)
    if task.parts:
        yield _parts_batch(task)


def _task_results(rows: Sequence[Any]) -> list[TaskParts]:
    """Group the collected part rows by task attempt, parts in name order."""
    by_attempt: dict[tuple[int, int], list[Any]] = {}
    for row in rows:
        by_attempt.setdefault((row.partition_id, row.task_attempt_id), []).append(row)
    results = []
    for (partition_id, attempt_id), group in sorted(by_attempt.items()):
        group.sort(key=lambda r: r.name)
        parts = tuple(
            PartInfo(
                name=r.name,
                row_count=r.row_count,
                size_bytes=r.size_bytes,
                sha256=r.sha256,
                footer_bytes=r.footer_bytes,
            )
            for r in group
        )
        results.append(TaskParts(partition_id, group[0].attempt_number, attempt_id, parts))
    return results


def write_dataset(
    df: DataFrame,
    store: str | Store,
    key: str,
    *,
    mode: Literal["append", "overwrite"] | None = None,
    overwrite: bool | None = None,
    compression: str = "zstd",
    row_group_size: int | None = None,
    max_rows_per_file: int | None = None,
    run_id: str | None = None,
    metadata: Mapping[str, str] | None = None,
    parallelism: int | None = None,
    **storage_options: object,
) -> DatasetManifest:
    """Write *df* as the pds dataset *key* with ``mapInArrow``; return its manifest.

    Each task casts its Arrow batches to the dataset schema (PySpark's
    ``to_arrow_schema`` of ``df.schema``, timestamps in UTC) and uploads them
    as parts through the Rust core; the driver then commits as the data
    source does: parts of failed or duplicate attempts are removed, and
    ``manifest.json`` then ``_SUCCESS`` are written only if every task
    succeeded. If the job fails, its parts are removed and the error is
    raised.

    While the job runs, Spark's Arrow byte cap
    (``spark.sql.execution.arrow.maxBytesPerBatch``) is lifted on the
    session if it is unset, which makes Spark skip a per-row size estimate
    (about 45% of the write's time in ``benches/spark_compare.py``); batches stay bounded by
    ``spark.sql.execution.arrow.maxRecordsPerBatch``. Set the conf yourself
    to keep a byte cap (see :mod:`pds.spark._arrow_conf`).

    Args:
        df: The DataFrame to write.
        store: A URL (``file:///abs/dir``, ``s3://bucket/prefix``,
            ``gs://bucket/prefix``, ``az://container/prefix``) with
            *storage_options* for :class:`pds.ObjectStoreBackend`, or a
            ``remote_store.Store`` over an ObjectStoreBackend. With
            ``pickle_secrets=False`` (a storage option, or the Store's), the
            tasks carry no credential option: the executors take theirs
            from their own environment.
        key: The dataset key.
        mode: ``"append"`` (the default) creates the dataset and fails if it
            exists; ``"overwrite"`` replaces it (the old one stays readable
            until the commit).
        overwrite: The same choice as a bool (as ``ParquetDatasetStore``).
        compression: As :class:`pds.spark._job.WriteSettings`.
        row_group_size: As :class:`pds.spark._job.WriteSettings`.
        max_rows_per_file: As :class:`pds.spark._job.WriteSettings`.
        run_id: As :class:`pds.spark._job.WriteSettings`.
        metadata: As :class:`pds.spark._job.WriteSettings`.
        parallelism: As :class:`pds.spark._job.WriteSettings`.

    Raises:
        AlreadyExists: a dataset exists at *key* and this is not an overwrite.
        TypeError / ValueError: a bad store, option or schema (before any job).
        pds.spark.SparkWorkerError: Spark's Python workers cannot import
            pds (set ``PYSPARK_PYTHON``; checked before the job on a local
            master, recognised in the job's error elsewhere).
        pds.errors.RemoteStoreError: a task failed on a pds error
            (``DataError``, ``SchemaMismatch`` ...), raised as pds's own
            class with the task's message, from Spark's exception; its
            parts are removed.
        pyspark.errors.PySparkException: the Spark job failed otherwise (its
            parts are removed; no manifest, no ``_SUCCESS``).
    """
    is_overwrite = _write_mode(mode, overwrite)
    target = spark_store(store, **storage_options)
    check_workers(df.sparkSession)
    settings = WriteSettings(
        compression=compression,
        row_group_size=row_group_size,
        max_rows_per_file=max_rows_per_file,
        run_id=run_id,
        metadata=metadata,
        parallelism=parallelism,
    )
    job = WriteJob.start(target, key, spark_to_arrow(df.schema), settings, overwrite=is_overwrite)

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _write_partition(job, batches)

    rows = collect_written(
        df, job, f"pds-write-{job.job_id}", f"pds.spark.write_dataset {key!r}", write_partition, _PARTS_SCHEMA
    )
    results = _task_results(rows)
    try:
        return job.commit(results)
    except BaseException:
        job.abort(results, settle=0)  # every task has ended
        raise


def collect_written(
    df: DataFrame,
    job: WriteJob | TableWriteJob,
    group: str,
    description: str,
    write_partition: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    schema: StructType,
) -> list[Any]:
    """Run *write_partition* over *df* with ``mapInArrow`` (Spark's Arrow
    byte cap lifted, the job tagged *group*) and collect its rows. If the
    job fails, wait until no task of it runs, remove everything it wrote
    (``job.abort()``), and raise: a worker that cannot import pds as
    ``SparkWorkerError``, a task that failed on a pds error as that error
    (:func:`task_error`, from Spark's), anything else as Spark raised it."""
    spark = df.sparkSession
    try:
        with arrow_byte_cap_lifted(spark), tagged(spark, group, description):
            return list(df.mapInArrow(write_partition, schema).collect())
    except BaseException as exc:
        wait_for_tasks(spark, group)  # no task may upload after the cleanup
        job.abort()
        clear: BaseException | None = explain_worker_failure(exc) or task_error(exc)
        if clear is not None:
            raise clear from exc
        raise


# The last line of a task's Python traceback, as Spark relays it: "pds.errors.SchemaMismatch: why | path='k'".
_TASK_ERROR = re.compile(
    r"^(?:pds\.errors|remote_store(?:\.\w+)*)\.(\w+): (.+?)(?: \| path='([^'\n]*)')?$", re.MULTILINE
)


def task_error(exc: BaseException) -> RemoteStoreError | None:
    """pds's own exception that failed a task of a Spark job, rebuilt on the
    driver from the job's error *exc* (Spark relays a task's exception as
    text, at the end of a long ``PythonException``), or None.

    The class is pds's (``pds.errors``: ``SchemaMismatch``, ``DataError``,
    ``PartCorrupted``, ``NotFound`` ...); its message is the task's, first.
    The caller raises it ``from`` *exc*, which keeps Spark's whole report.
    """
    # The task's final exception: the first unindented line after the last
    # traceback header (a chained exception has its own header, later).
    parts = str(exc).rsplit("Traceback (most recent call last):", 1)
    if len(parts) < 2:
        return None
    final = next((line for line in parts[1].splitlines() if line and not line[0].isspace()), "")
    found = _TASK_ERROR.match(final)
    if found is None:
        return None
    name, message, path = found.groups()
    cls = getattr(pds.errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, RemoteStoreError)):
        return None
    try:
        return cls(message, path=path)
    except TypeError:  # a class whose constructor takes other arguments
        return None


def _url_and_options(store: Store) -> tuple[str, dict[str, str]]:
    """The URL and the data source options of the ObjectStoreBackend behind
    *store*: its options, and ``pickle_secrets=false`` if it was opened so.
    The data source opens the store on the driver with all of them; what its
    tasks carry then leaves the credentials out (see :mod:`pds.spark.datasource`)."""
    backend = store.unwrap(ObjectStoreBackend)
    options = backend.options
    if not backend.pickle_secrets:
        options["pickle_secrets"] = "false"
    return backend.url, options


def _split_filter(
    filter: str | Column | Sequence[FilterTuple] | FilterTuple | None,
) -> tuple[list[FilterTuple], str | Column | None]:
    if filter is None:
        return [], None
    if isinstance(filter, str | Column):
        return [], filter
    if isinstance(filter, tuple) and len(filter) == 3 and isinstance(filter[0], str) and isinstance(filter[1], str):
        return [filter], None
    if isinstance(filter, Sequence):
        return [tuple(item) for item in filter], None
    raise TypeError(f"filter must be a SQL string, a Column or a list of (column, op, value), got {filter!r}")


def read_dataset(
    spark: SparkSession,
    store: str | Store,
    key: str,
    columns: Sequence[str] | None = None,
    filter: str | Column | Sequence[FilterTuple] | FilterTuple | None = None,
    *,
    engine: Literal["pds", "spark"] = "pds",
    **storage_options: object,
) -> DataFrame:
    """The committed dataset *key* as a DataFrame.

    Args:
        spark: The session.
        store: A URL with *storage_options*, or a ``remote_store.Store`` over
            an ObjectStoreBackend. With ``pickle_secrets=False`` (a storage
            option, or the Store's), the read tasks carry no credential
            option (the data source gets ``pickle_secrets=false``).
        key: The dataset key.
        columns: Columns to read, in this order; only these are fetched.
        filter: ``(column, op, value)`` tuples (see :mod:`pds.spark.filters`),
            applied by the read tasks as they decode each part; or a SQL
            string / Column, applied by Spark (pushed into the read when
            ``spark.sql.python.filterPushdown.enabled`` is true).

        engine: ``"pds"`` (the default) reads through the ``pds`` data
            source: Python tasks decode each part with the Rust core, on
            any store pds can open, with columns as the manifest declares
            them (nullability included). ``"spark"`` checks ``_SUCCESS``
            and reads the manifest on the driver, then hands exactly the
            committed part files to Spark's own vectorized Parquet reader
            (no Python in the scan; native pruning and pushdown). The
            cluster must then be able to open the parts' URLs with a Hadoop
            filesystem (``file://`` always, ``s3://`` only where an S3
            filesystem serves that scheme), and every column reads as
            nullable. See :mod:`pds.spark._native_read`.

    The schema is read from the manifest now, so a missing dataset fails
    here rather than at the first action.

    Raises:
        DatasetIncomplete: no committed dataset at *key* (with ``"pds"``,
            surfaced by Spark; with ``"spark"``, raised here).
        ValueError: an unknown column or engine, a bad filter tuple; with
            ``"spark"``, a key holding a glob character (``*?[]{}\\``).
        TypeError: a bad *store* or *filter*.
        pds.spark.SparkVersionError: ``"pds"`` on PySpark < 4.0 (no Python
            data source API): use ``engine="spark"`` there.
        pds.spark.SparkWorkerError: with ``"pds"`` on a local master,
            Spark's Python workers cannot import pds (set ``PYSPARK_PYTHON``).
    """
    if engine not in ("pds", "spark"):
        raise ValueError(f"engine must be 'pds' or 'spark', got {engine!r}")
    source = spark_store(store, **storage_options)
    location = str(source.native_path(check_dataset_key(key)))
    url, options = _url_and_options(source)
    tuples, expression = _split_filter(filter)
    if columns is not None and isinstance(columns, str):
        raise TypeError("columns must be a list of names, not a str")
    if engine == "spark":
        return read_natively(spark, source, key, url, location, columns, tuples, expression)
    require_data_source_api('pds.spark.read_dataset(..., engine="pds")')
    _ensure_registered(spark)
    reader = spark.read.format("pds").option("store", url).options(**options)
    if tuples:
        reader = reader.option("filters", filters_to_json(tuples))
    if columns is not None and expression is None:
        reader = reader.option("columns", json.dumps(list(columns)))
    if str(spark.conf.get(_PUSHDOWN_CONF, "false")).lower() == "true":
        reader = reader.option("pushFilters", "true")
    df = reader.load(location)
    if expression is not None:
        df = df.where(expression)
        if columns is not None:
            df = df.select(*columns)
    return df


def read_stage(spark: SparkSession, p: Pipeline, stage: str, version: int | None = None) -> DataFrame:
    """A pipeline node's output as a DataFrame: a stage's, a source's or a
    merge's key and value columns, at *version* (the latest by default),
    the rows :meth:`pds.Pipeline.read` returns.

    Runs through the ``pds`` data source (``option("pipeline", key)``,
    ``option("stage", name)``): the driver pins the version and lists the
    node's key-range parts (2 GETs + 1 HEAD), and each part is one input
    partition that one task reads (its footer and column chunks, nothing
    else). A stage's partitions come in key order, each sorted by key.

    Args:
        spark: The session.
        p: The pipeline (opened or created on a Store over
            ``pds.ObjectStoreBackend`` that executors can reach: file or S3).
        stage: A node's name.
        version: A pipeline version; ``None`` for the latest.

    Raises:
        remote_store.NotFound: no such node or version (the message names the nodes).
        ValueError: a negative *version*; a ``memory://`` store (executors cannot reach it).
        pds.spark.SparkVersionError: PySpark < 4.0 (no Python data source API).
        pds.spark.SparkWorkerError: on a local master, Spark's Python
            workers cannot import pds (set ``PYSPARK_PYTHON``).
    """
    if not isinstance(p, Pipeline):
        raise TypeError(f"p must be a pds.Pipeline, got {type(p).__name__}")
    if not isinstance(stage, str):
        raise TypeError(f"stage must be a node name (str), got {type(stage).__name__}")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
        raise ValueError(f"version must be a non-negative int or None, got {version!r}")
    source = spark_store(p.store)
    url, options = _url_and_options(source)
    require_data_source_api("pds.spark.read_stage")
    _ensure_registered(spark)
    reader = spark.read.format("pds").option("store", url).options(**options)
    reader = reader.option("pipeline", str(source.native_path(p.key))).option("stage", stage)
    if version is not None:
        reader = reader.option("version", str(version))
    return reader.load()


def delete(store: Store | str, key: str, filter: Sequence[FilterTuple], **options: Any) -> int:
    """Delete the rows of the pds table at *key* that match *filter* (a list
    of ``(column, op, value)`` tuples that must all hold), from a pipeline's
    driver; return the version after it. No data file is rewritten: see
    :meth:`pds.Table.delete` for what it reads and writes (3 PUTs).

    *store* is a URL (``file:///abs/dir``, ``s3://``, ``gs://``, ``az://``, with
    storage *options*) or a Store over ``pds.ObjectStoreBackend``.

    Raises:
        remote_store.NotFound: no table at *key*.
        TypeError / ValueError: a malformed filter (before any write).
    """
    from pds.table import Table

    return Table.open(spark_store(store, **options), key).delete(list(filter))
