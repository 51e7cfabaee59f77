"""Opt-in live progress of long pds calls, on stderr with rich.

Set ``PDS_PROGRESS=1`` to turn it on. A dataset write or read, a table
compaction or vacuum, and a pipeline update then show a line that names the
call and its key and counts, live, the store requests it has made and the
bytes they wrote and read, with the time elapsed; the line is removed when
the call returns. What is shown is what the store handle counted (see
``RustStore.counts``): requests from other threads on the same store are
included, and work that needs no request (encoding, sorting) shows as
time only. Off (the default), the cost is one environment lookup per call.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from pds import _core

#: The environment variable that turns progress on (any value but "", "0", "false", "no").
ENV = "PDS_PROGRESS"

#: Seconds between two refreshes of the line.
REFRESH = 0.2


def enabled() -> bool:
    """Whether ``PDS_PROGRESS`` asks for progress."""
    return os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no")


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


@contextlib.contextmanager
def shown(store: _core.RustStore | None, what: str) -> Iterator[None]:
    """Show *what* with the requests *store* makes until the block ends, if
    :func:`enabled` (else nothing). A thread refreshes the line every
    :data:`REFRESH` seconds; it only reads counters (no I/O)."""
    if store is None or not enabled():
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    start = store.counts()
    done = threading.Event()
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what)

        def refresh() -> None:
            while not done.wait(REFRESH):
                requests, read, written = store.counts()
                said = describe(requests - start[0], read - start[1], written - start[2])
                bar.update(task, description=f"{what}: {said}")

        t = threading.Thread(target=refresh, name="pds-progress", daemon=True)
        t.start()
        try:
            yield
        finally:
            done.set()
            t.join()
