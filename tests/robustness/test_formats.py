"""The format promise: every earlier table and pipeline format opens (read-only),
writes on one are refused with ``UpgradeRequired`` before anything is written, and
``Table.upgrade()`` / ``Pipeline.upgrade()`` / ``pds upgrade`` make it writable.

The fixtures under ``tests/fixtures/old_formats/`` are written by
``tests/fixtures/make_old_formats.py`` (see its docstring for each format)."""

from __future__ import annotations

import datetime
import json
import shutil
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from remote_store import NotFound

import pds
from pds.cli import main

from helpers import declare_words

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "old_formats"
TABLES = ["table-1-bare", "table-1-unsealed", "table-1-sealed"]
ALL_IDS = [i for i in range(15) if i != 3]


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A copy of the fixtures (the tests write to it)."""
    folder = tmp_path / "lake"
    shutil.copytree(FIXTURES, folder)
    return folder


def objects(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def ids(t: pds.Table) -> list[int]:
    return sorted(t.to_arrow().column("id").to_pylist())


def manifest(folder: Path, key: str, version: int) -> dict[str, object]:
    return dict(json.loads((folder / key / "manifest" / f"v{version:08d}.json").read_bytes()))


def test_the_fixtures_are_in_their_old_formats() -> None:
    for key in TABLES:
        m = manifest(FIXTURES, key, 2)
        assert (m["format"], "segments" in m, "table_id" in m) == ("pds-table/1", False, False)
        assert ("checksum" in m) == (key == "table-1-sealed")
        assert not (FIXTURES / key / "segment").exists()
    assert isinstance(manifest(FIXTURES, "table-1-bare", 2)["tombstones"], list)
    assert all(isinstance(t, str) for t in manifest(FIXTURES, "table-1-bare", 2)["tombstones"])  # type: ignore[attr-defined]
    for v in range(5):
        m = manifest(FIXTURES, "table-2", v)
        assert m["format"] == "pds-table/2" and "checksum" in m
        assert not any("files_schema" in s for s in m["segments"])  # type: ignore[attr-defined]
    p = manifest(FIXTURES, "pipeline-1-unsealed", 1)
    assert p["format"] == "pds-pipeline/1" and "checksum" not in p
    assert list(p)[:2] == ["format", "version"], "declaration order, not sorted"


@pytest.mark.parametrize("key", TABLES)
def test_each_old_table_reads_with_time_travel_history_and_scans(lake: Path, key: str) -> None:
    t = pds.Table.open(lake.as_uri(), key)
    assert t.version == 2
    assert ids(t) == ALL_IDS
    assert ids(t.at(version=1)) == list(range(15))
    assert ids(t.at(version=0)) == list(range(10))
    assert [h["operation"] for h in t.history()] == ["delete", "append", "create"]
    got = t.scan(filter=[("id", ">=", 10)]).read_all()
    assert sorted(got.column("id").to_pylist()) == list(range(10, 15))
    assert t.files().num_rows == 2
    changed = t.changes(2, 2).read_all()
    assert list(zip(changed["id"].to_pylist(), changed["_change_type"].to_pylist(), strict=True)) == [(3, "delete")]


@pytest.mark.parametrize("key", TABLES)
def test_every_write_on_an_old_table_is_refused_before_any_write(lake: Path, key: str) -> None:
    t = pds.Table.open(lake.as_uri(), key)
    before = objects(lake)
    row = pa.table({"id": pa.array([99], pa.int64()), "name": ["x"]})
    writes = {
        "append": lambda: t.append(row),
        "delete": lambda: t.delete([("id", "==", 1)]),
        "upsert": lambda: t.upsert(row),
        "update": lambda: t.update([("id", "==", 1)], {"name": "y"}),
        "compact": lambda: t.compact(),
        "vacuum": lambda: t.vacuum(retain=datetime.timedelta(hours=1), dry_run=False),
    }
    for name, write in writes.items():
        with pytest.raises(pds.UpgradeRequired) as e:
            write()
        msg = str(e.value)
        assert "Table.upgrade()" in msg and "pds upgrade" in msg and "pds-table/1" in msg, (name, msg)
        assert isinstance(e.value, pds.CapabilityNotSupported)
        assert objects(lake) == before, f"{name} wrote something"


@pytest.mark.parametrize("key", TABLES)
def test_upgrade_makes_an_old_table_writable_and_keeps_its_versions(lake: Path, key: str) -> None:
    url = lake.as_uri()
    t = pds.Table.open(url, key)
    old = {v: (lake / key / "manifest" / f"v{v:08d}.json").read_bytes() for v in range(3)}
    assert t.upgrade() == 3
    m = manifest(lake, key, 3)
    assert (m["format"], m["operation"], "checksum" in m) == ("pds-table/3", "upgrade", True)
    assert ids(t) == ALL_IDS
    for v, raw in old.items():
        assert (lake / key / "manifest" / f"v{v:08d}.json").read_bytes() == raw
    assert ids(t.at(version=1)) == list(range(15))
    assert ids(t.at(version=2)) == ALL_IDS
    # A second upgrade is a no-op: nothing written.
    before = objects(lake)
    assert pds.Table.open(url, key).upgrade() == 3
    assert objects(lake) == before
    assert t.append(pa.table({"id": pa.array([99], pa.int64()), "name": ["x"]})) == 4
    assert ids(pds.Table.open(url, key)) == [*ALL_IDS, 99]
    assert t.delete([("id", "==", 10)]) == 5
    assert t.compact() >= 5


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_pds_upgrade_upgrades_tables_and_pipelines_once(lake: Path) -> None:
    url = lake.as_uri()
    code, out = run("upgrade", url, "table-1-unsealed", "--json")
    assert code == 0, out
    assert json.loads(out) == {
        "key": "table-1-unsealed",
        "kind": "table",
        "upgraded": True,
        "from_format": "pds-table/1 (from before sealed manifests)",
        "version": 3,
    }
    code, out = run("upgrade", url, "table-1-unsealed", "--json")
    assert code == 0, out
    assert json.loads(out)["upgraded"] is False and json.loads(out)["version"] == 3
    code, out = run("upgrade", url, "table-1-sealed")
    assert code == 0 and "upgraded" in out and "pds-table/1 (sealed, files inline)" in out, out
    code, out = run("upgrade", url, "table-1-sealed")
    assert code == 0 and "already in the current format" in out, out
    code, out = run("upgrade", url, "pipeline-1-unsealed", "--json")
    assert code == 0, out
    assert (json.loads(out)["kind"], json.loads(out)["upgraded"]) == ("pipeline", True)
    pds.Table.open(url, "table-1-unsealed").append(pa.table({"id": pa.array([99], pa.int64()), "name": ["x"]}))
    code, out = run("upgrade", url, "nothing-here")
    assert code == 1 and "Traceback" not in out


def declared(url: str) -> pds.Pipeline:
    """The fixture's pipeline, declared as make_old_formats.py built it."""
    return declare_words(pds.Pipeline.open(url, "pipeline-1-unsealed"))


def words(p: pds.Pipeline) -> list[tuple[str, int]]:
    t = p.read("words")
    return sorted(zip(t.column("word").to_pylist(), t.column("n").to_pylist(), strict=True))


def test_an_old_pipeline_reads_refuses_writes_and_upgrades(lake: Path) -> None:
    url = lake.as_uri()
    p = declared(url)
    assert p.version == 1
    assert words(p) == [("a", 1), ("b", 1), ("b", 2), ("c", 2)]
    assert [h["operation"] for h in p.history()] == ["update", "create"]
    before = objects(lake)
    for name, write in {
        "update": lambda: p.update({"lines": pa.table({"n": [3], "text": ["d"]})}),
        "compact": lambda: p.compact(),
        "vacuum": lambda: p.vacuum(retain=datetime.timedelta(hours=1), dry_run=False),
    }.items():
        with pytest.raises(pds.UpgradeRequired) as e:
            write()
        assert "Pipeline.upgrade()" in str(e.value) and "pds upgrade" in str(e.value), (name, str(e.value))
        assert objects(lake) == before, f"{name} wrote something"
    assert p.upgrade() == 2
    assert manifest(lake, "pipeline-1-unsealed", 2)["operation"] == "upgrade"
    assert words(p) == [("a", 1), ("b", 1), ("b", 2), ("c", 2)]
    assert p.upgrade() == 2
    assert p.update({"lines": pa.table({"n": [3], "text": ["d"]})}) == 3
    assert words(declared(url)) == [("a", 1), ("b", 1), ("b", 2), ("c", 2), ("d", 3)]
    assert words_at(declared(url), 1) == [("a", 1), ("b", 1), ("b", 2), ("c", 2)]


def words_at(p: pds.Pipeline, version: int) -> list[tuple[str, int]]:
    t = p.read("words", version=version)
    return sorted(zip(t.column("word").to_pylist(), t.column("n").to_pylist(), strict=True))


def strip_checksum(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")
    kept = [line for line in lines if not line.startswith(b'  "checksum": ')]
    assert len(kept) == len(lines) - 1
    path.write_bytes(b"\n".join(kept))


def test_a_current_manifest_with_its_checksum_stripped_is_still_corrupted(tmp_path: Path) -> None:
    url = tmp_path.as_uri()
    pds.Table.create(url, "t", data=pa.table({"id": [1, 2]}))
    strip_checksum(tmp_path / "t" / "manifest" / "v00000000.json")
    with pytest.raises(pds.ManifestCorrupted, match="every pds-table/3 manifest"):
        pds.Table.open(url, "t")
    p = pds.Pipeline.create(url, "p")
    p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    p.update({"s": pa.table({"k": [1], "v": [2]})})
    strip_checksum(tmp_path / "p" / "manifest" / "v00000001.json")
    with pytest.raises(pds.ManifestCorrupted, match="every pds-pipeline/2 manifest"):
        pds.Pipeline.open(url, "p").read("s")
    # A sealed pds-pipeline/1 manifest without its checksum is not the unsealed writer's.
    shutil.copytree(FIXTURES / "pipeline-1", tmp_path / "p1")
    strip_checksum(tmp_path / "p1" / "manifest" / "v00000002.json")
    with pytest.raises(pds.ManifestCorrupted, match="not laid out"):
        declare_words(pds.Pipeline.open(url, "p1")).read("words")


@pytest.mark.parametrize("key", ["table-1-unsealed", "table-1-sealed"])
def test_upgrade_racing_appends_through_two_handles_loses_nothing(lake: Path, key: str) -> None:
    url = lake.as_uri()
    writer = pds.Table.open(url, key)
    upgrader = pds.Table.open(url, key)
    start = threading.Barrier(3)
    appended: list[int] = []
    refused: list[int] = []
    errors: list[BaseException] = []

    def append() -> None:
        start.wait()
        for i in range(100, 108):
            deadline = time.monotonic() + 60
            while True:
                try:
                    writer.append(pa.table({"id": pa.array([i], pa.int64()), "name": [f"n{i}"]}))
                    appended.append(i)
                    break
                except pds.UpgradeRequired:
                    refused.append(i)
                    assert time.monotonic() < deadline
                    time.sleep(0.005)

    def upgrade() -> None:
        start.wait()
        time.sleep(0.01)
        upgrader.upgrade()

    def guarded(f: object) -> object:
        def run() -> None:
            try:
                f()  # type: ignore[operator]
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        return run

    threads = [threading.Thread(target=guarded(f)) for f in (append, upgrade, upgrade)]  # type: ignore[arg-type]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert appended == list(range(100, 108))
    final = pds.Table.open(url, key)
    assert ids(final) == [*ALL_IDS, *range(100, 108)]
    ops = [h["operation"] for h in final.history()]
    assert ops.count("upgrade") == 1, ops
    assert ops.count("append") == 1 + 8


def test_an_upgrade_through_a_handle_whose_table_was_dropped_writes_nothing(tmp_path: Path) -> None:
    """A handle bound to a table (with an id) that was dropped: an upgrade
    through it is ``NotFound`` before writing, also when another table, in an
    earlier format, now stands at its key."""
    url = tmp_path.as_uri()
    row = {"id": pa.array([1], pa.int64()), "name": ["x"]}
    stale = pds.Table.create(url, "t", data=pa.table(row))
    pds.Table.open(url, "t").drop()
    shutil.copytree(FIXTURES / "table-1-unsealed", tmp_path / "t", dirs_exist_ok=True)
    before = objects(tmp_path / "t")
    with pytest.raises(NotFound, match="dropped"):
        stale.upgrade()
    assert objects(tmp_path / "t") == before
    assert pds.Table.open(url, "t").version == 2, "the table there stays as it was"
    # The same for a current-format table there (nothing to upgrade, but the
    # handle must not move to it).
    pds.Table.open(url, "t").drop()
    pds.Table.create(url, "t", data=pa.table(row))
    with pytest.raises(NotFound, match="dropped"):
        stale.upgrade()


@pytest.mark.parametrize("key", TABLES)
def test_an_upgraded_table_binds_its_handles_like_a_created_one(lake: Path, key: str) -> None:
    url = lake.as_uri()
    t = pds.Table.open(url, key)
    assert t.upgrade() == 3
    pointer = json.loads((lake / key / "_latest_manifest").read_bytes())
    assert isinstance(pointer.get("table_id"), str)
    assert manifest(lake, key, 3)["table_id"] == pointer["table_id"]
    pds.Table.open(url, key).drop()
    pds.Table.create(url, key, data=pa.table({"id": pa.array([7], pa.int64()), "name": ["new"]}))
    with pytest.raises(NotFound, match="dropped"):
        t.append(pa.table({"id": pa.array([99], pa.int64()), "name": ["x"]}))
    assert ids(pds.Table.open(url, key)) == [7], "the new table got nothing"


@pytest.mark.parametrize("how", ["Table.drop", "pds drop"])
@pytest.mark.parametrize("key", TABLES)
def test_an_old_format_table_drops_like_any_other(lake: Path, key: str, how: str) -> None:
    """Read-only is about writing versions: dropping is explicit, and an old
    table drops whole (nothing left under its key, the others untouched)."""
    url = lake.as_uri()
    others = {k: v for k, v in objects(lake).items() if not k.startswith(f"{key}/")}
    listed = sorted(k.removeprefix(f"{key}/") for k in objects(lake) if k.startswith(f"{key}/"))
    if how == "Table.drop":
        removed = pds.Table.open(url, key).drop()
    else:
        code, out = run("drop", url, key, "--yes", "--json")
        assert code == 0, out
        removed = json.loads(out)["removed"]
    assert sorted(removed) == listed
    assert [p for p in (lake / key).rglob("*") if p.is_file()] == []
    assert objects(lake) == others
    with pytest.raises(NotFound):
        pds.Table.open(url, key)


def segment_paths(folder: Path, key: str, version: int) -> list[str]:
    return [s["path"] for s in manifest(folder, key, version)["segments"]]  # type: ignore[attr-defined]


def test_a_pds_table_2_table_is_written_in_its_format_until_upgraded_by_its_root_alone(lake: Path) -> None:
    """``table-2``: 40 one-row files, 2 appended, id 3 deleted, then an append widening
    ``n`` from int32 to int64 and adding ``extra`` (schema_mode="merge"), and one more."""
    url, key = lake.as_uri(), "table-2"
    t = pds.Table.open(url, key)
    live = [i for i in range(46) if i != 3]
    assert t.version == 4 and ids(t) == live
    assert t.schema.field("n").type == pa.int64()
    assert t.at(version=2).schema.field("n").type == pa.int32()
    assert ids(t.at(version=2)) == [i for i in range(42) if i != 3]
    assert t.to_arrow(filter=[("n", "==", 43)]).column("extra").to_pylist() == ["e43"]
    assert t.to_arrow(filter=[("n", "==", 5)]).column("extra").to_pylist() == [None]

    # Writable, in its own format: a schema change rewrites every segment.
    wide = {"id": pa.array([46], pa.int64()), "n": pa.array([46], pa.int64()), "name": ["n46"], "extra": ["e46"]}
    assert t.append(pa.table(wide)) == 5
    assert manifest(lake, key, 5)["format"] == "pds-table/2"
    more = {**wide, "id": pa.array([47], pa.int64()), "more": pa.array([1.5])}
    before = segment_paths(lake, key, 5)
    assert t.append(pa.table(more), schema_mode="merge") == 6
    assert manifest(lake, key, 6)["format"] == "pds-table/2"
    assert not set(before) & set(segment_paths(lake, key, 6)), "every segment rewritten"

    # The upgrade writes the root alone: no segment, no data file.
    segments = sorted((lake / key / "segment").iterdir())
    data = sorted((lake / key / "data").iterdir())
    assert t.upgrade() == 7
    m = manifest(lake, key, 7)
    assert (m["format"], m["operation"]) == ("pds-table/3", "upgrade")
    assert m["operation_parameters"] == {"from_format": "pds-table/2"}
    assert segment_paths(lake, key, 7) == segment_paths(lake, key, 6)
    assert sorted((lake / key / "segment").iterdir()) == segments
    assert sorted((lake / key / "data").iterdir()) == data
    assert pds.Table.open(url, key).upgrade() == 7, "once only"

    # From then on a schema change keeps every segment as it is.
    again = {**more, "id": pa.array([48], pa.int64()), "last": ["x"]}
    assert t.append(pa.table(again), schema_mode="merge") == 8
    m = manifest(lake, key, 8)
    assert m["format"] == "pds-table/3"
    assert segment_paths(lake, key, 8)[:-1] == segment_paths(lake, key, 7)
    assert all(s.get("files_schema") for s in m["segments"][:-1])  # type: ignore[index]
    got = pds.Table.open(url, key)
    assert ids(got) == [*live, 46, 47, 48]
    rows = got.to_arrow().sort_by("id")
    assert rows.column("n").to_pylist()[:3] == [0, 1, 2]
    assert rows.column("more").to_pylist()[-2:] == [1.5, 1.5]
    assert rows.column("last").to_pylist()[-2:] == [None, "x"]
    # Every version reads as it did.
    for v, n in [(0, 40), (2, 41), (4, 45), (6, 47), (7, 47), (8, 48)]:
        assert len(ids(got.at(version=v))) == n, v
    assert got.compact() >= 8
    assert ids(pds.Table.open(url, key)) == [*live, 46, 47, 48]


def test_pds_upgrade_takes_a_pds_table_2_table_to_the_current_format(lake: Path) -> None:
    url = lake.as_uri()
    code, out = run("upgrade", url, "table-2", "--json")
    assert code == 0, out
    assert json.loads(out) == {
        "key": "table-2",
        "kind": "table",
        "upgraded": True,
        "from_format": "pds-table/2",
        "version": 5,
    }
    code, out = run("upgrade", url, "table-2")
    assert code == 0 and "already in the current format" in out, out


def lines_model(version: int) -> dict[int, str]:
    """The ``pipeline-1`` fixture's lines at *version* (see make_old_formats.py)."""
    lines = {n: f"w{n} x{n // 10}" for n in range(400)}
    if version >= 2:
        lines[7] = "fresh7 x0"
        del lines[12]
    return lines


def words_of(lines: dict[int, str]) -> list[tuple[str, int]]:
    return sorted((w, n) for n, text in lines.items() for w in text.split())


def content_patches(folder: Path, key: str, version: int, node: str) -> list[dict[str, object]]:
    parts = manifest(folder, key, version)["nodes"][node]["content"]  # type: ignore[index]
    return [patch for part in parts for patch in part.get("patches", [])]  # type: ignore[attr-defined]


def test_a_sealed_pds_pipeline_1_reads_refuses_writes_and_upgrades_keeping_its_patches(lake: Path) -> None:
    """``pipeline-1``: sealed ``pds-pipeline/1``, whose last update left patches with a
    file of deleted keys each. It reads, refuses writes, upgrades to ``pds-pipeline/2``
    by one manifest, and the next update patches the same parts over the old patches,
    the new patches sharing one file of deleted keys per node."""
    url, key = lake.as_uri(), "pipeline-1"
    old = content_patches(FIXTURES, key, 2, "words")
    assert manifest(FIXTURES, key, 2)["format"] == "pds-pipeline/1"
    assert old and all(p.get("deleted") and "deleted_rows" not in p for p in old), old
    p = declare_words(pds.Pipeline.open(url, key))
    assert words(p) == words_of(lines_model(2))
    assert words_at(p, 1) == words_of(lines_model(1))
    before = objects(lake)
    with pytest.raises(pds.UpgradeRequired, match="pds-pipeline/1"):
        p.update({"lines": pa.table({"n": [3], "text": ["d"]})})
    assert objects(lake) == before
    assert p.upgrade() == 3
    m = manifest(lake, key, 3)
    assert (m["format"], m["operation"], m["detail"]) == (
        "pds-pipeline/2",
        "upgrade",
        {"from_format": "pds-pipeline/1"},
    )
    added = set(objects(lake)) - set(before)
    assert added == {f"{key}/manifest/v00000003.json"}, added  # and the pointer, rewritten
    assert words(p) == words_of(lines_model(2))

    # Lines 30 and 31 lose their words w30 and w31 (deleted keys); line 40 is deleted.
    lines = lines_model(2)
    lines[30], lines[31] = "x3", "x3"
    del lines[40]
    upserts = pa.table({"n": pa.array([30, 31], pa.int64()), "text": [lines[30], lines[31]]})
    deletes = pa.table({"n": pa.array([40], pa.int64())})
    assert p.update({"lines": pds.Changes(upserts=upserts, deletes=deletes)}) == 4
    assert manifest(lake, key, 4)["format"] == "pds-pipeline/2"
    assert words(declare_words(pds.Pipeline.open(url, key))) == words_of(lines)
    for v, want in [(1, lines_model(1)), (2, lines_model(2)), (3, lines_model(2))]:
        assert words_at(p, v) == words_of(want), v
    patches = content_patches(lake, key, 4, "words")
    assert patches[: len(old)] == old, "the old patches are kept as they were"
    new = patches[len(old) :]
    assert new and all(p_.get("deleted_rows") for p_ in new), new
    shared = {p_["deleted"]["name"] for p_ in new}  # type: ignore[index]
    update = manifest(lake, key, 4)["nodes"]["words"]["update"]  # type: ignore[index]
    assert [d["name"] for d in update["deleted"]] == sorted(shared), "the update's deleted keys are the shared file"
    deleted = sorted(pq.read_table(lake / key / next(iter(shared))).column("word").to_pylist())
    assert deleted == ["w30", "w31", "w40"]
    # Compaction merges old and new patches alike.
    p.compact()
    assert words(declare_words(pds.Pipeline.open(url, key))) == words_of(lines)
