"""``pds.Table``: a Parquet table that grows by appends, loses rows to deletes
without rewriting files, and reads as of any version, on plain object
storage with no catalog or lock service.

Objects under the table key (all immutable but the pointer)::

    _latest_manifest              the commit pointer (compare-and-swap)
    manifest/v00000007.json       one manifest per version
    data/part-<unique>-00000.parquet
    tombstone/v00000008-<unique>.del

A version is committed when its manifest is created (create-only PUT); the
pointer then follows by compare-and-swap. Concurrent appends are rebased and
all land; a writer killed at any moment leaves only unreferenced objects.

>>> import pyarrow as pa, pds
>>> store = pds.open_store("memory://")
>>> t = pds.Table.create(store, "events", data=pa.table({"id": [1, 2, 3]}))
>>> t.append(pa.table({"id": [4, 5]}))
1
>>> t.delete([("id", "<", 3)])
2
>>> t.to_arrow().column("id").to_pylist()
[3, 4, 5]
>>> t.to_arrow(version=0).num_rows
3
"""

from __future__ import annotations

import collections
import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from remote_store import CapabilityNotSupported, NotFound, Store

from pds import _core, _progress
from pds._filters import core_conditions
from pds.backend import native_handle, open_store
from pds.dataset import (
    Filter,
    _arrow_input,
    _check_batch_size,
    _check_columns,
    _check_filter,
    _check_key,
    _check_rows,
    _filtered,
    _parallelism,
)
from pds.errors import SchemaMismatch

__all__ = ["FORMATS", "MAX_VERSION", "Table", "is_table"]

#: The formats a table can publish beside its own (:meth:`Table.create`'s
#: ``formats``, :meth:`Table.enable_format`).
FORMATS = ("delta",)

_MODES = ("strict", "merge")


def _native(store: Store | str, options: Mapping[str, object]) -> tuple[Store, _core.RustStore]:
    """The Store and its Rust handle; a URL string is opened with *options*."""
    if isinstance(store, str):
        store = open_store(store, **options)
    elif options:
        raise TypeError("storage options are for a URL; a Store is already configured")
    if not isinstance(store, Store):
        raise TypeError(f"store must be a remote_store.Store or a URL, got {type(store).__name__}")
    handle = native_handle(store)
    if handle is None:
        raise CapabilityNotSupported(
            "pds tables commit with conditional writes (create-only and compare-and-swap PUTs); "
            "this Store's backend offers neither. Use a Store over pds.ObjectStoreBackend "
            "(pds.open_store(url)) for memory://, file://, s3://, gs:// or az://",
            capability="conditional_write",
        )
    return store, handle


def is_table(store: Store, key: str) -> bool:
    """Whether a pds table lives at *key* of *store* (one HEAD; two for a
    table whose first commit has not moved its pointer yet)."""
    key = key.strip("/")
    return bool(store.exists(f"{key}/_latest_manifest") or store.exists(f"{key}/manifest/v00000000.json"))


MIN_AGE = datetime.timedelta(hours=1)
"""Vacuum's default floor: no object younger than this is removed."""


def vacuum_args(retain: object, dry_run: object, keep_versions: object, min_age: object) -> dict[str, Any]:
    """Check vacuum's arguments (before any I/O) and convert them for ``_core``."""
    if not isinstance(retain, datetime.timedelta):
        raise TypeError(f"retain must be a datetime.timedelta, got {type(retain).__name__}")
    if not isinstance(min_age, datetime.timedelta):
        raise TypeError(f"min_age must be a datetime.timedelta, got {type(min_age).__name__}")
    for name, value in (("dry_run", dry_run), ("keep_versions", keep_versions)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    if min_age < datetime.timedelta(0):
        raise ValueError(f"min_age must not be negative, got {min_age!r}")
    if retain < min_age:
        raise ValueError(
            f"retain ({retain}) must not be shorter than min_age ({min_age}): no object younger than "
            "min_age is ever removed, so that writers in flight keep their files; pass a smaller "
            "min_age explicitly if no writer can be running"
        )
    return {
        "retain_seconds": retain.total_seconds(),
        "min_age_seconds": min_age.total_seconds(),
        "keep_versions": keep_versions,
        "dry_run": dry_run,
    }


#: The largest version number a table can have (versions are int64 in
#: the change feed's ``_commit_version``). A larger one is a ``ValueError``.
MAX_VERSION = 2**63 - 1


def _as_of(value: object) -> str | None:
    """*value* as RFC 3339 UTC text. ``ValueError`` (before any I/O) for a
    time that has no UTC equivalent (``datetime.min`` as local time)."""
    if value is None:
        return None
    if not isinstance(value, datetime.datetime):
        raise TypeError(f"as_of must be a datetime, got {type(value).__name__}")
    # A naive datetime is local time, as datetime.astimezone reads it.
    try:
        return value.astimezone(datetime.UTC).isoformat()
    except (OverflowError, ValueError) as exc:
        raise ValueError(f"as_of {value!r} is out of range: it has no UTC equivalent ({exc})") from None


def _version(value: object, name: str = "version") -> int | None:
    """*value* checked as a version number (``ValueError`` before any I/O)."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_VERSION:
        raise ValueError(f"{name} must be an int from 0 to {MAX_VERSION}, got {value!r}")
    return value


class Table:
    """A table under *key* in a store. Create one with :meth:`create`, open
    one with :meth:`open`.

    A ``Table`` is pinned to the version it last loaded (:attr:`version`):
    :meth:`scan` and :meth:`to_arrow` read that snapshot until
    :meth:`refresh` (or this object's own commit) moves it. Reading never
    blocks writers, and writers never block each other.
    """

    def __init__(self, store: Store, handle: _core.RustStore, key: str, state: _core.TableVersion) -> None:
        self._store = store
        self._native = handle
        self._key = key
        self._path = store.native_path(key)
        self._state = state

    # -- opening -------------------------------------------------------------

    @classmethod
    def create(
        cls,
        store: Store | str,
        key: str,
        schema: pa.Schema | None = None,
        *,
        data: object = None,
        primary_key: str | None = None,
        exist_ok: bool = False,
        compression: str = "zstd",
        row_group_size: int | None = None,
        target_file_size: int | None = None,
        formats: Sequence[str] = (),
        **storage_options: object,
    ) -> Table:
        """Create a table: from a *schema* alone, or from *data* (anything with
        ``__arrow_c_stream__``, taken with zero copy) as version 0.

        Args:
            store: A ``remote_store.Store`` over ``pds.ObjectStoreBackend``, or
                a URL (``memory://``, ``file:///abs``, ``s3://bucket/prefix``)
                with its storage options as keywords.
            schema: The table's schema; *data*'s if omitted. *data* is
                cast to it where only the physical variant differs
                (``string_view`` to ``string``, ...; see :meth:`append`).
            primary_key: A column whose range (or equality) deletes are
                recorded as key ranges, reading at most the footers and key
                column chunks needed to see that a live row matches (see
                :meth:`delete`). Integer, float, string, boolean or temporal.
                The key is **not enforced**: appending a key that the table
                already holds keeps both rows (no append reads the table).
                What it buys is deletes by key that read no data, and
                :meth:`upsert`, which replaces rows by key.
            exist_ok: Return the existing table if one is already there
                that was created as this call describes it: the same schema
                (up to the physical variants of one logical type),
                *primary_key*, *compression*, *row_group_size*,
                *target_file_size* and *formats* (a size left ``None`` means its default,
                so ``None`` and the default itself agree). Only without
                *data*: data is never dropped.
            compression: Parquet codec of the data files.
            row_group_size: Rows per row group (default 1Mi).
            target_file_size: Bytes per data file at most (default 512 MiB),
                estimated from the Arrow size of the data.
            formats: Formats to publish beside pds's own from version 0:
                ``"delta"``, a Delta Lake log under ``_delta_log`` (deletes
                as deletion vectors) that Delta readers open at the table's
                URL, Delta version N being pds version N (see
                :attr:`formats`, :meth:`sync_formats`; an existing table
                gets it with :meth:`enable_format`). A column with no
                exact Delta type is ``TypeError`` naming it, before any I/O.

        Cost: the exclusivity check (5 HEADs per level of *key*, at once;
        1 LIST of at most 1,000 objects below it; 1-3 GETs per table or
        pipeline found), 1 GET + 1 HEAD to see that no table exists, the
        data PUTs, then 1 PUT for ``manifest/v00000000.json`` and 1 for the
        pointer.

        Raises:
            remote_store.AlreadyExists: a table exists at *key* (without
                *exist_ok*); or a dataset or pipeline is at *key*, or a
                dataset, table or pipeline lies at an ancestor of *key* or
                below it (keys are exclusive: the message names what is
                there and its key). Nothing is written then.
            pds.SchemaMismatch: *data* does not have *schema*, or holds
                nulls in a column *schema* declares not nullable (nothing
                is left behind), or (exist_ok) the existing table has
                another schema or other settings (the message names each
                difference).
            remote_store.CapabilityNotSupported: the store cannot do
                conditional writes (before any I/O).
            TypeError / ValueError: bad arguments (before any I/O): among
                them a *formats* name pds does not publish (``ValueError``)
                and, with ``"delta"``, a column with no exact Delta type
                (``TypeError`` naming it).
        """
        st, handle = _native(store, storage_options)
        key = _check_key(key)
        if schema is not None and not isinstance(schema, pa.Schema):
            raise TypeError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
        if primary_key is not None and not isinstance(primary_key, str):
            raise TypeError("primary_key must be a column name (str); composite keys are not supported")
        reader = None
        if data is not None:
            reader, data_schema, _, _ = _arrow_input(data, "Table.create")
            schema = schema if schema is not None else data_schema
        if schema is None:
            raise TypeError("Table.create needs a schema or data")
        if isinstance(formats, str) or not all(isinstance(f, str) for f in formats):
            raise TypeError(f"formats must be a list of format names, got {formats!r}")
        state = _core.table_create(
            handle,
            st.native_path(key),
            schema,
            reader,
            primary_key=primary_key,
            exist_ok=bool(exist_ok),
            compression=compression,
            row_group_size=_check_rows(row_group_size, "row_group_size"),
            target_file_size=_check_rows(target_file_size, "target_file_size"),
            parallelism=_parallelism(),
            formats=list(formats),
        )
        return cls(st, handle, key, state)

    @classmethod
    def open(cls, store: Store | str, key: str, **storage_options: object) -> Table:
        """Open the table at *key* at its latest version.

        Cost: 2 GETs and 1 HEAD in 2 round trips (the pointer, then the
        manifest it names and a HEAD of the next version name, since a
        version whose pointer update failed is committed all the same).
        1 HEAD more when there is no table.

        Raises:
            remote_store.NotFound: no table at *key* (the message says so if a
                dataset lives there instead).
            pds.ManifestCorrupted: the pointer or the manifest is damaged or
                inconsistent (its checksum, a file or tombstone listed twice,
                a tombstone naming a file the version lacks, an unreadable
                schema or time, ...), names a version whose manifest is
                missing, or is a pipeline's (the message says how to open it).
        """
        st, handle = _native(store, storage_options)
        key = _check_key(key)
        return cls(st, handle, key, _core.table_manifest(handle, st.native_path(key)))

    # -- state ---------------------------------------------------------------

    @property
    def key(self) -> str:
        """The table's key in its store."""
        return self._key

    @property
    def version(self) -> int:
        """The version this object reads."""
        return self._state.version

    @property
    def commit_id(self) -> str | None:
        """The id of the commit that wrote :attr:`version` (each commit
        records a random one in its manifest; :meth:`history` shows it per
        version). After a write by this object that committed a version,
        the id of that write's commit: a version and its commit id name
        what one call committed. A call that commits nothing (an append or
        upsert of no rows, an update or delete that matches no row) leaves
        both as they were: the version this object read before it.
        ``None`` for a version written by a pds from before commit ids.
        No I/O."""
        return self._state.commit_id

    @property
    def schema(self) -> pa.Schema:
        """The schema of :attr:`version` (the full Arrow schema)."""
        return self._state.schema

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest of :attr:`version` as Python objects (what its JSON
        holds), with its whole file list: the root (schema, properties, operation, and
        ``segments``, the immutable objects the file list is stored in)
        plus ``data_files`` (with their statistics) and ``tombstones``.

        Cost: 1 GET for the root, and 1 GET per segment this process has
        not read yet (a segment holds up to 1,000 files)."""
        return self._expanded(self.version)

    def _expanded(self, version: int) -> dict[str, Any]:
        return _core.table_manifest_dict(self._native, self._path, version)

    @property
    def formats(self) -> list[str]:
        """The formats published beside pds's own at :attr:`version`
        (``["delta"]``: a Delta Lake log), in name order. No I/O."""
        return self._state.formats

    def sync_formats(self) -> dict[str, list[int]]:
        """Publish what the table's formats lack, up to its latest version:
        a commit publishes its version's Delta log entry after it commits,
        and a writer that stopped between the two leaves the log one or more
        versions behind (a consistent earlier version). Also writes a
        checkpoint that is due (every 100 versions) and, for a view enabled
        by :meth:`enable_format`, its first checkpoint if it is missing.
        Returns, per format, the versions whose entries or checkpoints it
        wrote (none if the log was complete).

        Raises:
            pds.ManifestCorrupted: the Delta log holds an entry pds did
                not write (another Delta writer committed to the view);
                nothing more is written.
        """
        return dict(_core.table_sync_formats(self._native, self._path))

    def enable_format(self, format: str) -> int:
        """Publish *format* (``"delta"``: a Delta Lake log) for this existing
        table, and move this object to its latest version, which it returns.

        One version is committed (operation ``"enable_format"``) holding the
        same data files and deletes, by compare-and-swap like any commit; the
        format starts at that version. For ``"delta"`` it starts with a
        checkpoint of that version (its deletes as deletion vectors), so no
        earlier version is needed: Delta readers see the table from that
        version on, and every later commit publishes its entry. A table that
        publishes the format already is left as it is (nothing committed);
        what its log lacks is written, as :meth:`sync_formats` does.

        Cost: the latest version (2 GETs), a commit (2 PUTs), then the
        checkpoint: for every file with deleted rows, its deletes and key
        columns are read and its deletion vector is written (a PUT each).

        Raises:
            ValueError: *format* is not one pds publishes (before any I/O).
            TypeError: a column has no exact type in the format (unsigned
                integers, nanosecond timestamps, ...), naming it; nothing is
                written.
            remote_store.NotFound: no table at the key, or this object opened
                a table that was dropped.
            pds.UpgradeRequired: the table is in an earlier format.
            pds.CommitConflict: writers kept winning the race (nothing written).
            remote_store.ext.parquet.ManifestCorrupted: the Delta log holds an
                object pds did not write. The format stays enabled; the view
                is incomplete until :meth:`sync_formats` succeeds.
        """
        _core.table_enable_format(self._native, self._path, format, table_id=self._table_id)
        return self.refresh()

    @property
    def primary_key(self) -> str | None:
        """The primary-key column, if the table declares one. Not enforced:
        appends never check it, so a key may occur more than once (see
        :meth:`create`)."""
        return self._state.primary_key

    def at(self, *, version: int | None = None, as_of: datetime.datetime | None = None) -> Table:
        """A ``Table`` pinned to another version (*version*, or the last one
        created at or before *as_of*; this one's if neither). Cost: 1 GET
        (``as_of``: O(log versions) GETs).

        Raises:
            remote_store.NotFound: no such version (never committed, or
                vacuumed), or no version existed at *as_of* (before the
                table's creation, or only vacuumed ones).
            ValueError: *version* is not an int from 0 to
                :data:`MAX_VERSION`, *as_of* has no UTC equivalent (a naive
                ``datetime.min`` read as local time), or both are given
                (before any I/O).
            TypeError: *as_of* is not a ``datetime``.
        """
        return Table(self._store, self._native, self._key, self._pinned(version, as_of))

    def refresh(self) -> int:
        """Move to the latest version and return it (cost and errors as
        :meth:`open`).

        Raises:
            remote_store.NotFound: also when this table was dropped and
                another one created at its key (open the key again to use
                the new one); this object stays as it was.
        """
        latest = _core.table_manifest(self._native, self._path)
        opened = self._table_id
        now = latest.table_id
        if opened is not None and now is not None and now != opened:
            raise NotFound(
                f"not found: {self._path}: the table this handle opened (id {opened}) was dropped, and "
                f"another table (id {now}) was created at its key. Open the table "
                "again to use the new one",
                path=self._path,
            )
        self._state = latest
        return self.version

    @property
    def _table_id(self) -> str | None:
        """The id of the table this object opened (``None`` for a table
        created by an earlier pds, which has none)."""
        return self._state.table_id

    def _latest_version(self) -> int:
        """The latest version, read without moving this object's pin (2 GETs)."""
        return _core.table_manifest(self._native, self._path).version

    def __repr__(self) -> str:
        return f"Table({self._key!r}, version={self.version})"

    # -- writing -------------------------------------------------------------

    def append(self, data: object, *, schema_mode: str = "strict", metadata: Mapping[str, str] | None = None) -> int:
        """Append *data* (anything with ``__arrow_c_stream__``) as new data
        files; return the new version. Concurrent appends never conflict: a
        lost race is rebased and retried, so each append lands exactly once.

        Args:
            schema_mode: ``"strict"``: the same columns and logical
                types (any order). ``string``, ``large_string`` and
                ``string_view`` are one logical type, as are the binary
                variants, the list variants (``list``, ``large_list``,
                ``list_view``), and a dictionary of strings and its values:
                pyarrow, polars, pandas and DuckDB data mix freely. The data
                is cast to the table's types, and the table's schema does
                not change (in merge mode either). ``"merge"``: new columns are added as nullable, and
                a column may widen (int32 to int64, float32 to float64, ...);
                older files then read with nulls for what they lack. The
                change shows in :meth:`history`. Every widening allowed
                is exact (the older values are values of the new type,
                order kept): filters, deletes and :meth:`changes` compare
                older files' values and statistics cast up to the new type.
                Allowed: int8 to int16/int32/int64/float32/float64, int16
                to int32/int64/float32/float64, int32 to int64/float64,
                uint8/uint16/uint32 to any wider unsigned or signed integer
                (and float32 for uint8/uint16, float64 for all), float16 to
                float32/float64, float32 to float64, string to
                large_string, binary to large_binary, date32 to date64.
                Anything else (int64 to float64, which would round, or any
                narrowing) raises ``SchemaMismatch``.
            metadata: Strings recorded with the version (shown in history).

        Cost: 2 GETs + 1 HEAD (pointer, manifest, next name), the data PUTs, then 2 PUTs
        (manifest create-only, pointer compare-and-swap) when the commit wins
        at once.

        Raises:
            pds.SchemaMismatch: the schemas differ (naming the fields), or
                *data* holds nulls in a column the table declares not
                nullable (checked as the rows stream, before anything is
                committed; the files already uploaded are removed).
            pds.CommitConflict: every retry lost (the data files are removed).
            pds.CommitUnknown: the store failed so that whether the version
                landed cannot be learned (the message names the commit id,
                which ``history()`` shows if it landed); nothing is removed.
        """
        if schema_mode not in _MODES:
            raise ValueError(f"schema_mode must be one of {_MODES}, got {schema_mode!r}")
        if metadata is not None and (
            not isinstance(metadata, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
        ):
            raise TypeError("metadata must be a mapping of str to str")
        return self._write_stream(
            data,
            "Table.append",
            lambda reader: _core.table_append(
                self._native,
                self._path,
                reader,
                schema_mode=schema_mode,
                metadata=dict(metadata) if metadata is not None else None,
                parallelism=_parallelism(),
                table_id=self._table_id,
            ),
        )

    def _write_stream(self, data: object, caller: str, write: Callable[[Any], _core.TableVersion]) -> int:
        """Run *write* (a ``_core`` call that returns the version it
        leaves) on *data* as a stream; an exception the input
        itself raised while it was read is re-raised as it is. This object
        then reads that version, which is returned."""
        reader, _, _, guard = _arrow_input(data, caller)
        try:
            state = write(reader)
        finally:
            if guard is not None:
                guard.reraise()
        self._state = state
        return self.version

    def delete(self, filter: Sequence[tuple[str, str, Any]]) -> int:
        """Delete the rows matching *filter* (the tuple list ``read_dataset``
        takes; all conditions must hold) and return the version after it. No
        data file is rewritten: one tombstone records the deleted row
        groups, primary-key ranges or row positions.

        A range (or equality) on the primary key rewrites nothing and
        writes key ranges, once a live row is known to match: it reads no
        data file when a candidate file (one whose manifest statistics
        overlap the range) has no deletes and its recorded min or max key
        lies in the range (that key is a row's, so it matches); otherwise it
        reads the candidates' footers and, unless a row group no delete
        touches has its exact min or max in the range, the key column chunks
        of the row groups that may match (deletes applied), stopping at the
        first live match. Statistics alone cannot prove a match in a file
        with deletes: the rows they name may be the deleted ones. Any other
        filter reads only its columns, of the files and row groups whose
        statistics may match. A delete that matches no live row commits
        nothing and returns the latest version.

        Cost: 4 GETs + 2 HEADs (the pointer and manifest, and a HEAD of the
        next version name, are read first to make the filter exact against
        the current schema, then again by the commit) and, when a row
        matches, 3 PUTs (tombstone, manifest, pointer). On top: with a
        primary-key range, nothing when the statistics prove a match, else a
        footer GET (2 for a large footer) per candidate file and the key
        column chunks of its row groups that may match; otherwise one footer
        and the filter columns of each candidate file. Of the file list,
        only the segments (1,000 files each) whose statistics can match the
        filter are read (1 GET each, unless this process has read it), and
        a small last one; the commit rewrites only those it changes.

        Serializable: rows that a concurrent append commits before this
        delete commits are planned too (one more tombstone in the same
        commit), so the version returned holds no row the filter matches.

        Raises:
            pds.CommitUnknown: the outcome could not be learned (see
                :meth:`append`).
        """
        raw, expression = _check_filter(filter)
        if expression is not None or not raw:
            raise TypeError("delete takes a non-empty list of (column, op, value) tuples")
        self.refresh()
        conditions = core_conditions(raw, self.schema)
        self._state, _rows, _committed = _core.table_delete(
            self._native, self._path, conditions, parallelism=_parallelism(), table_id=self._table_id
        )
        return self.version

    def upsert(self, data: object, *, schema_mode: str = "strict") -> int:
        """Replace the rows whose primary key is in *data* and insert the
        rest, in one commit; return the version after it. No data file is
        rewritten and no object modified: one tombstone marks the replaced
        rows (a key range when *data*'s keys are consecutive integers,
        row groups or row-position bitmaps otherwise) and *data* becomes
        new data files. :meth:`changes` shows the replaced rows as
        ``update_preimage`` and their new rows as ``update_postimage``;
        rows with new keys are ``insert``.

        Args:
            data: Anything with ``__arrow_c_stream__``, holding the primary
                key column. Streamed, as :meth:`append` streams: the rows
                are encoded and uploaded as they arrive and only the key
                column is kept (in the table's key type) to find the rows
                they replace, so an upsert holds its key column plus the
                row groups being encoded (``row_group_size`` rows each, as
                an append does), not the whole of *data*.
            schema_mode: As :meth:`append`.

        Serializable: two upserts of overlapping keys give the result of one
        after the other (the later one plans again against the files added
        since its snapshot, as a delete does), and rows a concurrent append
        adds with a key in *data* are replaced too.

        Cost in requests: 2 GETs + 1 HEAD for the latest version (which the
        plan and the commit build on), the data PUTs; to find the replaced rows only the primary-key column is read,
        of the files whose manifest key statistics can hold a key of *data*
        and of their row groups whose footer statistics can (1 footer GET
        per candidate file, 1 range GET per key column chunk); consecutive
        integer keys read no data file when a candidate without deletes
        proves a match by its statistics. Then 1 PUT for the tombstone and
        the commit's 2 PUTs (manifest, pointer) when it wins at once.

        Raises:
            ValueError: the table has no primary key or *data* lacks its
                column (before any I/O), or *data* holds a null, NaN or
                repeated key (naming a repeated one). A ``pyarrow.Table`` or
                ``RecordBatch`` is checked before any I/O; a stream is
                checked as it is read (a null key at its batch, a repeated
                or NaN key at its end), and the files it uploaded are then
                removed: nothing is committed either way.
            pds.SchemaMismatch: as :meth:`append`.
            pds.CommitConflict / pds.CommitUnknown: as :meth:`append` (the
                new files and tombstone are removed unless the outcome is
                unknown).
        """
        if schema_mode not in _MODES:
            raise ValueError(f"schema_mode must be one of {_MODES}, got {schema_mode!r}")
        pk = self.primary_key
        if pk is None:
            raise ValueError(
                f"upsert replaces rows by primary key, and table {self._key!r} declares none "
                "(create it with primary_key=...)"
            )
        if isinstance(data, pa.Table | pa.RecordBatch):
            # In memory already: its keys are checked before any I/O.
            _check_keys(pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data, pk)
        return self._write_stream(
            data,
            "Table.upsert",
            lambda reader: _core.table_upsert(
                self._native,
                self._path,
                reader,
                schema_mode=schema_mode,
                parallelism=_parallelism(),
                table_id=self._table_id,
            )[0],
        )

    def replace(self, filter: Sequence[tuple[str, str, Any]], data: object, *, schema_mode: str = "strict") -> int:
        """Remove the rows matching *filter* and add *data*, in one commit;
        return the version after it. What re-materialising a partition is
        (Delta's ``replaceWhere``): readers see the old rows or the new ones,
        never the partition empty or doubled, and :meth:`at` the version
        before still reads the old rows. No data file is rewritten: one
        tombstone marks the removed rows (as :meth:`delete`'s) and *data*
        becomes new data files (as :meth:`append`'s).

        Args:
            filter: ``(column, op, value)`` tuples that must all hold (as
                :meth:`delete` takes them). ``[]`` replaces every row: the
                new version holds exactly *data*, whatever the table held
                (nothing is read; its data files and tombstones are dropped
                from it, vacuum removes them later). ``None`` is refused,
                so that no caller replaces a whole table by accident.
            data: Anything with ``__arrow_c_stream__`` (a ``pyarrow.Table``,
                ``RecordBatch``, ``RecordBatchReader``, a polars or pandas
                frame, ...). Streamed: encoded and uploaded as it arrives,
                never held whole. Every row must match *filter*.
            schema_mode: As :meth:`append`.

        Every replace commits one version, even one that removes no row and
        adds none (nothing matches *filter* and *data* is empty): so
        re-materialising a partition adds exactly one version, and
        :attr:`version` and :attr:`commit_id` afterwards name this call's
        commit.

        Serializable: rows that a concurrent commit adds before this replace
        commits and that match *filter* are removed too (planned in one more
        round, as :meth:`delete` plans them), so the partition holds exactly
        *data*; two replaces of the same partition give the later one's
        rows. Replaces of disjoint filters (different partitions) by several
        processes at once all land, each in its own version. The data files
        are uploaded once, whatever the retries.

        Cost in requests: 2 GETs + 1 HEAD (the latest version, which the plan
        and the commit build on), the data PUTs; with a filter, as
        :meth:`delete` (per file whose statistics may match, its footer and
        the filter's column chunks of the row groups that may match) and 1
        tombstone PUT when a row matches; then 2 PUTs (manifest create-only,
        pointer compare-and-swap) when the commit wins at once.

        Raises:
            TypeError / ValueError: *filter* is not a list of conditions, or
                names an unknown column or a value of the wrong type
                (checked against the latest schema before anything is
                written); a bad *schema_mode*.
            pds.DataError: a row of *data* does not match *filter* (a null
                matches no condition); the message names the first (its
                position in *data*, its values and the condition it fails).
                Also: the input stream failed while it was read. The files
                already uploaded are removed and nothing is committed.
            pds.SchemaMismatch: as :meth:`append`. A schema another writer
                changed while this replace ran (a ``"merge"`` append): with
                ``filter=[]`` the data is fitted to the new schema as if the
                replace had started on it, and commits if it fits in
                *schema_mode* (``"strict"``: the new schema's columns);
                otherwise this error, naming both schemas. With a filter,
                any such change fails the replace; retry it. Nothing is
                committed either way.
            pds.CommitConflict / pds.CommitUnknown: as :meth:`append` (the
                new files and tombstone are removed unless the outcome is
                unknown).
        """
        if schema_mode not in _MODES:
            raise ValueError(f"schema_mode must be one of {_MODES}, got {schema_mode!r}")
        if filter is None:
            raise TypeError("replace takes a list of (column, op, value) tuples; pass [] to replace every row")
        raw, expression = _check_filter(filter)
        if expression is not None or raw is None:
            raise TypeError("replace takes a list of (column, op, value) tuples, not an Expression")
        self.refresh()
        conditions = core_conditions(raw, self.schema)
        return self._write_stream(
            data,
            "Table.replace",
            lambda reader: _core.table_replace(
                self._native,
                self._path,
                conditions,
                reader,
                schema_mode=schema_mode,
                parallelism=_parallelism(),
                table_id=self._table_id,
            )[0],
        )

    def update(self, filter: Filter | None, set: Mapping[str, Any]) -> int:
        """Set columns of the rows that match *filter*, in one commit; return
        the version after it (the latest, with nothing committed, when no
        row matches). No data file is rewritten: the matched rows are
        marked in a tombstone (row-position bitmaps) and written again,
        changed, as new data files. :meth:`changes` shows them as
        ``update_preimage`` and ``update_postimage``.

        Args:
            filter: Tuples (pushed down: the filter's columns of the files
                and row groups its statistics keep are read first, then the
                matched rows whole, by position), a
                ``pyarrow.compute.Expression`` (every live row is read and
                tested), or ``None`` for every row.
            set: Column name to a value (cast to the column's type) or a
                ``pyarrow.compute.Expression`` over the row's old values
                (``{"amount": pc.field("amount") * 2}``).

        Serializable: a concurrent commit that deletes or replaces rows in a
        file this update read makes it start over from the new version, so
        no update is lost and none is applied twice; rows a concurrent
        append adds that match are updated too.

        Memory: the changed rows are held until they are uploaded.

        Raises:
            ValueError / TypeError: an unknown column, a value that does not
                fit its column's type, an empty *set*, or a bad *filter*,
                before any I/O.
            pds.SchemaMismatch: an expression gives a value that cannot be
                stored in its column (a null in a not-null column, say);
                nothing is committed.
            ValueError: *set* gives the primary key a value that is null or
                NaN, or one that another row would then hold too (as
                :meth:`upsert` refuses such keys); nothing is written. (Set
                the key, and the table's rows are read first: every row's
                key and the matched rows whole. A concurrent append of a key
                is not checked, as appends never are.)
            Exception: Any exception an expression raises, as it is;
                nothing is committed.
            pds.CommitConflict / pds.CommitUnknown: as :meth:`append`.
        """
        if filter is None:
            raw, expression = None, None
        else:
            raw, expression = _check_filter(filter)
            if expression is None and not raw:
                raise ValueError("update got an empty filter; pass filter=None to update every row")
        schema = self.schema
        values = _set_values(set, schema)
        conditions = core_conditions(raw, schema) if raw else None
        pk = self.primary_key
        if pk is not None and pk in values:
            self._check_key_update(pk, filter, values[pk])
        description = json.dumps(
            [[str(part) for part in item] for item in (raw or [])] if expression is None else str(expression)
        )

        def apply(batch: pa.RecordBatch) -> tuple[pa.Array | None, pa.RecordBatch]:
            mask = None
            if expression is not None:
                mask = _evaluate(batch, [expression])[0].cast(pa.bool_()).fill_null(False)
                batch = batch.filter(mask)
            names = batch.schema.names
            exprs = [values.get(n, pc.field(n)) for n in names]
            columns = _evaluate(batch, exprs)
            fields = [batch.schema.field(n) for n in names]
            out = pa.RecordBatch.from_arrays(
                [_cast(col, f) for col, f in zip(columns, fields, strict=True)], schema=batch.schema
            )
            return mask, out

        self._state, _rows, _committed = _core.table_update(
            self._native,
            self._path,
            conditions,
            apply,
            columns=sorted(values),
            description=description,
            parallelism=_parallelism(),
            table_id=self._table_id,
        )
        return self.version

    def _check_key_update(self, pk: str, filter: Filter | None, new: pc.Expression) -> None:
        """``ValueError`` unless setting *pk* to *new* on the rows *filter*
        matches in the latest version keeps one row per key: no null or NaN,
        and no key that two rows would hold (reads every key, then the
        matched rows)."""
        latest = Table(self._store, self._native, self._key, _core.table_manifest(self._native, self._path))
        every = latest.to_arrow(columns=[pk]).column(pk)
        matched = latest.to_arrow(filter=filter)
        if not matched.num_rows:
            return
        keys = pa.chunked_array(
            [_evaluate(b, [new])[0] for b in matched.to_batches() if b.num_rows], type=every.type
        ).cast(every.type)
        where = f"update would set primary key {pk!r}"
        if keys.null_count:
            raise ValueError(f"{where} to null in {keys.null_count} rows; every row needs a key")
        if pa.types.is_floating(keys.type) and pc.any(pc.is_nan(keys)).as_py():
            raise ValueError(f"{where} to NaN; NaN equals no key")
        # The keys after the update: the unmatched rows' and the new ones.
        after = collections.Counter(every.to_pylist())
        after.subtract(matched.column(pk).to_pylist())
        after.update(keys.to_pylist())
        before = collections.Counter(every.to_pylist())
        repeated = sorted((k for k, n in after.items() if n > 1 and n > before.get(k, 0)), key=repr)
        if repeated:
            shown = ", ".join(repr(k) for k in repeated[:5])
            more = f" and {len(repeated) - 5} more" if len(repeated) > 5 else ""
            raise ValueError(f"{where} to keys that other rows hold: {shown}{more}; the table needs one row per key")

    # -- reading -------------------------------------------------------------

    def _pinned(self, version: object, as_of: object) -> _core.TableVersion:
        v = _version(version)
        t = _as_of(as_of)
        if v is not None and t is not None:
            raise ValueError("pass version or as_of, not both")
        if v is None and t is None:
            return self._state
        if v == self.version:
            return self._state
        return _core.table_manifest(self._native, self._path, version=v, as_of=t)

    def scan(
        self,
        *,
        columns: list[str] | None = None,
        filter: Filter | None = None,
        version: int | None = None,
        as_of: datetime.datetime | None = None,
        batch_size: int | None = None,
    ) -> pa.RecordBatchReader:
        """Stream a snapshot as a ``pyarrow.RecordBatchReader``, with deletes applied.

        Args:
            columns: Columns to read, in output order.
            filter: Tuples (pushed down: files pruned by the manifest's
                statistics, row groups by the footers') or a
                ``pyarrow.compute.Expression`` (applied after decoding).
            version: Read this version (its manifest directly, no pointer).
            as_of: Read the last version created at or before this time
                (O(log versions) manifest GETs).
            batch_size: Rows per batch at most (default 65,536). Rows
                deleted among scattered others are dropped from each decoded
                batch, so such batches come out smaller.

        Raises:
            remote_store.NotFound: *version* or *as_of* names no version
                (see :meth:`at`).
            ValueError: a bad *version* or *as_of* (see :meth:`at`), before
                any I/O.

        The scan sees one snapshot for its whole life; commits that land
        meanwhile stay invisible to it.

        Files decode on every core at once (a table with fewer files than
        cores has each file of at least 256 Ki rows decoded in row-range
        pieces, each of which fetches the projected column chunks, checks
        their checksums and decompresses only its own pages), ahead of the
        consumer within 256 MiB. Deletes are applied in the decoder: scattered rows are
        dropped from the decoded batches, long runs of deleted rows are
        skipped by the decoder, and whole deleted row groups are never
        fetched. The reader is a stream:
        ``polars.from_arrow`` and DuckDB take it through the Arrow
        PyCapsule interface without a copy.

        Cost: 1 GET for a version's manifest this handle has not read,
        1 per segment not yet read by this process, the tombstones not yet
        read by this process together with the footers of the surviving
        files (one suffix GET each, fetched ahead of their files' turns,
        32 at once on S3), then the projected column chunks (range GETs;
        once per piece for a file read in pieces). In round trips: 3 in a
        new process for up to ``cores`` files, one more per further
        ``cores`` files.
        """
        cols = _check_columns(columns)
        raw, expression = _check_filter(filter)
        size = _check_batch_size(batch_size)
        pinned = self._pinned(version, as_of)
        schema = pinned.schema
        conditions = core_conditions(raw, schema) if raw is not None else None
        read_cols = None if expression is not None else cols
        reader: pa.RecordBatchReader = _core.table_scan(
            self._native,
            self._path,
            version=pinned.version,
            columns=read_cols,
            filter=conditions,
            batch_size=size,
            parallelism=_parallelism(),
        )
        if expression is None:
            return reader
        return _filtered(reader, expression, cols)

    def to_arrow(
        self,
        *,
        columns: list[str] | None = None,
        filter: Filter | None = None,
        version: int | None = None,
        as_of: datetime.datetime | None = None,
    ) -> pa.Table:
        """:meth:`scan`, collected into a ``pyarrow.Table``."""
        return self.scan(columns=columns, filter=filter, version=version, as_of=as_of).read_all()

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The versions, newest first (at most *limit*): ``version``,
        ``previous``, ``created_at``, ``operation``, ``parameters``,
        ``rows_added``, ``files_added``, ``rows_deleted``, ``files_removed``,
        ``schema_change``, ``commit_id`` (the id of the commit that wrote the
        version, which a ``pds.CommitUnknown`` message names). Versions
        already vacuumed are left out.

        It reads the latest state but leaves this object pinned where it is
        (:attr:`version` and :meth:`scan` do not move).

        Cost: 2 GETs for the latest version (pointer, manifest), then 1 GET
        per version listed (16 at once).
        """
        _check_rows(limit, "limit")
        latest = self._latest_version()
        first = 0 if limit is None else max(0, latest - limit + 1)
        out = []
        for v in _core.table_versions(self._native, self._path, first, latest):
            params = v.parameters
            out.append(
                {
                    "version": v.version,
                    "previous": v.previous,
                    "created_at": v.created_at,
                    "operation": v.operation,
                    "parameters": params,
                    "rows_added": params.get("rows_added", 0),
                    "files_added": params.get("files_added", 0),
                    "rows_deleted": params.get("rows_deleted", 0),
                    "files_removed": params.get("files_removed", 0),
                    "schema_change": params.get("schema_change"),
                    "commit_id": v.commit_id,
                }
            )
        return out

    def files(self, version: int | None = None) -> pa.Table:
        """The data files of a version: ``path``, ``rows``, ``deleted_rows``
        (null where a primary-key range applies: counted only by reading),
        ``bytes``, ``row_groups``, ``sha256``, and per-column ``min`` /
        ``max`` (JSON text: an object of column name to value) from the
        manifest, in the manifest's order. Built segment by segment in Rust,
        not as Python objects; the segments it reads stay in the process's
        segment cache, like any read's.

        Cost: 1 GET for the version's root, 1 per segment not read yet (16
        at a time), its tombstones, and a footer GET per file that has
        whole-row-group deletes.

        Raises:
            remote_store.NotFound: no such version (see :meth:`at`).
            ValueError: *version* is not an int from 0 to :data:`MAX_VERSION`.
        """
        at = self._pinned(version, None).version
        files: pa.Table = _core.table_files(self._native, self._path, at)
        return files

    def changes(self, from_version: int, to_version: int | None = None) -> pa.RecordBatchReader:
        """The rows appended and deleted by versions *from_version* through
        *to_version* (inclusive; default: the latest), as Delta's change data
        feed gives them: the columns of *to_version*'s schema, then
        ``_change_type`` and ``_commit_version``. The change types:
        ``"insert"`` and ``"delete"``; for an upsert or an update,
        ``"update_preimage"`` (a row as it was) and ``"update_postimage"``
        (as it became), an upsert's rows with new keys being ``"insert"``.
        Nothing is rewritten to produce it: inserts are the files a version
        added; deletes are every row that left the
        table: the rows its tombstones newly cover, read back by position,
        and the rows still live in the files it removed (an overwrite shows
        every row of the version before it as deleted). Compactions change
        no row and add nothing. A pipeline that processed up to version
        ``n`` follows the table with ``changes(n + 1)``. Without
        *to_version* it reads up to the latest version, but this object
        stays pinned (:attr:`version` does not move).

        What version ``v`` changed is its difference from version
        ``v - 1``, so the manifest of the version before *from_version* must
        still exist too. :meth:`vacuum` keeps the newest version before its
        window, so every version inside it can be asked for.

        Cost: 2 GETs for the latest version when *to_version* is omitted, a
        manifest GET per version (and the one before) and a GET per segment
        (1,000 files) a version changed, not yet read by this process (an
        append changes one: the cost does not grow with the table), the new
        tombstones,
        then the added files, the deleted rows' row groups, and the live
        rows of removed files.

        Raises:
            ValueError: *from_version* is after *to_version*, or either is
                not an int from 0 to :data:`MAX_VERSION` (before any I/O).
            remote_store.NotFound: a version in the range does not exist
                (never committed, or vacuumed), or the one before
                *from_version* was vacuumed; the message names the version.
            pds.SchemaMismatch: the range spans an overwrite that changed the
                schema so that earlier rows cannot be shown in
                *to_version*'s schema (read the two sides separately).
        """
        start = _version(from_version, "from_version")
        if start is None:
            raise ValueError("from_version is required")
        end = _version(to_version, "to_version")
        if end is None:
            end = self._latest_version()
        if start > end:
            raise ValueError(f"from_version {start} is after to_version {end}")
        reader: pa.RecordBatchReader = _core.table_changes(
            self._native, self._path, start, end, parallelism=_parallelism()
        )
        return reader

    def compact(
        self, target_file_size: int | None = None, min_deleted_fraction: float = 0.5, *, progress: bool | None = None
    ) -> int:
        """Rewrite the files whose deleted fraction reaches
        *min_deleted_fraction*, and merge small files (below half of
        *target_file_size*), into new files; coalesce the tombstones of the
        other files into one; commit. A table with more than one tombstone
        is compacted even when no file qualifies: its tombstones become one
        and no data file is rewritten. Returns the version after it (the
        current one if there was nothing to do: no file qualifies and at
        most one tombstone).

        It works window by window: one manifest segment of 250 files or
        more, or small segments together up to 1,000 files, and segments
        that share a tombstone together. Each window is committed as its own
        version, so memory holds one window's file list, and small files are
        merged within a window (not with what earlier windows wrote: the next
        compaction merges those); a table of one segment (up to 1,000 files)
        takes one version.

        No concurrent change is lost: appends are rebased on; a delete that
        lands meanwhile on a file being rewritten makes that window start
        over from the new version (a few times, then ``pds.CommitConflict``,
        with its new files removed; windows committed before stay). The old
        files and tombstones stay until :meth:`vacuum` removes them, so time
        travel to earlier versions works.

        Args:
            target_file_size: Bytes per new file at most (default: the
                table's, else 512 MiB).
            min_deleted_fraction: From 0 to 1.
            progress: Show the rows rewritten of the live rows planned on
                stderr while it runs (``None``: if ``PDS_PROGRESS`` is set;
                see the logging guide).

        Raises:
            TypeError: *progress* is not a bool or None (before any I/O).
            pds.PartCorrupted: a data file to rewrite is damaged (nothing is
                committed, and the new files are removed).
            pds.CommitConflict: concurrent deletes kept touching the files
                being rewritten.

        Cost: every manifest segment once (a GET each not cached); then
        per window its tombstones, a footer per file with whole-row-group
        deletes and the key column of files with key-range deletes; the
        rewritten files are read and written, 1 PUT for the coalesced
        tombstone, and the commit (2 GETs + 1 HEAD + 2 PUTs, and the
        segments it rewrites).
        """
        target = _check_rows(target_file_size, "target_file_size")
        if isinstance(min_deleted_fraction, bool) or not isinstance(min_deleted_fraction, int | float):
            raise TypeError("min_deleted_fraction must be a number from 0 to 1")
        if not 0.0 <= float(min_deleted_fraction) <= 1.0:
            raise ValueError(f"min_deleted_fraction must be from 0 to 1, got {min_deleted_fraction!r}")
        with _progress.shown(self._native, f"compacting table {self._path}", progress) as shown:
            self._state, _committed, _removed, _added = _core.table_compact(
                self._native,
                self._path,
                target_file_size=target,
                min_deleted_fraction=float(min_deleted_fraction),
                parallelism=_parallelism(),
                table_id=self._table_id,
                progress=shown.counters,
            )
        return self.version

    def vacuum(
        self,
        retain: datetime.timedelta = datetime.timedelta(days=7),
        dry_run: bool = True,
        *,
        keep_versions: bool = False,
        min_age: datetime.timedelta = MIN_AGE,
        progress: bool | None = None,
    ) -> list[str]:
        """Remove the objects of this table that no retained version
        references, once they are older than *retain*. Returns the keys
        (relative to the table) removed, or with ``dry_run=True`` (the
        default) the keys that would be.

        Retained, whatever *retain* is: the latest version, the version the
        pointer names, and every version numbered above them (commits in
        flight); then every version created within *retain*, and the newest
        one before it (so ``as_of`` anywhere in the window reads). Each
        retained version keeps its manifest and every data file and
        tombstone it references.

        Removed by default: the data files and tombstones of writes that
        failed or were killed before they committed; the manifests of
        versions past the window (they can no longer be read: ``NotFound``),
        and the data files and tombstones only they referenced (what a
        compaction or an overwrite replaced). With ``keep_versions=True``,
        every version is kept readable, and only objects that no version
        references at all go: the garbage of failed or killed writes. Of
        the Delta Lake view (:attr:`formats`): the log entries and
        checkpoints below the newest checkpoint that opens every retained
        version, and the deletion vectors no retained version names.

        Only this table's own objects are touched: ``data/``,
        ``tombstone/``, ``manifest/``, ``_latest_manifest`` and, if the
        table publishes the Delta view, ``_delta_log/`` and
        ``deletion_vector_*.bin``; never a
        dataset, table or pipeline stored under its key (``events/archive``),
        nor any other object. On ``file://``, the staging files of killed
        uploads there go too.

        Writers in flight: a writer's files exist before the version that
        references them. No object younger than *min_age* (default 1 hour)
        is ever removed, so a writer that commits within *min_age* of its
        first upload never loses a file. Lower *min_age* (down to 0) only
        when no writer can be running: a file of a write in flight that
        vacuum removes leaves its version unreadable.

        Args:
            retain: How far back versions stay readable, and how old an
                unreferenced object must be to go. At least *min_age*; a
                window longer than the table's history removes nothing.
            dry_run: Only list what would go.
            keep_versions: Keep every version; remove only unreferenced
                objects.
            min_age: The age below which nothing is removed (0 or more).
            progress: Show the objects deleted of those planned on stderr
                while it runs (``None``: if ``PDS_PROGRESS`` is set; see the
                logging guide). With it, objects are deleted in batches of
                1,000, each counted as it ends.

        Raises:
            TypeError: an argument of the wrong type.
            ValueError: a negative *min_age*, or *retain* shorter than
                *min_age*; before any I/O.
            remote_store.NotFound: no table at the key.

        Cost: 1 LIST of the table key, the latest version (2 GETs, plus a
        HEAD per version past the pointer), a GET per other retained
        manifest (none if nothing is old enough to go; every manifest with
        *keep_versions*), then a DELETE per object removed.
        """
        args = vacuum_args(retain, dry_run, keep_versions, min_age)
        with _progress.shown(self._native, f"vacuuming table {self._path}", progress) as shown:
            return list(
                _core.table_vacuum(self._native, self._path, table_id=self._table_id, progress=shown.counters, **args)
            )

    def upgrade(self) -> int:
        """Upgrade the table to this pds's on-disk format, and move this object
        to its latest version, which it returns.

        pds reads every table format it ever wrote, creates tables in its own
        (``pds-table/3``) and never upgrades a table silently: a pds that reads
        only the earlier format could not read it afterwards.

        - A table whose latest version is in ``pds-table/1`` (with or without
          the sealed manifests) is read-only until this call: every write raises
          :class:`pds.UpgradeRequired`.
        - A table in ``pds-table/2`` stays writable, and is written in that
          format; there a schema change (``schema_mode="merge"``) records the
          old schema on every data file's entry, rewriting the whole file list.
          In ``pds-table/3`` it rewrites no segment of the file list. The
          upgrade writes the new root alone; pds older than ``pds-table/3``
          cannot read the table afterwards.

        The upgrade commits one new version (operation ``"upgrade"``) holding the
        same data files and deletes, by compare-and-swap like any commit: no data
        file is rewritten, earlier versions stay readable as they were (time
        travel, history, changes), and a writer racing it loses nothing (it
        commits before the upgrade, which then builds on its version, or after,
        on the upgraded one). A table already in the current format is left
        alone: then nothing is written and the latest version is returned.

        Cost: the latest version (2 GETs and a HEAD); for a ``pds-table/1``
        table also a GET per delete recorded without a SHA-256 (tables from
        before the sealed manifests), a PUT per 1,000 data files (segments) and a
        commit (2 PUTs); for a ``pds-table/2`` table a commit (2 PUTs).

        An upgraded table without a ``table_id`` gets one (``pds-table/1`` had
        none), so that from then on handles that open it are bound to it, as
        to a table created by this pds: a commit through one raises ``NotFound`` once the
        table is dropped, also after another table was created at its key.

        Raises:
            remote_store.NotFound: no table at the key, or this object opened a
                table that was dropped (also when another one, in any format,
                was created at its key since; nothing is written).
            remote_store.ext.parquet.ManifestCorrupted: a version or a delete of
                it is damaged (nothing is written).
            pds.CommitConflict: writers kept winning the race (nothing written).
            pds.CommitUnknown: the store failed in a way that leaves unknown
                whether the upgrade committed; calling ``upgrade`` again
                settles it (it is a no-op on an upgraded table).
        """
        _core.table_upgrade(self._native, self._path, table_id=self._table_id)
        return self.refresh()

    def drop(self) -> list[str]:
        """Remove this table: every object of its layout under its key. Returns
        the keys (relative to the table) removed.

        The order lets readers and live handles tell: ``manifest/v00000000.json``
        and the pointer go first, so from then on opening the key raises
        ``NotFound``, and a commit through any handle that opened this table
        (this one, another object, another process) raises ``NotFound``
        saying the table was dropped, before it writes, also after a new
        table was created at the key (a handle is bound to the table it
        opened, not to its key: open the key again to use a new table).
        Then the other manifests, the segments, data files and tombstones
        go. Only this table's own objects are touched, never a dataset,
        table or pipeline stored below its key, nor anything outside it.

        Stop writers first: a commit racing the drop either lands before it
        (and is dropped) or fails, but one that writes between the drop's
        LIST and its end may leave objects behind. A drop that was
        interrupted leaves such objects too; calling ``drop`` again (on a
        handle, or ``pds drop KEY``) removes them.

        Cost: the key's occupancy check (5 HEADs per level of the key, 1
        LIST, 1 GET), 2 LISTs of the table key (a request per 1,000
        objects), then a DELETE per object (batched where the store can).

        Raises:
            remote_store.NotFound: no table at the key (the message says so if
                a dataset or pipeline is there instead; nothing is removed).
        """
        return drop_table(self._store, self._key)


def drop_table(store: Store | str, key: str, **storage_options: object) -> list[str]:
    """Drop the table at *key* without opening it (as :meth:`Table.drop`,
    which see): also the remains of a drop that was interrupted, which no
    longer open as a table. Returns the keys (relative to *key*) removed.

    Raises:
        remote_store.NotFound: no table, nor the remains of one, at *key*
            (the message says so if a dataset or pipeline is there).
        remote_store.InvalidPath / TypeError: a bad key or store, before any I/O.
    """
    st, handle = _native(store, storage_options)
    key = _check_key(key)
    return list(_core.table_drop(handle, st.native_path(key)))


def _check_keys(rows: pa.Table, pk: str) -> None:
    """``ValueError`` unless *rows* hold the key column *pk* with one row
    per key: no null, no NaN, no repeated key (the message names some)."""
    if pk not in rows.column_names:
        raise ValueError(f"the data lacks the primary-key column {pk!r}; an upsert needs every row's key")
    keys = rows.column(pk)
    if pa.types.is_dictionary(keys.type):
        keys = keys.cast(keys.type.value_type)
    # Arrow's kernels lack the view types (polars' strings): the same values.
    if pa.types.is_string_view(keys.type):
        keys = keys.cast(pa.large_string())
    elif pa.types.is_binary_view(keys.type):
        keys = keys.cast(pa.large_binary())
    if keys.null_count:
        raise ValueError(f"the data holds {keys.null_count} null keys in {pk!r}; every row needs a key")
    if pa.types.is_floating(keys.type) and pc.any(pc.is_nan(keys)).as_py():
        raise ValueError(f"the data holds NaN keys in {pk!r}; NaN equals no key")
    if pc.count_distinct(keys).as_py() != len(keys):
        counts = pa.table({"k": keys}).group_by("k").aggregate([("k", "count")])
        repeated = counts.filter(pc.greater(counts.column("k_count"), 1)).column("k").to_pylist()
        shown = ", ".join(repr(k) for k in repeated[:5])
        more = f" and {len(repeated) - 5} more" if len(repeated) > 5 else ""
        raise ValueError(f"the data repeats primary keys of {pk!r}: {shown}{more}; an upsert needs one row per key")


def _set_values(set_: object, schema: pa.Schema) -> dict[str, pc.Expression]:
    """An update's *set* as one expression per column (values checked
    against their column's type), before any I/O."""
    if not isinstance(set_, Mapping) or not set_:
        raise TypeError("set must be a non-empty mapping of column name to a value or a pyarrow.compute.Expression")
    out: dict[str, pc.Expression] = {}
    for name, value in set_.items():
        if not isinstance(name, str) or name not in schema.names:
            raise ValueError(f"update sets unknown column {name!r}; the table has {schema.names}")
        field = schema.field(name)
        if isinstance(value, pc.Expression):
            out[name] = value
            continue
        if value is None and not field.nullable:
            raise ValueError(f"update sets {name!r} to null, and the column is not nullable")
        try:
            scalar = pa.scalar(value, type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"update sets {name!r} to {value!r}, which is not a {field.type}: {e}") from None
        out[name] = pc.scalar(scalar)
    return out


def _evaluate(batch: pa.RecordBatch, exprs: list[pc.Expression]) -> list[pa.Array]:
    """*exprs* over the rows of *batch*, in row order, one array each."""
    import pyarrow.acero as ac

    names = [f"_{i}" for i in range(len(exprs))]
    plan = ac.Declaration.from_sequence(
        [
            ac.Declaration("table_source", ac.TableSourceNodeOptions(pa.Table.from_batches([batch]))),
            ac.Declaration("project", ac.ProjectNodeOptions(exprs, names)),
        ]
    )
    out = plan.to_table(use_threads=False)
    return [out.column(n).combine_chunks() if out.num_rows else pa.array([], out.schema.field(n).type) for n in names]


def _cast(column: pa.Array, field: pa.Field) -> pa.Array:
    """*column* in *field*'s type; ``pds.SchemaMismatch`` if it does not fit
    (another type, or nulls in a not-null column)."""
    if column.null_count and not field.nullable:
        raise SchemaMismatch(f"update gives {column.null_count} nulls for the not-null column {field.name!r}")
    if column.type == field.type:
        return column
    try:
        return column.cast(field.type)
    except (pa.ArrowException, ValueError) as e:
        reason = f"update gives {field.name!r} values of type {column.type}, not {field.type}: {e}"
        raise SchemaMismatch(reason) from None
