"""A merge of two feeders: EU and US sales arrive as separate sources with
the same key and value schema; the merge reads as one source, and the stage
after it sees every feeder's rows of each key together. When only the US
feeder changes a key, the merged update still carries the EU rows of that
key (the seed's three layers), so the stage gets each key whole.

    .venv/bin/python examples/producers_merge.py [--store URL]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

import pds

SALE = {"product": pa.string(), "units": pa.int64()}


def declare(store: Any, key: str = "pipelines/sales") -> pds.Pipeline:
    p = pds.Pipeline.create(store, key, exist_ok=True)
    eu = p.source("sales_eu", key={"day": pa.date32()}, value=SALE)
    us = p.source("sales_us", key={"day": pa.date32()}, value=SALE)
    both = p.merge("sales", [eu, us])

    @p.stage("units_per_day", sources=[both], key={"day": pa.date32()}, value={"units": pa.int64()}, batched=True)
    def units_per_day(groups: pa.Table) -> pa.Table:
        # Whole days (both regions), sorted by day: one aggregate per day.
        return groups.group_by("day").aggregate([("units", "sum")]).rename_columns(["day", "units"])

    return p


def sales(days: list[str], product: str, units: int) -> pa.Table:
    return pa.table(
        {
            "day": pa.array([datetime.date.fromisoformat(d) for d in days], pa.date32()),
            "product": [product] * len(days),
            "units": [units] * len(days),
        }
    )


def run(store: Any) -> dict[str, pa.Table]:
    p = declare(store)
    days = ["2026-11-01", "2026-11-02", "2026-11-03"]
    p.update({"sales_eu": sales(days, "tea", 10), "sales_us": sales(days, "coffee", 7)})
    first = p.read("units_per_day")
    # The US corrects Nov 2: only that day is recomputed, with the EU rows too.
    p.update({"sales_us": sales(["2026-11-02"], "coffee", 1)})
    return {"first": first, "after": p.read("units_per_day"), "merged_update": p.changes("sales").upserts}  # type: ignore[dict-item]


def main() -> None:
    default = (Path(__file__).resolve().parent.parent / "demo-data").as_uri()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=default)
    out = run(pds.open_store(ap.parse_args().store))
    for row in out["after"].to_pylist():
        print(f"{row['day']}  {row['units']:>4} units")


if __name__ == "__main__":
    main()
