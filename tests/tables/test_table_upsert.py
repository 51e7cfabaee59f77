"""Upsert by primary key and update by filter (issue T, item 1): one commit
each, no data file rewritten, results equal to a model, bad input refused
before any I/O, the change feed's pre- and post-images, and concurrent
writers (threads, and processes on file:// and SeaweedFS) ending as a serial
order would.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from remote_store import Store
from store_kinds import REMOTE, lake_url

import pds
from pds import Table

from helpers import files, run_together

pytestmark = pytest.mark.spec("T-1")

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("x", pa.int64())])
Model = dict[int, tuple[str, int]]


def rows(model: Model) -> pa.Table:
    ids = sorted(model)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "name": [model[i][0] for i in ids], "x": [model[i][1] for i in ids]},
        schema=SCHEMA,
    )


def content(t: Table, version: int | None = None) -> Model:
    got = t.to_arrow(version=version).to_pylist()
    out = {r["id"]: (r["name"], r["x"]) for r in got}
    assert len(out) == len(got), "a key occurs twice"
    return out


def tombstone_kinds(store: Store, t: Table) -> list[str]:
    """The entry kinds of the tombstone the last version added."""
    name = t.history(1)[0]["parameters"]["tombstone"]
    raw = json.loads(store.read_bytes(f"{t.key}/{name}"))
    return sorted({e["kind"] for e in raw["entries"]})


def data_files(t: Table) -> dict[str, str]:
    return {f["path"]: f["sha256"] for f in t.manifest["data_files"]}


def test_upserts_replace_keys_and_insert_the_rest_without_rewriting_a_file(fast_store: Store) -> None:
    rng = random.Random(7)
    model: Model = {i: (f"n{i}", i) for i in range(2000)}
    t = Table.create(fast_store, "t", data=rows(model), primary_key="id", row_group_size=256)
    for round_ in range(6):
        if round_ % 2 == 0:
            keys = rng.sample(range(3000), 150)  # scattered, a third new
        else:
            start = rng.randrange(0, 2500)
            keys = list(range(start, start + 300))  # consecutive
        new = {k: (f"r{round_}-{k}", round_ * 10_000 + k) for k in keys}
        before = data_files(t)
        v = t.upsert(rows(new))
        model.update(new)
        assert v == t.version and t.history(1)[0]["operation"] == "upsert"
        assert content(t) == model
        after = data_files(t)
        # Nothing rewritten: every file stays, unchanged; the new rows are new files.
        assert all(after.get(p) == sha for p, sha in before.items())
        assert sum(f["rows"] for f in t.files().to_pylist() if f["path"] not in before) == len(keys)
        kinds = tombstone_kinds(fast_store, t)
        assert kinds == (["pk_range"] if round_ % 2 else sorted(set(kinds) & {"rows", "row_group"}))
        assert kinds
    # Time travel still reads every earlier version.
    assert content(t, version=0) == {i: (f"n{i}", i) for i in range(2000)}


def test_string_keys_and_a_second_upsert_of_the_same_keys(fast_store: Store) -> None:
    schema = pa.schema([("k", pa.string()), ("v", pa.float64())])
    t = Table.create(
        fast_store, "s", data=pa.table({"k": ["a", "b", "c"], "v": [1.0, 2.0, 3.0]}, schema=schema), primary_key="k"
    )
    t.upsert(pa.table({"k": ["b", "d"], "v": [20.0, 40.0]}, schema=schema))
    t.upsert(pa.table({"k": ["b", "a"], "v": [200.0, 100.0]}, schema=schema))
    got = {r["k"]: r["v"] for r in t.to_arrow().to_pylist()}
    assert got == {"a": 100.0, "b": 200.0, "c": 3.0, "d": 40.0}
    assert t.to_arrow().num_rows == 4


def test_upsert_with_merge_adds_a_column(fast_store: Store) -> None:
    t = Table.create(fast_store, "m", data=rows({1: ("a", 1), 2: ("b", 2)}), primary_key="id")
    wider = pa.table({"id": [2, 3], "name": ["B", "C"], "x": [20, 30], "extra": ["e2", "e3"]})
    with pytest.raises(pds.SchemaMismatch):
        t.upsert(wider)
    t.upsert(wider, schema_mode="merge")
    got = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert got == [
        {"id": 1, "name": "a", "x": 1, "extra": None},
        {"id": 2, "name": "B", "x": 20, "extra": "e2"},
        {"id": 3, "name": "C", "x": 30, "extra": "e3"},
    ]
    assert t.history(1)[0]["schema_change"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pa.table({"id": [1, 2, 1], "name": ["a", "b", "c"], "x": [1, 2, 3]}), "repeats primary keys"),
        (pa.table({"id": [1, None], "name": ["a", "b"], "x": [1, 2]}), "null keys"),
        (pa.table({"name": ["a"], "x": [1]}), "lacks the primary-key column"),
    ],
    ids=["duplicate", "null", "no-key-column"],
)
def test_bad_upserts_are_refused_before_any_io(fast_store: Store, data: pa.Table, message: str) -> None:
    t = Table.create(fast_store, "b", data=rows({1: ("a", 1)}), primary_key="id")
    before = files(fast_store, "b")
    with pytest.raises(ValueError, match=message):
        t.upsert(data)
    assert files(fast_store, "b") == before
    assert Table.open(fast_store, "b").version == 0


def test_nan_keys_and_tables_without_a_key_are_refused(fast_store: Store) -> None:
    f = Table.create(fast_store, "f", data=pa.table({"k": [1.0, 2.0]}), primary_key="k")
    with pytest.raises(ValueError, match="NaN"):
        f.upsert(pa.table({"k": [float("nan")]}))
    plain = Table.create(fast_store, "p", data=rows({1: ("a", 1)}))
    before = files(fast_store, "p")
    with pytest.raises(ValueError, match="declares none"):
        plain.upsert(rows({1: ("z", 9)}))
    assert files(fast_store, "p") == before


def test_update_sets_values_and_expressions_by_tuples_expressions_or_every_row(fast_store: Store) -> None:
    model: Model = {i: (f"n{i % 7}", i) for i in range(1000)}
    t = Table.create(fast_store, "u", data=rows(model), primary_key="id", row_group_size=100)
    before = data_files(t)
    t.update([("x", ">=", 500), ("name", "==", "n3")], {"x": pc.field("x") * 2, "name": "three"})
    model = {k: (("three", x * 2) if x >= 500 and n == "n3" else (n, x)) for k, (n, x) in model.items()}
    assert content(t) == model
    assert all(data_files(t).get(p) == sha for p, sha in before.items())
    assert t.history(1)[0]["operation"] == "update"
    assert t.history(1)[0]["rows_deleted"] == sum(1 for n, _ in model.values() if n == "three")
    # An expression filter the tuples cannot express.
    t.update(pc.equal(pc.bit_wise_and(pc.field("x"), 7), 3), {"x": pc.field("x") + 1})
    model = {k: ((n, x + 1) if x & 7 == 3 else (n, x)) for k, (n, x) in model.items()}
    assert content(t) == model
    # Every row.
    t.update(None, {"name": "all"})
    model = {k: ("all", x) for k, (_, x) in model.items()}
    assert content(t) == model
    # Nothing matches: nothing is committed.
    v = t.version
    assert t.update([("x", "<", -1)], {"x": 0}) == v
    assert t.update(pc.field("x") < -1, {"x": 0}) == v


def test_bad_updates_are_refused_and_leave_nothing(fast_store: Store) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("x", pa.int64(), nullable=False)])
    t = Table.create(fast_store, "e", data=pa.table({"id": [1, 2], "x": [1, 2]}, schema=schema), primary_key="id")
    before = files(fast_store, "e")
    for bad_set, error in [
        ({"nope": 1}, ValueError),
        ({"x": "text"}, ValueError),
        ({"x": None}, ValueError),
        ({}, TypeError),
        ([("x", 1)], TypeError),
    ]:
        with pytest.raises(error):
            t.update(None, bad_set)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        t.update("x > 1", {"x": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="filter=None"):
        t.update([], {"x": 1})
    # An expression that fails raises its own error; nothing is committed.
    with pytest.raises(pa.ArrowInvalid):
        t.update(None, {"x": pc.divide(pc.field("x"), pc.scalar(0))})
    # An expression that gives nulls for a not-null column.
    with pytest.raises(pds.SchemaMismatch):
        t.update(None, {"x": pc.if_else(pc.field("x") > 1, pc.scalar(pa.scalar(None, pa.int64())), pc.field("x"))})
    assert files(fast_store, "e") == before
    assert Table.open(fast_store, "e").version == 0


def test_changes_show_upserts_and_updates_as_pre_and_post_images(fast_store: Store) -> None:
    t = Table.create(fast_store, "c", data=rows({i: ("a", i) for i in range(10)}), primary_key="id")
    t.upsert(rows({3: ("b", 30), 4: ("b", 40), 20: ("new", 200)}))
    t.update([("id", "<", 2)], {"x": pc.field("x") + 100})
    t.delete([("id", "==", 9)])
    t.append(rows({50: ("z", 5)}))
    feed = t.changes(1).read_all().to_pylist()
    got = sorted((r["_commit_version"], r["_change_type"], r["id"], r["x"]) for r in feed)
    assert got == sorted(
        [
            (1, "update_preimage", 3, 3),
            (1, "update_preimage", 4, 4),
            (1, "update_postimage", 3, 30),
            (1, "update_postimage", 4, 40),
            (1, "insert", 20, 200),
            (2, "update_preimage", 0, 0),
            (2, "update_preimage", 1, 1),
            (2, "update_postimage", 0, 100),
            (2, "update_postimage", 1, 101),
            (3, "delete", 9, 9),
            (4, "insert", 50, 5),
        ]
    )


def test_upserts_and_updates_racing_appends_and_compaction_end_serially(fast_store: Store) -> None:
    """Threads: upserts of overlapping keys, updates that add 1 to every
    row, appends of new keys, and compactions. No update is lost or doubled,
    and each key holds the value of the last upsert that wrote it."""
    import threading

    Table.create(fast_store, "r", data=rows({i: ("base", 0) for i in range(200)}), primary_key="id")
    results: dict[str, list[tuple[int, Any]]] = {"upsert": [], "update": [], "append": []}
    errors: list[BaseException] = []

    def run(name: str, f: Callable[[Table, int], tuple[int, Any]], n: int) -> None:
        mine = Table.open(fast_store, "r")
        try:
            for i in range(n):
                results[name].append(f(mine, i))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def upsert(tb: Table, i: int) -> tuple[int, Any]:
        keys = list(range(50 + 20 * i, 150 + 20 * i))
        return tb.upsert(rows({k: (f"u{i}", 0) for k in keys})), keys

    def update(tb: Table, i: int) -> tuple[int, Any]:
        return tb.update(None, {"x": pc.field("x") + 1}), None

    def append(tb: Table, i: int) -> tuple[int, Any]:
        return tb.append(rows({10_000 + i: ("app", 0)})), None

    def compact(tb: Table, i: int) -> tuple[int, Any]:
        return tb.compact(min_deleted_fraction=0.0), None

    threads = [
        threading.Thread(target=run, args=("upsert", upsert, 4)),
        threading.Thread(target=run, args=("update", update, 4)),
        threading.Thread(target=run, args=("append", append, 4)),
        threading.Thread(target=run, args=("compact", compact, 2)),
    ]
    results["compact"] = []
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    final = content(Table.open(fast_store, "r"))
    # Replay the commits in version order: the table must be that serial result.
    ops: list[tuple[int, str, Any]] = [(v, name, arg) for name in results for v, arg in results[name]]
    model: Model = {i: ("base", 0) for i in range(200)}
    appended = iter(range(10_000, 10_004))
    for _, name, arg in sorted(ops, key=lambda o: o[0]):
        if name == "upsert":
            i = [a for _, a in results["upsert"]].index(arg)
            model.update({k: (f"u{i}", 0) for k in arg})
        elif name == "update":
            model = {k: (n, x + 1) for k, (n, x) in model.items()}
        elif name == "append":
            model[next(appended)] = ("app", 0)
    assert final == model


WORKER = r"""
import json, sys
import pyarrow as pa, pyarrow.compute as pc, pds
url, options, worker, op, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
t = pds.Table.open(url, "t", **options)
print("ready", flush=True)
sys.stdin.readline()  # start together
done = []
for i in range(count):
    if op == "upsert":
        keys = list(range(40 * i + 10 * worker, 40 * i + 10 * worker + 60))
        table = pa.table({"id": pa.array(keys, pa.int64()), "w": pa.array([worker] * len(keys), pa.int64()),
                          "n": pa.array([0] * len(keys), pa.int64())})
        done.append([t.upsert(table), worker, keys])
    else:
        done.append([t.update(None, {"n": pc.field("n") + 1}), worker, None])
print(json.dumps(done), flush=True)
"""


def _urls(tmp_path: Path, request: pytest.FixtureRequest, kind: str) -> tuple[str, dict[str, str]]:
    return lake_url(kind, tmp_path, request)


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_processes_upserting_overlapping_keys_and_updating_end_serially(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Three processes upsert overlapping key ranges, two add 1 to every
    row's ``n``; replaying the commits in version order gives the table."""
    url, options = _urls(tmp_path, request, kind)
    initial = pa.table({"id": pa.array(range(200), pa.int64()), "w": [-1] * 200, "n": [0] * 200})
    Table.create(url, "t", data=initial, primary_key="id", **options)
    plan = [("upsert", 0), ("upsert", 1), ("upsert", 2), ("update", 3), ("update", 4)]
    argvs = [[sys.executable, "-c", WORKER, url, json.dumps(options), str(w), op, "3"] for op, w in plan]
    commits: list[tuple[int, int, list[int] | None]] = []
    for out in run_together(argvs):
        commits += [tuple(c) for c in json.loads(out.strip().splitlines()[-1])]  # type: ignore[misc]
    t = Table.open(url, "t", **options)
    assert len({v for v, _, _ in commits}) == len(commits) == 15, "each commit has its own version"
    model = {i: (-1, 0) for i in range(200)}
    for _, w, keys in sorted(commits):
        if keys is None:
            model = {k: (ww, n + 1) for k, (ww, n) in model.items()}
        else:
            model.update({k: (w, 0) for k in keys})
    got = t.to_arrow().to_pylist()
    assert len(got) == len({r["id"] for r in got}), "a key occurs twice"
    assert {r["id"]: (r["w"], r["n"]) for r in got} == model


def test_the_replaced_rows_are_found_by_reading_only_the_key_column(tmp_path: Path) -> None:
    """A file's other columns are never fetched: damage them (not the key
    column, not the footer) and the upsert still commits; a scan then finds
    the damage."""
    store = pds.open_store((tmp_path / "lake").as_uri())
    n = 20_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "blob": [f"payload-{i:08d}" * 4 for i in range(n)]})
    t = Table.create(store, "k", data=data, primary_key="id", compression="none")
    path = tmp_path / "lake" / "k" / t.manifest["data_files"][0]["path"]
    raw = bytearray(path.read_bytes())
    # The payload text sits in the blob column's pages: flip bytes inside it.
    at = raw.find(b"payload-00010000")
    assert at > 0
    raw[at : at + 8] = b"XXXXXXXX"
    path.write_bytes(bytes(raw))
    t.upsert(pa.table({"id": pa.array([5, 10_000, 19_999, 25_000], pa.int64()), "blob": ["a", "b", "c", "d"]}))
    assert t.history(1)[0]["rows_deleted"] == 3
    with pytest.raises(pds.PartCorrupted):
        t.to_arrow()


def test_files_upserted_after_the_schema_changed_are_refused_and_removed(fast_store: Store) -> None:
    """The Spark path: tasks upload files in the schema of the job's start;
    a merge that changes the schema before the driver commits makes the
    commit ``SchemaMismatch``, and the files are removed."""
    from pds import _core

    t = Table.create(fast_store, "j", data=rows({1: ("a", 1), 2: ("b", 2)}), primary_key="id")
    native = fast_store.unwrap(_core.RustStore)
    path = str(fast_store.native_path("j"))
    written = _core.table_write_files(
        native,
        path,
        rows({2: ("B", 20), 3: ("C", 30)}),
        prefix="job-00000-1",
        schema=SCHEMA,
        compression="zstd",
        row_group_size=None,
        target_file_size=None,
        parallelism=2,
    )
    t.append(pa.table({"id": [9], "name": ["n"], "x": [9], "extra": ["e"]}), schema_mode="merge")
    before = files(fast_store, "j")
    with pytest.raises(pds.SchemaMismatch, match="schema changed"):
        _core.table_upsert_files(native, path, written, schema=SCHEMA, parallelism=2)
    gone = {f"j/{f['path']}" for f in json.loads(written)}
    assert not gone & set(files(fast_store, "j"))
    assert set(files(fast_store, "j")) == set(before) - gone
    assert Table.open(fast_store, "j").version == 1
