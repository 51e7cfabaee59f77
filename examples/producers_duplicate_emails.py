"""The seed's duplicate-email finder, with the constant key: an unsorted
file of people goes in under one key, so the first stage gets them all in
one (lazy, streamed) call and re-keys them by email: the framework does
the big sort. The second stage sees each email's people together.

    .venv/bin/python examples/producers_duplicate_emails.py [--store URL]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import pds

PERSON = pa.schema([("person_id", pa.int64()), ("name", pa.string()), ("email", pa.string())])


def people_file(n: int, seed: int = 3) -> pa.Table:
    """An unsorted file of people; about 1 in 50 emails is claimed twice."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n).astype(np.int64)
    emails = [f"user{int(i) if i % 50 else int(i) + 1}@example.com" for i in ids]
    return pa.table({"person_id": ids, "name": [f"name{int(i)}" for i in ids], "email": emails})


def declare(store: Any, key: str = "pipelines/emails") -> pds.Pipeline:
    p = pds.Pipeline.create(store, key, exist_ok=True)
    src = p.source("file", key={"one": pa.int64()}, value=PERSON)

    @p.stage("by_email", sources=[src], key={"email": pa.string()}, value=PERSON)
    def by_email(one: int, people: Iterator[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
        for person in people:  # every person, streamed: the group may exceed memory
            yield person["email"], person

    @p.stage("duplicates", sources=["by_email"], key={"email": pa.string()}, value=PERSON)
    def duplicates(email: str, people: Iterator[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
        claimed = list(people)
        if len(claimed) >= 2:
            for person in claimed:
                yield email, person

    return p


def run(store: Any, n: int = 20_000) -> dict[str, pa.Table]:
    p = declare(store)
    people = people_file(n)
    # The constant key: every row under key 1.
    p.update({"file": people.add_column(0, "one", pa.array([1] * n, pa.int64()))})
    return {"people": people, "duplicates": p.read("duplicates")}


def main() -> None:
    default = (Path(__file__).resolve().parent.parent / "demo-data").as_uri()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=default)
    out = run(pds.open_store(ap.parse_args().store))
    d = out["duplicates"]
    print(f"{d.num_rows} people share {len(set(d.column('email').to_pylist()))} emails; the first few:")
    for row in d.slice(0, 6).to_pylist():
        print(f"  {row['email']:<24} {row['person_id']:>6} {row['name']}")


if __name__ == "__main__":
    main()
