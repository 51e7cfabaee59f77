"""Updating a pipeline on Spark: each stage's update split into tasks by key range.

The driver runs the update as :meth:`pds.Pipeline.update` does (same checks
before any write, same stage order, one commit by compare-and-swap), but
hands each stage to Spark in two phases with a shuffle between them:

1. **map**: one task per *source*-key range, aligned with the stage's
   stored key-mapping parts (for a stage with nothing stored yet: with its
   first source's content parts). The task builds the engine's stage run
   restricted to its range, calls the user's ``Produce`` (pickled by
   PySpark) on the groups of the changed source keys, rewrites the range's
   key-mapping parts, and emits the rows ``Produce`` returned and the
   removed ``(source key, target key)`` pairs, each tagged with the
   *target*-key range that holds its target key.
2. **shuffle**: the rows are repartitioned by that target range (the ranges
   are aligned with the stage's stored content parts; a stage with no
   content yet has one target range, see the module's limits).
3. **reduce**: one task per target range (a task may take several) merges
   the range's rows into the range's content parts and writes the range's
   update. Ranges that no change touches are neither read nor written.

The driver then stitches the ranges' parts into the stage's new state (the
untouched parts kept by reference) and goes on to the next node. Sources
and merges are updated on the driver (their cost follows the change; the
change's rows pass through the driver). The version is committed once.

Every object a task writes is named after the update's job id, so the
driver finds and removes what failed or duplicate task attempts wrote,
and everything the job wrote when the update fails. ``Produce`` must be
deterministic: Spark may run a task twice.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, ByteType, IntegerType, StringType, StructField, StructType
from remote_store import NotFound, RemoteStoreError

from pds import _core
from pds.errors import SchemaMismatch
from pds.producers.changes import Changes
from pds.producers.errors import ProduceError, produce_error
from pds.producers.pipeline import Pipeline, StageDone, StageTask
from pds.producers.produce import run_batched, run_rows
from pds.spark._job import ABORT_SETTLE_SECONDS, remove_until_settled, spark_store
from pds.spark._job_group import tagged, wait_for_tasks
from pds.spark._workers import check_workers, explain_worker_failure

__all__ = ["update_pipeline"]

#: Key ranges per stage phase at most (tasks; a task may take several).
MAX_RANGES = 64

_EMITTED, _REMOVED, _MAPPED, _REDUCED, _SAMPLES = 0, 1, 2, 3, 4

#: Target ranges not planned yet (a stage built for the first time).
_UNPLANNED = -2

_ROWS = StructType(
    [
        StructField("kind", ByteType(), nullable=False),
        StructField("range", IntegerType(), nullable=False),
        StructField("payload", BinaryType(), nullable=True),
        StructField("meta", StringType(), nullable=True),
    ]
)
"""What the phases hand on: a batch of rows (Arrow IPC) for a target range,
or a task's result (JSON)."""


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue()


def _batches(payload: bytes) -> list[pa.RecordBatch]:
    return list(pa.ipc.open_stream(payload))


def _out(kind: int, rng: int, payload: bytes | None, meta: str | None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"kind": [kind], "range": [rng], "payload": [payload], "meta": [meta]},
        schema=pa.schema(
            [
                pa.field("kind", pa.int8(), nullable=False),
                pa.field("range", pa.int32(), nullable=False),
                pa.field("payload", pa.binary()),
                pa.field("meta", pa.string()),
            ]
        ),
    )


def _split(batch: pa.RecordBatch, stage_view: str, targets: list[str] | None, kind: int) -> Iterator[pa.RecordBatch]:
    """*batch*'s rows as one output row per target range they fall in
    (``targets`` ``None``: not planned yet, one row)."""
    if batch.num_rows == 0:
        return
    if targets is None:
        yield _out(kind, _UNPLANNED, _ipc(batch), None)
        return
    if len(targets) == 1:
        yield _out(kind, 0, _ipc(batch), None)
        return
    ids = pa.array(_core.pipeline_assign(stage_view, targets, batch), pa.int32())
    for rng in pc.unique(ids).to_pylist():
        part = batch.filter(pc.equal(ids, rng))
        yield _out(kind, int(rng), _ipc(part), None)


class _Phases:
    """One stage's map and reduce functions, pickled to the tasks."""

    def __init__(self, store: Any, root: str, task: StageTask, targets: list[str] | None, job: str) -> None:
        self.store, self.root, self.task, self.targets, self.job = store, root, task, targets, job

    def _rust(self) -> _core.RustStore:
        rust: _core.RustStore = self.store.unwrap(_core.RustStore)
        return rust

    def map(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t = self.task
        for b in batches:
            for rng in b.column("range_json").to_pylist():
                run = _core.StageRun(
                    self._rust(),
                    self.root,
                    t.stage_view,
                    t.source_views,
                    rebuild=t.rebuild,
                    range=rng,
                    job=self.job,
                    **t.opts,
                )
                try:
                    if t.node.batched:
                        run_batched(t.node, run, len(t.node.sources))
                    else:
                        run_rows(t.node, run, len(t.node.sources), t.values)
                    meta, emitted, removed = run.finish_map()
                finally:
                    run.close()
                every, seen = max(1, int(t.opts["target_rows"])), 0
                for e in emitted:
                    # One sample every `target_rows` rows of the task's whole sorted output.
                    first = -seen % every
                    if self.targets is None and first < e.num_rows:
                        samples = _core.pipeline_key_samples(t.stage_view, e.slice(first), every)
                        yield _out(_SAMPLES, -1, None, samples)
                    seen += e.num_rows
                    yield from _split(e, t.stage_view, self.targets, _EMITTED)
                for r in removed:
                    yield from _split(r, t.stage_view, self.targets, _REMOVED)
                yield _out(_MAPPED, -1, None, meta)

    def assign(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Tag rows held back until the target ranges were planned."""
        for b in batches:
            for kind, payload, meta in zip(
                b.column("kind").to_pylist(),
                b.column("payload").to_pylist(),
                b.column("meta").to_pylist(),
                strict=True,
            ):
                if kind == _MAPPED:
                    yield _out(_MAPPED, -1, None, meta)
                elif kind in (_EMITTED, _REMOVED):
                    for part in _batches(payload):
                        yield from _split(part, self.task.stage_view, self.targets, kind)

    def reduce(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        emitted: dict[int, list[pa.RecordBatch]] = {}
        removed: dict[int, list[pa.RecordBatch]] = {}
        for b in batches:
            for kind, rng, payload, meta in zip(
                b.column("kind").to_pylist(),
                b.column("range").to_pylist(),
                b.column("payload").to_pylist(),
                b.column("meta").to_pylist(),
                strict=True,
            ):
                if kind == _MAPPED:
                    yield _out(_MAPPED, -1, None, meta)
                elif kind == _EMITTED:
                    emitted.setdefault(rng, []).extend(_batches(payload))
                else:
                    removed.setdefault(rng, []).extend(_batches(payload))
        targets = self.targets or []
        for rng in sorted(set(emitted) | set(removed)):
            meta = _core.pipeline_reduce_range(
                self._rust(),
                self.root,
                self.task.stage_view,
                targets[rng],
                emitted.get(rng, []),
                removed.get(rng, []),
                job=self.job,
                **self.task.opts,
            )
            yield _out(_REDUCED, rng, None, meta)


def _state_objects(state: Mapping[str, Any]) -> set[str]:
    """Every object a node state references."""
    update = state.get("update") or {}
    parts = [*state.get("content", []), *state.get("mappings", []), *update.get("rows", []), *update.get("deleted", [])]
    return {str(p["name"]) for p in parts}


class _SparkStages:
    """The :data:`pds.producers.pipeline.StageRunner` that runs stages on Spark."""

    def __init__(self, spark: SparkSession, p: Pipeline) -> None:
        self.spark = spark
        self.p = p
        self.store = spark_store(p.store)
        self.rust: _core.RustStore = self.store.unwrap(_core.RustStore)
        self.root = str(self.store.native_path(p.key))
        self.job = f"sp{uuid.uuid4().hex[:12]}"
        #: Per stage run: its map tasks and target ranges (benchmarks report them).
        self.stats: dict[str, dict[str, int]] = {}

    def _job_objects(self, stage: str) -> list[str]:
        """Every object this job wrote for *stage* (their names start with
        its id), as keys of the Rust store (1 LIST per folder)."""
        out = []
        for folder in ("content", "mappings", "update"):
            prefix = f"{self.p.key}/nodes/{stage}/{folder}"
            try:
                found = [str(f.path) for f in self.store.list_files(prefix, recursive=True)]
            except NotFound:
                continue
            out += [str(self.store.native_path(k)) for k in found if os.path.basename(k).startswith(self.job)]
        return out

    def _remove(self, keys: Sequence[str]) -> None:
        for k in keys:
            try:
                self.rust.delete(k)
            except RemoteStoreError:
                continue  # best effort: vacuum is the backstop

    def _plan_targets(self, task: StageTask, ranges: DataFrame) -> tuple[list[str], DataFrame]:
        """For a stage with no content yet: run the map phase, kept (persisted:
        ``Produce`` runs once), plan the target ranges from the emitted keys
        it sampled (one every ``target_rows`` rows of each task's sorted
        output), and return them with the kept map output (the caller
        unpersists it)."""
        mapped = ranges.mapInArrow(_Phases(self.store, self.root, task, None, self.job).map, _ROWS)
        mapped = mapped.persist(StorageLevel.MEMORY_AND_DISK)
        samples = [r["meta"] for r in mapped.where(f"kind = {_SAMPLES}").select("meta").collect()]
        targets = _core.pipeline_ranges_from_samples(task.stage_view, samples, MAX_RANGES)
        return targets, mapped

    def _unchanged(self, task: StageTask) -> StageDone:
        """A stage none of whose source keys changed: its state is kept, its
        update is empty (what the local engine gives; no Spark job)."""
        state = json.loads(task.stage_view).get("state") or {}
        kept = {"content": state.get("content", []), "mappings": state.get("mappings", [])}
        return StageDone(json.dumps(kept), 0, 0)

    def __call__(self, task: StageTask, created: list[str]) -> StageDone:
        name = task.node.name
        sources = _core.pipeline_stage_ranges(
            task.stage_view, task.source_views, "source", MAX_RANGES, touched_only=not task.rebuild
        )
        if not sources:  # no source key of the stage changed
            return self._unchanged(task)
        planned = bool(json.loads(task.stage_view).get("state", {}).get("content"))
        targets = (
            _core.pipeline_stage_ranges(task.stage_view, task.source_views, "target", MAX_RANGES) if planned else None
        )
        # One partition per range, with no shuffle.
        rdd = self.spark.sparkContext.parallelize([(r,) for r in sources], len(sources))
        ranges = self.spark.createDataFrame(rdd, "range_json string")
        group = f"pds-pipeline-{self.job}-{name}"
        try:
            with tagged(self.spark, group, f"pds.spark.update_pipeline {self.p.key!r} stage {name!r}"):
                kept: DataFrame | None = None
                if targets is not None:
                    phases = _Phases(self.store, self.root, task, targets, self.job)
                    mapped: DataFrame = ranges.mapInArrow(phases.map, _ROWS)
                else:
                    targets, kept = self._plan_targets(task, ranges)
                    phases = _Phases(self.store, self.root, task, targets, self.job)
                    mapped = kept.where(f"kind != {_SAMPLES}").mapInArrow(phases.assign, _ROWS)
                try:
                    # By range, with no count: adaptive execution coalesces the
                    # partitions that few rows reach (a task takes several ranges).
                    rows = mapped.repartition("range").mapInArrow(phases.reduce, _ROWS).collect()
                finally:
                    if kept is not None:
                        kept.unpersist()
        except BaseException as exc:
            wait_for_tasks(self.spark, group)  # no task may write after the cleanup
            self._remove(self._job_objects(name))
            remove_until_settled(lambda: self._job_objects(name), self._remove, ABORT_SETTLE_SECONDS)
            clear = explain_worker_failure(exc)
            if clear is not None:
                raise clear from exc
            raise _unwrapped(exc) from exc
        wait_for_tasks(self.spark, group)  # speculative duplicates still running write no more
        maps = [r["meta"] for r in rows if r["kind"] == _MAPPED]
        reduces = [r["meta"] for r in rows if r["kind"] == _REDUCED]
        try:
            state_text = _core.pipeline_stitch_stage(self.rust, self.root, task.stage_view, maps, reduces, **task.opts)
        except BaseException:
            self._remove(self._job_objects(name))
            raise
        state = json.loads(state_text)
        referenced = {f"{self.root}/{k}" for k in _state_objects(state)}
        written = self._job_objects(name)
        self._remove([k for k in written if k not in referenced])  # failed and duplicate attempts'
        created += [k for k in written if k in referenced]
        rows_in = sum(int(json.loads(m)["rows_in"]) for m in maps)
        rows_out = sum(int(json.loads(m)["rows_out"]) for m in maps)
        self.stats[name] = {"map_tasks": len(sources), "reduce_ranges": len(reduces), "target_ranges": len(targets)}
        return StageDone(state_text, rows_in, rows_out)


_TASK_ERROR = re.compile(
    r"pds\.(?:producers\.errors\.(?P<produce>ProduceError)(?:\[(?P<cls>\w+)\])?|errors\.(?P<schema>SchemaMismatch)): "
    r"(?P<message>[^\n]*)"
)
_PRODUCE = re.compile(r"^stage '(?P<stage>[^']*)' failed on key (?P<key>.*?): (?P<cls>\w+): (?P<error>.*)$")


def _unwrapped(exc: BaseException) -> BaseException:
    """The pds error a task raised, as the local update raises it, when
    Spark's error carries one: ``SchemaMismatch``, or ``ProduceError``
    naming the stage and the key (the key as Python reads its repr back,
    else the repr), also an instance of the user's exception class where
    that is a built-in one (``except ZeroDivisionError`` catches it);
    else *exc*."""
    found = _TASK_ERROR.search(str(exc))
    if found is None:
        return exc
    message = found.group("message")
    if found.group("schema"):
        return SchemaMismatch(message)
    where = _PRODUCE.match(message)
    if where is None:
        return ProduceError(message)
    key: Any = where.group("key")
    with contextlib.suppress(ValueError, SyntaxError):  # else the key's repr, as text
        key = ast.literal_eval(key)
    cls = getattr(builtins, where.group("cls"), None)
    original: BaseException = Exception(where.group("error"))
    if isinstance(cls, type) and issubclass(cls, Exception):
        with contextlib.suppress(Exception):
            original = cls(where.group("error"))
    made = produce_error(original, where.group("stage"), key)
    made.args = (message,)
    return made


def _arrow(df: Any) -> Any:
    """A DataFrame's rows as a pyarrow Table on the driver; anything else as it is."""
    if isinstance(df, DataFrame):
        return df.toArrow()
    return df


def _changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """DataFrames (or ``(upserts, deletes)`` pairs, or :class:`pds.Changes` of
    DataFrames) as Arrow tables on the driver (each change's rows once)."""
    if not isinstance(changes, Mapping):
        raise TypeError(f"changes must be a dict of source name -> DataFrame, got {type(changes).__name__}")
    out: dict[str, Any] = {}
    for name, ch in changes.items():
        if isinstance(ch, tuple):
            if len(ch) != 2:
                raise TypeError(f"changes[{name!r}]: a tuple is (upserts, deletes), got {len(ch)} items")
            ch = Changes(upserts=ch[0], deletes=ch[1])
        if isinstance(ch, Changes):
            out[name] = Changes(upserts=_arrow(ch.upserts), deletes=_arrow(ch.deletes))
        else:
            out[name] = _arrow(ch)
    return out


def update_pipeline(spark: SparkSession, p: Pipeline, changes: Mapping[str, Any]) -> int:
    """Apply *changes* to the pipeline *p* and update every stage on Spark,
    as one new version; return it. See the module docs for how.

    Args:
        spark: The session whose executors run the stages.
        p: The pipeline, with its stages declared (``Produce`` functions
            travel to the tasks by PySpark's pickling); on a store the
            executors reach (file, S3), not ``memory://``.
        changes: Source name -> a DataFrame of upserts, a
            ``(upserts, deletes)`` pair of DataFrames (either may be
            ``None``), or a :class:`pds.Changes` of DataFrames. Deletes hold
            the source's key columns.

    Raises what :meth:`pds.Pipeline.update` raises, before any write where
    it does so: ``ValueError`` (a key both upserted and deleted, an unknown
    source), ``pds.SchemaMismatch``, ``pds.ProduceError`` (naming the stage
    and the key), ``pds.CommitConflict`` (nothing of this update committed),
    ``pds.CommitUnknown``; and :class:`pds.spark.SparkWorkerError` when the
    workers cannot import pds. A failed job commits nothing and removes what
    its tasks wrote.
    """
    if not isinstance(p, Pipeline):
        raise TypeError(f"p must be a pds.Pipeline, got {type(p).__name__}")
    converted = _changes(changes)
    runner = _SparkStages(spark, p)
    check_workers(spark)
    return p._update(converted, runner)
