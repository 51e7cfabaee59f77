"""Spark's Python workers must import pds: check it, and say how to fix it.

Spark starts its Python workers with the ``PYSPARK_PYTHON`` environment
variable (as it was when the session started), else ``python3`` from the
PATH (``spark-submit`` also reads the ``spark.pyspark.python`` conf).
Outside a virtual environment's own shell, that is usually the system's
Python, which has no pds: ``format("pds")`` then fails with
``DATA_SOURCE_NOT_FOUND`` and the helpers' tasks with ``No module named
'pds'``. On a local master the driver can start that Python itself and
find out before any job runs; on a cluster it reads a failed job's error.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from typing import Any

from pds.spark._version import has_data_source_api

__all__ = ["SparkWorkerError", "check_workers", "explain_worker_failure", "worker_python"]


class SparkWorkerError(ImportError):
    """Spark's Python workers cannot import pds; the message names the fix."""


_FIX = (
    "Set PYSPARK_PYTHON to the Python that has pds installed, before the SparkSession starts "
    "(for example `export PYSPARK_PYTHON=$(python -c 'import sys; print(sys.executable)')` in the "
    'shell whose python imports pds, or `os.environ["PYSPARK_PYTHON"] = sys.executable` before '
    "SparkSession.builder...getOrCreate()); on a cluster, install the pds wheel into the executors' Python"
)


# A worker Python without pds usually lacks its dependencies too: PySpark's
# own Arrow code then fails first, on pyarrow or pandas.
_MISSING = re.compile(r"No module named '(pds|pyspark_pds|pyarrow|pandas)[.']")


def worker_python(spark: Any) -> str:
    """The Python executable Spark starts for its workers: the one the
    SparkContext took from ``PYSPARK_PYTHON`` when it started (a session
    started from Python ignores the ``spark.pyspark.python`` conf, which
    only ``spark-submit`` reads), else ``python3`` from the PATH."""
    try:
        exe = spark.sparkContext.pythonExec
    except Exception:  # noqa: BLE001 - a Spark Connect session has no SparkContext
        exe = None
    return str(exe or os.environ.get("PYSPARK_PYTHON") or "python3")


@functools.lru_cache(maxsize=16)
def _import_error(python: str) -> str | None:
    """Why *python* cannot import pds and the data source module, or None."""
    exe = python if os.path.sep in python else shutil.which(python)
    if exe is None:
        return f"{python!r} is not on the PATH"
    if os.path.abspath(exe) == os.path.abspath(sys.executable):
        return None  # this very interpreter (not resolved: a venv's python links to its base)
    # pyspark_pds only where PySpark has the data source API that imports it (>= 4.0)
    probe = "import pds, pds._core, pyspark_pds" if has_data_source_api() else "import pds, pds._core"
    try:
        done = subprocess.run([exe, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    except OSError as exc:
        return f"{exe!r} cannot be started ({exc})"
    except subprocess.TimeoutExpired:
        return None  # slow, not broken: let Spark try
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


def check_workers(spark: Any) -> None:
    """Raise :class:`SparkWorkerError` if a local master's workers cannot import pds.

    On a local master the workers run on this machine, so the check starts
    the worker Python once (cached per executable; a fraction of a second).
    Other masters are not checked here: see :func:`explain_worker_failure`.
    """
    try:
        master = str(spark.sparkContext.master)
    except Exception:  # noqa: BLE001 - Spark Connect: the workers are elsewhere
        return
    if not master.startswith("local"):
        return
    python = worker_python(spark)
    why = _import_error(python)
    if why is not None:
        raise SparkWorkerError(f"Spark's Python workers run {python!r}, which cannot import pds ({why}). {_FIX}")


def explain_worker_failure(exc: BaseException) -> SparkWorkerError | None:
    """A :class:`SparkWorkerError` for a job that failed because its workers
    lack pds, else None (the caller re-raises the original)."""
    text = str(exc)
    missing = _MISSING.search(text)
    if missing is not None:
        return SparkWorkerError(
            f"Spark's Python workers cannot import {missing.group(1)}, so they do not run the Python "
            f"that has pds. {_FIX}"
        )
    if "DATA_SOURCE_NOT_FOUND" in text and "pds" in text:
        return SparkWorkerError(f"Spark's Python workers cannot find the pds data source. {_FIX}")
    return None
