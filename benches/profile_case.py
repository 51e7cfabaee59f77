"""Run one (store, tool, workload) of compare.py in a loop, for a profiler to watch.

    py-spy record --native -o read.svg -- python benches/profile_case.py --store file --tool pds --workload read
    perf record -g -- python benches/profile_case.py --store memory --tool pds --workload write

The dataset is written once (untimed) before a read workload is looped.
``s3`` and ``s3-latency`` start SeaweedFS (and the latency proxy) like compare.py.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_data import make_table
from bench_tools import TOOLS, Layout, StoreSpec, make_tool, s3_server
from compare import BUCKET, TIMED_WORKLOADS, Proxy, _call, delta_file_size


def print_trace(trace: list[tuple[float, int, str]], start: float, end: float) -> None:
    """The last loop's requests, as sent by the client (before the proxy's delay)."""
    requests = [t for t in trace if not t[2].startswith("(")]
    connections = len(trace) - len(requests)
    print(f"last loop: {len(requests)} requests, {connections} new connections, {1000 * (end - start):.0f} ms")
    for when, conn, line in trace:
        print(f"  +{1000 * (when - start):7.1f} ms  conn {conn:3d}  {line}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", choices=("file", "memory", "s3", "s3-latency"), default="file")
    p.add_argument("--tool", choices=TOOLS, default="pds")
    p.add_argument("--workload", choices=TIMED_WORKLOADS, default="read")
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--rows-per-file", type=int, default=1_000_000)
    p.add_argument("--loops", type=int, default=5)
    p.add_argument("--delay-ms", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--trace",
        action="store_true",
        help="s3-latency only: run the proxy in a thread and print every HTTP request of the last loop",
    )
    a = p.parse_args(argv)
    if a.trace and a.store != "s3-latency":
        p.error("--trace needs --store s3-latency")
    table = make_table(a.rows, a.seed)
    layout = Layout(rows_per_file=a.rows_per_file, row_group_rows=a.rows_per_file)
    layout = Layout(layout.rows_per_file, layout.row_group_rows, delta_file_size(layout, a.seed))
    proxy: Proxy | None = None
    with tempfile.TemporaryDirectory(prefix="pds-profile-") as tmp, contextlib.ExitStack() as stack:
        if a.store in ("file", "memory"):
            spec = StoreSpec(a.store, str(Path(tmp) / "file"))
        else:
            sw = stack.enter_context(s3_server(Path(tmp), BUCKET))
            endpoint = sw.endpoint
            if a.store == "s3-latency":
                proxy = Proxy(sw.ports["s3"], a.delay_ms, "thread" if a.trace else "process", trace=a.trace)
                stack.callback(proxy.stop)
                endpoint = f"http://127.0.0.1:{proxy.port}"
            spec = StoreSpec(a.store, BUCKET, a.store, endpoint, sw.access_key, sw.secret_key, sw.region)
        tool = make_tool(a.tool, spec, layout)
        if a.workload != "write":
            tool.write(table, "ds")
        times = []
        trace = proxy.trace if proxy is not None else None
        start = time.monotonic()
        for i in range(a.loops):
            if trace is not None:
                trace.clear()
            start = time.monotonic()
            t0 = time.perf_counter()
            if a.workload == "write":
                tool.write(table, f"ds-{i}")
            else:
                _call(tool, a.workload, "ds", a.rows // 10)
            times.append(time.perf_counter() - t0)
        if trace is not None:
            print_trace(trace, start, time.monotonic())
        print(
            f"{a.store} {a.tool} {a.workload}: median {statistics.median(times):.3f} s over {a.loops}: "
            + " ".join(f"{t:.3f}" for t in times)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
