"""An orders ⋈ customers join: a stage with two sources keyed by customer.
Produce gets the customer id and one lazy sequence per source; one customer
row is kept in memory while that customer's orders stream past (the seed's
one-to-many case). When only orders change, the customers side is read from
the stored content for just the customers touched.

    .venv/bin/python examples/producers_join.py [--store URL]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import pds


def customers(n: int) -> pa.Table:
    countries = ["DE", "FR", "NL", "US", "JP"]
    return pa.table(
        {
            "customer_id": pa.array(np.arange(n, dtype=np.int64)),
            "country": [countries[i % len(countries)] for i in range(n)],
        }
    )


def orders(n: int, n_customers: int, seed: int = 5, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "order_id": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "customer_id": pa.array(rng.integers(0, n_customers, n)),
            "amount": pa.array(rng.integers(1, 500, n)),
        }
    )


def declare(store: Any, key: str = "pipelines/orders") -> pds.Pipeline:
    p = pds.Pipeline.create(store, key, exist_ok=True)
    cust = p.source("customers", key={"customer_id": pa.int64()}, value={"country": pa.string()})
    ords = p.source("orders", key={"customer_id": pa.int64()}, value={"order_id": pa.int64(), "amount": pa.int64()})

    @p.stage(
        "enriched",
        sources=[ords, cust],
        key={"order_id": pa.int64()},
        value={"customer_id": pa.int64(), "country": pa.string(), "amount": pa.int64()},
    )
    def enriched(
        customer_id: int, its_orders: Iterator[dict[str, Any]], customer: Iterator[dict[str, Any]]
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        c = next(customer, None)  # the one side: one row kept
        for o in its_orders:  # the many side: streamed
            country = c["country"] if c else None
            yield o["order_id"], {"customer_id": customer_id, "country": country, "amount": o["amount"]}

    @p.stage("by_country", sources=["enriched"], key={"country": pa.string()}, value={"amount": pa.int64()})
    def by_country(order_id: int, rows: Iterator[dict[str, Any]]) -> Iterator[tuple[str, int]]:
        for r in rows:
            yield r["country"] or "?", r["amount"]

    return p


def run(store: Any) -> dict[str, Any]:
    p = declare(store)
    c, o = customers(200), orders(5_000, 200)
    # A source's upserts replace every row of each key: all of a customer's orders.
    p.update({"customers": c, "orders": o})
    more = orders(50, 200, seed=9, start=10_000)
    touched = pc.is_in(o["customer_id"], value_set=pa.array(sorted(set(more["customer_id"].to_pylist()))))
    o2 = pa.concat_tables([o.filter(touched), more])  # those customers' orders, old and new
    p.update({"orders": o2})
    return {
        "customers": c,
        "orders": pa.concat_tables([o, more]),
        "enriched": p.read("enriched"),
        "by_country": p.read("by_country"),
    }


def main() -> None:
    default = (Path(__file__).resolve().parent.parent / "demo-data").as_uri()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=default)
    out = run(pds.open_store(ap.parse_args().store))
    totals = out["by_country"].group_by("country").aggregate([("amount", "sum")])
    for row in totals.sort_by("country").to_pylist():
        print(f"{row['country']}  {row['amount_sum']:>8}")


if __name__ == "__main__":
    main()
