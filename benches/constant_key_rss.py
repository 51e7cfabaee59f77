"""Peak RSS of a constant-key source re-keyed by one stage (issue P, item 2):
6M rows of ten int64 columns (about 480 MB of Arrow) under one key, streamed
in from a reader, with ``sort_budget=64 MiB`` on file://; the target is a peak
RSS of at most 512 MiB. Run it in a fresh process (ru_maxrss is the process's
peak):

    python benches/constant_key_rss.py [batched|row|join|update] [rows] [sort_budget_mib] [none|read|stream]

The fourth argument reads the stage's output after the build, in the same
process: ``read`` with ``Pipeline.read`` (the whole table in memory),
``stream`` with ``Pipeline.read_batches``; the line then gives the peak
after the build and after the read.

``join``: the rows split over two such sources (the same key), joined by a
batched stage that counts each call's rows per side (a first build of a join
whose one key holds every row).

``update``: a source alone, built in a child process, then updated here with
the whole group sent again (new values): the peak of the update alone (a key
spanning every part, rewritten as a stream). Measured 2026-11-27: 833 MiB
(4.3 s) at 6M rows, 863 MiB (10.7 s) at 12M; before the streamed rewrite,
909 MiB / 1,372 MiB (and 1,716 MiB for 12M rows upserted under a new key),
growing with the group.

Measured on the shared 2-core machine (issue P, item 2): before keys could
span parts, batched 1682 MiB (the whole group one part, built, fetched and
decoded at once); after, batched 665 MiB (452 MiB with MALLOC_ARENA_MAX=2:
the rest is glibc's per-thread arenas keeping freed memory), row form 545
MiB; the source's update alone, 262 MiB. With the merge by key range
(2026-11-24): glibc malloc 745-983 MiB batched, 840-938 MiB row form
across runs (arenas per thread); with mimalloc, pds's allocator since,
718-737 MiB batched (13.8-20.2 s), 695-743 MiB row form. Returning freed
memory sooner meets the target nearly or fully, but slows pds down too
much to be the default: MIMALLOC_PURGE_DELAY=1 516 / 518 MiB (24.9 s /
48.3 s), MIMALLOC_PURGE_DELAY=0 474 MiB batched (33.9 s). A join's first
build over two such sources of 3M rows each (``join``), streamed in pieces
of 524,288 rows a side: 706 MiB (7.3 s, 6 calls).

2026-11-28, after parts were encoded as their rows arrive and scans decoded a
batch at a time, alternated with the build before (this sitting): batched
568-601 MiB (was 640-649), row form 567-617 (636-675), update 549 (609-646);
``row ... read`` peaks at 892-904 MiB either way (the 6M-row table is 411 MiB
of Arrow), ``row ... stream`` stays at the build's peak.
"""

import itertools
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

import pds

form = sys.argv[1] if len(sys.argv) > 1 else "batched"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 6_000_000
budget = int(sys.argv[3]) << 20 if len(sys.argv) > 3 else 64 << 20
then = sys.argv[4] if len(sys.argv) > 4 else "none"
B = 65_536
VALUES = [f"c{i}" for i in range(8)]


def reader(count: int, seed: int = 1) -> pa.RecordBatchReader:
    schema = pa.schema([("one", pa.int64()), ("user", pa.int64())] + [(c, pa.int64()) for c in VALUES])

    def gen() -> Iterator[pa.RecordBatch]:
        rng = np.random.default_rng(seed)
        for start in range(0, count, B):
            m = min(B, count - start)
            cols = [np.zeros(m, dtype=np.int64), rng.integers(0, 1_000_000, m)]
            cols += [rng.integers(0, 1 << 40, m) for _ in VALUES]
            yield pa.record_batch(cols, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, gen())


SOURCE_VALUE = {"user": pa.int64(), **{c: pa.int64() for c in VALUES}}

if form == "_build":  # the update's child: build the source at argv[4]
    p = pds.Pipeline.create(pds.open_store(f"file://{sys.argv[4]}"), "ck", sort_budget=budget, workers=1)
    p.source("src", key={"one": pa.int64()}, value=SOURCE_VALUE)
    p.update({"src": reader(n)})
    sys.exit(0)

if form == "update":
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        subprocess.run([sys.executable, __file__, "_build", str(n), str(budget >> 20), d], check=True)
        p = pds.Pipeline.open(pds.open_store(f"file://{d}"), "ck")
        p.source("src", key={"one": pa.int64()}, value=SOURCE_VALUE)
        t0 = time.time()
        version = p.update({"src": reader(n, seed=2)})
        secs = time.time() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        assert version == 2
        assert p.read("src").num_rows == n  # after the peak
        print(f"form=update rows={n} budget={budget >> 20}MiB seconds={secs:.1f} peak_rss={peak:.0f}MiB")
    sys.exit(0)

with tempfile.TemporaryDirectory(dir="/tmp") as d:
    store = pds.open_store(f"file://{d}")
    p = pds.Pipeline.create(store, "ck", sort_budget=budget, workers=1)
    src = p.source("src", key={"one": pa.int64()}, value={"user": pa.int64(), **{c: pa.int64() for c in VALUES}})
    value = {c: pa.int64() for c in VALUES}
    if form == "join":
        src2 = p.source("src2", key={"one": pa.int64()}, value={"user": pa.int64(), **{c: pa.int64() for c in VALUES}})
        calls = itertools.count()

        def counted(a: pa.Table, b: pa.Table) -> pa.Table:
            return pa.table({"one": [0], "part": [next(calls)], "na": [a.num_rows], "nb": [b.num_rows]})

        p.stage(
            "s",
            sources=[src, src2],
            key={"one": pa.int64(), "part": pa.int64()},
            value={"na": pa.int64(), "nb": pa.int64()},
            batched=True,
        )(counted)
    elif form == "batched":
        p.stage("s", sources=[src], key={"user": pa.int64()}, value=value, batched=True)(
            lambda t: t.select(["user", "one", *VALUES])
        )
    else:

        @p.stage("s", sources=[src], key={"user": pa.int64()}, value=value)
        def s(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, int]]]:
            for v in values:
                yield v["user"], {c: v[c] for c in VALUES}

    t0 = time.time()
    if form == "join":
        p.update({"src": reader(n // 2), "src2": reader(n - n // 2)})
    else:
        p.update({"src": reader(n)})
    secs = time.time() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    after = ""
    if then == "read":
        rows = p.read("s").num_rows
    elif then == "stream":
        rows = sum(b.num_rows for b in p.read_batches("s"))
    else:
        rows = p.read("s").num_rows if n <= 1_000_000 else -1
    if then != "none":
        after = f" peak_after_{then}={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}MiB"
    if form == "join":
        t = p.read("s")
        assert sum(t["na"].to_pylist()) + sum(t["nb"].to_pylist()) == n, "every row counted once"
        rows = t.num_rows
    line = f"form={form} rows={n} budget={budget >> 20}MiB seconds={secs:.1f} peak_rss={peak:.0f}MiB out_rows={rows}"
    print(line + after)
