"""Spark's Python workers without pds (U-2): outside ``make``, Spark starts
the system ``python3``, which cannot import pds. pds says so, and names the
fix, instead of ``DATA_SOURCE_NOT_FOUND`` or ``No module named 'pds'``.

The "system Python" here is the interpreter the test venv was created from
(``sys.base_prefix``): a real Python without pds installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pds.spark._workers import _import_error

BASE_PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")


def _base_python_lacks_pds() -> bool:
    done = subprocess.run([BASE_PYTHON, "-c", "import pds"], capture_output=True, check=False)
    return done.returncode != 0


pytestmark = pytest.mark.skipif(
    not Path(BASE_PYTHON).exists() or not _base_python_lacks_pds(),
    reason="needs a Python without pds (the venv's base interpreter)",
)


@pytest.mark.spec("U-2")
def test_the_probe_tells_a_python_without_pds_from_one_with_it() -> None:
    assert _import_error(sys.executable) is None
    why = _import_error(BASE_PYTHON)
    assert why is not None and "pds" in why
    assert _import_error("no-such-python-anywhere") == "'no-such-python-anywhere' is not on the PATH"


@pytest.mark.spec("U-2")
def test_a_session_whose_workers_lack_pds_gets_the_fix_named(tmp_path: Path) -> None:
    """A real local Spark whose workers run the base Python: the helpers and
    ``register`` raise SparkWorkerError before any job; a job that imports
    pds in its tasks fails, and its real error is recognised."""
    script = textwrap.dedent(
        f"""
        import sys
        import pyarrow as pa
        from pyspark.sql import SparkSession
        import pds.spark
        from pds.spark._workers import explain_worker_failure

        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        df = spark.range(3)
        for call in (lambda: pds.spark.register(spark),
                     lambda: pds.spark.write_dataset(df, {tmp_path.as_uri()!r}, "d")):
            try:
                call()
                print("NO ERROR")
            except pds.spark.SparkWorkerError as exc:
                print("SparkWorkerError:", exc)

        def uses_pds(batches):
            import pds  # noqa: F401
            yield from batches

        try:
            df.mapInArrow(uses_pds, df.schema).collect()
            print("NO ERROR")
        except Exception as exc:
            clear = explain_worker_failure(exc)
            print("explained:", clear)
        spark.stop()
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PYSPARK_PYTHON"] = BASE_PYTHON  # as a user's shell outside the venv would have it
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [
        line for line in done.stdout.splitlines() if line.startswith(("SparkWorkerError", "NO ERROR", "explained"))
    ]
    assert len(lines) == 3, done.stdout
    for line in lines[:2]:
        assert line.startswith("SparkWorkerError:"), line
        assert BASE_PYTHON in line and "PYSPARK_PYTHON" in line
    assert lines[2].startswith("explained: ") and "PYSPARK_PYTHON" in lines[2], lines[2]
    assert not (tmp_path / "d").exists(), "nothing is written when the check fails"
