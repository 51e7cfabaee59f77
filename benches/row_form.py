"""The row form's overhead per value (issue P, item 5), alone and quickly:
the one-stage pipeline of ``producers_compare.py`` ("row form overhead"),
row form against batched, ``(row - batched) / values``; and two cut-down row
forms that show where the time goes: ``callonly`` (Produce called once per
key, reads and emits nothing) and ``readonly`` (reads every value, emits
nothing)::

    python benches/row_form.py                    # 1M values, 100k keys, best of 3
    python benches/row_form.py --cpu --values 200000

``--cpu`` times process CPU time (all threads) rather than wall time: steadier
on a machine that other work shares, and the same when it is idle.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

import pds

EVENTS = {"ts": pa.timestamp("us"), "amount": pa.int64()}


def events(n: int, users: int) -> pa.Table:
    rng = np.random.default_rng(5)
    ts = 1_700_000_000_000_000 + rng.integers(0, 10**12, n)
    return pa.table(
        {
            "user": pa.array(rng.integers(0, users, n), pa.int64()),
            "ts": pa.array(ts, pa.timestamp("us")),
            "amount": pa.array(rng.integers(1, 100, n), pa.int64()),
        }
    )


def pipeline(form: str) -> pds.Pipeline:
    p = pds.Pipeline.create(pds.open_store("memory://"), "r")
    ev = p.source("events", key={"user": pa.int64()}, value=EVENTS)
    key, value = {"user": pa.int64()}, {"amount": pa.int64()}
    if form == "batched":
        p.stage("s", sources=[ev], key=key, value=value, batched=True)(lambda t: t.select(["user", "amount"]))
    elif form == "callonly":
        p.stage("s", sources=[ev], key=key, value=value)(lambda k, values: None)
    elif form == "readonly":

        @p.stage("s", sources=[ev], key=key, value=value)
        def read(k: int, values: Iterator[dict[str, Any]]) -> None:
            for _ in values:
                pass

    else:

        @p.stage("s", sources=[ev], key=key, value=value)
        def row(k: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
            for v in values:
                yield k, v["amount"]

    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--values", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="time process CPU time, not wall time")
    args = ap.parse_args()
    clock = time.process_time if args.cpu else time.perf_counter
    table = events(args.values, args.values // 10)
    best: dict[str, float] = {}
    for form in ("batched", "callonly", "readonly", "row"):
        for _ in range(args.repeat):
            p = pipeline(form)
            start = clock()
            p.update({"events": table})
            best[form] = min(best.get(form, float("inf")), clock() - start)
        print(f"{form:9} {best[form]:.3f} s")
    per = {f: (best[f] - best["batched"]) / args.values * 1e6 for f in ("callonly", "readonly", "row")}
    print(f"row form overhead: {per['row']:.2f} µs per value ({'CPU' if args.cpu else 'wall'} time)")
    reading = per["readonly"] - per["callonly"]
    emitting = per["row"] - per["readonly"]
    print(f"  reading values {reading:.2f} µs, yielding and emitting pairs {emitting:.2f} µs per value")


if __name__ == "__main__":
    main()
