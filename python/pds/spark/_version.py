"""Which PySpark pds.spark runs on.

The ``mapInArrow`` helpers (:func:`pds.spark.write_dataset`,
:func:`pds.spark.read_dataset` with ``engine="spark"``,
:func:`pds.spark.upsert`, :func:`pds.spark.update_pipeline`,
:func:`pds.spark.delete`) need PySpark 3.5 or later: 3.5 is the line EMR 7
and Databricks LTS runtimes ship. ``format("pds")``, :func:`pds.spark.register`,
``read_dataset`` with the default ``engine="pds"`` and
:func:`pds.spark.read_stage` run on PySpark's Python data source API, which
PySpark 4.0 introduced; on 3.5 they raise :class:`SparkVersionError`. (A
bare ``format("pds")`` on Spark 3.5 never reaches pds: Spark itself fails
with ``DATA_SOURCE_NOT_FOUND``.)
"""

from __future__ import annotations

import re

import pyspark

__all__ = [
    "HELPERS",
    "MIN_DATA_SOURCE",
    "MIN_PYSPARK",
    "SparkVersionError",
    "check_pyspark",
    "has_data_source_api",
    "pyspark_version",
    "require_data_source_api",
]

MIN_PYSPARK = (3, 5)
"""The oldest PySpark ``pds.spark`` imports on (the ``mapInArrow`` helpers)."""
MIN_DATA_SOURCE = (4, 0)
"""The oldest PySpark with the Python data source API ``format("pds")`` needs."""
HELPERS = (
    'pds.spark.write_dataset, pds.spark.read_dataset(..., engine="spark"), pds.spark.upsert, '
    "pds.spark.update_pipeline and pds.spark.delete"
)
"""The helpers that work on every supported PySpark, as error messages name them."""


class SparkVersionError(ImportError):
    """The installed PySpark is too old for the pds feature asked for; the message names what works."""


def pyspark_version() -> tuple[int, int]:
    """The installed PySpark's (major, minor), from ``pyspark.__version__`` (e.g. ``"3.5.9"``)."""
    found = re.match(r"(\d+)\.(\d+)", str(pyspark.__version__))
    if found is None:  # a build with an unparsable version: assume it is recent
        return (99, 0)
    return (int(found.group(1)), int(found.group(2)))


def _dotted(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def check_pyspark() -> None:
    """Raise :class:`SparkVersionError` when PySpark is older than :data:`MIN_PYSPARK`."""
    if pyspark_version() < MIN_PYSPARK:
        raise SparkVersionError(
            f"pds.spark needs PySpark >= {_dotted(MIN_PYSPARK)}; this is PySpark {pyspark.__version__}: "
            'pip install "pds[spark]"'
        )


def has_data_source_api() -> bool:
    """Whether this PySpark has the Python data source API (PySpark >= 4.0)."""
    return pyspark_version() >= MIN_DATA_SOURCE


def require_data_source_api(what: str) -> None:
    """Raise :class:`SparkVersionError` naming *what* when PySpark has no Python data source API.

    Costs a version comparison; no Spark call.
    """
    if not has_data_source_api():
        raise SparkVersionError(
            f"{what} needs PySpark's Python data source API (PySpark >= {_dotted(MIN_DATA_SOURCE)}); "
            f"this is PySpark {pyspark.__version__}. On PySpark {_dotted(MIN_PYSPARK)} use the mapInArrow "
            f"helpers: {HELPERS}"
        )


check_pyspark()
