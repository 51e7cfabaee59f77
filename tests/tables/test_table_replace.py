"""``Table.replace(filter, data)``: remove the rows a filter matches and add
new rows in one commit (what re-materialising a Dagster partition is, issue
K). One version per replace, rows outside the filter refused naming a row,
a failing input stream commits nothing, replaces of disjoint partitions from
two processes both land, a replace racing appends ends as the serial order
of the versions, and faults on every commit step (through the fault proxy)
leave exactly one version or ``CommitUnknown`` with the table as before or
after.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from remote_store import Store
from store_kinds import REMOTE, lake_url
from test_faults import (
    FAULTS,
    KEY,
    SCHEMA,
    TableCase,
    _base_table,
    attempt,
    confirm,
    faulty_on,
    inject,
    judge_table,
    make_rows,
    note,
    rows_of,
    writer_store,
)

import pds
from pds import DataError, Table

from helpers import files, run_together

pytestmark = pytest.mark.spec("K-1")

DAYS = pa.schema([("day", pa.string()), ("id", pa.int64()), ("x", pa.int64())])


def day_rows(day: str, ids: range | list[int], x: int = 0) -> pa.Table:
    ids = list(ids)
    return pa.table({"day": [day] * len(ids), "id": pa.array(ids, pa.int64()), "x": [x] * len(ids)}, schema=DAYS)


def by_day(t: Table, version: int | None = None) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for r in t.to_arrow(version=version).to_pylist():
        out.setdefault(r["day"], []).append((r["id"], r["x"]))
    return {d: sorted(v) for d, v in sorted(out.items())}


def daily(store: Store | str, key: str = "t", **options: Any) -> Table:
    """Three days of 5 rows each, at version 0."""
    data = pa.concat_tables([day_rows(f"2026-01-0{d}", range(10 * d, 10 * d + 5)) for d in (1, 2, 3)])
    return Table.create(store, key, data=data, **options)


def test_a_replace_swaps_a_partitions_rows_in_one_version(fast_store: Store) -> None:
    t = daily(fast_store)
    before = by_day(t)
    v = t.replace([("day", "==", "2026-01-02")], day_rows("2026-01-02", range(100, 103), x=1))
    assert v == t.version == 1
    assert by_day(t) == {**before, "2026-01-02": [(100, 1), (101, 1), (102, 1)]}
    assert by_day(t, version=0) == before, "time travel to the version before shows the old rows"
    h = t.history(1)[0]
    assert h["operation"] == "replace"
    assert h["parameters"]["rows_deleted"] == 5 and h["parameters"]["rows_added"] == 3
    changes = t.changes(1).read_all().to_pylist()
    kinds = sorted((c["_change_type"], c["id"]) for c in changes)
    assert kinds == [("delete", i) for i in range(20, 25)] + [("insert", i) for i in (100, 101, 102)]
    # A streamed input (a reader of several batches) is one more version.
    reader = pa.RecordBatchReader.from_batches(
        DAYS, day_rows("2026-01-02", range(200, 210), x=2).to_batches(max_chunksize=3)
    )
    assert t.replace([("day", "==", "2026-01-02")], reader) == 2
    assert by_day(t)["2026-01-02"] == [(i, 2) for i in range(200, 210)]
    # A new partition: nothing removed, the rows added.
    assert t.replace([("day", "==", "2026-01-04")], day_rows("2026-01-04", [7])) == 3
    assert by_day(t)["2026-01-04"] == [(7, 0)]
    # An emptied partition is one version too.
    assert t.replace([("day", "==", "2026-01-04")], day_rows("2026-01-04", [])) == 4
    assert "2026-01-04" not in by_day(t)
    assert Table.open(fast_store, "t").version == 4


def test_a_replace_of_nothing_by_nothing_is_one_version_too(fast_store: Store) -> None:
    """Re-materialising an empty partition with no rows (nothing matches,
    no data) still adds exactly one version, whose commit id the table
    reports: a run says which commit it made."""
    t = daily(fast_store)
    before = by_day(t)
    for expected in (1, 2):
        assert t.replace([("day", "==", "2026-01-09")], day_rows("2026-01-09", [])) == expected
        assert Table.open(fast_store, "t").version == expected
        last = t.history(1)[0]
        assert last["operation"] == "replace" and last["version"] == expected
        assert t.commit_id is not None and t.commit_id == last["commit_id"]
        assert by_day(t) == before
    # The whole-table replace of an empty table by no rows: one version too.
    empty = Table.create(fast_store, "e", DAYS)
    assert empty.replace([], day_rows("x", [])) == 1
    assert empty.replace([], day_rows("x", [])) == 2
    assert empty.to_arrow().num_rows == 0


def test_commit_id_names_the_commit_of_the_version_read(fast_store: Store) -> None:
    t = daily(fast_store)
    ids = [t.commit_id]
    t.append(day_rows("2026-01-04", [1]))
    ids.append(t.commit_id)
    t.replace([("day", "==", "2026-01-04")], day_rows("2026-01-04", [2]))
    ids.append(t.commit_id)
    assert None not in ids and len(set(ids)) == 3, "a commit id per version"
    history = {h["version"]: h["commit_id"] for h in t.history()}
    assert ids == [history[0], history[1], history[2]]
    assert t.at(version=1).commit_id == history[1]
    assert Table.open(fast_store, "t").commit_id == history[2]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda t: t.append(pa.array([1])), "Table.append"),
        (lambda t: t.replace([], pa.array([1])), "Table.replace"),
        (lambda t: t.upsert(object()), "Table.upsert"),
        (lambda t: Table.create(t._store, "other", data=[1, 2]), "Table.create"),
    ],
)
def test_bad_data_is_refused_naming_the_method_called(fast_store: Store, call: Any, name: str) -> None:
    t = Table.create(fast_store, "t", DAYS, primary_key="id")
    with pytest.raises(TypeError, match=rf"^{re.escape(name)} expects ") as err:
        call(t)
    assert "write_dataset" not in str(err.value)
    assert t.refresh() == 0


def test_an_empty_filter_replaces_every_row(fast_store: Store) -> None:
    t = daily(fast_store)
    t.delete([("id", "==", 10)])
    new = day_rows("2026-02-01", range(3))
    assert t.replace([], new) == 2
    assert t.to_arrow().sort_by("id").equals(new)
    assert len(t.manifest["data_files"]) == 1 and not t.manifest.get("tombstones")
    assert sum(len(v) for v in by_day(t, version=1).values()) == 14
    assert t.history(1)[0]["parameters"]["files_removed"] == 1
    with pytest.raises(TypeError, match=r"pass \[\] to replace every row"):
        t.replace(None, new)  # type: ignore[arg-type]


def test_merge_adds_a_column_as_append_does(fast_store: Store) -> None:
    t = daily(fast_store)
    wider = day_rows("2026-01-01", [1]).append_column("note", pa.array(["n"]))
    with pytest.raises(pds.SchemaMismatch):
        t.replace([("day", "==", "2026-01-01")], wider)
    assert t.replace([("day", "==", "2026-01-01")], wider, schema_mode="merge") == 1
    assert t.schema.names == ["day", "id", "x", "note"]
    got = {r["id"]: r["note"] for r in t.to_arrow().to_pylist()}
    assert got[1] == "n" and got[20] is None and 10 not in got


def test_rows_outside_the_filter_are_refused_naming_a_row_and_nothing_is_written(fast_store: Store) -> None:
    t = daily(fast_store)
    before, objects = by_day(t), files(fast_store, "t")
    data = pa.concat_tables([day_rows("2026-01-02", range(100, 103)), day_rows("2026-01-03", [103, 104])])
    reader = pa.RecordBatchReader.from_batches(DAYS, data.to_batches(max_chunksize=2))
    with pytest.raises(DataError, match=r"row 3 of the data .*day=2026-01-03.*fails day == 2026-01-02"):
        t.replace([("day", "==", "2026-01-02")], reader)
    assert Table.open(fast_store, "t").version == 0
    assert by_day(t) == before
    assert files(fast_store, "t") == objects, "the uploaded files are removed"
    # A null in the filter column matches no condition.
    nulls = pa.table({"day": pa.array([None], pa.string()), "id": [1], "x": [0]}, schema=DAYS)
    with pytest.raises(DataError, match=r"row 0 .*day=null"):
        t.replace([("day", "==", "2026-01-02")], nulls)
    # Several conditions: the one the row fails is named.
    with pytest.raises(DataError, match=r"row 1 .*fails id < 102"):
        t.replace([("day", "==", "2026-01-02"), ("id", "<", 102)], day_rows("2026-01-02", [100, 105]))
    assert files(fast_store, "t") == objects


def test_an_exception_in_the_input_stream_commits_nothing(fast_store: Store) -> None:
    t = daily(fast_store)
    objects = files(fast_store, "t")

    def batches() -> Iterator[pa.RecordBatch]:
        yield from day_rows("2026-01-02", range(100, 110)).to_batches(max_chunksize=4)[:2]
        raise RuntimeError("the asset's source went away")

    with pytest.raises(DataError, match="the asset's source went away"):
        t.replace([("day", "==", "2026-01-02")], pa.RecordBatchReader.from_batches(DAYS, batches()))
    assert Table.open(fast_store, "t").version == 0
    assert files(fast_store, "t") == objects


@pytest.mark.parametrize(
    ("flt", "error", "message"),
    [
        ([("nope", "==", "a")], ValueError, "unknown column 'nope'"),
        ([("id", "==", "a")], TypeError, "does not compare"),
        ([("day", "~", "a")], ValueError, "unknown filter operator"),
        ("day == 1", TypeError, "filter must be"),
    ],
)
def test_a_bad_filter_is_refused_before_anything_is_written(
    fast_store: Store, flt: Any, error: type[Exception], message: str
) -> None:
    t = daily(fast_store)
    objects = files(fast_store, "t")
    with pytest.raises(error, match=message):
        t.replace(flt, day_rows("2026-01-02", [1]))
    assert files(fast_store, "t") == objects
    with pytest.raises(ValueError, match="schema_mode"):
        t.replace([("day", "==", "2026-01-02")], day_rows("2026-01-02", [1]), schema_mode="loose")


def test_each_replace_logs_one_info_line(file_store: Any, caplog: pytest.LogCaptureFixture) -> None:
    _, _, store = file_store
    t = daily(store)
    caplog.set_level(logging.DEBUG, logger="pds")
    pds.reset_log_cache()
    try:
        t.replace([("day", "==", "2026-01-02")], day_rows("2026-01-02", [1, 2]))
        t.replace([], day_rows("2026-01-05", [3]))
    finally:
        pds.reset_log_cache()
    infos = [r.getMessage() for r in caplog.records if r.name == "pds.table" and r.levelno == logging.INFO]
    pattern = r"table t: replace committed version (\d) \(([^)]*)\): \d+ bytes written, \d+ bytes read, \d+ requests, [\d.]+ ms"
    assert len(infos) == 2, infos
    first, second = (re.fullmatch(pattern, m) for m in infos)
    assert first is not None and second is not None, infos
    assert (first[1], second[1]) == ("1", "2")
    assert "rows_added=2" in first[2] and "rows_deleted=5" in first[2]
    assert "files_removed=2" in second[2] and "rows_added=1" in second[2]


WORKER = r"""
import json, sys
import pyarrow as pa, pds
url, options, worker, op, day, count = (sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
                                        sys.argv[5], int(sys.argv[6]))
schema = pa.schema([("day", pa.string()), ("id", pa.int64()), ("x", pa.int64())])
t = pds.Table.open(url, "t", **options)
print("ready", flush=True)
sys.stdin.readline()  # start together
done = []
for i in range(count):
    ids = list(range(1000 * worker + 10 * i, 1000 * worker + 10 * i + 4))
    rows = pa.table({"day": [day] * 4, "id": pa.array(ids, pa.int64()), "x": [worker] * 4}, schema=schema)
    if op == "replace":
        done.append([t.replace([("day", "==", day)], rows), op, day, ids])
    elif op == "compact":
        # New small files of another partition, then all of them merged.
        done.append([t.append(rows), "append", day, ids])
        for _ in range(50):  # replaces landing on the files it rewrites make it give up: again
            try:
                done.append([t.compact(), op, day, []])
                break
            except pds.CommitConflict:
                t.refresh()
    else:
        done.append([t.append(rows), op, day, ids])
print(json.dumps(done), flush=True)
"""


def _race(url: str, options: dict[str, str], plan: list[tuple[str, str]], count: int) -> list[list[Any]]:
    """Run one process per (op, day) of *plan*, started together; their
    commits as ``[version, op, day, ids]``."""
    argvs = [
        [sys.executable, "-c", WORKER, url, json.dumps(options), str(w + 1), op, day, str(count)]
        for w, (op, day) in enumerate(plan)
    ]
    commits: list[list[Any]] = []
    for out in run_together(argvs):
        commits += json.loads(out.strip().splitlines()[-1])
    return commits


def _replay(t: Table, commits: list[list[Any]]) -> dict[str, list[tuple[int, int]]]:
    """Version 0's rows with *commits* applied in version order."""
    model = {day: list(rows) for day, rows in by_day(t, version=0).items()}
    for _, op, day, ids in sorted(commits):
        if op == "compact":  # the same rows, in other files
            continue
        x = ids[0] // 1000
        if op == "replace":
            model[day] = [(i, x) for i in ids]
        else:
            model[day] = sorted(model.get(day, []) + [(i, x) for i in ids])
    return {d: v for d, v in sorted(model.items()) if v}


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_processes_replacing_different_partitions_at_once_all_land(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two processes re-materialise two partitions of one table at once,
    three times each: six versions, each partition holding exactly its last
    replace's rows, the third partition untouched."""
    url, options = lake_url(kind, tmp_path, request)
    daily(url, **options)
    commits = _race(url, options, [("replace", "2026-01-01"), ("replace", "2026-01-02")], 3)
    t = Table.open(url, "t", **options)
    assert sorted(c[0] for c in commits) == list(range(1, 7)), "each replace is one version of its own"
    assert t.version == 6
    got = by_day(t)
    assert got == _replay(t, commits)
    assert got["2026-01-01"] == [(1020 + k, 1) for k in range(4)]
    assert got["2026-01-02"] == [(2020 + k, 2) for k in range(4)]
    assert got["2026-01-03"] == by_day(t, version=0)["2026-01-03"]


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_a_replace_racing_appends_to_its_partition_ends_as_the_serial_order(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One process replaces a partition while another appends rows to it:
    rows appended before a replace commits are replaced (the replace
    re-plans against them), those after it stay; replaying the versions in
    order gives the table, and every version reads as that replay's prefix."""
    url, options = lake_url(kind, tmp_path, request)
    daily(url, **options)
    commits = _race(url, options, [("replace", "2026-01-02"), ("append", "2026-01-02")], 4)
    t = Table.open(url, "t", **options)
    assert sorted(c[0] for c in commits) == list(range(1, 9))
    for v in range(1, 9):
        assert by_day(t, version=v) == _replay(t, [c for c in commits if c[0] <= v]), f"version {v}"


def _replays_in_order(t: Table, commits: list[list[Any]]) -> None:
    """Every version from 1 to the latest reads as the replay of the commits
    up to it."""
    for v in range(1, t.version + 1):
        assert by_day(t, version=v) == _replay(t, [c for c in commits if c[0] <= v]), f"version {v}"


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_processes_replacing_the_same_partition_at_once_leave_one_of_them(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two processes re-materialise the same partition at once, three times
    each: six versions; the partition holds exactly the rows of the replace
    with the last version (none doubled, none of the other), every version
    reads as the serial order up to it."""
    url, options = lake_url(kind, tmp_path, request)
    daily(url, **options)
    commits = _race(url, options, [("replace", "2026-01-02"), ("replace", "2026-01-02")], 3)
    t = Table.open(url, "t", **options)
    assert sorted(c[0] for c in commits) == list(range(1, 7)), "each replace is one version of its own"
    last = max(commits)
    assert by_day(t)["2026-01-02"] == [(i, last[3][0] // 1000) for i in last[3]]
    _replays_in_order(t, commits)


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_a_compaction_racing_a_replace_loses_and_doubles_no_row(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One process replaces a partition while another appends small files
    and compacts the table (rewriting the files the replace marks): the
    replace starts over on the compacted files, and every version reads as
    the serial order of the commits (compactions change no row)."""
    url, options = lake_url(kind, tmp_path, request)
    daily(url, **options)
    commits = _race(url, options, [("replace", "2026-01-02"), ("compact", "2026-01-03")], 4)
    t = Table.open(url, "t", **options)
    writes = sorted(c[0] for c in commits if c[1] != "compact")
    assert len(set(writes)) == 8, "each replace and append is one version"
    assert any(h["operation"] == "compact" for h in t.history()), "a compaction committed"
    _replays_in_order(t, commits)
    replaces = [c for c in commits if c[1] == "replace"]
    assert by_day(t)["2026-01-02"] == [(i, 1) for i in max(replaces)[3]]


MERGER = r"""
import json, sys
import pyarrow as pa, pds
t = pds.Table.open(sys.argv[1], "t", **json.loads(sys.argv[2]))
row = {"day": ["2026-01-09"], "id": pa.array([900], pa.int64()), "x": pa.array([9], pa.int64()), "note": ["n"]}
t.append(pa.table(row), schema_mode="merge")
"""


def _midway(data: pa.Table, other_writer: Any) -> pa.RecordBatchReader:
    """*data* as a stream that calls *other_writer* after its first batch:
    after the replace reading it took its snapshot, before it commits."""

    def batches() -> Iterator[pa.RecordBatch]:
        first, *rest = data.to_batches(max_chunksize=2)
        yield first
        other_writer()
        yield from rest

    return pa.RecordBatchReader.from_batches(data.schema, batches())


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_a_whole_table_replace_fits_a_schema_another_process_merged_meanwhile(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Another process adds a column (a merge-mode append) while a replace
    of every row streams its data. In strict mode the data no longer has
    the table's columns: SchemaMismatch naming both schemas, nothing
    changed. In merge mode the data fits the new schema (the new column
    null), and the replace commits on top of the append."""
    url, options = lake_url(kind, tmp_path, request)
    daily(url, **options)
    t = Table.open(url, "t", **options)

    def merge() -> None:
        subprocess.run([sys.executable, "-c", MERGER, url, json.dumps(options)], check=True, timeout=300)

    new = day_rows("2026-02-01", range(5))
    with pytest.raises(pds.SchemaMismatch) as err:
        t.replace([], _midway(new, merge))
    text = str(err.value)
    assert "schema changed while this replace ran" in text, text
    assert "it is now (day: Utf8, id: Int64, x: Int64, note: Utf8)" in text, text
    assert "the data's schema (day: Utf8, id: Int64, x: Int64)" in text, text
    assert '"note" is missing' in text, text
    now = Table.open(url, "t", **options)
    assert now.version == 1 and now.to_arrow().num_rows == 16, "the merge landed, the replace did not"

    assert t.replace([], _midway(new, merge), schema_mode="merge") == 3
    assert t.schema.names == ["day", "id", "x", "note"]
    got = t.to_arrow().sort_by("id")
    assert got.select(["day", "id", "x"]).equals(new.sort_by("id"))
    assert got.column("note").null_count == 5
    assert t.history(1)[0]["operation"] == "replace"
    assert by_day(t, version=2)["2026-01-09"] == [(900, 9)] * 2, "the version before has both merged rows"


@pytest.mark.s3
def test_a_replace_uploads_its_data_once_whatever_its_commit_retries(faulty: Any) -> None:
    """A replace whose commit loses a race (another writer commits rows of
    its partition while it streams) and meets a failed manifest PUT plans
    and commits again, reusing its data files: each is PUT once (counted by
    the fault proxy), and the version names exactly those files."""
    daily(faulty.direct)
    t = Table.open(faulty.store, "t")
    other = Table.open(faulty.direct, "t")  # straight to the server: not counted
    faulty.proxy.fail("PUT", r"/t/manifest/v\d{8}\.json$", status=503, times=1)
    data = day_rows("2026-01-02", range(100, 120))

    version = t.replace(
        [("day", "==", "2026-01-02")], _midway(data, lambda: other.append(day_rows("2026-01-02", [77])))
    )
    assert version == 2
    assert by_day(t)["2026-01-02"] == [(i, 0) for i in range(100, 120)], "the row appended meanwhile is replaced"
    puts = [e.path for e in faulty.proxy.requests("PUT", r"/t/data/part-[^/]+\.parquet$")]
    assert puts, "the data went through the proxy"
    assert len(puts) == len(set(puts)), f"a data file was uploaded twice: {puts}"
    added = {f["path"] for f in t.manifest["data_files"]} - {f["path"] for f in t.at(version=1).manifest["data_files"]}
    assert sorted(p.rsplit("/t/", 1)[1] for p in puts) == sorted(added)
    assert len(faulty.proxy.requests("PUT", r"/t/manifest/v\d{8}\.json$")) >= 2, "the commit was tried again"


# -- faults, through the fault proxy (see tests/robustness/test_faults.py) --------------------------


def _table_replace(store: Store) -> TableCase:
    """Rows with ``val < 30`` replaced by ten new ones (bitmap tombstones)."""
    t = _base_table(store)
    base = rows_of(make_rows(range(100)))
    new = pa.Table.from_pylist([{"id": i, "val": i % 30} for i in range(1000, 1010)], schema=SCHEMA)
    after = sorted([r for r in base if r["val"] >= 30] + rows_of(new), key=lambda r: r["id"])

    def check(m: dict[str, Any]) -> None:
        assert m["operation"] == "replace"

    return TableCase(call=lambda: t.replace([("val", "<", 30)], new), before=base, after=after, version=0, check=check)


REPLACE_CASES = [("s3", step) for step in ("data", "tombstone", "segment", "manifest", "pointer")] + [
    ("gcs", step) for step in ("manifest", "pointer")
]


@pytest.mark.s3
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize(("kind", "step"), REPLACE_CASES, ids=[f"{k}-{s}" for k, s in REPLACE_CASES])
def test_a_replace_under_a_fault_commits_once_or_leaves_the_table_as_before(
    request: pytest.FixtureRequest, kind: str, step: str, fault: str
) -> None:
    """A failed request or a lost reply on each step of a replace's commit:
    exactly one new version with the replaced rows, or ``CommitUnknown``
    with the table as before or after, or another error with the table as
    before (and the same replace, retried, then lands once). The version
    before still reads the old rows."""
    f = faulty_on(kind, request)
    case = _table_replace(writer_store(f, fault))
    rules = inject(f, step, FAULTS[fault])
    out = note(attempt(f, case.call))
    confirm(f, rules, step)
    judge_table(f, case, out)
    assert rows_of(Table.open(f.direct, KEY).to_arrow(version=0)) == case.before
