"""Lets ``spark.read.format("pds")`` and ``df.write.format("pds")`` work with no registration.

PySpark (4.0+) imports every top-level module named ``pyspark_*`` on the
Python path when the first Python data source is looked up, and registers
the ``DefaultSource`` it exposes under ``DefaultSource.name()``, here
``"pds"``. The implementation is :class:`pds.spark.PdsDataSource`.

PySpark 3.5 has no Python data source API and never imports this module;
importing it there raises :class:`pds.spark.SparkVersionError`, which
names the ``mapInArrow`` helpers that work on 3.5.
"""

from pds.spark.datasource import PdsDataSource as DefaultSource

__all__ = ["DefaultSource"]
