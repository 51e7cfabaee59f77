"""A stage's update split by key range: the phases every engine shares.

Spark's tasks (:mod:`pds.spark._pipeline_update`) and the local worker
processes (:mod:`pds.producers._workers`) run the same three phases over
the same Rust bindings; only how the phases travel and how their rows are
shuffled differs:

1. **map** (:func:`map_range`): one source-key range's stage run calls
   ``Produce`` on the range's changed source keys, rewrites the range's
   key-mapping parts and hands back the rows ``Produce`` emitted and the
   removed ``(source key, target key)`` pairs, each then tagged with the
   target-key range holding its target key (:func:`by_range`), and, for a
   stage whose key-mappings are derived from its leading key columns, the
   changed source keys themselves, each tagged with every target range
   its leading values span (:func:`by_prefix_span`); for a stage
   with no content yet, target keys are sampled (:func:`samples`) to plan
   the target ranges first.
2. **reduce** (:func:`reduce_range`): one target range's rows merged into
   its content parts (the derived keys' old rows found there as it goes:
   the content is read once), its update written.
3. **stitch** (``pipeline_stitch_stage``, by the caller): the ranges'
   parts make the stage's new state.

Every object a phase writes is named after the update's job id, so
:class:`JobObjects` finds (by a LIST of the node's folders) and removes
what a failed update or a failed task attempt wrote.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from remote_store import NotFound, RemoteStoreError, Store

from pds import _core
from pds.producers._tasks import StageTask
from pds.producers.produce import run_batched, run_rows

__all__ = [
    "MAX_RANGES",
    "JobObjects",
    "by_prefix_span",
    "by_range",
    "by_sorted_range",
    "map_range",
    "reduce_range",
    "sample",
    "samples",
    "state_files",
    "state_objects",
]

#: Key ranges per node phase at most (tasks; a task may take several).
MAX_RANGES = 64


def map_range(
    rust: _core.RustStore, root: str, task: StageTask, rng: str, job: str, *, stream: bool = False
) -> tuple[str, Any, list[pa.RecordBatch], list[pa.RecordBatch]]:
    """The map phase of *task* over the source-key range *rng* (JSON):
    ``Produce`` called on the range's changed keys; returns the result's
    JSON, the emitted rows (sorted by target key: a list of batches, in
    memory; with *stream*, a ``pyarrow.RecordBatchReader`` over the
    sort, within ``sort_budget``), the removed key-mapping pairs, and a
    derived stage's changed source keys (see :func:`by_prefix_span`).
    Objects it writes are named after *job*; nothing is committed."""
    run = _core.StageRun(
        rust, root, task.stage_view, task.source_views, rebuild=task.rebuild, range=rng, job=job, **task.opts
    )
    try:
        if task.node.batched:
            run_batched(task.node, run, len(task.node.sources))
        else:
            run_rows(task.node, run, len(task.node.sources), task.values)
        return run.finish_map(stream=stream)
    finally:
        run.close()


def samples(stage_view: str, emitted: Iterable[pa.RecordBatch], every: int) -> Iterator[str]:
    """One target key every *every* rows of a map phase's sorted output
    (JSON texts for ``pipeline_ranges_from_samples``); *emitted* is
    iterated once."""
    seen = 0
    for e in emitted:
        found = sample(stage_view, e, seen, every)
        if found is not None:
            yield found
        seen += e.num_rows


def sample(stage_view: str, batch: pa.RecordBatch, seen: int, every: int) -> str | None:
    """:func:`samples` of *batch*, which follows *seen* rows of the output
    (``None``: no sample falls in it)."""
    first = -seen % every
    if first >= batch.num_rows:
        return None
    return _core.pipeline_key_samples(stage_view, batch.slice(first), every)


def by_range(batch: pa.RecordBatch, view: str, ranges: Sequence[str]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """*batch*'s rows grouped by the range of *ranges* that holds their key:
    (range index, rows) pairs, nothing for an empty batch."""
    if batch.num_rows == 0:
        return
    if len(ranges) == 1:
        yield 0, batch
        return
    ids = pa.array(_core.pipeline_assign(view, list(ranges), batch), pa.int32())
    for rng in pc.unique(ids).to_pylist():
        yield int(rng), batch.filter(pc.equal(ids, rng))


def by_prefix_span(batch: pa.RecordBatch, view: str, ranges: Sequence[str]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """A derived stage's changed source keys (a map phase's fourth output)
    as (range index, keys) pairs: each key to every target range that may
    hold the stage's rows of it (those its leading values span), where the
    reduce finds and replaces them."""
    if batch.num_rows == 0:
        return
    spans = np.asarray(_core.pipeline_prefix_spans(view, list(ranges), batch), np.int64).reshape(-1, 2)
    for rng in range(int(spans[:, 0].min()), int(spans[:, 1].max()) + 1):
        mask = (spans[:, 0] <= rng) & (rng <= spans[:, 1])
        if mask.any():
            yield rng, batch.filter(pa.array(mask))


def by_sorted_range(batch: pa.RecordBatch, view: str, ranges: Sequence[str]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """:func:`by_range` for rows sorted by the stage's key (a map phase's
    emitted rows): each range's rows are a slice (no copy); a batch whose
    first and last rows fall in one range is not assigned row by row."""
    n = batch.num_rows
    if n == 0:
        return
    if len(ranges) == 1:
        yield 0, batch
        return
    ends = _core.pipeline_assign(view, list(ranges), batch.take([0, n - 1]))
    if ends[0] == ends[1]:
        yield int(ends[0]), batch
        return
    ids = np.asarray(_core.pipeline_assign(view, list(ranges), batch), np.int64)
    if (np.diff(ids) < 0).any():  # not sorted after all: filter
        yield from by_range(batch, view, ranges)
        return
    cuts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), n]
    for lo, hi in itertools.pairwise(cuts):
        yield int(ids[lo]), batch.slice(lo, hi - lo)


def reduce_range(
    rust: _core.RustStore,
    root: str,
    task: StageTask,
    target: str,
    emitted: Sequence[pa.RecordBatch] | pa.RecordBatchReader,
    removed: Sequence[pa.RecordBatch],
    job: str,
    *,
    clip: bool = False,
    derived: Sequence[pa.RecordBatch] = (),
) -> str:
    """The reduce phase of *task* over the target range *target*: its rows
    (a list of batches, or a ``pyarrow.RecordBatchReader`` read as the
    range's sort takes them: memory within ``sort_budget``) merged into its
    content parts; the result's JSON. Nothing is committed. *clip*: rows of
    other ranges among *emitted* and *removed* are dropped (else they are
    an error). *derived*: the changed source keys :func:`by_prefix_span`
    sent to this range."""
    rows = emitted if isinstance(emitted, pa.RecordBatchReader) else list(emitted)
    return _core.pipeline_reduce_range(
        rust,
        root,
        task.stage_view,
        target,
        rows,
        list(removed),
        job=job,
        clip=clip,
        derived=list(derived),
        **task.opts,
    )


def state_files(state: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every file record a node state names: its parts (content, key-mappings,
    update rows and deleted keys), each followed by its patches' files."""
    update = state.get("update") or {}
    for kind in (state.get("content"), state.get("mappings"), update.get("rows"), update.get("deleted")):
        for part in kind or []:
            yield part
            for patch in part.get("patches") or []:
                yield from (f for f in (patch.get("rows"), patch.get("deleted")) if f)


def state_objects(state: Mapping[str, Any]) -> set[str]:
    """Every object a node state references."""
    return {str(p["name"]) for p in state_files(state)}


class JobObjects:
    """The objects one update's split phases write under the pipeline at
    *key* of *store*: each is named starting with :attr:`job` (one id per
    update, shared by its source and stage runners)."""

    def __init__(self, store: Store, rust: _core.RustStore, key: str, job: str) -> None:
        self.store, self.rust, self.key, self.job = store, rust, key, job
        self.root = str(store.native_path(key))

    def _job_objects(self, node: str) -> list[str]:
        """Every object this job wrote for *node*, as keys of the Rust store
        (1 LIST per folder)."""
        found_all = []
        for folder in ("content", "mappings", "update"):
            prefix = f"{self.key}/nodes/{node}/{folder}"
            try:
                found = [str(f.path) for f in self.store.list_files(prefix, recursive=True)]
            except NotFound:
                continue
            found_all += [str(self.store.native_path(k)) for k in found if os.path.basename(k).startswith(self.job)]
        return found_all

    def _remove(self, keys: Sequence[str]) -> None:
        for k in keys:
            try:
                self.rust.delete(k)
            except RemoteStoreError:
                continue  # best effort: vacuum is the backstop

    def _keep(self, node: str, stitch: Callable[[], str], created: list[str]) -> str:
        """The node's new state (JSON) from *stitch*; the objects the job
        wrote for it that the state references appended to *created*, the
        others (failed and duplicate attempts') removed. If *stitch*
        fails, everything the job wrote for the node is removed."""
        try:
            state_text = stitch()
        except BaseException:
            self._remove(self._job_objects(node))
            raise
        referenced = {f"{self.root}/{k}" for k in state_objects(json.loads(state_text))}
        written = self._job_objects(node)
        self._remove([k for k in written if k not in referenced])
        created += [k for k in written if k in referenced]
        return state_text
