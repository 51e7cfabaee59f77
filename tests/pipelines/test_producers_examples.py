"""The producers examples (issue E-7) run as tests, on memory, file and
SeaweedFS S3, each checked against the same result computed independently
in plain Python."""

from __future__ import annotations

import importlib.util
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from remote_store import Store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.spec("E-7")
def test_average_salary_by_age_range(fast_store: Store) -> None:
    ex = load("producers_salary")
    out = ex.run(fast_store, n=5_000)
    people = ex.persons(5_000).to_pylist()
    for p in people[:10]:
        p["salary"] = 500_000.0
    sums: dict[str, list[float]] = defaultdict(list)
    for p in people:
        sums[ex.age_range(p["age"])].append(p["salary"])
    got = {r["age_range"]: r["mean"] for r in out["after"].to_pylist()}
    assert got.keys() == sums.keys()
    for k, v in sums.items():
        assert got[k] == pytest.approx(sum(v) / len(v))
    assert out["before"].num_rows == len(sums)
    # Ten partials per age range at most: the (age_range, R) trick.
    assert out["partials"].num_rows <= 10 * len(sums)


@pytest.mark.spec("E-7")
def test_duplicate_emails_with_the_constant_key(fast_store: Store) -> None:
    ex = load("producers_duplicate_emails")
    out = ex.run(fast_store, n=5_000)
    by_email: dict[str, list[int]] = defaultdict(list)
    for p in out["people"].to_pylist():
        by_email[p["email"]].append(p["person_id"])
    want = sorted((e, i) for e, ids in by_email.items() if len(ids) > 1 for i in ids)
    d = out["duplicates"]
    assert sorted(zip(d.column("email").to_pylist(), d.column("person_id").to_pylist(), strict=True)) == want
    assert d.column("email").to_pylist() == sorted(d.column("email").to_pylist())


@pytest.mark.spec("E-7")
def test_orders_join_customers(fast_store: Store) -> None:
    ex = load("producers_join")
    out = ex.run(fast_store)
    country = {r["customer_id"]: r["country"] for r in out["customers"].to_pylist()}
    want = sorted(
        (o["order_id"], o["customer_id"], country[o["customer_id"]], o["amount"]) for o in out["orders"].to_pylist()
    )
    got = [(r["order_id"], r["customer_id"], r["country"], r["amount"]) for r in out["enriched"].to_pylist()]
    assert got == want
    totals: dict[str, int] = defaultdict(int)
    for _, _, c, a in want:
        totals[c] += a
    got_totals: dict[str, int] = defaultdict(int)
    for r in out["by_country"].to_pylist():
        got_totals[r["country"]] += r["amount"]
    assert got_totals == totals


@pytest.mark.spec("E-7")
def test_merge_of_two_feeders(fast_store: Store) -> None:
    ex = load("producers_merge")
    out = ex.run(fast_store)
    assert [r["units"] for r in out["first"].to_pylist()] == [17, 17, 17]
    assert [r["units"] for r in out["after"].to_pylist()] == [17, 11, 17]
    merged: Any = out["merged_update"]
    assert sorted(merged.column("product").to_pylist()) == ["coffee", "tea"], "the EU rows of the changed day too"


@pytest.mark.spec("E-7")
def test_nightly_incremental_update(fast_store: Store) -> None:
    ex = load("producers_nightly")
    out = ex.run(fast_store, nights=5)
    want: dict[str, int] = defaultdict(int)
    for r in out["inputs"].to_pylist():
        want[r["customer"]] += r["amount"]
    assert {r["customer"]: r["amount"] for r in out["totals"].to_pylist()} == want
    for what, _, calls in out["log"]:
        # Each night hands by_customer that night's rows only (a correction: the corrected day).
        assert calls["by_customer"] == 2_000, (what, calls)
    assert [h["version"] for h in out["history"]] == list(range(6, -1, -1))
