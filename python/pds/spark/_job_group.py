"""Tagging the Spark jobs of one pds write, and waiting for their tasks to end.

Spark raises a job's failure on the driver while its other tasks are still
being killed; a task that finishes its upload in that window would leave a
part behind after the cleanup. :func:`tagged` runs the body under a job
group of pds's own (the caller's group is restored afterwards), and
:func:`wait_for_tasks` waits until no task of that group is running, so the
cleanup comes after the last upload.

Spark Connect sessions have no ``SparkContext``; there both are no-ops and
the cleanup relies on :meth:`pds.spark._job.WriteJob.abort`'s settling.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession

__all__ = ["tagged", "wait_for_tasks"]

_log = logging.getLogger(__name__)
_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def _context(spark: SparkSession) -> Any | None:
    try:
        return spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext
        return None


@contextmanager
def tagged(spark: SparkSession, group: str, description: str) -> Iterator[None]:
    """Run the body's Spark jobs in job group *group*; restore the caller's group after."""
    sc = _context(spark)
    if sc is None:
        yield
        return
    saved = {k: sc.getLocalProperty(k) for k in _PROPERTIES}
    sc.setJobGroup(group, description, interruptOnCancel=True)
    try:
        yield
    finally:
        for k, v in saved.items():
            sc.setLocalProperty(k, v)


def _active_tasks(tracker: Any, group: str) -> int:
    active = 0
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        for stage_id in info.stageIds if info is not None else ():
            stage = tracker.getStageInfo(stage_id)
            active += stage.numActiveTasks if stage is not None else 0
    return active


def wait_for_tasks(spark: SparkSession, group: str, timeout: float = 60.0) -> bool:
    """Wait until no task of job group *group* runs; ``False`` if *timeout* passed first."""
    sc = _context(spark)
    if sc is None:
        return False
    tracker = sc.statusTracker()
    deadline = time.monotonic() + timeout
    while _active_tasks(tracker, group):
        if time.monotonic() > deadline:
            _log.warning("pds.spark: tasks of job group %s still running after %.0f s", group, timeout)
            return False
        time.sleep(0.1)
    return True
