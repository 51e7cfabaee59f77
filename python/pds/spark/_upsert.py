"""``pds.spark.upsert``: replace rows of a pds table by primary key from a
DataFrame, committed once per job.

Spark's writer API has no upsert mode (``mode("upsert")`` is refused), so
this is a call. Its steps:

1. Driver, before any write: the table must declare a primary key that the
   DataFrame holds, with the table's columns (matched by name, in any
   order) and their types (as Spark reads them; checked from the
   DataFrame's schema before any Spark job); one Spark job then looks for
   a null, NaN or repeated key (``groupBy(key).count()``), and any is a
   ``ValueError`` naming a few. Nothing is written then.
2. Tasks (``mapInArrow``): each uploads its rows as uncommitted data files,
   its columns matched to the table's by name.
3. Driver: the files of the one successful attempt per partition are
   committed in one version that also tombstones the rows of their keys
   (``pds.Table.upsert``'s plan: the key column of candidate files only),
   by compare-and-swap, serializable with concurrent commits. The files of
   other attempts, or of a failed job, are removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, FloatType, LongType, StringType, StructField, StructType
from remote_store import Store

from pds.spark._job import spark_store
from pds.spark._schema import spark_to_arrow
from pds.spark._table_job import TableFiles, TableSettings, TableWriteJob
from pds.spark._workers import check_workers
from pds.spark.helpers import collect_written
from pds.table import Table

__all__ = ["upsert"]

_FILES_SCHEMA = StructType(
    [
        StructField("partition_id", LongType(), nullable=False),
        StructField("task_attempt_id", LongType(), nullable=False),
        StructField("files", StringType(), nullable=False),
    ]
)

_FILES_ARROW = pa.schema(
    [
        pa.field("partition_id", pa.int64(), nullable=False),
        pa.field("task_attempt_id", pa.int64(), nullable=False),
        pa.field("files", pa.string(), nullable=False),
    ]
)


def _check_keys(df: DataFrame, key_column: str) -> None:
    """``ValueError`` if *df* holds a null, NaN or repeated key (one Spark job)."""
    key = F.col(key_column)
    bad = F.col("count") > 1
    bad = bad | key.isNull()
    if isinstance(df.schema[key_column].dataType, FloatType | DoubleType):
        bad = bad | F.isnan(key)
    found = df.groupBy(key).count().where(bad).limit(6).collect()
    if found:
        shown = ", ".join(repr(r[0]) for r in found[:5])
        more = " and more" if len(found) > 5 else ""
        raise ValueError(
            f"the DataFrame holds null, NaN or repeated primary keys of {key_column!r}: {shown}{more}; "
            "an upsert needs one row per key"
        )


def upsert(df: DataFrame, store: str | Store, key: str, *, parallelism: int | None = None, **options: Any) -> int:
    """Replace the rows of the pds table at *key* whose primary key is in
    *df*, and insert the rest, in one version; return it.

    *store* is a URL (``file:///abs/dir``, ``s3://bucket/prefix``, with
    storage *options*) or a Store over ``pds.ObjectStoreBackend``.

    Cost: one Spark job to check the keys, one to upload the rows (the
    tasks' data PUTs), then on the driver what :meth:`pds.Table.upsert`
    reads to find the replaced rows (plus the key column of the new files)
    and its commit.

    Raises:
        ValueError: the table declares no primary key, or *df* lacks it, or
            holds a null, NaN or repeated key (before anything is written).
        remote_store.NotFound: no table at *key*.
        pds.SchemaMismatch: *df*'s columns are not the table's (matched by
            name, in any order), or one is of another type than Spark reads
            the table's column as (an int key for a bigint one: cast it),
            before any Spark job; the message names each.
        pds.CommitConflict / pds.CommitUnknown: as :meth:`pds.Table.upsert`.
        pds.SchemaMismatch / pds.DataError / remote_store errors: a task
            failed on a pds error; raised as that error, with its message,
            Spark's exception as its cause (files removed, nothing
            committed).
        pyspark.errors.PySparkException: a Spark job failed otherwise (its
            files are removed, nothing is committed).
    """
    target = spark_store(store, **options)
    table = Table.open(target, key)
    pk = table.primary_key
    if pk is None:
        raise ValueError(f"upsert replaces rows by primary key, and the table {key!r} declares none")
    if pk not in df.columns:
        raise ValueError(f"the DataFrame lacks the primary-key column {pk!r}")
    job = TableWriteJob.start(
        target, key, spark_to_arrow(df.schema), TableSettings(parallelism=parallelism), overwrite=False
    )
    check_workers(df.sparkSession)
    _check_keys(df, pk)

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = job.write_task(batches)
        row = {"partition_id": task.partition_id, "task_attempt_id": task.task_attempt_id}
        yield pa.RecordBatch.from_pylist([{**row, "files": json.dumps(task.files)}], schema=_FILES_ARROW)

    group, description = f"pds-upsert-{job.job_id}", f"pds.spark.upsert {key!r}"
    rows = collect_written(df, job, group, description, write_partition, _FILES_SCHEMA)
    results = [TableFiles(r.partition_id, r.task_attempt_id, tuple(json.loads(r.files))) for r in rows]
    try:
        return job.commit(results, upsert=True)
    except BaseException:
        job.abort(results, settle=0)  # every task has ended
        raise
