"""Table contracts at the seams (issue S2): a table re-created under a live
handle, dropping a table, update keeping the primary key a key, polars keys
in upsert. Two handles are two stores (two caches), as two processes are."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from remote_store import NotFound, Store
from store_kinds import REMOTE, lake_url

import pds
from pds import Table
from pds.cli import main
from pds.dataset import ParquetDatasetStore

from helpers import files


def rows(start: int, stop: int, extra: str | None = None) -> pa.Table:
    ids = list(range(start, stop))
    cols: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "x": pa.array([float(i) for i in ids])}
    if extra is not None:
        cols[extra] = pa.array([f"{extra}{i}" for i in ids])
    return pa.table(cols)


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


@pytest.fixture(params=["file", *REMOTE])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A URL and options: each ``open`` of it is another handle (another cache)."""
    if request.param == "file":
        (tmp_path / "lake").mkdir()
    return lake_url(request.param, tmp_path, request)


def opener(lake: tuple[str, dict[str, str]]) -> Callable[[], Store]:
    url, options = lake
    return lambda: pds.open_store(url, **options)


def _remove_folder(store: Store, key: str) -> None:
    for f in files(store, key):
        store.delete(f)


@pytest.mark.parametrize("how", ["drop", "folder removed"])
def test_a_live_handle_never_builds_on_a_table_that_was_replaced(lake: tuple[str, dict[str, str]], how: str) -> None:
    new_store = opener(lake)
    a = Table.create(new_store(), "t", data=rows(0, 10), primary_key="id")
    a.append(rows(10, 13))
    assert ids(a.to_arrow()) == list(range(13))
    other = new_store()
    if how == "drop":
        Table.open(other, "t").drop()
    else:
        _remove_folder(other, "t")
    b = Table.create(other, "t", data=rows(100, 105, extra="tag"), primary_key="id")
    b.append(rows(105, 107, extra="tag"))
    # Every commit path through A refuses: the table it opened is gone.
    for commit in (
        lambda: a.append(rows(20, 22)),
        lambda: a.delete([("id", "==", 101)]),
        lambda: a.upsert(rows(101, 102)),
        lambda: a.update([("id", "==", 101)], {"x": 0.5}),
        lambda: a.compact(min_deleted_fraction=0.0),
        lambda: a.vacuum(dry_run=True),
        lambda: a.append(rows(20, 22, extra="tag"), schema_mode="merge"),
    ):
        with pytest.raises(NotFound, match="dropped"):
            commit()
    with pytest.raises(NotFound, match="another table"):
        a.refresh()
    # The new table is whole, with its own schema, for fresh handles ...
    fresh = Table.open(new_store(), "t")
    assert fresh.version == 1
    assert fresh.schema.names == ["id", "x", "tag"]
    assert ids(fresh.to_arrow()) == list(range(100, 107))
    # ... and for a new handle on A's store, whose cache held the old
    # table's manifests under the same names.
    again = Table.open(a._store, "t")
    assert again.version == 1 and ids(again.to_arrow()) == list(range(100, 107))
    again.append(rows(107, 108, extra="tag"))
    assert ids(Table.open(new_store(), "t").to_arrow()) == list(range(100, 108))
    pointer = json.loads(new_store().read_bytes("t/_latest_manifest"))
    assert pointer["table_id"] == fresh._table_id != a._table_id


def test_a_live_handle_of_a_dropped_table_gets_not_found(lake: tuple[str, dict[str, str]]) -> None:
    new_store = opener(lake)
    a = Table.create(new_store(), "t", data=rows(0, 10))
    st = new_store()
    st.write("t2/keep.txt", b"sibling")
    st.write("t/notes.txt", b"not the table's")  # no object of its layout: left alone
    removed = Table.open(st, "t").drop()
    assert "_latest_manifest" in removed and "manifest/v00000000.json" in removed
    assert "notes.txt" not in removed
    with pytest.raises(NotFound):
        Table.open(new_store(), "t")
    with pytest.raises(NotFound, match="dropped"):
        a.append(rows(10, 12))
    assert not st.exists("t/_latest_manifest"), "a refused commit does not bring the pointer back"
    assert files(st, "t") == ["t/notes.txt"]
    assert st.read_bytes("t2/keep.txt") == b"sibling"
    with pytest.raises(NotFound):
        pds.table.drop_table(st, "t")


def test_drop_refuses_what_is_not_a_table(tmp_path: Path) -> None:
    st = pds.open_store(tmp_path.as_uri())
    ParquetDatasetStore(st).write_dataset(rows(0, 3), "ds")
    with pytest.raises(NotFound, match="dataset"):
        pds.table.drop_table(st, "ds")
    assert ids(ParquetDatasetStore(st).read_dataset("ds")) == [0, 1, 2]
    with pytest.raises(NotFound):
        pds.table.drop_table(st, "nothing")


def test_drop_finishes_an_interrupted_drop(tmp_path: Path) -> None:
    st = pds.open_store(tmp_path.as_uri())
    t = Table.create(st, "t", data=rows(0, 3))
    t.append(rows(3, 6))
    # A drop killed after its first two deletes: no marker, the rest left.
    st.delete("t/manifest/v00000000.json")
    st.delete("t/_latest_manifest")
    with pytest.raises(NotFound):
        Table.open(st, "t")
    assert files(st, "t")
    pds.table.drop_table(st, "t")
    assert files(st, "t") == []
    Table.create(st, "t", data=rows(50, 52)).append(rows(52, 53))
    assert ids(Table.open(pds.open_store(tmp_path.as_uri()), "t").to_arrow()) == [50, 51, 52]


def test_pds_drop_cli(tmp_path: Path) -> None:
    url = tmp_path.as_uri()
    Table.create(pds.open_store(url), "t", data=rows(0, 3))
    runner = CliRunner()
    refused = runner.invoke(main, ["drop", url, "t"])
    assert refused.exit_code == 2 and "--yes" in refused.output
    assert Table.open(pds.open_store(url), "t").version == 0
    done = runner.invoke(main, ["drop", url, "t", "--yes", "--json"])
    assert done.exit_code == 0, done.output
    assert "_latest_manifest" in json.loads(done.output)["removed"]
    gone = runner.invoke(main, ["drop", url, "t", "--yes"])
    assert gone.exit_code == 1


CHILD = textwrap.dedent(
    """
    import sys, pds, pyarrow as pa
    from remote_store import NotFound
    url, options = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
    t = pds.Table.open(pds.open_store(url, **options), "t")
    t.to_arrow()
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        t.append(pa.table({"id": pa.array([20, 21], pa.int64()), "x": [1.0, 2.0]}))
        print("appended", t.version, flush=True)
    except NotFound as e:
        print("NotFound", e, flush=True)
    """
)


def test_a_live_handle_in_another_process_after_drop_and_create(lake: tuple[str, dict[str, str]]) -> None:
    url, options = lake
    st = pds.open_store(url, **options)
    Table.create(st, "t", data=rows(0, 10)).append(rows(10, 13))
    args = [sys.executable, "-c", CHILD, url, *(f"{k}={v}" for k, v in options.items())]
    with subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        Table.open(st, "t").drop()
        Table.create(pds.open_store(url, **options), "t", data=rows(100, 105))
        child.stdin.write("go\n")
        child.stdin.flush()
        said = child.stdout.readline()
        assert child.wait(timeout=120) == 0
    assert said.startswith("NotFound") and "dropped" in said, said
    t = Table.open(pds.open_store(url, **options), "t")
    assert t.version == 0 and ids(t.to_arrow()) == list(range(100, 105))


def test_update_refuses_a_null_or_repeated_primary_key(tmp_path: Path) -> None:
    st = pds.open_store(tmp_path.as_uri())
    t = Table.create(st, "t", data=rows(0, 10), primary_key="id")
    for where, values in (
        (None, {"id": None}),
        (None, {"id": 7}),
        ([("id", "==", 3)], {"id": 7}),
        ([("id", "<", 2)], {"id": 50}),
    ):
        with pytest.raises(ValueError, match="primary key 'id'"):
            t.update(where, values)
    assert t.refresh() == 0, "nothing was written"
    assert ids(t.to_arrow()) == list(range(10))
    # A new key no other row holds, and the key of the row itself, are fine.
    t.update([("id", "==", 3)], {"id": 30})
    t.update([("id", "==", 4)], {"id": 4, "x": -1.0})
    assert ids(t.to_arrow()) == [0, 1, 2, 4, 5, 6, 7, 8, 9, 30]


def test_upsert_takes_polars_string_keys(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    st = pds.open_store(tmp_path.as_uri())
    t = Table.create(st, "t", schema=pa.schema([("k", pa.string()), ("v", pa.int64())]), primary_key="k")
    t.append(pl.DataFrame({"k": ["a", "b"], "v": [1, 2]}))
    t.upsert(pl.DataFrame({"k": ["b", "c"], "v": [20, 30]}))
    got = t.to_arrow().sort_by("k")
    assert got.column("k").to_pylist() == ["a", "b", "c"]
    assert got.column("v").to_pylist() == [1, 20, 30]
    with pytest.raises(ValueError, match="repeats"):
        t.upsert(pl.DataFrame({"k": ["d", "d"], "v": [1, 2]}))


def test_changes_after_a_merge_upsert_on_a_file_with_deletes_agree_with_time_travel(tmp_path: Path) -> None:
    st = pds.open_store(tmp_path.as_uri())
    t = Table.create(st, "t", data=rows(0, 10), primary_key="id")
    t.delete([("id", "==", 2)])
    # Adds column y and replaces id 3, in the file that already has a delete.
    t.upsert(rows(3, 4, extra="y").set_column(1, "x", pa.array([-3.0])), schema_mode="merge")
    t.upsert(pa.table({"id": pa.array([50], pa.int64()), "x": [5.0], "y": ["new"]}))
    t.delete([("id", "==", 5)])
    assert t.version == 4

    def snapshot(v: int) -> set[tuple[Any, ...]]:
        got = t.to_arrow(version=v)
        return {(r["id"], r["x"], r.get("y")) for r in got.to_pylist()}

    for start in range(t.version + 1):
        feed = t.changes(start).read_all().to_pylist()
        for v in range(max(start, 1), t.version + 1):
            mine = [r for r in feed if r["_commit_version"] == v]
            gone = {(r["id"], r["x"], r.get("y")) for r in mine if r["_change_type"] in ("delete", "update_preimage")}
            came = {(r["id"], r["x"], r.get("y")) for r in mine if r["_change_type"] in ("insert", "update_postimage")}
            assert snapshot(v - 1) - gone | came == snapshot(v), (start, v, mine)
    kinds = sorted((r["_commit_version"], r["_change_type"], r["id"]) for r in t.changes(2, 2).read_all().to_pylist())
    assert kinds == [(2, "update_postimage", 3), (2, "update_preimage", 3)]


def test_errors_say_what_is_there_and_which_columns_differ(tmp_path: Path) -> None:
    st = pds.open_store(tmp_path.as_uri())
    ParquetDatasetStore(st).write_dataset(rows(0, 3), "ds")
    with pytest.raises(NotFound, match="a dataset is stored at"):
        Table.open(st, "ds")
    Table.create(st, "t", data=rows(0, 3))
    with pytest.raises(pds.SchemaMismatch) as got:
        Table.create(st, "t", schema=pa.schema([("id", pa.int32()), ("z", pa.string())]), exist_ok=True)
    text = str(got.value)
    assert '"id" is Int32 there, Int64 in the table' in text
    assert '"x" (Float64) is missing there' in text and '"z" (Utf8) is not in the table' in text
    assert "Field {" not in text and "Schema {" not in text


def test_a_pinned_version_that_vacuum_removed_is_not_found(tmp_path: Path) -> None:
    import datetime

    st = pds.open_store(tmp_path.as_uri())
    t = Table.create(st, "t", data=rows(0, 3))
    old = t.at(version=0)
    old.to_arrow()  # read (and cached) before vacuum removes it
    t.append(rows(3, 6))
    t.compact(min_deleted_fraction=0.0, target_file_size=1 << 30)
    zero = datetime.timedelta(0)
    # Vacuum through another handle (process): this one's cache still
    # holds version 0's manifest, whose files are gone.
    other = Table.open(pds.open_store(tmp_path.as_uri()), "t")
    removed = other.vacuum(retain=zero, min_age=zero, dry_run=False)
    assert "manifest/v00000000.json" in removed
    with pytest.raises(NotFound, match=r"version 0 of table .* is gone: vacuum removed it"):
        old.to_arrow()
    # Through the same handle (the manifest is read again) too.
    mine = Table.open(st, "t").at(version=1)
    t.vacuum(retain=zero, min_age=zero, dry_run=False)
    with pytest.raises(NotFound, match=r"version 1 of table .* is gone: vacuum removed it"):
        mine.to_arrow()
    with pytest.raises(NotFound, match=r"version 0 of table .* is gone: vacuum removed it"):
        t.to_arrow(version=0)
