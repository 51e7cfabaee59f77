"""pds pipelines against Spark local[2] and DuckDB, on the same data, in one
run: the targets of issue P (first written for issue E-8).

The job: events ``(user, ts, amount)``, unsorted, 10 events per user on
average -> per-user sessions (a gap of 30 minutes starts a new one; key
``(user, session_start)``) -> per-user daily rows (key ``(user, day)``, one
row per session that started that day: the stage's Produce sees one source
key, a session, at a time). pds runs it as two batched stages over a source
keyed by user; Spark (window ``lag`` + ``groupBy``, sorted, written as
Parquet) and DuckDB (the same SQL, the sessions computed once, ``COPY ...
ORDER BY`` to Parquet) compute the same rows, and the results are checked
against each other.

Measured, all on ``file://`` in a temporary folder, against issue P's targets:

- full build of 10M events (pds, its state included; Spark, DuckDB): ≤ 2x
  DuckDB and ≤ 0.5x Spark; and the bytes it writes per input event, by node
  and kind (source content, stage content, key mappings, update files);
- a *localized* update: a contiguous 1 % of the users re-sent (as when the
  key is a date and one day is corrected), ≤ 3 % of the build; and a
  *scattered* one: 1 % of the users chosen uniformly, ≤ 10 % of the build;
  with the rows pds sorted for each (the emitted rows only: the stored
  content is merged, never sorted);
- ``--scattered-reps`` more scattered updates, new users each time: an
  update writes patches over the stored parts and a part is compacted
  (rewritten) after 8 patches or once they reach 1/4 of its rows, so their
  mean is the amortised cost; pds is checked against DuckDB after them all;
- the same localized and scattered updates (same number of users) on 40M
  events: each ≤ 1.5x its 10M figure (cost follows the change, not the data);
- the external sort alone: 10M rows within a 256 MiB budget (a pds source
  load) against DuckDB's ``ORDER BY`` to Parquet with ``memory_limit='256MB'``,
  each in a fresh process whose peak RSS is sampled: no slower than DuckDB,
  peak RSS ≤ budget + 256 MiB;
- the row form's overhead per value (one stage, row form vs batched): ≤ 1 µs.

The constant-key group (6M rows under one key, ``sort_budget=64 MiB``, peak
RSS ≤ 512 MiB) is measured by ``benches/constant_key_rss.py``, not here; the
report quotes the figures recorded in its docstring.

Prints a Markdown report and writes it to ``--out`` between the lines
``<!-- generated:start -->`` and ``<!-- generated:end -->``: what the file
holds outside them (hand-written sections) is kept.

    python benches/producers_compare.py                     # the full run (~15 min on 2 cores)
    python benches/producers_compare.py --events 1000000 --big-events 0 --no-spark --scattered-reps 3
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benches"))

from machine import Interference, git_state  # noqa: E402

import pds  # noqa: E402

GAP_US = 30 * 60 * 1_000_000
DAY0_US = 1_767_225_600_000_000  # 2026-01-01
SPAN_US = 30 * 86_400_000_000
EVENT_SCHEMA = pa.schema([("user", pa.int64()), ("ts", pa.timestamp("us")), ("amount", pa.int64())])
SESSION = {"session_end": pa.timestamp("us"), "events": pa.int64(), "amount": pa.int64()}
DAILY = {"session_start": pa.timestamp("us"), "events": pa.int64(), "amount": pa.int64()}
NODES = ("events", "sessions", "daily")
SOURCES = frozenset({"events"})
SORT_BUDGET = 256 << 20
MARK_START = "<!-- generated:start -->"
MARK_END = "<!-- generated:end -->"


# -- data -----------------------------------------------------------------------


def events(n: int, users: int, seed: int, user_ids: np.ndarray | None = None) -> pa.Table:
    """*n* events of *users* users (or of exactly *user_ids*), unsorted."""
    rng = np.random.default_rng(seed)
    u = rng.integers(0, users, n) if user_ids is None else user_ids
    # Events cluster in bursts so that users have several sessions.
    ts = DAY0_US + rng.integers(0, SPAN_US // GAP_US // 4, n) * GAP_US * 4 + rng.integers(0, GAP_US, n)
    return pa.table(
        {"user": pa.array(u, pa.int64()), "ts": pa.array(ts, pa.timestamp("us")), "amount": rng.integers(1, 100, n)},
        schema=EVENT_SCHEMA,
    )


def write_events(path: Path, n: int, users: int, seed: int) -> None:
    """Unsorted events as one Parquet file, written in slices of 1M."""
    with pq.ParquetWriter(path, EVENT_SCHEMA) as w:
        for i, start in enumerate(range(0, n, 1_000_000)):
            w.write_table(events(min(1_000_000, n - start), users, seed * 1000 + i), row_group_size=1_000_000)


def change(users: np.ndarray, per_user: int, seed: int) -> pa.Table:
    """New events for exactly *users*, ``per_user`` each."""
    return events(len(users) * per_user, 0, seed, user_ids=np.repeat(users, per_user))


# -- the pds pipeline -----------------------------------------------------------


def sessions_of(groups: pa.Table) -> pa.Table:
    """Whole users' events -> their sessions (vectorised)."""
    t = groups.sort_by([("user", "ascending"), ("ts", "ascending")])
    user = t.column("user").to_numpy()
    ts = t.column("ts").cast(pa.int64()).to_numpy()
    new = np.ones(len(t), dtype=bool)
    new[1:] = (user[1:] != user[:-1]) | (ts[1:] - ts[:-1] > GAP_US)
    sid = np.cumsum(new)
    t = t.append_column("sid", pa.array(sid))
    agg = t.group_by(["user", "sid"], use_threads=False).aggregate(
        [("ts", "min"), ("ts", "max"), ("amount", "sum"), ("amount", "count")]
    )
    return pa.table(
        {
            "user": agg["user"],
            "session_start": agg["ts_min"],
            "session_end": agg["ts_max"],
            "events": agg["amount_count"],
            "amount": agg["amount_sum"],
        }
    )


def daily_of(groups: pa.Table) -> pa.Table:
    """Whole sessions -> (user, day) rows, one per session (its source key)."""
    return pa.table(
        {
            "user": groups["user"],
            "day": groups["session_start"].cast(pa.date32()),
            "session_start": groups["session_start"],
            "events": groups["events"],
            "amount": groups["amount"],
        }
    )


def declare(store: Any, key: str, sort_budget: int = 512 << 20) -> pds.Pipeline:
    p = pds.Pipeline.create(store, key, exist_ok=True, sort_budget=sort_budget)
    ev = p.source("events", key={"user": pa.int64()}, value={"ts": pa.timestamp("us"), "amount": pa.int64()})
    p.stage(
        "sessions",
        sources=[ev],
        key={"user": pa.int64(), "session_start": pa.timestamp("us")},
        value=SESSION,
        batched=True,
    )(sessions_of)
    p.stage("daily", sources=["sessions"], key={"user": pa.int64(), "day": pa.date32()}, value=DAILY, batched=True)(
        daily_of
    )
    return p


def file_stream(path: Path) -> pa.RecordBatchReader:
    f = pq.ParquetFile(path)
    return pa.RecordBatchReader.from_batches(EVENT_SCHEMA, f.iter_batches(batch_size=65_536))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def sorted_rows(p: pds.Pipeline) -> int:
    """Rows the last version sorted: the upserts and what Produce emitted."""
    d = p.history(1)[0]["parameters"]
    return int(sum(s["upserts"] for s in d.get("sources", {}).values())) + int(
        sum(s["rows_emitted"] for s in d.get("stages", {}).values())
    )


def content_rows(p: pds.Pipeline) -> int:
    return sum(p.read(n).num_rows for n in ("events", "sessions", "daily"))


# -- peers ----------------------------------------------------------------------

DUCK_SQL = """
WITH e AS (SELECT user, ts, amount FROM read_parquet('{src}')),
f AS (SELECT *, CASE WHEN lag(ts) OVER w IS NULL OR epoch_us(ts) - epoch_us(lag(ts) OVER w) > {gap}
                THEN 1 ELSE 0 END AS new FROM e WINDOW w AS (PARTITION BY user ORDER BY ts)),
g AS (SELECT *, sum(new) OVER (PARTITION BY user ORDER BY ts ROWS UNBOUNDED PRECEDING) AS sid FROM f),
s AS (SELECT user, min(ts) AS session_start, max(ts) AS session_end, count(*) AS events, sum(amount) AS amount
      FROM g GROUP BY user, sid)
"""


def duckdb_build(src: Path, out: Path) -> float:
    """DuckDB: the sessions computed once (a temporary table), both results written sorted."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads=2")
    t0 = time.perf_counter()
    con.execute(f"CREATE TEMP TABLE sessions AS {DUCK_SQL.format(src=src, gap=GAP_US)} SELECT * FROM s")
    con.execute(
        f"COPY (SELECT * FROM sessions ORDER BY user, session_start) TO '{out}/sessions.parquet' (FORMAT parquet)"
    )
    con.execute(
        "COPY (SELECT user, CAST(session_start AS DATE) AS day, session_start, events, amount FROM sessions "
        f"ORDER BY user, day, session_start) TO '{out}/daily.parquet' (FORMAT parquet)"
    )
    return time.perf_counter() - t0


def spark_build(src: Path, out: Path) -> float:
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        # One untimed warm-up (JIT, class loading) on the same plan.
        for timed_run in (False, True):
            t0 = time.perf_counter()
            e = spark.read.parquet(str(src))
            w = Window.partitionBy("user").orderBy("ts")
            e = e.withColumn("us", F.unix_micros(F.col("ts")))
            e = e.withColumn("new", F.when((F.col("us") - F.lag("us").over(w)) <= GAP_US, 0).otherwise(1))
            e = e.withColumn("sid", F.sum("new").over(w.rowsBetween(Window.unboundedPreceding, 0)))
            s = e.groupBy("user", "sid").agg(
                F.min("ts").alias("session_start"),
                F.max("ts").alias("session_end"),
                F.count("*").alias("events"),
                F.sum("amount").alias("amount"),
            )
            s = s.drop("sid").cache()
            s.orderBy("user", "session_start").write.mode("overwrite").parquet(str(out / "sessions"))
            d = s.select("user", F.to_date("session_start").alias("day"), "session_start", "events", "amount")
            d.orderBy("user", "day", "session_start").write.mode("overwrite").parquet(str(out / "daily"))
            s.unpersist()
            if timed_run:
                return time.perf_counter() - t0
        return float("nan")
    finally:
        spark.stop()


# -- the external sort in a fresh process (peak RSS) -----------------------------


def sort_child(tool: str, src: Path, work: Path, budget: int) -> None:
    """Child: sort *src* by user within *budget*; prints READY, then DONE seconds."""
    print("READY", flush=True)
    sys.stdin.readline()
    if tool == "pds":
        store = pds.open_store(work.as_uri())
        p = pds.Pipeline.create(store, "sort", sort_budget=budget)
        p.source("events", key={"user": pa.int64()}, value={"ts": pa.timestamp("us"), "amount": pa.int64()})
        seconds, _ = timed(lambda: p.update({"events": pds.Changes(upserts=file_stream(src))}))
    else:
        import duckdb

        con = duckdb.connect()
        con.execute(f"SET memory_limit='{budget // (1 << 20)}MB'")
        con.execute("SET threads=2")
        con.execute(f"SET temp_directory='{work}/duck-tmp'")
        seconds, _ = timed(
            lambda: con.execute(
                f"COPY (SELECT * FROM read_parquet('{src}') ORDER BY user) TO '{work}/sorted.parquet' (FORMAT parquet)"
            )
        )
    print(f"DONE {seconds}", flush=True)


def measure_sort(tool: str, src: Path, work: Path, budget: int) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one sort in a fresh process."""
    import psutil

    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", tool, str(src), str(work), str(budget)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    ps = psutil.Process(proc.pid)
    peak = ps.memory_info().rss
    proc.stdin.write("GO\n")
    proc.stdin.flush()
    seconds = float("nan")
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, ps.memory_info().rss)
        time.sleep(0.02)
    for line in proc.stdout.read().splitlines():
        if line.startswith("DONE"):
            seconds = float(line.split()[1])
    return seconds, peak / (1 << 20)


# -- what a build or an update writes ---------------------------------------------

# A part written whole (a build, a rewrite, a compaction) is ``<token>-sNNNNN-NNNNN``;
# a patch's rows over a part, ``-pNNNNN-``, its deleted values ``-pNNNNNd-`` or the run of
# a file the update's patches share, ``<token>-d-``, in the same folders.
WHOLE_FILE = re.compile(r"-s\d{5}-")
Files = dict[str, tuple[int, int]]


def store_files(root: Path) -> Files:
    """Every file of a pipeline's folder: path relative to it -> (bytes, mtime ns)."""
    out: Files = {}
    for f in root.rglob("*"):
        if f.is_file():
            st = f.stat()
            out[f.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def written(before: Files, after: Files) -> Files:
    """The files new or rewritten since *before*."""
    return {k: v for k, v in after.items() if before.get(k) != v}


def kind_of(rel: str) -> tuple[str, str]:
    """(node, kind) of a file of a pipeline's folder: ``nodes/<node>/{content,mappings,update}/``
    (a part's files and its patches' alike)."""
    parts = rel.split("/")
    if parts[0] != "nodes" or len(parts) < 4:
        return "(pipeline)", "manifests"
    node, folder = parts[1], parts[2]
    role = "source" if node in SOURCES else "stage"
    return node, {"content": f"{role} content", "mappings": "key mappings"}.get(folder, f"{folder} files")


def bytes_by_kind(files: Files) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for rel, (size, _) in files.items():
        k = kind_of(rel)
        out[k] = out.get(k, 0) + size
    return out


def whole_parts(files: Files) -> int:
    """Content files written as whole parts (by an update: a rewrite or a compaction)."""
    return sum(1 for rel in files if "/content/" in rel and WHOLE_FILE.search(rel))


@dataclass
class Run:
    """One update of a pipeline: its time, the rows it sorted and the files it wrote."""

    seconds: float
    sorted_rows: int
    files: Files

    @property
    def bytes(self) -> int:
        return sum(size for size, _ in self.files.values())

    def figures(self) -> str:
        return f"{self.seconds:.2f} s, {self.sorted_rows:,} rows sorted, {self.bytes / 1e6:.1f} MB written"


def measured(p: pds.Pipeline, root: Path, changes: Any) -> Run:
    """Apply *changes* to the source ``events``; *root* is the pipeline's folder."""
    before = store_files(root)
    seconds, _ = timed(lambda: p.update({"events": changes}))
    return Run(seconds, sorted_rows(p), written(before, store_files(root)))


def contiguous(users: int, count: int) -> np.ndarray:
    return np.arange(users // 2, users // 2 + count, dtype=np.int64)


def uniform(users: int, count: int, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).choice(users, count, replace=False)).astype(np.int64)


def bytes_table(build: Files, events_in: int, update: Run, events_changed: int) -> list[str]:
    """Bytes per event by node and kind: of the build per input event, of an update per changed event."""
    b, u = bytes_by_kind(build), bytes_by_kind(update.files)
    order = {node: i for i, node in enumerate(NODES)}
    out = [
        "| node | kind | build: MB | build: bytes per input event | update: kB | update: bytes per changed event |",
        "|---|---|---:|---:|---:|---:|",
    ]

    def row(node: str, kind: str, nb: int, nu: int) -> str:
        return (
            f"| {node} | {kind} | {nb / 1e6:,.2f} | {nb / events_in:.1f} | {nu / 1e3:,.1f} "
            f"| {nu / events_changed:.1f} |"
        )

    for node, kind in sorted(set(b) | set(u), key=lambda k: (order.get(k[0], len(order)), k[1])):
        out.append(row(node, kind, b.get((node, kind), 0), u.get((node, kind), 0)))
    out.append(row("**all**", "", sum(b.values()), sum(u.values())))
    return out


# -- the run ----------------------------------------------------------------------


def check_same(p: pds.Pipeline, duck_dir: Path) -> None:
    """pds's daily rows equal DuckDB's (as sets of rows, sorted)."""
    mine = p.read("daily").select(["user", "day", "session_start", "events", "amount"])
    theirs = pq.read_table(duck_dir / "daily.parquet").cast(mine.schema)
    keys = [("user", "ascending"), ("day", "ascending"), ("session_start", "ascending")]
    if not mine.sort_by(keys).equals(theirs.sort_by(keys)):
        raise SystemExit("pds and DuckDB disagree on the daily rows")


def row_form_overhead(n: int) -> tuple[float, float, float]:
    """(row s, batched s, µs per value) of one stage over *n* events, in both forms."""
    small = events(n, n // 10, seed=5)
    forms = {}
    for form in ("batched", "row"):
        r = pds.Pipeline.create(pds.open_store("memory://"), "r")
        ev = r.source("events", key={"user": pa.int64()}, value={"ts": pa.timestamp("us"), "amount": pa.int64()})
        if form == "batched":
            r.stage("s", sources=[ev], key={"user": pa.int64()}, value={"amount": pa.int64()}, batched=True)(
                lambda t: t.select(["user", "amount"])
            )
        else:

            @r.stage("s", sources=[ev], key={"user": pa.int64()}, value={"amount": pa.int64()})
            def s(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
                for v in values:
                    yield key, v["amount"]

        forms[form], _ = timed(lambda r=r: r.update({"events": small}))
    return forms["row"], forms["batched"], (forms["row"] - forms["batched"]) / n * 1e6


def constant_key_figures() -> str:
    """The figures benches/constant_key_rss.py records in its docstring (its paragraph "Measured ...")."""
    doc = ast.get_docstring(ast.parse((REPO / "benches" / "constant_key_rss.py").read_text())) or ""
    found = [" ".join(para.split()) for para in doc.split("\n\n") if para.lstrip().startswith("Measured")]
    return found[-1] if found else "none recorded"


def verdict(ratio: float, limit: float, shown: str = "{:.2f}x") -> str:
    """``met`` or ``**missed**`` for ``ratio ≤ limit``, with the ratio; ``not run`` for NaN."""
    if math.isnan(ratio):
        return "not run"
    return f"{'met' if ratio <= limit else '**missed**'} ({shown.format(ratio)})"


PCT = "{:.1%}"


def seconds(x: float) -> str:
    return "not run" if math.isnan(x) else f"{x:.1f} s"


def run(args: argparse.Namespace) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="pds-producers-bench-"))
    load0 = os.getloadavg()[0]
    others = Interference()
    nan = float("nan")

    def log(msg: str) -> None:
        print(msg, flush=True)

    try:
        n, users = args.events, args.events // 10
        changed = users // 100
        src = tmp / "events.parquet"
        log(f"generating {n:,} events of {users:,} users")
        write_events(src, n, users, seed=1)

        root = tmp / "lake" / "p"
        p = declare(pds.open_store(root.parent.as_uri()), "p")
        build = measured(p, root, file_stream(src))
        full = build.seconds
        log(f"pds full build: {full:.1f} s, {build.bytes / 1e6:.0f} MB written")
        total_rows = content_rows(p)

        duck_dir = tmp / "duck"
        duck_dir.mkdir()
        duck = duckdb_build(src, duck_dir)
        log(f"duckdb full build: {duck:.1f} s")
        check_same(p, duck_dir)
        spark = nan
        if not args.no_spark:
            spark = spark_build(src, tmp / "spark")
            log(f"spark full build: {spark:.1f} s")

        local = measured(p, root, change(contiguous(users, changed), 10, seed=7))
        log(f"pds localized update ({changed:,} users): {local.figures()}")
        scat = measured(p, root, change(uniform(users, changed, seed=11), 10, seed=8))
        log(f"pds scattered update: {scat.figures()}")
        reps: list[Run] = []
        for i in range(args.scattered_reps):
            reps.append(measured(p, root, change(uniform(users, changed, seed=100 + i), 10, seed=200 + i)))
            log(f"pds scattered update {i + 1}/{args.scattered_reps}: {reps[-1].figures()}")
        # Correctness after the updates: against DuckDB on the same final events.
        final = tmp / "events-final.parquet"
        pq.write_table(
            p.read("events").select(["user", "ts", "amount"]).cast(EVENT_SCHEMA), final, row_group_size=1_000_000
        )
        duckdb_build(final, duck_dir)
        check_same(p, duck_dir)
        log("pds == DuckDB after the updates")

        big = nan
        big_local: Run | None = None
        big_scat: Run | None = None
        if args.big_events:
            bn, bu = args.big_events, args.big_events // 10
            bsrc = tmp / "events-big.parquet"
            log(f"generating {bn:,} events of {bu:,} users")
            write_events(bsrc, bn, bu, seed=2)
            broot = tmp / "lake-big" / "q"
            q = declare(pds.open_store(broot.parent.as_uri()), "q")
            big = measured(q, broot, file_stream(bsrc)).seconds
            log(f"pds full build {bn:,}: {big:.1f} s")
            bsrc.unlink()
            big_local = measured(q, broot, change(contiguous(bu, changed), 10, seed=7))
            log(f"pds localized update on {bn:,}: {big_local.figures()}")
            big_scat = measured(q, broot, change(uniform(bu, changed, seed=11), 10, seed=8))
            log(f"pds scattered update on {bn:,}: {big_scat.figures()}")
            shutil.rmtree(broot.parent, ignore_errors=True)

        # The external sort alone, in fresh processes.
        ps_s, ps_rss = measure_sort("pds", src, tmp / "sort-pds", SORT_BUDGET)
        ds_s, ds_rss = measure_sort("duckdb", src, tmp / "sort-duck", SORT_BUDGET)
        log(f"sort {n:,}: pds {ps_s:.1f} s / {ps_rss:.0f} MiB, duckdb {ds_s:.1f} s / {ds_rss:.0f} MiB")

        rn = min(n, 1_000_000)
        row_s, batched_s, per_value_us = row_form_overhead(rn)
        log(f"row form: {row_s:.2f} s vs batched {batched_s:.2f} s: {per_value_us:.2f} µs per value")

        times = [r.seconds for r in reps]
        seq_rows = []
        if times:
            seq = {"median": statistics.median(times), "max": max(times), "mean": statistics.fmean(times)}
            seq_rows.append(
                f"| {len(reps)} more scattered updates, new users each | {', '.join(f'{t:.2f}' for t in times)} s; "
                f"{statistics.fmean(r.bytes for r in reps) / 1e6:.1f} MB written on average; "
                f"{sum(whole_parts(r.files) for r in reps)} content files written whole (rewrites, compactions) "
                f"| {', '.join(f'{k} {v / full:.1%}' for k, v in seq.items())} of the build; amortised (mean) "
                f"≤ 10 %: {verdict(seq['mean'] / full, 0.10, PCT)} |"
            )
        vs_spark = "not run" if math.isnan(spark) else f"{spark / local.seconds:.0f}x"
        rss_limit = (SORT_BUDGET >> 20) + 256
        big_label = f"{args.big_events:,} events" if args.big_events else "a bigger pipeline"

        def vs_10m(r: Run | None, base: Run) -> str:
            figures = "not run" if r is None else f"{r.figures()} (build {seconds(big)})"
            return f"{figures} | ÷ the {n:,} one ≤ 1.5: {verdict(nan if r is None else r.seconds / base.seconds, 1.5)}"

        rows = [
            f"| full build, {n:,} events | pds {full:.1f} s (its state included), DuckDB {duck:.1f} s, "
            f"Spark local[2] {seconds(spark)} | ≤ 2x DuckDB: {verdict(full / duck, 2)}; "
            f"≤ 0.5x Spark: {verdict(full / spark, 0.5)} |",
            f"| localized update, 1 % of users (contiguous) | {local.figures()} "
            f"| ≤ 3 % of the build: {verdict(local.seconds / full, 0.03, PCT)}; "
            f"Spark's rebuild ÷ this (E's target ≥ 20x): {vs_spark} |",
            f"| scattered update, 1 % of users (uniform) | {scat.figures()}; {total_rows:,} rows stored "
            f"| ≤ 10 % of the build: {verdict(scat.seconds / full, 0.10, PCT)}; content never sorted: "
            f"{verdict(scat.sorted_rows / total_rows, 0.1, PCT)} |",
            *seq_rows,
            f"| localized update on {big_label} (same users count) | {vs_10m(big_local, local)} |",
            f"| scattered update on {big_label} (same users count) | {vs_10m(big_scat, scat)} |",
            f"| external sort, {n:,} rows, {SORT_BUDGET >> 20} MiB budget | pds {ps_s:.2f} s, peak RSS "
            f"{ps_rss:.0f} MiB; DuckDB {ds_s:.2f} s, {ds_rss:.0f} MiB | ≤ DuckDB: {verdict(ps_s / ds_s, 1)}; "
            f"peak RSS ≤ budget + 256 MiB: {verdict(ps_rss / rss_limit, 1, f'{ps_rss:.0f} of {rss_limit} MiB')} |",
            "| constant-key group, 6M rows (~480 MB of Arrow), sort_budget 64 MiB | not run here: "
            "`python benches/constant_key_rss.py` (figures below) | peak RSS ≤ 512 MiB: see below |",
            f"| row form overhead | {per_value_us:.2f} µs per value ({rn:,} values: row {row_s:.2f} s, "
            f"batched {batched_s:.2f} s) | ≤ 1 µs per value: {verdict(per_value_us, 1, '{:.2f} µs')} |",
        ]
        changed_events = changed * 10
        src_bytes = src.stat().st_size
        lines = [
            f"# pds producers vs Spark local[2] and DuckDB ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
            "",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores; {git_state(REPO)}. "
            f"Command: `python benches/producers_compare.py {' '.join(sys.argv[1:])}`. "
            f"Load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; {others.summary()}.",
            "",
            "Issue P's targets, all on `file://`. Updates change 1 % of the users "
            f"({changed:,} users, {changed_events:,} events); they write patches over the stored parts, and a part "
            "is compacted after 6 to 10 patches (by a hash of its name) or once they reach 1/4 of its rows. "
            "pds equals DuckDB after the build and after all the updates of the first pipeline.",
            "",
            "| measure | figures | target |",
            "|---|---|---|",
            *rows,
            "",
            f"Constant-key group, as recorded by `benches/constant_key_rss.py`: {constant_key_figures()}",
            "",
            f"## Bytes written by the build ({n:,} events) and by the first scattered update",
            "",
            "What each wrote in the pipeline's folder, by node and kind: the build per input event, the "
            "update per event it changed (its content and mappings are patches over the stored parts, or parts "
            f"rewritten: {whole_parts(scat.files)} content files written whole). The input, for scale: "
            f"{src_bytes / n:.1f} bytes per event as one Parquet file (default compression), "
            "24 as Arrow (three 8-byte columns).",
            "",
            *bytes_table(build.files, n, scat, changed_events),
        ]
        return "\n".join(lines) + "\n"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kept_around(out: Path) -> tuple[str, str]:
    """What *out* holds before and after its generated part (nothing for a new file)."""
    if not out.exists():
        return "", "\n"
    text = out.read_text()
    start, end = text.find(MARK_START), text.find(MARK_END)
    if start < 0 or end < start:
        raise SystemExit(
            f"{out} has no {MARK_START} ... {MARK_END} lines around its generated part: add them "
            "(what lies outside them is kept) or remove the file"
        )
    return text[:start], text[end + len(MARK_END) :]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sort_child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--big-events", type=int, default=40_000_000, help="0 skips the 40M build")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--scattered-reps", type=int, default=10, help="scattered updates after the first (amortised cost)")
    ap.add_argument(
        "--out",
        type=Path,
        default=REPO / "benches" / "producers_results.md",
        help="written between its generated markers; the rest of the file is kept",
    )
    args = ap.parse_args()
    kept_around(args.out)  # refuse a file without markers before the run, not after
    report = run(args)
    print(report)
    before, after = kept_around(args.out)  # read again: hand edits made during the run are kept
    args.out.write_text(f"{before}{MARK_START}\n{report}{MARK_END}{after}")
    print(json.dumps({"wrote": str(args.out)}))


if __name__ == "__main__":
    main()
