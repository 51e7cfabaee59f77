"""Lifting Spark's per-batch byte cap on Arrow batches for pds's own jobs.

Spark caps the Arrow batches it sends to Python workers by rows
(``spark.sql.execution.arrow.maxRecordsPerBatch``, 10,000 by default) and by
bytes (``spark.sql.execution.arrow.maxBytesPerBatch``). Enforcing the byte
cap means estimating the size of every row as it is appended; lifting it
took ``benches/spark_compare.py``'s pds write from 3.4 s to 1.9 s (README).
With the cap at ``Int.MaxValue`` Spark skips the estimate, and batches are
still bounded by the row cap.

:func:`arrow_byte_cap_lifted` sets it while a pds job runs, only if the user
left it unset, and unsets it again when the last concurrent pds job on the
session ends. A user who sets the conf keeps their value. The conf is the
session's: other Arrow jobs that run on the session meanwhile (from other
threads) also run without a byte cap. Where the conf cannot be changed
(a stopped session, a locked-down cluster) the job runs with it as it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

__all__ = ["MAX_BYTES_PER_BATCH", "UNCAPPED", "arrow_byte_cap_lifted"]

MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"
UNCAPPED = str(2**31 - 1)
"""``Int.MaxValue``: the value at which Spark skips the per-row size estimate."""

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_holders: dict[int, int] = {}
"""Per session (by id): how many running pds jobs rely on the lifted cap."""


def _acquire(spark: SparkSession) -> bool:
    with _lock:
        key = id(spark)
        if key in _holders:
            _holders[key] += 1
            return True
        try:
            if spark.conf.get(MAX_BYTES_PER_BATCH, None) is not None:
                return False  # set by the user (or by a job of theirs): leave it alone
            spark.conf.set(MAX_BYTES_PER_BATCH, UNCAPPED)
        except Exception as exc:  # noqa: BLE001 - any refusal only costs speed
            _log.warning("pds: could not lift %s (%s); writing with it as it is", MAX_BYTES_PER_BATCH, exc)
            return False
        _holders[key] = 1
        return True


def _release(spark: SparkSession) -> None:
    with _lock:
        key = id(spark)
        _holders[key] -= 1
        if _holders[key]:
            return
        del _holders[key]
        try:
            if spark.conf.get(MAX_BYTES_PER_BATCH, None) == UNCAPPED:
                spark.conf.unset(MAX_BYTES_PER_BATCH)
        except Exception as exc:  # noqa: BLE001 - never hide or undo the job's own outcome
            _log.warning("pds: could not restore %s (%s)", MAX_BYTES_PER_BATCH, exc)


@contextmanager
def arrow_byte_cap_lifted(spark: SparkSession) -> Iterator[bool]:
    """Run the body with Spark's Arrow byte cap lifted if the user left it unset.

    Yields whether pds lifted it (``False``: the user's value stays in force).
    """
    lifted = _acquire(spark)
    try:
        yield lifted
    finally:
        if lifted:
            _release(spark)
