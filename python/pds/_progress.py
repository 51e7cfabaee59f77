"""Opt-in progress of long pds calls, on stderr.

A dataset write or read, a table compaction or vacuum, and a pipeline
update, rebuild, compaction or vacuum take ``progress=`` (keyword-only):
``True`` shows their progress, ``False`` does not, ``None`` (the default)
follows the environment variable ``PDS_PROGRESS`` (on for any value but
"", "0", "false", "no").

The call's Rust core counts its work in a :class:`pds._core.Progress`
(atomic counters it updates from its own threads, without the GIL); a
thread here reads them every :data:`REFRESH` seconds. What is counted:
rows written of the input's rows (a table; a stream's total is not known,
so only a count is shown), with parts and bytes; parts read of the
manifest's parts; rows rewritten of the live rows planned for a
compaction; objects deleted of those planned for a vacuum; a pipeline's
nodes done of its nodes, naming the one running. Each line also gives the
store requests the call's store handle has made since the call began and
the bytes they wrote and read (requests from other threads on the same
handle are included) and the time elapsed.

On a terminal the display is a live rich bar (a pulsing one when the total
is not known) that stays, completed, when the call returns. Elsewhere
(stderr a file or a pipe: Dagster, Spark, CI logs) it is plain lines
``pds: <call>: <counts>``, one every :data:`PLAIN_EVERY` seconds while
the call runs and one when it ends. Off, the cost is one environment
lookup per call: no counters are made and the core does not count.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from pds import _core

if TYPE_CHECKING:
    from rich.console import Console

#: The environment variable that turns progress on (any value but "", "0", "false", "no").
ENV = "PDS_PROGRESS"

#: Seconds between two readings of the counters (and redraws on a terminal).
REFRESH = 0.2

#: Seconds between two plain lines when stderr is not a terminal.
PLAIN_EVERY = 5.0

#: What ``done`` and ``total`` count, per phase of :class:`pds._core.Progress`.
_UNITS = {"writing": "rows", "reading": "parts", "compacting": "rows", "vacuuming": "objects", "steps": "steps"}


def enabled(progress: bool | None = None) -> bool:
    """Whether to show progress: *progress* if a bool, else whether
    ``PDS_PROGRESS`` asks for it. ``TypeError`` for anything else."""
    if progress is None:
        return os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no")
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None, got {type(progress).__name__}")
    return progress


def describe(requests: int, read: int, written: int) -> str:
    """A call's requests and the bytes they read and wrote, as the line shows them."""
    return f"{requests} requests, {_size(written)} written, {_size(read)} read"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def counted(reading: tuple[str, int, int | None, int, int, int]) -> str:
    """The counts of a :meth:`pds._core.Progress.now` reading as a line shows
    them (``""`` before the call has started counting)."""
    phase, done, total, parts, rows, nbytes = reading
    unit = _UNITS.get(phase)
    if unit is None:
        return ""
    said = f"{done:,}/{total:,} {unit}" if total is not None else f"{done:,} {unit}"
    if phase == "writing":
        said += f", {parts:,} parts, {_size(nbytes)}"
    elif phase == "reading":
        said += f", {rows:,} rows"
    return said


class Shown:
    """One call's progress: :attr:`counters` to hand to the core (``None``
    when progress is off) and :attr:`note`, what the call is on (a
    pipeline's node), shown after the counts."""

    def __init__(self, counters: _core.Progress | None) -> None:
        self.counters = counters
        self.note = ""

    def steps(self, names: Sequence[str]) -> Iterator[str]:
        """Yield *names*, counting one step done each time the caller asks
        for the next (a step whose body raises is not counted) and naming
        the step running in :attr:`note`."""
        if self.counters is not None:
            self.counters.start("steps", len(names))
        for name in names:
            self.note = name
            yield name
            if self.counters is not None:
                self.counters.add(1)
        self.note = ""


#: A :class:`Shown` that shows nothing (progress off).
OFF = Shown(None)


@contextlib.contextmanager
def shown(store: _core.RustStore | None, what: str, progress: bool | None = None) -> Iterator[Shown]:
    """Show the progress of the block, a call described by *what* on
    *store*, if :func:`enabled` (*progress*) says so; yield the
    :class:`Shown` whose counters the block passes to the core. Off (or
    without a Rust store handle), yields :data:`OFF` and shows nothing."""
    if store is None or not enabled(progress):
        yield OFF
        return
    from rich.console import Console

    s = Shown(_core.Progress())
    console = Console(stderr=True)
    with _live(store, what, s, console) if console.is_terminal else _plain(store, what, s):
        yield s


def _line(store: _core.RustStore, start: tuple[int, int, int], what: str, s: Shown) -> tuple[str, str]:
    """The description (*what* and the note) and the counts (the core's
    and the store's) of the line now."""
    assert s.counters is not None
    requests, read, written = store.counts()
    said = counted(s.counters.now())
    said = f"{said}; " if said else ""
    name = f"{what} ({s.note})" if s.note else what
    return name, said + describe(requests - start[0], read - start[1], written - start[2])


@contextlib.contextmanager
def _polled(tick: Callable[[], None], last: bool) -> Iterator[None]:
    """Run ``tick()`` every :data:`REFRESH` seconds in a thread until the
    block ends, then once more if *last*."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(REFRESH):
            tick()

    t = threading.Thread(target=loop, name="pds-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()
        if last:
            tick()


@contextlib.contextmanager
def _live(store: _core.RustStore, what: str, s: Shown, console: Console) -> Iterator[None]:
    """A rich bar on a terminal: a bar when the total is known, a pulsing
    one and a count when not."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    assert s.counters is not None
    counters = s.counters
    start = store.counts()
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, auto_refresh=False) as bar:
        task = bar.add_task(what, total=None, counts="")

        def tick(finished: bool = False) -> None:
            _, done, total, *_ = counters.now()
            name, counts = _line(store, start, what, s)
            if finished and total is None:
                total = done  # a count without a total: a full bar once it ends
            bar.update(task, description=name, total=total, completed=done, counts=counts)
            bar.refresh()

        with _polled(tick, last=False):
            yield
        tick(finished=True)


@contextlib.contextmanager
def _plain(store: _core.RustStore, what: str, s: Shown) -> Iterator[None]:
    """Plain lines ``pds: ...`` on stderr: one every :data:`PLAIN_EVERY`
    seconds, one at the end."""
    start = store.counts()
    began = time.monotonic()
    last = [began]

    def say(end: str = "") -> None:
        name, counts = _line(store, start, what, s)
        print(f"pds: {name}: {counts}{end}", file=sys.stderr, flush=True)

    def tick() -> None:
        now = time.monotonic()
        if now - last[0] >= PLAIN_EVERY:
            last[0] = now
            say(f" ({now - began:.0f} s)")

    ok = False
    try:
        with _polled(tick, last=False):
            yield
        ok = True
    finally:
        took = time.monotonic() - began
        say(f"; done in {took:.1f} s" if ok else f"; failed after {took:.1f} s")
