"""The table failure model (issue D-9), on file:// and SeaweedFS S3 with real
processes: concurrent appenders, writers killed with SIGKILL at random
moments, and readers racing commits.
"""

from __future__ import annotations

import datetime
import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from store_kinds import REMOTE, lake_url

import pds
from pds import Table

from helpers import run_together, table_manifest

APPENDER = r"""
import json, sys
import pyarrow as pa, pds
url, options, worker, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = pds.Table.open(url, "t", **options)
print("ready", flush=True)
sys.stdin.readline()  # start together
for i in range(count):
    base = (worker * 1000 + i) * 10
    t.append(pa.table({"id": pa.array(range(base, base + 10), pa.int64()), "w": pa.array([worker] * 10, pa.int64())}))
print("done", flush=True)
"""

WORKER = r"""
import json, sys
import pyarrow as pa, pds
url, options, op = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
t = pds.Table.open(url, "t", **options)
print("ready", flush=True)
if op == "append":
    n = 400_000
    t.append(pa.table({"id": pa.array(range(10**9, 10**9 + n), pa.int64()), "w": pa.array([99] * n, pa.int64())}))
elif op == "delete":
    t.delete([("w", "==", 1)])
elif op == "upsert":
    ids = range(5_000, 25_000)
    t.upsert(pa.table({"id": pa.array(ids, pa.int64()), "w": pa.array([77] * len(ids), pa.int64())}))
elif op == "update":
    import pyarrow.compute as pc
    t.update([("w", "==", 2)], {"w": pc.field("w") + 100})
else:
    t.compact(min_deleted_fraction=0.0)
print("done", flush=True)
"""


def _urls(tmp_path: Path, request: pytest.FixtureRequest, kind: str) -> tuple[str, dict[str, str]]:
    return lake_url(kind, tmp_path, request)


def _schema() -> pa.Schema:
    return pa.schema([("id", pa.int64()), ("w", pa.int64())])


@pytest.mark.spec("D-9")
@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_eight_processes_appending_all_land_in_contiguous_versions(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, options = _urls(tmp_path, request, kind)
    Table.create(url, "t", _schema(), **options)
    outs = run_together(
        [[sys.executable, "-c", APPENDER, url, json.dumps(options), str(w), "5"] for w in range(8)], 300
    )
    assert all("done" in out for out in outs)
    t = Table.open(url, "t", **options)
    assert t.version == 40
    history = t.history()
    assert [h["version"] for h in history] == list(range(40, -1, -1))
    assert all(h["previous"] == h["version"] - 1 for h in history[:-1])
    got = sorted(t.to_arrow().column("id").to_pylist())
    expected = sorted((w * 1000 + i) * 10 + k for w in range(8) for i in range(5) for k in range(10))
    assert got == expected, "every append landed exactly once"


def _content(t: Table) -> list[int]:
    return sorted(t.to_arrow().column("id").to_pylist())


@pytest.mark.slow
@pytest.mark.spec("D-9")
@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_sigkill_at_random_moments_leaves_a_committed_version_and_vacuumable_garbage(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, options = _urls(tmp_path, request, kind)
    rng = random.Random(8)
    t = Table.create(url, "t", _schema(), primary_key="id", row_group_size=1000, target_file_size=2_000_000, **options)
    for w in range(3):
        t.append(pa.table({"id": pa.array(range(w * 10_000, w * 10_000 + 10_000), pa.int64()), "w": [w] * 10_000}))
    committed = {v: _content(Table.open(url, "t", **options)) for v in [t.version]}
    outcomes: list[str] = []
    for op in ["append", "delete", "upsert", "update", "compact"] * 3:
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, url, json.dumps(options), op],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        now = Table.open(url, "t", **options)
        # Whatever moment it died at, the table reads as a committed version:
        # the previous one, or the one the killed writer committed.
        content = _content(now)
        if now.version in committed:
            assert content == committed[now.version]
            outcomes.append("before")
        else:
            assert now.history(1)[0]["operation"] == op
            committed[now.version] = content
            outcomes.append("after")
    assert "before" in outcomes, outcomes
    # What the killed writers left is garbage that vacuum removes.
    t = Table.open(url, "t", **options)
    expected = _content(t)
    t.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0), dry_run=False)
    store = pds.open_store(url, **options)
    keys = {str(f.path).split("/", 1)[1] for f in store.list_files("t", recursive=True)}
    # A writer killed between its manifest PUT and its pointer PUT committed a
    # version the pointer does not name yet: vacuum keeps the pointed version
    # too (readers GET it before they look past it), and nothing else.
    pointed = json.loads(store.read_bytes("t/_latest_manifest"))["version"]
    assert pointed in (t.version, t.version - 1), (pointed, t.version)
    referenced = {"_latest_manifest"}
    for v in {t.version, pointed}:
        m = table_manifest(store, "t", v)
        referenced |= (
            {f"manifest/v{v:08d}.json"}
            | {r["path"] for r in m["segments"]}
            | {f["path"] for f in m["data_files"]}
            | {x["path"] for x in m["tombstones"]}
        )
    assert keys == referenced
    if kind == "file":
        # Including what no LIST shows: staging files of killed uploads.
        on_disk = {
            str(p.relative_to(tmp_path / "lake" / "t")) for p in (tmp_path / "lake" / "t").rglob("*") if p.is_file()
        }
        assert on_disk == referenced
    assert _content(Table.open(url, "t", **options)) == expected


@pytest.mark.spec("D-9")
@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_readers_racing_commits_see_whole_snapshots(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url, options = _urls(tmp_path, request, kind)
    Table.create(url, "t", _schema(), row_group_size=50, **options)
    stop = threading.Event()
    seen: list[int] = []
    problems: list[Any] = []

    def reader() -> None:
        r = Table.open(url, "t", **options)
        while not stop.is_set():
            r.refresh()
            got = sorted(r.to_arrow().column("id").to_pylist())
            # Appends add blocks of 100 ids; deletes remove whole blocks of
            # odd-numbered ones. A whole snapshot is a set of whole blocks.
            blocks = {i // 100 for i in got}
            if got != sorted(i for b in blocks for i in range(b * 100, b * 100 + 100)):
                problems.append((r.version, len(got)))
            seen.append(r.version)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    w = Table.open(url, "t", **options)
    for b in range(12):
        w.append(pa.table({"id": pa.array(range(b * 100, b * 100 + 100), pa.int64()), "w": [b % 2] * 100}))
        if b % 3 == 2:
            w.delete([("w", "==", 1)])
    stop.set()
    for th in threads:
        th.join()
    assert not problems, problems
    assert len(set(seen)) > 1, "the readers saw the table move"
