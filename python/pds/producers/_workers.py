"""``Produce`` in local worker processes: a :class:`pds.Pipeline` update's
stages split by key range (``workers=`` on ``Pipeline.create``/``open``).

For each stage an update runs, :class:`LocalStages` cuts the changed
source keys into ranges (aligned with the stage's stored key-mapping
parts, else its first source's content parts; at most ``4 * workers``)
and runs the phases of :mod:`pds.producers._ranges` in a process pool:

1. **map**, one call per source-key range, in a worker: ``Produce`` on the
   range's changed keys; the range's key-mapping parts rewritten; the
   emitted rows and removed pairs grouped by target-key range (for a stage
   with no content yet, target keys sampled instead, and the rows grouped
   in this process once the target ranges are planned from the samples).
2. **shuffle**, in this process: each target range's rows, from every map
   call, put together (Arrow batches, pickled as Arrow buffers, no IPC
   re-encoding).
3. **reduce**, one call per touched target range, in a worker: the range's
   rows merged into its content parts.
4. **stitch**, in this process: the stage's new state; the version is
   committed once, as in the single-process update.

A stage whose changed keys fall in one range runs in this process, as
with ``workers=1``, which never starts a pool; so does every stage of a
``memory://`` pipeline (worker processes cannot reach its store).

**Start method: ``forkserver``.** The parent holds a running tokio runtime
(the Rust store's threads) and pyarrow's thread pools when it starts
workers; ``fork`` would copy a multi-threaded process whose locks other
threads may hold (pds re-creates its runtime after a fork, but a lock held
in the allocator or in pyarrow is copied locked). The fork server is a
fresh single-threaded interpreter (started once per parent process, with
pds, pyarrow and cloudpickle preloaded), from which each worker forks in a
few milliseconds. As with any ``spawn``/``forkserver`` pool, the main
module is imported again in each worker: guard a script's work with
``if __name__ == "__main__":``.

**Functions** travel by cloudpickle (as on Spark): one pickle of the stage
(its ``Produce`` and views) per phase, unpickled once per worker. Errors
come back as the single-process path raises them: a ``Produce`` that
raises is ``pds.ProduceError`` of the same class, stage and key (the first
failing range in key order wins, as the first failing key would).

**Pool lifetime:** one pool per update, created when the first stage needs
it and shut down when the update ends (its workers exit; a killed worker
breaks only that update's pool; a worker exits when the process that
started it ends, even if that one was killed). Every object the workers write is named
after the update's job id; if anything fails, the update removes what its
workers wrote for the stage and what earlier stages wrote, and commits
nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import pickle
import select
import threading
import time
import traceback
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle
import pyarrow as pa
from remote_store import Store

from pds import _core
from pds.backend import native_handle
from pds.producers._ranges import MAX_RANGES, JobObjects, by_range, map_range, reduce_range, samples
from pds.producers.errors import ProduceError, produce_error

if TYPE_CHECKING:
    from pds.producers.pipeline import Pipeline, StageDone, StageTask

__all__ = ["START_METHOD", "LocalStages", "worker_count"]

#: How worker processes start (see the module docs).
START_METHOD = "forkserver"
_PRELOAD = ["pds", "pyarrow", "cloudpickle"]

#: Rows grouped by target range: range index -> batches (``-1``: not planned yet).
Grouped = dict[int, list[pa.RecordBatch]]


def worker_count(workers: object) -> int:
    """*workers* checked (``None``: the machine's core count); ``ValueError``
    below 1 (``TypeError`` for a non-int)."""
    if workers is None:
        return os.cpu_count() or 1
    if not isinstance(workers, int) or isinstance(workers, bool):
        raise TypeError(f"workers must be an int >= 1 or None, got {workers!r}")
    if workers < 1:
        raise ValueError(f"workers must be an int >= 1 or None (the core count), got {workers!r}")
    return workers


def _grouped(batches: Sequence[pa.RecordBatch], view: str, targets: Sequence[str] | None) -> Grouped:
    out: Grouped = {}
    for b in batches:
        if targets is None:
            if b.num_rows:
                out.setdefault(-1, []).append(b)
            continue
        for i, part in by_range(b, view, targets):
            out.setdefault(i, []).append(part)
    return out


class _Phases:
    """One stage's map and reduce phases as a worker runs them (pickled once
    per phase). The store travels as its URL and options."""

    def __init__(self, store: Store, root: str, task: StageTask, targets: list[str] | None, job: str) -> None:
        self.store, self.root, self.task, self.targets, self.job = store, root, task, targets, job

    def _rust(self) -> _core.RustStore:
        rust = native_handle(self.store)
        assert rust is not None
        return rust

    def map(self, rng: str) -> tuple[str, Grouped, Grouped, list[str]]:
        """(result JSON, emitted rows and removed pairs by target range, samples)."""
        t = self.task
        meta, emitted, removed = map_range(self._rust(), self.root, t, rng, self.job)
        found = [] if self.targets else list(samples(t.stage_view, emitted, max(1, int(t.opts["target_rows"]))))
        return meta, _grouped(emitted, t.stage_view, self.targets), _grouped(removed, t.stage_view, self.targets), found

    def reduce(self, i: int, emitted: list[pa.RecordBatch], removed: list[pa.RecordBatch]) -> str:
        assert self.targets is not None
        return reduce_range(self._rust(), self.root, self.task, self.targets[i], emitted, removed, self.job)


#: In a worker: the phases last unpickled, by their pickle.
_LOADED: dict[bytes, _Phases] = {}


def _portable(e: BaseException) -> BaseException:
    """*e*, or a ``RuntimeError`` naming it if it does not survive pickling;
    the worker's traceback added as a note."""
    e.add_note("".join(["in a pds worker process:\n", *traceback.format_exception(e)]).rstrip())
    try:
        pickle.loads(cloudpickle.dumps(e))
    except Exception:  # noqa: BLE001 - any exception that does not travel is named instead
        made = RuntimeError(f"{type(e).__name__}: {e}")
        made.__notes__ = e.__notes__
        return made
    return e


def _exit_with(parent: int) -> None:
    """A worker's initializer: exit as soon as the process that started the
    pool (*parent*) ends, even if it was killed (a worker blocked on the
    pool's queue would otherwise outlive it)."""

    def watch() -> None:
        try:
            fd = os.pidfd_open(parent)
        except (AttributeError, OSError):  # no pidfd (not Linux): poll
            while True:
                time.sleep(1)
                try:
                    os.kill(parent, 0)
                except ProcessLookupError:
                    os._exit(1)
                except PermissionError:
                    continue
        select.select([fd], [], [])
        os._exit(1)

    threading.Thread(target=watch, name="pds-parent-watch", daemon=True).start()


def _call(blob: bytes, method: str, *args: Any) -> tuple[bool, Any]:
    """A worker's entry point: ``(True, result)`` of the phases' *method*,
    or ``(False, (stage, key, cause))`` for a ``ProduceError`` and
    ``(False, error)`` for any other error (never raised: a dynamic
    ``ProduceError[...]`` class does not pickle)."""
    try:
        phases = _LOADED.get(blob)
        if phases is None:
            _LOADED.clear()
            phases = _LOADED[blob] = pickle.loads(blob)
        return True, getattr(phases, method)(*args)
    except ProduceError as e:
        cause = e.__cause__ if e.__cause__ is not None else Exception(str(e))
        return False, (getattr(e, "stage", ""), getattr(e, "key", None), _portable(cause))
    except BaseException as e:  # noqa: BLE001 - handed back to the parent, which raises it
        return False, _portable(e)


def _raise(error: Any) -> None:
    if isinstance(error, tuple):
        stage, key, cause = error
        raise produce_error(cause, stage, key) from cause
    raise error


class LocalStages(JobObjects):
    """The :data:`pds.producers.pipeline.StageRunner` of an update with
    ``workers > 1``: each stage split by key range over a process pool (see
    the module docs). Use as a context manager: leaving it shuts the pool
    down. :attr:`stats`: per stage run split, its map, reduce and target
    ranges."""

    def __init__(self, p: Pipeline, workers: int) -> None:
        super().__init__(p.store, p._native, p.key, f"lw{uuid.uuid4().hex[:12]}")
        self.p, self.workers = p, workers
        self.max_ranges = min(MAX_RANGES, 4 * workers)
        self.stats: dict[str, dict[str, int]] = {}
        self._pool: cf.ProcessPoolExecutor | None = None

    @staticmethod
    def usable(p: Pipeline, workers: int) -> bool:
        """Whether worker processes can run *p*'s stages: more than one
        worker, and a store they reach (not ``memory://``)."""
        return workers > 1 and p._native.scheme != "memory"

    def __enter__(self) -> LocalStages:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut the pool down (its workers exit); idempotent."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context(START_METHOD)
            ctx.set_forkserver_preload(_PRELOAD)
            self._pool = cf.ProcessPoolExecutor(
                max_workers=self.workers, mp_context=ctx, initializer=_exit_with, initargs=(os.getpid(),)
            )
        return self._pool

    def _run(self, phases: _Phases, method: str, calls: Sequence[tuple[Any, ...]]) -> list[Any]:
        """*method* of *phases* over *calls* in the pool; the results in order.
        On an error, the calls after the first failing one are cancelled and
        every call still running is waited for (none writes after the
        caller's cleanup); the first failing call's error (in order) is
        raised. A broken pool (a worker killed) is shut down and raised."""
        blob = cloudpickle.dumps(phases)
        pool = self._executor()
        futures = [pool.submit(_call, blob, method, *args) for args in calls]
        failed: int | None = None
        try:
            for done in cf.as_completed(futures):
                if done.cancelled():  # after a failing call: never ran
                    continue
                ok, _ = done.result()
                if not ok:
                    i = futures.index(done)
                    failed = i if failed is None else min(failed, i)
                    for f in futures[i + 1 :]:
                        f.cancel()
        except BaseException:
            for f in futures:
                f.cancel()
            cf.wait(futures)
            self.close()
            raise
        cf.wait(futures)
        if failed is not None:
            _raise(futures[failed].result()[1])
        return [f.result()[1] for f in futures]

    def __call__(self, task: StageTask, created: list[str]) -> StageDone:
        from pds.producers.pipeline import StageDone

        sources = _core.pipeline_stage_ranges(
            task.stage_view, task.source_views, "source", self.max_ranges, touched_only=not task.rebuild
        )
        if len(sources) < 2:  # small work: no pool start-up
            return self.p._run_stage_here(task, created)
        name = task.node.name
        planned = bool((json.loads(task.stage_view).get("state") or {}).get("content"))
        targets = (
            _core.pipeline_stage_ranges(task.stage_view, task.source_views, "target", self.max_ranges)
            if planned
            else None
        )
        try:
            maps = self._run(_Phases(self.store, self.root, task, targets, self.job), "map", [(r,) for r in sources])
            if targets is None:
                found = [s for m in maps for s in m[3]]
                targets = _core.pipeline_ranges_from_samples(task.stage_view, found, self.max_ranges)
                maps = [
                    (
                        m[0],
                        _grouped(m[1].get(-1, []), task.stage_view, targets),
                        _grouped(m[2].get(-1, []), task.stage_view, targets),
                    )
                    for m in maps
                ]
            emitted: Grouped = {}
            removed: Grouped = {}
            for m in maps:
                for into, given in ((emitted, m[1]), (removed, m[2])):
                    for i, parts in given.items():
                        into.setdefault(i, []).extend(parts)
            touched = sorted(set(emitted) | set(removed))
            calls = [(i, emitted.get(i, []), removed.get(i, [])) for i in touched]
            reduces = self._run(_Phases(self.store, self.root, task, targets, self.job), "reduce", calls)
        except BaseException:
            self._remove(self._job_objects(name))
            raise
        metas = [str(m[0]) for m in maps]
        state_text = self._keep(
            name,
            lambda: _core.pipeline_stitch_stage(self.rust, self.root, task.stage_view, metas, reduces, **task.opts),
            created,
        )
        self.stats[name] = {"map_ranges": len(sources), "reduce_ranges": len(reduces), "target_ranges": len(targets)}
        rows_in = sum(int(json.loads(m)["rows_in"]) for m in metas)
        rows_out = sum(int(json.loads(m)["rows_out"]) for m in metas)
        return StageDone(state_text, rows_in, rows_out)
