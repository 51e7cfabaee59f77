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

Stages that follow one another in node order, each fed by nodes already
done or by the stages before it, run as one chain in one Spark job
(:meth:`_SparkStages.chain`): a stage's reduce output (its tasks' results,
a few KB per range) is copied through a shuffle to every map task of the
next stage (:class:`_LinkMap`), which stitches its sources' new states
from it as the driver would and maps its share of the touched ranges,
reading the parts the previous stage's reduce tasks wrote; the results of
every stage reach the driver with the last stage's. A merge, a first
build and a rebuilt stage end a chain. The driver then stitches each
stage's ranges' parts into its new state (the untouched parts kept by
reference) and goes on to the next node.

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

import functools
import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession, functions

from pds import _core
from pds.producers._split import by_prefix_span, map_range, reduce_range, sample
from pds.producers._tasks import ChainLink, StageDone, StageTask
from pds.producers.pipeline import Pipeline, _carried
from pds.spark._arrow_conf import small_cache_batches
from pds.spark._pipeline_sources import SparkSources
from pds.spark._pipeline_sources import frames as _changes
from pds.spark._pipeline_tasks import (
    MAX_RANGES,
    UNPLANNED,
    RangeRows,
    Row4,
    SparkNodes,
    by_range_in_order,
    checked_budget,
    in_range_order,
    task_rows,
)
from pds.spark._pipeline_tasks import ROWS as _ROWS
from pds.spark._pipeline_tasks import ipc as _ipc
from pds.spark._pipeline_tasks import out as _out
from pds.spark._pipeline_tasks import split as _split
from pds.spark._workers import check_workers

__all__ = ["update_pipeline"]

_EMITTED, _REMOVED, _MAPPED, _REDUCED, _SAMPLES, _DERIVED, _PASSED = 0, 1, 2, 3, 4, 5, 6
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
        for b in batches:
            yield from self.map_ranges(b.column("range_json").to_pylist())

    def map_ranges(self, ranges: list[str]) -> Iterator[pa.RecordBatch]:
        """The map phase over each source-key range of *ranges* (JSON), in turn."""
        t = self.task
        every = max(1, int(t.opts["target_rows"]))
        for rng in ranges:
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
                if item[0] in (_MAPPED, _PASSED):  # results, handed on
                    yield _out(item[0], -1, None, item[3])
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


def _checked_rows(stage: str, maps: list[str], reduces: list[str]) -> tuple[int, int]:
    """The rows the stage's map tasks read and emitted (``rows_in``,
    ``rows_out``), from their results and its reduce tasks' (JSON texts);
    ``RuntimeError`` unless its reduce tasks were given exactly the rows
    its map tasks emitted: no row lost or duplicated between them,
    whatever the shuffle did (nothing is committed then)."""
    parsed = [json.loads(m) for m in maps]
    rows_in, emitted = sum(int(m["rows_in"]) for m in parsed), sum(int(m["rows_out"]) for m in parsed)
    given = sum(int(json.loads(r)["emitted_rows"]) for r in reduces)
    if emitted != given:
        raise RuntimeError(
            f"pds: stage {stage!r}'s map tasks emitted {emitted} rows, its reduce tasks were given {given}"
        )
    return rows_in, emitted


#: A chain stage's results: its map tasks' and its reduce tasks' (JSON texts).
Results = tuple[list[str], list[str]]


def _results(rows: list[Row4], links: int) -> list[Results]:
    """Each of a chain's *links* stages' results, from its last stage's
    output: that stage's own, and the earlier stages' it handed on
    (:data:`_PASSED`: ``[link, kind, meta]``)."""
    found: list[Results] = [([], []) for _ in range(links)]
    for kind, _, _, meta in rows:
        link = links - 1
        if kind == _PASSED:
            link, kind, meta = json.loads(meta or "")
        if kind == _MAPPED:
            found[link][0].append(str(meta))
        elif kind == _REDUCED:
            found[link][1].append(str(meta))
    return found


def _shared(rows: DataFrame, width: int) -> DataFrame:
    """A chain stage's output (results only: no payload) copied to each of
    *width* shares of the next stage's map phase, a task per share
    (``repartitionById`` where Spark has it; else by hash, a task then
    taking any number of shares)."""
    shares = functions.explode(functions.sequence(functions.lit(0), functions.lit(width - 1)))
    copied = rows.select(shares.alias("share"), "kind", "range", "payload", "meta")
    by_id = getattr(copied, "repartitionById", None)
    return by_id(width, "share") if by_id is not None else copied.repartition(width, "share")


class _LinkMap:
    """The map phase of a chain's stage after its first (link *i* of the
    chain, fed by the stages before it: *fed_by*, *feeders*), as tasks
    that each hold some of *width* shares of the stage's source-key ranges.
    A task's input is the previous stage's results with the earlier
    stages' (:func:`_shared`), a copy per share it holds. From them it
    stitches the new states of the stages that feed this one, as the
    driver would, plans the stage's touched source ranges (the same plan in
    every task: no I/O) and maps its shares of them. The task holding share
    0 hands every result on, for the driver."""

    def __init__(self, phases: _Phases, fed_by: list[int | None], feeders: list[StageTask], i: int, width: int) -> None:
        self.phases, self.fed_by, self.feeders, self.i, self.width = phases, fed_by, feeders, i, width

    def map(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        shares: set[int] = set()
        copy: int | None = None  # the share whose copy is read
        handed: list[tuple[int, int, str]] = []  # (link, kind, meta)
        for b in batches:
            for share, (kind, _, _, meta) in zip(b.column("share").to_pylist(), task_rows(iter([b])), strict=True):
                shares.add(share)
                copy = share if copy is None else copy
                if share != copy:
                    continue
                if kind == _PASSED:
                    link, kind, meta = json.loads(meta or "")
                    handed.append((int(link), int(kind), str(meta)))
                elif kind in (_MAPPED, _REDUCED):
                    handed.append((self.i - 1, kind, str(meta)))
        task = self._task(handed)
        view = task.stage_view
        ranges = _core.pipeline_stage_ranges(view, task.source_views, "source", MAX_RANGES, touched_only=True)
        n, w = len(ranges), self.width
        mine = [r for share in sorted(shares) for r in ranges[share * n // w : (share + 1) * n // w]]
        phases = _Phases(self.phases.store, self.phases.root, task, self.phases.targets, self.phases.job)
        yield from phases.map_ranges(mine)
        if 0 in shares:
            for link, kind, meta in handed:
                yield _out(_PASSED, -1, None, json.dumps([link, kind, meta]))

    def _task(self, handed: list[tuple[int, int, str]]) -> StageTask:
        """The stage's task with the views of the sources the chain feeds
        at their new states."""
        task = self.phases.task
        views = list(task.source_views)
        for slot, j in enumerate(self.fed_by):
            if j is None:
                continue
            feeder = self.feeders[j]
            maps = [m for link, kind, m in handed if link == j and kind == _MAPPED]
            reduces = [m for link, kind, m in handed if link == j and kind == _REDUCED]
            view = json.loads(views[slot])
            view["state"] = json.loads(_stitched(self.phases._rust(), self.phases.root, feeder, maps, reduces))
            views[slot] = json.dumps(view)
        return task._replace(source_views=views)


def _stitched(rust: _core.RustStore, root: str, task: StageTask, maps: list[str], reduces: list[str]) -> str:
    """A stage's new state (JSON) from its tasks' results; with no map
    result (none of its source keys changed), its stored state kept."""
    if not maps:
        return json.dumps(_carried(json.loads(task.stage_view).get("state") or {}))
    return str(_core.pipeline_stitch_stage(rust, root, task.stage_view, maps, reduces, **task.opts))


def _planned(task: StageTask) -> bool:
    """Whether the stage has content (its target ranges are planned from its parts)."""
    return bool((json.loads(task.stage_view).get("state") or {}).get("content"))


class _SparkStages(SparkNodes):
    """The :data:`pds.producers._tasks.StageRunner` that runs stages on
    Spark (:attr:`stats`: per stage, its map tasks and ranges, and the
    chain it ran in), and chains of stages as one job (:meth:`chain`)."""

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

    def _map_tasks(self, sources: list[str]) -> tuple[DataFrame, int]:
        """The source ranges as a DataFrame of consecutive ranges per map
        task, with no shuffle, and the tasks: at most TASKS_PER_CORE tasks
        per core (a task's fixed cost is about 50 ms), each range still
        streamed on its own within its task's sort budget."""
        sc = self.spark.sparkContext
        map_tasks = min(len(sources), TASKS_PER_CORE * sc.defaultParallelism)
        rdd = sc.parallelize([(r,) for r in sources], map_tasks)
        return self.spark.createDataFrame(rdd, "range_json string"), map_tasks

    def __call__(self, task: StageTask, created: list[str]) -> StageDone:
        done = self.chain([ChainLink(task, [None] * len(task.source_views))], created)[0]
        assert done is not None  # a chain's first stage always runs
        return done

    def chain(self, links: list[ChainLink], created: list[str]) -> list[StageDone | None]:
        """The :data:`pds.producers._tasks.ChainRunner`: the leading stages
        of *links* that have content, as one Spark job: each stage's map
        and reduce phases, and between two stages a shuffle of the first's
        results (a few KB per range) to the next one's map tasks
        (:class:`_LinkMap`), which read the parts its reduce tasks wrote.
        The driver stitches and keeps every stage's state once the job
        has ended. A stage with no content yet runs alone
        (:meth:`_first_build`)."""
        links = [link._replace(task=link.task._replace(opts=self.opts(link.task.opts))) for link in links]
        chained = list(itertools.takewhile(lambda link: _planned(link.task), links))
        if not chained:
            return [self._first_build(links[0].task, created)]
        first = chained[0].task
        sources = _core.pipeline_stage_ranges(
            first.stage_view, first.source_views, "source", MAX_RANGES, touched_only=not first.rebuild
        )
        if not sources:  # no source key of the stage changed
            return [self._unchanged(first)]
        targets = [
            _core.pipeline_stage_ranges(link.task.stage_view, link.task.source_views, "target", MAX_RANGES)
            for link in chained
        ]
        names = [link.task.node.name for link in chained]
        ranges, map_tasks = self._map_tasks(sources)
        width = TASKS_PER_CORE * self.spark.sparkContext.defaultParallelism
        found: list[Results] = []
        counted: list[tuple[int, int]] = []

        def run() -> list[Row]:
            phases = _Phases(self.store, self.root, first, targets[0], self.job)
            out = in_range_order(ranges.mapInArrow(phases.map, _ROWS)).mapInArrow(phases.reduce, _ROWS)
            for i in range(1, len(chained)):
                phases = _Phases(self.store, self.root, chained[i].task, targets[i], self.job)
                feeders = [link.task for link in chained[:i]]
                linked = _LinkMap(phases, chained[i].fed_by, feeders, i, width)
                mapped = _shared(out, width).mapInArrow(linked.map, _ROWS)
                out = in_range_order(mapped).mapInArrow(phases.reduce, _ROWS)
            rows = out.collect()
            found[:] = _results([(r["kind"], r["range"], None, r["meta"]) for r in rows], len(chained))
            counted[:] = [_checked_rows(name, *f) for name, f in zip(names, found, strict=True)]
            return rows

        self._collect(names[0], "stages" if len(names) > 1 else "stage", run, also=names[1:])
        jobs = self._jobs(names[0])
        done: list[StageDone | None] = []
        try:
            for i, (link, (maps, reduces)) in enumerate(zip(chained, found, strict=True)):
                name = link.task.node.name
                if not maps:  # none of its source keys changed (only after the first)
                    done.append(None)
                    continue
                stitch = functools.partial(_stitched, self.rust, self.root, link.task, maps, reduces)
                state_text = self._keep(name, stitch, created)
                self.stats[name] = {
                    "map_ranges": len(maps),
                    "map_tasks": map_tasks if i == 0 else width,
                    "reduce_ranges": len(reduces),
                    "target_ranges": len(targets[i]),
                    "chain_link": i,
                    "spark_jobs": jobs,
                }
                done.append(StageDone(state_text, *counted[i]))
        except BaseException:
            for name in names[len(done) :]:
                self._remove(self._job_objects(name))
            raise
        return done

    def _first_build(self, task: StageTask, created: list[str]) -> StageDone:
        """A stage with no content yet: its map output kept while its target
        ranges are planned from it (:meth:`_plan_targets`), then tagged by
        range in the JVM and reduced."""
        name = task.node.name
        sources = _core.pipeline_stage_ranges(
            task.stage_view, task.source_views, "source", MAX_RANGES, touched_only=not task.rebuild
        )
        if not sources:  # no source key of the stage changed
            return self._unchanged(task)
        ranges, map_tasks = self._map_tasks(sources)
        targets: list[str] = []
        counted = (0, 0)

        def run() -> list[Row]:
            nonlocal targets, counted
            targets, kept = self._plan_targets(task, ranges)
            phases = _Phases(self.store, self.root, task, targets, self.job, clip=True)
            try:
                spanned = in_range_order(_by_span(kept, task.stage_view, targets))
                done = spanned.mapInArrow(phases.reduce, _ROWS).collect()
            finally:
                kept.unpersist()
            maps = [r["meta"] for r in done if r["kind"] == _MAPPED]
            counted = _checked_rows(name, maps, [r["meta"] for r in done if r["kind"] == _REDUCED])
            return done

        rows = self._collect(name, "stage", run)
        maps = [r["meta"] for r in rows if r["kind"] == _MAPPED]
        reduces = [r["meta"] for r in rows if r["kind"] == _REDUCED]
        state_text = self._keep(name, lambda: _stitched(self.rust, self.root, task, maps, reduces), created)
        self.stats[name] = {
            "map_ranges": len(sources),
            "map_tasks": map_tasks,
            "reduce_ranges": len(reduces),
            "target_ranges": len(targets),
            "chain_link": 0,
            "spark_jobs": self._jobs(name),
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
