"""``ParquetDatasetStore``: RFC-0008's dataset API, accelerated in Rust.

One write protocol (Rust's ``dataset`` module), on any Store:

- **pds's own backend** (:class:`pds.ObjectStoreBackend`): encoding,
  hashing, upload and download all run in Rust with the GIL released. Parts
  are encoded while they fill and uploaded as they are encoded; reads fetch
  every part at once and decode only projected columns.
- **Any other ``remote_store`` backend**: the same write runs through
  ``RustStore.over_store``, each object operation a call of the Store's own
  method (``write`` for the claim, ``write_atomic`` for parts, manifest and
  marker, ``read_bytes``, ``get_file_info``, ``delete``, ``list_files``,
  ``list_folders``, ``copy``, ``move``), one part at a time.
  Reads decode in Rust the bytes the Store's ``read_bytes`` returns.

On both, a dataset is parts, then ``manifest.json``, then ``_SUCCESS``, and a
reader that checks ``_SUCCESS`` never sees a partial dataset.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from remote_store import Capability, RemotePath, Store

from pds import _core, _progress
from pds._filters import core_conditions
from pds.backend import native_handle, open_store
from pds.errors import (
    AlreadyExists,
    CapabilityNotSupported,
    DataError,
    DatasetIncomplete,
    InvalidPath,
    ManifestCorrupted,
    NotFound,
    PartCorrupted,
    RemoteStoreError,
)
from pds.manifest import DatasetManifest, schema_hash

__all__ = ["ParquetDatasetStore"]

_MANIFEST = "manifest.json"
_SUCCESS = "_SUCCESS"
_WRITING = "_WRITING"
"""The claim of the writer that holds the key (see the Rust ``dataset`` module)."""
_ACCEPTED = (
    "a pyarrow.Table, pyarrow.RecordBatch, pyarrow.RecordBatchReader, or any object "
    "with __arrow_c_stream__ (polars.DataFrame, duckdb relations, ...)"
)


def _parallelism() -> int:
    return max(2, os.cpu_count() or 2)


_MAX_KEY_BYTES = 1024
"""The longest key pds accepts, in UTF-8 bytes (S3's limit)."""
_MAX_ROWS = 2**63 - 1


def _check_key(key: object) -> str:
    """Validate a dataset key before any I/O (remote-store's rules, plus UTF-8 and length)."""
    if not isinstance(key, str):
        raise TypeError(f"dataset key must be a str, got {type(key).__name__}")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidPath("dataset key is not valid Unicode (it holds a lone surrogate)", path=key) from None
    if size > _MAX_KEY_BYTES:
        raise InvalidPath(f"dataset key is {size} bytes long; at most {_MAX_KEY_BYTES} are allowed", path=key)
    RemotePath(key)  # raises InvalidPath for '..', NUL, empty
    if key.strip("/") in ("", "."):
        raise InvalidPath("dataset key must not be the store root", path=key)
    return key


def _normal_key(key: str) -> str:
    """The key as the store names it (``/abs//x/`` is ``abs/x``), recorded in the manifest."""
    return str(RemotePath(key))


def _check_rows(value: object, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _MAX_ROWS:
        raise ValueError(f"{name} must be an int from 1 to 2**63 - 1, or None; got {value!r}")
    return value


def _check_fields(schema: pa.Schema) -> None:
    """Refuse, before any I/O, what pds cannot store exactly.

    A NUL in a column name cannot cross the Arrow C interface (names are C
    strings), so it would be cut short; the Rust check names every Arrow type
    the Parquet encoder cannot write or read back as the same type.
    """

    def names(field: pa.Field) -> Iterator[str]:
        yield field.name
        t = field.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                yield from names(t.field(i))
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            yield from names(t.value_field)
        elif pa.types.is_map(t):
            yield from names(t.key_field)
            yield from names(t.item_field)

    for field in schema:
        for name in names(field):
            if "\x00" in name:
                raise ValueError(f"column name {name!r} holds a NUL character, which Arrow's C interface cannot carry")
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"column name {name!r} is not valid Unicode (a lone surrogate)") from None
    _core.check_schema(schema)


class _InputGuard:
    """Wraps a streamed input: checks each batch against the declared schema,
    and remembers an exception that is not an error (``KeyboardInterrupt``,
    ``SystemExit``) so that it reaches the caller as itself."""

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self._reader = reader
        self.interrupt: BaseException | None = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        schema = self._reader.schema
        try:
            for index, batch in enumerate(self._reader):
                if not batch.schema.equals(schema):
                    raise DataError(
                        f"batch {index} of the input has schema {batch.schema} but the stream declares {schema}"
                    )
                yield batch
        except (KeyboardInterrupt, SystemExit) as exc:
            self.interrupt = exc
            raise

    def reraise(self) -> None:
        if self.interrupt is not None:
            raise self.interrupt


def _arrow_input(data: object, caller: str = "write_dataset") -> tuple[Any, pa.Schema, int | None, _InputGuard | None]:
    """The input as something Rust can stream, its schema, its row count if
    known, and the guard of a streamed input. *caller* (the public call that
    takes *data*) is named in the ``TypeError`` for an input it cannot take.

    Nothing is copied: Tables and readers pass through the Arrow C stream.
    """
    if isinstance(data, pa.Table):
        return data, data.schema, data.num_rows, None
    if isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
        return table, table.schema, table.num_rows, None
    if isinstance(data, pa.Array | pa.ChunkedArray):
        raise TypeError(
            f"{caller} expects {_ACCEPTED}; got a {type(data).__name__} (one column): "
            "wrap it in a table, e.g. pa.table({'name': data})"
        )
    if hasattr(data, "__arrow_c_stream__"):
        if isinstance(data, pa.RecordBatchReader):
            # Read pyarrow's own reader directly: through the C stream, a batch
            # that does not match the declared schema would be reinterpreted.
            reader = data
        else:
            try:
                reader = pa.RecordBatchReader.from_stream(data)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                raise TypeError(f"{caller} expects a stream of record batches: {exc}") from exc
        guard = _InputGuard(reader)
        return pa.RecordBatchReader.from_batches(reader.schema, guard.batches()), reader.schema, None, guard
    raise TypeError(f"{caller} expects {_ACCEPTED}; got {type(data).__module__}.{type(data).__qualname__}")


def _check_columns(columns: object) -> list[str] | None:
    if columns is None:
        return None
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise TypeError(f"columns must be a list of str or None, got {type(columns).__name__}")
    out = list(columns)
    if not all(isinstance(c, str) for c in out):
        raise TypeError("columns must be a list of str")
    return out


Filter: TypeAlias = pc.Expression | Sequence[tuple[str, str, Any]]
"""A row filter: a ``pyarrow.compute.Expression``, or a list of
``(column, op, value)`` tuples that must all hold. ``op`` is one of ``==``,
``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in`` (value: a list), or
``is_null`` / ``is_not_null`` (no value)."""

_NULL_OPS = ("is_null", "is_not_null", "is null", "is not null")
_SET_OPS = ("in", "not in")
_CMP_OPS = ("==", "=", "!=", "<>", "<", "<=", ">", ">=")

_Conditions: TypeAlias = list[tuple[str, str, pa.Array | None]]
"""Exact conditions with their values as Arrow arrays, as the Rust core takes them."""


_RawConditions: TypeAlias = list[tuple[str, str, Any]]


def _check_filter(flt: object) -> tuple[_RawConditions | None, pc.Expression | None]:
    """Split a filter into tuples Rust can push down, or an Expression.

    The tuples' shape is checked here, before any I/O; their values are
    checked against the column types once the schema is known
    (:func:`_exact_conditions`), before any part is read.
    """
    if flt is None:
        return None, None
    if isinstance(flt, pc.Expression):
        return None, flt
    if isinstance(flt, str) or not isinstance(flt, Sequence):
        raise TypeError(f"filter must be a pyarrow.compute.Expression or a list of (column, op, value); got {flt!r}")
    out: _RawConditions = []
    for item in flt:
        if not isinstance(item, tuple | list) or len(item) not in (2, 3):
            raise TypeError(f"filter conditions are (column, op, value) tuples; got {item!r}")
        column, op = item[0], item[1]
        if not isinstance(column, str) or not isinstance(op, str):
            raise TypeError(f"filter column and op must be str; got {item!r}")
        key = op.strip().lower()
        value = item[2] if len(item) == 3 else None
        if key in _NULL_OPS:
            out.append((column, key.replace(" ", "_"), None))
        elif key in _SET_OPS:
            if isinstance(value, str | bytes) or not isinstance(value, Sequence | set | frozenset):
                raise TypeError(f"{op!r} needs a list of values; got {value!r}")
            out.append((column, key, list(value)))
        elif key in _CMP_OPS:
            if value is None:
                raise ValueError(f"compare with None using 'is_null' / 'is_not_null', not {op!r}")
            out.append((column, {"=": "==", "<>": "!="}.get(key, key), value))
        else:
            raise ValueError(f"unknown filter operator {op!r}; use {', '.join((*_CMP_OPS, *_SET_OPS, *_NULL_OPS))}")
    return out, None


def _check_batch_size(value: object) -> int | None:
    return _check_rows(value, "batch_size")


def _check_text(value: str, what: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} {value!r} is not valid Unicode (it holds a lone surrogate)") from None


def _check_metadata(run_id: object, metadata: object) -> dict[str, str] | None:
    if run_id is not None and not isinstance(run_id, str):
        raise TypeError(f"run_id must be a str or None, got {type(run_id).__name__}")
    if run_id is not None:
        _check_text(run_id, "run_id")
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise TypeError("metadata must be a dict[str, str] or None")
    for k, v in metadata.items():
        _check_text(k, "metadata key")
        _check_text(v, f"metadata value of {k!r}")
    return dict(metadata)


class ParquetDatasetStore:
    """High-level Parquet dataset read/write on top of any ``remote_store.Store``.

    A drop-in for ``remote_store.ext.parquet.ParquetDatasetStore``: the same
    constructor, methods, file layout, manifest and errors.

    Args:
        store: The Store to read and write through. With a
            :class:`pds.ObjectStoreBackend` all I/O runs in Rust. A URL
            (``"s3://bucket/lake"``, ``"file:///data/lake"``, ``"memory://"``)
            or an absolute folder path (``str`` or ``pathlib.Path``) is
            opened with :func:`pds.open_store` and *storage_options*.
        compression: Parquet codec: ``"zstd"`` (default, level 1),
            ``"snappy"``, ``"gzip"``, ``"brotli"``, ``"lz4"`` or ``"none"``.
        row_group_size: Rows per row group; ``None`` for the default (1Mi).
        max_rows_per_file: Split into ``part-NNNNN.parquet`` files of at most
            this many rows; ``None`` writes one ``data.parquet``.
        storage_options: Options for :class:`pds.ObjectStoreBackend` when
            *store* is a URL or path (``endpoint``, ``region``, ...).
        io_concurrency: Requests kept in flight by reads and writes of a
            :class:`pds.ObjectStoreBackend` store, apart from the cores that
            decode and encode. ``None``: 32 on S3 (requests wait on round
            trips there), the number of cores on memory and local files. A
            write shares it among the parts it encodes at once: 2 to 8
            uploads of 8 MiB chunks in flight per part.

    Raises:
        TypeError: *store* is neither a ``remote_store.Store`` nor a URL or
            path, or *storage_options* come with a Store.
        ValueError: an unknown codec or a non-positive size; a relative path
            or a URL pds cannot open.

    No I/O happens on construction.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        compression: str = "zstd",
        row_group_size: int | None = None,
        max_rows_per_file: int | None = None,
        storage_options: Mapping[str, object] | None = None,
        io_concurrency: int | None = None,
    ) -> None:
        if isinstance(store, str | os.PathLike):
            store = open_store(store, **dict(storage_options or {}))
        elif storage_options:
            raise TypeError("storage_options are for a URL or path; a Store is already configured")
        if not isinstance(store, Store):
            raise TypeError(f"store must be a remote_store.Store, a URL or a path, got {type(store).__name__}")
        if not isinstance(compression, str) or compression.lower() not in (*_core.codecs(), "uncompressed"):
            raise ValueError(f"unknown compression codec {compression!r}; expected one of {', '.join(_core.codecs())}")
        self._store = store
        self._compression = compression
        self._row_group_size = _check_rows(row_group_size, "row_group_size")
        self._max_rows_per_file = _check_rows(max_rows_per_file, "max_rows_per_file")
        if io_concurrency is not None and (
            not isinstance(io_concurrency, int) or isinstance(io_concurrency, bool) or not 1 <= io_concurrency <= 4096
        ):
            raise ValueError(f"io_concurrency must be an int from 1 to 4096, or None; got {io_concurrency!r}")
        self._io_concurrency = io_concurrency
        self._native = native_handle(store)
        self._adapted: _core.RustStore | None = None

    @property
    def store(self) -> Store:
        """The underlying store."""
        return self._store

    @property
    def compression(self) -> str:
        """The Parquet compression codec."""
        return self._compression

    @property
    def row_group_size(self) -> int | None:
        """Rows per row group, or ``None`` for the default."""
        return self._row_group_size

    @property
    def io_concurrency(self) -> int | None:
        """Requests a read keeps in flight, or ``None`` for the store's default."""
        return self._io_concurrency

    @property
    def max_rows_per_file(self) -> int | None:
        """Rows per part file, or ``None`` for a single file."""
        return self._max_rows_per_file

    # -- writing -----------------------------------------------------------

    def write_dataset(
        self,
        table: pa.Table,
        key: str,
        *,
        overwrite: bool = False,
        run_id: str | None = None,
        metadata: dict[str, str] | None = None,
        progress: bool | None = None,
    ) -> DatasetManifest:
        """Write *table* as a Parquet dataset under *key* (PDS-002, PDS-005, PDS-011).

        *table* may be a ``pyarrow.Table`` or anything that exports
        ``__arrow_c_stream__`` (a ``RecordBatchReader``, a polars DataFrame):
        it is consumed as a stream without copying. An empty table writes a
        valid, empty dataset.

        Sequence: parts (each written atomically), then ``manifest.json``, then
        ``_SUCCESS``; an overwrite of a committed dataset on a store that can
        compare-and-swap (pds's own backend) swaps ``manifest.json`` in place
        instead (see Concurrency). If anything
        fails, nothing is committed and the parts written so far are removed.

        With ``progress=True`` (``None``, the default: if ``PDS_PROGRESS`` is
        set), the rows, parts and bytes written so far show on stderr while it
        runs, against the table's rows (a stream's total is not known: a
        count); see the logging guide.

        Returns:
            The manifest written.

        Raises:
            TypeError: *table* is not Arrow data, *run_id* / *metadata* have
                the wrong type, or *progress* is not a bool or None.
            InvalidPath: *key* is empty or contains ``..`` or NUL.
            CapabilityNotSupported: the store lacks ``ATOMIC_WRITE``, or
                ``DELETE`` when *overwrite* is true.
            AlreadyExists: a dataset exists at *key* and *overwrite* is false;
                another writer holds the key (its ``_WRITING`` claim, or a
                killed writer's: ``overwrite=True`` clears it); an
                overwrite took the key from this writer mid-write; or, with
                or without *overwrite*, a table or pipeline is at *key*, or
                a dataset, table or pipeline lies at an ancestor of *key* or
                below it (keys are exclusive; the message names what is
                there and its key). Nothing is written or deleted then.
            TypeError: a column type pds cannot store (unions, run-end
                encoding, ...), before any I/O; the message names the column.
            ValueError: a NUL or lone surrogate in a column name or metadata.
            DataError: the input stream failed while it was read, or a batch
                did not match the stream's declared schema.

        Concurrency: the key is claimed before the first part (a create-only
        ``_WRITING``), so of writers racing without *overwrite* exactly one
        wins. ``overwrite=True`` takes the key from whoever holds it (a live
        writer then fails, a killed one's claim is cleared). On pds's own
        backend an overwrite of a committed dataset is atomic: the old
        dataset stays committed and readable while the new parts upload
        (named ``part-<12 hex>-NNNNN.parquet``, for this write alone), one
        compare-and-swap of ``manifest.json`` commits (``_SUCCESS`` stays),
        and only then are the old parts deleted. Readers never see the
        dataset missing or a mix of rows; an overwrite that fails or is
        killed leaves the old dataset exactly as it was; of overwrites
        racing, one commits and the others raise ``AlreadyExists``, removing
        their parts. A lost reply to the swap is recognised as the writer's
        own (the manifest holds its bytes). Where no dataset is committed,
        the key is cleared and parts get RFC-0008's names. On another
        remote_store backend (no compare-and-swap), an overwrite withdraws
        the committed dataset (``_SUCCESS`` first) and deletes its files
        before writing (PDS-011's delete-then-write): readers see no dataset
        meanwhile, and a failure leaves none. Parts are created create-only
        and a writer checks, after its commit, that every part is still the
        object it wrote (by size where the store gives no ETag): a writer
        told ok keeps exactly its rows until a later write replaces them
        whole, and a reader never gets a mix. A lost reply to the claim or
        to ``_SUCCESS`` is recognised as the writer's own. On another
        remote_store backend, the Store's methods run on threads of pds's
        core while the caller waits; what they raise reaches the caller as it
        was raised, but ``NotFound`` and ``AlreadyExists`` (answers the
        protocol reads: an object missing, or there); a create-only write
        that failed otherwise may have landed, so it is tried again (up to 3
        times), recognising its own object.

        Cost: on the fast path, memory per part in flight (one per core) is
        the compressed pages of one row group, 64Ki rows of input and its
        chunk uploads (8 MiB each, 2 to 8 in flight: *io_concurrency* shared
        among the parts); one PUT (or multipart upload) per part, plus a copy
        and a DELETE for the first part of a stream of unknown length with
        *max_rows_per_file* that grows past 16 MiB and proves the only part
        (uploaded as ``part-00000.parquet`` before its name is known), plus
        two small PUTs (one, a compare-and-swap, for an overwrite of a
        committed dataset); the claim (1 PUT, 4 GETs, 1 DELETE; 1 GET per
        part after the first, and a GET and a HEAD before each multipart part
        completes); with *overwrite*, the committed manifest read first (a
        GET and 2 HEADs); clearing the key where no dataset is committed (1
        LIST, a DELETE per object found, and one for ``_SUCCESS`` with
        *overwrite*), or, after an overwrite's swap, a DELETE per object of
        the replaced dataset; the check after the commit (1 LIST per 1,000
        parts); and the exclusivity check: 5 HEADs per level of *key*
        (``a/b``: 10, at once), 1 LIST of at most 1,000 objects below it
        (markers further down are not seen), and 1-3 GETs per table or
        pipeline found. An overwrite checks once more before it takes the
        key.
        """
        key = _check_key(key)
        show = _progress.enabled(progress)
        data, schema, total_rows, guard = _arrow_input(table)
        _check_fields(schema)
        meta = _check_metadata(run_id, metadata)
        if not self._store.supports(Capability.ATOMIC_WRITE):
            raise CapabilityNotSupported(
                f"write_dataset requires ATOMIC_WRITE capability for key {key!r}",
                path=key,
                capability=Capability.ATOMIC_WRITE.value,
            )
        if overwrite:
            if not self._store.supports(Capability.DELETE):
                raise CapabilityNotSupported(
                    f"write_dataset with overwrite=True requires DELETE capability for key {key!r}",
                    path=key,
                    capability=Capability.DELETE.value,
                )
            handle, location = self._rust(key)  # validates the key before I/O
            self._check_free(key)  # never replace a table, nor what is nested
        else:
            handle, location = self._rust(key)
            if self.dataset_exists(key):
                raise AlreadyExists(f"Dataset already exists at {key!r}", path=key)

        try:
            with _progress.shown(handle, f"writing dataset {key}", show) as shown:
                text = _core.write_dataset(
                    handle,
                    location,
                    data,
                    dataset_key=_normal_key(key),
                    compression=self._compression,
                    row_group_size=self._row_group_size,
                    max_rows_per_file=self._max_rows_per_file,
                    schema_hash=schema_hash(schema),
                    run_id=run_id,
                    metadata=meta,
                    total_rows=total_rows,
                    # A remote-store backend takes the parts in their order
                    # (PDS-002): the core encodes them at once and lands each
                    # after the one before it.
                    parallelism=_parallelism(),
                    io_concurrency=self._io_concurrency,
                    overwrite=overwrite,
                    progress=shown.counters,
                )
            return DatasetManifest.from_json(text)
        except BaseException:
            if self._native is None:
                self._remove_empty_folder(key)
            if guard is not None:
                guard.reraise()
            raise

    def _rust(self, key: str) -> tuple[_core.RustStore, str]:
        """The Rust handle the dataset protocol runs on, and *key* as it
        names it: pds's own backend and the key's native path, or any other
        remote-store backend through :meth:`pds._core.RustStore.over_store`
        (each object operation a call of the Store's) and the normalised key.
        Validates *key*; no I/O."""
        if self._native is not None:
            return self._native, self._store.native_path(key)
        self._store.native_path(key)
        if self._adapted is None:
            self._adapted = _core.RustStore.over_store(self._store)
        return self._adapted, _normal_key(key)

    def _check_free(self, key: str) -> None:
        """``AlreadyExists`` unless a dataset may be written at *key*: no table
        or pipeline there, and nothing at an ancestor or below (keys are
        exclusive). Cost: 5 HEADs per level of the key, 1 LIST (at most 1,000
        objects), 1-3 GETs per table or pipeline found."""
        _core.check_key_free(*self._rust(key), "dataset")

    def _remove_empty_folder(self, key: str) -> None:
        """Remove *key*'s folder if a failed write left it empty (best effort)."""
        with contextlib.suppress(Exception):
            if self._store.supports(Capability.DELETE) and not any(True for _ in self._store.list_files(key)):
                self._store.delete_folder(key, recursive=False, missing_ok=True)

    # -- reading -----------------------------------------------------------

    def read_dataset(
        self,
        key: str,
        *,
        columns: list[str] | None = None,
        verify: bool = False,
        filter: Filter | None = None,
        progress: bool | None = None,
    ) -> pa.Table:
        """Read the dataset under *key* into one ``pyarrow.Table`` (PDS-003, PDS-006).

        Reads the committed manifest (the manifest, then ``_SUCCESS``, then the
        manifest's HEAD: it takes the manifest only as it was while
        ``_SUCCESS`` was there), then every part's footer and its projected
        column chunks, parts concurrently (up to
        *io_concurrency* at once; decoding uses every core). Only the
        *columns* asked for are fetched (range requests on the fast path) and
        decoded, in the order given.

        Cost on the fast path: 5 sequential round trips, whatever the number of
        parts: the manifest, ``_SUCCESS`` and the manifest's HEAD, the footers (one GET each, sized by
        what the manifest records; a missing part fails here, before any data
        is fetched, naming every missing part), then the column chunks. A
        footer read before through the same store handle is not fetched again:
        each such part gets a HEAD instead (the existence and size check),
        sent together with its chunk GETs, so such a read takes 4.
        Manifests written by remote-store record no part sizes: one more round
        trip then (a HEAD of every part). Filter tuples cost one more: the
        filter columns' chunks are fetched first, then the other columns'
        for the rows that pass (the manifest is read once).

        Args:
            key: The dataset key.
            columns: Columns to read, in output order; ``None`` reads all.
            verify: Fetch every part whole and check its SHA-256 against the
                manifest before decoding.
            filter: Rows to keep. ``(column, op, value)`` tuples are pushed
                down: row groups whose min/max/null statistics rule them out
                are never fetched, and the filter columns are decoded first.
                A ``pyarrow.compute.Expression`` is applied after decoding
                (no pruning).
            progress: Show the parts read of the manifest's parts on stderr
                while it runs, on the fast path (``None``: if
                ``PDS_PROGRESS`` is set; see the logging guide).

        Raises:
            InvalidPath: a bad *key*, before any I/O.
            TypeError: *columns* is not a list of str, or *progress* not a
                bool or None.
            DatasetIncomplete: ``_SUCCESS`` or a listed part is missing.
            NotFound: ``manifest.json`` is missing.
            ManifestCorrupted: the manifest is invalid, its ``row_count``
                disagrees with the parts, or *verify* is set and the manifest
                has no checksums (one written by remote-store).
            PartCorrupted: a part is truncated, not Parquet, has another
                schema than the manifest records, or fails *verify*.
            ValueError: a column the dataset does not have.
        """
        key = _check_key(key)
        cols = _check_columns(columns)
        raw, expression = _check_filter(filter)
        show = _progress.enabled(progress)
        conditions, manifest = self._exact_conditions(key, raw)
        # An Expression may reference columns outside the projection: decode all, then select.
        read_cols = None if expression is not None else cols
        if self._native is not None:
            with _progress.shown(self._native, f"reading dataset {key}", show) as shown:
                table: pa.Table = _core.read_dataset(
                    self._native,
                    self._store.native_path(key),
                    columns=read_cols,
                    verify=bool(verify),
                    filter=conditions,
                    io_concurrency=self._io_concurrency,
                    manifest=manifest,
                    progress=shown.counters,
                )
        else:
            table = self._read_portable(key, read_cols, bool(verify), conditions)
        if expression is not None:
            table = table.filter(expression)
            if cols is not None:
                table = table.select(cols)
        return table

    def iter_batches(
        self,
        key: str,
        *,
        columns: list[str] | None = None,
        filter: Filter | None = None,
        batch_size: int | None = None,
    ) -> pa.RecordBatchReader:
        """Stream the dataset under *key* as a ``pyarrow.RecordBatchReader``.

        The same checks as :meth:`read_dataset` run before the reader is
        returned (``_SUCCESS``, manifest, every part present). Batches then
        arrive in part order while later parts are fetched in the background;
        memory stays at a few row groups whatever the dataset's size.

        Args:
            columns: Columns to read, in output order.
            filter: As for :meth:`read_dataset`; tuple filters prune row groups.
            batch_size: Rows per batch at most (default 65,536 on the fast
                path; on other stores, a part's row groups as decoded).

        Raises:
            RemoteStoreError: The errors of :meth:`read_dataset`, before the
                reader is returned or, for what only shows while a part is
                decoded, from the reader itself: ``PartCorrupted`` (naming the
                part), ``DatasetIncomplete`` (a part vanished mid-read),
                ``ManifestCorrupted`` (the parts hold another number of rows
                than the manifest says), as the same classes, so
                ``except pds.PartCorrupted`` works around the loop.
        """
        key = _check_key(key)
        cols = _check_columns(columns)
        raw, expression = _check_filter(filter)
        size = _check_batch_size(batch_size)
        conditions, manifest = self._exact_conditions(key, raw)
        read_cols = None if expression is not None else cols
        if self._native is not None:
            reader: pa.RecordBatchReader = _core.scan_dataset(
                self._native,
                self._store.native_path(key),
                columns=read_cols,
                filter=conditions,
                batch_size=size,
                parallelism=_parallelism(),
                io_concurrency=self._io_concurrency,
                manifest=manifest,
            )
        else:
            reader = self._scan_portable(key, read_cols, conditions, size)
        if expression is None:
            return reader
        return _filtered(reader, expression, cols)

    def _open_portable(
        self, key: str, columns: list[str] | None, verify: bool
    ) -> tuple[DatasetManifest, list[str] | None]:
        """Checks shared by the portable readers; returns the manifest and checksums."""
        self._store.native_path(key)  # validate before I/O
        if not self._store.exists(f"{key}/{_SUCCESS}"):
            raise DatasetIncomplete(f"Dataset at {key!r} is incomplete: {self._absent_reason(key)}", path=key)
        manifest = self.read_manifest(key)
        with ThreadPoolExecutor(max_workers=_parallelism() * 2) as pool:
            present = list(pool.map(lambda p: self._store.exists(f"{key}/{p}"), manifest.parts))
        missing = [p for p, ok in zip(manifest.parts, present, strict=True) if not ok]
        if missing:
            raise DatasetIncomplete(
                f"Dataset at {key!r} is incomplete: {_missing_parts(missing, len(manifest.parts))}", path=key
            )
        schema = manifest.schema()
        if schema is not None and columns is not None:
            unknown = [c for c in columns if c not in schema.names]
            if unknown:
                raise ValueError(f"unknown column(s) {unknown}; the dataset has {schema.names}")
        if not verify:
            return manifest, None
        if manifest.part_info is None:
            raise ManifestCorrupted(
                "verify=True needs per-part checksums",
                path=f"{key}/{_MANIFEST}",
                reason="verify=True needs per-part checksums (part_info), which this manifest lacks",
            )
        return manifest, [p.sha256 for p in manifest.part_info]

    def _exact_conditions(self, key: str, raw: _RawConditions | None) -> tuple[_Conditions | None, str | None]:
        """The filter tuples made exact against the dataset's schema, as
        :mod:`pds._filters` defines; before any part is read. On pds's
        backend, also the manifest's text, read as committed (with
        ``_SUCCESS``), for the read to reuse (so a filtered read reads the
        manifest once, as another read does).

        Raises:
            TypeError: a value does not compare with its column's type.
            ValueError: an unknown column.
        """
        if raw is None:
            return None, None
        if self._native is not None:
            text = _core.committed_manifest(self._native, self._store.native_path(key))
            try:
                schema = DatasetManifest.from_json(text).schema()
            except ManifestCorrupted as exc:
                if exc.path is None:
                    exc.path = f"{key}/{_MANIFEST}"
                raise
            if schema is None:  # a manifest without one (remote-store's): a part's footer
                schema = _core.read_schema(self._native, self._store.native_path(key))
            return core_conditions(raw, schema), text
        try:
            schema = self.read_schema(key)
        except NotFound:
            if not self._store.exists(f"{key}/{_SUCCESS}"):
                raise DatasetIncomplete(
                    f"Dataset at {key!r} is incomplete: {self._absent_reason(key)}", path=key
                ) from None
            raise
        return core_conditions(raw, schema), None

    def _other_kind(self, key: str) -> str | None:
        """What is at, around or below *key* instead of a dataset, in words
        (a table, a pipeline), or None. For error messages only."""
        try:
            return _core.describe_key(*self._rust(key), "dataset")
        except RemoteStoreError:
            return None  # the caller's plain reason still holds

    def _absent_reason(self, key: str) -> str:
        other = self._other_kind(key)
        if other is not None:
            return other
        if not self._store.exists(key):
            return "no dataset: nothing is stored under this key"
        return (
            "_SUCCESS marker missing: the dataset was never committed (a write is in progress, failed, or was killed)"
        )

    def _read_part_bytes(self, key: str, part: str, recorded: Mapping[str, int] | None = None) -> bytes:
        """A part's bytes; a part that vanished after the existence check makes the dataset incomplete,
        and one of another size than *recorded* (part sizes by name) is corrupted (as on the fast path)."""
        try:
            data: bytes = self._store.read_bytes(f"{key}/{part}")
        except NotFound:
            raise DatasetIncomplete(
                f"Dataset at {key!r} is incomplete: part {part!r} disappeared while it was being read", path=key
            ) from None
        if recorded is not None and part in recorded and recorded[part] != len(data):
            path = f"{key}/{part}"
            raise PartCorrupted(
                f"part {path!r} is corrupted: the object holds {len(data)} bytes, not the {recorded[part]} "
                "recorded for it (truncated, grown or replaced)",
                path=path,
            )
        return data

    def _expected_schema(self, key: str, manifest: DatasetManifest, first: bytes | None = None) -> pa.Schema:
        """Every part's schema must be this: the manifest's, or the first part's footer's."""
        schema = manifest.schema()
        if schema is not None:
            return schema
        data = first if first is not None else self._read_part_bytes(key, manifest.parts[0])
        footer: pa.Schema = _core.part_schema(data, f"{key}/{manifest.parts[0]}")
        return footer

    def _read_portable(
        self, key: str, columns: list[str] | None, verify: bool, conditions: _Conditions | None
    ) -> pa.Table:
        manifest, checksums = self._open_portable(key, columns, verify)
        with ThreadPoolExecutor(max_workers=_parallelism() * 2) as pool:
            sizes = _recorded_sizes(manifest)
            payloads = list(pool.map(lambda p: self._read_part_bytes(key, p, sizes), manifest.parts))
        named = [(f"{key}/{p}", b) for p, b in zip(manifest.parts, payloads, strict=True)]
        schema = self._expected_schema(key, manifest, payloads[0])
        table, rows = _core.decode_parts(named, columns=columns, checksums=checksums, filter=conditions, schema=schema)
        _check_row_count(manifest, rows, key)
        return table

    def _scan_portable(
        self, key: str, columns: list[str] | None, conditions: _Conditions | None, batch_size: int | None
    ) -> pa.RecordBatchReader:
        manifest, _ = self._open_portable(key, columns, verify=False)
        sizes = _recorded_sizes(manifest)
        data = self._read_part_bytes(key, manifest.parts[0], sizes)
        schema = self._expected_schema(key, manifest, data)
        first, first_rows = _core.decode_parts(
            [(f"{key}/{manifest.parts[0]}", data)], columns=columns, filter=conditions, schema=schema
        )

        def batches() -> Iterator[pa.RecordBatch]:
            rows = first_rows
            yield from first.to_batches(max_chunksize=batch_size)
            for part in manifest.parts[1:]:
                table, part_rows = _core.decode_parts(
                    [(f"{key}/{part}", self._read_part_bytes(key, part, sizes))],
                    columns=columns,
                    filter=conditions,
                    schema=schema,
                )
                rows += part_rows
                yield from table.to_batches(max_chunksize=batch_size)
            _check_row_count(manifest, rows, key)

        return pa.RecordBatchReader.from_batches(first.schema, batches())

    def read_manifest(self, key: str) -> DatasetManifest:
        """Read and parse ``{key}/manifest.json`` (PDS-012).

        Raises:
            NotFound: the manifest does not exist.
            ManifestCorrupted: it is not valid UTF-8 JSON or not a valid manifest.
        """
        key = _check_key(key)
        path = f"{key}/{_MANIFEST}"
        try:
            raw = self._store.read_bytes(path)
        except NotFound:
            other = self._other_kind(key)
            if other is None:
                raise
            raise NotFound(f"no dataset manifest at {path!r}: {other}", path=path) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestCorrupted("Manifest is not UTF-8", path=path, reason=f"Invalid UTF-8: {exc}") from exc
        try:
            return DatasetManifest.from_json(text)
        except ManifestCorrupted as exc:
            if exc.path is None:
                exc.path = path
            raise

    def read_schema(self, key: str) -> pa.Schema:
        """The dataset's Arrow schema, without reading data.

        Answers from the manifest alone when it records the schema (pds
        manifests do). For manifests without it (remote-store's), reads one
        part's footer: a few range requests, no column data.

        Raises:
            NotFound: no manifest. ManifestCorrupted: an invalid one.
        """
        return self._schema_of(key, self.read_manifest(key))

    def _schema_of(self, key: str, manifest: DatasetManifest) -> pa.Schema:
        """:meth:`read_schema` of the dataset at *key*, whose manifest is *manifest*."""
        schema = manifest.schema()
        if schema is not None:
            return schema
        if not manifest.parts:
            raise ManifestCorrupted("Manifest lists no parts", path=f"{key}/{_MANIFEST}", reason="no parts")
        if self._native is not None:
            native: pa.Schema = _core.read_schema(self._native, self._store.native_path(key))
            return native
        part = f"{key}/{manifest.parts[0]}"
        try:
            with self._store.read_seekable(part) as f:
                footer: pa.Schema = pq.read_schema(f)
        except NotFound:
            raise DatasetIncomplete(f"Dataset at {key!r} is incomplete: part {part!r} is missing", path=key) from None
        except (pa.ArrowException, OSError) as exc:
            raise PartCorrupted(f"part {part!r} is corrupted: its footer is unreadable: {exc}", path=part) from exc
        return footer

    def dataset_exists(self, key: str) -> bool:
        """``True`` iff ``{key}/_SUCCESS`` exists (PDS-007)."""
        key = _check_key(key)
        return self._store.exists(f"{key}/{_SUCCESS}")

    def delete_dataset(self, key: str) -> None:
        """Remove the dataset under *key*: its own files only (PDS-010).

        Those are the files of the dataset layout directly under *key*:
        ``_SUCCESS``, ``manifest.json``, a writer's ``_WRITING`` claim,
        ``data.parquet`` and ``part-*.parquet``. Nothing in a sub-folder is
        touched (a dataset, table or pipeline stored below *key* stays), nor
        any other file. ``_SUCCESS`` goes first, so a reader racing the
        delete (or a delete killed half-way) sees ``DatasetIncomplete``,
        never a committed dataset with files missing; and last again, in
        case a writer committed while the files were being deleted. On
        ``file://`` the staging files of killed writes go too, and the
        folder if it is left empty.

        Raises:
            NotFound: the dataset folder does not exist.

        Cost: one LIST of *key*'s folder (one level), a DELETE per file.
        """
        key = _check_key(key)
        if not self._store.exists(key):
            raise NotFound(f"no dataset folder at {key!r}", path=key)
        if self._native is not None:
            _core.delete_dataset(self._native, self._store.native_path(key))
            return
        self._store.delete(f"{key}/{_SUCCESS}", missing_ok=True)
        for f in list(self._store.list_files(key)):
            if _own_file(f.name) and f.name != _SUCCESS:
                self._store.delete(f"{key}/{f.name}", missing_ok=True)
        # A writer that committed while the files were being deleted left a
        # _SUCCESS over files this delete may have removed: withdraw it.
        self._store.delete(f"{key}/{_SUCCESS}", missing_ok=True)
        self._remove_empty_folder(key)

    def to_pyarrow_dataset(self, key: str) -> pads.Dataset:
        """The committed dataset under *key* as a ``pyarrow.dataset.Dataset``,
        for readers that take one: pyarrow itself (``.to_table(filter=...)``),
        DuckDB (``duckdb.arrow(ds)``), polars (``pl.scan_pyarrow_dataset(ds)``).

        It covers exactly the parts the manifest lists (never a killed
        writer's leftovers), with the manifest's schema. Reads then go through
        pyarrow's own filesystem (local or S3, built from the store's URL and
        options), without pds's checks: schemas and checksums are not
        verified there, so prefer :meth:`read_dataset` where pds can run.

        Raises:
            DatasetIncomplete: no committed dataset at *key*.
            CapabilityNotSupported: pyarrow cannot reach the store
                (``memory://``, or a remote-store backend other than Local).

        Cost: the ``_SUCCESS`` check and the manifest read (two requests).
        """
        from pds._interop import pyarrow_dataset

        key = _check_key(key)
        if not self.dataset_exists(key):
            raise DatasetIncomplete(f"Dataset at {key!r} is incomplete: {self._absent_reason(key)}", path=key)
        manifest = self.read_manifest(key)
        return pyarrow_dataset(self.store, key, manifest.parts, self._schema_of(key, manifest))


def _filtered(
    reader: pa.RecordBatchReader, expression: pc.Expression, columns: list[str] | None
) -> pa.RecordBatchReader:
    schema = reader.schema if columns is None else pa.schema([reader.schema.field(c) for c in columns])

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            kept = batch.filter(expression)
            yield kept if columns is None else kept.select(columns)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _recorded_sizes(manifest: DatasetManifest) -> dict[str, int]:
    """Each part's size as the manifest records it (none in remote-store's manifests)."""
    return {p.name: p.size_bytes for p in manifest.part_info or []}


def _missing_parts(missing: list[str], total: int, named: int = 5) -> str:
    """``missing N of M parts: 'a', 'b' and K more``: short, however many are missing."""
    shown = ", ".join(repr(p) for p in missing[:named])
    more = f" and {len(missing) - named} more" if len(missing) > named else ""
    return f"missing {len(missing)} of {total} parts: {shown}{more}"


def _check_row_count(manifest: DatasetManifest, rows: int, key: str) -> None:
    """The parts' footers must hold the manifest's ``row_count`` rows in all."""
    if rows != manifest.row_count:
        reason = f"row_count is {manifest.row_count}, but the parts hold {rows} rows"
        raise ManifestCorrupted(f"Manifest of {key!r} is corrupted: {reason}", path=f"{key}/{_MANIFEST}", reason=reason)


def _own_file(name: str) -> bool:
    """Whether *name*, directly under a dataset key, is one of the dataset's own files."""
    return name in (_SUCCESS, _MANIFEST, _WRITING, "data.parquet") or (
        name.startswith("part-") and name.endswith(".parquet")
    )
