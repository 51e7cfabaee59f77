"""The exceptions pds raises.

RFC-0008 names remote_store's own classes, so pds raises those: ``except
remote_store.NotFound`` catches a missing manifest whether pds or
remote-store raised it. ``DatasetIncomplete`` and ``ManifestCorrupted`` are
the very classes of ``remote_store.ext.parquet``, so code written against
remote-store catches pds's errors unchanged. The classes pds adds all
subclass ``remote_store.RemoteStoreError``.
"""

from __future__ import annotations

from remote_store import (
    AlreadyExists,
    BackendUnavailable,
    CapabilityNotSupported,
    DirectoryNotEmpty,
    InvalidPath,
    NotFound,
    PermissionDenied,
    RemoteStoreError,
)
from remote_store.ext.parquet import DatasetIncomplete, ManifestCorrupted

__all__ = [
    "AlreadyExists",
    "BackendUnavailable",
    "CapabilityNotSupported",
    "CommitConflict",
    "CommitUnknown",
    "DataError",
    "DatasetIncomplete",
    "DirectoryNotEmpty",
    "InvalidPath",
    "ManifestCorrupted",
    "NotFound",
    "PartCorrupted",
    "PermissionDenied",
    "PreconditionFailed",
    "RemoteStoreError",
    "SchemaMismatch",
    "UpgradeRequired",
]


class PartCorrupted(RemoteStoreError):
    """A part listed in the manifest exists but cannot be used.

    Raised by ``read_dataset`` when a part is truncated, is not Parquet, or
    (with ``verify=True``) does not match the SHA-256 in the manifest.
    ``path`` names the part.
    """


class CommitConflict(RemoteStoreError):
    """A table commit lost the race for its version every time it tried
    (after retries with backoff). Nothing was committed; try again later."""


class CommitUnknown(RemoteStoreError):
    """A commit whose outcome could not be learned.

    The store may have applied the commit's manifest PUT while its reply was
    lost, and reading it back failed too (the store stayed unreachable). The
    table or pipeline is readable either way, and the writer removed none of
    the files its commit may reference. Look at ``history()`` (each version
    records its writer's ``commit_id``) before retrying, so that nothing is
    committed twice.
    """


class SchemaMismatch(RemoteStoreError):
    """Data whose schema is not the table's: an append in ``schema_mode="strict"``
    with other columns or types, or a merge that would narrow a type or drop a
    not-null column. The message names every field that differs. Nothing was
    written."""


class UpgradeRequired(CapabilityNotSupported):
    """A write on a table or pipeline written by an earlier pds format.

    pds reads every format it ever wrote, but writes only its own, and never
    upgrades silently (a pds that reads only the earlier format could not read
    the table any more). Such a table or pipeline opens read-only: reads, time
    travel, history and scans work; every write (append, delete, upsert, update,
    compact, vacuum, a pipeline's update, rebuild or compact) raises this before
    writing anything. Upgrade it once with ``Table.upgrade()``,
    ``Pipeline.upgrade()`` or ``pds upgrade URL KEY``. ``path`` names the key.
    A subclass of ``CapabilityNotSupported``.
    """


class PreconditionFailed(RemoteStoreError):
    """A compare-and-swap put lost: the object changed since it was read.

    Raised by ``RustStore.put(..., mode="update")``. Re-read and retry.
    """


class DataError(RemoteStoreError):
    """The Arrow input failed while it was consumed, or could not be encoded.

    For example a ``RecordBatchReader`` whose source raised mid-stream. Also
    rows a write refuses for their values: ``Table.replace``'s rows outside its
    filter (the message names the first). Nothing is committed when this is
    raised.
    """
