"""What the benchmark scripts share about the machine: CPU accounting, waiting
for a quiet machine before timing, and the git state of the code measured."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

__all__ = ["Interference", "busy_seconds", "git_state", "tree_cpu_seconds", "wait_quiet"]


def busy_seconds() -> float:
    """CPU seconds spent by every process on the machine (all cores, not idle or iowait)."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0))


def tree_cpu_seconds() -> float:
    """CPU seconds of this process and every descendant: running ones, and the
    finished children each of them has waited for (a JVM's Python workers, say)."""
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


class Interference:
    """How much CPU other processes took while the benchmark ran (the machine has few cores)."""

    def __init__(self) -> None:
        self.busy0 = busy_seconds()
        self.ours0 = tree_cpu_seconds()
        self.t0 = time.monotonic()

    def summary(self) -> str:
        wall = max(time.monotonic() - self.t0, 1e-9)
        other = max(0.0, (busy_seconds() - self.busy0) - (tree_cpu_seconds() - self.ours0))
        return f"other processes used ~{other:,.0f} CPU-s during the run (~{other / wall:.2f} cores on average)"


def wait_quiet(max_seconds: float, log: Callable[[str], None], threshold: float = 0.15) -> str:
    """Wait (up to *max_seconds*) for a 5 s window with the machine under *threshold* CPU busy."""
    deadline = time.monotonic() + max_seconds
    while True:
        busy = psutil.cpu_percent(interval=5) / 100
        if busy < threshold:
            return f"machine {busy:.0%} busy before the start"
        if time.monotonic() > deadline:
            return f"machine still {busy:.0%} busy after waiting {max_seconds:.0f} s; started anyway"
        log(f"waiting for a quiet machine ({busy:.0%} busy)")


def git_state(repo: Path) -> str:
    """`` (git <short hash>[, N uncommitted paths])``, or ``""`` outside a git checkout."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
        if head.returncode == 0:
            changed = len([x for x in dirty.stdout.splitlines() if x.strip()])
            return f" (git {head.stdout.strip()}{f', {changed} uncommitted paths' if changed else ''})"
    return ""
