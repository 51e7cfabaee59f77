"""pds.Pipeline (issue E): the API contract, incremental semantics, failure
model and bad input, on the memory, file and SeaweedFS S3 stores. Each test
names the item of the issue it covers in its spec marker (E-1 ... E-5).
"""

from __future__ import annotations

import datetime
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from remote_store import AlreadyExists, CapabilityNotSupported, NotFound, Store
from remote_store.backends import MemoryBackend
from store_kinds import REMOTE, lake_url

import pds
from pds import Changes, CommitConflict, GraphMismatch, Pipeline, ProduceError, SchemaMismatch

from helpers import files

PERSON = pa.schema([("person_id", pa.int64()), ("name", pa.string()), ("email", pa.string())])


def people(rows: list[tuple[int, str, str]]) -> pa.Table:
    return pa.Table.from_pylist([{"person_id": i, "name": n, "email": e} for i, n, e in rows], schema=PERSON)


def hr(store: Store, key: str = "pipelines/hr", **opts: Any) -> tuple[Pipeline, dict[str, int]]:
    """The issue's example: people -> by_email -> totals (batched). Returns
    the pipeline and a count of Produce calls per stage."""
    calls = {"by_email": 0, "totals": 0}
    try:
        p = Pipeline.open(store, key, **opts)
    except NotFound:
        p = Pipeline.create(store, key, **opts)
    src = p.source("people", key={"person_id": pa.int64()}, value=PERSON)

    @p.stage("by_email", sources=[src], key={"email": pa.string()}, value=PERSON)
    def by_email(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
        calls["by_email"] += 1
        for person in values:
            yield person["email"], person

    @p.stage("totals", sources=[by_email], key={"email": pa.string()}, value={"n": pa.int64()}, batched=True)
    def totals(groups: pa.Table) -> pa.Table:
        calls["totals"] += 1
        # One row per source key (by_email's key is the email): its count.
        counts = groups.group_by("email").aggregate([("person_id", "count")])
        return pa.table({"email": counts["email"], "n": counts["person_id_count"]})

    return p, calls


@pytest.mark.spec("E-5")
def test_the_contract_example_builds_updates_and_reads(fast_store: Store) -> None:
    p, calls = hr(fast_store)
    assert p.version == 0
    v = p.update({"people": people([(1, "ann", "a@x"), (2, "bob", "b@x"), (3, "al", "a@x")])})
    assert v == 1 == p.version
    assert p.read("totals").to_pylist() == [{"email": "a@x", "n": 2}, {"email": "b@x", "n": 1}]
    got = p.read("by_email")
    assert got.column_names == ["email", "person_id", "name"]
    assert got.column("email").to_pylist() == ["a@x", "a@x", "b@x"]
    assert p.read("people").column("person_id").to_pylist() == [1, 2, 3]
    # An update: bob moves to a@x, al is deleted.
    v = p.update({"people": Changes(upserts=people([(2, "bob", "a@x")]), deletes=pa.table({"person_id": [3]}))})
    assert v == 2
    assert calls["by_email"] == 3 + 1, "a deleted key calls no Produce"
    assert p.read("totals").to_pylist() == [{"email": "a@x", "n": 2}]
    feed = p.changes("totals")
    assert feed.upserts is not None and feed.deletes is not None
    assert feed.upserts.to_pylist() == [{"email": "a@x", "n": 2}]
    assert feed.deletes.to_pylist() == [{"email": "b@x"}]
    # Time travel.
    assert p.read("totals", version=1).num_rows == 2
    assert p.changes("people", version=1).upserts.num_rows == 3  # type: ignore[union-attr]
    hist = p.history()
    assert [h["version"] for h in hist] == [2, 1, 0]  # newest first, as Table.history
    assert [h["operation"] for h in hist] == ["update", "update", "create"]
    assert [h["previous"] for h in hist] == [1, 0, None]
    assert hist[0]["parameters"]["sources"]["people"] == {"upserts": 1, "deletes": 1}
    assert isinstance(hist[0]["created_at"], datetime.datetime)
    assert p.history(limit=1) == hist[:1]
    with pytest.raises(ValueError, match="limit"):
        p.history(limit=0)
    # Reopened elsewhere, with the same declarations: same state.
    q, _ = hr(fast_store)
    assert q.version == 2
    assert q.read("totals").equals(p.read("totals"))
    # Reading needs no declarations.
    r = Pipeline.open(fast_store, "pipelines/hr")
    assert r.read("by_email").num_rows == 2


@pytest.mark.spec("E-3")
def test_an_update_reruns_produce_only_for_changed_keys_and_rewrites_only_touched_parts(fast_store: Store) -> None:
    # workers=1: Produce runs in this process, where `seen` is.
    p = Pipeline.create(fast_store, "p", target_rows=50, workers=1)
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    seen: list[int] = []

    @p.stage("t", sources=[src], key={"t": pa.int64()}, value={"v": pa.int64()})
    def t(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        seen.append(key)
        for v in values:
            yield key // 10, {"v": v["v"]}

    n = 5000
    p.update({"s": pa.table({"k": pa.array(range(n), pa.int64()), "v": pa.array(range(n), pa.int64())})})
    assert len(seen) == n
    before = set(files(fast_store, "p/nodes"))
    seen.clear()
    p.update({"s": pa.table({"k": pa.array([2500], pa.int64()), "v": pa.array([-1], pa.int64())})})
    assert seen == [2500]
    new = set(files(fast_store, "p/nodes")) - before
    # s: one content part + its update; t: one content part, one mappings part, its update.
    assert 3 <= len(new) <= 6, sorted(new)
    assert p.read("t").filter(pc.field("t") == 250).column("v").to_pylist() == [-1, *range(2501, 2510)]
    feed = p.changes("t")
    assert feed.upserts is not None and feed.upserts.column("t").to_pylist() == [250] * 10


@pytest.mark.spec("E-3")
def test_mixing_a_deletion_and_an_upsert_of_one_key_is_refused_before_any_io(fast_store: Store) -> None:
    p, _ = hr(fast_store)
    p.update({"people": people([(1, "ann", "a@x")])})
    before = files(fast_store, "pipelines")
    with pytest.raises(ValueError, match="both upserted and deleted"):
        p.update({"people": Changes(upserts=people([(5, "x", "y")]), deletes=pa.table({"person_id": [5]}))})
    with pytest.raises(ValueError, match="not a declared source"):
        p.update({"nope": people([])})
    with pytest.raises(SchemaMismatch, match="missing columns"):
        p.update({"people": pa.table({"person_id": [1]})})
    with pytest.raises(SchemaMismatch, match="never null"):
        p.update({"people": pa.table({"person_id": pa.array([None], pa.int64()), "name": ["a"], "email": ["b"]})})
    assert files(fast_store, "pipelines") == before
    assert p.version == 1


@pytest.mark.spec("E-5")
def test_a_produce_that_raises_commits_nothing_and_names_stage_and_key(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p")
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

    @p.stage("inv", sources=[src], key={"k": pa.int64()}, value={"r": pa.float64()})
    def inv(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, float]]:
        for v in values:
            yield key, 1 / v["v"]

    p.update({"s": pa.table({"k": [1, 2], "v": [1, 2]})})
    listed = files(fast_store, "p")
    with pytest.raises(ProduceError, match=r"stage 'inv' failed on key 7") as err:
        p.update({"s": pa.table({"k": [7], "v": [0]})})
    assert isinstance(err.value, ZeroDivisionError), "still the user's exception class"
    assert err.value.stage == "inv" and err.value.key == 7
    assert p.refresh() == 1
    assert files(fast_store, "p") == listed, "what the failed update wrote was removed"
    assert p.read("s").column("k").to_pylist() == [1, 2]


@pytest.mark.spec("E-5")
def test_output_that_does_not_match_the_declared_schema_is_refused_naming_the_stage(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p")
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    mode = {"row": "ok"}

    @p.stage("rows", sources=[src], key={"k": pa.int64()}, value={"v": pa.int64()})
    def rows(key: int, values: Iterator[dict[str, Any]]) -> Iterator[Any]:
        for v in values:
            if mode["row"] == "extra":
                yield key, {"v": v["v"], "w": 1}
            elif mode["row"] == "type":
                yield key, {"v": "not an int"}
            elif mode["row"] == "shape":
                yield key
            else:
                yield key, v["v"]

    @p.stage("batch", sources=[src], key={"k": pa.int64()}, value={"v": pa.int64()}, batched=True)
    def batch(t: pa.Table) -> pa.Table:
        if mode.get("batch") == "drop":
            return t.select(["v"])
        return t

    p.update({"s": pa.table({"k": [1], "v": [1]})})
    assert p.read("rows").to_pylist() == [{"k": 1, "v": 1}]
    for m, msg in [("extra", "extra fields"), ("type", "rows"), ("shape", "pairs")]:
        mode["row"] = m
        with pytest.raises(SchemaMismatch, match=f"stage 'rows'.*{msg}|{msg}.*"):
            p.update({"s": pa.table({"k": [2], "v": [2]})})
    mode["row"] = "ok"
    mode["batch"] = "drop"
    with pytest.raises(SchemaMismatch, match=r"stage 'batch'.*missing columns"):
        p.update({"s": pa.table({"k": [2], "v": [2]})})
    assert p.refresh() == 1


@pytest.mark.spec("E-5")
def test_a_declared_graph_that_differs_from_the_stored_one_is_refused(fast_store: Store) -> None:
    p, _ = hr(fast_store)
    p.update({"people": people([(1, "ann", "a@x")])})
    q = Pipeline.open(fast_store, "pipelines/hr")
    with pytest.raises(GraphMismatch, match=r"people.*key"):
        q.source("people", key={"person_id": pa.int64(), "name": pa.string()}, value=PERSON)
    q.source("people", key={"person_id": pa.int64()}, value=PERSON)
    with pytest.raises(GraphMismatch, match="sources"):
        q.stage("by_email", sources=["people", "people"], key={"email": pa.string()}, value=PERSON)(lambda k, a, b: [])
    # A stored stage left undeclared: update refuses.
    with pytest.raises(GraphMismatch, match="not declared"):
        q.update({"people": people([(2, "b", "b@x")])})
    # New nodes may be added: built from the whole content of their sources.
    r, _ = hr(fast_store)

    @r.stage("names", sources=["people"], key={"name": pa.string()}, value={"person_id": pa.int64()})
    def names(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[str, int]]:
        for v in values:
            yield v["name"], key

    r.update({"people": people([(2, "bob", "b@x")])})
    assert r.read("names").to_pylist() == [{"name": "ann", "person_id": 1}, {"name": "bob", "person_id": 2}]


@pytest.mark.spec("E-5")
def test_rebuild_recomputes_a_stage_whose_code_changed_and_propagates(fast_store: Store) -> None:
    factor = {"x": 1}

    def declare() -> Pipeline:
        p = (
            Pipeline.open(fast_store, "p")
            if fast_store.exists("p/_latest_manifest")
            else Pipeline.create(fast_store, "p")
        )
        s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

        @p.stage("scaled", sources=[s], key={"k": pa.int64()}, value={"v": pa.int64()})
        def scaled(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
            for v in values:
                if v["v"] * factor["x"] > 0:
                    yield key, v["v"] * factor["x"]

        @p.stage("total", sources=["scaled"], key={"one": pa.int64()}, value={"sum": pa.int64()})
        def total(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
            yield 1, sum(v["v"] for v in values)

        return p

    p = declare()
    p.update({"s": pa.table({"k": [1, 2, 3], "v": [1, 2, 3]})})
    assert sum(p.read("total").column("sum").to_pylist()) == 6
    factor["x"] = -1  # every value now produces nothing
    q = declare()
    v = q.rebuild("scaled")
    assert q.read("scaled").num_rows == 0
    assert q.read("total").num_rows == 0
    assert q.changes("scaled").deletes.column("k").to_pylist() == [1, 2, 3]  # type: ignore[union-attr]
    assert q.history(1)[0] == {**q.history(1)[0], "version": v, "operation": "rebuild"}
    with pytest.raises(ValueError, match="not a declared stage"):
        q.rebuild("s")


@pytest.mark.spec("E-1")
def test_a_group_larger_than_a_chunk_streams_and_the_constant_key_trick_sorts(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p", sort_budget=256 * 1024, target_rows=4000)
    src = p.source("events", key={"one": pa.int64()}, value={"user": pa.string(), "n": pa.int64()})
    seen = {"values": 0}

    @p.stage("by_user", sources=[src], key={"user": pa.string()}, value={"n": pa.int64()})
    def by_user(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[str, int]]:
        for v in values:
            seen["values"] += 1
            yield v["user"], v["n"]

    @p.stage("first3", sources=["by_user"], key={"user": pa.string()}, value={"n": pa.int64()})
    def first3(key: str, values: Iterator[dict[str, Any]]) -> Iterator[tuple[str, int]]:
        for i, v in enumerate(values):  # stops early: the rest of the group is skipped
            if i == 3:
                return
            yield key, v["n"]

    n = 30_000
    users = [f"u{(i * 7919) % 50:02d}" for i in range(n)]
    p.update({"events": pa.table({"one": [1] * n, "user": users, "n": list(range(n))})})
    assert seen["values"] == n, "one Produce call saw every value (several chunks)"
    got = p.read("by_user")
    assert got.column("user").to_pylist() == sorted(users)
    assert got.num_rows == n
    assert p.read("first3").num_rows == 50 * 3
    # Values are single-use: a sequence kept past its call is refused.
    q = Pipeline.create(fast_store, "q")
    s = q.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    kept: list[Iterator[dict[str, Any]]] = []

    @q.stage("t", sources=[s], key={"k": pa.int64()}, value={"v": pa.int64()})
    def t(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        kept.append(values)
        if len(kept) == 2:
            list(kept[0])
        return iter(())

    with pytest.raises(ProduceError, match="single-use"):
        q.update({"s": pa.table({"k": [1, 1, 2], "v": [1, 2, 3]})})


@pytest.mark.spec("E-4")
def test_merges_and_joins_update_incrementally(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p")
    eu = p.source("eu", key={"id": pa.int64()}, value={"name": pa.string()})
    us = p.source("us", key={"id": pa.int64()}, value={"name": pa.string()})
    allp = p.merge("all_people", [eu, us])
    orders = p.source("orders", key={"id": pa.int64()}, value={"amount": pa.int64()})

    @p.stage("count", sources=[allp], key={"id": pa.int64()}, value={"names": pa.int64()})
    def count(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        yield key, len(list(values))

    @p.stage("spend", sources=[allp, orders], key={"name": pa.string()}, value={"total": pa.int64()})
    def spend(key: int, ppl: Iterator[dict[str, Any]], ords: Iterator[dict[str, Any]]) -> Iterator[tuple[str, int]]:
        amounts = [o["amount"] for o in ords]
        for person in ppl:
            yield person["name"], sum(amounts)

    p.update(
        {
            "eu": pa.table({"id": [1, 2], "name": ["ann", "bea"]}),
            "us": pa.table({"id": [2, 3], "name": ["bob", "cy"]}),
            "orders": pa.table({"id": [1, 2, 2], "amount": [10, 5, 7]}),
        }
    )
    assert p.read("all_people").to_pylist() == [
        {"id": 1, "name": "ann"},
        {"id": 2, "name": "bea"},
        {"id": 2, "name": "bob"},
        {"id": 3, "name": "cy"},
    ]
    assert p.read("count").to_pylist() == [{"id": 1, "names": 1}, {"id": 2, "names": 2}, {"id": 3, "names": 1}]
    assert {r["name"]: r["total"] for r in p.read("spend").to_pylist()} == {"ann": 10, "bea": 12, "bob": 12, "cy": 0}
    # Only the US feeder changes key 2: the merged update still carries
    # every value of key 2 (bea from the EU feeder's content).
    p.update({"us": Changes(deletes=pa.table({"id": [2]}))})
    merged = p.changes("all_people")
    assert merged.upserts is not None and merged.upserts.to_pylist() == [{"id": 2, "name": "bea"}]
    assert p.read("count").to_pylist() == [{"id": 1, "names": 1}, {"id": 2, "names": 1}, {"id": 3, "names": 1}]
    # Only orders change: the join reads the people side from content.
    p.update({"orders": pa.table({"id": [3], "amount": [100]})})
    assert {r["name"]: r["total"] for r in p.read("spend").to_pylist()} == {"ann": 10, "bea": 12, "cy": 100}
    with pytest.raises(SchemaMismatch, match="same key and value"):
        p.merge("bad", [eu, orders])


@pytest.mark.spec("E-3")
def test_of_two_concurrent_updaters_one_wins_the_other_gets_commit_conflict(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p")
    gate, entered = threading.Event(), threading.Event()

    def declare(block: bool) -> Pipeline:
        q = Pipeline.open(fast_store, "p")
        s = q.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

        @q.stage("t", sources=[s], key={"k": pa.int64()}, value={"v": pa.int64()})
        def t(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
            if block:
                entered.set()
                gate.wait(30)
            for v in values:
                yield key, v["v"]

        return q

    slow, fast = declare(True), declare(False)
    errors: list[BaseException] = []

    def run_slow() -> None:
        try:
            slow.update({"s": pa.table({"k": [1], "v": [1]})})
        except BaseException as e:  # noqa: BLE001 - checked below
            errors.append(e)

    th = threading.Thread(target=run_slow)
    th.start()
    assert entered.wait(30)
    assert fast.update({"s": pa.table({"k": [2], "v": [2]})}) == 1
    gate.set()
    th.join(60)
    assert len(errors) == 1 and isinstance(errors[0], CommitConflict), errors
    assert p.refresh() == 1
    assert p.read("t").column("k").to_pylist() == [2]
    # The loser's files are removed; vacuum finds nothing of it.
    assert [
        k for k in p.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0)) if k.startswith("nodes/")
    ] == []
    assert slow.update({"s": pa.table({"k": [1], "v": [1]})}) == 2


CRASHER = r"""
import json, os, signal, sys
import pyarrow as pa, pds
url, options = sys.argv[1], json.loads(sys.argv[2])
p = pds.Pipeline.open(url, "p", target_rows=100, **options)
s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
@p.stage("t", sources=[s], key={"t": pa.int64()}, value={"v": pa.int64()})
def t(key, values):
    for v in values:
        yield key % 100, v["v"]
n = 20000
print("ready", flush=True)
p.update({"s": pa.table({"k": pa.array(range(n, 2 * n), pa.int64()), "v": pa.array(range(n), pa.int64())})})
print("done", flush=True)
"""


@pytest.mark.spec("E-3")
@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_a_crash_leaves_the_previous_version_intact_and_vacuum_removes_the_garbage(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, options = lake_url(kind, tmp_path, request)
    p = Pipeline.create(url, "p", **options)
    s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

    @p.stage("t", sources=[s], key={"t": pa.int64()}, value={"v": pa.int64()})
    def t(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        for v in values:
            yield key % 100, v["v"]

    p.update({"s": pa.table({"k": pa.array(range(500), pa.int64()), "v": pa.array(range(500), pa.int64())})})
    before = p.read("t")
    store = pds.open_store(url, **options)
    killed = 0
    for delay in (0.3, 0.8, 1.5):
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHER, url, json.dumps(options)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait(60)
        q = Pipeline.open(url, "p", **options)
        if q.version == 1:
            assert q.read("t").equals(before), "the previous version is intact"
        else:
            assert q.read("s").num_rows == 20500, "or the whole update landed"
    assert killed >= 1
    q = Pipeline.open(url, "p", **options)
    q.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0), dry_run=False)
    # What remains is exactly what the retained versions reference: the
    # latest, and the pointer's and every one above it (a writer killed after
    # its manifest landed, before it moved the pointer, leaves the pointer a
    # version behind; vacuum keeps that version too).
    pointed = int(json.loads(store.read_bytes("p/_latest_manifest"))["version"])
    referenced: set[str] = set()
    for version in range(min(pointed, q.version), q.version + 1):
        m = json.loads(store.read_bytes(f"p/manifest/v{version:08d}.json"))
        referenced |= {
            f"p/{part['name']}" for n in m["nodes"].values() for k in ("content", "mappings") for part in n.get(k, [])
        }
        referenced |= {
            f"p/{part['name']}"
            for n in m["nodes"].values()
            for k in ("rows", "deleted")
            for part in n.get("update", {}).get(k, [])
        }
    left = {f for f in files(store, "p/nodes")}
    assert left == referenced
    if kind == "file":
        stray = [x for x in (tmp_path / "lake" / "p").rglob("*") if x.is_file() and "#" in x.name]
        assert stray == [], "no staging files of killed uploads are left"


@pytest.mark.spec("E-3")
def test_vacuum_keeps_retained_versions_and_removes_older_ones(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p")
    s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    for i in range(3):
        p.update({s.name: pa.table({"k": [1], "v": [i]})})
    assert p.vacuum() == [], "nothing older than 7 days"
    doomed = p.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0))
    assert any(d.startswith("manifest/") for d in doomed) and all(not d.startswith("_latest") for d in doomed)
    assert p.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0), dry_run=False) == doomed
    assert p.read("s").to_pylist() == [{"k": 1, "v": 2}]
    with pytest.raises(NotFound):
        p.read("s", version=1)
    with pytest.raises(TypeError):
        p.vacuum(retain=5)  # type: ignore[arg-type]


@pytest.mark.spec("E-5")
def test_bad_declarations_and_stores(tmp_path: Path) -> None:
    store = pds.open_store("memory://")
    with pytest.raises(CapabilityNotSupported):
        Pipeline.create(Store(MemoryBackend()), "p")
    p = Pipeline.create(store, "p")
    with pytest.raises(AlreadyExists):
        Pipeline.create(store, "p")
    assert Pipeline.create(store, "p", exist_ok=True).version == 0
    with pytest.raises(NotFound):
        Pipeline.open(store, "nothing")
    with pytest.raises(ValueError, match="node name"):
        p.source("../x", key={"k": pa.int64()}, value={})
    with pytest.raises(TypeError, match="keys are integers"):
        p.source("f", key={"k": pa.float64()}, value={})
    with pytest.raises(ValueError, match="reserved"):
        p.source("r", key={"__pds_src.k": pa.int64()}, value={})
    with pytest.raises(TypeError, match="value column 'k' is a key column"):
        p.source("c", key={"k": pa.int64()}, value={"k": pa.string()})
    s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    with pytest.raises(ValueError, match="declared twice"):
        p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    with pytest.raises(ValueError, match="not declared"):
        p.stage("x", sources=["ghost"], key={"k": pa.int64()}, value={})
    t = p.source("t", key={"k": pa.string()}, value={"v": pa.int64()})
    with pytest.raises(SchemaMismatch, match="same types"):
        p.stage("j", sources=[s, t], key={"k": pa.int64()}, value={})
    with pytest.raises(ValueError, match="version"):
        p.read("s", version=-1)
    with pytest.raises(NotFound):
        p.read("ghost")
    with pytest.raises(ValueError, match="sort_budget"):
        Pipeline.open(store, "p", sort_budget=0)


@pytest.mark.spec("E-1")
def test_streamed_upserts_are_sorted_within_the_sort_budget(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p", sort_budget=1 << 20, target_rows=20_000)
    s = p.source("s", key={"k": pa.int64()}, value={"v": pa.string()})
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    n = 200_000

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, n, 10_000):
            ks = [(j * 7919) % n for j in range(start, start + 10_000)]
            yield pa.record_batch({"k": pa.array(ks, pa.int64()), "v": [f"v{k}" for k in ks]}, schema=schema)

    p.update({s.name: Changes(upserts=pa.RecordBatchReader.from_batches(schema, batches()))})
    got = p.read("s")
    assert got.column("k").to_pylist() == list(range(n))
    assert got.column("v").to_pylist()[:2] == ["v0", "v1"]
    assert p.history(1)[0]["parameters"]["sources"]["s"] == {"upserts": n, "deletes": 0}
    # A stream mixing an upsert and a deletion of a key: refused while it is
    # read, before anything is written; nothing is committed.
    listed = files(fast_store, "p")
    mixed = pa.RecordBatchReader.from_batches(schema, iter([pa.record_batch({"k": [5], "v": ["x"]}, schema=schema)]))
    with pytest.raises(ValueError, match="both upserted and deleted"):
        p.update({"s": Changes(upserts=mixed, deletes=pa.table({"k": [5]}))})
    assert files(fast_store, "p") == listed
    assert p.refresh() == 1
    with pytest.raises(SchemaMismatch, match="missing columns"):
        p.update({"s": pa.RecordBatchReader.from_batches(pa.schema([("k", pa.int64())]), iter([]))})


# -- issue 15: wrong results (S-5) and error types (S-6) -------------------------


def _exact_pipeline(store: Store, mode: dict[str, Any]) -> Pipeline:
    """A row-form stage with a compound key and values of many types, and a
    batched one; *mode* says what their Produce emits."""
    p = Pipeline.create(store, "p")
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    value = {
        "n": pa.int64(),
        "f": pa.float64(),
        "txt": pa.string(),
        "raw": pa.binary(),
        "l": pa.list_(pa.int32()),
        "st": pa.struct([("x", pa.int64()), ("y", pa.string())]),
    }

    @p.stage("rows", sources=[src], key={"a": pa.int64(), "b": pa.string()}, value=value)
    def rows(key: int, values: Iterator[dict[str, Any]]) -> Iterator[Any]:
        for v in values:
            out = {"n": v["v"], "f": v["v"], "txt": "t", "raw": b"r", "l": [1, 2], "st": {"x": 1, "y": "y"}}
            out.update(mode.get("value", {}))
            yield mode.get("pair", (mode.get("target", (key, "b")), out))

    @p.stage("batch", sources=[src], key={"k": pa.int64()}, value={"n": pa.int64()}, batched=True)
    def batch(t: pa.Table) -> pa.Table:
        n = mode.get("column", t.column("v"))
        return pa.table({"k": t.column("k"), "n": n})

    return p


@pytest.mark.spec("S-5")
@pytest.mark.parametrize(
    ("emit", "column", "shown"),
    [
        ({"value": {"n": 1.5}}, "n", "1.5 (float)"),
        ({"value": {"n": True}}, "n", "True (bool)"),
        ({"value": {"n": 2**63}}, "n", "9223372036854775808 (int)"),
        ({"value": {"n": "7"}}, "n", "'7' (str)"),
        ({"value": {"f": 2**53 + 1}}, "f", "9007199254740993 (int)"),
        ({"value": {"txt": b"xy"}}, "txt", "b'xy' (bytes)"),
        ({"value": {"raw": "xy"}}, "raw", "'xy' (str)"),
        ({"value": {"l": [1, 2.5]}}, "l", "2.5 (float)"),
        ({"value": {"l": [2**40]}}, "l", "1099511627776 (int)"),
        ({"value": {"l": "ab"}}, "l", "'ab' (str)"),
        ({"value": {"st": {"x": 1, "y": "y", "z": 0}}}, "st", "'z': 0"),
        ({"value": {"st": {"x": 1.5, "y": "y"}}}, "st", "1.5 (float)"),
        ({"value": {"st": {"x": 1, "y": b"y"}}}, "st", "b'y' (bytes)"),
        ({"target": (1, "b", 9)}, None, "(1, 'b', 9) (tuple) is not a tuple of 2"),
        ({"target": "xy"}, None, "'xy' (str) is not a tuple of 2"),
        ({"target": (1.5, "b")}, "a", "1.5 (float)"),
        ({"target": (1, b"b")}, "b", "b'b' (bytes)"),
        ({"pair": "kv"}, None, "(key, value) pairs (2-tuples); key 2 yielded 'kv' (str)"),
        ({"pair": (1, 2, 3)}, None, "yielded (1, 2, 3) (tuple)"),
    ],
)
def test_row_form_output_that_is_not_exact_is_refused_naming_stage_column_and_value(
    fast_store: Store, emit: dict[str, Any], column: str | None, shown: str
) -> None:
    mode: dict[str, Any] = {}
    p = _exact_pipeline(fast_store, mode)
    assert p.update({"s": pa.table({"k": [1], "v": [1]})}) == 1
    listed = files(fast_store, "p")
    mode.update(emit)
    where = f"column '{column}': .*" if column else ""
    with pytest.raises(SchemaMismatch, match=rf"stage 'rows'.*{where}{re.escape(shown)}"):
        p.update({"s": pa.table({"k": [2], "v": [2]})})
    assert p.refresh() == 1, "nothing committed"
    assert files(fast_store, "p") == listed, "nothing left behind"
    assert p.read("rows").to_pylist()[0]["n"] == 1


@pytest.mark.spec("S-5")
def test_exact_values_are_accepted_in_both_forms_and_inexact_batched_columns_are_refused(fast_store: Store) -> None:
    mode: dict[str, Any] = {
        # Exact conversions: an integral float into an int column, an int
        # into a float column, a list for a tuple, a tuple for a list.
        "value": {"n": 2.0, "f": 3, "l": (4, 5)},
        "target": [7, "b"],
    }
    p = _exact_pipeline(fast_store, mode)
    p.update({"s": pa.table({"k": [1], "v": [1]})})
    row = p.read("rows").to_pylist()[0]
    assert (row["a"], row["b"], row["n"], row["f"], row["l"]) == (7, "b", 2, 3.0, [4, 5])
    assert type(row["n"]) is int and type(row["f"]) is float
    # The batched form: an int32 column and an integral double are exact ...
    mode["column"] = pa.array([5], pa.int32())
    p.update({"s": pa.table({"k": [2], "v": [2]})})
    mode["column"] = pa.array([6.0])
    p.update({"s": pa.table({"k": [3], "v": [3]})})
    assert p.read("batch").column("n").to_pylist() == [1, 5, 6]
    # ... a fractional double, a bool or text are not, whatever Arrow would cast.
    for col, shown in [
        (pa.array([1.5]), "1.5 (float)"),
        (pa.array([True]), "True (bool)"),
        (pa.array(["12"]), "'12' (str)"),
    ]:
        mode["column"] = col
        with pytest.raises(SchemaMismatch, match=rf"stage 'batch'.*column 'n'.*{re.escape(shown)}"):
            p.update({"s": pa.table({"k": [4], "v": [4]})})
    assert p.refresh() == 3
    # Source upserts take what Table.append takes: the same logical type.
    with pytest.raises(SchemaMismatch, match=r"source 's' upserts: column 'v' is double in the data, int64"):
        p.update({"s": pa.table({"k": [5], "v": [2.5]})})
    with pytest.raises(SchemaMismatch, match=r"column 'k' is bool in the data, int64"):
        p.update({"s": pa.table({"k": [True], "v": [1]})})
    with pytest.raises(SchemaMismatch, match=r"column 'v' is string in the data, int64"):
        p.update({"s": pa.table({"k": [5], "v": ["5"]})})
    assert p.refresh() == 3


def _join_pipeline(store: Store, calls: list[Any], batched: bool) -> Pipeline:
    p = Pipeline.create(store, f"j{int(batched)}")
    a = p.source("a", key={"k": pa.int64()}, value={"x": pa.int64()})
    b = p.source("b", key={"k": pa.int64()}, value={"x": pa.int64()})
    out = {"k": pa.int64(), "na": pa.int64(), "nb": pa.int64()}
    if batched:

        @p.stage("j", sources=[a, b], key={"k": pa.int64()}, value=out, batched=True)
        def jb(left: pa.Table, right: pa.Table) -> pa.Table:
            keys = sorted(set(left.column("k").to_pylist()) | set(right.column("k").to_pylist()))
            calls.extend(keys)
            la, lb = left.column("k").to_pylist(), right.column("k").to_pylist()
            return pa.table({"k": keys, "na": [la.count(k) for k in keys], "nb": [lb.count(k) for k in keys]})

    else:

        @p.stage("j", sources=[a, b], key={"k": pa.int64()}, value=out)
        def jr(key: int, left: Iterator[Any], right: Iterator[Any]) -> Iterator[Any]:
            calls.append(key)
            # Unconditional: called for a key with no value, it emits a row.
            yield key, {"k": key, "na": len(list(left)), "nb": len(list(right))}

    return p


@pytest.mark.spec("S-5")
@pytest.mark.parametrize("batched", [False, True])
def test_a_join_key_deleted_on_every_side_produces_nothing(fast_store: Store, batched: bool) -> None:
    calls: list[Any] = []
    p = _join_pipeline(fast_store, calls, batched)
    p.update({"a": pa.table({"k": [1, 2, 3], "x": [1, 2, 3]}), "b": pa.table({"k": [1, 3], "x": [1, 3]})})
    assert [r["k"] for r in p.read("j").to_pylist()] == [1, 2, 3]
    calls.clear()
    # Key 1 deleted on both sides, key 3 on one side only, key 4 (never
    # there) on both: only 3 reaches Produce, with the other side's values.
    p.update(
        {
            "a": Changes(deletes=pa.table({"k": [1, 3, 4]})),
            "b": Changes(deletes=pa.table({"k": [1, 4]})),
        }
    )
    assert calls == [3]
    got = p.read("j").to_pylist()
    assert got == [{"k": 2, "na": 1, "nb": 0}, {"k": 3, "na": 0, "nb": 1}]
    feed = p.changes("j")
    assert feed.deletes is not None and feed.deletes.column("k").to_pylist() == [1]
    # A rebuild from scratch agrees.
    p.rebuild("j")
    assert p.read("j").to_pylist() == got


@pytest.mark.spec("S-5")
def test_an_update_with_no_rows_and_no_keys_commits_nothing(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p")
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

    @p.stage("double", sources=[src], key={"k": pa.int64()}, value={"v": pa.int64()})
    def double(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        for v in values:
            yield key, 2 * v["v"]

    assert p.update({"s": pa.table({"k": [1], "v": [1]})}) == 1
    listed = files(fast_store, "p")
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    empty_stream = pa.RecordBatchReader.from_batches(schema, iter([]))
    empties: list[dict[str, Any]] = [
        {},
        {"s": Changes()},
        {"s": schema.empty_table()},
        {"s": Changes(upserts=schema.empty_table(), deletes=pa.table({"k": pa.array([], pa.int64())}))},
        {"s": Changes(upserts=empty_stream)},
        {"s": pa.RecordBatchReader.from_batches(schema, iter([pa.record_batch([[], []], schema=schema)]))},
    ]
    for changes in empties:
        assert p.update(changes) == 1, changes
    assert files(fast_store, "p") == listed, "no version, no object"
    assert [h["version"] for h in p.history()] == [1, 0]
    # Non-empty changes that change no row still commit (updates go by key).
    assert p.update({"s": pa.table({"k": [1], "v": [1]})}) == 2
    assert p.update({"s": Changes(deletes=pa.table({"k": [99]}))}) == 3
    assert p.read("double").to_pylist() == [{"k": 1, "v": 2}]
    # Returns the latest version, also when another writer committed it.
    other = Pipeline.open(fast_store, "p")
    other.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    other.stage("double", sources=["s"], key={"k": pa.int64()}, value={"v": pa.int64()})(double)
    other.update({"s": pa.table({"k": [2], "v": [2]})})
    assert p.update({}) == 4 == p.version
    # A newly declared stage is built by an otherwise empty update.
    q = Pipeline.open(fast_store, "p")
    s = q.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    q.stage("double", sources=[s], key={"k": pa.int64()}, value={"v": pa.int64()})(double)

    @q.stage("count", sources=[s], key={"k": pa.int64()}, value={"n": pa.int64()})
    def count(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        yield key, len(list(values))

    assert q.update({}) == 5
    assert q.read("count").to_pylist() == [{"k": 1, "n": 1}, {"k": 2, "n": 1}]
    assert q.update({}) == 5


@pytest.mark.spec("S-6")
def test_a_null_key_in_a_streamed_upsert_or_in_deletes_is_a_schema_mismatch(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p", target_rows=2)
    s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    p.update({s.name: pa.table({"k": [1, 2, 3], "v": [1, 2, 3]})})
    listed = files(fast_store, "p")
    loose = pa.schema([("k", pa.int64()), ("v", pa.int64())])

    def stream(*batches: dict[str, list[Any]]) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(loose, iter([pa.record_batch(b, schema=loose) for b in batches]))

    # The null comes after rows that were fine: found while the stream is read.
    with pytest.raises(SchemaMismatch, match=r"source 's' upserts: column 'k' holds nulls"):
        p.update({"s": stream({"k": [4, 5], "v": [4, 5]}, {"k": [6, None], "v": [6, 7]})})
    with pytest.raises(SchemaMismatch, match=r"source 's' upserts: column 'v' is double in the data, int64"):
        p.update(
            {
                "s": pa.RecordBatchReader.from_batches(
                    pa.schema([("k", pa.int64()), ("v", pa.float64())]),
                    iter([pa.record_batch({"k": [4], "v": [4.0]}), pa.record_batch({"k": [5], "v": [1.5]})]),
                )
            }
        )
    with pytest.raises(SchemaMismatch, match=r"source 's' deletes: column 'k' holds nulls"):
        p.update({"s": Changes(deletes=pa.table({"k": pa.array([None, 1], pa.int64())}))})
    with pytest.raises(SchemaMismatch, match=r"column 'k' holds nulls"):
        p.update({"s": pa.table({"k": pa.array([None], pa.int64()), "v": [1]})})
    assert p.refresh() == 1, "nothing committed"
    assert files(fast_store, "p") == listed, "nothing left behind"
    # A user's stream that fails for its own reasons stays a DataError.

    def failing() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"k": [4], "v": [4]}, schema=loose)
        raise OSError("the source went away")

    with pytest.raises(pds.DataError, match="the source went away"):
        p.update({"s": pa.RecordBatchReader.from_batches(loose, failing())})
    assert p.refresh() == 1


_TEMPORAL_CHILD = r"""
import json, sys
if sys.argv[1] == "block":
    import importlib.abc

    class NoPandas(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "pandas" or name.startswith("pandas."):
                raise ModuleNotFoundError("No module named 'pandas' (blocked by the test)")
            return None

    sys.meta_path.insert(0, NoPandas())
import pyarrow as pa
import pds

TYPES = {
    "ts_ns": pa.timestamp("ns"), "ts_ns_tz": pa.timestamp("ns", tz="UTC"), "ts_us": pa.timestamp("us"),
    "ts_s": pa.timestamp("s"), "t_ns": pa.time64("ns"), "t_us": pa.time64("us"), "t_ms": pa.time32("ms"),
    "d_ns": pa.duration("ns"), "d_us": pa.duration("us"), "d_s": pa.duration("s"),
    "l_ns": pa.list_(pa.timestamp("ns")), "st": pa.struct([("d", pa.duration("ns"))]),
}
SEC = 1_000_000_000


def row(k_ns, extra_ns=0, time_extra_ns=0):
    return {
        "k": k_ns, "ts_ns": 1_700_000_000 * SEC + 5_000 + extra_ns, "ts_ns_tz": 1_700_000_000 * SEC,
        "ts_us": 1_700_000_000_000_001, "ts_s": 1_700_000_000, "t_ns": 3_600 * SEC + 2_000 + time_extra_ns,
        "t_us": 7, "t_ms": 8, "d_ns": 90 * SEC + 3_000, "d_us": 4, "d_s": 5,
        "l_ns": [SEC, None], "st": {"d": 6_000},
    }


def table(rows):
    schema = pa.schema([("k", pa.timestamp("ns"))] + list(TYPES.items()))
    return pa.Table.from_pylist(rows, schema=schema)


seen = {}
out = {"pandas_loaded": False}
p = pds.Pipeline.create(sys.argv[2], "t")
src = p.source("s", key={"k": pa.timestamp("ns")}, value=TYPES)


@p.stage("copy", sources=[src], key={"k": pa.timestamp("ns")}, value=TYPES)
def copy(key, values):
    for v in values:
        seen["key"] = type(key).__name__
        for n, x in v.items():
            inner = x[0] if n == "l_ns" else x["d"] if n == "st" else x
            seen[n] = type(inner).__name__
        yield key, v  # handed back unchanged: accepted exactly


p.update({"s": table([row(SEC * 10)])})
out["types"] = seen.copy()
out["roundtrip"] = p.read("copy").equals(p.read("s"))
for name, r in [("ns", row(SEC * 11, extra_ns=1)), ("time_ns", row(SEC * 12, time_extra_ns=1))]:
    seen.clear()
    try:
        p.update({"s": table([r])})
        out[name] = [seen.get({"ns": "ts_ns", "time_ns": "t_ns"}[name]), p.read("copy").equals(p.read("s"))]
    except pds.DataError as e:
        out[name] = ["DataError", str(e)]

# A coarser column refuses a value with nanoseconds, accepts a whole one.
q = pds.Pipeline.create(sys.argv[2], "c")
s2 = q.source("s", key={"k": pa.int64()}, value={"ts": pa.timestamp("ns")})


@q.stage("coarse", sources=[s2], key={"k": pa.int64()}, value={"ts": pa.timestamp("us")})
def coarse(key, values):
    for v in values:
        yield key, v["ts"]


q.update({"s": pa.table({"k": [1], "ts": pa.array([5_000], pa.timestamp("ns"))})})
out["coarse_whole"] = q.read("coarse").column("ts").cast(pa.int64()).to_pylist()
try:
    q.update({"s": pa.table({"k": [2], "ts": pa.array([5_001], pa.timestamp("ns"))})})
    out["coarse_ns"] = "committed"
except pds.SchemaMismatch as e:
    out["coarse_ns"] = "SchemaMismatch: " + str(e)
except pds.DataError as e:
    out["coarse_ns"] = "DataError: " + str(e)
out["pandas_loaded"] = "pandas" in sys.modules
print(json.dumps(out))
"""


@pytest.mark.spec("S-5")
def test_row_form_temporal_values_are_the_same_python_types_with_or_without_pandas(tmp_path: Path) -> None:
    """timestamp/time/duration values of every unit reach Produce as
    datetime.datetime/time/timedelta, with pandas importable or not; only a
    value with nanoseconds is a pandas.Timestamp (needs pandas, else
    DataError); a time64[ns] value with nanoseconds is a DataError."""
    pytest.importorskip("pandas")
    runs = {}
    for mode in ("block", "allow"):
        url = (tmp_path / mode).as_uri()
        done = subprocess.run(
            [sys.executable, "-c", _TEMPORAL_CHILD, mode, url], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    blocked, allowed = runs["block"], runs["allow"]
    assert blocked["pandas_loaded"] is False
    assert blocked["types"] == allowed["types"], "the same types whatever is installed"
    assert blocked["types"] == {
        "key": "datetime",
        **{n: "datetime" for n in ("ts_ns", "ts_ns_tz", "ts_us", "ts_s", "l_ns")},
        **{n: "time" for n in ("t_ns", "t_us", "t_ms")},
        **{n: "timedelta" for n in ("d_ns", "d_us", "d_s", "st")},
    }
    assert blocked["roundtrip"] is True and allowed["roundtrip"] is True
    # Nanoseconds: a pandas.Timestamp with pandas (exact both ways) ...
    assert allowed["ns"] == ["Timestamp", True]
    # ... and without it a DataError naming the stage, the column and pandas.
    assert blocked["ns"][0] == "DataError"
    assert "stage 'copy'" in blocked["ns"][1] and "'ts_ns'" in blocked["ns"][1] and "pandas" in blocked["ns"][1]
    for run in (blocked, allowed):
        assert run["time_ns"][0] == "DataError" and "datetime.time" in run["time_ns"][1]
        assert run["coarse_whole"] == [5]
    assert allowed["coarse_ns"].startswith("SchemaMismatch") and "column 'ts'" in allowed["coarse_ns"]
    assert blocked["coarse_ns"].startswith("DataError") and "pandas" in blocked["coarse_ns"]


def _join_sums(a: pa.Table, b: pa.Table) -> dict[int, list[int]]:
    """Per key: [rows of a, sum of x, rows of b, sum of y]."""
    out: dict[int, list[int]] = {}
    for side, (t, col) in enumerate(((a, "x"), (b, "y"))):
        for k, v in zip(t["k"].to_pylist(), t[col].to_pylist(), strict=True):
            r = out.setdefault(k, [0, 0, 0, 0])
            r[2 * side] += 1
            r[2 * side + 1] += v
    return out


def _big_join(store: Store, batched: bool, order: str) -> Pipeline:
    """a (k, i -> x) and b (k, i -> y), joined on k into j (k -> sums and
    counts). The row form reads the sides in *order* ("ab", "ba", "b": a
    never read, or "zip": alternating)."""
    p = Pipeline.create(store, "big-join")
    key = {"k": pa.int64(), "i": pa.int64()}
    a = p.source("a", key=key, value={"x": pa.int64()})
    b = p.source("b", key=key, value={"y": pa.int64()})
    # Stages keyed by k alone: a key's group is all its (k, i) rows.
    ka = p.stage("ka", sources=[a], key={"k": pa.int64()}, value={"i": pa.int64(), "x": pa.int64()})(
        lambda k, vs: ((k[0], {"i": k[1], "x": v["x"]}) for v in vs)
    )
    kb = p.stage("kb", sources=[b], key={"k": pa.int64()}, value={"i": pa.int64(), "y": pa.int64()})(
        lambda k, vs: ((k[0], {"i": k[1], "y": v["y"]}) for v in vs)
    )
    value = {"na": pa.int64(), "sa": pa.int64(), "nb": pa.int64(), "sb": pa.int64()}
    if batched:

        @p.stage("j", sources=[ka, kb], key={"k": pa.int64(), "part": pa.int64()}, value=value, batched=True)
        def jb(ta: pa.Table, tb: pa.Table) -> pa.Table:
            # One row per key and call (a large key comes over several calls).
            rows = _join_sums(ta, tb)
            ks = sorted(rows)
            part = [
                min(
                    [
                        *ta.filter(pc.equal(ta["k"], k))["i"].to_pylist(),
                        *tb.filter(pc.equal(tb["k"], k))["i"].to_pylist(),
                    ]
                )
                for k in ks
            ]
            cols = list(zip(*(rows[k] for k in ks), strict=True)) if ks else [[], [], [], []]
            return pa.table(
                {"k": ks, "part": part, "na": cols[0], "sa": cols[1], "nb": cols[2], "sb": cols[3]},
                schema=pa.schema([(n, pa.int64()) for n in ("k", "part", "na", "sa", "nb", "sb")]),
            )

    else:

        @p.stage("j", sources=[ka, kb], key={"k": pa.int64(), "part": pa.int64()}, value=value)
        def jr(k: int, left: Iterator[dict[str, Any]], right: Iterator[dict[str, Any]]) -> Iterator[Any]:
            n = {"a": 0, "b": 0}
            s = {"a": 0, "b": 0}

            def read(side: str, it: Iterator[dict[str, Any]], limit: int | None = None) -> None:
                for m, v in enumerate(it):
                    n[side] += 1
                    s[side] += v["x" if side == "a" else "y"]
                    if limit is not None and m + 1 >= limit:
                        return

            if order == "zip":
                while True:
                    before = n["a"] + n["b"]
                    read("a", left, 3)
                    read("b", right, 5)
                    if n["a"] + n["b"] == before:
                        break
            else:
                for side in order:
                    read(side, left if side == "a" else right)
            yield (k, 0), {"na": n["a"], "sa": s["a"], "nb": n["b"], "sb": s["b"]}

    return p


def _big_join_sources(seed: int) -> tuple[pa.Table, pa.Table]:
    """Key 7 has 5,000 rows on a and 3,000 on b; the other keys a few."""
    rng = random.Random(seed)

    def side(big: int) -> pa.Table:
        ks, iis = [], []
        for k in range(20):
            n = big if k == 7 else rng.randrange(4)
            ks += [k] * n
            iis += list(range(n))
        xs = [rng.randrange(1000) for _ in ks]
        schema = pa.schema([("k", pa.int64()), ("i", pa.int64()), ("x", pa.int64())])
        return pa.table({"k": ks, "i": iis, "x": xs}, schema=schema)

    a = side(5000)
    b = side(3000).rename_columns(["k", "i", "y"])
    return a, b


@pytest.mark.spec("P-2")
@pytest.mark.parametrize(("batched", "order"), [(False, "ab"), (False, "ba"), (False, "b"), (False, "zip"), (True, "")])
def test_a_join_group_larger_than_a_piece_streams_from_each_side(
    batched: bool, order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A join key with more rows on a side than a chunk holds
    (JOIN_SIDE_ROWS / BATCH_GROUP_MAX made small): the row form's value
    iterators pull the rest as they read, each side on its own, in any order
    (a side never read is skipped); the batched form gets the key over
    several calls. Every row counts once, as computed from scratch, and
    after an update that touches the large key."""
    from pds.producers import produce

    monkeypatch.setattr(produce, "JOIN_SIDE_ROWS", 256)
    monkeypatch.setattr(produce, "BATCH_GROUP_MAX", 700)
    p = _big_join(pds.open_store("memory://"), batched, order)
    a, b = _big_join_sources(1)
    p.update({"a": a, "b": b})

    def expected(a: pa.Table, b: pa.Table) -> dict[int, tuple[int, int, int, int]]:
        out = _join_sums(a, b)
        if order == "b":  # a is never read
            for r in out.values():
                r[0] = r[1] = 0
        return {k: tuple(v) for k, v in out.items()}  # type: ignore[misc]

    def got(p: Pipeline) -> dict[int, tuple[int, int, int, int]]:
        out: dict[int, list[int]] = {}
        for r in p.read("j").to_pylist():
            t = out.setdefault(r["k"], [0, 0, 0, 0])
            for n, c in enumerate(("na", "sa", "nb", "sb")):
                t[n] += r[c]
        return {k: tuple(v) for k, v in out.items()}  # type: ignore[misc]

    assert got(p) == expected(a, b)
    if batched:
        assert len([r for r in p.read("j").to_pylist() if r["k"] == 7]) > 1, "key 7 came over several calls"
    # An update touching the large key on one side (and a small one).
    a2 = pa.table({"k": [7, 3], "i": [10, 0], "x": [100_000, 5]}, schema=a.schema)
    p.update({"a": a2})
    # Upserts by (k, i): (7, 10) and (3, 0) replaced.
    keep = [
        not ((k == 7 and i == 10) or (k == 3 and i == 0))
        for k, i in zip(a["k"].to_pylist(), a["i"].to_pylist(), strict=True)
    ]
    merged = pa.concat_tables([a.filter(pa.array(keep)), a2])
    assert got(p) == expected(merged, b)
