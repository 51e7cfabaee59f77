"""Fixtures of the Spark tests: the run's local Spark as ``spark``.

The sessions themselves (``spark_session``, ``spark_cluster``) are the root
conftest's, since the docs' examples run on Spark too.
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(spark_session: SparkSession) -> SparkSession:
    """The run's local Spark (the root conftest's): local[2,2], a task may fail once."""
    return spark_session
