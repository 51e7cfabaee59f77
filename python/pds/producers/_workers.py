"""``Produce`` in local worker processes: a :class:`pds.Pipeline` update's
stages split by key range (``workers=`` on ``Pipeline.create``/``open``).

For each stage an update runs, :class:`LocalStages` cuts the changed
source keys into ranges (aligned with the stage's stored key-mapping
parts, else its first source's content parts; at most ``4 * workers``)
and runs the phases of :mod:`pds.producers._split` in a process pool:

1. **map**, one call per source-key range, in a worker: ``Produce`` on the
   range's changed keys; the range's key-mapping parts rewritten; the
   emitted rows, streamed from the run's external sort, and the removed
   pairs written by target-key range to Arrow IPC files (uncompressed) in
   the update's exchange folder. Only paths, row counts and sampled keys
   come back to this process. For a stage with no content yet, the map
   writes one file of its sorted output and samples target keys; once the
   target ranges are planned from the samples, a **split** call per map
   file (in a worker) cuts it by target range.
2. **reduce**, one call per touched target range, in a worker: the range's
   files, from every map call, streamed into the range's external sort
   and merged into its content parts.
3. **stitch**, in this process: the stage's new state; the version is
   committed once, as in the single-process update.

**Memory and disk.** No row passes through this process: it holds paths
and counts. A worker holds what the in-process engine holds (its sort
within ``sort_budget``, plus one batch per open file). The exchange folder
(``pds-exchange-*`` in the system temp directory, as the sort's spill
files) holds a stage's emitted rows as uncompressed Arrow between the
map and the reduce, each map's files removed by the reduce that read
them; the folder is removed when the update ends, whether it succeeds,
fails or is interrupted (and by the workers if this process is killed).

**When the pool is used** (:func:`pays`): for a row-form stage whose change
hands ``Produce`` at least :data:`MIN_ROWS` source rows over more than one
range. A batched stage, a smaller change or one within one range runs in
this process, as with ``workers=1``, which never starts a pool; so does
every stage of a ``memory://`` pipeline (worker processes cannot reach its
store).

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
import contextlib
import json
import multiprocessing
import os
import pickle
import select
import shutil
import subprocess
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import cloudpickle
import pyarrow as pa
from remote_store import Store

from pds import _core
from pds.backend import native_handle
from pds.producers._split import (
    MAX_RANGES,
    JobObjects,
    by_prefix_span,
    by_range,
    by_sorted_range,
    map_range,
    reduce_range,
    sample,
)
from pds.producers._tasks import StageDone, StageRunner, StageTask
from pds.producers.errors import ProduceError, produce_error

__all__ = ["MIN_ROWS", "START_METHOD", "LocalStages", "pays", "produce_rows", "worker_count"]

#: How worker processes start (see the module docs).
START_METHOD = "forkserver"
_PRELOAD = ["pds", "pyarrow", "cloudpickle"]

#: A row-form stage goes to the pool when its change hands ``Produce`` at
#: least this many source rows (estimated from the stored part counts;
#: see :func:`produce_rows`); smaller ones run in this process. Set high:
#: on 2 shared cores the pool did not win at 4M or 10M rows (the row form's
#: ``Produce`` at ~0.4 us a row is a small part of a build, and the fork
#: server's start, about a second, is paid once per process).
MIN_ROWS = 16_000_000

#: Files by target range: range index -> (path, rows) (``-1``: not planned yet).
Files = dict[int, tuple[str, int]]


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


def produce_rows(view: Mapping[str, Any], rebuild: bool) -> int:
    """The source rows a stage's run hands ``Produce`` from the source with
    engine *view*, estimated from its parts' row counts (no I/O): its
    whole content for a first build or rebuild, else its changed rows (a
    lower bound: a changed key's unchanged rows go too)."""
    if view.get("kind") == "merge":
        return sum(produce_rows(f, rebuild) for f in view.get("feeders", []))
    state = view.get("state") or {}
    update = state.get("update") or {}
    parts = state.get("content", []) if rebuild else [*update.get("rows", []), *update.get("deleted", [])]
    return sum(int(p.get("rows", 0)) for p in parts)


def pays(task: StageTask) -> bool:
    """Whether splitting *task* over worker processes pays: a row-form
    stage (its ``Produce`` is Python, per key, on one core) handed at least
    :data:`MIN_ROWS` rows. A batched stage runs in this process: its
    ``Produce`` is vectorised and the engine around it already uses every
    core, so the split's cost (its output sorted twice, in the map and the
    reduce, and exchanged through files) is not won back (measured: a
    4M-event build of ``benches/producers_compare.py``'s batched pipeline
    1.3x slower with two workers on two cores)."""
    if task.node.batched:
        return False
    rows = sum(produce_rows(json.loads(v), task.rebuild) for v in task.source_views)
    return rows >= MIN_ROWS


class _Spill:
    """Arrow IPC stream files, one per target range, named
    ``<prefix>-<range>.arrow``; opened on a range's first rows."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.writers: dict[int, tuple[str, pa.RecordBatchStreamWriter]] = {}
        self.rows: dict[int, int] = {}

    def write(self, i: int, batch: pa.RecordBatch) -> None:
        if i not in self.writers:
            path = f"{self.prefix}-{'all' if i < 0 else i}.arrow"
            self.writers[i] = (path, pa.ipc.new_stream(path, batch.schema))
            self.rows[i] = 0
        self.writers[i][1].write_batch(batch)
        self.rows[i] += batch.num_rows

    def close(self) -> Files:
        for _, w in self.writers.values():
            w.close()
        return {i: (path, self.rows[i]) for i, (path, _) in self.writers.items()}


def _read(paths: Iterable[str]) -> Iterator[pa.RecordBatch]:
    """The batches of the IPC stream files *paths*, in order (memory-mapped)."""
    for path in paths:
        with pa.memory_map(path) as source:
            yield from pa.ipc.open_stream(source)


def _reader(paths: Sequence[str]) -> pa.RecordBatchReader:
    with pa.memory_map(paths[0]) as source:
        schema = pa.ipc.open_stream(source).schema
    return pa.RecordBatchReader.from_batches(schema, _read(paths))


class _Phases:
    """One stage's map, split and reduce phases as a worker runs them
    (pickled once per phase). The store travels as its URL and options;
    rows travel through files in *folder*."""

    def __init__(
        self, store: Store, root: str, task: StageTask, targets: list[str] | None, job: str, folder: str
    ) -> None:
        self.store, self.root, self.task, self.targets, self.job = store, root, task, targets, job
        self.folder = folder

    def _rust(self) -> _core.RustStore:
        rust = native_handle(self.store)
        assert rust is not None
        return rust

    def _write(
        self,
        prefix: str,
        emitted: Iterable[pa.RecordBatch],
        removed: Iterable[pa.RecordBatch],
        derived: Iterable[pa.RecordBatch] = (),
    ) -> tuple[Files, Files, Files]:
        """*emitted* (sorted by target key) and *removed* written by target
        range (or whole, with no targets planned yet), and *derived* (a
        derived stage's changed source keys: only where something is
        stored, so the targets are planned) to every range it spans."""
        view, targets = self.task.stage_view, self.targets
        out = (_Spill(f"{prefix}-e"), _Spill(f"{prefix}-r"), _Spill(f"{prefix}-d"))
        try:
            given = ((out[0], emitted, by_sorted_range), (out[1], removed, by_range), (out[2], derived, by_prefix_span))
            for spill, batches, split in given:
                for b in batches:
                    if targets is None and split is by_prefix_span:
                        raise RuntimeError("pds: a stage with nothing stored handed on changed keys to look up")
                    for i, part in split(b, view, targets) if targets is not None else [(-1, b)]:
                        if part.num_rows:
                            spill.write(i, part)
        finally:
            files = (out[0].close(), out[1].close(), out[2].close())
        return files

    def map(self, m: int, rng: str) -> tuple[str, Files, Files, list[str], Files]:
        """(result JSON, emitted rows' and removed pairs' files by target
        range, sampled target keys, derived keys' files by target range)."""
        t = self.task
        meta, emitted, removed, derived = map_range(self._rust(), self.root, t, rng, self.job, stream=True)
        found: list[str] = []
        if self.targets is None:
            every = max(1, int(t.opts["target_rows"]))

            def sampled(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                seen = 0
                for b in batches:
                    key = sample(t.stage_view, b, seen, every)
                    if key is not None:
                        found.append(key)
                    seen += b.num_rows
                    yield b

            emitted = sampled(emitted)
        e, r, d = self._write(os.path.join(self.folder, f"m{m}"), emitted, removed, derived)
        return meta, e, r, found, d

    def split(self, m: int, emitted: Files, removed: Files) -> tuple[Files, Files]:
        """A map call's whole files (written before the target ranges were
        planned) cut by target range; the whole files removed."""
        whole = [[f[0]] if f else [] for f in (emitted.get(-1), removed.get(-1))]
        e, r, _ = self._write(os.path.join(self.folder, f"s{m}"), _read(whole[0]), _read(whole[1]))
        for p in (*whole[0], *whole[1]):
            os.unlink(p)
        return e, r

    def reduce(self, i: int, emitted: list[str], removed: list[str], derived: list[str]) -> str:
        """Target range *i*'s rows (the files *emitted*, streamed) merged;
        its files removed once merged."""
        assert self.targets is not None
        rows: pa.RecordBatchReader | list[pa.RecordBatch] = _reader(emitted) if emitted else []
        meta = reduce_range(
            self._rust(),
            self.root,
            self.task,
            self.targets[i],
            rows,
            list(_read(removed)),
            self.job,
            derived=list(_read(derived)),
        )
        for p in (*emitted, *removed, *derived):
            os.unlink(p)
        return meta


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


def _exit_with(parent: int, folder: str) -> None:
    """A worker's initializer: exit as soon as the process that started the
    pool (*parent*) ends, even if it was killed (a worker blocked on the
    pool's queue would otherwise outlive it), removing the update's
    exchange *folder* (which that process would have removed)."""

    def gone() -> None:
        # Exit at once (a write still running would land after the parent's
        # death); the folder is removed by a process of its own.
        with contextlib.suppress(OSError):
            subprocess.Popen(["rm", "-rf", "--", folder], start_new_session=True, close_fds=True)
        os._exit(1)

    def watch() -> None:
        try:
            fd = os.pidfd_open(parent)
        except (AttributeError, OSError):  # no pidfd (not Linux): poll
            while True:
                time.sleep(1)
                try:
                    os.kill(parent, 0)
                except ProcessLookupError:
                    gone()
                except PermissionError:
                    continue
        select.select([fd], [], [])
        gone()

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
    """The :data:`pds.producers._tasks.StageRunner` of an update with
    ``workers > 1``: each stage split by key range over a process pool (see
    the module docs). Use as a context manager: leaving it shuts the pool
    down and removes the exchange folder. :attr:`stats`: per stage run
    split, its map, reduce and target ranges and the rows and bytes it
    exchanged through files."""

    def __init__(self, store: Store, native: _core.RustStore, key: str, workers: int, here: StageRunner) -> None:
        super().__init__(store, native, key, f"lw{uuid.uuid4().hex[:12]}")
        self.here, self.workers = here, workers
        self.max_ranges = min(MAX_RANGES, 4 * workers)
        self.stats: dict[str, dict[str, int]] = {}
        self._pool: cf.ProcessPoolExecutor | None = None
        self._folder: str | None = None

    @staticmethod
    def usable(native: _core.RustStore, workers: int) -> bool:
        """Whether worker processes can run a pipeline's stages on *native*:
        more than one worker, and a store they reach (not ``memory://``)."""
        return workers > 1 and native.scheme != "memory"

    def __enter__(self) -> LocalStages:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def folder(self) -> str:
        """The update's exchange folder (created on first use)."""
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix=f"pds-exchange-{self.job}-")
        return self._folder

    def close(self) -> None:
        """Shut the pool down (its workers exit) and remove the exchange
        folder; idempotent."""
        pool, self._pool = self._pool, None
        try:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        finally:
            folder, self._folder = self._folder, None
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context(START_METHOD)
            ctx.set_forkserver_preload(_PRELOAD)
            self._pool = cf.ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=ctx,
                initializer=_exit_with,
                initargs=(os.getpid(), self.folder),
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
        if not pays(task):
            return self.here(task, created)
        sources = _core.pipeline_stage_ranges(
            task.stage_view, task.source_views, "source", self.max_ranges, touched_only=not task.rebuild
        )
        if len(sources) < 2:  # the change in one range: no pool start-up
            return self.here(task, created)
        name = task.node.name
        planned = bool((json.loads(task.stage_view).get("state") or {}).get("content"))
        targets = (
            _core.pipeline_stage_ranges(task.stage_view, task.source_views, "target", self.max_ranges)
            if planned
            else None
        )
        folder = os.path.join(self.folder, name)
        os.mkdir(folder)
        try:
            phases = _Phases(self.store, self.root, task, targets, self.job, folder)
            maps = self._run(phases, "map", list(enumerate(sources)))
            if targets is None:
                found = [s for m in maps for s in m[3]]
                targets = _core.pipeline_ranges_from_samples(task.stage_view, found, self.max_ranges)
                phases = _Phases(self.store, self.root, task, targets, self.job, folder)
                cut = self._run(phases, "split", [(i, m[1], m[2]) for i, m in enumerate(maps)])
                maps = [(m[0], *c, m[3], m[4]) for m, c in zip(maps, cut, strict=True)]
            emitted: dict[int, list[str]] = {}
            removed: dict[int, list[str]] = {}
            derived: dict[int, list[str]] = {}
            rows = 0
            for m in maps:
                for into, given in ((emitted, m[1]), (removed, m[2]), (derived, m[4])):
                    for i, (path, n) in given.items():
                        into.setdefault(i, []).append(path)
                        rows += n
            every = (*emitted.values(), *removed.values(), *derived.values())
            spilled = sum(os.path.getsize(p) for paths in every for p in paths)
            touched = sorted(set(emitted) | set(removed) | set(derived))
            calls = [(i, emitted.get(i, []), removed.get(i, []), derived.get(i, [])) for i in touched]
            reduces = self._run(phases, "reduce", calls)
        except BaseException:
            self._remove(self._job_objects(name))
            raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        metas = [str(m[0]) for m in maps]
        state_text = self._keep(
            name,
            lambda: _core.pipeline_stitch_stage(self.rust, self.root, task.stage_view, metas, reduces, **task.opts),
            created,
        )
        self.stats[name] = {
            "map_ranges": len(sources),
            "reduce_ranges": len(reduces),
            "target_ranges": len(targets),
            "exchanged_rows": rows,
            "exchanged_bytes": spilled,
        }
        rows_in = sum(int(json.loads(m)["rows_in"]) for m in metas)
        rows_out = sum(int(json.loads(m)["rows_out"]) for m in metas)
        return StageDone(state_text, rows_in, rows_out)
