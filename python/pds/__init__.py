"""pds: Parquet datasets on any object store, with a Rust core.

A drop-in for ``remote_store.ext.parquet`` (RFC-0008): change the import line
and the same code runs faster and safer.

>>> import pyarrow as pa, pds
>>> store = pds.open_store("memory://")
>>> ds = pds.ParquetDatasetStore(store)
>>> ds.write_dataset(pa.table({"x": [1, 2, 3]}), "demo").row_count
3
>>> ds.read_dataset("demo", columns=["x"]).num_rows
3

pds logs through :mod:`logging` under the logger ``pds``: at INFO one line
per table commit (``pds.table``), dataset write (``pds.dataset``) and
pipeline update (``pds.pipeline``), at DEBUG each store request and retry
(``pds.store``, ``pds.table``). The Rust core caches each logger's level
the first time it logs: after changing a level at run time, call
:func:`pds.reset_log_cache`.
"""

from pds._core import __version__, reset_log_cache
from pds.backend import ObjectStoreBackend, open_store
from pds.dataset import ParquetDatasetStore
from pds.errors import (
    AlreadyExists,
    BackendUnavailable,
    CapabilityNotSupported,
    CommitConflict,
    CommitUnknown,
    DataError,
    DatasetIncomplete,
    InvalidPath,
    ManifestCorrupted,
    NotFound,
    PartCorrupted,
    PermissionDenied,
    PreconditionFailed,
    RemoteStoreError,
    SchemaMismatch,
    UpgradeRequired,
)
from pds.manifest import DatasetManifest, PartInfo
from pds.producers import Changes, GraphMismatch, Pipeline, ProduceError
from pds.table import Table

__all__ = [
    "AlreadyExists",
    "BackendUnavailable",
    "CapabilityNotSupported",
    "Changes",
    "CommitConflict",
    "CommitUnknown",
    "DataError",
    "DatasetIncomplete",
    "DatasetManifest",
    "GraphMismatch",
    "InvalidPath",
    "ManifestCorrupted",
    "NotFound",
    "ObjectStoreBackend",
    "ParquetDatasetStore",
    "PartCorrupted",
    "PartInfo",
    "PermissionDenied",
    "Pipeline",
    "PreconditionFailed",
    "ProduceError",
    "RemoteStoreError",
    "SchemaMismatch",
    "Table",
    "UpgradeRequired",
    "__version__",
    "open_store",
    "reset_log_cache",
]
