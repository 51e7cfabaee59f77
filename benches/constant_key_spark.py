"""A constant-key group through ``pds.spark.update_pipeline`` on executors of
1 GiB: does it update, and how much memory do the executors' Python workers
take?

The data is ``benches/constant_key_rss.py``'s: rows of ten int64 columns
(about 80 bytes a row, so 6M rows is 480 MB of Arrow) that all hold the
source key ``one = 0``. One stage re-keys them by ``user``, batched (a
``Produce`` given the whole group) or in row form (one row at a time).
The source's rows are written to Parquet, read by Spark as the change, and
the pipeline built on a ``local-cluster[1,1,1024]`` master (one executor
JVM of 1 GiB, one core: one Python worker, reused by every task), with
``sort_budget=64 MiB``; then updated with the whole group sent again with
new values.

Printed for the build and the update: the time, the version committed
(or the error), the rows of the stage, and the peak RSS so far of the
executor's Python worker (its ``ru_maxrss``, collected by a one-task job
on the same reused worker) and of the driver's Python (this process).
Then, per Spark stage that ran, the largest RSS any Python worker had
while it ran (a thread here samples the workers' RSS every 50 ms and the
stages the status tracker lists as active), to tell which phase holds
the memory: the map tasks (``Produce``, the key-mappings rewrite) or the
reduce tasks (the content rewrite).

    python benches/constant_key_spark.py [batched|row] [rows]     # default: batched 6000000
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

import pds
import pds.spark

form = sys.argv[1] if len(sys.argv) > 1 else "batched"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 6_000_000
BUDGET = 64 << 20
B = 65_536
VALUES = [f"c{i}" for i in range(8)]
SCHEMA = pa.schema([("one", pa.int64()), ("user", pa.int64())] + [(c, pa.int64()) for c in VALUES])


def write_rows(path: Path, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with pq.ParquetWriter(path, SCHEMA) as w:
        for start in range(0, count, B):
            m = min(B, count - start)
            cols = [np.zeros(m, dtype=np.int64), rng.integers(0, 1_000_000, m)]
            cols += [rng.integers(0, 1 << 40, m) for _ in VALUES]
            w.write_batch(pa.record_batch(cols, schema=SCHEMA), row_group_size=1 << 20)


def declare(store: Any) -> pds.Pipeline:
    p = pds.Pipeline.create(store, "ck", sort_budget=BUDGET)
    src = p.source("src", key={"one": pa.int64()}, value={"user": pa.int64(), **{c: pa.int64() for c in VALUES}})
    value = {c: pa.int64() for c in VALUES}
    if form == "batched":
        p.stage("s", sources=[src], key={"user": pa.int64()}, value=value, batched=True)(rekey)
    else:
        p.stage("s", sources=[src], key={"user": pa.int64()}, value=value)(rekey_rows)
    return p


def rekey(t: pa.Table) -> pa.Table:
    return t.select(["user", "one", *VALUES])


def rekey_rows(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, int]]]:
    for v in values:
        yield v["user"], {c: v[c] for c in VALUES}


def worker_peak(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    yield pa.record_batch(
        {"pid": [os.getpid()], "peak_mib": [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]}
    )


class StageRss:
    """Samples, every 50 ms, the RSS of every PySpark Python worker on the machine
    (``pyspark.daemon``'s forks) and the Spark stages active meanwhile;
    keeps each stage's largest worker RSS."""

    def __init__(self, spark: Any) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.peaks: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _workers() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
                found.append(proc)
        return found

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                stages = list(self.tracker.getActiveStageIds())
                rss = 0.0
                for proc in self._workers():
                    with contextlib.suppress(psutil.Error):
                        rss = max(rss, proc.memory_info().rss / 2**20)
                for sid in stages:
                    self.peaks[sid] = max(self.peaks.get(sid, 0.0), rss)
                    if sid not in self.names:
                        info = self.tracker.getStageInfo(sid)
                        self.names[sid] = f"{info.name} ({info.numTasks} tasks)" if info else "?"
            except Exception:  # noqa: BLE001 - a sampler; the session may be stopping
                pass

    def report(self) -> str:
        lines = [
            f"    stage {sid}: {self.names.get(sid, '?')}: worker peak {peak:.0f} MiB"
            for sid, peak in sorted(self.peaks.items())
        ]
        self.peaks.clear()
        return "\n".join(lines)


def main() -> None:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    spark = (
        SparkSession.builder.master("local-cluster[1,1,1024]")
        .appName("pds-constant-key-spark")
        .config("spark.executor.memory", "1g")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sampler = StageRss(spark)
    try:
        with tempfile.TemporaryDirectory(dir="/tmp") as d:
            p = declare(pds.open_store(Path(d, "lake").as_uri()))
            # The build, then an update re-sending the whole group with new values.
            for step, seed in (("build", 1), ("update", 2)):
                src = Path(d) / f"rows-{step}.parquet"
                write_rows(src, n, seed)
                t0 = time.time()
                error = None
                try:
                    version = pds.spark.update_pipeline(spark, p, {"src": spark.read.parquet(str(src))})
                except Exception as exc:  # noqa: BLE001 - reported, not raised
                    version, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                secs = time.time() - t0
                peaks = spark.range(1).repartition(1).mapInArrow(worker_peak, "pid long, peak_mib double").collect()
                driver = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                rows = p.read("s").num_rows if version else 0  # after the peaks: this read holds the stage here
                print(
                    f"{step}: form={form} rows={n} sort_budget={BUDGET >> 20}MiB "
                    f"executor=local-cluster[1,1,1024] seconds={secs:.1f} version={version} stage_rows={rows} "
                    f"worker_peak_rss_so_far={[round(r.peak_mib) for r in peaks]}MiB "
                    f"driver_peak_rss_so_far={driver:.0f}MiB" + (f" error={error}" if error else ""),
                    flush=True,
                )
                print(sampler.report(), flush=True)
                if error:
                    break
    finally:
        sampler.stop.set()
        spark.stop()


if __name__ == "__main__":
    main()
