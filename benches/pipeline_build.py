"""A pipeline's full build and its scattered update, against DuckDB on the
same events: 4M events (user, ts, amount) of 400,000 users, unsorted, in
one Parquet file, to a local folder.

- pds: source ``events`` keyed by ``user``; batched stage ``by_day`` re-keys
  each event by ``(user, day)``; batched stage ``daily`` sums ``amount`` and
  counts the events of each ``(user, day)``. The build is one
  ``Pipeline.update`` from the file's batches.
- DuckDB (2 threads): ``GROUP BY user, day ORDER BY user, day`` of the same
  file into Parquet.
- DuckDB writing the nodes pds keeps (2 threads): the events sorted by
  ``user``, then those rows keyed by ``(user, day)`` and sorted, then the
  daily sums and counts, each into zstd Parquet (pds's codec), each read
  from the one before.
  It writes what pds's nodes hold, without pds's state (what updates patch
  by) and checksums: a floor for any design that keeps every node.

The two builds take turns rep by rep (pds on a fresh key each time); pds's
output is checked equal to DuckDB's. Then scattered updates, each sending
10 new events for 2,000 users drawn uniformly (0.5 % of users), on the last
build; the report gives the median of the first three as a share of pds's
median build. An update lands in every part and patches it; a part takes 6
to 10 patches, and the change after that rewrites it whole. With more than
``STEADY_FROM`` updates, the report also gives the median of the later ones,
when parts are being rewritten so: what a pipeline updated this way costs
in the long run.

    python benches/pipeline_build.py [--events 4000000] [--reps 3] [--updates 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producers_compare import EVENT_SCHEMA, change, file_stream, uniform, write_events

import pds

BY_DAY = {"ts": pa.timestamp("us"), "amount": pa.int64()}
DAILY = {"amount": pa.int64(), "events": pa.int64()}
# The first updates only patch; parts reach their limits of patches (6 to
# 10) from the seventh update on, and are rewritten then. The report's
# second figure is the median of the updates after this many: a window that
# holds rewrites and the patches after them (see the docstring).
STEADY_FROM = 8


def by_day(events: pa.Table) -> pa.Table:
    """Each event keyed by (user, day)."""
    return pa.table(
        {
            "user": events["user"],
            "day": pc.cast(events["ts"], pa.date32()),
            "ts": events["ts"],
            "amount": events["amount"],
        }
    )


def daily(rows: pa.Table) -> pa.Table:
    """Whole (user, day) groups -> their sum and count."""
    agg = rows.group_by(["user", "day"], use_threads=False).aggregate([("amount", "sum"), ("amount", "count")])
    return pa.table(
        {"user": agg["user"], "day": agg["day"], "amount": agg["amount_sum"], "events": agg["amount_count"]}
    )


def declare(store: Any, key: str) -> pds.Pipeline:
    p = pds.Pipeline.create(store, key)
    ev = p.source("events", key={"user": pa.int64()}, value={"ts": pa.timestamp("us"), "amount": pa.int64()})
    p.stage("by_day", sources=[ev], key={"user": pa.int64(), "day": pa.date32()}, value=BY_DAY, batched=True)(by_day)
    p.stage("daily", sources=["by_day"], key={"user": pa.int64(), "day": pa.date32()}, value=DAILY, batched=True)(daily)
    return p


def duckdb_timed(statements: list[str]) -> float:
    """Seconds DuckDB (2 threads, a fresh connection) takes to run *statements*."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads=2")
    t0 = time.perf_counter()
    for sql in statements:
        con.execute(sql)
    return time.perf_counter() - t0


def duckdb_build(src: Path, out: Path) -> float:
    return duckdb_timed(
        [
            "COPY (SELECT user, CAST(ts AS DATE) AS day, sum(amount) AS amount, count(*) AS events "
            f"FROM read_parquet('{src}') GROUP BY user, day ORDER BY user, day) TO '{out}' (FORMAT parquet)"
        ]
    )


def folder_mb(path: Path) -> float:
    """Megabytes of the files under *path*."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def duckdb_nodes(src: Path, out: Path) -> float:
    """DuckDB writing each node pds keeps, in turn, with pds's codec (zstd); the
    seconds of the three."""
    out.mkdir(parents=True, exist_ok=True)
    events, keyed, days = out / "events.parquet", out / "by_day.parquet", out / "daily.parquet"
    zstd = "(FORMAT parquet, COMPRESSION zstd)"
    return duckdb_timed(
        [
            f"COPY (SELECT user, ts, amount FROM read_parquet('{src}') ORDER BY user) TO '{events}' {zstd}",
            "COPY (SELECT user, CAST(ts AS DATE) AS day, ts, amount "
            f"FROM read_parquet('{events}') ORDER BY user, day) TO '{keyed}' {zstd}",
            "COPY (SELECT user, day, sum(amount) AS amount, count(*) AS events "
            f"FROM read_parquet('{keyed}') GROUP BY user, day ORDER BY user, day) TO '{days}' {zstd}",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=4_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--updates", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pds-pipeline-build-"))
    try:
        run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: Path) -> None:
    """The builds, the check and the updates, in *tmp*; prints the report."""
    n, users = args.events, args.events // 10
    src = tmp / "events.parquet"
    write_events(src, n, users, seed=1)
    store = pds.open_store((tmp / "lake").as_uri())
    builds: dict[str, list[float]] = {"pds": [], "duckdb": [], "nodes": []}
    p = None
    for rep in range(args.reps):
        order = ("pds", "duckdb", "nodes")
        for tool in order if rep % 2 == 0 else order[::-1]:
            if tool == "nodes":
                builds["nodes"].append(duckdb_nodes(src, tmp / f"nodes{rep}"))
            elif tool == "pds":
                p = declare(store, f"p{rep}")
                t0 = time.perf_counter()
                p.update({"events": file_stream(src)})
                builds["pds"].append(time.perf_counter() - t0)
            else:
                builds["duckdb"].append(duckdb_build(src, tmp / f"duck{rep}.parquet"))
            print(f"rep {rep + 1} {tool:<6} build {builds[tool][-1]:.2f} s", flush=True)
    assert p is not None
    keys = [("user", "ascending"), ("day", "ascending")]
    mine = p.read("daily").select(["user", "day", "amount", "events"])
    theirs = pq.read_table(tmp / "duck0.parquet").cast(mine.schema)
    if not mine.sort_by(keys).equals(theirs.sort_by(keys)):
        raise SystemExit("pds and DuckDB disagree")
    nodes = pq.read_table(tmp / "nodes0" / "daily.parquet").cast(mine.schema)
    if not nodes.sort_by(keys).equals(theirs.sort_by(keys)):
        raise SystemExit("DuckDB's node writes and its query disagree")
    pds_mb, nodes_mb = folder_mb(tmp / "lake" / "p0"), folder_mb(tmp / "nodes0")
    updates = []
    for i in range(args.updates):
        ch = change(uniform(users, users // 200, seed=100 + i), 10, seed=200 + i).cast(EVENT_SCHEMA)
        t0 = time.perf_counter()
        p.update({"events": ch})
        updates.append(time.perf_counter() - t0)
        print(f"scattered update {i + 1}: {updates[-1]:.2f} s", flush=True)
    pb, db = statistics.median(builds["pds"]), statistics.median(builds["duckdb"])
    nb = statistics.median(builds["nodes"])
    up = statistics.median(updates[:3])
    print(f"\n`python benches/pipeline_build.py --events {n} --reps {args.reps} --updates {args.updates}`:\n")
    print("| work | pds | DuckDB | ratio |\n|---|---:|---:|---:|")
    print(f"| full build, {n:,} events | {pb:.2f} s | {db:.2f} s | {pb / db:.2f}x DuckDB |")
    print(f"| DuckDB writing the three nodes pds keeps | | {nb:.2f} s | pds {pb / nb:.2f}x, DuckDB {nb / db:.2f}x |")
    print(f"| bytes of the nodes (first build) | {pds_mb:.1f} MB | {nodes_mb:.1f} MB | |")
    print(f"| scattered update, {users // 200:,} of {users:,} users | {up:.2f} s | | {up / pb:.0%} of the build |")
    if len(updates) > STEADY_FROM:
        later = statistics.median(updates[STEADY_FROM:])
        span = f"updates {STEADY_FROM + 1}-{len(updates)}"
        share = f"{later / pb:.0%} of the build"
        print(f"| the same, {span} (rewrites at the patch limit, then patches again) | {later:.2f} s | | {share} |")


if __name__ == "__main__":
    main()
