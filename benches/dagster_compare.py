"""pds.dagster against dagster-deltalake on the same Dagster assets.

A daily-partitioned table asset: materialise PARTITIONS days of ROWS rows
each (a streamed output, a ``RecordBatchReader`` generated batch by batch),
then re-materialise REMAT of them. Contenders: ``pds.dagster.PdsIOManager``
(``"pds/format": "table"``, one ``Table.replace`` commit per partition) and
``dagster_deltalake.DeltaLakePyarrowIOManager`` (its ``partition_expr``
overwrite). Each run is a fresh process on a local folder, the contenders
alternating, ROUNDS times; the report is wall time and peak RSS per run.

Usage: ``python benches/dagster_compare.py [--partitions 30] [--rows 1000000]
[--remat 3] [--rounds 2]`` (the full size takes minutes and GBs of disk:
try ``--partitions 3 --rows 10000 --remat 1 --rounds 1`` first).
A contender that is not installed is reported as such (``pip install
dagster-deltalake``: it pins its own Dagster version).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import datetime, json, sys, time
import dagster as dg
import numpy as np
import pyarrow as pa

tool, root, partitions, rows, remat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
daily = dg.DailyPartitionsDefinition(start_date="2026-01-01")
SCHEMA = pa.schema([("day", pa.date32()), ("order_id", pa.int64()), ("amount", pa.float64())])
BATCH = 65_536


def stream(key, seed):
    day = datetime.date.fromisoformat(key)
    rng = np.random.default_rng(seed)

    def batches():
        for start in range(0, rows, BATCH):
            n = min(BATCH, rows - start)
            yield pa.record_batch(
                [pa.array([day] * n, pa.date32()), pa.array(np.arange(start, start + n)), pa.array(rng.random(n))],
                schema=SCHEMA,
            )

    return pa.RecordBatchReader.from_batches(SCHEMA, batches())


if tool == "pds":
    from pds.dagster import PdsIOManager

    io = PdsIOManager(root_uri=root)
    meta = {"pds/format": "table", "partition_expr": "day"}
else:
    from dagster_deltalake import DeltaLakePyarrowIOManager, LocalConfig

    io = DeltaLakePyarrowIOManager(root_uri=root, storage_options=LocalConfig())
    meta = {"partition_expr": "day"}


@dg.asset(partitions_def=daily, metadata=meta)
def orders(context) -> pa.RecordBatchReader:
    return stream(context.partition_key, int(context.run.tags.get("seed", "0")))


keys = daily.get_partition_keys()[:partitions]
t0 = time.perf_counter()
for key in keys:
    assert dg.materialize([orders], partition_key=key, resources={"io_manager": io}).success
t1 = time.perf_counter()
for key in keys[:remat]:
    assert dg.materialize([orders], partition_key=key, resources={"io_manager": io}, tags={"seed": "1"}).success
t2 = time.perf_counter()
print("RESULT " + json.dumps({"materialise": t1 - t0, "rematerialise": t2 - t1}), flush=True)
"""


def run_one(tool: str, args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    """One contender in a fresh process; its times and peak RSS (wait4)."""
    root = workdir / f"{tool}-{time.monotonic_ns()}"
    root.mkdir()
    script = workdir / "child.py"
    script.write_text(CHILD)
    uri = root.as_uri() if tool == "pds" else str(root)
    errfile = workdir / f"{tool}.stderr"
    with errfile.open("w") as errs:
        proc = subprocess.Popen(
            [sys.executable, str(script), tool, uri, str(args.partitions), str(args.rows), str(args.remat)],
            stdout=subprocess.PIPE,
            stderr=errs,
            text=True,
        )
        start = time.perf_counter()
        assert proc.stdout is not None
        out = proc.stdout.read()
        # wait4: this child's own peak RSS (KiB on Linux), whatever ran before it.
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = errfile.read_text()
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        missing = "No module named 'dagster_deltalake'" in err
        return {"tool": tool, "error": "not installed" if missing else err.strip().splitlines()[-1:]}
    return {"tool": tool, "wall": wall, "peak_rss_mib": usage.ru_maxrss / 1024, **json.loads(line[7:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--remat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pds-dagster-bench-") as tmp:
        for _ in range(args.rounds):
            for tool in ("pds", "deltalake"):
                print(json.dumps(run_one(tool, args, Path(tmp))), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("DAGSTER_HOME", tempfile.mkdtemp(prefix="dagster-home-"))
    main()
