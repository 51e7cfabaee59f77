"""pds pipelines against Spark local[2] and DuckDB, on the same data, in one
run (issue E-8).

The job: events ``(user, ts, amount)``, unsorted, 10 events per user on
average -> per-user sessions (a gap of 30 minutes starts a new one; key
``(user, session_start)``) -> per-user daily rows (key ``(user, day)``, one
row per session that started that day: the stage's Produce sees one source
key, a session, at a time). pds runs it as two batched stages over a source
keyed by user; Spark (window ``lag`` + ``groupBy``, sorted, written as
Parquet) and DuckDB (the same SQL, ``COPY ... ORDER BY`` to Parquet) compute
the same rows, and the results are checked against each other.

Measured, all on ``file://`` in a temporary folder:

- full build of 10M events (pds, Spark, DuckDB);
- a *localized* update: a contiguous 1 % of the users re-sent (as when the
  key is a date and one day is corrected), and a *scattered* one: 1 % of
  the users chosen uniformly; with the rows pds sorted for each (the emitted
  rows only: the stored content is merged, never sorted);
- the same localized update (same rows) on 40M events (4M users): cost
  follows the change, not the data;
- the external sort alone: 10M rows within a 256 MiB budget (a pds source
  load) against DuckDB's ``ORDER BY`` to Parquet with ``memory_limit='256MB'``,
  each in a fresh process whose peak RSS is sampled;
- the row form's overhead per value (one stage, row form vs batched).

Prints a Markdown report and writes it to ``--out``::

    python benches/producers_compare.py                     # the full run (~15 min on 2 cores)
    python benches/producers_compare.py --events 1000000 --big-events 0 --no-spark
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benches"))

from machine import git_state  # noqa: E402

import pds  # noqa: E402

GAP_US = 30 * 60 * 1_000_000
DAY0_US = 1_767_225_600_000_000  # 2026-01-01
SPAN_US = 30 * 86_400_000_000
EVENT_SCHEMA = pa.schema([("user", pa.int64()), ("ts", pa.timestamp("us")), ("amount", pa.int64())])
SESSION = {"session_end": pa.timestamp("us"), "events": pa.int64(), "amount": pa.int64()}
DAILY = {"session_start": pa.timestamp("us"), "events": pa.int64(), "amount": pa.int64()}


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
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads=2")
    t0 = time.perf_counter()
    with_s = DUCK_SQL.format(src=src, gap=GAP_US)
    con.execute(
        f"COPY ({with_s} SELECT * FROM s ORDER BY user, session_start) TO '{out}/sessions.parquet' (FORMAT parquet)"
    )
    con.execute(
        f"COPY ({with_s} SELECT user, CAST(session_start AS DATE) AS day, session_start, events, amount FROM s "
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


# -- the run ----------------------------------------------------------------------


def check_same(p: pds.Pipeline, duck_dir: Path) -> None:
    """pds's daily rows equal DuckDB's (as sets of rows, sorted)."""
    mine = p.read("daily").select(["user", "day", "session_start", "events", "amount"])
    theirs = pq.read_table(duck_dir / "daily.parquet").cast(mine.schema)
    keys = [("user", "ascending"), ("day", "ascending"), ("session_start", "ascending")]
    if not mine.sort_by(keys).equals(theirs.sort_by(keys)):
        raise SystemExit("pds and DuckDB disagree on the daily rows")


def run(args: argparse.Namespace) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="pds-producers-bench-"))
    lines: list[str] = []
    rows: list[tuple[str, str, str]] = []

    def log(msg: str) -> None:
        print(msg, flush=True)

    try:
        n, users = args.events, args.events // 10
        src = tmp / "events.parquet"
        log(f"generating {n:,} events of {users:,} users")
        write_events(src, n, users, seed=1)

        store = pds.open_store((tmp / "lake").as_uri())
        p = declare(store, "p")
        full, _ = timed(lambda: p.update({"events": pds.Changes(upserts=file_stream(src))}))
        log(f"pds full build: {full:.1f} s")
        total_rows = content_rows(p)

        duck_dir = tmp / "duck"
        duck_dir.mkdir()
        duck = duckdb_build(src, duck_dir)
        log(f"duckdb full build: {duck:.1f} s")
        check_same(p, duck_dir)
        spark = float("nan")
        if not args.no_spark:
            spark = spark_build(src, tmp / "spark")
            log(f"spark full build: {spark:.1f} s")

        changed = users // 100
        local_users = np.arange(users // 2, users // 2 + changed, dtype=np.int64)
        local, _ = timed(lambda: p.update({"events": change(local_users, 10, seed=7)}))
        local_sorted = sorted_rows(p)
        log(f"pds localized update ({changed:,} users): {local:.2f} s, {local_sorted:,} rows sorted")
        rng = np.random.default_rng(11)
        scattered_users = np.sort(rng.choice(users, changed, replace=False)).astype(np.int64)
        scat, _ = timed(lambda: p.update({"events": change(scattered_users, 10, seed=8)}))
        scat_sorted = sorted_rows(p)
        log(f"pds scattered update: {scat:.2f} s, {scat_sorted:,} rows sorted")
        # Correctness after the updates: against DuckDB on the same final events.
        final = tmp / "events-final.parquet"
        pq.write_table(
            p.read("events").select(["user", "ts", "amount"]).cast(EVENT_SCHEMA), final, row_group_size=1_000_000
        )
        duckdb_build(final, duck_dir)
        check_same(p, duck_dir)
        log("pds == DuckDB after the updates")

        big = float("nan")
        big_local = float("nan")
        if args.big_events:
            bn, bu = args.big_events, args.big_events // 10
            bsrc = tmp / "events-big.parquet"
            log(f"generating {bn:,} events of {bu:,} users")
            write_events(bsrc, bn, bu, seed=2)
            q = declare(pds.open_store((tmp / "lake-big").as_uri()), "q")
            big, _ = timed(lambda: q.update({"events": pds.Changes(upserts=file_stream(bsrc))}))
            log(f"pds full build {bn:,}: {big:.1f} s")
            same = np.arange(bu // 2, bu // 2 + changed, dtype=np.int64)
            big_local, _ = timed(lambda: q.update({"events": change(same, 10, seed=7)}))
            log(f"pds localized update on {bn:,}: {big_local:.2f} s")
            bsrc.unlink()

        # The external sort alone, in fresh processes.
        budget = 256 << 20
        ps_s, ps_rss = measure_sort("pds", src, tmp / "sort-pds", budget)
        ds_s, ds_rss = measure_sort("duckdb", src, tmp / "sort-duck", budget)
        log(f"sort 10M: pds {ps_s:.1f} s / {ps_rss:.0f} MiB, duckdb {ds_s:.1f} s / {ds_rss:.0f} MiB")

        # Row form overhead per value: one stage, 1M events, both forms.
        rn = min(n, 1_000_000)
        small = events(rn, rn // 10, seed=5)
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
        per_value_us = (forms["row"] - forms["batched"]) / rn * 1e6
        log(f"row form: {forms['row']:.2f} s vs batched {forms['batched']:.2f} s: {per_value_us:.2f} µs per value")

        def ok(flag: bool) -> str:
            return "met" if flag else "**missed**"

        rows = [
            ("full build, 10M events", f"pds {full:.1f} s, Spark local[2] {spark:.1f} s, DuckDB {duck:.1f} s",
             f"≤ Spark: {ok(full <= spark)} ({full / spark:.2f}x Spark, {full / duck:.1f}x DuckDB)"),
            ("localized update, 1 % of users (contiguous)", f"{local:.2f} s, {local_sorted:,} rows sorted",
             f"≤ 5 % of the build: {ok(local <= 0.05 * full)} ({local / full:.1%}); ≥ 20x faster than Spark: "
             f"{ok(spark / local >= 20)} ({spark / local:.0f}x)"),
            ("scattered update, 1 % of users (uniform)",
             f"{scat:.2f} s, {scat_sorted:,} rows sorted of {total_rows:,} stored",
             f"≤ 25 % of the build: {ok(scat <= 0.25 * full)} ({scat / full:.1%}); content never sorted: "
             f"{ok(scat_sorted < total_rows / 10)}"),
            (f"localized update on {args.big_events:,} events (same change)",
             f"{big_local:.2f} s (build {big:.1f} s)",
             f"÷ the 10M one ≤ 1.5: {ok(big_local / local <= 1.5)} ({big_local / local:.2f})"),
            ("external sort, 10M rows, 256 MiB budget",
             f"pds {ps_s:.1f} s, peak RSS {ps_rss:.0f} MiB; DuckDB {ds_s:.1f} s, {ds_rss:.0f} MiB",
             f"≤ DuckDB: {ok(ps_s <= ds_s)} ({ps_s / ds_s:.2f}x); RSS ≤ 512 MiB: {ok(ps_rss <= 512)}"),
            ("row form overhead", f"{per_value_us:.2f} µs per value (1M values: row {forms['row']:.2f} s, "
             f"batched {forms['batched']:.2f} s)", "reported"),
        ]  # fmt: skip
        lines.append(
            f"# pds producers vs Spark local[2] and DuckDB ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"
        )
        lines.append("")
        lines.append(
            f"Machine: {platform.machine()}, {os.cpu_count()} cores; {git_state(REPO)}. "
            f"Command: `python benches/producers_compare.py {' '.join(sys.argv[1:])}`"
        )
        lines.append("")
        lines.append("| measure | figures | target |")
        lines.append("|---|---|---|")
        lines.extend(f"| {a} | {b} | {c} |" for a, b, c in rows)
        return "\n".join(lines) + "\n"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sort_child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--big-events", type=int, default=40_000_000, help="0 skips the 40M build")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "benches" / "producers_results.md")
    args = ap.parse_args()
    report = run(args)
    print(report)
    args.out.write_text(report)
    print(json.dumps({"wrote": str(args.out)}))


if __name__ == "__main__":
    main()
