"""pds against its peers, on the same data, in one process and one run.

Generates one deterministic table and times pds,
``remote_store.ext.parquet`` (on remote_store's own backend and on pds's),
``pyarrow.dataset`` and ``deltalake`` on ``file://``, ``memory://``, ``s3://``
(a SeaweedFS this script starts) and ``s3://`` through a proxy that adds
10 ms each way. Workloads: write, full read, one-column read, filtered read,
and peak RSS while writing a 2 GiB stream (each tool in a fresh process).
Every read is checked (row counts always; content against the source table
on the first run) so a wrong fast result is never reported.

Prints a Markdown table of medians and ratios (baseline time / pds time:
above 1 means pds is faster) and writes it to ``--out``.

    python benches/compare.py                 # the full run (4M rows, 3 repeats)
    python benches/compare.py --quick         # a smoke run (200k rows, 1 repeat, 128 MiB RSS input)
    python benches/compare.py --stores file,s3 --workloads write,read
    # a 2 GiB numeric stream into 16M-row parts of 1M-row groups, 3 processes a tool:
    python benches/compare.py --stores file --workloads rss --tools pds,pyarrow --rss-data numeric \
        --rows-per-file 16777216 --row-group-rows 1048576 --rss-repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import gc
import http.client
import io
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from bench_data import make_batch, make_table, stream_rows_for
from bench_tools import (
    TOOL_LABELS,
    TOOLS,
    Layout,
    NotApplicable,
    Pending,
    StoreSpec,
    Tool,
    make_tool,
    s3_server,
    timed,
)
from machine import Interference, busy_seconds, git_state, wait_quiet

from latency_proxy import LatencyProxy

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STORES = ("file", "memory", "s3", "s3-latency")
TIMED_WORKLOADS = ("write", "read", "read-1col", "read-filter", "stream")
WORKLOADS = (*TIMED_WORKLOADS, "rss")
DEFAULT_WORKLOADS = ("write", "read", "read-1col", "read-filter", "rss")
WORKLOAD_LABELS = {
    "write": "write",
    "read": "full read",
    "read-1col": "1-column read",
    "read-filter": "filtered read",
    "stream": "streaming read",
    "rss": "peak RSS, streaming write",
}
BASELINES = tuple(t for t in TOOLS if t != "pds")
RSS_SAMPLE_SECONDS = 0.020
RSS_DATA = {
    "mixed": "the table's data, 65,536-row batches",
    "numeric": "1,048,576-row batches of two random int64 and two random float64 columns",
}
BUCKET = "pds-bench"
RSS_MEMORY_NOTE = "not measured on memory://, where the written data itself stays in the measured process"


class Wrong(Exception):
    """A result failed verification."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- results -------------------------------------------------------------------


@dataclass
class Cell:
    """One tool's outcome on one (store, workload)."""

    status: str = "ok"  # ok | n/a | pending | error | wrong
    samples: list[float] = field(default_factory=list)  # seconds, or MiB for rss
    cpu: list[float] = field(default_factory=list)  # CPU seconds of the benchmark process per sample
    server_cpu: list[float] = field(default_factory=list)  # CPU seconds of SeaweedFS + the proxy per sample
    note: str = ""
    seconds: float | None = None  # rss rows: how long the write took

    @property
    def value(self) -> float | None:
        if self.status != "ok" or not self.samples:
            return None
        return statistics.median(self.samples)

    def add(self, sample: Sample) -> None:
        self.samples.append(sample.seconds)
        self.cpu.append(sample.cpu)
        self.server_cpu.append(sample.server_cpu)

    def fail(self, status: str, note: str) -> None:
        self.status, self.note = status, " ".join(note.split())[:300]
        self.samples.clear()
        self.cpu.clear()
        self.server_cpu.clear()

    @property
    def cpu_value(self) -> float | None:
        return statistics.median(self.cpu) if self.status == "ok" and self.cpu else None

    @property
    def server_cpu_value(self) -> float | None:
        return statistics.median(self.server_cpu) if self.status == "ok" and self.server_cpu else None


@dataclass
class Results:
    cells: dict[tuple[str, str], dict[str, Cell]] = field(default_factory=dict)
    layouts: dict[str, dict[str, int]] = field(default_factory=dict)  # store -> tool -> files written
    reruns: int = 0  # samples taken again because other processes competed for the cores
    contaminated: int = 0  # samples kept although others still competed (reruns exhausted)

    def cell(self, store: str, workload: str, tool: str) -> Cell:
        return self.cells.setdefault((store, workload), {}).setdefault(tool, Cell())

    def failures(self) -> list[str]:
        return [
            f"{store}/{workload}/{tool}: {cell.status}: {cell.note}"
            for (store, workload), row in self.cells.items()
            for tool, cell in row.items()
            if cell.status in ("wrong", "error")
        ]


# -- settings --------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    rows: int
    repeat: int
    latency_repeat: int
    stores: tuple[str, ...]
    workloads: tuple[str, ...]
    tools: tuple[str, ...]
    layout: Layout
    rss_bytes: int
    rss_data: str
    rss_repeat: int
    delay_ms: float
    seed: int
    proxy_mode: str
    out: Path | None
    wait_quiet: float
    gate_seconds: float
    max_other_cores: float
    reruns: int

    @property
    def filter_bound(self) -> int:
        return self.rows // 10

    def repeats_for(self, store: str) -> int:
        return self.latency_repeat if store == "s3-latency" else self.repeat


def _csv(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        unknown = [x for x in items if x not in allowed]
        if unknown or not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(allowed)}")
        return items

    return parse


def parse_args(argv: list[str]) -> Settings:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, help="rows in the table (default 4,000,000; --quick: 200,000)")
    p.add_argument("--repeat", type=int, help="runs per measurement, median reported (default 3; --quick: 1)")
    p.add_argument("--latency-repeat", type=int, help="runs per measurement on s3-latency (default: --repeat)")
    p.add_argument("--stores", type=_csv(STORES), default=STORES, help=f"subset of {','.join(STORES)}")
    p.add_argument(
        "--workloads", type=_csv(WORKLOADS), default=DEFAULT_WORKLOADS, help=f"subset of {','.join(WORKLOADS)}"
    )
    p.add_argument("--tools", type=_csv(TOOLS), default=TOOLS, help=f"subset of {','.join(TOOLS)} (pds is needed)")
    p.add_argument("--rows-per-file", type=int, help="rows per part file (default 1,000,000; --quick: rows/4)")
    p.add_argument(
        "--row-group-rows", type=int, help="rows per row group (default: --rows-per-file, one row group per file)"
    )
    p.add_argument("--rss-mib", type=int, help="Arrow size of the RSS workload's stream (default 2048; --quick: 128)")
    p.add_argument(
        "--rss-data",
        choices=("mixed", "numeric"),
        default="mixed",
        help="the RSS stream: the table's data in 65,536-row batches (default), or 1,048,576-row batches of "
        "two random int64 and two random float64 columns",
    )
    p.add_argument("--rss-repeat", type=int, default=1, help="fresh processes per tool for RSS, median reported")
    p.add_argument("--delay-ms", type=float, default=10.0, help="one-way latency of s3-latency (default 10)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--proxy",
        choices=("process", "thread"),
        default="process",
        help="run the latency proxy in its own process (default: keeps it off the measured process's GIL) "
        "or in a thread of this one",
    )
    p.add_argument("--quick", action="store_true", help="a smoke run: small table, 1 repeat, 128 MiB RSS input")
    p.add_argument(
        "--out", type=Path, help="Markdown output (default benches/results.md; --quick: benches/results-quick.md)"
    )
    p.add_argument("--no-out", action="store_true", help="print only")
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="SECONDS",
        help="first wait up to this long for the machine to be idle (other jobs skew a 2-core box)",
    )
    p.add_argument(
        "--gate-seconds",
        type=float,
        default=20.0,
        help="before each timed operation, wait up to this long for the machine to go idle (default 20; 0: off)",
    )
    p.add_argument(
        "--max-other-cores",
        type=float,
        default=0.25,
        help="rerun a sample if other processes took more than this many cores during it (default 0.25)",
    )
    p.add_argument("--reruns", type=int, default=3, help="reruns allowed per sample (default 3; 0: off)")
    a = p.parse_args(argv)
    if "pds" not in a.tools:
        p.error("--tools must include pds (every ratio is against it)")

    def pick(value: int | None, quick: int, full: int) -> int:
        return value if value is not None else (quick if a.quick else full)

    rows = pick(a.rows, 200_000, 4_000_000)
    repeat = pick(a.repeat, 1, 3)
    per_file = pick(a.rows_per_file, max(1, rows // 4), 1_000_000)
    rss_mib = pick(a.rss_mib, 128, 2048)
    latency_repeat = pick(a.latency_repeat, repeat, repeat)
    if min(rows, repeat, per_file, rss_mib, latency_repeat, a.rss_repeat) < 1:
        p.error("--rows, --repeat, --latency-repeat, --rows-per-file, --rss-mib and --rss-repeat must be positive")
    out = a.out or HERE / ("results-quick.md" if a.quick else "results.md")
    return Settings(
        rows=rows,
        repeat=repeat,
        latency_repeat=latency_repeat,
        stores=a.stores,
        workloads=a.workloads,
        tools=tuple(t for t in TOOLS if t in a.tools),
        layout=Layout(rows_per_file=per_file, row_group_rows=a.row_group_rows or per_file),
        rss_bytes=rss_mib * 2**20,
        rss_data=a.rss_data,
        rss_repeat=a.rss_repeat,
        delay_ms=a.delay_ms,
        seed=a.seed,
        proxy_mode=a.proxy,
        out=None if a.no_out else out,
        wait_quiet=a.wait_quiet,
        gate_seconds=a.gate_seconds,
        max_other_cores=a.max_other_cores,
        reruns=a.reruns,
    )


# -- verification ------------------------------------------------------------------


def _normalised(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """*table* in *schema*'s column order and types, sorted by id."""
    if table.column_names != schema.names and sorted(table.column_names) != sorted(schema.names):
        raise Wrong(f"columns {table.column_names}, expected {schema.names}")
    table = table.select(schema.names)
    try:
        table = table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise Wrong(f"schema {table.schema} does not cast to {schema}: {exc}") from exc
    ids = table.column("id")
    if len(ids) > 1 and not pc.all(pc.greater(ids.slice(1), ids.slice(0, len(ids) - 1))).as_py():
        table = table.take(pc.sort_indices(ids))
    return table


class Truth:
    """What every read must return, from the source table."""

    def __init__(self, table: pa.Table, bound: int) -> None:
        self.table = table
        self.rows = table.num_rows
        self.bound = bound
        self.filtered = table.filter(pc.field("id") < bound)

    def check(self, workload: str, out: Any, full: bool) -> None:
        """Raise Wrong unless *out* is right; *full* also compares every value."""
        if workload == "stream":
            if out != self.rows:
                raise Wrong(f"streamed {out} rows, expected {self.rows}")
            return
        assert isinstance(out, pa.Table)
        if workload == "read-1col":
            if out.column_names != ["id"] or out.num_rows != self.rows:
                raise Wrong(f"got columns {out.column_names} x {out.num_rows} rows, expected ['id'] x {self.rows}")
            expected = self.table.select(["id"])
        elif workload == "read-filter":
            expected = self.filtered
        else:
            expected = self.table
        if out.num_rows != expected.num_rows:
            raise Wrong(f"{out.num_rows} rows, expected {expected.num_rows}")
        if full and not _normalised(out, expected.schema).equals(expected):
            raise Wrong("values differ from the source table")


# -- SeaweedFS and the proxy -----------------------------------------------------


class Proxy:
    """The latency proxy, in its own process (default) or a thread of this one."""

    def __init__(self, target_port: int, delay_ms: float, mode: str, *, trace: bool = False) -> None:
        self.mode = mode
        self._thread_proxy: LatencyProxy | None = None
        self._proc: subprocess.Popen[str] | None = None
        self.pid: int | None = None
        if mode == "thread":
            self._thread_proxy = LatencyProxy("127.0.0.1", target_port, delay_ms=delay_ms, trace=trace)
            self.port = self._thread_proxy.start_in_thread()
            return
        if trace:
            raise ValueError("request tracing needs the proxy in a thread")
        cmd = [sys.executable, str(HERE / "latency_proxy.py"), "--target", f"127.0.0.1:{target_port}"]
        cmd += ["--delay-ms", str(delay_ms), "--exit-on-stdin-eof"]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"latency proxy did not start: {line!r}")
        self.port = int(line.split()[2].rpartition(":")[2])
        self.pid = self._proc.pid

    @property
    def trace(self) -> list[tuple[float, int, str]] | None:
        """Request lines seen so far, when started with trace=True."""
        return self._thread_proxy.stats.trace if self._thread_proxy is not None else None

    def round_trip_ms(self, endpoint_port: int) -> tuple[float, float]:
        """Best round trip of a tiny HTTP request on one kept-alive connection: (direct, proxied)."""

        def best(port: int) -> float:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            times = []
            try:
                for _ in range(5):
                    t0 = time.perf_counter()
                    conn.request("HEAD", "/")
                    conn.getresponse().read()
                    times.append(time.perf_counter() - t0)
            finally:
                conn.close()
            return min(times[1:]) * 1000

        return best(endpoint_port), best(self.port)

    def stop(self) -> None:
        if self._thread_proxy is not None:
            self._thread_proxy.stop()
        if self._proc is not None:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)


# -- the timed workloads ---------------------------------------------------------------


def _call(tool: Tool, workload: str, key: str, bound: int) -> Any:
    if workload == "read":
        return tool.read(key)
    if workload == "read-1col":
        return tool.read(key, columns=["id"])
    if workload == "read-filter":
        return tool.read_filtered(key, bound)
    if workload == "stream":
        return tool.stream_rows(key)
    raise ValueError(workload)


def _helpers_cpu(helpers: Sequence[psutil.Process]) -> float:
    total = 0.0
    for proc in helpers:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system
    return total


@dataclass
class Sample:
    seconds: float
    cpu: float  # this process, all threads
    server_cpu: float  # SeaweedFS and the proxy process
    other_cores: float  # CPU that every other process on the machine took, per second of the operation
    result: Any
    other_cpu: float = 0.0  # the same in CPU seconds

    def disturbed(self, max_cores: float) -> bool:
        """Others took more than *max_cores* (with 30 ms of slack for the kernel's 10 ms CPU accounting)."""
        return self.other_cpu > max(max_cores * self.seconds, 0.03)

    def __str__(self) -> str:
        return (
            f"{self.seconds:7.3f} s ({self.cpu:5.2f} CPU-s here, {self.server_cpu:5.2f} server, "
            f"others {self.other_cores:4.2f} cores)"
        )


class Meter:
    """Times operations and tells whether anything else on the machine competed for the cores.

    Before each operation it waits (up to ``gate_seconds``) for the machine to
    be idle; afterwards it computes how much CPU *other* processes took during
    the operation: all busy CPU time minus this process's minus the
    helpers' (SeaweedFS, the proxy). On a 2-core box a concurrent compile or
    test run would otherwise decide the result.
    """

    def __init__(self, gate_seconds: float, budget_seconds: float = 600.0) -> None:
        self.gate_seconds = gate_seconds
        self.budget_seconds = budget_seconds  # all the run's waiting: a box that never idles costs at most this

    def wait_idle(self, busy_below: float = 0.15, window: float = 0.25) -> None:
        start = time.monotonic()
        deadline = start + min(self.gate_seconds, self.budget_seconds)
        while time.monotonic() < deadline and psutil.cpu_percent(interval=window) / 100 >= busy_below:
            pass
        self.budget_seconds = max(0.0, self.budget_seconds - (time.monotonic() - start))

    def run(self, helpers: Sequence[psutil.Process], fn: Callable[..., Any], *args: Any) -> Sample:
        """Time fn(*args); *helpers* are the server processes working for it (SeaweedFS, the proxy)."""
        if self.gate_seconds > 0:
            self.wait_idle()
        busy0, helper0 = busy_seconds(), _helpers_cpu(helpers)
        seconds, cpu, result = timed(fn, *args)
        server = _helpers_cpu(helpers) - helper0
        other = max(0.0, busy_seconds() - busy0 - cpu - server)
        return Sample(seconds, cpu, server, other / max(seconds, 1e-9), result, other)


def rotated(tools: dict[str, Tool], r: int) -> list[tuple[str, Tool]]:
    """The tools in turn, starting one further along on each repeat, so none is always first."""
    items = list(tools.items())
    k = r % len(items) if items else 0
    return items[k:] + items[:k]


def warm_up(tools: dict[str, Tool], table: pa.Table) -> None:
    """One small untimed write and read per tool: connection pools, lazy imports, and SeaweedFS's
    first volume for the bucket are set up before any timing (errors surface in the timed runs)."""
    sample = table.slice(0, min(table.num_rows, 10_000))
    for tool in tools.values():
        with contextlib.suppress(Exception):
            tool.write(sample, "warm-up")
            tool.read("warm-up")
            tool.delete("warm-up")


def run_store(
    settings: Settings,
    spec: StoreSpec,
    table: pa.Table,
    truth: Truth,
    results: Results,
    meter: Meter,
    helpers: Sequence[psutil.Process] = (),
) -> None:
    """Every timed workload on one store; each repeat runs every tool once, in turn.

    *helpers* are the server-side processes (SeaweedFS, the proxy) whose CPU
    time is recorded next to the benchmark process's. A sample during which
    other processes took more than ``settings.max_other_cores`` is run again
    (at most ``settings.reruns`` times), whatever the tool.
    """
    store = spec.kind

    def measure(fn: Callable[..., Any], *args: Any, before_rerun: Callable[[], None] | None = None) -> Sample:
        for attempt in range(settings.reruns + 1):
            sample = meter.run(helpers, fn, *args)
            if not sample.disturbed(settings.max_other_cores):
                return sample
            if attempt == settings.reruns:
                results.contaminated += 1
                return sample
            results.reruns += 1
            log(f"  (rerun: other processes took {sample.other_cores:.2f} cores)")
            if before_rerun is not None:
                before_rerun()
        raise AssertionError("unreachable")

    timed_workloads = [w for w in TIMED_WORKLOADS if w in settings.workloads]
    if not timed_workloads:
        return
    repeat = settings.repeats_for(store)
    tools: dict[str, Tool] = {}
    for name in settings.tools:
        try:
            tools[name] = make_tool(name, spec, settings.layout)
        except NotApplicable as exc:
            for w in timed_workloads:
                results.cell(store, w, name).fail("n/a", str(exc))
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            for w in timed_workloads:
                results.cell(store, w, name).fail("error", f"setup: {type(exc).__name__}: {exc}")

    warm_up(tools, table)

    # Writes: fresh key each run; ds-0 stays for the reads.
    written: dict[str, Tool] = {}
    for r in range(repeat if "write" in settings.workloads else 1):
        for name, tool in rotated(tools, r):
            key = f"ds-{r}"
            cell = results.cell(store, "write", name)
            if cell.status != "ok":
                continue
            gc.collect()
            try:
                sample = measure(tool.write, table, key, before_rerun=functools.partial(tool.delete, key))
                reported = sample.result
                counted = tool.count_rows(key)
                if (reported is not None and reported != truth.rows) or counted != truth.rows:
                    raise Wrong(f"wrote {reported} / counted {counted} rows, expected {truth.rows}")
            except Wrong as exc:
                cell.fail("wrong", str(exc))
                continue
            except Exception as exc:  # noqa: BLE001
                cell.fail("error", f"{type(exc).__name__}: {exc}")
                continue
            cell.add(sample)
            log(f"  {store:<10} write       {name:<8} run {r + 1}: {sample}")
            try:
                if r == 0:
                    written[name] = tool
                    results.layouts.setdefault(store, {})[name] = tool.part_count(key)
                else:
                    tool.delete(key)  # keep memory and disk use flat
            except Exception as exc:  # noqa: BLE001 - bookkeeping only; the timing stands
                log(f"  {store} {name}: could not list or delete {key}: {exc}")
    if "write" not in settings.workloads:
        results.cells.pop((store, "write"), None)
    for name in tools:
        if name not in written:
            for w in timed_workloads:
                if w != "write" and results.cell(store, w, name).status == "ok":
                    results.cell(store, w, name).fail("error", "no dataset: the write failed")

    # Reads of ds-0; the first run of each is checked value by value.
    filtered_outputs: dict[str, pa.Table] = {}
    for workload in (w for w in timed_workloads if w != "write"):
        for r in range(repeat):
            for name, tool in rotated(written, r):
                cell = results.cell(store, workload, name)
                if cell.status != "ok":
                    continue
                gc.collect()
                try:
                    sample = measure(_call, tool, workload, "ds-0", truth.bound)
                    out = sample.result
                    sample.result = None
                    truth.check(workload, out, full=r == 0)
                except Pending as exc:
                    cell.fail("pending", str(exc))
                    continue
                except NotApplicable as exc:
                    cell.fail("n/a", str(exc))
                    continue
                except Wrong as exc:
                    cell.fail("wrong", str(exc))
                    continue
                except Exception as exc:  # noqa: BLE001
                    cell.fail("error", f"{type(exc).__name__}: {exc}")
                    continue
                cell.add(sample)
                log(f"  {store:<10} {workload:<11} {name:<8} run {r + 1}: {sample}")
                if workload == "read-filter" and r == 0 and name in ("pds", "pyarrow"):
                    filtered_outputs[name] = _normalised(out, truth.filtered.schema)
                del out
    if len(filtered_outputs) == 2 and not filtered_outputs["pds"].equals(filtered_outputs["pyarrow"]):
        results.cell(store, "read-filter", "pds").fail("wrong", "differs from pyarrow.dataset's filtered read")
    filtered_outputs.clear()
    for tool in tools.values():
        tool.close()
    tools.clear()
    written.clear()
    gc.collect()


# -- peak RSS ------------------------------------------------------------------------


def measure_rss(settings: Settings, spec: StoreSpec, tool: str, rows: int, key: str) -> Cell:
    """Peak RSS above the post-import baseline of a fresh process writing *rows* streamed rows."""
    cell = Cell()
    request = {
        "tool": tool,
        "store": spec.to_json(),
        "layout": asdict(settings.layout),
        "rows": rows,
        "seed": settings.seed,
        "key": key,
        "data": settings.rss_data,
    }
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "rss_child.py"), json.dumps(request)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=HERE,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        peak = [0]
        stop = threading.Event()
        try:
            first = proc.stdout.readline().strip()
            if first != "READY":
                status = "n/a" if first.startswith("NA ") else "error"
                cell.fail(status, first.partition(" ")[2] or _tail(err))
                return cell
            ps = psutil.Process(proc.pid)
            baseline = ps.memory_info().rss
            peak[0] = baseline

            def sample() -> None:
                while not stop.is_set():
                    with contextlib.suppress(psutil.Error):
                        peak[0] = max(peak[0], ps.memory_info().rss)
                    stop.wait(RSS_SAMPLE_SECONDS)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            proc.stdin.write("GO\n")
            proc.stdin.flush()
            done = proc.stdout.readline().strip()
            stop.set()
            sampler.join()
            if not done.startswith("DONE "):
                cell.fail("error", done.partition(" ")[2] or _tail(err))
                return cell
            counted = proc.stdout.readline().strip()
            if not counted.startswith("ROWS "):
                cell.fail("error", f"counting rows: {_tail(err)}")
                return cell
            info = json.loads(counted[5:])
            if info["rows"] != rows:
                cell.fail("wrong", f"dataset has {info['rows']} rows, expected {rows}")
                return cell
            cell.samples.append((peak[0] - baseline) / 2**20)
            cell.seconds = json.loads(done[5:])["seconds"]
            return cell
        finally:
            stop.set()
            proc.stdin.close()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _tail(err: Any, chars: int = 300) -> str:
    err.seek(0)
    return err.read()[-chars:] or "(no output)"


def run_rss(settings: Settings, spec: StoreSpec, results: Results) -> None:
    """Each tool's peak RSS, in --rss-repeat fresh processes each, the tools
    taking turns in an order that flips every run; the cell is the median."""
    store = spec.kind
    if store == "memory":  # see RSS_MEMORY_NOTE
        return
    rows = stream_rows_for(settings.rss_bytes, settings.seed, settings.rss_data)
    cells = results.cells.setdefault((store, "rss"), {})
    seconds: dict[str, list[float]] = {}
    for rep in range(settings.rss_repeat):
        order = settings.tools if rep % 2 == 0 else tuple(reversed(settings.tools))
        for name in order:
            if name in cells and cells[name].status != "ok":
                continue
            one = measure_rss(settings, spec, name, rows, key=f"rss-{name}-{rep}")
            cell = cells.setdefault(name, Cell())
            if one.status != "ok":
                cell.fail(one.status, one.note)
                log(f"  {store:<10} rss         {name:<8}: {one.status}: {one.note}")
                continue
            cell.samples += one.samples
            seconds.setdefault(name, []).append(one.seconds or 0.0)
            cell.seconds = statistics.median(seconds[name])
            log(f"  {store:<10} rss         {name:<8}: {one.samples[0]:7.0f} MiB over baseline ({one.seconds:.1f} s)")


# -- report ------------------------------------------------------------------------


def _fmt_value(cell: Cell | None, workload: str) -> str:
    if cell is None:
        return "-"
    v = cell.value
    if v is None:
        return cell.status
    if workload == "rss":
        return f"{v:,.0f} MiB ({cell.seconds:.0f} s)" if cell.seconds is not None else f"{v:,.0f} MiB"
    return f"{v:.3f} s"


def ratio(row: dict[str, Cell], baseline: str) -> float | None:
    """baseline / pds: >1 means pds is faster (or, for RSS, smaller)."""
    p = row.get("pds")
    b = row.get(baseline)
    if p is None or b is None or p.value is None or b.value is None or p.value <= 0:
        return None
    return b.value / p.value


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


@dataclass
class Target:
    name: str
    stores: tuple[str, ...]
    workload: str
    baseline: str
    minimum: float


TARGETS = (
    Target("Local write >= 1.5x vs remote_store.ext.parquet", ("file", "memory"), "write", "rs", 1.5),
    Target("Local full read >= 1.5x vs remote_store.ext.parquet", ("file", "memory"), "read", "rs", 1.5),
    Target("S3 + 10 ms write >= 3x vs remote_store.ext.parquet", ("s3-latency",), "write", "rs", 3.0),
    Target("S3 + 10 ms full read >= 3x vs remote_store.ext.parquet", ("s3-latency",), "read", "rs", 3.0),
    Target("S3 + 10 ms 1-column read >= 5x vs remote_store.ext.parquet", ("s3-latency",), "read-1col", "rs", 5.0),
)


def target_lines(settings: Settings, results: Results) -> list[str]:
    lines = ["| target | measured | met? |", "|---|---|---|"]
    for t in TARGETS:
        for store in t.stores:
            row = results.cells.get((store, t.workload))
            r = ratio(row, t.baseline) if row else None
            if row is None:
                continue
            verdict = "n/a" if r is None else ("yes" if r >= t.minimum else "**no**")
            lines.append(f"| {t.name} ({store}) | {_fmt_ratio(r)} | {verdict} |")
    slower: list[str] = []
    compared = 0
    for (store, workload), row in results.cells.items():
        if workload == "rss":
            continue
        for baseline in ("pyarrow", "delta"):
            r = ratio(row, baseline)
            if r is None:
                continue
            compared += 1
            if r < 1.0:
                slower.append(f"{store}/{workload} vs {TOOL_LABELS[baseline]} {r:.2f}x")
    if compared:
        verdict = "yes" if not slower else "**no**"
        detail = "; ".join(slower) if slower else f"all {compared} comparisons >= 1.00x"
        lines.append(f"| pds no slower than pyarrow.dataset or deltalake | {detail} | {verdict} |")
    limit = 512
    for (store, workload), row in results.cells.items():
        p = row.get("pds")
        if workload != "rss" or p is None:
            continue
        v = p.value
        verdict = "n/a" if v is None else ("yes" if v <= limit else "**no**")
        shown = f"{v:,.0f} MiB over baseline" if v is not None else p.status
        lines.append(
            f"| Peak RSS streaming {settings.rss_bytes / 2**30:g} GiB <= baseline + {limit} MiB ({store}) | "
            f"{shown} | {verdict} |"
        )
    return lines


def machine_facts() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cores": str(os.cpu_count()),
        "cpu": cpu,
        "ram": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def versions() -> dict[str, str]:
    import pds

    out = {"pds": pds.__version__ + git_state(REPO)}
    for dist in ("pyarrow", "deltalake", "remote-store", "s3fs", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def render(
    settings: Settings,
    results: Results,
    command: str,
    started: dt.datetime,
    runtime: float,
    table_info: str,
    extras: list[str],
) -> str:
    facts = machine_facts()
    vers = versions()
    rss_gib = settings.rss_bytes / 2**30
    lines = [
        "## pds vs its peers (benches/compare.py)",
        "",
        f"- Command: `{command}`",
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}; runtime {runtime / 60:.1f} min",
        f"- Machine: {facts['cores']} cores ({facts['cpu']}), {facts['ram']} RAM, {facts['os']}, "
        f"Python {facts['python']}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()),
        f"- Data: {table_info}",
        f"- Layout asked of every tool: {settings.layout.rows_per_file:,} rows per file, row groups of "
        f"{settings.layout.row_group_rows:,} rows, zstd level 1"
        + (
            f" (deltalake splits by size: target_file_size={settings.layout.delta_target_file_size:,} B)"
            if settings.layout.delta_target_file_size
            else ""
        ),
        f"- Time cells: median of {settings.repeat} run{'s' if settings.repeat > 1 else ''}"
        + (f" ({settings.latency_repeat} on s3-latency)" if settings.latency_repeat != settings.repeat else "")
        + "; every write goes to a fresh key; the tools take turns in an order that rotates each run, after one "
        "small untimed write and read each (warm-up). ratio = baseline time / pds time: above 1 means pds is faster.",
        f"- Filtered read: `id < {settings.filter_bound:,}` (10% of rows); pds and pyarrow.dataset and deltalake "
        "filter in the reader, remote_store.ext.parquet reads everything and then filters in pyarrow.",
        f"- Peak RSS: a fresh process per tool writes a {rss_gib:g} GiB RecordBatchReader generated batch by "
        f"batch ({RSS_DATA[settings.rss_data]}); the cell is peak RSS (sampled every "
        f"{RSS_SAMPLE_SECONDS * 1000:.0f} ms) minus the process's RSS after imports, the median of "
        f"{settings.rss_repeat} run{'s' if settings.rss_repeat > 1 else ''} each, with the write's duration; "
        "ratio = baseline MiB / pds MiB. "
        "remote_store.ext.parquet takes only a Table, so its input is materialised first; " + RSS_MEMORY_NOTE + ".",
        *extras,
        "",
    ]
    header = ["store", "workload", TOOL_LABELS["pds"]]
    for b in BASELINES:
        if b in settings.tools:
            header += [TOOL_LABELS[b], "ratio"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|")
    for store in settings.stores:
        for workload in WORKLOADS:
            row = results.cells.get((store, workload))
            if row is None:
                continue
            cells = [store, WORKLOAD_LABELS[workload], _fmt_value(row.get("pds"), workload)]
            for b in BASELINES:
                if b in settings.tools:
                    cells += [_fmt_value(row.get(b), workload), _fmt_ratio(ratio(row, b))]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if results.layouts:
        parts = "; ".join(
            f"{store}: " + ", ".join(f"{TOOL_LABELS[t]} {n}" for t, n in layout.items())
            for store, layout in results.layouts.items()
        )
        lines += [f"Files written per dataset: {parts}.", ""]
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for (store, workload), row in results.cells.items():
        for tool, cell in row.items():
            if cell.status != "ok":
                grouped.setdefault((tool, cell.status, cell.note), []).append(f"{store} {WORKLOAD_LABELS[workload]}")
    if grouped:
        lines += ["Cells without a number:", ""]
        for (tool, status, note), where in grouped.items():
            lines.append(f"- {TOOL_LABELS[tool]}, {status} ({'; '.join(where)}): {note}")
        lines.append("")
    lines += ["### Targets (issue B)", "", *target_lines(settings, results), ""]
    lines += cpu_table(settings, results)
    return "\n".join(lines)


def cpu_table(settings: Settings, results: Results) -> list[str]:
    """Median CPU seconds per timed operation: where wall time went, whatever else ran on the box."""
    tools = [t for t in TOOLS if t in settings.tools]
    lines = [
        "### CPU time per operation",
        "",
        "Median CPU seconds (user + system, all threads) of the benchmark process per operation; on the S3 stores, "
        "(+x) is what SeaweedFS and the latency proxy (when it runs in its own process) spent meanwhile, on the "
        "same cores. With 2 cores, wall time is at best the sum / 2.",
        "",
        "| store | workload | " + " | ".join(TOOL_LABELS[t] for t in tools) + " |",
        "|---|---|" + "---:|" * len(tools),
    ]
    for store in settings.stores:
        for workload in TIMED_WORKLOADS:
            row = results.cells.get((store, workload))
            if row is None:
                continue
            cells = []
            for t in tools:
                cell = row.get(t)
                v = cell.cpu_value if cell else None
                server = cell.server_cpu_value if cell and store.startswith("s3") else None
                text = "-" if v is None else f"{v:.2f}"
                cells.append(text if server is None else f"{text} (+{server:.2f})")
            lines.append(f"| {store} | {WORKLOAD_LABELS[workload]} | " + " | ".join(cells) + " |")
    return [*lines, ""]


# -- main ----------------------------------------------------------------------------


def delta_file_size(layout: Layout, seed: int) -> int:
    """Bytes of one full part (rows_per_file rows) as zstd-1 Parquet, +3%, so deltalake splits like the others."""
    sink = io.BytesIO()
    part = pa.Table.from_batches([make_batch(0, layout.rows_per_file, seed)])
    pq.write_table(part, sink, compression="zstd", compression_level=1, row_group_size=layout.row_group_rows)
    return int(sink.tell() * 1.03)


def main(argv: list[str]) -> int:
    settings = parse_args(argv)
    command = shlex.join(["python", os.path.relpath(__file__, Path.cwd()), *argv])
    log(f"$ {command}")
    quiet = wait_quiet(settings.wait_quiet, log) if settings.wait_quiet > 0 else ""
    started = dt.datetime.now(dt.UTC)
    t_start = time.perf_counter()
    interference = Interference()
    meter = Meter(settings.gate_seconds)
    t0 = time.perf_counter()
    table = make_table(settings.rows, settings.seed)
    generated = time.perf_counter() - t0
    settings = replace(
        settings,
        layout=replace(settings.layout, delta_target_file_size=delta_file_size(settings.layout, settings.seed)),
    )
    truth = Truth(table, settings.filter_bound)
    table_info = (
        f"{settings.rows:,} rows, {table.nbytes / 2**20:,.0f} MiB in Arrow: int64 id (ascending), timestamp[us], "
        f"50-value string, float64, 32-char random hex string; seed {settings.seed}; generated in "
        f"{generated:.1f} s"
    )
    log(f"table: {table_info}")
    results = Results()
    extras: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pds-compare-") as tmp:
        workdir = Path(tmp)
        specs: list[StoreSpec] = []
        helpers: dict[str, list[psutil.Process]] = {}
        for store in settings.stores:
            if store == "file":
                specs.append(StoreSpec("file", str(workdir / "file")))
            elif store == "memory":
                specs.append(StoreSpec("memory", ""))
        with contextlib.ExitStack() as stack:
            if any(s.startswith("s3") for s in settings.stores):
                sw = stack.enter_context(s3_server(workdir, BUCKET))
                weed = [p for p in psutil.Process().children() if p.cmdline()[:1] == [sw.weed_binary]]
                helpers["s3"] = helpers["s3-latency"] = weed
                extras.append(f"- S3: SeaweedFS ({Path(sw.weed_binary).name}) on 127.0.0.1, started by this script")
                creds = {"access_key": sw.access_key, "secret_key": sw.secret_key, "region": sw.region}
                if "s3" in settings.stores:
                    specs.append(StoreSpec("s3", BUCKET, prefix="s3", endpoint=sw.endpoint, **creds))
                if "s3-latency" in settings.stores:
                    proxy = Proxy(sw.ports["s3"], settings.delay_ms, settings.proxy_mode)
                    stack.callback(proxy.stop)
                    if proxy.pid is not None:
                        helpers["s3-latency"] = [*weed, psutil.Process(proxy.pid)]
                    direct, proxied = proxy.round_trip_ms(sw.ports["s3"])
                    extras.append(
                        f"- s3-latency: the same SeaweedFS behind benches/latency_proxy.py ({settings.delay_ms:g} ms "
                        f"each way, in a {settings.proxy_mode}); one HTTP round trip: {direct:.1f} ms direct, "
                        f"{proxied:.1f} ms through the proxy"
                    )
                    endpoint = f"http://127.0.0.1:{proxy.port}"
                    specs.append(StoreSpec("s3-latency", BUCKET, prefix="s3-latency", endpoint=endpoint, **creds))
            specs.sort(key=lambda s: settings.stores.index(s.kind))
            for spec in specs:
                log(f"[{spec.kind}]")
                run_store(settings, spec, table, truth, results, meter, helpers.get(spec.kind, []))
                if "rss" in settings.workloads:
                    run_rss(settings, spec, results)
    runtime = time.perf_counter() - t_start
    extras.append(f"- Other load: {interference.summary()}" + (f"; {quiet}" if quiet else ""))
    extras.append(
        f"- Interference control: before each timed operation the script waits (up to {settings.gate_seconds:g} s, "
        f"{meter.budget_seconds:.0f} s of the run's 600 s waiting budget left at the end) "
        f"for an idle machine, and reruns a sample (up to {settings.reruns} times) if other processes took more "
        f"than {settings.max_other_cores:g} cores during it: {results.reruns} reruns; {results.contaminated} "
        "samples kept after the last rerun was still disturbed"
    )
    report = render(settings, results, command, started, runtime, table_info, extras)
    print(report)
    if settings.out is not None:
        settings.out.write_text(report + "\n")
        log(f"wrote {settings.out}")
    log(f"runtime: {runtime / 60:.1f} min")
    failures = results.failures()
    if failures:
        log("failures:\n  " + "\n  ".join(failures))
    # A wrong result fails the run; a tool that errors is reported in the table.
    wrong = any(cell.status == "wrong" for row in results.cells.values() for cell in row.values())
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
