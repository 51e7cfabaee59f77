"""Issue P items 1 and 6: updates layered over the stored parts as patches,
compaction (by updates, and by ``Pipeline.compact``), on the memory, file and
SeaweedFS S3 stores.

A two-stage pipeline (events -> per-user totals -> per-bucket sums, one
batched and one row-form stage) takes scattered updates; after each, every
node equals a plain-Python recompute, earlier versions read as they were,
and the manifest shows what was written: patches where the change was small
against a part, rewrites past the bounds.
"""

from __future__ import annotations

import datetime
import json
import random
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from remote_store import NotFound, Store
from store_kinds import Faulty

import pds
from pds import Changes, Pipeline
from pds.cli import main

from helpers import files, pipeline_files

EVENT = pa.schema([("id", pa.int64()), ("user", pa.int64()), ("amount", pa.int64())])
BUCKETS = 7


def declare(store: Store, key: str = "pp", **opts: Any) -> Pipeline:
    try:
        p = Pipeline.open(store, key, **opts)
    except NotFound:
        p = Pipeline.create(store, key, **opts)
    ev = p.source("events", key={"id": pa.int64()}, value={"user": pa.int64(), "amount": pa.int64()})

    @p.stage("totals", sources=[ev], key={"user": pa.int64()}, value={"amount": pa.int64()})
    def totals(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        for v in values:
            yield v["user"], v["amount"]

    @p.stage("buckets", sources=[totals], key={"bucket": pa.int64()}, value={"total": pa.int64()}, batched=True)
    def buckets(groups: pa.Table) -> pa.Table:
        # One row per source key (a user): its sum, in bucket user % BUCKETS.
        g = groups.group_by("user").aggregate([("amount", "sum")])
        users = g["user"].to_pylist()
        return pa.table(
            {
                "bucket": pa.array([u % BUCKETS for u in users], pa.int64()),
                "user": pa.array(users, pa.int64()),
                "total": g["amount_sum"],
            }
        )

    return p


def expected(events: dict[int, tuple[int, int]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every node's rows (key and value columns), recomputed in plain Python, sorted."""
    per_user: dict[int, int] = defaultdict(int)
    for u, a in events.values():
        per_user[u] += a
    return {
        "events": sorted((i, u, a) for i, (u, a) in events.items()),
        "totals": sorted(events.values()),
        "buckets": sorted((u % BUCKETS, t) for u, t in per_user.items()),
    }


def read_all(p: Pipeline, version: int | None = None) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for node in ("events", "totals", "buckets"):
        t = p.read(node, version=version)
        out[node] = sorted(zip(*(c.to_pylist() for c in t.columns), strict=True))
    return out


def manifest(p: Pipeline) -> dict[str, Any]:
    m = p._at(None)
    assert isinstance(m, dict)
    return m


def patch_counts(m: dict[str, Any]) -> dict[str, int]:
    """Patches per node (content and key-mappings parts)."""
    return {
        name: sum(len(part.get("patches") or []) for part in [*s.get("content", []), *s.get("mappings", [])])
        for name, s in m["nodes"].items()
    }


def table(events: dict[int, tuple[int, int]], ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "user": pa.array([events[i][0] for i in ids], pa.int64()),
            "amount": pa.array([events[i][1] for i in ids], pa.int64()),
        },
        schema=EVENT,
    )


@pytest.mark.spec("P-1")
def test_scattered_updates_write_patches_read_like_a_recompute_and_compact(fast_store: Store) -> None:
    rng = random.Random(7)
    p = declare(fast_store, target_rows=64)
    events = {i: (rng.randrange(300), rng.randrange(1000)) for i in range(2000)}
    p.update({"events": table(events, sorted(events))})
    assert read_all(p) == expected(events)
    assert patch_counts(manifest(p)) == {"events": 0, "totals": 0, "buckets": 0}
    history: list[tuple[int, dict[str, list[tuple[Any, ...]]]]] = [(p.version, expected(events))]
    patched_versions = 0
    rewrote = 0
    for round in range(14):
        # A few events changed, added and deleted, scattered over every key range.
        before = manifest(p)
        change_ids = rng.sample(sorted(events), 12)
        for i in change_ids:
            events[i] = (rng.randrange(300), rng.randrange(1000))
        new_ids = [5000 + round * 10 + j for j in range(3)]
        for i in new_ids:
            events[i] = (rng.randrange(300), rng.randrange(1000))
        gone = rng.sample(sorted(set(events) - set(change_ids) - set(new_ids)), 4)
        upserts = table(events, sorted(change_ids + new_ids))
        for i in gone:
            del events[i]
        p.update({"events": Changes(upserts=upserts, deletes=pa.table({"id": pa.array(gone, pa.int64())}))})
        assert read_all(p) == expected(events), f"round {round}"
        after = manifest(p)
        counts = patch_counts(after)
        if any(counts.values()):
            patched_versions += 1
        # Parts whose file is gone from a version to the next: rewritten (compacted or past the bounds).
        old_names = {part["name"] for s in before["nodes"].values() for part in s.get("content", [])}
        new_names = {part["name"] for s in after["nodes"].values() for part in s.get("content", [])}
        rewrote += len(old_names - new_names)
        for s in after["nodes"].values():
            for part in [*s.get("content", []), *s.get("mappings", [])]:
                assert len(part.get("patches") or []) <= 10
        history.append((p.version, expected(events)))
    assert patched_versions >= 10, "scattered small changes are written as patches"
    # Time travel: every version reads as it was.
    for v, want in history[::3]:
        assert read_all(p, version=v) == want, f"version {v}"
    # The files every version names exist, and hash to their records.
    names = {f["name"] for v, _ in history for f in pipeline_files(p._at(v))}
    stored = set(files(fast_store, "pp"))
    assert {f"pp/{n}" for n in names} <= stored

    # Pipeline.compact(): a version with no patch left, the same rows, an empty update.
    v = p.version
    assert any(patch_counts(manifest(p)).values())
    c = p.compact()
    assert c == v + 1
    assert patch_counts(manifest(p)) == {"events": 0, "totals": 0, "buckets": 0}
    assert read_all(p) == expected(events)
    entry = p.history(limit=1)[0]
    assert entry["operation"] == "compact"
    assert set(entry["parameters"]["nodes"]) <= {"events", "totals", "buckets"}
    assert all(d["parts_rewritten"] > 0 for d in entry["parameters"]["nodes"].values())
    for node in ("events", "totals", "buckets"):
        ch = p.changes(node)
        assert ch.upserts.num_rows == 0 and ch.deletes.num_rows == 0, node
    # Nothing left to compact: no new version.
    assert p.compact() == c
    # Updates go on from the compacted version, and old versions still read.
    events[1] = (299, 1)
    p.update({"events": table(events, [1])})
    assert read_all(p) == expected(events)
    assert read_all(p, version=history[-1][0]) == history[-1][1]
    # Vacuum keeping only the latest version: what it names stays.
    removed = p.vacuum(retain=datetime.timedelta(0), dry_run=False, min_age=datetime.timedelta(0))
    assert removed, "the patches and parts only older versions named"
    assert read_all(p) == expected(events)


@pytest.mark.spec("P-6")
def test_compact_needs_no_declarations_and_the_cli_runs_it(tmp_path: Any) -> None:
    url = (tmp_path / "lake").as_uri()
    p = declare(pds.open_store(url), target_rows=16)
    events = {i: (i % 40, i) for i in range(400)}
    p.update({"events": table(events, sorted(events))})
    events[3] = (1, 1)
    p.update({"events": table(events, [3])})
    want = read_all(p)
    assert any(patch_counts(manifest(p)).values())
    # The CLI opens the pipeline by key alone (nothing declared).
    got = CliRunner().invoke(main, ["compact", url, "pp", "--target-rows", "16", "--json"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.output)
    assert out["version"] == out["version_before"] + 1
    assert any(k.endswith(" parts") for k in out)
    q = Pipeline.open(pds.open_store(url), "pp")
    assert q.history(1)[0]["operation"] == "compact"
    assert patch_counts(manifest(q)) == {"events": 0, "totals": 0, "buckets": 0}
    assert read_all(q) == want
    again = CliRunner().invoke(main, ["compact", url, "pp", "--target-rows", "16", "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["version"] == out["version"]


@pytest.mark.spec("P-1")
def test_a_damaged_patch_is_refused_on_read(tmp_path: Any) -> None:
    store = pds.open_store((tmp_path / "lake").as_uri())
    p = declare(store, target_rows=64)
    events = {i: (i % 100, i) for i in range(1000)}
    p.update({"events": table(events, sorted(events))})
    p.update({"events": table({**events, 10: (5, 5)}, [10])})
    m = manifest(p)
    patched = [part for part in m["nodes"]["events"]["content"] if part.get("patches")]
    assert patched, "a one-row change is a patch"
    rows_file = patched[0]["patches"][0]["rows"]["name"]
    path = tmp_path / "lake" / "pp" / rows_file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(pds.PartCorrupted):
        Pipeline.open(store, "pp").read("events")


def test_read_batches_streams_what_read_returns(fast_store: Store) -> None:
    p = declare(fast_store, target_rows=64)
    events = {i: (i % 100, i) for i in range(1000)}
    p.update({"events": table(events, sorted(events))})
    changed = {**events, **{i: (i % 7, -i) for i in range(0, 1000, 37)}}
    p.update({"events": table(changed, list(range(0, 1000, 37)))})
    assert patch_counts(manifest(p))["events"] > 0, "the change is patched in"
    for version in (1, 2):
        for node in ("events", "totals", "buckets"):
            reader = p.read_batches(node, version=version)
            assert isinstance(reader, pa.RecordBatchReader)
            batches = list(reader)
            whole = p.read(node, version=version)
            assert reader.schema.equals(whole.schema)
            assert pa.Table.from_batches(batches, schema=reader.schema).equals(whole), (node, version)
            if node == "events":
                assert len(batches) > 1, "a node of many parts streams in many batches"
    assert sorted(zip(*(c.to_pylist() for c in p.read("events").columns), strict=True)) == expected(changed)["events"]


def test_a_damaged_part_fails_read_batches_with_its_class(tmp_path: Any) -> None:
    store = pds.open_store((tmp_path / "lake").as_uri())
    p = declare(store, target_rows=64)
    events = {i: (i % 100, i) for i in range(1000)}
    p.update({"events": table(events, sorted(events))})
    parts = manifest(p)["nodes"]["events"]["content"]
    assert len(parts) > 3
    path = tmp_path / "lake" / "pp" / parts[2]["name"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    reader = Pipeline.open(store, "pp").read_batches("events")
    with pytest.raises(pds.PartCorrupted):
        for _ in reader:
            pass


def test_a_small_change_to_a_large_part_checks_the_page_index_it_seeks_by(tmp_path: Any) -> None:
    """A one-key change to a part of 100,000 rows reads only the pages that hold
    the key, chosen by the part's page index; no whole-file checksum covers such a
    read, so the manifest records the length and CRC-32 of each part's page index
    and footer, and a damaged byte there fails the update with ``PartCorrupted``
    before anything is written."""
    lake = tmp_path / "lake"

    def opened(create: bool = False) -> Pipeline:
        store = pds.open_store(lake.as_uri())
        q = Pipeline.create(store, "big") if create else Pipeline.open(store, "big")
        q.source("events", key={"id": pa.int64()}, value={"v": pa.int64()})
        return q

    p = opened(create=True)
    n = 100_000
    p.update({"events": pa.table({"id": pa.array(range(n), pa.int64()), "v": pa.array(range(n), pa.int64())})})
    (part,) = manifest(p)["nodes"]["events"]["content"]
    footer = part["footer"]
    assert part["rows"] == n and len(footer["crc32"]) == 8 and 8 < footer["bytes"] < part["size_bytes"]
    path = lake / "big" / part["name"]
    clean = path.read_bytes()
    tail_start = len(clean) - footer["bytes"]
    change = {"events": pa.table({"id": pa.array([5], pa.int64()), "v": pa.array([-5], pa.int64())})}
    for at in (tail_start, tail_start + footer["bytes"] // 3, len(clean) - 9):
        damaged = bytearray(clean)
        damaged[at] ^= 0x10
        path.write_bytes(bytes(damaged))
        before = sorted(str(f) for f in lake.rglob("*"))
        with pytest.raises(pds.PartCorrupted, match="page index and footer"):
            opened().update(change)
        assert sorted(str(f) for f in lake.rglob("*")) == before, "nothing written"
    path.write_bytes(clean)
    q = opened()
    assert q.update(change) == 2
    assert q.read("events").column("v").to_pylist()[:7] == [0, 1, 2, 3, 4, -5, 6]
    (after,) = manifest(q)["nodes"]["events"]["content"]
    assert after["name"] == part["name"] and after["patches"], "patched, not rewritten"


SHARED_FILE = r"-d-00000\.parquet$"


@pytest.mark.s3
@pytest.mark.parametrize("fault", ["fail", "drop_reply"])
def test_a_fault_at_the_shared_deleted_keys_file_loses_nothing(faulty: Faulty, fault: str) -> None:
    """The patches an update writes in a node share one file of deleted keys,
    written after the parts it patches. Every PUT of it failing fails the update
    with nothing committed and nothing left behind, and the same update then
    succeeds; a PUT applied whose reply is lost is retried, the copy already
    there accepted (the same bytes), and the update commits once."""
    rng = random.Random(11)
    p = declare(faulty.store, target_rows=64)
    events = {i: (rng.randrange(300), rng.randrange(1000)) for i in range(2000)}
    p.update({"events": table(events, sorted(events))})
    version, stored = p.version, files(faulty.direct)
    gone = rng.sample(sorted(events), 8)  # scattered: one key in each of 8 parts
    deletes = Changes(deletes=pa.table({"id": pa.array(gone, pa.int64())}))
    after = {i: e for i, e in events.items() if i not in gone}
    if fault == "fail":
        faulty.proxy.fail("PUT", SHARED_FILE, times=None)
        with pytest.raises(pds.RemoteStoreError):
            p.update({"events": deletes})
        assert faulty.proxy.requests("PUT", SHARED_FILE, action="fail"), "no shared file was written"
        assert Pipeline.open(faulty.direct, "pp").version == version, "the failed update committed"
        assert files(faulty.direct) == stored, "the failed update left objects behind"
        assert read_all(declare(faulty.direct)) == expected(events)
        faulty.proxy.clear_rules()
    else:
        faulty.proxy.drop_reply("PUT", SHARED_FILE, times=1)
    p = declare(faulty.store)
    assert p.update({"events": deletes}) == version + 1
    if fault == "drop_reply":
        assert faulty.proxy.requests("PUT", SHARED_FILE, action="drop_reply"), "no shared file was written"
    q = declare(faulty.direct)
    assert q.version == version + 1
    assert read_all(q) == expected(after)
    m = manifest(q)
    shared = {
        pt["deleted"]["name"]
        for node in m["nodes"].values()
        for part in node.get("content", [])
        for pt in part.get("patches") or []
        if pt.get("deleted_rows")
    }
    assert shared, "the deletes were not written as patches sharing a file"
    named = {f"pp/{f['name']}" for f in pipeline_files(m)}
    stray = [k for k in files(faulty.direct) if k not in stored and k not in named and "/manifest/" not in k]
    assert not stray, f"objects no version names: {stray}"
