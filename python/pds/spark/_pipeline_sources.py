"""A pipeline's source changes on Spark: shuffled by source-key range
and applied by one task per range, the rows checked as they are read
(see :mod:`pds.spark._pipeline_update` for the whole update).

1. **check** (:meth:`SparkSources.check`, before any task runs): on the
   driver, the columns and their types from each DataFrame's schema
   (deletes hold only the key columns), for every source; a source whose
   DataFrames hold no row is left out, as locally (a ``limit(1)`` job);
   for a source the pipeline stores nothing of yet, its upserts are
   counted where Spark will range-partition them (3. below), and
   otherwise keys are sampled by Spark (each row with probability
   1 / ``target_rows``, read by the JVM) to plan its ranges.
2. **apply** (:meth:`SparkSources.__call__`, in the update's node order):
   the source's key ranges are cut at its stored content parts'
   boundaries; for a first build, from the sampled keys (a range's task
   writes about one part; at most :data:`MAX_RANGES` ranges). A
   ``mapInArrow`` conforms each batch of the changes as
   :meth:`pds.Pipeline.update` conforms a table
   (:func:`pds.producers.pipeline.conform_table`: ``SchemaMismatch`` for a
   null key or a value its column cannot hold exactly) and tags its rows
   with the range of each key; Spark's shuffle brings each range's rows to
   one task, and the task applies them to the range's content parts only
   (``pipeline_apply_source_range``: ``ValueError`` for a key both
   upserted and deleted; it sorts the upserts and cuts them into parts).
   The driver stitches the ranges' results into the source's new state
   (untouched parts kept by reference). No row of the change passes
   through the driver, and the change is read once.
3. **a first build** (no stored part to align with): where Spark orders
   the key columns as pds does (:func:`_first_rows`), Spark range-partitions
   the rows by key itself (its own sampling, in the JVM), with no Python
   task before the shuffle; each task conforms its partition's rows as it
   reads them and applies them as one range (:meth:`_SourceTasks.apply_first`),
   and the driver gives the results their ranges in partition order
   (:func:`pds.spark._spark_ranges.tiled`; the stitch checks the order).
   The number of ranges comes from the upserts' row count (a JVM-only
   job in the check); the change is then read twice more (Spark's
   sampling, the apply): cache a DataFrame that is costly to compute.

A failed check in a task fails the update as locally for a stream: with
the local error and message, nothing committed, and what the update wrote
removed.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Row, functions

from pds import _core
from pds.errors import SchemaMismatch
from pds.producers._tasks import SourceTask
from pds.producers.changes import Changes
from pds.producers.pipeline import check_columns, check_delete_columns, conform_table
from pds.spark._arrow_conf import arrow_byte_cap_lifted
from pds.spark._pipeline_tasks import (
    MAX_RANGES,
    ROWS,
    RangeRows,
    SparkNodes,
    by_range_in_order,
    in_range_order,
    out,
    split,
)
from pds.spark._schema import to_arrow
from pds.spark._spark_ranges import ALL, ordered_alike, partition_index, tiled
from pds.spark._workers import explain_worker_failure

__all__ = ["SourceChange", "SparkSources", "frames"]

_UPSERTED, _DELETED, _APPLIED, _SAMPLED = 0, 1, 2, 3
#: The column a first build's rows carry their kind in (upserted, deleted).
_KIND = "__pds_kind"

Frames = tuple[DataFrame | None, DataFrame | None]


class SourceChange(NamedTuple):
    """A source's change on Spark, checked: upserts and deletes (``None``
    where they hold no row; each read with the source's columns only);
    for a first build, either the number of ranges Spark's own range
    partitioning cuts it into (:func:`_ordered_by_spark`), or the keys
    sampled from the upserts (JSON texts) to plan its ranges."""

    upserts: DataFrame | None
    deletes: DataFrame | None
    samples: list[str]
    spark_ranges: int = 0


def _frame(value: Any, what: str) -> DataFrame | None:
    if value is None or isinstance(value, DataFrame):
        return value
    raise TypeError(f"{what} must be a Spark DataFrame or None, got {type(value).__name__}")


def frames(changes: Mapping[str, Any]) -> dict[str, Frames]:
    """Source name -> (upserts, deletes) DataFrames, from a DataFrame of
    upserts, an ``(upserts, deletes)`` pair or a :class:`pds.Changes` of
    DataFrames. No Spark job."""
    if not isinstance(changes, Mapping):
        raise TypeError(f"changes must be a dict of source name -> DataFrame, got {type(changes).__name__}")
    found: dict[str, Frames] = {}
    for name, ch in changes.items():
        if isinstance(ch, tuple):
            if len(ch) != 2:
                raise TypeError(f"changes[{name!r}]: a tuple is (upserts, deletes), got {len(ch)} items")
            ch = Changes(upserts=ch[0], deletes=ch[1])
        if not isinstance(ch, Changes):
            ch = Changes(upserts=_frame(ch, f"changes[{name!r}]"))
        found[name] = (
            _frame(ch.upserts, f"changes[{name!r}] upserts"),
            _frame(ch.deletes, f"changes[{name!r}] deletes"),
        )
    return found


def _picked(schema: pa.Schema) -> list[Any]:
    """*schema*'s columns, in its order, as Spark columns."""
    return [functions.col(f"`{f.name}`") for f in schema]


def _columns(df: DataFrame, schema: pa.Schema) -> DataFrame:
    """*df* with *schema*'s columns only, in its order."""
    return df.select(*_picked(schema))


def _check_types(df: DataFrame, schema: pa.Schema, what: str) -> None:
    """``SchemaMismatch`` as :func:`conform_table` raises it for a column
    missing from *df* or of a type no value of which its column holds (the
    message names the column's first value, from a one-row Spark job).
    Types Arrow cannot name are left to the tasks' check."""
    check_columns(df.columns, schema, what)
    picked = _columns(df, schema)
    try:
        arrow = to_arrow(picked.schema)
    except Exception:  # noqa: BLE001 - a type with no Arrow form: the tasks check the values
        return
    for f in schema:
        one = pa.schema([f])
        empty = pa.table({f.name: pa.array([], arrow.field(f.name).type)})
        try:
            conform_table(empty, one, what)
        except SchemaMismatch:
            first = _first_value(picked, f.name, arrow.field(f.name).type)
            conform_table(first if first.num_rows else empty, one, what)
            raise


def _first_value(df: DataFrame, name: str, arrow_type: pa.DataType) -> pa.Table:
    """The first non-null value of *df*'s column *name* (a one-row Spark
    job), as a table of that column (no row if it holds none). PySpark 3.5
    has no ``DataFrame.toArrow``: there the value comes through Python,
    typed as the column's Arrow form."""
    one = df.where(functions.col(f"`{name}`").isNotNull()).select(f"`{name}`").limit(1)
    if hasattr(one, "toArrow"):
        table: pa.Table = one.toArrow()
        return table
    return pa.table({name: pa.array([r[0] for r in one.collect()], arrow_type)})


class _Sampled:
    """Sampled keys (the JVM sampled the rows), conformed to the source's
    key columns and encoded for range planning in a task."""

    def __init__(self, view: str, key: pa.Schema, what: str) -> None:
        self.view, self.key, self.what = view, key, what

    def __call__(self, given: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in given:
            try:
                t = conform_table(pa.Table.from_batches([b]), self.key, self.what)
            except SchemaMismatch:  # the apply tasks raise it, naming the row's column
                continue
            for c in [] if t is None else t.combine_chunks().to_batches():
                if c.num_rows:
                    yield out(_SAMPLED, 0, None, _core.pipeline_key_samples(self.view, c, 1))


class _SourceTasks:
    """One source's apply phase, pickled to the tasks: tag the changes'
    rows with their key range, then apply each range's rows."""

    def __init__(self, sources: SparkSources, task: SourceTask, ranges: list[str]) -> None:
        self.store, self.root, self.job = sources.store, sources.root, sources.job
        self.view, self.opts, self.ranges = task.view, task.opts, ranges
        self.name = task.node.name
        self.schema, self.key = task.node.public_schema, task.node.key

    def _tag(
        self, given: Iterator[pa.RecordBatch], schema: pa.Schema, what: str, kind: int
    ) -> Iterator[pa.RecordBatch]:
        for b in given:
            for c in self._conformed(b, schema, what):
                yield from split(c, self.view, self.ranges, kind)

    def upserts(self, given: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from self._tag(given, self.schema, "upserts", _UPSERTED)

    def deletes(self, given: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from self._tag(given, self.key, "deletes", _DELETED)

    def apply(self, given: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each range's rows (sorted by range: :func:`in_range_order`)
        applied as they are read: the deleted keys first, in memory, then
        the upserts streamed into the range's sort (memory within
        ``sort_budget``)."""
        rust: _core.RustStore = self.store.unwrap(_core.RustStore)
        for item in by_range_in_order(given, _DELETED, _UPSERTED):
            if not isinstance(item, RangeRows):
                continue
            meta = _core.pipeline_apply_source_range(
                rust, self.root, self.view, self.ranges[item.rng], item.stream(), item.held, job=self.job, **self.opts
            )
            yield out(_APPLIED, item.rng, None, meta)

    def _conformed(self, b: pa.RecordBatch, schema: pa.Schema, what: str) -> list[pa.RecordBatch]:
        t = conform_table(pa.Table.from_batches([b]), schema, f"source {self.name!r} {what}")
        assert t is not None
        return [c for c in t.to_batches() if c.num_rows]

    def apply_first(self, given: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A first build's task: its partition of the change's rows as Spark
        read them (range-partitioned by key, deleted keys first), conformed
        as they are read, then applied as one range (every key: no part is
        stored yet). Its result is tagged with the partition's index, which
        orders it among the others (see :func:`pds.spark._spark_ranges.tiled`)."""
        index = partition_index()
        rust: _core.RustStore = self.store.unwrap(_core.RustStore)
        rows = iter(given)
        held: list[pa.RecordBatch] = []
        first: list[pa.RecordBatch] = []
        for b in rows:
            deleted = pc.equal(b.column(_KIND), _DELETED)
            n = pc.sum(deleted).as_py() or 0
            if n:
                held += self._conformed(b.filter(deleted).drop_columns([_KIND]), self.key, "deletes")
            if n < b.num_rows:
                first = self._conformed(b.filter(pc.invert(deleted)).drop_columns([_KIND]), self.schema, "upserts")
                break

        def rest() -> Iterator[pa.RecordBatch]:
            yield from first
            for b in rows:
                if pc.any(pc.equal(b.column(_KIND), _DELETED)).as_py():
                    raise RuntimeError("pds: a first build's deleted keys came after its upserts in a task's input")
                yield from self._conformed(b.drop_columns([_KIND]), self.schema, "upserts")

        stream = rest()
        head = next(stream, None)
        upserts: pa.RecordBatchReader | list[pa.RecordBatch] = []
        if head is not None:
            upserts = pa.RecordBatchReader.from_batches(head.schema, itertools.chain([head], stream))
        if head is None and not held:
            return
        meta = _core.pipeline_apply_source_range(
            rust, self.root, self.view, ALL, upserts, held, job=self.job, **self.opts
        )
        yield out(_APPLIED, index, None, meta)


def _ordered_by_spark(upserts: DataFrame | None, deletes: DataFrame | None, key: pa.Schema) -> bool:
    """Whether Spark's range partitioning of a first build's rows by key
    orders keys as pds does: there are upserts, and every key column is of
    a type Spark orders alike (:func:`pds.spark._spark_ranges.ordered_alike`),
    of the same type in the deletes. Otherwise the rows are tagged with
    their ranges by Python tasks. No Spark job."""
    if upserts is None:
        return False
    types = {f.name: f.dataType for f in upserts.schema.fields}
    dels = None if deletes is None else {f.name: f.dataType for f in deletes.schema.fields}
    return all(ordered_alike(types[f.name], f.type) and (dels is None or dels[f.name] == types[f.name]) for f in key)


def _first_rows(change: SourceChange, key: pa.Schema, schema: pa.Schema) -> DataFrame:
    """A first build's change (upserts present: :func:`_ordered_by_spark`)
    as one DataFrame of the source's columns and :data:`_KIND` (deleted
    keys' value columns null)."""
    assert change.upserts is not None
    types = {f.name: f.dataType for f in change.upserts.schema.fields}
    rows = change.upserts.select(functions.lit(_UPSERTED).cast("byte").alias(_KIND), *_picked(schema))
    if change.deletes is not None:
        keys = set(key.names)
        cols = [
            functions.col(f"`{f.name}`") if f.name in keys else functions.lit(None).cast(types[f.name]).alias(f.name)
            for f in schema
        ]
        rows = rows.union(change.deletes.select(functions.lit(_DELETED).cast("byte").alias(_KIND), *cols))
    return rows


class SparkSources(SparkNodes):
    """The :data:`pds.producers._tasks.SourceRunner` that applies source
    changes on Spark; :meth:`check` first (:attr:`stats`: per source, its
    planned and applied ranges)."""

    def _samples(self, name: str, ups: DataFrame) -> list[str]:
        """Keys sampled from a first build's upserts (each row with
        probability 1 / ``target_rows``, by Spark's ``sample``: the JVM
        reads every row, Python only the sampled keys), as JSON texts for
        ``pipeline_ranges_from_samples``. Null keys are left out, and so is
        a batch of sampled keys that does not fit the source's key columns:
        the apply tasks raise that row's error."""
        node = self.p._source_node(name)
        view = json.dumps(self.p._view(name, self.p._declared, {}))
        every = max(1, self.p._target_rows)
        keys = _columns(ups, node.key).dropna()
        picked = keys.sample(fraction=min(1.0, 1.0 / every), seed=17)
        sampler = _Sampled(view, node.key, f"source {name!r} upserts")
        rows = self._run(name, "sample", lambda: picked.mapInArrow(sampler, ROWS).collect())
        return [r["meta"] for r in rows if r["kind"] == _SAMPLED]

    def _empty(self, name: str, frames: list[DataFrame]) -> bool:
        """Whether every one of *frames* holds no row (a ``limit(1)`` job
        each, stopped at the first row)."""
        return all(self._run(name, "check", df.isEmpty) for df in frames)

    def _run(self, name: str, what: str, job: Any) -> Any:
        """A check job (it writes nothing) under the source's job group."""
        try:
            with self._tagged(name, what):
                return job()
        except BaseException as exc:
            clear = explain_worker_failure(exc)
            if clear is not None:
                raise clear from exc
            raise

    def check(self, given: Mapping[str, Frames]) -> dict[str, SourceChange]:
        """Every source's changes checked as far as the DataFrames' schemas
        tell, for every source before any Spark job: an unknown source,
        deletes with a column that is not a key column, a missing column, a
        type no value of which fits. Sources whose changes hold no row are
        left out (a ``limit(1)`` job). For a source the pipeline stores
        nothing of yet, its upserts are counted (Spark range-partitions
        them: ``target_rows`` a range) or keys sampled to plan its ranges. The rows
        themselves (a null key, a value its column cannot hold exactly, a
        key both upserted and deleted) are checked by the apply tasks as
        they read them, so the change is read once."""
        for name, (ups, dels) in given.items():  # on the driver, every source before any job
            node = self.p._source_node(name)
            if dels is not None:
                check_delete_columns(dels.columns, node.key_names, f"source {name!r} deletes")
                _check_types(dels, node.key, f"source {name!r} deletes")
            if ups is not None:
                _check_types(ups, node.public_schema, f"source {name!r} upserts")
        checked: dict[str, SourceChange] = {}
        for name, (ups, dels) in given.items():
            node = self.p._source_node(name)
            picked_ups = None if ups is None else _columns(ups, node.public_schema)
            picked_dels = None if dels is None else _columns(dels, node.key)
            frames = [f for f in (picked_ups, picked_dels) if f is not None]
            if not frames:
                continue
            stored = ((self.p._manifest.get("nodes") or {}).get(name) or {}).get("content")
            if stored or picked_ups is None:
                change = SourceChange(picked_ups, picked_dels, [])
                empty = self._empty(name, frames)
            elif _ordered_by_spark(picked_ups, picked_dels, node.key):
                # Spark samples the keys itself: count the rows (no Python) for the number of ranges.
                rows = self._run(name, "count", picked_ups.count)
                every = max(1, self.p._target_rows)
                change = SourceChange(picked_ups, picked_dels, [], max(1, min(MAX_RANGES, -(-rows // every))))
                empty = not rows and (picked_dels is None or self._empty(name, [picked_dels]))
            else:
                change = SourceChange(picked_ups, picked_dels, self._samples(name, picked_ups))
                empty = not change.samples and self._empty(name, frames)
            if not empty:
                checked[name] = change
        return checked

    def __call__(self, task: SourceTask, created: list[str]) -> str:
        name = task.node.name
        task = task._replace(opts=self.opts(task.opts))
        change: SourceChange = task.change
        stored = bool((json.loads(task.view).get("state") or {}).get("content"))
        node = task.node
        if not stored and change.spark_ranges:
            # Spark's own range partitioning (its sampling read by the JVM):
            # no Python task between the read and the shuffle.
            first = _SourceTasks(self, task, [ALL])
            by_key = _first_rows(change, node.key, node.public_schema)
            by_key = by_key.repartitionByRange(change.spark_ranges, *_picked(node.key))
            if change.deletes is not None:
                by_key = by_key.sortWithinPartitions(functions.desc(_KIND))

            def run() -> list[Row]:
                # The tasks read the user's rows themselves (no payloads): Spark's byte cap lifted.
                with arrow_byte_cap_lifted(self.spark):
                    return by_key.mapInArrow(first.apply_first, ROWS).collect()

            rows = self._collect(name, "source", run)
            applied = [(r["range"], r["meta"]) for r in rows if r["kind"] == _APPLIED]
            outputs = tiled(applied)
            state_text = self._keep(name, lambda: _core.pipeline_stitch_source(task.view, outputs), created)
            self.stats[name] = {
                "source_ranges": change.spark_ranges,
                "applied_ranges": len(outputs),
                "ranged_by_spark": 1,
            }
            return state_text
        if stored:
            ranges = _core.pipeline_source_ranges(task.view, MAX_RANGES)
        else:  # a first build: ranges from the sampled keys
            ranges = _core.pipeline_ranges_from_samples(task.view, change.samples, MAX_RANGES)
        tasks = _SourceTasks(self, task, ranges)
        tags = []
        if change.deletes is not None:
            tags.append(change.deletes.mapInArrow(tasks.deletes, ROWS))
        if change.upserts is not None:
            tags.append(change.upserts.mapInArrow(tasks.upserts, ROWS))
        tagged_rows = functools.reduce(DataFrame.union, tags)
        rows = self._collect(
            name, "source", lambda: in_range_order(tagged_rows).mapInArrow(tasks.apply, ROWS).collect()
        )
        outputs = [r["meta"] for r in rows if r["kind"] == _APPLIED]
        state_text = self._keep(name, lambda: _core.pipeline_stitch_source(task.view, outputs), created)
        self.stats[name] = {"source_ranges": len(ranges), "applied_ranges": len(outputs), "ranged_by_spark": 0}
        return state_text
