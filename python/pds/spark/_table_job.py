"""One Spark write job to a pds table: tasks upload data files, the driver
commits them in one version by compare-and-swap.

Data file names carry the job, the partition and the task attempt
(``data/part-<job>-<partition:05d>-<task attempt id>-<n:05d>.parquet``), so
two attempts of one task (a retry, a speculative copy) never write the same
name. The driver commits exactly the files of the one attempt per partition
that Spark reports as successful (checked to be there), in one version:
``append`` adds them (creating the table on first write), ``overwrite``
replaces the table's content. It then removes the files of the other
attempts (listing ``data/`` for the job's prefix). A failed job removes
every file with its prefix and commits nothing, unless its commit's
outcome is unknown (``pds.CommitUnknown``): a version may then name the
files, so they stay (vacuum removes them if none does). Concurrent writers, and
pipelines appending meanwhile, are fine: the commit rebases on them.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Any

import pyarrow as pa
from remote_store import NotFound, RemoteStoreError, Store

from pds import _core
from pds.errors import CommitUnknown
from pds.spark._job import (
    ABORT_SETTLE_SECONDS,
    StoreJob,
    _task_identity,
    check_dataset_key,
    remove_until_settled,
)
from pds.spark._schema import check_write_schema, conform_batches, merge_write_schema, nullable_schema
from pds.table import MAX_VERSION, Table, is_table

__all__ = [
    "SCHEMA_MODES",
    "TableFiles",
    "TableSettings",
    "TableWriteJob",
    "is_table",
    "schema_mode_option",
    "table_snapshot_files",
    "version_options",
]

SCHEMA_MODES = ("strict", "merge")

# Driver side: the files of jobs whose commit outcome is unknown. A version
# may name them, so an abort that follows must leave them (vacuum removes
# them later if no version does).
_MAY_BE_COMMITTED: dict[str, frozenset[str]] = {}
_UNREADABLE: frozenset[str] = frozenset({"\0unreadable"})


@dataclasses.dataclass(frozen=True)
class TableSettings:
    """Table options of a Spark write (data source options, lower case)."""

    compression: str = "zstd"
    row_group_size: int | None = None
    target_file_size: int | None = None
    primary_key: str | None = None
    metadata: Mapping[str, str] | None = None
    parallelism: int | None = None
    schema_mode: str = "strict"
    """``strict``: an append has the table's columns; ``merge``: it may add
    columns and widen types, as ``pds.Table.append(..., schema_mode="merge")``."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> TableSettings:
        """Settings from the data source options.

        Raises:
            ValueError: a malformed size, ``metadata`` or ``schema_mode``.
        """
        from pds.spark._job import WriteSettings, _positive_int

        base = WriteSettings.from_options(options)
        return cls(
            schema_mode=schema_mode_option(options),
            compression=base.compression,
            row_group_size=base.row_group_size,
            target_file_size=_positive_int(options, "target_file_size"),
            primary_key=options.get("primary_key") or None,
            metadata=base.metadata,
            parallelism=base.parallelism,
        )


@dataclasses.dataclass(frozen=True)
class TableFiles:
    """The data files one successful task attempt wrote (manifest entries)."""

    partition_id: int
    task_attempt_id: int
    files: tuple[dict[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class TableWriteJob(StoreJob):
    """A write of one table by many Spark tasks; pickled to the executors."""

    store: Store
    key: str
    schema: pa.Schema
    settings: TableSettings
    overwrite: bool
    job_id: str
    evolves: bool = False
    """The job's files have a merged schema: the commit changes the table's."""

    @classmethod
    def start(
        cls, store: Store, key: str, schema: pa.Schema, settings: TableSettings, *, overwrite: bool
    ) -> TableWriteJob:
        """Check the job against the table (driver side); nothing is written.

        An append to an existing table must have its columns, in any
        order: the tasks match them by name and cast them to the table's
        types, which they must have as Spark reads them
        (:func:`pds.spark._schema.check_write_schema`: an int column for a
        bigint one is refused, as ``Table.append`` refuses int32 for int64).
        With ``settings.schema_mode == "merge"`` it may also add columns and
        widen types (:func:`pds.spark._schema.merge_write_schema`); the
        commit then changes the table's schema in the same version.
        An overwrite sets the DataFrame's schema (its column order too).

        Raises:
            SchemaMismatch: an append whose columns are not the table's, or
                of other types (naming each); in merge mode, a column that
                neither fits nor widens, or a missing not-nullable one.
            remote_store.AlreadyExists: a dataset or pipeline is at *key*, or
                a dataset, table or pipeline lies at an ancestor of *key* or
                below it (keys are exclusive), before any task runs.

        Cost: the exclusivity check (5 HEADs per level of *key*, 1 LIST of
        at most 1,000 objects, 1-3 GETs per table or pipeline found), then
        2 GETs to open the table.
        """
        key = check_dataset_key(key)
        _core.check_key_free(store.unwrap(_core.RustStore), str(store.native_path(key)), "table")
        target = schema
        settings_used = settings
        evolves = False
        try:
            table = Table.open(store, key)
        except NotFound:
            table = None
        if table is not None:
            current = table.schema
            if not overwrite and settings.schema_mode == "merge":
                merged = merge_write_schema(schema, current, key)
                evolves = not merged.equals(current)
                target = merged if evolves else current
            elif not overwrite:
                check_write_schema(schema, current, key)
                target = current
            props = table._state.properties
            settings_used = dataclasses.replace(
                settings,
                compression=props.get("compression", settings.compression),
                row_group_size=props.get("row_group_size", settings.row_group_size),
                target_file_size=props.get("target_file_size", settings.target_file_size),
                primary_key=props.get("primary_key"),
            )
        return cls(store, key, target, settings_used, overwrite, uuid.uuid4().hex[:12], evolves)

    # -- executor side ----------------------------------------------------------------

    def write_task(
        self, batches: Iterable[pa.RecordBatch], *, identity: tuple[int, int, int, int] | None = None
    ) -> TableFiles:
        """Upload this task's rows as uncommitted data files (executor side)."""
        partition_id, _attempt, attempt_id, cpus = identity or _task_identity()
        # Nullable at the crossing into Rust: table_write_files checks the
        # table's nullability itself (SchemaMismatch naming the column).
        labels = nullable_schema(self.schema)
        stream = conform_batches(iter(batches), labels)
        first = next(stream, None)
        if first is None:
            return TableFiles(partition_id, attempt_id, ())
        reader = pa.RecordBatchReader.from_batches(labels, chain([first], stream))
        text = _core.table_write_files(
            self._rust(),
            self.location,
            reader,
            prefix=f"{self.job_id}-{partition_id:05d}-{attempt_id}",
            schema=self.schema,
            compression=self.settings.compression,
            row_group_size=self.settings.row_group_size,
            target_file_size=self.settings.target_file_size,
            parallelism=self.settings.parallelism or max(2, cpus),
        )
        return TableFiles(partition_id, attempt_id, tuple(json.loads(text)))

    # -- driver side ------------------------------------------------------------------

    def _job_files(self) -> list[str]:
        objects, _ = self._rust().list(f"{self.location}/data", recursive=True)
        prefix = f"{self.location}/data/part-{self.job_id}-"
        return [o.key for o in objects if o.key.startswith(prefix)]

    def _delete(self, keys: Iterable[str]) -> None:
        rust = self._rust()
        for k in keys:
            rust.delete(k)

    def commit(self, results: Sequence[TableFiles], *, upsert: bool = False) -> int:
        """Commit the files of the successful attempts in one version; return
        it. With *upsert*, the rows of the table's primary keys that the
        files hold are replaced in the same version (their keys are read
        back from the files' key column).

        Raises:
            RuntimeError: two results for one partition.
            remote_store.NotFound: a committed attempt's file is missing.
            SchemaMismatch: the table's schema changed since the job started.
            ValueError: (*upsert*) the files repeat a key, or hold a null
                one; the files are removed.
        """
        seen: dict[int, TableFiles] = {}
        for r in results:
            if r.partition_id in seen:
                raise RuntimeError(f"two task attempts reported partition {r.partition_id}")
            seen[r.partition_id] = r
        files = [f for pid in sorted(seen) for f in seen[pid].files]
        committed = {f"{self.location}/{f['path']}" for f in files}
        try:
            if upsert:
                state, _replaced, _committed = _core.table_upsert_files(
                    self._rust(),
                    self.location,
                    json.dumps(files),
                    schema=self.schema,
                    parallelism=self.settings.parallelism or 4,
                )
            else:
                state = self._commit_files(files)
        except CommitUnknown:
            _MAY_BE_COMMITTED[self.job_id] = frozenset(committed)
            raise
        self._delete(k for k in self._job_files() if k not in committed)
        return state.version

    def _commit_files(self, files: list[Any]) -> _core.TableVersion:
        return _core.table_commit_files(
            self._rust(),
            self.location,
            json.dumps(files),
            mode="overwrite" if self.overwrite else "append",
            schema=self.schema,
            primary_key=self.settings.primary_key,
            compression=self.settings.compression,
            row_group_size=self.settings.row_group_size,
            target_file_size=self.settings.target_file_size,
            metadata=dict(self.settings.metadata) if self.settings.metadata else None,
            schema_mode="merge" if self.evolves else "strict",
        )

    def _named_by_latest(self) -> frozenset[str]:
        """The job's files that the table's latest version names (a commit
        whose outcome was unknown may have landed; Spark runs ``abort`` in
        another process than ``commit``, so this asks the store), or
        ``_UNREADABLE`` if the table cannot be read."""
        try:
            manifest = Table.open(self.store, self.key).manifest
        except NotFound:
            return frozenset()
        except RemoteStoreError:
            return _UNREADABLE
        return frozenset(f"{self.location}/{f['path']}" for f in manifest.get("data_files", []))

    def abort(self, results: Iterable[TableFiles | None] = (), *, settle: float = ABORT_SETTLE_SECONDS) -> None:
        """Remove every file this job wrote, re-listing until none turns up
        for *settle* seconds (tasks still being killed may finish an upload),
        except the files the table's latest version names: a commit whose
        outcome was unknown may have landed. If the table cannot be read,
        remove nothing (vacuum removes what no version names)."""
        named = self._named_by_latest()
        if named is _UNREADABLE:
            return  # cannot tell what a version names: remove nothing (vacuum will)
        keep = _MAY_BE_COMMITTED.get(self.job_id, frozenset()) | named
        keys = {f"{self.location}/{f['path']}" for r in results if r is not None for f in r.files}

        def leftovers() -> list[str]:
            return [k for k in self._job_files() if k not in keep]

        self._delete(sorted((keys | set(self._job_files())) - keep))
        remove_until_settled(leftovers, self._delete, settle)


def schema_mode_option(options: Mapping[str, str]) -> str:
    """The ``schema_mode`` option (lower-cased key): ``strict`` (the
    default) or ``merge``, checked before any I/O.

    Raises:
        ValueError: another value.
    """
    raw = options.get("schema_mode")
    mode = "strict" if raw is None or not str(raw).strip() else str(raw).strip().lower()
    if mode not in SCHEMA_MODES:
        raise ValueError(f"option 'schema_mode' must be strict or merge, got {raw!r}")
    return mode


def table_snapshot_files(table: Table) -> list[tuple[str, int]]:
    """``(path, rows)`` of every data file of the table's version that holds
    rows, from its manifest (its root and segments: a GET per segment this
    process has not read)."""
    return [(f["path"], f["total_rows"]) for f in table.manifest.get("data_files", []) if f["total_rows"]]


def version_options(options: Mapping[str, str]) -> tuple[int | None, datetime.datetime | None]:
    """``versionAsOf`` / ``timestampAsOf`` (lower-cased keys), checked
    before any I/O: a version from 0 to ``MAX_VERSION``, an ISO 8601 time
    (UTC if it names no zone).

    Raises:
        ValueError: both, or a malformed or out-of-range value.
    """
    v = options.get("versionasof")
    t = options.get("timestampasof")
    if v and t:
        raise ValueError("pass versionAsOf or timestampAsOf, not both")
    if t:
        try:
            when = datetime.datetime.fromisoformat(t)
        except ValueError as exc:
            raise ValueError(f"timestampAsOf must be an ISO 8601 time, got {t!r} ({exc})") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        try:
            when.astimezone(datetime.UTC)
        except (OverflowError, ValueError) as exc:
            raise ValueError(f"timestampAsOf {t!r} is out of range ({exc})") from None
        return None, when
    if v:
        try:
            version = int(v)
        except ValueError:
            raise ValueError(f"versionAsOf must be an integer, got {v!r}") from None
        if not 0 <= version <= MAX_VERSION:
            raise ValueError(f"versionAsOf must be from 0 to {MAX_VERSION}, got {v!r}")
        return version, None
    return None, None
