"""One Spark write job: tasks write uncommitted parts, the driver commits.

Shared by the ``pds`` data source and :func:`pds.spark.write_dataset`.

Part names carry the job, the partition and the task attempt:
``part-<job>-<partition:05d>-<task attempt id>-<n:05d>.parquet``. Two
attempts of one task (a retry, or a speculative copy) never write the same
name, and the driver commits exactly the parts of the one attempt per
partition that Spark reports as successful:

1. the job still holds its claim on the key (below);
2. every part of the committed attempts must be present;
3. the commit is ``write_dataset``'s own (Rust, ``dataset::commit_parts``):
   an overwrite of a committed dataset swaps its ``manifest.json`` in place,
   then deletes the replaced dataset's files; otherwise ``_SUCCESS`` of a
   dataset being overwritten is retracted first, every other object of the
   dataset's layout (parts of failed or duplicate attempts, debris of an
   earlier crashed write) is deleted, and ``manifest.json``, then
   ``_SUCCESS``, are created create-only;
4. one listing confirms the committed parts, and the claim is released.

**One writer per key**, as for ``ParquetDatasetStore.write_dataset`` (see
the Rust ``dataset`` module): before any task runs, the driver claims the
key with a create-only ``_WRITING``. A job racing another writer of the key
(a Python ``write_dataset``, another Spark job) gets ``AlreadyExists`` and
writes nothing; an overwrite takes the claim over (the old dataset stays
readable until the commit), and the writer it took the key from fails at
its next check. The claim is checked again at the commit, and ``_SUCCESS``
is created create-only, so of racing writers exactly one commits, with its
own rows only. The claim's token travels with the job (it is pickled), so
the commit may run in another driver process than the start.

A failed job (``abort``) deletes every part carrying its job id, writes
neither ``manifest.json`` nor ``_SUCCESS``, and releases its claim. An
overwrite keeps the old dataset readable until its commit, so a failed
overwrite leaves it intact, and a job may overwrite the dataset it reads
from.

Limit: a duplicate attempt that Spark has not yet killed when the driver
commits (speculation) may finish an upload after step 3. That part is never
in the manifest, so readers do not see it; the next overwrite removes it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain

import pyarrow as pa
from remote_store import Capability, RemotePath, Store

from pds import _core
from pds.backend import ObjectStoreBackend, open_store, pickle_secrets_flag
from pds.dataset import ParquetDatasetStore
from pds.errors import AlreadyExists, CapabilityNotSupported, InvalidPath
from pds.manifest import DatasetManifest, PartInfo, schema_hash
from pds.spark._schema import conform_batches

ABORT_SETTLE_SECONDS = 1.0
"""How long :meth:`WriteJob.abort` waits for the job's prefix to stay empty."""
ABORT_SETTLE_LIMIT = 15.0
"""The longest :meth:`WriteJob.abort` keeps re-listing."""

__all__ = [
    "STORAGE_EXCLUDED",
    "TaskParts",
    "WriteJob",
    "WriteSettings",
    "check_dataset_key",
    "dataset_key_from_options",
    "pickle_secrets_option",
    "spark_store",
    "storage_options",
    "store_from_options",
]

_log = logging.getLogger("pds.spark")

_DELETE_THREADS = 16

STORAGE_EXCLUDED = frozenset(
    {
        "store",
        "path",
        "paths",
        "compression",
        "row_group_size",
        "max_rows_per_file",
        "run_id",
        "metadata",
        "parallelism",
        "columns",
        "filters",
        "pushfilters",
        "splitrowgroups",
        "table",
        "primary_key",
        "schema_mode",
        "target_file_size",
        "versionasof",
        "timestampasof",
        "pipeline",
        "stage",
        "version",
        "pickle_secrets",
    }
)
"""Data source options that are not storage options (lower case)."""


def check_dataset_key(key: object) -> str:
    """*key* if it is a valid dataset key (remote-store's rules), before any I/O.

    Raises:
        TypeError: not a str.
        InvalidPath: empty, the store root, or with ``..`` or NUL.
    """
    if not isinstance(key, str):
        raise TypeError(f"dataset key must be a str, got {type(key).__name__}")
    RemotePath(key)  # raises InvalidPath
    if key.strip("/") in ("", "."):
        raise InvalidPath("dataset key must not be the store root", path=key)
    return key


def spark_store(store: object, **options: object) -> Store:
    """A ``remote_store.Store`` Spark executors can share.

    *store* is a URL (``file:///abs/dir``, ``s3://bucket/prefix``,
    ``gs://bucket/prefix`` or ``az://container/prefix``; *options*
    go to :class:`pds.ObjectStoreBackend`) or a ``remote_store.Store`` over an
    ObjectStoreBackend. The Store pickles as URL + options (+ its root), so
    each executor opens its own Rust handle; with ``pickle_secrets=False``
    (a keyword of :class:`pds.ObjectStoreBackend`, which *options* may give)
    without the credential options, which each executor then takes from its
    own environment.

    Raises:
        TypeError: another kind of *store*, or options with a Store.
        ValueError: ``memory://`` (each process has its own), a bad URL or
            an unknown option.
    """
    if isinstance(store, str):
        result = open_store(store, **options)
    elif isinstance(store, Store):
        if options:
            raise TypeError("storage options are only accepted with a store URL, not with a Store")
        result = store
    else:
        raise TypeError(f"store must be a URL or a remote_store.Store, got {type(store).__name__}")
    try:
        backend = result.unwrap(ObjectStoreBackend)
    except CapabilityNotSupported:
        raise TypeError(
            "pds.spark needs a Store over pds.ObjectStoreBackend (use pds.open_store(url, ...)), "
            f"got one over {type(result).__name__} backend {result!r}"
        ) from None
    if backend.scheme == "memory":
        raise ValueError(
            "memory:// stores live inside one process; Spark executors need file://, s3://, gs:// or az://"
        )
    return result


def int_option(options: Mapping[str, str], name: str, minimum: int = 1) -> int | None:
    """The integer option *name* (``None`` if unset or empty).

    Raises:
        ValueError: not an integer, or below *minimum*.
    """
    raw = options.get(name)
    if raw is None or raw == "":
        return None
    kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {name!r} must be {kind}, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {name!r} must be {kind}, got {raw!r}")
    return value


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    return int_option(options, name, 1)


@dataclasses.dataclass(frozen=True)
class WriteSettings:
    """How a Spark job encodes its parts and what its manifest records.

    Args:
        compression: Parquet codec (``zstd`` default, ``snappy``, ``gzip``,
            ``brotli``, ``lz4``, ``none``).
        row_group_size: Rows per row group; ``None``: the core's default.
        max_rows_per_file: Each task splits its rows into parts of at most
            this many rows; ``None``: one part per task.
        run_id: Recorded in the manifest.
        metadata: Recorded in the manifest.
        parallelism: Parts each task encodes at once; ``None``: the task's
            CPUs, at least 2.

    Raises:
        ValueError: an unknown codec, a non-positive size.
        TypeError: *run_id* or *metadata* of the wrong type.
    """

    compression: str = "zstd"
    row_group_size: int | None = None
    max_rows_per_file: int | None = None
    run_id: str | None = None
    metadata: Mapping[str, str] | None = None
    parallelism: int | None = None

    def __post_init__(self) -> None:
        codecs = (*_core.codecs(), "uncompressed")
        if not isinstance(self.compression, str) or self.compression.lower() not in codecs:
            raise ValueError(f"unknown compression codec {self.compression!r}; expected one of {', '.join(codecs)}")
        for name in ("row_group_size", "max_rows_per_file", "parallelism"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        if self.run_id is not None and not isinstance(self.run_id, str):
            raise TypeError(f"run_id must be a str or None, got {type(self.run_id).__name__}")
        if self.metadata is not None:
            if not isinstance(self.metadata, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.metadata.items()
            ):
                raise TypeError("metadata must be a dict[str, str] or None")
            object.__setattr__(self, "metadata", dict(self.metadata))

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> WriteSettings:
        """Settings from data source options (string values, lower-case keys).

        ``metadata`` is a JSON object of strings, the sizes are integers.

        Raises:
            ValueError: a malformed option.
        """
        metadata: dict[str, str] | None = None
        raw_meta = options.get("metadata")
        if raw_meta:
            try:
                parsed = json.loads(raw_meta)
            except json.JSONDecodeError as exc:
                raise ValueError(f"option 'metadata' must be a JSON object of strings: {exc}") from None
            if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
                raise ValueError("option 'metadata' must be a JSON object of strings")
            metadata = parsed
        return cls(
            compression=options.get("compression") or "zstd",
            row_group_size=_positive_int(options, "row_group_size"),
            max_rows_per_file=_positive_int(options, "max_rows_per_file"),
            run_id=options.get("run_id") or None,
            metadata=metadata,
            parallelism=_positive_int(options, "parallelism"),
        )


@dataclasses.dataclass(frozen=True)
class TaskParts:
    """The parts one successful task attempt wrote, in order."""

    partition_id: int
    attempt_number: int
    task_attempt_id: int
    parts: tuple[PartInfo, ...]


def _task_identity() -> tuple[int, int, int, int]:
    """(partition id, attempt number, task attempt id, cpus) of the running Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("pds.spark: a write task must run inside a Spark task (no TaskContext)")
    return ctx.partitionId(), ctx.attemptNumber(), ctx.taskAttemptId(), max(1, ctx.cpus())


class StoreJob:
    """What every Spark write job has: a Store and a key on it."""

    store: Store
    key: str

    @property
    def location(self) -> str:
        """The key's folder as the backend names it."""
        return str(self.store.native_path(self.key))

    def _rust(self) -> _core.RustStore:
        rust: _core.RustStore = self.store.unwrap(_core.RustStore)
        return rust


def remove_until_settled(late: Callable[[], list[str]], delete: Callable[[list[str]], None], settle: float) -> None:
    """Delete what *late* lists until it has stayed empty for *settle*
    seconds (at most ``ABORT_SETTLE_LIMIT``): Spark reports a failed job
    while its other tasks are still being killed, and one of them may
    finish an upload meanwhile."""
    deadline = time.monotonic() + ABORT_SETTLE_LIMIT
    quiet_since = time.monotonic()
    while settle > 0 and time.monotonic() - quiet_since < settle and time.monotonic() < deadline:
        time.sleep(min(0.25, settle))
        found = late()
        if found:
            delete(found)
            quiet_since = time.monotonic()


@dataclasses.dataclass(frozen=True)
class WriteJob(StoreJob):
    """A write of one dataset by many Spark tasks; pickled to the executors.

    Create it on the driver with :meth:`start`, run :meth:`write_task` in
    each task, then :meth:`commit` (or :meth:`abort`) on the driver.
    """

    store: Store
    key: str
    schema: pa.Schema
    settings: WriteSettings
    overwrite: bool
    job_id: str
    claim: bytes = dataclasses.field(default=b"", repr=False)
    """The token of this job's ``_WRITING`` claim (see the module docs)."""
    committed: bool = dataclasses.field(default=False, compare=False)
    """Set by :meth:`commit` once the job's manifest is committed: from then
    on :meth:`abort` deletes none of its parts (the manifest names them)."""

    @classmethod
    def start(cls, store: Store, key: str, schema: pa.Schema, settings: WriteSettings, *, overwrite: bool) -> WriteJob:
        """Check that the job may run, claim the key and give the job a fresh id (driver side).

        Only the claim (``_WRITING``) is written here; an overwritten
        dataset stays readable until :meth:`commit`.

        Raises:
            InvalidPath: a bad *key*.
            CapabilityNotSupported: the store cannot put atomically or delete.
            AlreadyExists: a dataset exists at *key* and *overwrite* is false
                (datasets are write-once); another writer holds the key and
                *overwrite* is false; or a table or pipeline is at *key*, or
                a dataset, table or pipeline lies at an ancestor of *key* or
                below it (keys are exclusive). Nothing is written then.

        Cost: the claim (1 PUT), the exclusivity check (5 HEADs per level
        of *key*, 1 LIST of at most 1,000 objects, 1-3 GETs per table or
        pipeline found) and 1 HEAD for ``_SUCCESS``.
        """
        key = check_dataset_key(key)
        location = str(store.native_path(key))
        for cap in (Capability.ATOMIC_WRITE, Capability.DELETE, Capability.LIST):
            if not store.supports(cap):
                raise CapabilityNotSupported(
                    f"a Spark write needs the {cap.value} capability", path=key, capability=cap.value
                )
        rust: _core.RustStore = store.unwrap(_core.RustStore)
        if not overwrite and ParquetDatasetStore(store).dataset_exists(key):
            raise AlreadyExists(
                f"Dataset already exists at {key!r}: datasets are write-once; use mode 'overwrite' to replace it",
                path=key,
            )
        # Checked before the claim, so that a refused overwrite takes no key
        # from its holder.
        _core.check_key_free(rust, location, "dataset")
        token = _core.dataset_claim(rust, location, take_over=overwrite)
        try:
            if not overwrite and ParquetDatasetStore(store).dataset_exists(key):
                raise AlreadyExists(f"Dataset already exists at {key!r}: another writer committed it", path=key)
        except BaseException:
            _core.dataset_claim_release(rust, location, token)
            raise
        return cls(store, key, schema, settings, overwrite, uuid.uuid4().hex[:12], token)

    def _part_prefix(self, label: str) -> str:
        return f"{self.job_id}-{label}"

    # -- executor side ----------------------------------------------------------------

    def write_task(
        self, batches: Iterable[pa.RecordBatch], *, identity: tuple[int, int, int, int] | None = None
    ) -> TaskParts:
        """Encode and upload this task's rows as uncommitted parts (executor side).

        The batches' columns are matched to the job's schema by name and
        cast to its types (:func:`pds.spark._schema.conform_batches`). A
        task without rows writes nothing. *identity* (partition id, attempt
        number, task attempt id, cpus) defaults to the running Spark task's.

        Raises:
            RuntimeError: outside a Spark task and no *identity*.
            pds.SchemaMismatch: the first batch with rows has other column
                names than the schema's, or a value its column's type cannot
                hold (naming the column); nothing is uploaded.
            DataError: the batches failed while they were read, a later
                batch's ``SchemaMismatch`` included (its message is in the
                error's); parts already uploaded by this call are removed.
        """
        partition_id, attempt, attempt_id, cpus = identity or _task_identity()
        stream = conform_batches(iter(batches), self.schema)
        first = next(stream, None)
        if first is None:
            return TaskParts(partition_id, attempt, attempt_id, ())
        reader = pa.RecordBatchReader.from_batches(self.schema, chain([first], stream))
        written = _core.write_parts(
            self._rust(),
            self.location,
            reader,
            part_prefix=self._part_prefix(f"{partition_id:05d}-{attempt_id}"),
            compression=self.settings.compression,
            row_group_size=self.settings.row_group_size,
            max_rows_per_file=self.settings.max_rows_per_file,
            parallelism=self.settings.parallelism or max(2, cpus),
        )
        parts = tuple(
            PartInfo(name=n, row_count=r, size_bytes=s, sha256=h, footer_bytes=f) for n, r, s, h, f in written
        )
        return TaskParts(partition_id, attempt, attempt_id, parts)

    # -- driver side ------------------------------------------------------------------

    def _ordered_parts(self, results: Sequence[TaskParts]) -> list[PartInfo]:
        seen: dict[int, TaskParts] = {}
        for r in results:
            if r.partition_id in seen:
                raise RuntimeError(
                    f"two task attempts reported partition {r.partition_id} "
                    f"(attempts {seen[r.partition_id].task_attempt_id} and {r.task_attempt_id})"
                )
            seen[r.partition_id] = r
        return [p for pid in sorted(seen) for p in seen[pid].parts]

    def _write_empty_part(self) -> list[PartInfo]:
        reader = pa.RecordBatchReader.from_batches(self.schema, iter(()))
        written = _core.write_parts(
            self._rust(),
            self.location,
            reader,
            part_prefix=self._part_prefix("empty"),
            compression=self.settings.compression,
            row_group_size=self.settings.row_group_size,
            max_rows_per_file=None,
            parallelism=1,
        )
        return [PartInfo(name=n, row_count=r, size_bytes=s, sha256=h, footer_bytes=f) for n, r, s, h, f in written]

    def _list(self) -> list[str]:
        """Keys of every object under the dataset folder (backend-relative)."""
        objects, _ = self._rust().list(self.location, recursive=True)
        return [o.key for o in objects]

    def _delete(self, keys: Iterable[str]) -> None:
        rust = self._rust()
        todo = list(keys)
        if not todo:
            return
        with ThreadPoolExecutor(max_workers=min(_DELETE_THREADS, len(todo))) as pool:
            list(pool.map(rust.delete, todo))

    def commit(self, results: Sequence[TaskParts]) -> DatasetManifest:
        """Commit the parts of the successful attempts (driver side).

        *results* holds one entry per partition that succeeded. Parts are
        listed by partition id, then part index. A job without rows writes
        one empty part, so the dataset keeps its schema. The commit is the
        one :meth:`ParquetDatasetStore.write_dataset` runs (in Rust): an
        overwrite of a committed dataset swaps its ``manifest.json`` in
        place (one compare-and-swap, ``_SUCCESS`` staying), so readers see
        the old dataset until then and the new one after, never none; then
        the old dataset's files are deleted, one request each. Once the
        manifest is committed (a swap whose reply was lost included,
        recognised by reading it back), the job is :attr:`committed`: the
        cleanup (deleting the replaced files, releasing the claim) is best
        effort, logged and not raised, and :meth:`abort` leaves the job's
        parts alone.

        Raises:
            AlreadyExists: another writer took the key over (an overwrite)
                while the job ran, or committed a dataset at the key (for an
                overwrite: since the job read the committed manifest).
            DatasetIncomplete: a part of a successful attempt is missing
                (another writer deleted it); nothing is committed.
            RuntimeError: two results for one partition.
        """
        parts = self._ordered_parts(results)
        rust = self._rust()
        _core.dataset_claim_check(rust, self.location, self.claim)
        if not self.overwrite and ParquetDatasetStore(self.store).dataset_exists(self.key):
            raise AlreadyExists(f"Dataset already exists at {self.key!r}: another writer committed it", path=self.key)
        if not parts:
            parts = self._write_empty_part()
        text = _core.dataset_commit_parts(
            rust,
            self.location,
            self.claim,
            [(p.name, p.row_count, p.size_bytes, p.sha256, p.footer_bytes) for p in parts],
            schema=self.schema,
            dataset_key=self.key,
            compression=self.settings.compression,
            schema_hash=schema_hash(self.schema),
            run_id=self.settings.run_id,
            metadata=None if self.settings.metadata is None else dict(self.settings.metadata),
            overwrite=self.overwrite,
        )
        object.__setattr__(self, "committed", True)
        return DatasetManifest.from_json(text)

    def abort(self, results: Iterable[TaskParts | None] = (), *, settle: float = ABORT_SETTLE_SECONDS) -> None:
        """Remove every part this job wrote (driver side, best effort).

        Deletes the parts in *results*, then every object whose name starts
        with this job's prefix (parts of failed attempts). Spark reports a
        failed job while its other tasks are still being killed, and one of
        them may finish an upload meanwhile, so the prefix is listed again
        until it has stayed empty for *settle* seconds (at most
        ``ABORT_SETTLE_LIMIT`` seconds in all). Other objects, such as a
        dataset an overwrite would have replaced, are left alone. Then the
        job's claim on the key is released (if it still holds it). A
        :attr:`committed` job is left alone (its manifest names its parts). Errors
        are logged (without credentials), not raised, so the job's own
        failure is what the caller sees.
        """
        location = self.location
        if self.committed:
            _log.warning("pds.spark: abort of job %s ignored: it committed %r", self.job_id, self.key)
            return
        keys = {f"{location}/{p.name}" for r in results if r is not None for p in r.parts}
        prefix = f"{location}/part-{self.job_id}-"
        try:
            keys.update(k for k in self._list() if k.startswith(prefix))
            self._delete(sorted(keys))
            remove_until_settled(lambda: sorted(k for k in self._list() if k.startswith(prefix)), self._delete, settle)
        except Exception as exc:  # noqa: BLE001 - abort is best effort; the job's error matters
            _log.warning(
                "pds.spark: could not remove all parts of aborted job %s under %r: %s", self.job_id, self.key, exc
            )
        try:
            if self.claim:
                _core.dataset_claim_release(self._rust(), location, self.claim)
        except Exception as exc:  # noqa: BLE001 - as above
            _log.warning(
                "pds.spark: could not release the claim of aborted job %s on %r: %s", self.job_id, self.key, exc
            )


def storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options that go to :class:`pds.ObjectStoreBackend`: all but the pds ones."""
    return {k: v for k, v in options.items() if k.lower() not in STORAGE_EXCLUDED}


def pickle_secrets_option(options: Mapping[str, str]) -> bool:
    """The ``pickle_secrets`` option: ``true`` (the default) or ``false``.

    Raises:
        ValueError: another value.
    """
    return pickle_secrets_flag(options.get("pickle_secrets", "true"))


def store_from_options(options: Mapping[str, str]) -> Store:
    """The store named by the ``store`` option, with the storage options and
    ``pickle_secrets`` (see :class:`pds.ObjectStoreBackend`).

    Raises:
        ValueError: no ``store`` option, ``memory://``, or a bad URL/option.
    """
    url = options.get("store")
    if not url:
        raise ValueError(
            'the pds data source needs .option("store", "<url>") (file:///abs/dir, s3://, gs:// or az://bucket/prefix)'
        )
    return spark_store(url, pickle_secrets=pickle_secrets_option(options), **storage_options(options))


def dataset_key_from_options(options: Mapping[str, str]) -> str:
    """The dataset key given to ``save(key)`` / ``load(key)``.

    Raises:
        ValueError: none, or several paths.
    """
    if options.get("paths") not in (None, "", "[]"):
        raise ValueError("the pds data source reads one dataset: pass a single key to load(key)")
    key = options.get("path")
    if not key:
        raise ValueError("the pds data source needs a dataset key: save(key) / load(key)")
    return check_dataset_key(key)
