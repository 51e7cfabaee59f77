"""Session confs pds sets for the length of its own Spark jobs.

**Arrow's byte cap.** Spark caps the Arrow batches it sends to Python workers by rows
(``spark.sql.execution.arrow.maxRecordsPerBatch``, 10,000 by default) and by
bytes (``spark.sql.execution.arrow.maxBytesPerBatch``). Enforcing the byte
cap means estimating the size of every row as it is appended; lifting it
took ``benches/spark_compare.py``'s pds write from 3.4 s to 1.9 s (README).
With the cap at ``Int.MaxValue`` Spark skips the estimate, and batches are
still bounded by the row cap. :func:`arrow_byte_cap_lifted` lifts it.

**The cache's batch size.** A cached DataFrame is built in batches of
``spark.sql.inMemoryColumnarStorage.batchSize`` rows (10,000), each whole
in the executor's heap before it is stored or spilled. The rows of
``pds.spark.update_pipeline``'s phases are Arrow IPC payloads of up to a
few MB each, so 10,000 of them can exceed an executor's heap (a 480 MB
range on a 1 GiB executor did). :func:`small_cache_batches` sets it to
:data:`CACHE_BATCH_ROWS` while such a DataFrame is cached and computed.

**Small shuffles, coalesced.** Adaptive execution coalesces a shuffle's
partitions into tasks of at least
``spark.sql.adaptive.coalescePartitions.minPartitionSize`` (1 MB) of
shuffled bytes. A pipeline task's work is reading and rewriting the stored
parts of its key ranges, which the bytes it is sent do not measure: a
scattered 1 % update sends each of 17 ranges a few dozen KB, and all 17
ran in one task on one core. :func:`fine_partitions` sets the minimum to
:data:`MIN_PARTITION_BYTES` while a pipeline job runs, so adaptive
execution spreads such ranges over the cluster's cores (its default
``parallelismFirst``) and still drops the empty partitions.

:func:`conf_while` sets a conf while a pds job runs, only if the user left
it unset, and unsets it again when the last concurrent pds job on the
session that relies on it ends. A user who sets the conf keeps their
value. The conf is the session's: other jobs that run on the session
meanwhile (from other threads) see it too. Where the conf cannot be
changed (a stopped session, a locked-down cluster) the job runs with it as
it is.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

__all__ = [
    "CACHE_BATCH_ROWS",
    "MAX_BYTES_PER_BATCH",
    "MIN_PARTITION_BYTES",
    "UNCAPPED",
    "arrow_byte_cap_lifted",
    "conf_while",
    "fine_partitions",
    "small_cache_batches",
]

MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"
UNCAPPED = str(2**31 - 1)
"""``Int.MaxValue``: the value at which Spark skips the per-row size estimate."""

CACHE_BATCH_SIZE = "spark.sql.inMemoryColumnarStorage.batchSize"
CACHE_BATCH_ROWS = "16"
"""Rows per cached batch for pds's payload rows: 16 payloads of a few MB."""

MIN_PARTITION_SIZE = "spark.sql.adaptive.coalescePartitions.minPartitionSize"
MIN_PARTITION_BYTES = "1024"
"""The least shuffled bytes of a coalesced partition in pds's pipeline jobs."""

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_holders: dict[tuple[int, str], int] = {}
"""Per session (by id) and conf: how many running pds jobs rely on pds's value."""


def _acquire(spark: SparkSession, key: str, value: str) -> bool:
    with _lock:
        held = (id(spark), key)
        if held in _holders:
            _holders[held] += 1
            return True
        try:
            if spark.conf.get(key, None) is not None:
                return False  # set by the user (or by a job of theirs): leave it alone
            spark.conf.set(key, value)
        except Exception as exc:  # noqa: BLE001 - any refusal only costs speed or memory
            _log.warning("pds: could not set %s (%s); running with it as it is", key, exc)
            return False
        _holders[held] = 1
        return True


def _release(spark: SparkSession, key: str, value: str) -> None:
    with _lock:
        held = (id(spark), key)
        _holders[held] -= 1
        if _holders[held]:
            return
        del _holders[held]
        try:
            if spark.conf.get(key, None) == value:
                spark.conf.unset(key)
        except Exception as exc:  # noqa: BLE001 - never hide or undo the job's own outcome
            _log.warning("pds: could not restore %s (%s)", key, exc)


@contextmanager
def conf_while(spark: SparkSession, key: str, value: str) -> Iterator[bool]:
    """Run the body with the session conf *key* at *value* if the user left
    it unset. Yields whether pds set it (``False``: the user's value stays
    in force)."""
    set_here = _acquire(spark, key, value)
    try:
        yield set_here
    finally:
        if set_here:
            _release(spark, key, value)


def arrow_byte_cap_lifted(spark: SparkSession) -> contextlib.AbstractContextManager[bool]:
    """Run the body with Spark's Arrow byte cap lifted if the user left it unset.

    Yields whether pds lifted it (``False``: the user's value stays in force).
    """
    return conf_while(spark, MAX_BYTES_PER_BATCH, UNCAPPED)


def small_cache_batches(spark: SparkSession) -> contextlib.AbstractContextManager[bool]:
    """Run the body (which caches and computes a DataFrame of payload rows)
    with cached batches of :data:`CACHE_BATCH_ROWS` rows, if the user left
    the batch size unset."""
    return conf_while(spark, CACHE_BATCH_SIZE, CACHE_BATCH_ROWS)


def fine_partitions(spark: SparkSession) -> contextlib.AbstractContextManager[bool]:
    """Run the body (a pipeline node's Spark job) with adaptive execution
    coalescing small shuffles by parallelism (:data:`MIN_PARTITION_BYTES`),
    if the user left the minimum partition size unset."""
    return conf_while(spark, MIN_PARTITION_SIZE, MIN_PARTITION_BYTES)
