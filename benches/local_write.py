"""Local-folder write: pds against remote_store.ext.parquet, each in fresh processes.

Usage::

    python benches/local_write.py [--rounds 3] [--reps 4] [--rows 4000000]
        [--build NAME=PYTHONPATH ...]

Each round starts one process per contender, in turn: it builds the benchmark's
mixed table (``bench_data.make_table``), writes it ``--reps`` times to a fresh
folder (1M rows per part and per row group, zstd level 1), deleting it and
calling ``sync`` after each write so that the page cache's writeback does not
land in the next one, and reports each write's seconds and CPU seconds. The
first write of each process (thread pools and allocator warming up) is left
out. ``--build NAME=DIR`` adds pds imported from ``DIR`` (an unpacked wheel),
to compare two builds side by side. Medians are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(tool: str, rows: int, reps: int, root: str) -> None:
    """Write the table *reps* times with *tool* (``bench_tools``' contenders on a
    file store under *root*); print one JSON line per write."""
    sys.path.insert(0, str(HERE))
    from bench_data import make_table
    from bench_tools import Layout, PdsTool, RemoteStoreTool, StoreSpec

    table = make_table(rows, 42)
    spec, layout = StoreSpec("file", root), Layout(rows_per_file=1_000_000, row_group_rows=1_000_000)
    contender = PdsTool(spec, layout) if tool == "pds" else RemoteStoreTool(spec, layout)
    # Which package this process imported (a --build swap shows here).
    print(json.dumps({"module": sys.modules[type(contender.ds).__module__].__file__}), flush=True)
    for rep in range(reps):
        cpu, wall = time.process_time(), time.perf_counter()
        contender.write(table, f"k{rep}")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        contender.delete(f"k{rep}")
        os.sync()
        print(json.dumps({"rep": rep, "seconds": wall, "cpu": cpu}), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=4, help="writes per process (the first is a warm-up)")
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--build", action="append", default=[], help="NAME=DIR: pds imported from DIR too")
    p.add_argument("--child", nargs=3, metavar=("TOOL", "ROWS", "REPS"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), int(a.child[2]), os.environ["LOCAL_WRITE_ROOT"])
        return 0
    if a.reps < 2:
        p.error("--reps must be at least 2 (the first write is a warm-up)")
    contenders: list[tuple[str, str, str | None]] = [("pds", "pds", None)]
    for spec in a.build:
        name, _, path = spec.partition("=")
        if not name or not path:
            p.error(f"--build takes NAME=DIR, got {spec!r}")
        contenders.append((name, "pds", path))
    contenders.append(("remote_store.ext.parquet", "rs", None))
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in contenders}
    for r in range(a.rounds):
        for name, tool, path in contenders:
            root = tempfile.mkdtemp(prefix="pds-local-write-")
            env = dict(os.environ, LOCAL_WRITE_ROOT=root)
            if path:
                env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
            try:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", tool, str(a.rows), str(a.reps)],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            finally:
                shutil.rmtree(root, ignore_errors=True)
            lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            module = next((x["module"] for x in lines if "module" in x), "?")
            writes = [x for x in lines if "rep" in x]
            results[name].extend(w for w in writes if w["rep"] > 0)
            timings = ", ".join(f"{w['seconds']:.3f} s" for w in writes)
            print(f"round {r + 1}: {name} ({module}): {timings}", flush=True)
    print()
    print("| tool | write (median) | CPU (median) | writes |")
    print("|---|---:|---:|---:|")
    for name, writes in results.items():
        secs = statistics.median(w["seconds"] for w in writes)
        cpu = statistics.median(w["cpu"] for w in writes)
        print(f"| {name} | {secs:.3f} s | {cpu:.2f} CPU-s | {len(writes)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
