"""``pds.Pipeline``: sorted, incremental map/reduce stages over Parquet.

A pipeline is a graph of *sources* (data you change), *stages* (a
``Produce`` function from the groups of their sources to ``(target key,
value)`` pairs, kept sorted by target key) and *merges* (several feeders
with the same schema, read as one). Each :meth:`Pipeline.update` is one
atomic version of the whole graph: the changed source keys flow through
the stages in order, each stage re-running ``Produce`` only for the source
keys that changed and rewriting only the key ranges that change touches.

Objects under the pipeline key::

    _latest_manifest                 the commit pointer (compare-and-swap)
    manifest/v00000007.json          one manifest per version: the graph and
                                     every node's parts
    nodes/<node>/content/...parquet  key-range parts, kept by reference
    nodes/<node>/mappings/...        a stage's (source key, target key) pairs
                                     (where the target key begins with the
                                     source key: only the rows' that do not)
    nodes/<node>/update/...          what a version changed

>>> import pyarrow as pa, pds
>>> store = pds.open_store("memory://")
>>> p = pds.Pipeline.create(store, "pipelines/words")
>>> lines = p.source("lines", key={"n": pa.int64()}, value={"text": pa.string()})
>>> @p.stage("words", sources=[lines], key={"word": pa.string()}, value={"n": pa.int64()})
... def words(n, lines):
...     for line in lines:
...         for w in line["text"].split():
...             yield w, n
>>> p.update({"lines": pa.table({"n": [1, 2], "text": ["a b", "b c"]})})
1
>>> p.read("words").to_pylist()
[{'word': 'a', 'n': 1}, {'word': 'b', 'n': 1}, {'word': 'b', 'n': 2}, {'word': 'c', 'n': 2}]
>>> p.update({"lines": pds.Changes(deletes=pa.table({"n": [1]}))})
2
>>> p.changes("words").deletes.to_pylist()
[{'word': 'a'}]
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeAlias, TypeVar

import pyarrow as pa
from remote_store import NotFound, Store

from pds import _core, _progress
from pds.dataset import _check_key as check_key
from pds.errors import CommitConflict, CommitUnknown, DataError, ManifestCorrupted, SchemaMismatch, UpgradeRequired
from pds.producers._tasks import (
    ChainLink,
    ChainRunner,
    SourceRunner,
    SourceTask,
    StageDone,
    StageRunner,
    StageTask,
    _Opts,
)
from pds.producers._workers import LocalStages, worker_count
from pds.producers.changes import Changes, as_arrow, as_table
from pds.producers.errors import GraphMismatch
from pds.producers.graph import Node, check_name, key_schema, value_schema
from pds.producers.produce import run_batched, run_rows
from pds.table import MAX_VERSION, MIN_AGE, _native, vacuum_args

_log = logging.getLogger("pds.pipeline")

__all__ = ["Pipeline"]

F = TypeVar("F", bound=Callable[..., Any])
Upserts: TypeAlias = pa.Table | pa.RecordBatchReader | None

#: Default memory for each external sort.
DEFAULT_SORT_BUDGET = 512 * 1024 * 1024
#: Default rows per key-range part.
DEFAULT_TARGET_ROWS = 256 * 1024


def _version_arg(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_VERSION:
        raise ValueError(f"version must be an int from 0 to {MAX_VERSION}, got {value!r}")
    return value


class Pipeline:
    """A pipeline under *key* in a store: create one with :meth:`create`,
    open one with :meth:`open`, then declare its nodes (:meth:`source`,
    :meth:`stage`, :meth:`merge`) before :meth:`update`.

    Reading (:meth:`read`, :meth:`changes`, :meth:`history`) needs no
    declarations: the graph is stored in every version.
    """

    def __init__(
        self,
        store: Store,
        handle: _core.RustStore,
        key: str,
        manifest: dict[str, Any],
        *,
        sort_budget: int,
        target_rows: int,
        compression: str,
        workers: int,
    ) -> None:
        self._store = store
        self._native = handle
        self._key = key
        self._root = store.native_path(key)
        self._manifest = manifest
        self._declared: dict[str, Node] = {}
        self._order: list[str] = []
        self._sort_budget = sort_budget
        self._target_rows = target_rows
        self._compression = compression
        self._workers = workers
        #: Per stage the last update split over worker processes: its ranges (tests read it).
        self._worker_stats: dict[str, dict[str, int]] = {}

    # -- opening ---------------------------------------------------------------

    @staticmethod
    def _options(sort_budget: int, target_rows: int, compression: str, workers: int | None) -> dict[str, Any]:
        count = worker_count(workers)
        for name, v in (("sort_budget", sort_budget), ("target_rows", target_rows)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not isinstance(compression, str):
            raise TypeError("compression must be a codec name")
        return {"sort_budget": sort_budget, "target_rows": target_rows, "compression": compression, "workers": count}

    @classmethod
    def create(
        cls,
        store: Store | str,
        key: str,
        *,
        exist_ok: bool = False,
        sort_budget: int = DEFAULT_SORT_BUDGET,
        target_rows: int = DEFAULT_TARGET_ROWS,
        compression: str = "zstd",
        workers: int | None = None,
        **storage_options: object,
    ) -> Pipeline:
        """Create an empty pipeline (version 0) under *key*.

        *sort_budget* is the memory (bytes) of each external sort (runs spill
        to local temporary files beyond it); *target_rows* the rows per
        key-range part. *workers* is how many processes run ``Produce`` in
        an update (``None``: the core count; see :attr:`workers`).

        Raises:
            ValueError: *workers* (or *sort_budget*, *target_rows*) below 1,
                before any I/O.
            remote_store.InvalidPath: a bad *key* (empty, the store root,
                ``..``, NUL, a lone surrogate, over 1,024 UTF-8 bytes), as
                for datasets and tables, before any I/O; ``TypeError`` if
                it is not a str.
            remote_store.AlreadyExists: a pipeline is at *key* (unless
                *exist_ok*, which opens it); or a dataset or table is at
                *key*, or a dataset, table or pipeline lies at an ancestor
                of *key* or below it (keys are exclusive: the message names
                what is there and its key). Nothing is written then.

        Cost: the exclusivity check (5 HEADs per level of *key*, at once;
        1 LIST of at most 1,000 objects below it; 1-3 GETs per table or
        pipeline found), then 1 GET + 1 HEAD + 2 PUTs.
        """
        opts = cls._options(sort_budget, target_rows, compression, workers)
        key = _check_key(key)
        store, handle = _native(store, storage_options)
        root = store.native_path(key)
        manifest = {
            "format": "pds-pipeline/2",
            "version": 0,
            "timestamp_ms": 0,
            "operation": "create",
            "detail": {},
            "graph": {"nodes": []},
            "nodes": {},
        }
        created = _core.pipeline_create(handle, root, manifest, exist_ok=bool(exist_ok))
        return cls(store, handle, key, created, **opts)

    @classmethod
    def open(
        cls,
        store: Store | str,
        key: str,
        *,
        sort_budget: int = DEFAULT_SORT_BUDGET,
        target_rows: int = DEFAULT_TARGET_ROWS,
        compression: str = "zstd",
        workers: int | None = None,
        **storage_options: object,
    ) -> Pipeline:
        """Open the pipeline under *key* at its latest version. Cost: 2 GETs +
        1 HEAD (1 HEAD more when there is no pipeline).

        Raises ``NotFound`` if there is none (saying so if a dataset lives
        there instead), ``ManifestCorrupted`` if the pointer or the manifest
        is damaged or inconsistent (its checksum, a part listed twice or
        outside its node, a graph that does not match the nodes' states,
        ...) or is a table's (the message says how to open it);
        ``ValueError`` before any I/O for *workers* (or *sort_budget*,
        *target_rows*) below 1, and ``remote_store.InvalidPath`` (a
        ``TypeError`` for a non-str) for a bad *key*, as :meth:`create`.
        The options are :meth:`create`'s."""
        opts = cls._options(sort_budget, target_rows, compression, workers)
        key = _check_key(key)
        store, handle = _native(store, storage_options)
        latest = _core.pipeline_latest(handle, store.native_path(key))
        if latest is None:
            raise NotFound(f"no pipeline at {key!r}", path=key)
        return cls(store, handle, key, latest, **opts)

    # -- declaring -------------------------------------------------------------

    def _stored(self, manifest: Mapping[str, Any] | None = None) -> dict[str, Node]:
        """The stored graph of *manifest* (this object's by default).

        The core checked the manifest's checksum and parts when it read it;
        the graph is checked here: readable nodes, each named once, reading
        only nodes declared before it, and exactly the nodes the manifest
        holds state for. Anything else is ``ManifestCorrupted``."""
        m = self._manifest if manifest is None else manifest
        where = f"{self._key}/manifest/v{int(m.get('version', 0)):08d}.json"
        out: dict[str, Node] = {}
        try:
            graph = m.get("graph", {})
            descriptions = graph.get("nodes", []) if isinstance(graph, Mapping) else None
            if not isinstance(descriptions, list):
                raise ValueError("its graph holds no list of nodes")
            for d in descriptions:
                if not isinstance(d, Mapping):
                    raise ValueError("a graph node is not an object")
                n = Node.from_description(d)
                if n.name in out:
                    raise ValueError(f"node {n.name!r} is listed twice")
                unknown = [s for s in n.sources if s not in out]
                if unknown:
                    raise ValueError(f"node {n.name!r} reads {unknown}, which no earlier node is")
                out[n.name] = n
            states = m.get("nodes", {})
            if not isinstance(states, Mapping) or set(states) != set(out):
                raise ValueError(f"its graph has nodes {sorted(out)} but it holds state for {sorted(states or {})}")
        except ValueError as e:
            raise ManifestCorrupted(f"pipeline manifest {where} is corrupted: {e}", path=where, reason=str(e)) from e
        return out

    def _declare(self, node: Node) -> Node:
        if node.name in self._declared:
            raise ValueError(f"{node.name!r} is declared twice")
        node.check_value_keys()
        stored = self._stored().get(node.name)
        if stored is not None:
            node.check_same(stored)
        self._declared[node.name] = node
        self._order.append(node.name)
        return node

    def _source_name(self, s: Node | str | Callable[..., Any]) -> str:
        if isinstance(s, Node):
            name = s.name
        elif isinstance(s, str):
            name = s
        else:  # a stage's decorated Produce stands for its stage
            found = [n for n in self._declared.values() if n.fn is s]
            if not found:
                raise ValueError(f"{s!r} is not a declared stage's Produce in this pipeline")
            name = found[0].name
        if name not in self._declared:
            raise ValueError(
                f"{name!r} is not declared in this pipeline (declare sources before the stages reading them)"
            )
        return name

    def source(self, name: str, key: object, value: object) -> Node:
        """Declare a source: data you change with :meth:`update`. *key* and
        *value* are pyarrow Schemas or ``{name: type}`` dicts; a value column
        named like a key column is the key itself."""
        return self._declare(Node(check_name(name), "source", key_schema(key), value_schema(value)))

    def stage(
        self,
        name: str,
        sources: Sequence[Node | str | Callable[..., Any]],
        key: object,
        value: object,
        batched: bool = False,
    ) -> Callable[[F], F]:
        """Declare a stage; decorates its ``Produce`` (returned unchanged: the
        function stands for its stage in later ``sources=[...]``).

        Row form: ``fn(key, values)`` (one lazy, single-use sequence of dicts
        per source for a join) yields ``(target_key, value)`` pairs (tuples:
        anything else, a 2-element list too, is ``SchemaMismatch``), the
        value a dict of the value columns (or the bare value if there is
        one). Each pair is stored as it is at its yield: ``Produce`` may
        change or reuse a dict or list after yielding it (what can change
        is copied at the yield; ints, floats, str, bytes, dates and the
        like are not). Batched form (``batched=True``): ``fn(groups)`` (one
        ``pyarrow.Table`` per source) gets whole groups sorted by key and
        returns a table of the target key, value and source key columns
        (a missing or extra column is ``SchemaMismatch`` naming it).
        A single-source group larger than 524,288 rows (8 chunks of 65,536) comes
        over several calls, in key order, each table holding a slice of it
        (its key repeating from one call to the next), so memory stays
        bounded: a ``Produce`` that aggregates per key must not assume the
        group is whole.
        A join's sources must have keys of the same types; a key with no
        value on any side (deleted everywhere) is not handed to ``Produce``.

        Output is stored only where its column holds it exactly (no
        truncated float, no bool as an int, no str for bytes, a compound
        target key as a tuple of exactly its columns; see
        ``pds.producers.exact``): else ``SchemaMismatch`` naming the stage,
        the column and the value, and nothing is committed. Row-form values
        of timestamp, time and duration columns are ``datetime.datetime``,
        ``datetime.time`` and ``datetime.timedelta`` whether pandas is
        installed or not; only a nanosecond value that is not a whole
        microsecond is a ``pandas.Timestamp``/``pandas.Timedelta`` (a
        ``DataError`` without pandas, and always for ``time64('ns')``).
        """
        check_name(name)
        names = tuple(self._source_name(s) for s in sources)
        if not names:
            raise ValueError(f"stage {name!r} needs at least one source")
        first = self._declared[names[0]].key
        for n in names[1:]:
            other = self._declared[n].key
            if [f.type for f in other] != [f.type for f in first]:
                raise SchemaMismatch(
                    f"stage {name!r}: join sources need keys of the same types; {names[0]!r} has "
                    f"{[str(f.type) for f in first]}, {n!r} has {[str(f.type) for f in other]}"
                )
        node = Node(name, "stage", key_schema(key), value_schema(value), names, bool(batched), None, first)

        def decorate(fn: F) -> F:
            if not callable(fn):
                raise TypeError("@stage decorates a function")
            node.fn = fn
            self._declare(node)
            return fn

        return decorate

    def merge(self, name: str, feeders: Sequence[Node | str | Callable[..., Any]]) -> Node:
        """Declare a merge of feeders with the same key and value schemas:
        usable as a source, it reads as every feeder's rows of each key."""
        check_name(name)
        names = tuple(self._source_name(f) for f in feeders)
        if len(names) < 2:
            raise ValueError(f"merge {name!r} needs at least two feeders")
        first = self._declared[names[0]]
        for n in names[1:]:
            other = self._declared[n]
            if not (other.key.equals(first.key) and other.public_schema.equals(first.public_schema)):
                raise SchemaMismatch(
                    f"merge {name!r}: feeders need the same key and value schema; {names[0]!r} has "
                    f"{first.public_schema}, {n!r} has {other.public_schema}"
                )
        return self._declare(Node(name, "merge", first.key, first.value, names))

    # -- views for the engine --------------------------------------------------

    def _view(self, name: str, graph: Mapping[str, Node], states: Mapping[str, Any]) -> dict[str, Any]:
        node = graph[name]
        view: dict[str, Any] = {
            "name": name,
            "kind": node.kind,
            "key": node.key_names,
            "values": [f.name for f in node.stored_values],
            "schema": node.describe()["schema"],
            "state": states.get(name, {}),
        }
        if node.kind == "merge":
            view["feeders"] = [self._view(f, graph, states) for f in node.sources]
        return view

    def _at(self, version: int | None) -> dict[str, Any]:
        version = _version_arg(version)
        if version is None:
            latest = _core.pipeline_latest(self._native, self._root)
            if latest is None:
                raise NotFound(f"no pipeline at {self._key!r}", path=self._key)
            self._manifest = latest
            return self._manifest
        return _core.pipeline_version(self._native, self._root, version)

    def _node_view(self, name: str, version: int | None) -> tuple[Node, str]:
        _, node, view = self._node_at(name, version)
        return node, json.dumps(view)

    def _node_at(self, name: str, version: int | None) -> tuple[dict[str, Any], Node, dict[str, Any]]:
        """The manifest of *version*, the node *name* in it and its engine view."""
        m = self._at(version)
        graph = self._stored(m)
        if name not in graph:
            raise NotFound(
                f"pipeline {self._key!r} has no node {name!r} at version {m['version']} "
                f"(its nodes: {', '.join(graph)})",
                path=name,
            )
        return m, graph[name], self._view(name, graph, m["nodes"])

    # -- reading ---------------------------------------------------------------

    @property
    def key(self) -> str:
        """The pipeline's key in its store."""
        return self._key

    @property
    def store(self) -> Store:
        """The store the pipeline lives in."""
        return self._store

    @property
    def workers(self) -> int:
        """How many worker processes run ``Produce`` in an update.

        With more than one, a row-form stage whose change hands ``Produce``
        at least ``pds.producers._workers.MIN_ROWS`` (16M) source rows over
        several key ranges is split by key range: ``Produce`` runs for each
        source-key range in a worker process (a pool started for the
        update, ``forkserver`` start method; functions pickled by
        cloudpickle), which writes the emitted rows to Arrow files by
        target-key range in a temporary exchange folder; each target range
        is merged into its parts in a worker; the version is committed once
        from this process. Results do not depend on the count. Batched
        stages, smaller changes and everything with ``workers=1`` or on a
        ``memory://`` store run in this process (the engine there already
        uses every core). Memory: no row passes through this process; each
        worker keeps to ``sort_budget``. Cost: starting the pool (tens of
        milliseconds; the fork server once per process, about a second),
        the emitted rows written and read once as Arrow files and sorted
        twice. See :mod:`pds.producers._workers`."""
        return self._workers

    @property
    def version(self) -> int:
        """The version this object last loaded or committed."""
        return int(self._manifest["version"])

    def refresh(self) -> int:
        """Load the latest version (2 GETs + 1 HEAD); returns it."""
        return int(self._at(None)["version"])

    def _writable_base(self) -> dict[str, Any]:
        """The latest version, for a write: ``UpgradeRequired`` if it is in an
        earlier format, before anything is written."""
        base = self._at(None)
        earlier = base.get("upgrade_required")
        if earlier is not None:
            raise UpgradeRequired(
                f"pipeline {self._key!r} was written by an earlier pds in format {earlier}: it can be "
                "read, but not written, until it is upgraded to this pds's format with "
                f"Pipeline.upgrade() or `pds upgrade URL {self._key}` (pds that read only the earlier "
                "format cannot read it after that); nothing was written",
                path=self._key,
            )
        return base

    def upgrade(self) -> int:
        """Upgrade the pipeline to this pds's on-disk format, load its latest
        version and return it.

        pds reads every pipeline format it ever wrote but writes only its own,
        and never upgrades silently. A pipeline whose latest version is in
        ``pds-pipeline/1`` (sealed or not: the format before an update's
        patches shared one file of deleted values) opens read-only:
        :meth:`read`, :meth:`changes` and :meth:`history` work, and every write
        (:meth:`update`, :meth:`rebuild`, :meth:`compact`, :meth:`vacuum`)
        raises :class:`pds.UpgradeRequired` until this call. It commits one
        version (operation ``"upgrade"``) with the same graph and parts, in which
        no node changed, by compare-and-swap like any commit; no part is
        rewritten and earlier versions stay readable. A pipeline already in the
        current format is left alone (nothing written).

        Cost: the latest version (2 GETs); when upgrading, 2 PUTs, then the
        latest version again (2 GETs + 1 HEAD).

        Raises:
            remote_store.NotFound: no pipeline at the key.
            pds.CommitConflict: writers kept winning the race (nothing written).
        """
        _core.pipeline_upgrade(self._native, self._root)
        return self.refresh()

    def read(self, name: str, version: int | None = None) -> pa.Table:
        """A node's content at *version* (latest by default): its key and
        value columns, sorted by key. A merge reads as all its feeders'.
        The whole table is in memory: :meth:`read_batches` streams it."""
        _, view = self._node_view(name, version)
        return _core.pipeline_read(self._native, self._root, view)

    def read_batches(self, name: str, version: int | None = None) -> pa.RecordBatchReader:
        """:meth:`read`'s rows as a stream, in the same order: memory holds a
        few parts' bytes and batches at a time, whatever the node's size.
        The version is fixed when the reader is made; a failure while
        reading (a damaged part) raises its documented class from the
        reader's iteration."""
        _, view = self._node_view(name, version)
        return _core.pipeline_read_batches(self._native, self._root, view)

    def _partition_views(self, name: str, version: int | None = None) -> tuple[int, pa.Schema, list[str]]:
        """For readers that split a node's content (Spark): the version read,
        the node's public schema, and one engine view per stored content
        part (a merge's: per part of each feeder), each reading that part
        alone. The parts' rows together are :meth:`read`'s (unsorted across
        parts of different feeders). Cost: what :meth:`read` costs before
        reading data (2 GETs + 1 HEAD for the latest version)."""
        m, _, view = self._node_at(name, version)
        schema = _core.pipeline_read(self._native, self._root, json.dumps(_without_parts(view))).schema

        def split(v: dict[str, Any]) -> list[dict[str, Any]]:
            if v["kind"] == "merge":
                return [part for f in v["feeders"] for part in split(f)]
            state = v.get("state") or {}
            return [{**v, "state": {**state, "content": [part]}} for part in state.get("content") or []]

        views = [json.dumps(v) for v in split(view)]
        return int(m["version"]), schema, views

    def changes(self, name: str, version: int | None = None) -> Changes:
        """What *version* (latest by default) changed in a node: every row
        of each key it changed (``upserts``, sorted by key), and the keys it
        left with no row (``deletes``). What the stages downstream consumed."""
        _, view = self._node_view(name, version)
        rows, deleted = _core.pipeline_update(self._native, self._root, view)
        return Changes(upserts=rows, deletes=deleted)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The readable versions, newest first (at most *limit*), in the shape
        of :meth:`pds.Table.history`: ``version``, ``previous`` (the version
        it was built on; ``None`` for the first), ``created_at`` (UTC
        datetime), ``operation`` (``create``, ``update``, ``rebuild``, ``compact``),
        ``parameters`` (per source, the rows upserted and keys deleted; per
        stage run, the rows handed to ``Produce`` and the rows it emitted:
        the only rows the update sorted besides the changed keys), and
        ``commit_id`` (the id of the commit that wrote the version, which a
        ``pds.CommitUnknown`` message names). Versions already vacuumed are
        left out.

        Cost: 2 GETs for the latest version, then 1 GET per older version
        listed.

        Raises:
            ValueError: *limit* is not a positive int.
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive int or None, got {limit!r}")
        latest = self._at(None)
        newest = int(latest["version"])
        oldest = 0 if limit is None else max(0, newest - limit + 1)
        out = []
        for v in range(newest, oldest - 1, -1):
            try:
                m = latest if v == newest else _core.pipeline_version(self._native, self._root, v)
            except NotFound:
                continue
            out.append(
                {
                    "version": v,
                    "previous": v - 1 if v > 0 else None,
                    "created_at": datetime.datetime.fromtimestamp(m["timestamp_ms"] / 1000, tz=datetime.UTC),
                    "operation": m["operation"],
                    "parameters": m.get("detail", {}),
                    "commit_id": m.get("commit_id"),
                }
            )
        return out

    def vacuum(
        self,
        retain: datetime.timedelta = datetime.timedelta(days=7),
        dry_run: bool = True,
        *,
        keep_versions: bool = False,
        min_age: datetime.timedelta = MIN_AGE,
        progress: bool | None = None,
    ) -> list[str]:
        """Remove the objects of this pipeline that no retained version
        references, once they are older than *retain*. Returns the keys
        (relative to the pipeline) removed, or with ``dry_run=True`` (the
        default) the keys that would be.

        Retained, whatever *retain* is: the latest version, the version the
        pointer names and every version above them; then every version
        created within *retain*, and the newest one before it. Each keeps
        its manifest and every part it references.

        Removed by default: parts of updates that failed, crashed or lost a
        race; the manifests of versions past the window (``read(...,
        version=)`` of them is then ``NotFound``) and the parts only they
        referenced. With ``keep_versions=True`` every version stays
        readable and only parts no version references go.

        Only the pipeline's own objects are touched (``nodes/<node>/content/``,
        ``mappings/`` and ``update/`` parts, ``manifest/``,
        ``_latest_manifest``), never a dataset, table or pipeline stored
        under its key. No object younger than *min_age* (default 1 hour) is
        ever removed, so an update in flight keeps its parts; lower it (down
        to 0) only when no update can be running.

        ``progress=True`` shows the objects deleted of those planned on
        stderr while it runs (``None``: if ``PDS_PROGRESS`` is set; see the
        logging guide).

        Raises:
            TypeError: an argument of the wrong type.
            ValueError: a negative *min_age*, or *retain* shorter than
                *min_age*; before any I/O.
            remote_store.NotFound: no pipeline at the key.

        Cost: 1 LIST, the latest version (2 GETs and a HEAD), a GET per
        other retained manifest (none if nothing is old enough), a DELETE
        per object removed."""
        args = vacuum_args(retain, dry_run, keep_versions, min_age)
        with _progress.shown(self._native, f"vacuuming pipeline {self._key}", progress) as shown:
            return list(_core.pipeline_vacuum(self._native, self._root, progress=shown.counters, **args))

    # -- updating --------------------------------------------------------------

    def _check_declared(self) -> None:
        missing = [n for n in self._stored() if n not in self._declared]
        if missing:
            raise GraphMismatch(
                f"pipeline {self._key!r} stores {missing} but they are not declared: declare every stored node "
                "(with its Produce) before update()"
            )
        for name in self._order:
            node = self._declared[name]
            if node.kind == "stage" and node.fn is None:
                raise ValueError(f"stage {name!r} has no Produce")

    def _source_node(self, name: str) -> Node:
        """The declared source *name*; ``ValueError`` if there is none."""
        node = self._declared.get(name)
        if node is None or node.kind != "source":
            raise ValueError(f"{name!r} is not a declared source of this pipeline")
        return node

    def _normalise(self, changes: Mapping[str, Any]) -> dict[str, _Change]:
        """Every change checked and cast to its source's schema, before any
        I/O (a stream's rows are checked as it is read, before any write).
        Sources whose changes hold no row and no key are left out (a stream
        is read up to its first row to know)."""
        if not isinstance(changes, Mapping):
            raise TypeError(f"changes must be a dict of source name -> Changes or table, got {type(changes).__name__}")
        out: dict[str, _Change] = {}
        for name, ch in changes.items():
            node = self._source_node(name)
            if not isinstance(ch, Changes):
                ch = Changes(upserts=as_arrow(ch, f"changes[{name!r}]"))
            # A Spark DataFrame kept by Changes is read here, through its Arrow stream.
            given = as_arrow(ch.upserts, f"changes[{name!r}] upserts")
            dels = as_table(ch.deletes, f"changes[{name!r}] deletes")
            if dels is not None:
                check_delete_columns(dels.column_names, node.key_names, f"source {name!r} deletes")
            dels = conform_table(dels, node.key, f"source {name!r} deletes")
            failed: list[BaseException] = []
            ups: Upserts
            if isinstance(given, pa.RecordBatchReader):
                ups = _conform_stream(given, node.public_schema, f"source {name!r} upserts", failed)
                ups = _unless_empty(ups)
            else:
                ups = conform_table(given, node.public_schema, f"source {name!r} upserts")
                _core.pipeline_check_changes(node.key_names, ups, dels)
                if ups is not None and ups.num_rows == 0:
                    ups = None
            if dels is not None and dels.num_rows == 0:
                dels = None
            if ups is None and dels is None:
                continue
            out[name] = _Change(ups, dels, failed)
        return out

    def update(self, changes: Mapping[str, Any], *, progress: bool | None = None) -> int:
        """Apply *changes* (source name -> :class:`pds.Changes`, or a bare
        table of upserts) and propagate them through every stage, as one new
        version; returns it.

        Each stage re-runs ``Produce`` only for the source keys that changed
        and rewrites only the key-range parts the change lands in. Raises
        ``ValueError`` (a key both upserted and deleted, an unknown source)
        or ``SchemaMismatch`` (a column missing, a null key, a value its
        column cannot hold exactly, deletes with a column that is not a
        key column) before any I/O (for a stream: before
        anything is committed); a ``Produce`` that raises, or output that
        does not match the stage's schema, commits nothing: the error is a
        ``ProduceError`` naming the stage and the key (a batched
        ``Produce``: the first and last keys of its call) that is also of
        the exception's class, which is its ``__cause__``. An exception
        raised by an upserts stream itself (a ``RecordBatchReader`` whose
        source fails) is a ``DataError`` naming its class, with the
        exception as its ``__cause__``; nothing is committed.
        ``CommitConflict`` if another update committed since this one
        started (nothing of this one is committed; run it again).
        ``CommitUnknown`` if the store failed so that whether the version
        landed cannot be learned: check :meth:`version` / :meth:`history`
        before running it again (its parts are kept; vacuum removes them if
        the version did not land).

        Changes that hold no row and no key (``{}``, a ``Changes()`` or
        empty tables) commit nothing and return the latest version (2 GETs + 1 HEAD),
        unless nodes are declared that the pipeline does not store yet:
        those are built from their sources, as a new version. Changes that
        do hold rows or keys commit a new version even where they change no
        stored row (the same rows upserted again, an absent key deleted):
        updates go by key, not by value, so those keys are handed to the
        stages' ``Produce`` again and appear in the change feeds.

        ``progress=True`` shows on stderr, while it runs, the nodes (sources
        and stages, in order) done of the pipeline's, naming the one running
        (``None``: if ``PDS_PROGRESS`` is set; see the logging guide);
        ``TypeError`` for anything but a bool or None, before any I/O.
        """
        show = _progress.enabled(progress)
        with (
            _progress.shown(self._native, f"updating pipeline {self._key}", show) as shown,
            self._stage_runner() as run_stage,
        ):
            return self._update(changes, run_stage, shown=shown)

    @contextlib.contextmanager
    def _stage_runner(self) -> Iterator[StageRunner | None]:
        """The stage runner of one update: worker processes if
        :attr:`workers` can be used (the pool shut down when the update
        ends), else ``None`` (this process)."""
        if not LocalStages.usable(self._native, self._workers):
            yield None
            return
        with LocalStages(self.store, self._native, self.key, self._workers, self._run_stage_here) as stages:
            try:
                yield stages
            finally:
                self._worker_stats = stages.stats

    def _update(
        self,
        changes: Mapping[str, Any],
        run_stage: StageRunner | None,
        run_source: SourceRunner | None = None,
        shown: _progress.Shown = _progress.OFF,
    ) -> int:
        """:meth:`update`, running each stage with *run_stage* and applying
        each source's change with *run_source* (``None``: in this process;
        ``pds.spark.update_pipeline`` passes Spark's). With *run_source*,
        *changes* are already checked by its caller, as :meth:`update`
        checks them, before any write: source name -> the change handed to
        *run_source* (:attr:`SourceTask.change`), sources with nothing to
        apply left out. *shown* counts the nodes done."""
        normalised = self._normalise(changes) if run_source is None else dict(changes)
        self._check_declared()
        if not normalised:
            latest = self._at(None)
            stored = self._stored(latest)
            if all(name in stored for name in self._order):
                return int(latest["version"])
        return self._run(
            normalised,
            rebuild=set(),
            operation="update",
            detail={"sources": {}},
            run_stage=run_stage,
            run_source=run_source,
            shown=shown,
        )

    def _apply_source_here(self, task: SourceTask, created: list[str]) -> str:
        """Apply one source's change (a :class:`_Change`) in this process."""
        change = task.change
        try:
            text, made = _core.pipeline_apply_source(
                self._native, self._root, task.view, change.upserts, change.deletes, **task.opts
            )
        except Exception:
            if change.failed:  # the stream failed (its check, or its own error): say why
                failed = change.failed[0]
                raise failed from failed.__cause__
            raise
        created += made
        return str(text)

    def _run_stage_here(self, task: StageTask, created: list[str]) -> StageDone:
        """Run one stage's update in this process (see :class:`StageTask`)."""
        run = _core.StageRun(
            self._native, self._root, task.stage_view, task.source_views, rebuild=task.rebuild, **task.opts
        )
        try:
            if task.node.batched:
                run_batched(task.node, run, len(task.node.sources))
            else:
                run_rows(task.node, run, len(task.node.sources), task.values)
            handed, emitted = run.counts()
            text, made = run.finish()
        finally:
            run.close()
        created += made
        return StageDone(text, handed, emitted)

    def rebuild(self, stage: str, *, progress: bool | None = None) -> int:
        """Recompute *stage* from its sources' whole content (after its
        ``Produce`` changed, say) and propagate what changed downstream, as
        one new version; returns it. Cost: a full build of *stage*, then
        the downstream stages in proportion to what changed.

        ``progress=True`` shows the nodes done of the pipeline's on stderr
        while it runs, as :meth:`update` does (``None``: if
        ``PDS_PROGRESS`` is set)."""
        node = self._declared.get(stage)
        if node is None or node.kind != "stage":
            raise ValueError(f"{stage!r} is not a declared stage of this pipeline")
        show = _progress.enabled(progress)
        self._check_declared()
        with (
            _progress.shown(self._native, f"rebuilding {stage} of pipeline {self._key}", show) as shown,
            self._stage_runner() as run_stage,
        ):
            return self._run(
                {}, rebuild={stage}, operation="rebuild", detail={"stage": stage}, run_stage=run_stage, shown=shown
            )

    def _run(
        self,
        changes: Mapping[str, Any],
        rebuild: set[str],
        operation: str,
        detail: dict[str, Any],
        run_stage: StageRunner | None = None,
        run_source: SourceRunner | None = None,
        shown: _progress.Shown = _progress.OFF,
    ) -> int:
        started = time.perf_counter()
        requests = self._native.counts()[0]
        run_stage = run_stage or self._run_stage_here
        run_source = run_source or self._apply_source_here
        base = self._writable_base()
        stored = self._stored(base)
        old_states: dict[str, Any] = base["nodes"]
        graph = dict(self._declared)
        states: dict[str, Any] = {}
        created: list[str] = []
        opts: _Opts = {
            "compression": self._compression,
            "target_rows": self._target_rows,
            "sort_budget": self._sort_budget,
        }
        run_chain: ChainRunner | None = getattr(run_stage, "chain", None)
        try:
            for name in shown.steps(self._order):
                if name in states:  # run by a chain of stages
                    continue
                node = graph[name]
                old = old_states.get(name, {})
                if node.kind == "source":
                    if name in changes:
                        view = json.dumps(self._view(name, graph, {name: old}))
                        text = run_source(SourceTask(node, view, changes[name], opts), created)
                        states[name] = json.loads(text)
                        detail["sources"][name] = _update_counts(states[name])
                    else:
                        states[name] = _carried(old)
                    continue
                changed = any(_has_update(states[s]) for s in node.sources)
                fresh = name not in stored or name in rebuild
                if node.kind == "merge":
                    if changed:
                        view = json.dumps(self._view(name, graph, states))
                        text, made = _core.pipeline_merge_update(self._native, self._root, view, **opts)
                        created += made
                        states[name] = json.loads(text)
                    else:
                        states[name] = {}
                    continue
                if not (changed or fresh):
                    states[name] = _carried(old)
                    continue
                links: list[ChainLink] = [self._link(name, graph, old_states, states, [], fresh, opts)]
                if run_chain is not None and not fresh:
                    links += self._chained(name, graph, old_states, states, stored, rebuild, opts)
                if run_chain is not None and len(links) > 1:
                    results = run_chain(links, created)
                else:
                    results = [run_stage(links[0].task, created)]
                for link, done in zip(links, results, strict=False):
                    member = link.task.node.name
                    if done is None:  # a chained stage none of whose sources changed
                        states[member] = _carried(old_states.get(member, {}))
                        continue
                    detail.setdefault("stages", {})[member] = {"rows_in": done.rows_in, "rows_emitted": done.rows_out}
                    states[member] = json.loads(done.state)
        except BaseException:
            _discard(self._native, created)
            raise
        version = self._commit(base, [graph[n] for n in self._order], states, operation, detail, created)
        if _log.isEnabledFor(logging.INFO):
            _log.info(
                "pipeline %s: %s committed version %d (%s): %d requests, %.1f ms",
                self._key,
                operation,
                version,
                _describe_detail(detail),
                self._native.counts()[0] - requests,
                (time.perf_counter() - started) * 1e3,
            )
        return version

    def _link(
        self,
        name: str,
        graph: Mapping[str, Node],
        old_states: Mapping[str, Any],
        states: Mapping[str, Any],
        chain: Sequence[str],
        fresh: bool,
        opts: _Opts,
    ) -> ChainLink:
        """Stage *name*'s task, as a link of a chain whose earlier stages
        are *chain* (their views hold their stored state, for the runner to
        replace with the chain's results)."""
        node = graph[name]
        stage_view = json.dumps(self._view(name, graph, {name: old_states.get(name, {})}))
        known = {**old_states, **states}
        source_views = [json.dumps(self._view(s, graph, known)) for s in node.sources]
        fed_by = [chain.index(s) if s in chain else None for s in node.sources]
        values = [graph[s].value.names for s in node.sources]
        return ChainLink(StageTask(node, stage_view, source_views, values, fresh, opts), fed_by)

    def _chained(
        self,
        name: str,
        graph: Mapping[str, Node],
        old_states: Mapping[str, Any],
        states: Mapping[str, Any],
        stored: Mapping[str, Node],
        rebuild: set[str],
        opts: _Opts,
    ) -> list[ChainLink]:
        """The stages after *name* in node order that can be updated in one
        chain with it: each a stored stage (not built for the first time,
        nor rebuilt) whose sources are done or earlier in the chain; the
        first that cannot ends the chain."""
        chain = [name]
        links = []
        for after in self._order[self._order.index(name) + 1 :]:
            node = graph[after]
            if node.kind != "stage" or after not in stored or after in rebuild:
                break
            if not all(s in states or s in chain for s in node.sources):
                break
            links.append(self._link(after, graph, old_states, states, chain, False, opts))
            chain.append(after)
        return links

    def _commit(
        self,
        base: Mapping[str, Any],
        nodes: Sequence[Node],
        states: Mapping[str, Any],
        operation: str,
        detail: Mapping[str, Any],
        created: list[str],
    ) -> int:
        """Commit the version after *base* with *nodes* (in order) at
        *states*, by CAS; return it. What *created* names is removed if no
        version can name it."""
        try:
            manifest = {
                "format": "pds-pipeline/2",
                "version": 0,
                "timestamp_ms": int(datetime.datetime.now(datetime.UTC).timestamp() * 1000),
                "operation": operation,
                "detail": dict(detail),
                "graph": {"nodes": [n.describe() for n in nodes]},
                "nodes": dict(states),
            }
            committed = _core.pipeline_commit(self._native, self._root, int(base["version"]), manifest)
        except CommitUnknown:
            # The new version may exist and name these parts: keep them
            # (vacuum removes them if it does not).
            raise
        except CommitConflict:
            _discard(self._native, created)
            raise CommitConflict(
                f"pipeline {self._key!r}: another update committed after version {base['version']}, on which "
                "this one was built; nothing of this update was committed. Run it again."
            ) from None
        except BaseException:
            # Every other error (an interrupt too) means no version names these parts.
            _discard(self._native, created)
            raise
        self._manifest = committed
        return int(self._manifest["version"])

    def compact(self, *, progress: bool | None = None) -> int:
        """Compact the stored parts as one new version (operation
        ``compact`` in :meth:`history`); return it.

        Each source's and stage's parts that carry patches (an update's
        change layered over a part; see the README's storage layout) are
        rewritten with their patches merged in, and runs of small parts
        (below half of ``target_rows``, left by updates that removed rows)
        are merged into parts of about ``target_rows`` rows. Every other
        part is kept by reference. The rows do not change: the version's
        update is empty in every node, so the next :meth:`update` costs
        what it would have, minus reading patches. If nothing needs
        compacting, nothing is written and the current version is returned.
        The history entry's ``parameters`` give, per node, the parts
        rewritten and written.

        Updates compact the parts they land in on their own (a part is
        rewritten once it has its limit of patches, 6 to 10 by its name, or
        patched rows past a quarter of its rows); call this to bound the
        files a read fetches everywhere, say before a read-heavy period or
        a backup.

        No stage needs declaring (the stored graph is compacted; no
        ``Produce`` runs): a pipeline opened by key alone can be compacted,
        as ``pds compact`` does. New parts are cut at this object's
        ``target_rows`` and written with its ``compression`` (the options
        of :meth:`open`, which the pipeline does not store): open it with
        the ones it was built with, or every part may count as small.

        Cost: reads and writes the parts compacted, in this process.

        ``progress=True`` shows the nodes compacted of the pipeline's on
        stderr while it runs, naming the one running (``None``: if
        ``PDS_PROGRESS`` is set; see the logging guide).

        Raises:
            TypeError: *progress* is not a bool or None (before any I/O).
            pds.CommitConflict: another update committed meanwhile (nothing
                of this one is kept; run it again).
            pds.UpgradeRequired: the pipeline was written by an earlier
                format (see :meth:`upgrade`); nothing is written.
        """
        show = _progress.enabled(progress)
        with _progress.shown(self._native, f"compacting pipeline {self._key}", show) as shown:
            return self._compact(shown)

    def _compact(self, shown: _progress.Shown) -> int:
        """:meth:`compact`, counting the nodes done in *shown*."""
        base = self._writable_base()
        stored = self._stored(base)
        states: dict[str, Any] = {}
        created: list[str] = []
        detail: dict[str, Any] = {"nodes": {}}
        opts: _Opts = {
            "compression": self._compression,
            "target_rows": self._target_rows,
            "sort_budget": self._sort_budget,
        }
        try:
            for name in shown.steps(list(stored)):
                node = stored[name]
                old = base["nodes"].get(name, {})
                if node.kind == "merge":
                    states[name] = {}
                    continue
                view = json.dumps(self._view(name, stored, {name: old}))
                text, rewritten, written, made = _core.pipeline_compact_node(self._native, self._root, view, **opts)
                created += made
                states[name] = json.loads(text)
                if rewritten:
                    detail["nodes"][name] = {"parts_rewritten": rewritten, "parts_written": written}
        except BaseException:
            _discard(self._native, created)
            raise
        if not detail["nodes"]:
            self._manifest = dict(base)
            return int(base["version"])
        return self._commit(base, list(stored.values()), states, "compact", detail, created)


class _Change(NamedTuple):
    """A source's changes, conformed: upserts (``None`` if none), deleted
    keys (``None`` if none), and where a streamed upsert puts the
    ``SchemaMismatch`` that ended it."""

    upserts: Upserts
    deletes: pa.Table | None
    failed: list[BaseException]


def _without_parts(view: Mapping[str, Any]) -> dict[str, Any]:
    """*view* reading nothing (for its schema): no content parts, here or in feeders."""
    out = dict(view)
    out["state"] = {**(view.get("state") or {}), "content": []}
    if "feeders" in view:
        out["feeders"] = [_without_parts(f) for f in view["feeders"]]
    return out


def _describe_detail(detail: Mapping[str, Any]) -> str:
    """An update's detail (:meth:`Pipeline.history`'s ``parameters``) as
    the INFO line shows it: per source its upserts and deletes, per stage
    the rows handed to ``Produce`` and the rows emitted."""
    said = [f"source {n}: {c['upserts']} upserts, {c['deletes']} deletes" for n, c in detail.get("sources", {}).items()]
    said += [f"stage {n}: {c['rows_in']} rows in, {c['rows_emitted']} out" for n, c in detail.get("stages", {}).items()]
    if "stage" in detail:
        said.append(f"rebuilt {detail['stage']}")
    return "; ".join(said) or "no change"


def _update_counts(state: Mapping[str, Any]) -> dict[str, int]:
    """Rows of the keys a source's update upserted, and the keys it deleted."""
    u = state.get("update") or {}
    return {
        k: sum(int(p["rows"]) for p in u.get(part, [])) for k, part in (("upserts", "rows"), ("deletes", "deleted"))
    }


def _has_update(state: Mapping[str, Any]) -> bool:
    u = state.get("update") or {}
    return bool(u.get("rows") or u.get("deleted"))


def _carried(state: Mapping[str, Any]) -> dict[str, Any]:
    """A node's state at a version that did not change it: its parts, no update."""
    kept = {"content": state.get("content", []), "mappings": state.get("mappings", [])}
    if state.get("derived_prefix"):
        kept["derived_prefix"] = state["derived_prefix"]
    return kept


def _discard(handle: _core.RustStore, keys: Iterable[str]) -> None:
    """Best effort: remove what an update that did not commit wrote (vacuum
    removes what this misses)."""
    for k in keys:
        try:
            handle.delete(k)
        except Exception:  # noqa: BLE001 - best effort; vacuum is the backstop
            continue


def _check_key(key: object) -> str:
    """*key* checked before any I/O as dataset and table keys are
    (``TypeError`` for a non-str, ``remote_store.InvalidPath`` for an empty
    key, the store root, ``..``, NUL, a lone surrogate or more than 1,024
    UTF-8 bytes), without its outer slashes."""
    return check_key(key).strip("/")


def check_columns(names: Sequence[str], schema: pa.Schema, what: str) -> None:
    """``SchemaMismatch`` if a column of *schema* is not among *names*."""
    missing = [f.name for f in schema if f.name not in set(names)]
    if missing:
        raise SchemaMismatch(f"{what}: missing columns {missing} (has {list(names)})")


def check_delete_columns(names: Sequence[str], key_names: Sequence[str], what: str) -> None:
    """``SchemaMismatch`` naming the columns among *names* (a source's
    deletes') that are not key columns: deletes hold only *key_names*."""
    extra = [c for c in names if c not in key_names]
    if extra:
        raise SchemaMismatch(f"{what}: extra columns {extra}; deletes hold only the key columns {list(key_names)}")


def _conform_stream(
    reader: pa.RecordBatchReader, schema: pa.Schema, what: str, failed: list[BaseException]
) -> pa.RecordBatchReader:
    """*reader*'s batches conformed to *schema* as they are read (columns
    checked now, from the reader's schema). A batch that does not conform
    ends the stream; its ``SchemaMismatch`` is put in *failed* (the engine
    reading the stream sees only that it failed). So does an exception of
    *reader* itself: as a ``DataError`` naming its class, with the
    exception as its ``__cause__``."""
    conform_table(reader.schema.empty_table(), schema, what)  # its columns and their types, before any read

    not_null = [i for i, f in enumerate(schema) if not f.nullable]

    def read() -> Iterator[pa.RecordBatch]:
        try:
            yield from reader
        except Exception as e:
            error = DataError(f"{what}: the input stream raised {type(e).__name__}: {e}")
            error.__cause__ = e
            failed.append(error)
            raise error from e

    def batches() -> Iterator[pa.RecordBatch]:
        for b in read():
            if b.schema.equals(schema) and not any(b.column(i).null_count for i in not_null):
                yield b  # already conforming: passed through as is
                continue
            try:
                t = conform_table(pa.Table.from_batches([b]), schema, what)
            except SchemaMismatch as e:
                failed.append(e)
                raise
            assert t is not None
            yield from t.to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())


def _unless_empty(reader: pa.RecordBatchReader) -> pa.RecordBatchReader | None:
    """*reader*, or ``None`` if it holds no row (read up to its first row)."""
    for first in reader:
        if first.num_rows:
            return pa.RecordBatchReader.from_batches(reader.schema, itertools.chain([first], reader))
    return None


def conform_table(table: pa.Table | None, schema: pa.Schema, what: str) -> pa.Table | None:
    """*table* with exactly *schema*'s columns (by name), cast; ``None`` if
    absent. ``SchemaMismatch`` for a missing column, a column of another
    type than ``Table.append`` takes for it (the same logical type:
    ``string``, ``large_string`` and ``string_view`` are one, as are the
    binary and list variants and a dictionary of strings; see
    ``_core.same_logical_type``), or a null in a column *schema* declares
    not null (a key). How every change given to a source is checked,
    locally and in Spark's tasks."""
    if table is None:
        return None
    check_columns(table.column_names, schema, what)
    cols = []
    for f in schema:
        col = table.column(f.name)
        if not col.type.equals(f.type):
            if not _core.same_logical_type(f.type, col.type):
                raise SchemaMismatch(
                    f"{what}: column {f.name!r} is {col.type} in the data, {f.type} in the source (a source "
                    "takes the types Table.append takes: the same logical type, no other cast)"
                )
            col = col.cast(f.type)  # a physical variant of the same values: exact
        if not f.nullable and col.null_count:
            raise SchemaMismatch(f"{what}: column {f.name!r} holds nulls ({col.null_count}); keys are never null")
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=schema)
