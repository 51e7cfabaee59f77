"""pds for PySpark: the ``mapInArrow`` helpers (PySpark >= 3.5) and the ``pds`` data source (PySpark >= 4.0).

>>> df.write.format("pds").option("store", "file:///data/lake").mode("append").save("orders")
>>> spark.read.format("pds").option("store", "file:///data/lake").load("orders")
>>> pds.spark.write_dataset(df, "s3://bucket/lake", "orders", endpoint=..., region=...)
>>> pds.spark.read_dataset(spark, "s3://bucket/lake", "orders", columns=["id"], filter=[("id", ">", 10)])

Tables (append, delete, time travel)::

>>> df.write.format("pds").option("store", url).option("table", "true").mode("append").save("events")
>>> spark.read.format("pds").option("store", url).option("versionAsOf", 3).load("events")
>>> pds.spark.delete(url, "events", [("customer", "==", "c42")])

Install with ``pip install "pds[spark]"``. ``format("pds")`` works without
registration on PySpark 4.0 and later (PySpark discovers the
``pyspark_pds`` module); :func:`register` registers the source explicitly.
On PySpark 3.5 (EMR 7, Databricks LTS runtimes) the helpers work:
:func:`write_dataset`, :func:`read_dataset` with ``engine="spark"``,
:func:`upsert`, :func:`update_pipeline` and :func:`delete`; the data
source, :func:`register`, :func:`read_stage` and ``read_dataset`` with
``engine="pds"`` raise :class:`SparkVersionError` there.

Spark's Python workers must import pds: they run ``PYSPARK_PYTHON`` (as it
was when the session started), else ``python3`` from the PATH. Set
``PYSPARK_PYTHON`` to the Python that has pds (a venv's python) before the
session starts; :func:`register` and the helpers check it on a local master
and raise :class:`SparkWorkerError` naming the fix.
"""

from typing import TYPE_CHECKING, Any

try:
    import pandas  # type: ignore[import-untyped]  # noqa: F401 - PySpark's Arrow code needs it
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        'pds.spark needs PySpark >= 3.5 (format("pds"): >= 4.0) and pandas: pip install "pds[spark]"'
    ) from exc

from pds.spark._job import WriteJob, WriteSettings
from pds.spark._pipeline_update import update_pipeline
from pds.spark._upsert import upsert
from pds.spark._version import SparkVersionError  # raises it on PySpark < 3.5
from pds.spark._workers import SparkWorkerError
from pds.spark.filters import (
    FilterTuple,
    apply_filter_tuples,
    filter_expression,
    spark_filters_to_tuples,
    translate_filter,
)
from pds.spark.helpers import delete, read_dataset, read_stage, register, write_dataset

__all__ = [
    "FilterTuple",
    "PdsDataSource",
    "SparkVersionError",
    "SparkWorkerError",
    "WriteJob",
    "WriteSettings",
    "apply_filter_tuples",
    "delete",
    "filter_expression",
    "read_dataset",
    "read_stage",
    "register",
    "spark_filters_to_tuples",
    "translate_filter",
    "update_pipeline",
    "upsert",
    "write_dataset",
]

if TYPE_CHECKING:
    from pds.spark.datasource import PdsDataSource


def __getattr__(name: str) -> Any:
    """``PdsDataSource``, imported on first use: it needs PySpark >= 4.0, the helpers do not.

    Raises:
        SparkVersionError: ``PdsDataSource`` on PySpark < 4.0.
        AttributeError: any other unknown name.
    """
    if name == "PdsDataSource":
        from pds.spark.datasource import PdsDataSource

        return PdsDataSource
    raise AttributeError(f"module 'pds.spark' has no attribute {name!r}")
