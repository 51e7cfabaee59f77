"""pds for PySpark 4: the ``pds`` data source and ``mapInArrow`` helpers.

>>> df.write.format("pds").option("store", "file:///data/lake").mode("append").save("orders")
>>> spark.read.format("pds").option("store", "file:///data/lake").load("orders")
>>> pds.spark.write_dataset(df, "s3://bucket/lake", "orders", endpoint=..., region=...)
>>> pds.spark.read_dataset(spark, "s3://bucket/lake", "orders", columns=["id"], filter=[("id", ">", 10)])

Tables (append, delete, time travel)::

>>> df.write.format("pds").option("store", url).option("table", "true").mode("append").save("events")
>>> spark.read.format("pds").option("store", url).option("versionAsOf", 3).load("events")
>>> pds.spark.delete(url, "events", [("customer", "==", "c42")])

Install with ``pip install "pds[spark]"``. ``format("pds")`` works without
registration (PySpark discovers the ``pyspark_pds`` module);
:func:`register` registers the source explicitly.

Spark's Python workers must import pds: they run ``PYSPARK_PYTHON`` (as it
was when the session started), else ``python3`` from the PATH. Set
``PYSPARK_PYTHON`` to the Python that has pds (a venv's python) before the
session starts; :func:`register` and the helpers check it on a local master
and raise :class:`SparkWorkerError` naming the fix.
"""

try:
    from pyspark.sql.datasource import DataSourceArrowWriter as _DataSourceArrowWriter  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError('pds.spark needs PySpark >= 4.0 and pandas: pip install "pds[spark]"') from exc

from pds.spark._job import WriteJob, WriteSettings
from pds.spark._pipeline_update import update_pipeline
from pds.spark._upsert import upsert
from pds.spark._workers import SparkWorkerError
from pds.spark.datasource import PdsDataSource
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
