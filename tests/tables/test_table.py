"""pds.Table (issue D): append, delete by tombstone, snapshot scans, time
travel, the change feed, schema evolution, compaction and vacuum, on the
memory, file and SeaweedFS S3 stores. Each test names the item of the issue
it covers in its spec marker (D-1 ... D-10).
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from remote_store import AlreadyExists, CapabilityNotSupported, NotFound, RemoteStoreError, Store
from remote_store.backends import MemoryBackend

import pds
from pds import SchemaMismatch, Table

from helpers import files, table_manifest, table_segment


def rows(start: int, stop: int) -> pa.Table:
    """ids start..stop, with customer c<id % 7> and amount id / 2."""
    ids = list(range(start, stop))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "customer": pa.array([f"c{i % 7}" for i in ids], pa.string()),
            "amount": pa.array([i / 2 for i in ids], pa.float64()),
        }
    )


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def _keys(store: Store, key: str) -> set[str]:
    return {f[len(key) + 1 :] for f in files(store, key)}


@pytest.mark.spec("D-1")
def test_objects_under_the_table_key_and_what_a_manifest_holds(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 100), row_group_size=30)
    t.append(rows(100, 150))
    t.delete([("customer", "==", "c3")])
    keys = _keys(fast_store, "t")
    assert "_latest_manifest" in keys
    assert {"manifest/v00000000.json", "manifest/v00000001.json", "manifest/v00000002.json"} <= keys
    assert sum(k.startswith("data/") and k.endswith(".parquet") for k in keys) == 2
    assert sum(k.startswith("tombstone/") and k.endswith(".del") for k in keys) == 1
    pointer = json.loads(fast_store.read_bytes("t/_latest_manifest"))
    root = json.loads(fast_store.read_bytes("t/manifest/v00000002.json"))
    # The pointer and every version name the table's identity.
    assert pointer == {"version": 2, "manifest": "manifest/v00000002.json", "table_id": root["table_id"]}
    assert (root["format"], root["version"], root["previous"], root["operation"]) == ("pds-table/3", 2, 1, "delete")
    assert "data_files" not in root and "tombstones" not in root, "the file list is in segments"
    assert [table_segment(fast_store, "t", r)["format"] for r in root["segments"]] == ["pds-table-segment/1"]
    assert keys >= {r["path"] for r in root["segments"]}
    assert sum(r["file_count"] for r in root["segments"]) == 2
    assert sum(r["total_rows"] for r in root["segments"]) == 150
    m = table_manifest(fast_store, "t", 2)
    assert {k: v for k, v in m.items() if k != "checksum"} == Table.open(fast_store, "t").manifest
    assert [c["name"] for c in m["schema"]["columns"]] == ["id", "customer", "amount"]
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(m["schema"]["arrow_schema"])))
    assert schema.equals(rows(0, 1).schema)
    first = m["data_files"][0]
    assert first["total_rows"] == 100 and first["row_group_count"] == 4
    assert first["columns"]["id"] == {"min": 0, "max": 99, "null_count": 0}
    assert first["columns"]["customer"]["min"] == "c0"
    assert len(first["sha256"]) == 64 and first["size_bytes"] > 0
    assert m["tombstones"][0]["files"] == sorted(f["path"] for f in m["data_files"])
    tomb = json.loads(fast_store.read_bytes(f"t/{m['tombstones'][0]['path']}"))
    assert tomb["format"] == "pds-tombstone/1"
    assert {e["kind"] for e in tomb["entries"]} == {"rows"}


@pytest.mark.spec("D-2")
def test_appends_add_versions_and_rows(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", rows(0, 1).schema)
    assert t.version == 0 and t.to_arrow().num_rows == 0
    for i in range(3):
        assert t.append(rows(i * 10, i * 10 + 10)) == i + 1
    assert ids(t.to_arrow()) == list(range(30))
    # Empty input appends nothing.
    assert t.append(rows(0, 0)) == 3
    # Streams and other producers, zero copy.
    reader = pa.RecordBatchReader.from_batches(rows(0, 1).schema, rows(30, 40).to_batches(max_chunksize=3))
    assert t.append(reader) == 4
    assert t.to_arrow().num_rows == 40
    # Columns in another order are the same schema.
    assert t.append(rows(40, 41).select(["amount", "id", "customer"])) == 5
    assert ids(t.to_arrow()) == list(range(41))


@pytest.mark.spec("D-2")
def test_target_file_size_splits_appends_into_files(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", rows(0, 1).schema, target_file_size=20_000, row_group_size=500)
    t.append(rows(0, 10_000))
    f = t.files()
    assert f.num_rows > 3
    assert sum(f.column("rows").to_pylist()) == 10_000
    assert max(f.column("bytes").to_pylist()) <= 20_000
    assert ids(t.to_arrow()) == list(range(10_000))


@pytest.mark.spec("D-2")
def test_concurrent_appends_in_threads_all_land_once(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", rows(0, 1).schema)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            mine = Table.open(fast_store, "t")
            for i in range(4):
                mine.append(rows(w * 100 + i * 10, w * 100 + i * 10 + 10))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert t.refresh() == 32
    assert ids(t.to_arrow()) == sorted(w * 100 + j for w in range(8) for j in range(40))
    assert [h["version"] for h in t.history()] == list(range(32, -1, -1))


@pytest.mark.spec("D-3")
def test_delete_by_filter_rewrites_nothing(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 1000), row_group_size=100)
    t.append(rows(1000, 2000))
    before = {k: fast_store.read_bytes(f"t/{k}") for k in _keys(fast_store, "t") if k.startswith("data/")}
    v = t.delete([("customer", "==", "c3")])
    assert v == 2
    assert ids(t.to_arrow()) == [i for i in range(2000) if i % 7 != 3]
    # Whole row groups: ids 100..300 are two row groups of the first file.
    t.delete([("id", ">=", 100), ("id", "<", 300)])
    m = table_manifest(fast_store, "t", 3)
    tomb = json.loads(fast_store.read_bytes(f"t/{m['tombstones'][-1]['path']}"))
    assert [e["kind"] for e in tomb["entries"]] == ["row_group", "row_group"]
    assert ids(t.to_arrow()) == [i for i in range(2000) if i % 7 != 3 and not 100 <= i < 300]
    after = {k: fast_store.read_bytes(f"t/{k}") for k in _keys(fast_store, "t") if k.startswith("data/")}
    assert after == before, "no data file rewritten or added"
    # Matches nothing: no commit.
    assert t.delete([("id", ">", 10**9)]) == 3
    assert t.delete([("id", "==", 2.5)]) == 3
    assert t.history(1)[0]["rows_deleted"] == sum(1 for i in range(100, 300) if i % 7 != 3)
    d = t.files()
    assert d.column("deleted_rows").to_pylist()[0] == sum(1 for i in range(1000) if i % 7 == 3 or 100 <= i < 300)


@pytest.mark.spec("D-3")
def test_primary_key_range_delete_writes_key_ranges(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 1000), primary_key="id")
    t.append(rows(1000, 2000))
    assert t.primary_key == "id"
    t.delete([("id", ">=", 990), ("id", "<=", 1009)])
    m = table_manifest(fast_store, "t", 2)
    tomb = json.loads(fast_store.read_bytes(f"t/{m['tombstones'][0]['path']}"))
    assert tomb["entries"] == [
        {"kind": "pk_range", "file": m["data_files"][0]["path"], "pk_min": 990, "pk_max": 1009},
        {"kind": "pk_range", "file": m["data_files"][1]["path"], "pk_min": 990, "pk_max": 1009},
    ]
    assert ids(t.to_arrow()) == [i for i in range(2000) if not 990 <= i <= 1009]
    # Exclusive bounds and an equality; a filter on another column still works.
    t.delete([("id", ">", 1500)])
    t.delete([("id", "==", 3)])
    t.delete([("customer", "==", "c1")])
    expected = [i for i in range(2000) if not 990 <= i <= 1009 and i <= 1500 and i != 3 and i % 7 != 1]
    assert ids(t.to_arrow()) == expected
    assert ids(t.to_arrow(filter=[("id", "<", 20)])) == [i for i in expected if i < 20]
    assert t.files().column("deleted_rows").null_count == 2  # key ranges are counted on read


@pytest.mark.spec("D-3")
def test_bad_filters_fail_before_any_io(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10))
    with pytest.raises(TypeError):
        t.delete([])
    with pytest.raises(TypeError):
        t.delete(pc.field("id") > 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        t.delete([("id", "==", "abc")])
    with pytest.raises(ValueError):
        t.delete([("nope", "==", 1)])
    with pytest.raises(ValueError):
        t.delete([("id", "~", 1)])
    assert t.refresh() == 0


@pytest.mark.spec("D-4")
def test_scan_projects_filters_and_batches(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 5000), row_group_size=1000)
    t.delete([("customer", "==", "c0")])
    r = t.scan(columns=["amount", "id"], filter=[("id", ">=", 4000)], batch_size=128)
    assert r.schema.names == ["amount", "id"]
    got = r.read_all()
    assert max(b.num_rows for b in got.to_batches()) <= 128
    assert ids(got) == [i for i in range(4000, 5000) if i % 7 != 0]
    # An Expression filter is applied after decoding.
    e = t.to_arrow(columns=["id"], filter=pc.field("amount") < 10)
    assert e.column_names == ["id"]
    assert ids(e) == [i for i in range(20) if i % 7 != 0]
    with pytest.raises(ValueError):
        t.scan(columns=["nope"])


@pytest.mark.spec("D-4")
def test_a_scan_sees_one_snapshot_while_commits_land(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 3000), row_group_size=100)
    reader = t.scan(batch_size=100)
    first = reader.read_next_batch()
    other = Table.open(fast_store, "t")
    other.append(rows(3000, 4000))
    other.delete([("id", "<", 2000)])
    rest = reader.read_all()
    seen = first.num_rows + rest.num_rows
    assert seen == 3000
    assert t.version == 0
    assert t.to_arrow().num_rows == 3000  # still pinned to version 0
    assert t.refresh() == 2
    assert ids(t.to_arrow()) == list(range(2000, 4000))


@pytest.mark.spec("D-5")
def test_time_travel_by_version_and_time(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10))
    t.append(rows(10, 20))
    t.delete([("id", "<", 5)])
    history = t.history()
    assert [h["operation"] for h in history] == ["delete", "append", "create"]
    assert [h["rows_added"] for h in history] == [0, 10, 10]
    assert history[0]["rows_deleted"] == 5
    assert history[0]["parameters"]["filter"] == [["id", "lt", [5]]]
    assert [h["version"] for h in t.history(limit=2)] == [2, 1]
    assert ids(t.to_arrow(version=0)) == list(range(10))
    assert ids(t.to_arrow(version=1)) == list(range(20))
    assert ids(t.to_arrow(version=2)) == list(range(5, 20))
    created = {h["version"]: h["created_at"] for h in history}
    assert ids(t.to_arrow(as_of=created[1])) == list(range(20))
    assert ids(t.to_arrow(as_of=created[1] + datetime.timedelta(microseconds=1))) == list(range(20))
    assert ids(t.to_arrow(as_of=created[2] + datetime.timedelta(days=1))) == list(range(5, 20))
    with pytest.raises(NotFound, match="no version created at or before"):
        t.to_arrow(as_of=created[0] - datetime.timedelta(days=1))
    with pytest.raises(NotFound):
        t.to_arrow(version=99)
    with pytest.raises(ValueError):
        t.to_arrow(version=1, as_of=created[1])
    with pytest.raises(TypeError):
        t.to_arrow(as_of="yesterday")  # type: ignore[arg-type]


@pytest.mark.spec("D-5")
def test_change_feed_gives_inserts_and_deletes(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10), primary_key="id", row_group_size=4)
    t.append(rows(10, 14))
    t.delete([("customer", "==", "c0")])  # 0, 7 (v0 file), none in 10..13
    t.delete([("id", ">=", 12)])  # a key range: 12, 13
    feed = t.changes(0).read_all()
    assert feed.schema.names == ["id", "customer", "amount", "_change_type", "_commit_version"]
    got = sorted(
        zip(feed["_commit_version"].to_pylist(), feed["_change_type"].to_pylist(), feed["id"].to_pylist(), strict=True)
    )
    expected = (
        [(0, "insert", i) for i in range(10)]
        + [(1, "insert", i) for i in range(10, 14)]
        + [(2, "delete", 0), (2, "delete", 7)]
        + [(3, "delete", 12), (3, "delete", 13)]
    )
    assert got == sorted(expected)
    # A following pipeline: changes after version 1 only.
    tail = t.changes(2).read_all()
    assert set(tail["_change_type"].to_pylist()) == {"delete"}
    # Overlapping deletes are reported once.
    t.delete([("id", ">=", 11)])
    last = t.changes(4, 4).read_all()
    assert last["id"].to_pylist() == [11]
    with pytest.raises(ValueError):
        t.changes(3, 1)


@pytest.mark.spec("D-6")
def test_schema_lives_in_every_version_and_evolves_by_merge(fast_store: Store) -> None:
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("name", pa.string())])
    t = Table.create(fast_store, "t", schema)
    assert t.schema.equals(schema)
    t.append(pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"]}, schema=schema))
    wider = pa.table({"id": pa.array([3], pa.int64()), "name": ["c"], "score": [0.5]})
    with pytest.raises(SchemaMismatch) as err:
        t.append(wider)
    assert "id" in str(err.value) and "score" in str(err.value)
    assert isinstance(err.value, RemoteStoreError)
    assert t.append(wider, schema_mode="merge") == 2
    assert t.schema.field("id").type == pa.int64()
    assert t.schema.field("score").nullable
    got = t.to_arrow().sort_by("id")
    assert got.column("id").type == pa.int64()
    assert got.column("score").to_pylist() == [None, None, 0.5]
    assert t.to_arrow(filter=[("score", "is_null")]).num_rows == 2
    assert sorted(t.history(1)[0]["schema_change"]) == ['added "score" Float64', 'widened "id" Int32 -> Int64']
    assert t.to_arrow(version=1).schema.equals(schema)
    # Narrowing and dropping a not-null column are refused even in merge.
    with pytest.raises(SchemaMismatch):
        t.append(pa.table({"name": ["x"]}), schema_mode="merge")
    with pytest.raises(SchemaMismatch):
        t.append(pa.table({"id": ["x"]}), schema_mode="merge")
    with pytest.raises(ValueError):
        t.append(wider, schema_mode="loose")


@pytest.mark.spec("D-7")
def test_compaction_rewrites_thinned_and_small_files(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 100), row_group_size=10)
    for i in range(1, 5):
        t.append(rows(i * 100, i * 100 + 100))
    t.delete([("id", "<", 60)])  # 60% of the first file
    t.delete([("customer", "==", "c2")])
    expected = ids(t.to_arrow())
    before = t.version
    v = t.compact(min_deleted_fraction=0.5)
    assert v == before + 1
    assert ids(t.to_arrow()) == expected
    f = t.files()
    assert f.num_rows == 1, "five small files merged into one"
    assert f.column("deleted_rows").to_pylist() == [0]
    h = t.history(1)[0]
    assert h["operation"] == "compact" and h["parameters"]["files_removed"] == 5
    # Time travel still reads the old files, and the change feed sees no change.
    assert ids(t.to_arrow(version=before)) == expected
    assert t.changes(v, v).read_all().num_rows == 0
    # Nothing to do: no commit.
    assert t.compact() == v


@pytest.mark.spec("D-7")
def test_compaction_racing_deletes_loses_no_delete() -> None:
    store = pds.open_store("memory://")
    t = Table.create(store, "t", data=rows(0, 2000), row_group_size=50, target_file_size=10**9)
    for i in range(1, 4):
        t.append(rows(i * 2000, i * 2000 + 2000))
    deleted: list[int] = []
    errors: list[BaseException] = []

    def deleter() -> None:
        mine = Table.open(store, "t")
        try:
            for k in range(0, 8000, 400):
                mine.delete([("id", ">=", k), ("id", "<", k + 40)])
                deleted.extend(range(k, k + 40))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def compactor() -> None:
        mine = Table.open(store, "t")
        try:
            for _ in range(10):
                mine.compact(min_deleted_fraction=0.0)
        except pds.CommitConflict:
            pass  # gave up cleanly: allowed
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=deleter), threading.Thread(target=compactor)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    t.refresh()
    assert ids(t.to_arrow()) == sorted(set(range(8000)) - set(deleted))


@pytest.mark.spec("D-8")
def test_vacuum_removes_only_what_no_retained_version_needs(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 100), row_group_size=10)
    t.append(rows(100, 200))
    t.delete([("id", "<", 50)])
    # An orphan, as a crashed writer leaves it.
    fast_store.write("t/data/part-orphan-00000.parquet", b"PAR1 unfinished")
    t.compact(min_deleted_fraction=0.1)
    assert t.vacuum() == [], "nothing is older than 7 days"
    planned = t.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0))
    assert "data/part-orphan-00000.parquet" in planned
    assert any(p.startswith("manifest/v0000000") for p in planned)
    assert any(p.startswith("tombstone/") for p in planned)
    assert all(k in _keys(fast_store, "t") for k in planned), "dry run removes nothing"
    removed = t.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0), dry_run=False)
    assert removed == planned
    keys = _keys(fast_store, "t")
    assert not keys & set(removed)
    m = table_manifest(fast_store, "t", t.version)
    assert keys == {"_latest_manifest", f"manifest/v{t.version:08d}.json"} | {f["path"] for f in m["data_files"]} | {
        r["path"] for r in m["segments"]
    }
    assert ids(t.to_arrow()) == list(range(50, 200))
    with pytest.raises(NotFound):
        t.to_arrow(version=0)
    with pytest.raises(TypeError):
        t.vacuum(retain=3)  # type: ignore[arg-type]


@pytest.mark.spec("D-9")
def test_a_store_without_conditional_writes_is_refused_before_io() -> None:
    backend = MemoryBackend()
    store = Store(backend)
    with pytest.raises(CapabilityNotSupported):
        Table.create(store, "t", data=rows(0, 3))
    with pytest.raises(CapabilityNotSupported):
        Table.open(store, "t")
    assert list(store.list_files("", recursive=True)) == []


@pytest.mark.spec("D-10")
def test_the_api_takes_urls_and_raises_documented_errors(tmp_path: Any) -> None:
    url = (tmp_path / "lake").as_uri()
    t = Table.create(url, "t", data=rows(0, 5))
    assert Table.open(url, "t").version == 0
    with pytest.raises(AlreadyExists):
        Table.create(url, "t", data=rows(0, 5))
    assert Table.create(url, "t", rows(0, 1).schema, exist_ok=True).version == 0
    with pytest.raises(AlreadyExists):
        Table.create(url, "t", data=rows(0, 5), exist_ok=True)  # never drops data
    with pytest.raises(SchemaMismatch):
        Table.create(url, "t", pa.schema([("x", pa.int8())]), exist_ok=True)
    with pytest.raises(NotFound):
        Table.open(url, "absent")
    with pytest.raises(NotFound):
        Table.open(pds.open_store("memory://"), "absent")
    with pytest.raises(TypeError):
        Table.create(url, "u")
    with pytest.raises(ValueError):
        Table.create(url, "u", data=rows(0, 5), primary_key="nope")
    with pytest.raises(ValueError):
        Table.create(url, "u", data=rows(0, 5), compression="nope")
    with pytest.raises(TypeError):
        Table.create(pds.open_store(url), "u", data=rows(0, 5), region="x")
    assert issubclass(pds.CommitConflict, RemoteStoreError)
    assert issubclass(SchemaMismatch, RemoteStoreError)
    assert repr(t) == "Table('t', version=0)"
    for name in ("create", "open", "append", "delete", "scan", "history", "files", "changes", "compact", "vacuum"):
        assert "Cost" in (getattr(Table, name).__doc__ or ""), name


# -- S-6: panics and error types ---------------------------------------------------


def _wipe(store: Store, key: str) -> None:
    for k in files(store, key):
        store.delete(k)


@pytest.mark.spec("S-6")
def test_out_of_range_versions_and_times_are_value_errors_before_any_io(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10))
    t.append(rows(10, 20))
    _wipe(fast_store, "t")  # Any I/O now fails with NotFound: a ValueError proves none was done.
    naive_min = datetime.datetime.min
    calls: list[Callable[[Any], object]] = [
        lambda v: t.scan(version=v),
        lambda v: t.to_arrow(version=v),
        lambda v: t.at(version=v),
        lambda v: t.files(v),
        lambda v: t.changes(v, 1),
        lambda v: t.changes(0, v),
    ]
    for bad in (2**64, 2**63, -1, True, 1.0):
        for call in calls:
            with pytest.raises(ValueError, match="from 0 to"):
                call(bad)
    for call in (lambda: t.scan(as_of=naive_min), lambda: t.to_arrow(as_of=naive_min), lambda: t.at(as_of=naive_min)):
        with pytest.raises(ValueError, match="out of range"):
            call()
    assert pds.table.MAX_VERSION == 2**63 - 1
    # Pipelines take versions too.
    p = pds.Pipeline.create(fast_store, "p")
    p.source("people", key={"id": pa.int64()}, value=pa.schema([("id", pa.int64())]))
    for bad in (2**64, -1):
        with pytest.raises(ValueError, match="from 0 to"):
            p.read("people", version=bad)
        with pytest.raises(ValueError, match="from 0 to"):
            p.changes("people", version=bad)


@pytest.mark.spec("S-6")
def test_no_version_then_is_not_found_as_documented(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10))
    t.append(rows(10, 20))
    created = t.history()[-1]["created_at"]
    before = created - datetime.timedelta(seconds=1)
    utc_min = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    readers: list[Callable[[datetime.datetime], object]] = [
        lambda w: t.at(as_of=w),
        lambda w: t.scan(as_of=w),
        lambda w: t.to_arrow(as_of=w),
    ]
    for when in (before, utc_min):
        for read in readers:
            with pytest.raises(NotFound, match="no version created at or before") as info:
                read(when)
            assert info.value.path.endswith("t")
    for call in (lambda: t.at(version=pds.table.MAX_VERSION), lambda: t.files(7), lambda: t.to_arrow(version=2)):
        with pytest.raises(NotFound, match="has no version"):
            call()
    # The latest version, by a time far ahead, and version 0 by its own time.
    assert t.at(as_of=datetime.datetime.max.replace(tzinfo=datetime.UTC)).version == 1
    assert t.at(as_of=created).version == 0


@pytest.mark.spec("S-6")
def test_a_pointer_naming_a_missing_version_is_manifest_corrupted(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10))
    t.append(rows(10, 20))
    fast_store.write(
        "t/_latest_manifest", json.dumps({"version": 9, "manifest": "manifest/v00000009.json"}).encode(), overwrite=True
    )
    for call in (lambda: Table.open(fast_store, "t"), t.refresh, lambda: t.append(rows(20, 21)), t.compact):
        with pytest.raises(pds.ManifestCorrupted, match="version 9") as info:
            call()
        assert info.value.path.endswith("t/_latest_manifest")
    with pytest.raises(NotFound):  # NotFound still means: no table.
        Table.open(fast_store, "absent")
    assert ids(t.to_arrow(version=1)) == list(range(20))


def _not_null_schema() -> pa.Schema:
    return pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def _with_nulls(start: int, n: int, null_at: int | None) -> pa.Table:
    ids_ = [None if i == null_at else i for i in range(start, start + n)]
    return pa.table({"id": pa.array(ids_, pa.int64()), "v": pa.array([str(i) for i in range(n)])})


@pytest.mark.spec("S-6")
def test_nulls_into_a_not_nullable_column_are_schema_mismatch_leaving_nothing(fast_store: Store) -> None:
    schema = _not_null_schema()
    # Create with data: the null is in the last of many batches, after whole files were uploaded.
    batches = [b for i in range(20) for b in _with_nulls(i * 500, 500, 9_999 if i == 19 else None).to_batches()]
    data = pa.Table.from_batches(batches)
    with pytest.raises(SchemaMismatch, match='"id" is not nullable') as info:
        Table.create(fast_store, "t", schema, data=data, target_file_size=4096)
    assert "1 null" in str(info.value)
    assert files(fast_store, "t") == []
    t = Table.create(fast_store, "t", schema, data=_with_nulls(0, 10, None))
    before = files(fast_store, "t")
    with pytest.raises(SchemaMismatch, match='"id" is not nullable'):
        t.append(_with_nulls(10, 10, 15))
    with pytest.raises(SchemaMismatch, match='"id" is not nullable'):
        t.append(data, schema_mode="merge")
    assert files(fast_store, "t") == before and t.refresh() == 0
    assert ids(t.to_arrow()) == list(range(10))


@pytest.mark.spec("S-6")
def test_nulls_into_a_not_nullable_column_through_commit_files_are_schema_mismatch(fast_store: Store) -> None:
    """The Spark path: tasks upload with table_write_files, the driver commits with table_commit_files."""
    handle = pds.backend.native_handle(fast_store)
    assert handle is not None
    root = fast_store.native_path("t")
    settings: dict[str, Any] = {"compression": "zstd", "row_group_size": None, "target_file_size": None}
    with pytest.raises(SchemaMismatch, match='"id" is not nullable'):
        pds._core.table_write_files(
            handle,
            root,
            _with_nulls(0, 10, 3),
            prefix="job1-00000-0",
            schema=_not_null_schema(),
            parallelism=2,
            **settings,
        )
    assert files(fast_store, "t") == []
    # Files written as nullable hold a null; committing them as not nullable is refused, before any commit.
    text = pds._core.table_write_files(
        handle,
        root,
        _with_nulls(0, 10, 3),
        prefix="job2-00000-0",
        schema=_with_nulls(0, 1, None).schema,
        parallelism=2,
        **settings,
    )
    assert len(files(fast_store, "t")) == 1
    for mode in ("append", "overwrite"):
        with pytest.raises(SchemaMismatch, match='"id" is not nullable'):
            pds._core.table_commit_files(
                handle, root, text, mode=mode, schema=_not_null_schema(), primary_key=None, metadata=None, **settings
            )
        assert files(fast_store, "t") == []


@pytest.mark.spec("S-6")
def test_compacting_a_damaged_part_raises_part_corrupted_itself(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 100), row_group_size=10)
    for i in range(1, 4):
        t.append(rows(i * 100, i * 100 + 100))
    victim = t.manifest["data_files"][1]["path"]
    raw = bytearray(fast_store.read_bytes(f"t/{victim}"))
    raw[len(raw) // 3 : len(raw) // 3 + 64] = bytes(64)  # Same size, damaged column chunks.
    fast_store.write(f"t/{victim}", bytes(raw), overwrite=True)
    before = files(fast_store, "t")
    with pytest.raises(pds.PartCorrupted) as info:
        t.compact(target_file_size=1 << 20)
    assert type(info.value) is pds.PartCorrupted and victim in str(info.value)
    assert files(fast_store, "t") == before, "nothing committed, no new file left"
    assert t.refresh() == 3


@pytest.mark.spec("S-6")
def test_changes_need_their_range_and_the_version_before_it_and_say_which(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10), primary_key="id")
    for i in range(1, 5):
        t.append(rows(i * 10, i * 10 + 10))
    t.delete([("id", "<", 5)])  # version 5
    # Version 2's manifest is gone, as vacuum leaves the oldest versions.
    fast_store.delete("t/manifest/v00000002.json")
    got = t.changes(4).read_all()
    assert sorted(
        zip(got.column("_commit_version").to_pylist(), got.column("_change_type").to_pylist(), strict=True)
    ) == ([(4, "insert")] * 10 + [(5, "delete")] * 5)
    assert ids(t.changes(4, 4).read_all()) == list(range(40, 50))
    with pytest.raises(NotFound, match=r"need the manifest of version 2 .*from version 4 or later") as info:
        t.changes(3)
    assert info.value.path.endswith("t")
    for start, end in ((2, 5), (0, 3), (2, 2)):
        with pytest.raises(NotFound, match="include version 2 "):
            t.changes(start, end)
    with pytest.raises(NotFound, match="include version 9 "):
        t.changes(4, 9)


@pytest.mark.spec("S-6")
def test_create_exist_ok_returns_only_a_table_made_as_asked(fast_store: Store) -> None:
    schema = rows(0, 1).schema
    Table.create(fast_store, "t", schema, primary_key="id", compression="zstd", row_group_size=1000)
    same = Table.create(fast_store, "t", schema, primary_key="id", row_group_size=1000, exist_ok=True)
    assert same.version == 0 and same.primary_key == "id"
    for kwargs, says in (
        ({"primary_key": "customer"}, 'primary_key is "id", not "customer"'),
        ({"primary_key": None}, 'primary_key is "id", not none'),
        ({"primary_key": "id", "compression": "snappy"}, 'compression is "zstd", not "snappy"'),
        ({"primary_key": "id", "row_group_size": None}, "row_group_size is 1000, not 1048576"),
        ({"primary_key": "id", "target_file_size": 1 << 20}, "target_file_size is 536870912, not 1048576"),
    ):
        args: dict[str, Any] = {"row_group_size": 1000, **kwargs}
        with pytest.raises(SchemaMismatch, match="exists with other settings") as info:
            Table.create(fast_store, "t", schema, exist_ok=True, **args)
        assert says in str(info.value)
    # Unset sizes mean the defaults: a table made without them matches them given explicitly.
    Table.create(fast_store, "u", schema)
    assert (
        Table.create(fast_store, "u", schema, row_group_size=1 << 20, target_file_size=512 << 20, exist_ok=True).version
        == 0
    )


@pytest.mark.spec("S-6")
def test_spark_version_options_are_checked_before_any_io() -> None:
    from pds.spark._table_job import version_options

    for bad in (
        {"versionasof": str(2**64)},
        {"versionasof": str(2**63)},
        {"versionasof": "-1"},
        {"versionasof": "x"},
        {"timestampasof": "yesterday"},
        {"versionasof": "1", "timestampasof": "2020-01-01"},
    ):
        with pytest.raises(ValueError):
            version_options(bad)
    assert version_options({"versionasof": str(2**63 - 1)}) == (2**63 - 1, None)
    utc_min = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    assert version_options({"timestampasof": "0001-01-01"}) == (None, utc_min)
    assert version_options({}) == (None, None)
