"""Updating a pipeline on Spark: each stage's update split into tasks by key range.

The driver runs the update as :meth:`pds.Pipeline.update` does (the same
errors, same stage order, one commit by compare-and-swap), but
hands each stage to Spark in two phases with a shuffle between them:

1. **map**: a task per *source*-key range (consecutive ranges share a task
   beyond two tasks per core), aligned with the stage's
   stored key-mapping parts (for a stage with nothing stored yet: with its
   first source's content parts). The task builds the engine's stage run
   restricted to its range, calls the user's ``Produce`` (pickled by
   PySpark) on the groups of the changed source keys, rewrites the range's
   key-mapping parts, and emits the rows ``Produce`` returned and the
   removed ``(source key, target key)`` pairs, each tagged with the
   *target*-key range that holds its target key.
2. **shuffle**: the rows are repartitioned by that target range (the ranges
   are aligned with the stage's stored content parts; for a stage with no
   content yet, planned from the target keys the map tasks sampled, their
   output persisted meanwhile so that ``Produce`` runs once).
3. **reduce**: one task per target range (a task may take several) merges
   the range's rows into the range's content parts and writes the range's
   update. Ranges that no change touches are neither read nor written.

The driver then stitches the ranges' parts into the stage's new state (the
untouched parts kept by reference) and goes on to the next node.

Sources are checked and applied by Spark too (see
:mod:`pds.spark._pipeline_sources`): before any Spark job, the driver
checks each change's columns and types from its schema; then, in node
order, each source's changes are tagged with their source-key range
(aligned with its stored content parts; a first build is range-partitioned
by Spark where Spark orders the key as pds does, else tagged with ranges
planned from keys Spark sampled), shuffled by range, and applied by one task per
range, which checks the rows as it reads them (null keys, inexact values,
a key both upserted and deleted). No row of a change passes through the
driver, and an update reads its change once. Merges are updated on the driver (``pipeline_merge_update``: the
Rust core reads the feeders' update parts and writes the merge's; rows do
not pass through Python, and the cost follows the change). The version is
committed once.

Every object a task writes is named after the update's job id, so the
driver finds and removes what failed or duplicate task attempts wrote,
and everything the job wrote when the update fails. ``Produce`` must be
deterministic: Spark may run a task twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession, functions

from pds import _core
from pds.producers._ranges import by_prefix_span, map_range, reduce_range, sample
from pds.producers.pipeline import Pipeline, StageDone, StageTask, _carried
from pds.spark._arrow_conf import small_cache_batches
from pds.spark._pipeline_sources import SparkSources
from pds.spark._pipeline_sources import frames as _changes
from pds.spark._pipeline_tasks import (
    MAX_RANGES,
    UNPLANNED,
    RangeRows,
    SparkNodes,
    by_range_in_order,
    checked_budget,
    in_range_order,
)
from pds.spark._pipeline_tasks import ROWS as _ROWS
from pds.spark._pipeline_tasks import ipc as _ipc
from pds.spark._pipeline_tasks import out as _out
from pds.spark._pipeline_tasks import split as _split
from pds.spark._workers import check_workers

__all__ = ["update_pipeline"]

_EMITTED, _REMOVED, _MAPPED, _REDUCED, _SAMPLES, _DERIVED = 0, 1, 2, 3, 4, 5
#: Map tasks per core of the cluster at most (``defaultParallelism``): a
#: scattered update touches every source range, and a task per range cost
#: more in Spark's fixed per-task work than the ranges' own.
TASKS_PER_CORE = 2


class _Phases:
    """One stage's map and reduce functions, pickled to the tasks. *clip*:
    a reduce task's rows may include rows of other ranges (batches tagged
    with every range they span: :func:`_by_span`), which it drops."""

    def __init__(
        self, store: Any, root: str, task: StageTask, targets: list[str] | None, job: str, *, clip: bool = False
    ) -> None:
        self.store, self.root, self.task, self.targets, self.job = store, root, task, targets, job
        self.clip = clip

    def _rust(self) -> _core.RustStore:
        rust: _core.RustStore = self.store.unwrap(_core.RustStore)
        return rust

    def map(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t = self.task
        every = max(1, int(t.opts["target_rows"]))
        for b in batches:
            for rng in b.column("range_json").to_pylist():
                # The emitted rows stream out of the range's sort (memory within sort_budget).
                meta, emitted, removed, derived = map_range(self._rust(), self.root, t, rng, self.job, stream=True)
                seen = 0
                for e in emitted:
                    if self.targets is None:
                        # One sample every `target_rows` rows of the task's whole sorted output.
                        found = sample(t.stage_view, e, seen, every)
                        if found is not None:
                            yield _out(_SAMPLES, -1, None, found)
                        seen += e.num_rows
                    yield from self._tagged(e, _EMITTED)
                for r in removed:
                    yield from self._tagged(r, _REMOVED)
                for d in derived:
                    yield from self._spanned(d)
                yield _out(_MAPPED, -1, None, meta)

    def _spanned(self, keys: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """A derived stage's changed source keys as output rows: each to
        every target range that may hold its rows (the reduce finds them).
        Only a stage that stores rows has any, so its ranges are planned."""
        if self.targets is None:
            raise RuntimeError("pds: a stage with nothing stored handed on changed keys to look up")
        for rng, part in by_prefix_span(keys, self.task.stage_view, self.targets):
            yield _out(_DERIVED, rng, _ipc(part), None)

    def _tagged(self, rows: pa.RecordBatch, kind: int) -> Iterator[pa.RecordBatch]:
        """*rows* as output rows: one per target range they fall in, or,
        with the targets not planned yet, kept whole with their least and
        greatest keys (``meta``), for :func:`_by_span` to tag in the JVM."""
        view = self.task.stage_view
        if self.targets is not None:
            yield from _split(rows, view, self.targets, kind, by_key=kind == _EMITTED)
            return
        bounds = _core.pipeline_key_bounds(view, rows)
        if bounds is not None:
            yield _out(kind, UNPLANNED, _ipc(rows), " ".join(bounds))

    def reduce(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each target range's rows (sorted by range: :func:`in_range_order`)
        merged as they are read: the removed pairs and derived keys first, in memory, then the
        emitted rows streamed into the range's sort (memory within
        ``sort_budget``)."""
        targets = self.targets or []
        for item in by_range_in_order(batches, (_REMOVED, _DERIVED), _EMITTED):
            if not isinstance(item, RangeRows):
                if item[0] == _MAPPED:
                    yield _out(_MAPPED, -1, None, item[3])
                continue
            rows = item.stream()
            meta = reduce_range(
                self._rust(),
                self.root,
                self.task,
                targets[item.rng],
                rows,
                item.held,
                self.job,
                clip=self.clip,
                derived=item.held_by[_DERIVED],
            )
            yield _out(_REDUCED, item.rng, None, meta)


def _by_span(kept: DataFrame, view: str, targets: list[str]) -> DataFrame:
    """A stage's first map output (kept), tagged with the planned target
    ranges by the JVM in one pass over it, with no Python task: each batch
    of emitted rows (sorted by key, so a few ranges each) or of removed
    pairs with every range from its least key's to its greatest key's
    (``meta``: their hex texts, which order as the keys do), so that a
    batch spanning ranges reaches each of their reduce tasks, which clip
    it to their range; each map task's result as itself (range -1)."""
    lows = [functions.unhex(functions.lit(b)) for b in _core.pipeline_range_lows(view, targets)]

    def at(text: Any) -> Any:  # the index of the range holding a key's hex text
        key, n = functions.unhex(text), functions.lit(0)
        for b in lows:
            n = n + (key >= b).cast("int")
        return n.cast("int")

    meta = functions.col("meta")
    least, greatest = functions.substring_index(meta, " ", 1), functions.substring_index(meta, " ", -1)
    result = functions.col("kind") == _MAPPED
    spans = functions.when(result, functions.array(functions.lit(-1))).otherwise(
        functions.sequence(at(least), at(greatest))
    )
    return kept.where(f"kind != {_SAMPLES}").select(
        "kind",
        functions.explode(spans).alias("range"),
        "payload",
        functions.when(result, meta).otherwise(functions.lit(None).cast("string")).alias("meta"),
    )


def _checked_rows(stage: str, rows: list[Row]) -> tuple[int, int]:
    """The rows the stage's map tasks read and emitted (``rows_in``,
    ``rows_out``); ``RuntimeError`` unless its reduce tasks were given
    exactly the rows its map tasks emitted: no row lost or duplicated
    between them, whatever the shuffle did (nothing is committed then)."""
    maps = [json.loads(r["meta"]) for r in rows if r["kind"] == _MAPPED]
    rows_in, emitted = sum(int(m["rows_in"]) for m in maps), sum(int(m["rows_out"]) for m in maps)
    given = sum(int(json.loads(r["meta"])["emitted_rows"]) for r in rows if r["kind"] == _REDUCED)
    if emitted != given:
        raise RuntimeError(
            f"pds: stage {stage!r}'s map tasks emitted {emitted} rows, its reduce tasks were given {given}"
        )
    return rows_in, emitted


class _SparkStages(SparkNodes):
    """The :data:`pds.producers.pipeline.StageRunner` that runs stages on
    Spark (:attr:`stats`: per stage, its map tasks and ranges)."""

    def _plan_targets(self, task: StageTask, ranges: DataFrame) -> tuple[list[str], DataFrame]:
        """For a stage with no content yet: run the map phase, kept (persisted:
        ``Produce`` runs once), plan the target ranges from the emitted keys
        it sampled (one every ``target_rows`` rows of each task's sorted
        output), and return them with the kept map output (the caller
        unpersists it). The cache is on the executors' disks, built in small
        batches (:func:`small_cache_batches`): its rows are payloads of a few
        MB each."""
        mapped = ranges.mapInArrow(_Phases(self.store, self.root, task, None, self.job).map, _ROWS)
        with small_cache_batches(self.spark):  # read where the cache is declared, or where it is built
            # On disk, one cached batch in memory at a time: an executor's
            # heap need not hold a task's output (it does not, for a large group).
            mapped = mapped.persist(StorageLevel.DISK_ONLY)
            try:
                samples = [r["meta"] for r in mapped.where(f"kind = {_SAMPLES}").select("meta").collect()]
                targets = _core.pipeline_ranges_from_samples(task.stage_view, samples, MAX_RANGES)
            except BaseException:
                mapped.unpersist()
                raise
        return targets, mapped

    def _unchanged(self, task: StageTask) -> StageDone:
        """A stage none of whose source keys changed: its state is kept, its
        update is empty (what the local engine gives; no Spark job)."""
        state = json.loads(task.stage_view).get("state") or {}
        return StageDone(json.dumps(_carried(state)), 0, 0)

    def __call__(self, task: StageTask, created: list[str]) -> StageDone:
        name = task.node.name
        task = task._replace(opts=self.opts(task.opts))
        sources = _core.pipeline_stage_ranges(
            task.stage_view, task.source_views, "source", MAX_RANGES, touched_only=not task.rebuild
        )
        if not sources:  # no source key of the stage changed
            return self._unchanged(task)
        planned = bool(json.loads(task.stage_view).get("state", {}).get("content"))
        targets = (
            _core.pipeline_stage_ranges(task.stage_view, task.source_views, "target", MAX_RANGES) if planned else None
        )
        # Consecutive ranges per map task, with no shuffle: at most TASKS_PER_CORE
        # tasks per core (a task's fixed cost is about 50 ms), each range still
        # streamed on its own within its task's sort budget.
        sc = self.spark.sparkContext
        map_tasks = min(len(sources), TASKS_PER_CORE * sc.defaultParallelism)
        rdd = sc.parallelize([(r,) for r in sources], map_tasks)
        ranges = self.spark.createDataFrame(rdd, "range_json string")

        counted = (0, 0)

        def run() -> list[Row]:
            nonlocal targets, counted
            kept: DataFrame | None = None
            if targets is not None:
                phases = _Phases(self.store, self.root, task, targets, self.job)
                mapped: DataFrame = ranges.mapInArrow(phases.map, _ROWS)
            else:
                targets, kept = self._plan_targets(task, ranges)
                phases = _Phases(self.store, self.root, task, targets, self.job, clip=True)
                mapped = _by_span(kept, task.stage_view, targets)
            try:
                done = in_range_order(mapped).mapInArrow(phases.reduce, _ROWS).collect()
            finally:
                if kept is not None:
                    kept.unpersist()
            counted = _checked_rows(name, done)
            return done

        rows = self._collect(name, "stage", run)
        assert targets is not None
        maps = [r["meta"] for r in rows if r["kind"] == _MAPPED]
        reduces = [r["meta"] for r in rows if r["kind"] == _REDUCED]
        state_text = self._keep(
            name,
            lambda: _core.pipeline_stitch_stage(self.rust, self.root, task.stage_view, maps, reduces, **task.opts),
            created,
        )
        self.stats[name] = {
            "map_ranges": len(sources),
            "map_tasks": map_tasks,
            "reduce_ranges": len(reduces),
            "target_ranges": len(targets),
        }
        return StageDone(state_text, *counted)


def update_pipeline(
    spark: SparkSession, p: Pipeline, changes: Mapping[str, Any], *, sort_budget: int | None = None
) -> int:
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
            the source's key columns only.
        sort_budget: The memory (bytes, at least 1 MiB) of each task's
            external sort: a task holds about this much of its range's rows
            and spills the rest to its local disk. By default the
            pipeline's ``sort_budget``, at most half of a task's share of
            its executor's memory (``spark.executor.pyspark.memory`` if set,
            else ``spark.executor.memory``, divided by
            ``spark.executor.cores``), and at least 16 MiB.

    Raises what :meth:`pds.Pipeline.update` raises for changes given as
    streams: ``ValueError`` (an unknown source, before any Spark job; a
    key both upserted and deleted), ``pds.SchemaMismatch`` (deletes with a
    column that is not a key column, a missing column or a type no value
    of which fits, before any Spark job; a null key or a value its column
    cannot hold exactly, found by the tasks as they read the rows), ``pds.ProduceError`` (naming the
    stage and the key; a batched ``Produce``: the first and last keys of
    its call, as ``key`` and ``last_key``), ``pds.CommitConflict`` (nothing of this update committed),
    ``pds.CommitUnknown``; and :class:`pds.spark.SparkWorkerError` when the
    workers cannot import pds. A failed job commits nothing and removes what
    its tasks wrote.
    """
    if not isinstance(p, Pipeline):
        raise TypeError(f"p must be a pds.Pipeline, got {type(p).__name__}")
    budget = checked_budget(sort_budget)
    given = _changes(changes)
    stages = _SparkStages(spark, p, sort_budget=budget)
    sources = SparkSources(spark, p, job=stages.job, stats=stages.stats, sort_budget=stages.sort_budget)
    check_workers(spark)
    checked = sources.check(given)
    return p._update(checked, stages, sources)
