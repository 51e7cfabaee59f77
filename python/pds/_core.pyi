"""Type stubs for ``pds._core``, the Rust extension module.

Most users never import this: ``pds.ParquetDatasetStore`` and
``pds.ObjectStoreBackend`` wrap it. Every call that touches a store or
encodes data releases the GIL.
"""

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, final

import pyarrow as pa
from remote_store import Store

__version__: str

class ArrowStreamExportable(Protocol):
    """Anything that exports the Arrow C stream (pyarrow, polars, duckdb, ...)."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...

@final
class ObjectMeta:
    """Metadata of one object; ``key`` is relative to the store's root."""

    @property
    def key(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def last_modified(self) -> datetime: ...
    @property
    def e_tag(self) -> str | None: ...
    @property
    def version(self) -> str | None: ...

@final
class PutResult:
    """What a put reports: the new ETag / version and the size written."""

    @property
    def e_tag(self) -> str | None: ...
    @property
    def version(self) -> str | None: ...
    @property
    def size(self) -> int: ...

ProgressPhase = Literal["idle", "writing", "reading", "compacting", "vacuuming", "steps"]

@final
class Progress:
    """A long call's progress counters, shared with the call it is passed to
    (``progress=``): the call adds to them from its own threads, without the
    GIL; another thread reads them with :meth:`now`. What *done* and *total*
    count depends on the phase: rows written (``writing``; total: the input's
    rows, if known), parts read of the manifest's (``reading``), rows
    rewritten of the live rows planned (``compacting``), objects deleted of
    those planned (``vacuuming``), a pipeline's nodes (``steps``)."""

    def __init__(self) -> None: ...
    def now(self) -> tuple[ProgressPhase, int, int | None, int, int, int]:
        """``(phase, done, total or None, parts, rows, bytes)``: atomics read, no I/O, never waits."""
    def start(self, phase: ProgressPhase, total: int | None = None) -> None:
        """Enter *phase* with *total* units to do (None: not known), every count at 0.
        ValueError for an unknown phase."""
    def add(self, done: int = 1, *, parts: int = 0, rows: int = 0, bytes: int = 0) -> None:
        """Count *done* units more, and the parts, rows and bytes they took."""

@final
class RustStore:
    """An object store opened from a URL (``memory://``, ``file:///abs``, ``s3://bucket/prefix``).

    Raises ValueError for an unsupported URL or unknown option. Pickles as
    URL + options + ``credentials`` + ``pickle_secrets``; with
    ``pickle_secrets=False`` the pickled options leave out every credential
    option (:func:`is_credential_option`) and the ``credentials`` callable
    (unless its ``pickles_without_secrets`` attribute is true, as an AWS
    profile's is: it pickles as the profile's name), so that the unpickled
    copy takes its credentials from its own environment (this store uses
    them all).

    ``credentials`` (``s3://`` only): a callable returning ``(access_key_id,
    secret_access_key, session_token or None, seconds valid or None)``. It
    is called (with the GIL, from a worker thread) on the first request and
    again when the credentials are near expiry; it replaces the options' and
    the environment's keys. Its failure fails the request with
    ``remote_store.PermissionDenied``.
    """

    def __init__(
        self,
        url: str,
        options: Mapping[str, str] | None = None,
        credentials: Callable[[], tuple[str, str, str | None, float | None]] | None = None,
        pickle_secrets: bool = True,
    ) -> None: ...
    @staticmethod
    def over_store(store: Store) -> RustStore:
        """A handle on *store*, any ``remote_store.Store``, through which pds's
        write protocol runs on the Store's backend: each object operation
        calls the Store's own method, on a thread of the core's that takes
        the GIL for it (so the caller must not hold the GIL while the core
        runs: every function here releases it). No compare-and-swap and no
        ETags. The Store's exceptions reach the caller as they were raised,
        but ``NotFound`` and ``AlreadyExists``, which the core reads as
        answers and reports in its own words. A Store method cannot call pds
        itself. It pickles as the Store does. ``TypeError`` if *store* is not
        a Store."""
    @property
    def url(self) -> str: ...
    @property
    def scheme(self) -> Literal["memory", "file", "s3", "gs", "az", "remote-store"]: ...
    def counts(self) -> tuple[int, int, int]:
        """``(requests, bytes_read, bytes_written)`` this store has made and
        moved since it was opened: every GET (whole or one range), HEAD,
        PUT, multipart part and completion, LIST (once per listing), DELETE
        (once per object), COPY and rename. Shared by every user of this
        store, threads included; the client's own HTTP retries are not
        counted again. No I/O."""
    def head(self, key: str) -> ObjectMeta | None:
        """One HEAD request; ``None`` if the object is absent."""
    def get(self, key: str) -> bytes:
        """One GET. Raises remote_store.NotFound."""
    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` in one ranged GET."""
    def put(
        self,
        key: str,
        data: bytes,
        mode: Literal["overwrite", "create", "update"] = "overwrite",
        e_tag: str | None = None,
        version: str | None = None,
    ) -> PutResult:
        """Atomic PUT. ``create``: If-None-Match (raises remote_store.AlreadyExists).
        ``update``: compare-and-swap on ``e_tag``/``version`` (raises pds.PreconditionFailed)."""
    def delete(self, key: str) -> None:
        """Delete one object; absent is not an error."""
    def list(self, key: str, recursive: bool = False) -> tuple[list[ObjectMeta], list[str]]:
        """Objects below the folder *key*, and its sub-folders (non-recursive only)."""
    def folder_exists(self, key: str) -> bool:
        """Whether any object lives below *key* (one LIST request, limit 1 page)."""
    def delete_prefix(self, key: str) -> int:
        """Delete every object below *key*; returns the count."""
    def copy(self, src: str, dst: str, overwrite: bool = False) -> None: ...
    def rename(self, src: str, dst: str, overwrite: bool = False) -> None: ...
    def cache_usage(self) -> dict[str, tuple[int, int]]:
        """``(entries, bytes)`` held by this handle's object cache (``"objects"``)
        and by the process-wide caches of table segments (``"segments"``) and
        tombstones (``"tombstones"``; both in estimated bytes). No I/O."""

def write_dataset(
    store: RustStore,
    key: str,
    data: ArrowStreamExportable,
    *,
    dataset_key: str,
    compression: str,
    row_group_size: int | None,
    max_rows_per_file: int | None,
    schema_hash: str,
    run_id: str | None,
    metadata: Mapping[str, str] | None,
    total_rows: int | None,
    parallelism: int,
    io_concurrency: int | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> str:
    """Claim *key*, clear it, stream *data* into parts under it (create-only),
    then manifest.json, then _SUCCESS, and check that every part is still this
    writer's. Returns the manifest JSON. Without *overwrite* a committed
    dataset or another writer's claim is AlreadyExists; with it, the dataset
    is withdrawn and the key taken over. Capabilities are the caller's.
    *io_concurrency*: uploads in flight over the write (None: the store's default).
    *progress*: counts rows, parts and bytes as each part lands (phase ``writing``)."""

def write_parts(
    store: RustStore,
    key: str,
    data: ArrowStreamExportable,
    *,
    part_prefix: str,
    compression: str,
    row_group_size: int | None,
    max_rows_per_file: int | None,
    parallelism: int,
) -> list[tuple[str, int, int, str, int]]:
    """Encode and upload parts ``part-<prefix>-NNNNN.parquet`` under *key*, uncommitted.
    Returns ``(name, row_count, size_bytes, sha256, footer_bytes)`` per part. Used by Spark tasks."""

Condition = tuple[str, str, pa.Array | None]

def reset_log_cache() -> None:
    """Forget the levels of pds's loggers cached on the Rust side, so that a
    level set in Python since pds last logged takes effect. No I/O; each
    pds logger's next event reads its level again (taking the GIL once)."""

def is_secret_option(key: str) -> bool:
    """Whether the store option *key* holds a secret (hidden from ``repr``):
    secrets, tokens, passwords, SAS, connection strings, and any ``*key``
    but an ``*_id``."""

def is_credential_option(key: str) -> bool:
    """Whether the store option *key* gives credentials: a secret
    (:func:`is_secret_option`) or S3's access key id. A store opened with
    ``pickle_secrets=False`` does not pickle these."""

def committed_manifest(store: RustStore, key: str) -> str:
    """The text of the committed dataset's manifest, as it was while
    ``_SUCCESS`` was there (``DatasetIncomplete`` without ``_SUCCESS``; a
    dataset replaced again and again while it is read is
    ``DatasetIncomplete`` too, after a few attempts): a GET of the manifest,
    a HEAD of ``_SUCCESS``, a HEAD of the manifest, in sequence. Passed back
    as ``manifest=`` to :func:`read_dataset` or :func:`scan_dataset`, it
    saves them those 3 round trips."""

def read_dataset(
    store: RustStore,
    key: str,
    *,
    columns: Sequence[str] | None,
    verify: bool,
    filter: Sequence[Condition] | None = None,
    io_concurrency: int | None = None,
    manifest: str | None = None,
    progress: Progress | None = None,
) -> pa.Table:
    """Checked, concurrent, projected read of the dataset under *key*; row groups
    pruned by *filter*'s statistics before they are fetched. *io_concurrency*
    parts are read at once (``None``: 32 on S3, the cores locally); decoding
    uses every core. Five sequential round trips on pds manifests (two with
    *manifest*, the text :func:`committed_manifest` returned). *progress*: counts the parts
    decoded of the manifest's parts (phase ``reading``)."""

def scan_dataset(
    store: RustStore,
    key: str,
    *,
    columns: Sequence[str] | None,
    filter: Sequence[Condition] | None,
    batch_size: int | None,
    parallelism: int,
    io_concurrency: int | None = None,
    manifest: str | None = None,
) -> pa.RecordBatchReader:
    """Streaming read: checks first (every part's footer, *io_concurrency* at
    once), then batches in part order with bounded memory. *manifest*: as
    :func:`read_dataset`."""

def read_part(
    store: RustStore,
    key: str,
    *,
    columns: Sequence[str] | None = None,
    filter: Sequence[Condition] | None = None,
    schema: pa.Schema | None = None,
) -> pa.Table:
    """One part file: a HEAD, the footer, then only the projected column chunks.
    With *schema* (the dataset's), a part whose footer schema differs raises
    ``PartCorrupted`` before any data is decoded, and the table has exactly
    that (projected) schema."""

def scan_part(
    store: RustStore,
    key: str,
    *,
    columns: Sequence[str] | None = None,
    filter: Sequence[Condition] | None = None,
    batch_size: int | None = None,
    row_groups: Sequence[int] | None = None,
    schema: pa.Schema | None = None,
) -> pa.RecordBatchReader:
    """One part file, streamed: HEAD, footer, columns and filter checked first;
    batches decoded in the background a few ahead of the consumer. *row_groups*
    (file order) restricts the read, within the filter's pruning; an index the
    part lacks raises ValueError. *schema* as for :func:`read_part`. Errors
    mid-stream raise their pds class (``PartCorrupted``, ...) from the reader."""

def part_row_groups(store: RustStore, key: str) -> list[int]:
    """Row count of each row group of a part (HEAD + footer). Raises remote_store.NotFound."""

def delete_dataset(store: RustStore, key: str) -> None:
    """Delete the dataset's own objects (``_SUCCESS`` first and last, ``manifest.json``,
    ``_WRITING``, ``data.parquet``, ``part-*.parquet``; on file:// their staging files and
    the folder if left empty), never anything in a sub-folder. Cost: 1 one-level LIST,
    a DELETE per object (batched where the store can), 2 for ``_SUCCESS``."""

def read_schema(store: RustStore, key: str) -> pa.Schema:
    """The schema from the manifest, else from the first part's footer."""

def decode_parts(
    parts: Sequence[tuple[str, bytes]],
    *,
    columns: Sequence[str] | None,
    checksums: Sequence[str] | None = None,
    filter: Sequence[Condition] | None = None,
    schema: pa.Schema | None = None,
) -> tuple[pa.Table, int]:
    """Decode in-memory parts in parallel into one table; also returns the rows
    their footers hold (before any filter). Every part's schema is checked
    against *schema* (else the first part's) first: ``PartCorrupted`` names a
    part that differs. A decoder failure on damaged bytes is ``PartCorrupted``
    too, never a crash."""

def part_schema(data: bytes, name: str) -> pa.Schema:
    """The Arrow schema in a Parquet file's footer. ``PartCorrupted`` naming *name* if unreadable."""

def check_schema(schema: pa.Schema) -> None:
    """Raise ``TypeError``, naming the column, for a type pds cannot store
    exactly (unions, run-end encoding, list views, empty structs, no columns)."""

def dataset_claim(store: RustStore, location: str, *, take_over: bool) -> bytes:
    """Claim the dataset key *location* for a writer whose parts are written
    elsewhere (a Spark job): create ``_WRITING`` create-only, or with
    *take_over* replace whoever holds it (an overwrite). Returns the claim's
    token. Raises ``remote_store.AlreadyExists`` if another writer holds the
    key (without *take_over*). Cost: 1 PUT (+1 HEAD when refused)."""

def dataset_claim_check(store: RustStore, location: str, token: bytes) -> None:
    """Raise ``remote_store.AlreadyExists`` unless the claim on *location*
    still holds *token* (an overwrite took the key). Cost: 1 GET."""

def dataset_claim_release(store: RustStore, location: str, token: bytes) -> None:
    """Remove the claim on *location* if it still holds *token*; never
    raises for a lost claim. Cost: 1 GET + 1 DELETE."""

def dataset_commit_parts(
    store: RustStore,
    location: str,
    token: bytes,
    parts: Sequence[tuple[str, int, int, str, int | None]],
    *,
    schema: pa.Schema,
    dataset_key: str,
    compression: str,
    schema_hash: str,
    run_id: str | None,
    metadata: Mapping[str, str] | None,
    overwrite: bool,
) -> str:
    """Commit *parts* ``(name, rows, bytes, sha256, footer_bytes)``, uploaded
    under names of their own (a Spark job's tasks), as the dataset at
    *location* for the holder of the claim *token*, in the order given, and
    release the claim; returns the manifest JSON. The same commit as
    :func:`write_dataset`'s: without *overwrite*, ``remote_store.AlreadyExists``
    if a dataset is committed there; ``DatasetIncomplete`` if a part is
    missing (nothing committed). With *overwrite*, a committed dataset's
    ``manifest.json`` is swapped in place by compare-and-swap (``_SUCCESS``
    staying) and its files are deleted one request each (a failure is
    logged, not raised); otherwise the key is cleared of all but these parts
    and the manifest and ``_SUCCESS`` are created create-only. One LIST after
    the commit confirms the parts. ``remote_store.AlreadyExists`` if the
    claim was lost or another writer committed first."""

def check_key_free(store: RustStore, key: str, creating: Literal["dataset", "table", "pipeline"]) -> str | None:
    """Raise ``remote_store.AlreadyExists``, naming what is there and its key,
    unless a *creating* may be created at *key*: nothing of another kind at
    the key, and no dataset, table or pipeline at an ancestor of the key or
    below it (keys are exclusive). Returns the kind at the key (``"dataset"``,
    ``"unfinished dataset"``, ``"table"``, ``"pipeline"``, ``"table or
    pipeline"``) or ``None``. Cost: 5 HEADs per level of the key (at once),
    1 LIST of at most 1,000 objects below it (markers further down are not
    seen), and 1 to 3 GETs per table or pipeline found."""

def describe_key(store: RustStore, key: str, wanted: Literal["dataset", "table", "pipeline"]) -> str | None:
    """What a reader looking for a *wanted* finds at, around or below *key*
    instead ("a table is stored at ..."), or ``None``; for error messages.
    Costs what :func:`check_key_free` costs. The GIL is released."""

def kind_at(
    store: RustStore, key: str
) -> Literal["dataset", "unfinished dataset", "table", "pipeline", "table or pipeline"] | None:
    """What lives at *key* itself, not around it, or ``None``: its markers (5 HEADs, at once)
    and, for a table or pipeline, its first manifest's ``format`` (1 GET; 3 if vacuumed or unreadable).
    ``"table or pipeline"`` when its manifests cannot tell. The GIL is released."""

def schema_from_ipc(text: str) -> pa.Schema:
    """Parse a base64 Arrow IPC schema safely; ``ValueError`` with the reason if invalid."""

class BatchStream(Iterator[pa.RecordBatch]):
    """Batches of a streamed read, each waited for with the GIL released."""

    def __iter__(self) -> BatchStream: ...
    def __next__(self) -> pa.RecordBatch: ...

def table_merge_schema(table: pa.Schema, input: pa.Schema, key: str) -> pa.Schema:
    """The schema a table of schema *table* has after an append of data of schema *input* in
    ``schema_mode="merge"``: its columns (widened where *input* widens them), then *input*'s new
    columns as nullable. SchemaMismatch naming each field otherwise. No I/O."""

def same_logical_type(table: pa.DataType, input: pa.DataType) -> bool:
    """Whether a column of type *input* may be appended to a column of type
    *table* under ``Table.append``'s strict rule (the same logical type:
    the string, binary and list variants are one). No I/O."""

def codecs() -> list[str]:
    """Codec names accepted for ``compression``."""

# -- tables ------------------------------------------------------------------
# A version crosses as a TableVersion (its manifest's root); a whole manifest as a dict.

@final
class TableVersion:
    """One version of a table: its manifest's root, checked, without the file list
    (what a ``pds.Table`` is pinned to). Immutable; no I/O."""

    @property
    def version(self) -> int: ...
    @property
    def previous(self) -> int | None:
        """The version it was built on (``None`` for the table's creation)."""
    @property
    def created_at(self) -> datetime:
        """When it was committed (UTC, timezone-aware)."""
    @property
    def operation(self) -> str: ...
    @property
    def parameters(self) -> dict[str, Any]:
        """The operation's parameters (``rows_added``, ``files_removed``, ...), a new dict per call."""
    @property
    def schema(self) -> pa.Schema:
        """The version's full Arrow schema."""
    @property
    def commit_id(self) -> str | None: ...
    @property
    def table_id(self) -> str | None: ...
    @property
    def formats(self) -> list[str]:
        """The formats published beside pds's own, in name order."""
    @property
    def primary_key(self) -> str | None: ...
    @staticmethod
    def _restore(text: str) -> TableVersion:
        """The version a pickle holds (a ``TableVersion`` pickles as its root's fields)."""
    @property
    def properties(self) -> dict[str, Any]:
        """The settings fixed at creation: ``compression``, and ``primary_key``,
        ``row_group_size`` and ``target_file_size`` where set; a new dict per call."""

def table_create(
    store: RustStore,
    key: str,
    schema: pa.Schema,
    data: ArrowStreamExportable | None,
    *,
    primary_key: str | None,
    exist_ok: bool,
    compression: str,
    row_group_size: int | None,
    target_file_size: int | None,
    parallelism: int,
    formats: list[str] = ...,
) -> TableVersion:
    """Create the table at *key* (version 0, optionally with *data*); that version.

    With *exist_ok* and no *data*, an existing table is returned if it has *schema* and these
    settings (primary key, compression, row group size, target file size; ``None`` sizes mean
    the defaults); SchemaMismatch naming every difference otherwise. Nulls in a not-nullable
    column of *data* are SchemaMismatch, with the files already uploaded removed."""

def table_sync_formats(store: RustStore, key: str) -> dict[str, list[int]]:
    """Publish what the table's formats lack up to its latest version; per format, the versions whose
    entries or checkpoints were written."""

def table_enable_format(
    store: RustStore, key: str, format: str, *, table_id: str | None = None
) -> tuple[int, int, bool]:
    """Publish *format* for an existing table from its next version: (since, latest version, committed)."""

def table_append(
    store: RustStore,
    key: str,
    data: ArrowStreamExportable,
    *,
    schema_mode: Literal["strict", "merge"] | str,
    metadata: Mapping[str, str] | None,
    parallelism: int,
    table_id: str | None = None,
) -> TableVersion:
    """Append *data* as new data files and commit; the version it leaves.
    SchemaMismatch for nulls in a column the table declares not nullable (nothing committed).

    *table_id* (here and in the other commits): commit only to the table with that id (the
    ``table_id`` of the manifest a handle opened); NotFound, before anything is committed,
    if that table was dropped, or another table was created at *key*."""

def table_delete(
    store: RustStore,
    key: str,
    filter: Sequence[tuple[str, str, pa.Array | None]],
    *,
    parallelism: int,
    table_id: str | None = None,
) -> tuple[TableVersion, int | None, bool]:
    """Delete matching rows by tombstone: (version, rows deleted or None, committed).

    ``committed`` is False, and nothing is written, when no live row matches
    (a key range checks the candidates' statistics, footers and key column
    chunks; see ``Table.delete`` for the requests)."""

def table_manifest(store: RustStore, key: str, *, version: int | None = None, as_of: str | None = None) -> TableVersion:
    """The latest version (2 GETs), *version* (1 GET), or the version as of an RFC 3339 time
    (O(log versions) GETs).
    NotFound if there is no table (saying so for a dataset key), no such version, or no version
    at that time. ManifestCorrupted if a pointer or manifest is damaged or inconsistent.
    OverflowError for a *version* past 2**64 - 1 (the facade refuses it with ValueError first)."""

def table_manifest_dict(store: RustStore, key: str, version: int) -> dict[str, Any]:
    """The whole manifest of *version* as Python objects: the root plus ``data_files`` and
    ``tombstones`` (1 GET for the root, 1 per segment not cached). Errors as ``table_manifest``."""

def table_versions(store: RustStore, key: str, from_: int, to: int, /) -> list[TableVersion]:
    """Versions from..=to, newest first (vacuumed ones skipped); 1 GET each, 16 at once."""

def table_upsert(
    store: RustStore,
    key: str,
    data: ArrowStreamExportable,
    *,
    schema_mode: str,
    parallelism: int,
    table_id: str | None = None,
) -> tuple[TableVersion, int | None, bool]:
    """Upsert *data* by the table's primary key in one commit: (version,
    rows replaced or None, committed). ``ValueError`` for a table
    without a primary key, or data with a null, NaN or repeated key."""

def table_replace(
    store: RustStore,
    key: str,
    filter: Sequence[tuple[str, str, pa.Array | None]],
    data: ArrowStreamExportable,
    *,
    schema_mode: str,
    parallelism: int,
    table_id: str | None = None,
) -> tuple[TableVersion, int | None, bool]:
    """Remove the rows matching *filter* (none: every row) and add *data*
    (streamed), in one commit: (version, rows removed or None,
    committed, always ``True``: a replace of nothing by nothing is a version
    too). ``pds.DataError`` naming the first row of *data* the filter does
    not match, before anything is committed."""

def table_upsert_files(
    store: RustStore, key: str, files: str, *, schema: pa.Schema, parallelism: int
) -> tuple[TableVersion, int | None, bool]:
    """Upsert the rows of files from ``table_write_files`` (JSON), written in
    *schema* (the table's when the job started; ``SchemaMismatch`` if it
    changed since), reading their keys back: (version, rows replaced
    or None, committed). The files are removed if nothing can be committed."""

def table_update(
    store: RustStore,
    key: str,
    filter: Sequence[tuple[str, str, pa.Array | None]] | None,
    apply: Callable[[pa.RecordBatch], tuple[pa.Array | None, pa.RecordBatch]],
    *,
    columns: Sequence[str],
    description: str,
    parallelism: int,
    table_id: str | None = None,
) -> tuple[TableVersion, int | None, bool]:
    """Update rows: *filter* picks the candidates (pushed down), *apply*
    (called with the GIL, per batch of candidates) returns which match
    (None: all) and their new values. (version, rows updated,
    committed); an exception *apply* raises is re-raised as it is."""

def table_files(store: RustStore, key: str, version: int) -> pa.Table:
    """The data files of *version* in manifest order: ``path``, ``rows``, ``deleted_rows`` (null
    under a key-range tombstone), ``bytes``, ``row_groups``, ``sha256``, ``min`` and ``max``
    (JSON objects, column to value). Built segment by segment (each read once, not kept)."""

def table_scan(
    store: RustStore,
    key: str,
    *,
    version: int,
    columns: Sequence[str] | None,
    filter: Sequence[tuple[str, str, pa.Array | None]] | None,
    batch_size: int | None,
    parallelism: int,
    files: Sequence[str] | None = None,
) -> pa.RecordBatchReader:
    """Stream *version* with its deletes applied (only *files*, if given);
    *batch_size* None is 65,536 rows; *parallelism* files or pieces at once."""

def table_changes(
    store: RustStore, key: str, from_version: int, to_version: int, *, parallelism: int
) -> pa.RecordBatchReader:
    """Stream the rows inserted and deleted by versions from..=to, with _change_type and _commit_version.
    NotFound naming the version if one in the range, or the one before it, does not exist.
    Deletes include the rows still live in files a version removed (an
    overwrite's replaced rows); compactions add nothing. SchemaMismatch if
    rows of the range cannot be read in *to_version*'s schema."""

def table_compact(
    store: RustStore,
    key: str,
    *,
    target_file_size: int | None,
    min_deleted_fraction: float,
    parallelism: int,
    table_id: str | None = None,
    progress: Progress | None = None,
) -> tuple[TableVersion, bool, int, int]:
    """Compact: (version, committed, files removed, files added). Also
    commits, rewriting no file, to coalesce more than one tombstone into one.
    PartCorrupted (itself, not wrapped) if a file to rewrite is damaged.
    *progress*: counts the rows rewritten of the live rows planned (phase ``compacting``)."""

def table_vacuum(
    store: RustStore,
    key: str,
    *,
    retain_seconds: float,
    min_age_seconds: float,
    keep_versions: bool,
    dry_run: bool,
    table_id: str | None = None,
    progress: Progress | None = None,
) -> list[str]:
    """Keys (relative to the table) removed, or with dry_run to be removed (see ``Table.vacuum``).

    Only the table's own layout is touched (``data/``, ``tombstone/``, ``manifest/``,
    ``_latest_manifest``), never a nested key. ValueError, before any I/O, for a negative
    or non-finite duration or *retain_seconds* below *min_age_seconds*; a duration too
    long to hold is clamped (nothing is that old). Cost: 1 LIST, 2 GETs and a HEAD for
    the latest version, a GET per other retained manifest, a DELETE per object removed.
    *progress*: counts the objects deleted of those planned (phase ``vacuuming``), deleting
    them in batches of 1,000."""

def table_drop(store: RustStore, key: str) -> list[str]:
    """Drop the table at *key*; the keys (relative to it) removed. ``manifest/v00000000.json``
    and the pointer go first (readers then get NotFound), then the other manifests, segments,
    data files and tombstones; only the table's own layout, never a nested key. NotFound if
    no table (nor the remains of an interrupted drop) is there, naming a dataset or pipeline
    found instead. Cost: the occupancy check (5 HEADs per level, 1 LIST, 1 GET), 2 LISTs of
    the key, a DELETE per object (batched where the store can)."""

def table_upgrade(store: RustStore, key: str, *, table_id: str | None = None) -> tuple[str | None, int]:
    """Upgrade the table at *key* to the current format (``pds-table/3``, sealed): one new
    version (operation ``upgrade``) with the same data files and tombstones, committed by
    compare-and-swap; no data file rewritten. Returns ``(from_format, version)``:
    *from_format* describes the earlier format, or is ``None`` if the table was already
    current (nothing written; *version* is then its latest). With *table_id*, only the
    table of that id (a handle's): NotFound if it was dropped, also when another table
    (in any format) was created at its key. An upgraded table without a ``table_id`` gets a
    fresh one.
    NotFound if no table; ManifestCorrupted if a version or tombstone is damaged; CommitConflict if writers keep
    winning. Cost: the latest version (2 GETs + 1 HEAD); when upgrading ``pds-table/1``, a
    GET per tombstone recorded without a SHA-256, a PUT per segment (1,000 files) and 2 PUTs;
    when upgrading ``pds-table/2`` (writable, its schema changes rewrite every segment), 2 PUTs."""

def pipeline_upgrade(store: RustStore, root: str) -> tuple[str | None, int]:
    """Upgrade the pipeline at *root* to a sealed manifest: one new version (operation
    ``upgrade``, the same graph and parts, no node changed). Returns ``(from_format,
    version)`` as ``table_upgrade``. NotFound if no pipeline; CommitConflict if writers keep
    winning. Cost: the latest version (2 GETs); when upgrading, 2 PUTs."""

def table_write_files(
    store: RustStore,
    key: str,
    data: ArrowStreamExportable,
    *,
    prefix: str,
    schema: pa.Schema,
    compression: str,
    row_group_size: int | None,
    target_file_size: int | None,
    parallelism: int,
) -> str:
    """Upload *data* as uncommitted data files data/part-<prefix>-NNNNN.parquet; their entries as JSON.
    SchemaMismatch for nulls in a column *schema* declares not nullable (uploaded files removed)."""

def table_commit_files(
    store: RustStore,
    key: str,
    files: str,
    *,
    mode: Literal["append", "overwrite"] | str,
    schema: pa.Schema,
    primary_key: str | None,
    compression: str,
    row_group_size: int | None,
    target_file_size: int | None,
    metadata: Mapping[str, str] | None,
    schema_mode: Literal["strict", "merge"] | str = "strict",
) -> TableVersion:
    """Commit files from table_write_files in one version (creating the table if needed).
    With *schema_mode* ``"merge"``, an append whose *schema* is table_merge_schema of the
    table's and the data's changes the table's schema in the same version (the root alone; a
    ``pds-table/2`` table's whole file list); SchemaMismatch unless *schema* is the table's schema at commit time merged
    with the data's (a change another writer made meanwhile is accepted when the files still
    merge into it: the version committed has the files' schema).
    SchemaMismatch, before any commit and with the files removed, if a file's statistics show
    nulls in a column *schema* declares not nullable."""

# -- pipelines (pds.Pipeline) ------------------------------------------------------
# Manifests cross as dicts; node descriptions and states as JSON text (the form
# they travel in to worker processes and Spark tasks).

def pipeline_check_changes(key: Sequence[str], upserts: pa.Table | None, deletes: pa.Table | None) -> None:
    """ValueError if a key is both upserted and deleted. No I/O."""

def pipeline_apply_source(
    store: RustStore,
    root: str,
    node: str,
    upserts: ArrowStreamExportable | None,
    deletes: pa.Table | None,
    *,
    compression: str,
    target_rows: int,
    sort_budget: int,
) -> tuple[str, list[str]]:
    """Apply changes to a source (upserts streamed, sorted within sort_budget): (new state JSON, objects written)."""

def pipeline_merge_update(
    store: RustStore, root: str, node: str, *, compression: str, target_rows: int, sort_budget: int
) -> tuple[str, list[str]]:
    """A merge's update from its feeders' (the seed's three layers): (state JSON, objects written)."""

def pipeline_compact_node(
    store: RustStore, root: str, node: str, *, compression: str, target_rows: int, sort_budget: int
) -> tuple[str, int, int, list[str]]:
    """A source's or stage's parts compacted (patches merged in, small parts merged):
    (state JSON with an empty update, parts rewritten, parts written, objects written)."""

def pipeline_read(store: RustStore, root: str, node: str) -> pa.Table:
    """A node's whole content: key and value columns, sorted by key."""

def pipeline_read_batches(store: RustStore, root: str, node: str) -> pa.RecordBatchReader:
    """``pipeline_read``'s rows as a stream, a few parts in memory at a time."""

def pipeline_update(store: RustStore, root: str, node: str) -> tuple[pa.Table, pa.Table]:
    """What a node's version changed: (rows of every changed key, deleted keys)."""

def pipeline_latest(store: RustStore, root: str) -> dict[str, Any] | None:
    """The latest manifest (2 GETs + 1 HEAD), or None if there is no pipeline
    (NotFound, 1 HEAD more, if a dataset lives there; ManifestCorrupted for a
    damaged or inconsistent manifest, or a table's). A manifest of an earlier
    format names it in ``upgrade_required``."""

def pipeline_version(store: RustStore, root: str, version: int) -> dict[str, Any]:
    """The manifest of *version* (1 GET)."""

def pipeline_create(store: RustStore, root: str, manifest: Mapping[str, Any], *, exist_ok: bool) -> dict[str, Any]:
    """Create the pipeline at *root* with *manifest* as version 0; return it.
    ``remote_store.AlreadyExists`` if anything occupies the key (see
    :func:`check_key_free`), unless it is a pipeline and *exist_ok* (then its
    latest version is returned). ValueError if *manifest* is not one."""

def pipeline_commit(store: RustStore, root: str, expected: int | None, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Commit *manifest* as the version after *expected*: CommitConflict if another won.
    Returns the committed manifest."""

def pipeline_vacuum(
    store: RustStore,
    root: str,
    *,
    retain_seconds: float,
    min_age_seconds: float,
    keep_versions: bool,
    dry_run: bool,
    progress: Progress | None = None,
) -> list[str]:
    """Keys (relative to the pipeline) removed, or with dry_run to be removed (see
    ``Pipeline.vacuum``; the arguments, errors and costs are ``table_vacuum``'s)."""

@final
class StageRun:
    """One stage's incremental update in progress: hands out groups, takes
    back what Produce emitted, then writes the stage's new state."""

    def __init__(
        self,
        store: RustStore,
        root: str,
        stage: str,
        sources: Sequence[str],
        *,
        rebuild: bool,
        compression: str,
        target_rows: int,
        sort_budget: int,
        range: str | None = None,
        job: str | None = None,
    ) -> None:
        """With *range* (a key range's JSON), a map task of a split update:
        only the source keys in the range, finished with finish_map(). With
        *job*, every object written is named starting with it."""
    def schema(self) -> pa.Schema:
        """The physical schema push() takes."""
    def next_chunk(
        self, whole: bool, max_rows: int, side_rows: int | None = None
    ) -> tuple[pa.RecordBatch, list[tuple[pa.RecordBatch, list[int]]], bool] | None:
        """(keys, [(rows, offsets) per source], continued), or None at the end.
        With *whole*, a chunk ends at a group's end, unless a single-source
        group would make it larger than 8 times *max_rows* rows: then the group
        goes on in the next chunk (``continued``). A join's chunk holds at most
        *max_rows* keys and *side_rows* rows of each source: a key with more
        ends the chunk, open (see ``open_sources``)."""
    def open_sources(self) -> list[int]:
        """A join: the sources that may have more rows of the last chunk's last key."""
    def pull_open(self, source: int, max_rows: int) -> pa.RecordBatch | None:
        """A join: up to *max_rows* more rows of the open key from *source*, or None."""
    def push(self, batch: pa.RecordBatch) -> None:
        """Rows Produce emitted, in the physical schema."""
    def counts(self) -> tuple[int, int]:
        """(rows handed out, rows taken back)."""
    def finish(self) -> tuple[str, list[str]]:
        """Write the new state: (state JSON, objects written)."""
    def finish_map(self, *, stream: bool = False) -> tuple[str, Any, list[pa.RecordBatch], list[pa.RecordBatch]]:
        """Finish a map task: (result JSON with ``mappings``, ``rows_in``,
        ``rows_out``, ``changed_keys``, ``created``; emitted rows, sorted by
        target key; removed key-mappings pairs; for a stage whose
        key-mappings are derived from its leading key columns, the changed
        source keys, whose pairs are not stored). The emitted rows are a
        list of batches (memory: the task's whole output), or with *stream*
        a ``pyarrow.RecordBatchReader`` over the run's external sort
        (memory: ``sort_budget``; its spill files go when it is exhausted
        or dropped). Nothing is committed; on an error, what it wrote is
        removed (an error while the stream is read leaves that to the
        caller: the objects are named after the job)."""
    def close(self) -> None:
        """Drop the run and its spill files."""

def pipeline_stage_ranges(
    stage: str,
    sources: Sequence[str],
    which: Literal["source", "target"],
    max_ranges: int,
    *,
    touched_only: bool = False,
) -> list[str]:
    """A split stage update's key ranges (JSON): ``"source"`` for the map
    tasks (aligned with the key-mappings parts, else the first source's
    content parts), ``"target"`` for the reduce tasks (aligned with the
    content parts). With *touched_only*, only the source ranges some
    source's update may hold keys of. No I/O."""

def pipeline_assign(stage: str, ranges: Sequence[str], batch: pa.RecordBatch) -> list[int]:
    """For each row (holding the stage's key columns), the index of the range holding it."""

def pipeline_prefix_spans(stage: str, ranges: Sequence[str], batch: pa.RecordBatch) -> list[tuple[int, int]]:
    """For each row (a derived stage's changed source keys, as ``finish_map``
    hands them on), the first and last index of the *ranges* (covering every
    key) that may hold the stage's rows of that key. ``ValueError`` for a
    stage that derives no key-mappings."""

def pipeline_key_bounds(stage: str, batch: pa.RecordBatch) -> tuple[str, str] | None:
    """The least and greatest key of *batch* (holding the stage's key columns)
    as hex texts that order as the keys do; ``None`` for no row."""

def pipeline_range_lows(stage: str, ranges: Sequence[str]) -> list[str]:
    """The lower bounds of *ranges* (covering every key in order) after the
    first, spelled as :func:`pipeline_key_bounds` spells keys: a key lies in
    range ``i`` where ``i`` of them are at or below it. ``ValueError`` for
    ranges that do not cover every key in order."""

def pipeline_reduce_range(
    store: RustStore,
    root: str,
    stage: str,
    range: str,
    emitted: Sequence[pa.RecordBatch] | ArrowStreamExportable,
    removed: Sequence[pa.RecordBatch],
    *,
    compression: str,
    target_rows: int,
    sort_budget: int,
    job: str | None = None,
    clip: bool = False,
    derived: Sequence[pa.RecordBatch] = ...,
) -> str:
    """A reduce task: merge a target range's rows into its content parts and
    write its update; the result's JSON. Nothing is committed (on an error,
    what it wrote is removed).

    *emitted* is a list of batches, or any Arrow stream (an object with
    ``__arrow_c_stream__``, such as a ``pyarrow.RecordBatchReader``) read
    batch by batch, with the GIL released, into the range's external sort:
    memory stays within *sort_budget* plus one batch, whatever the range's
    size. *removed* (the pairs to drop: as many as the change's old
    targets) is held in memory. *clip*: *emitted* and *removed* may hold
    rows of other ranges (whole batches shuffled to each range they span),
    which are dropped; otherwise such a row is ``ValueError``. *derived*:
    a derived stage's changed source keys routed to this range
    (:func:`pipeline_prefix_spans`), whose old rows the reduce finds in the
    range's parts."""

def pipeline_key_samples(stage: str, batch: pa.RecordBatch, every: int) -> str:
    """The target key of every *every*-th row of *batch* (JSON), for planning."""

def pipeline_ranges_from_samples(stage: str, samples: Sequence[str], max_ranges: int) -> list[str]:
    """At most *max_ranges* target ranges (JSON) from sampled keys. No I/O."""

def pipeline_stitch_stage(
    store: RustStore,
    root: str,
    stage: str,
    maps: Sequence[str],
    reduces: Sequence[str],
    *,
    compression: str,
    target_rows: int,
    sort_budget: int,
) -> str:
    """The stage's new state (JSON) from its map and reduce results. No I/O."""

# A source's update split by key range (Spark)

def pipeline_source_ranges(source: str, max_ranges: int) -> list[str]:
    """The key ranges (JSON) a source's changes are split into: at most
    *max_ranges*, of about equal rows, cut at its stored content parts'
    boundaries (each part in one range); one unbounded range when nothing
    is stored (plan a first build from sampled keys instead, with
    :func:`pipeline_key_samples` and :func:`pipeline_ranges_from_samples`
    on the source's view). ``ValueError`` for a view that is not a
    source's. No I/O."""

def pipeline_apply_source_range(
    store: RustStore,
    root: str,
    source: str,
    range: str,
    upserts: Sequence[pa.RecordBatch] | ArrowStreamExportable,
    deletes: Sequence[pa.RecordBatch],
    *,
    compression: str,
    target_rows: int,
    sort_budget: int,
    job: str | None = None,
) -> str:
    """A source's range task: apply the *upserts* (the source's public
    columns, in its order: a list of batches, or an Arrow stream pushed
    into the range's external sort as it is read, memory within
    *sort_budget*) and *deletes* (its key columns, in memory) of keys in
    *range*, rewriting only the range's content parts, its objects named
    after *job*; the result's JSON (``content``, ``update``, ``created``).
    A range cutting a stored part is ``ValueError`` before any write, a
    key outside the range ``ValueError`` when it is read; a key both upserted and deleted is
    ``ValueError``, a null key ``SchemaMismatch``. Nothing is committed; on
    an error, what it wrote is removed. Cost: the reads and writes of the
    range's touched content parts (the GIL is released)."""

def pipeline_stitch_source(source: str, outputs: Sequence[str]) -> str:
    """The source's new state (JSON) from its range tasks' results: the
    parts outside every processed range kept by reference, each range's
    new parts in its place, its update the ranges' in key order. No I/O."""
