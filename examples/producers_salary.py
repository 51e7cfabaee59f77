"""The seed's average salary by age range, with the ``(age_range, R)``
partitioning trick: a compound key spreads each age range over 10 groups,
so no single Produce call (or, on a cluster, task) gets a whole range; the
partial results carry (count, sum), because averages of averages are wrong.

    .venv/bin/python examples/producers_salary.py [--store URL]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import pds

PERSON = pa.schema([("person_id", pa.int64()), ("age", pa.int64()), ("salary", pa.float64())])


def persons(n: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "person_id": pa.array(np.arange(n, dtype=np.int64)),
            "age": pa.array(rng.integers(18, 80, n)),
            "salary": pa.array(rng.gamma(4.0, 9000.0, n).round(2)),
        }
    )


def age_range(age: int) -> str:
    low = age // 10 * 10
    return f"{low}-{low + 9}"


def declare(store: Any, key: str = "pipelines/salary") -> pds.Pipeline:
    p = pds.Pipeline.create(store, key, exist_ok=True)
    src = p.source("persons", key={"person_id": pa.int64()}, value=PERSON)

    # 1. Each person's salary under (age_range, R): R spreads a range over 10 groups.
    @p.stage(
        "by_bucket", sources=[src], key={"age_range": pa.string(), "r": pa.int64()}, value={"salary": pa.float64()}
    )
    def by_bucket(person_id: int, people: Iterator[dict[str, Any]]) -> Iterator[tuple[tuple[str, int], float]]:
        for person in people:
            yield (age_range(person["age"]), person_id % 10), person["salary"]

    # 2. Per (age_range, R): the count and the sum (associative), keyed by age_range.
    @p.stage(
        "partials", sources=["by_bucket"], key={"age_range": pa.string()}, value={"n": pa.int64(), "sum": pa.float64()}
    )
    def partials(key: tuple[str, int], salaries: Iterator[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
        values = [s["salary"] for s in salaries]
        yield key[0], {"n": len(values), "sum": sum(values)}

    # 3. Per age_range: the mean over every partial.
    @p.stage("average", sources=["partials"], key={"age_range": pa.string()}, value={"mean": pa.float64()})
    def average(key: str, parts: Iterator[dict[str, Any]]) -> Iterator[tuple[str, float]]:
        n = s = 0.0
        for part in parts:
            n += part["n"]
            s += part["sum"]
        yield key, s / n

    return p


def run(store: Any, n: int = 20_000) -> dict[str, pa.Table]:
    p = declare(store)
    people = persons(n)
    p.update({"persons": people})
    before = p.read("average")
    # Ten people get a raise: only their groups are recomputed.
    raised = people.slice(0, 10).set_column(2, "salary", pa.array([500_000.0] * 10))
    p.update({"persons": raised})
    return {"before": before, "after": p.read("average"), "partials": p.read("partials")}


def main() -> None:
    default = (Path(__file__).resolve().parent.parent / "demo-data").as_uri()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=default)
    out = run(pds.open_store(ap.parse_args().store))
    for row in out["after"].to_pylist():
        print(f"{row['age_range']:>6}  mean salary {row['mean']:>10.2f}")


if __name__ == "__main__":
    main()
