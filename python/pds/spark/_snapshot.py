"""A committed dataset as a Spark read sees it: no PySpark import, so the
helpers that need it run on every PySpark ``pds.spark`` supports."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow as pa
from remote_store import Store

from pds.dataset import ParquetDatasetStore
from pds.errors import DatasetIncomplete
from pds.manifest import DatasetManifest

__all__ = ["Snapshot", "dataset_snapshot", "project"]


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A committed dataset as one read sees it."""

    manifest: DatasetManifest
    schema: pa.Schema
    location: str


def dataset_snapshot(store: Store, key: str) -> Snapshot:
    """Check ``_SUCCESS``, then read the manifest and the dataset's Arrow schema.

    Raises:
        DatasetIncomplete: no ``_SUCCESS`` (no dataset, or an uncommitted one).
        NotFound / ManifestCorrupted: as ``ParquetDatasetStore.read_manifest``.
    """
    datasets = ParquetDatasetStore(store)
    if not datasets.dataset_exists(key):
        raise DatasetIncomplete(
            f"No committed dataset at {key!r}: _SUCCESS marker missing (never written, or not committed)",
            path=key,
        )
    manifest = datasets.read_manifest(key)
    schema = manifest.schema()
    if schema is None:  # a manifest written by remote-store: the first part's footer
        schema = datasets.read_schema(key)
    return Snapshot(manifest, schema, str(store.native_path(key)))


def project(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """*schema* restricted to *columns*, in their order.

    Raises:
        ValueError: an unknown or repeated column.
    """
    if columns is None:
        return schema
    unknown = [c for c in columns if schema.get_field_index(c) < 0]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the dataset has {schema.names}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"columns must not repeat, got {list(columns)}")
    return pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
