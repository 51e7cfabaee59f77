"""Tables whose file list lives in manifest segments (issue T, item 3):
commits write the root and the segments they change, filtered scans read
only the segments that can match, and every operation agrees with a model,
on memory, file and SeaweedFS; processes appending at once all land."""

from __future__ import annotations

import datetime
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from remote_store import Store
from store_kinds import REMOTE, lake_url

import pds
from pds import Table

from helpers import run_together

pytestmark = pytest.mark.spec("T-3")

FILES = 1200  # one row each: two segments of 600


def rows(ids: list[int], tag: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "tag": pa.array([f"{tag}{i % 5}" for i in ids])})


def many_files(store: Store, key: str = "t", n: int = FILES) -> Table:
    """A table of *n* one-row files (``target_file_size=1``)."""
    return Table.create(store, key, data=rows(list(range(n))), primary_key="id", target_file_size=1)


def root(store: Store, t: Table) -> dict[str, Any]:
    return dict(json.loads(store.read_bytes(f"{t.key}/manifest/v{t.version:08d}.json")))


def keys_under(store: Store, key: str) -> set[str]:
    return {str(f.path).removeprefix(f"{key}/") for f in store.list_files(key, recursive=True)}


def test_a_table_of_many_files_behaves_like_its_model(fast_store: Store) -> None:
    t = many_files(fast_store)
    r = root(fast_store, t)
    assert r["format"] == "pds-table/3" and "data_files" not in r
    assert [s["file_count"] for s in r["segments"]] == [600, 600]
    assert r["segments"][0]["columns"]["id"] == {"min": 0, "max": 599, "null_count": 0}
    model = {i: f"a{i % 5}" for i in range(FILES)}
    rng = random.Random(3)
    for step in range(4):
        new = [FILES + 10 * step + j for j in range(3)]
        t.append(rows(new, "n"))
        model.update({i: f"n{i % 5}" for i in new})
    t.delete([("id", ">=", 100), ("id", "<", 160)])
    for i in range(100, 160):
        model.pop(i)
    t.delete([("tag", "==", "a3")])
    model = {i: v for i, v in model.items() if v != "a3"}
    up = [5, 700, 1199, 5000]
    t.upsert(rows(up, "u"))
    model.update({i: f"u{i % 5}" for i in up})
    t.update([("id", "==", 701)], {"tag": "w"})
    if 701 in model:
        model[701] = "w"

    def check(table: Table) -> None:
        got = table.to_arrow()
        assert dict(zip(got.column("id").to_pylist(), got.column("tag").to_pylist(), strict=True)) == model
        for k in [*rng.sample(range(FILES + 40), 12), 5, 700, 5000, 130, -1]:
            one = table.to_arrow(filter=[("id", "==", k)])
            want = [(k, model[k])] if k in model else []
            assert list(zip(one.column("id").to_pylist(), one.column("tag").to_pylist(), strict=True)) == want

    check(t)
    # The whole file list, as every reader gets it.
    m = t.manifest
    assert len(m["data_files"]) == sum(s["file_count"] for s in root(fast_store, t)["segments"])
    assert t.files().num_rows == len(m["data_files"])
    # Compaction drops the one-row files whose row is deleted: their
    # segments shrink, and the file list stays whole.
    t.compact()
    after = root(fast_store, t)["segments"]
    assert sum(s["file_count"] for s in after) == len(t.manifest["data_files"]) < len(m["data_files"])
    check(Table.open(fast_store, "t"))
    # Time travel reads the first version's own segments.
    assert t.to_arrow(version=0).num_rows == FILES


def test_compaction_merges_small_segments(fast_store: Store) -> None:
    """Appends of one file each fill the last segment to 32 files, then
    start another; compaction merges the small ones into one."""
    t = many_files(fast_store, n=40)
    for i in range(40):
        t.append(rows([1000 + i]))
    assert [s["file_count"] for s in root(fast_store, t)["segments"]] == [40, 32, 8]
    t.compact()
    assert [s["file_count"] for s in root(fast_store, t)["segments"]] == [80]
    assert sorted(t.to_arrow().column("id").to_pylist()) == [*range(40), *range(1000, 1040)]
    assert t.to_arrow(version=t.version - 1).num_rows == 80


def test_an_append_writes_its_file_one_segment_and_the_root(fast_store: Store) -> None:
    t = many_files(fast_store)
    before = keys_under(fast_store, "t")
    t.append(rows([10_000]))
    added = keys_under(fast_store, "t") - before
    assert sorted(k.split("/")[0] for k in added) == ["data", "manifest", "segment"], added
    segment = next(k for k in added if k.startswith("segment/"))
    r = root(fast_store, t)
    assert [s["path"] for s in r["segments"]][:2] == [s["path"] for s in root(fast_store, t.at(version=0))["segments"]]
    assert r["segments"][-1]["path"] == segment and r["segments"][-1]["file_count"] == 1
    written = len(fast_store.read_bytes(f"t/manifest/v{t.version:08d}.json")) + len(
        fast_store.read_bytes(f"t/{segment}")
    )
    assert written < 64 * 1024
    # The next append rewrites that small last segment instead of adding one.
    t.append(rows([10_001]))
    r = root(fast_store, t)
    assert len(r["segments"]) == 3 and r["segments"][-1]["file_count"] == 2
    assert t.to_arrow(filter=[("id", ">=", 10_000)]).column("id").to_pylist() == [10_000, 10_001]


def test_vacuum_removes_only_segments_no_kept_version_names(fast_store: Store) -> None:
    t = many_files(fast_store, n=40)
    for i in range(5):
        t.append(rows([1000 + i]))
    named = {s["path"] for s in root(fast_store, t)["segments"]}
    segments = {k for k in keys_under(fast_store, "t") if k.startswith("segment/")}
    assert named < segments, "the appends replaced the small last segment"
    removed = set(t.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0), dry_run=False))
    assert {k for k in removed if k.startswith("segment/")} == segments - named
    assert {k for k in keys_under(fast_store, "t") if k.startswith("segment/")} == named
    assert sorted(Table.open(fast_store, "t").to_arrow().column("id").to_pylist()) == [*range(40), *range(1000, 1005)]


READER = """
import json, sys, pds
store = pds.open_store(sys.argv[1], **json.loads(sys.argv[2]))
try:
    pds.Table.open(store, "t").to_arrow(filter=[("id", "==", int(sys.argv[3]))])
except pds.ManifestCorrupted as e:
    print("ManifestCorrupted", e)
else:
    print("read")
"""


def _urls(tmp_path: Path, request: pytest.FixtureRequest, kind: str) -> tuple[str, dict[str, str]]:
    return lake_url(kind, tmp_path, request)


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_a_damaged_or_missing_segment_is_manifest_corrupted_where_it_is_read(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """In a process that has not read the segment (this one keeps the
    segments it wrote): a changed byte or a missing segment is
    ``ManifestCorrupted`` naming it, for a point read of a key in it; a
    point read whose key the damaged segment cannot hold reads."""
    url, options = _urls(tmp_path, request, kind)
    store = pds.open_store(url, **options)
    t = many_files(store)
    first, second = (s["path"] for s in root(store, t)["segments"])

    def read(k: int) -> str:
        out = subprocess.run(
            [sys.executable, "-c", READER, url, json.dumps(options), str(k)], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    assert read(10) == "read"
    raw = bytearray(store.read_bytes(f"t/{first}"))
    raw[len(raw) // 2] ^= 0x01
    store.write(f"t/{first}", bytes(raw), overwrite=True)
    got = read(10)
    assert got.startswith("ManifestCorrupted") and first in got and "SHA-256" in got, got
    assert read(900) == "read", "the other segment is not read for a key it holds"
    store.delete(f"t/{second}")
    got = read(900)
    assert got.startswith("ManifestCorrupted") and "missing" in got, got


APPENDER = """
import json, sys, pds, pyarrow as pa
store = pds.open_store(sys.argv[1], **json.loads(sys.argv[2]))
w = int(sys.argv[3])
t = pds.Table.open(store, "t")
print("ready", flush=True)
sys.stdin.readline()
for i in range(6):
    k = 100_000 + 100 * w + i
    t.append(pa.table({"id": pa.array([k], pa.int64()), "tag": [f"p{w}"]}))
"""


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_processes_appending_to_a_segmented_table_all_land(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Four processes append six one-row files each at once, every append
    rewriting or adding the last segment: all 24 land, each in its own
    version, and no file of the table is lost from its segments."""
    url, options = _urls(tmp_path, request, kind)
    store = pds.open_store(url, **options)
    many_files(store, n=30)
    run_together([[sys.executable, "-c", APPENDER, url, json.dumps(options), str(w)] for w in range(4)])
    t = Table.open(store, "t")
    assert t.version == 24
    want = [*range(30), *(100_000 + 100 * w + i for w in range(4) for i in range(6))]
    assert sorted(t.to_arrow().column("id").to_pylist()) == sorted(want)
    assert sum(s["file_count"] for s in root(store, t)["segments"]) == 54
    assert len(t.manifest["data_files"]) == 54
