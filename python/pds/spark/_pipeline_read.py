"""Reading a pipeline's stage (or source, or merge) into Spark.

The driver opens the pipeline once, pins the version, and lists the node's
stored key-range content parts (a merge's: each feeder's). Each part is one
input partition, read by one task through the Rust core: a task reads one
part's projected columns, nothing else. The rows of a part are sorted by key
and parts hold disjoint key ranges, so a stage's partitions come in key
order (a merge's feeders overlap).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType
from remote_store import Store

from pds import _core
from pds.producers.pipeline import Pipeline
from pds.spark._job import int_option
from pds.spark._schema import spark_read_target

__all__ = ["PdsPipelineReader", "PipelineSnapshot", "pipeline_options", "pipeline_snapshot"]


class PipelineSnapshot:
    """One node of one pipeline version: its schema and one engine view per part."""

    def __init__(self, key: str, node: str, version: int, schema: pa.Schema, views: list[str]) -> None:
        self.key, self.node, self.version, self.schema, self.views = key, node, version, schema, views


def pipeline_options(options: Mapping[str, str]) -> tuple[str, str, int | None] | None:
    """``(pipeline key, node, version)`` from the data source options, or
    ``None`` when no ``pipeline`` option is given.

    Raises:
        ValueError: ``pipeline`` without ``stage``, a path given as well, or
            a ``version`` (or ``versionAsOf``) that is not an integer >= 0.
    """
    key = options.get("pipeline")
    if key is None:
        return None
    node = options.get("stage")
    if not node:
        raise ValueError('option("pipeline", ...) reads one node: add option("stage", name) (a stage, source or merge)')
    if options.get("path") or options.get("paths") not in (None, "", "[]"):
        raise ValueError('option("pipeline", key) names what to read: call load() without a path')
    name = "version" if "version" in options else "versionasof"
    version = int_option(options, name, minimum=0)
    return key, node, version


def pipeline_snapshot(store: Store, key: str, node: str, version: int | None) -> PipelineSnapshot:
    """Pin *version* (the latest if ``None``) of the pipeline at *key* and
    list *node*'s parts. Cost: 2 GETs + 1 HEAD (latest) or 1 GET.

    Raises:
        remote_store.NotFound: no pipeline, version or node (the message
            names the nodes there are).
    """
    pinned, schema, views = Pipeline.open(store, key)._partition_views(node, version)
    return PipelineSnapshot(key, node, pinned, schema, views)


class _PartPartition(InputPartition):
    def __init__(self, view: str) -> None:
        super().__init__(view)
        self.view = view


class PdsPipelineReader(DataSourceReader):
    """One input partition per content part of the node; see the module docs."""

    def __init__(self, store: Store, snapshot: PipelineSnapshot, schema: StructType) -> None:
        self._store = store
        self._root = str(store.native_path(snapshot.key))
        self._target = spark_read_target(schema)
        missing = [n for n in self._target.names if n not in snapshot.schema.names]
        if missing:
            raise ValueError(
                f"pipeline {snapshot.key!r} node {snapshot.node!r} has no column {missing}; "
                f"its columns: {snapshot.schema.names}"
            )
        self._views = snapshot.views

    def partitions(self) -> list[InputPartition]:
        """One partition per part (at least one, reading nothing, for an empty node)."""
        return [_PartPartition(v) for v in self._views] or [_PartPartition("")]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one part, as batches of Spark's schema."""
        view = getattr(partition, "view", "")
        if not view:
            return
        rust: _core.RustStore = self._store.unwrap(_core.RustStore)
        table = _core.pipeline_read(rust, self._root, view)
        table = table.select(self._target.names).cast(self._target)
        yield from table.to_batches()
