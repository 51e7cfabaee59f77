"""A reference for ``benches/spark_compare.py``: the floor of PySpark's Python data source path.

``spark.read.format("pds-memory-floor")`` yields Arrow batches a worker already
holds in memory: the first task in each Python worker decodes every listed
Parquet file once (pyarrow) and keeps the batches; every later read only
hands them to Spark. Its read time is what any Python data source costs in
Spark on this machine (Arrow IPC to the JVM, rows out of Arrow vectors), with
no Parquet decoding and no I/O: the lower bound for a Python source such as
pds.

Options: ``paths`` (comma-separated absolute file paths, one input partition
each); the schema is given with ``.schema(...)``. Shipped to the workers with
``SparkContext.addPyFile``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

BATCH_ROWS = 65_536  # as pds's reader
_CACHE: dict[tuple[str, str], list[pa.RecordBatch]] = {}


class MemoryFloorReader(DataSourceReader):
    def __init__(self, paths: list[str], schema: StructType) -> None:
        self.paths = paths
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in self.paths]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        target = to_arrow_schema(self.schema, timezone="UTC")
        tag = str(target)
        if (partition.value, tag) not in _CACHE:
            for path in self.paths:  # all of them, whichever worker later gets which partition
                table = pq.read_table(path).select(target.names).cast(target).combine_chunks()
                _CACHE[(path, tag)] = table.to_batches(max_chunksize=BATCH_ROWS)
        yield from _CACHE[(partition.value, tag)]


class MemoryFloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "pds-memory-floor"

    def schema(self) -> StructType:
        raise ValueError("pds-memory-floor needs .schema(...)")

    def reader(self, schema: StructType) -> DataSourceReader:
        return MemoryFloorReader([p for p in self.options["paths"].split(",") if p], schema)
