"""A pipeline's source changes on Spark: checked by Spark jobs that write
nothing, then shuffled by source-key range and applied by one task per
range (see :mod:`pds.spark._pipeline_update` for the whole update).

1. **check** (:meth:`SparkSources.check`, before the update writes
   anything): on the driver, the columns and their types from each
   DataFrame's schema (deletes hold only the key columns); then one Spark job per changed source that conforms
   every Arrow batch as :meth:`pds.Pipeline.update` conforms a table
   (:func:`pds.producers.pipeline.conform_table`: a null key, a value its
   column cannot hold exactly), counts the rows and samples keys; and, for
   a source given both upserts and deletes, a semi-join of their keys
   (``limit(1)``) for a key both upserted and deleted. The errors are the
   local ones (``SchemaMismatch``, ``ValueError``) with the local messages
   (a count of nulls is the first failing batch's). A source whose
   DataFrames hold no row is left out, as locally.
2. **apply** (:meth:`SparkSources.__call__`, in the update's node order):
   the source's key ranges are cut at its stored content parts'
   boundaries; for a first build (nothing stored), from the keys the check
   sampled (about one every ``target_rows`` rows, so a range's task writes
   about one part; at most :data:`MAX_RANGES` ranges). A ``mapInArrow``
   tags each batch of the changes with the range of each key, Spark's
   shuffle brings each range's rows to one task, and the task applies them
   to the range's content parts only (``pipeline_apply_source_range``: it
   sorts them and cuts them into parts). The driver stitches the ranges'
   results into the source's new state (untouched parts kept by
   reference). No row of the change passes through the driver.

The changes are read twice (check, apply): cache a DataFrame that is
costly to compute.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, functions

from pds import _core
from pds.errors import SchemaMismatch
from pds.producers.changes import Changes
from pds.producers.pipeline import SourceTask, check_columns, check_delete_columns, conform_table
from pds.spark._job_group import tagged
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
from pds.spark._workers import explain_worker_failure

__all__ = ["SourceChange", "SparkSources", "frames"]

_UPSERTED, _DELETED, _COUNTED, _SAMPLED, _FAILED, _APPLIED = 0, 1, 2, 3, 4, 5

Frames = tuple[DataFrame | None, DataFrame | None]


class SourceChange(NamedTuple):
    """A source's change on Spark, checked: upserts and deletes (``None``
    where they hold no row; each read with the source's columns only),
    and the keys sampled from the upserts (JSON texts) to plan a first
    build's ranges."""

    upserts: DataFrame | None
    deletes: DataFrame | None
    samples: list[str]


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


def _columns(df: DataFrame, schema: pa.Schema) -> DataFrame:
    """*df* with *schema*'s columns only, in its order."""
    return df.select(*(functions.col(f"`{f.name}`") for f in schema))


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
            first = picked.where(functions.col(f"`{f.name}`").isNotNull()).select(f"`{f.name}`").limit(1).toArrow()
            conform_table(first if first.num_rows else empty, one, what)
            raise


class _Check:
    """One source's upserts or deletes checked in a task (no write): each
    batch conformed as locally; the rows counted; with *every*, keys
    sampled (each row with probability 1/*every*, whatever the input's
    partitioning). A failure is handed back as a row, not raised."""

    def __init__(self, view: str, schema: pa.Schema, what: str, kind: int, every: int | None) -> None:
        self.view, self.schema, self.what, self.kind, self.every = view, schema, what, kind, every

    def __call__(self, given: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = 0
        for b in given:
            try:
                t = conform_table(pa.Table.from_batches([b]), self.schema, self.what)
            except SchemaMismatch as e:
                yield out(_FAILED, self.kind, None, str(e))
                return
            assert t is not None
            rows += t.num_rows
            if self.every and t.num_rows:
                picked = pc.indices_nonzero(pc.less(pc.random(t.num_rows), 1.0 / self.every))
                if len(picked):
                    keys = t.take(picked).combine_chunks().to_batches()[0]
                    yield out(_SAMPLED, self.kind, None, _core.pipeline_key_samples(self.view, keys, 1))
        yield out(_COUNTED, self.kind, None, str(rows))


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
            t = conform_table(pa.Table.from_batches([b]), schema, f"source {self.name!r} {what}")
            assert t is not None
            for c in t.to_batches():
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


class SparkSources(SparkNodes):
    """The :data:`pds.producers.pipeline.SourceRunner` that applies source
    changes on Spark; :meth:`check` first (:attr:`stats`: per source, its
    planned and applied ranges)."""

    def _group(self, name: str) -> str:
        return f"pds-pipeline-{self.job}-{name}"

    def _check_rows(self, name: str, ups: DataFrame | None, dels: DataFrame | None) -> tuple[int, int, list[str]]:
        """The Spark job checking a source's rows: (upserted rows, deleted
        keys, key samples); ``SchemaMismatch`` as locally (deletes' first).
        Keys are sampled only for a source the pipeline (as last read)
        stores nothing of: a stored one's ranges follow its parts."""
        node = self.p._source_node(name)
        view = json.dumps(self.p._view(name, self.p._declared, {}))
        stored = ((self.p._manifest.get("nodes") or {}).get(name) or {}).get("content")
        every = None if stored else max(1, self.p._target_rows)
        checks = []
        if dels is not None:
            checks.append(
                _columns(dels, node.key).mapInArrow(
                    _Check(view, node.key, f"source {name!r} deletes", _DELETED, None), ROWS
                )
            )
        if ups is not None:
            schema = node.public_schema
            checks.append(
                _columns(ups, schema).mapInArrow(
                    _Check(view, schema, f"source {name!r} upserts", _UPSERTED, every), ROWS
                )
            )
        rows = self._run(name, "check", lambda: functools.reduce(DataFrame.union, checks).collect())
        failed = sorted((r["range"] != _DELETED, r["meta"]) for r in rows if r["kind"] == _FAILED)
        if failed:
            raise SchemaMismatch(failed[0][1])
        counts = {_UPSERTED: 0, _DELETED: 0}
        for r in rows:
            if r["kind"] == _COUNTED:
                counts[r["range"]] += int(r["meta"])
        samples = [r["meta"] for r in rows if r["kind"] == _SAMPLED]
        return counts[_UPSERTED], counts[_DELETED], samples

    def _check_both(self, name: str, ups: DataFrame, dels: DataFrame) -> None:
        """``ValueError`` as locally for a key both upserted and deleted
        (a Spark semi-join of the keys, stopped at the first)."""
        node = self.p._source_node(name)
        keys = node.key_names
        found = self._run(
            name,
            "check",
            lambda: _columns(ups, node.key).join(_columns(dels, node.key), on=keys, how="left_semi").limit(1).toArrow(),
        )
        if found.num_rows:
            one = conform_table(found, node.key, f"source {name!r} upserts")
            _core.pipeline_check_changes(keys, one, one)  # the local error and message

    def _run(self, name: str, what: str, job: Any) -> Any:
        """A check job (it writes nothing) under the source's job group."""
        try:
            with tagged(self.spark, self._group(name), f"pds.spark.update_pipeline {self.p.key!r} {what} {name!r}"):
                return job()
        except BaseException as exc:
            clear = explain_worker_failure(exc)
            if clear is not None:
                raise clear from exc
            raise

    def check(self, given: Mapping[str, Frames]) -> dict[str, SourceChange]:
        """Every source's changes checked as :meth:`pds.Pipeline.update`
        checks them, before any write: an unknown source, deletes with a
        column that is not a key column, a missing column, a type no value
        of which fits (on the driver, from the schemas, for every source
        before any Spark job); a null key, a value its column cannot hold
        exactly, a key both upserted and deleted (Spark jobs that write
        nothing). Sources whose changes hold no row are left out."""
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
            if ups is None and dels is None:
                continue
            upserted, deleted, samples = self._check_rows(name, ups, dels)
            ups = ups if upserted else None
            dels = dels if deleted else None
            if ups is not None and dels is not None:
                self._check_both(name, ups, dels)
            if ups is not None or dels is not None:
                checked[name] = SourceChange(
                    None if ups is None else _columns(ups, node.public_schema),
                    None if dels is None else _columns(dels, node.key),
                    samples,
                )
        return checked

    def __call__(self, task: SourceTask, created: list[str]) -> str:
        name = task.node.name
        task = task._replace(opts=self.opts(task.opts))
        change: SourceChange = task.change
        if (json.loads(task.view).get("state") or {}).get("content"):
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
        self.stats[name] = {"source_ranges": len(ranges), "applied_ranges": len(outputs)}
        return state_text
