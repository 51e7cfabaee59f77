"""A nightly incremental update: each night's file arrives under its date
as the source key, so no pre-sorting is needed and any day can be corrected
later (its upsert replaces that day whole). Each night re-runs Produce only
for the changed day, and the per-customer totals only for the customers
that day touches.

    .venv/bin/python examples/producers_nightly.py [--store URL]
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import pds

ORDER = {"customer": pa.string(), "amount": pa.int64()}


def night(day: datetime.date, n: int = 2_000, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed or day.toordinal())
    return pa.table(
        {
            "day": pa.array([day] * n, pa.date32()),
            "customer": [f"c{int(c):04d}" for c in rng.integers(0, 500, n)],
            "amount": pa.array(rng.integers(1, 100, n)),
        }
    )


def declare(store: Any, key: str = "pipelines/nightly", calls: dict[str, int] | None = None) -> pds.Pipeline:
    counts = calls if calls is not None else {}
    p = pds.Pipeline.create(store, key, exist_ok=True)
    daily = p.source("orders", key={"day": pa.date32()}, value=ORDER)

    @p.stage(
        "by_customer",
        sources=[daily],
        key={"customer": pa.string()},
        value={"day": pa.date32(), "amount": pa.int64()},
        batched=True,
    )
    def by_customer(days: pa.Table) -> pa.Table:
        counts["by_customer"] = counts.get("by_customer", 0) + days.num_rows
        # Per (day, customer): the day's total; the day is the source key.
        return (
            days.group_by(["customer", "day"])
            .aggregate([("amount", "sum")])
            .rename_columns(["customer", "day", "amount"])
        )

    @p.stage("totals", sources=["by_customer"], key={"customer": pa.string()}, value={"amount": pa.int64()})
    def totals(customer: str, days: Iterator[dict[str, Any]]) -> Iterator[tuple[str, int]]:
        counts["totals"] = counts.get("totals", 0) + 1
        yield customer, sum(d["amount"] for d in days)

    return p


def run(store: Any, nights: int = 7) -> dict[str, Any]:
    calls: dict[str, int] = {}
    p = declare(store, calls=calls)
    start = datetime.date(2026, 11, 1)
    log = []
    for i in range(nights):
        calls.clear()
        p.update({"orders": night(start + datetime.timedelta(days=i))})
        log.append(("load", start + datetime.timedelta(days=i), dict(calls)))
    # Night 3 is corrected (re-sent whole), night 5 withdrawn.
    calls.clear()
    fixed = night(start + datetime.timedelta(days=2), seed=99)
    p.update(
        {
            "orders": pds.Changes(
                upserts=fixed, deletes=pa.table({"day": pa.array([start + datetime.timedelta(days=4)], pa.date32())})
            )
        }
    )
    log.append(("correct", start + datetime.timedelta(days=2), dict(calls)))
    kept = [night(start + datetime.timedelta(days=i)) for i in range(nights) if i not in (2, 4)]
    return {"totals": p.read("totals"), "inputs": pa.concat_tables([*kept, fixed]), "log": log, "history": p.history()}


def main() -> None:
    default = (Path(__file__).resolve().parent.parent / "demo-data").as_uri()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=default)
    out = run(pds.open_store(ap.parse_args().store))
    for what, day, calls in out["log"]:
        rows, totals = calls.get("by_customer", 0), calls.get("totals", 0)
        print(f"{what:<8} {day}  rows handed to by_customer: {rows:>5}  totals calls: {totals:>4}")
    print(f"{out['totals'].num_rows} customers; versions: {[h['version'] for h in out['history']]}")


if __name__ == "__main__":
    main()
