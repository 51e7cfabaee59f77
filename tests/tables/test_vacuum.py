"""Vacuum never loses data (issue #15, sections 2, 3 and 6): not racing
writers, not history it was asked to keep, not keys nested below the key it
cleans; bad arguments fail before any I/O, and no duration panics.

Objects are made old by lowering ``min_age`` to 0 (everything written before
the call is then old enough) or, on ``file://``, by back-dating mtimes.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from remote_store import AlreadyExists, NotFound, RemoteStoreError, Store
from store_kinds import REMOTE

import pds
from pds import Pipeline, Table
from pds.cli import main
from pds.dataset import ParquetDatasetStore

from helpers import files

ZERO = datetime.timedelta(0)
NOW = {"retain": ZERO, "min_age": ZERO}


def rows(start: int, stop: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, stop), pa.int64())})


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def keys(store: Store, key: str) -> set[str]:
    return {f[len(key) + 1 :] for f in files(store, key)}


def backdate(root: Path, hours: float) -> None:
    """Make every file below *root* look *hours* old."""
    then = time.time() - hours * 3600
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (then, then))


def copy_tree(store: Store, src: str, dst: str) -> dict[str, bytes]:
    """Copy every file below *src* to *dst* (keys nested from before the
    rule that refuses creating them); returns what was copied, by new key."""
    out = {}
    for k in files(store, src):
        data = store.read_bytes(k)
        new = dst + k[len(src) :]
        store.write(new, data, overwrite=True)
        out[new] = data
    return out


def nest(store: Store, under: str) -> dict[str, bytes]:
    """A dataset, a table and a pipeline stored below *under*, as older
    versions of pds let a user create them."""
    src = f"src-{under}"
    ParquetDatasetStore(store, max_rows_per_file=5).write_dataset(rows(0, 12), f"{src}/ds")
    Table.create(store, f"{src}/t", data=rows(0, 7)).append(rows(7, 9))
    p = Pipeline.create(store, f"{src}/p")
    p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    p.update({"s": pa.table({"k": [1, 2], "v": [3, 4]})})
    nested = copy_tree(store, f"{src}/ds", f"{under}/archive")
    nested |= copy_tree(store, f"{src}/t", f"{under}/data/inner")
    nested |= copy_tree(store, f"{src}/p", f"{under}/nodes/inner")
    nested |= copy_tree(store, f"{src}/ds", f"{under}/manifest/ds")
    return nested


@pytest.fixture(params=["memory", "file"])
def racing_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return pds.open_store("memory://")
    return pds.open_store((tmp_path / "lake").as_uri())


# -- section 2: vacuum racing writers ---------------------------------------


@dataclass
class Raced:
    """What a race saw."""

    committed: list[int]
    """The ids of every committed append."""
    removed: list[list[str]]
    """What each vacuum pass removed."""
    failed: int
    """Appends that failed (only allowed with ``writers_may_fail``)."""
    longest: float
    """The longest committed append, from opening the table to its commit
    (an upper bound of the time from its first upload to its commit), in s."""


def race(
    store: Store,
    vacuum: Callable[[], list[str]],
    seconds: float,
    *,
    writers: int = 4,
    writers_may_fail: bool = False,
) -> Raced:
    """*writers* threads append 20-row batches for *seconds* while *vacuum* runs
    in a loop, and the table is opened after every pass."""
    committed: list[int] = []
    longest = [0.0]
    removed: list[list[str]] = []
    errors: list[BaseException] = []
    failed: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def appender(w: int) -> None:
        i = 0
        while not stop.is_set():
            start = 1_000_000 * (w + 1) + 20 * i
            i += 1
            began = time.monotonic()
            try:
                Table.open(store, "t").append(rows(start, start + 20))
            except RemoteStoreError as e:
                (failed if writers_may_fail else errors).append(e)
                continue
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)
                return
            with lock:
                committed.extend(range(start, start + 20))
                longest[0] = max(longest[0], time.monotonic() - began)

    def vacuumer() -> None:
        try:
            while not stop.is_set():
                removed.append(vacuum())
                # The pointer names a manifest that exists: the table opens.
                Table.open(store, "t")
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=appender, args=(w,)) for w in range(writers)]
    threads.append(threading.Thread(target=vacuumer))
    for th in threads:
        th.start()
    time.sleep(seconds)
    stop.set()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert committed, "appends committed meanwhile"
    return Raced(committed, removed, len(failed), longest[0])


def vacuum_at_zero(t: Table, damaged: list[str]) -> Callable[[], list[str]]:
    """A vacuum pass at retain=0, min_age=0, which the docs say is unsafe for
    appends in flight: it may remove a segment or data file an append then
    commits. That version is damaged for every process (reading it is
    ``ManifestCorrupted`` naming the missing object), and vacuum, which must
    know every file a version needs before it removes anything, refuses the
    same way where the missing object is the version's segment. That damage (recorded in *damaged*) is what min_age prevents;
    no other error may happen."""

    def run() -> list[str]:
        try:
            return t.vacuum(dry_run=False, **NOW)
        except pds.ManifestCorrupted as e:
            damaged.append(str(e))
            return []

    return run


@pytest.mark.spec("S-2")
def test_appends_racing_vacuum_at_retain_0_never_make_the_table_unopenable(racing_store: Store) -> None:
    """retain=0, min_age=0 (only safe with no writer running) while appends
    run: vacuum never fails otherwise (on file://, staging files renamed
    during its sweep are no error), and after every pass the table opens: the
    manifest the pointer names, and every version above the one vacuum read,
    survive. The appends in flight are not protected at min_age=0 (their
    files, or their version's slot, may go): that is what min_age is for."""
    Table.create(racing_store, "t", data=rows(0, 10))
    t = Table.open(racing_store, "t")
    damaged: list[str] = []
    raced = race(racing_store, vacuum_at_zero(t, damaged), seconds=3, writers_may_fail=True)
    assert any(r for r in raced.removed) or damaged, "vacuum removed old versions meanwhile"
    t = Table.open(racing_store, "t")
    assert racing_store.exists(f"t/manifest/v{t.version:08d}.json")
    # No writer left: a last pass leaves exactly the latest version, unless
    # an append vacuum raced committed a version whose objects are gone.
    final: str | None = None
    try:
        t.vacuum(dry_run=False, **NOW)
    except pds.ManifestCorrupted as e:
        final = str(e)
    damage = [*damaged, *([final] if final else [])]
    assert all(re.search(r"its segment .* is missing", d) for d in damage), damage
    if final is not None:
        # Vacuum reads segments, not data files: the latest version's
        # segment is gone, and readers say so too.
        with pytest.raises(pds.ManifestCorrupted, match=r"its segment .* is missing"):
            t.to_arrow()
        return
    m = t.manifest
    assert keys(racing_store, "t") <= {"_latest_manifest", f"manifest/v{t.version:08d}.json"} | {
        f["path"] for f in m["data_files"]
    } | {r["path"] for r in m["segments"]}


@pytest.mark.spec("S-2")
def test_appends_racing_vacuum_above_the_floor_keep_every_row(racing_store: Store) -> None:
    """With min_age above the time an append takes from its first upload to
    its commit (the documented condition), every append succeeds and every
    committed row is there, exactly once, while vacuum keeps removing what
    aged past the floor.

    The floor is a few seconds: four writers contending on two cores have
    taken 1.3 s to commit (their commit retries back off up to 0.5 s), and a
    1 s floor then removed an append's file before its commit, as documented.
    The race checks that the condition held, so a lost row here is vacuum's
    fault, not the machine's."""
    t = Table.create(racing_store, "t", data=rows(0, 10))
    floor = datetime.timedelta(seconds=4)
    raced = race(racing_store, lambda: t.vacuum(retain=floor, min_age=floor, dry_run=False), seconds=6, writers=2)
    assert raced.longest < floor.total_seconds(), (
        f"an append took {raced.longest:.1f} s, not within min_age: the test's condition failed"
    )
    assert any(r for r in raced.removed), "objects aged past the floor and went"
    t = Table.open(racing_store, "t")
    assert ids(t.to_arrow()) == sorted([*range(10), *raced.committed])
    assert t.version == len(raced.committed) // 20


@pytest.mark.spec("S-2")
@pytest.mark.parametrize("kind", REMOTE)
def test_appends_racing_vacuum_on_a_server(kind: str, store_factory: Callable[[str], Store]) -> None:
    """As above on SeaweedFS and the GCS emulator, whose object times are
    whole seconds and whose contended appends (retrying their commit) take up
    to a few seconds."""
    store = store_factory(kind)
    t = Table.create(store, "t", data=rows(0, 10))
    floor = datetime.timedelta(seconds=6)
    raced = race(store, lambda: t.vacuum(retain=floor, min_age=floor, dry_run=False), seconds=10, writers=2)
    assert raced.longest < floor.total_seconds(), f"an append took {raced.longest:.1f} s, not within min_age"
    assert any(r for r in raced.removed)
    assert ids(Table.open(store, "t").to_arrow()) == sorted([*range(10), *raced.committed])
    race(store, vacuum_at_zero(t, []), seconds=3, writers_may_fail=True)
    Table.open(store, "t")


@pytest.mark.spec("S-2")
def test_keep_versions_keeps_every_version_and_removes_a_killed_writers_files(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 100))
    t.append(rows(100, 200))
    t.delete([("id", "<", 10)])
    t.compact(min_deleted_fraction=0.0)
    # What a writer killed before its commit leaves: files no version references.
    fast_store.write("t/data/part-killed-00000.parquet", b"PAR1 half-written")
    fast_store.write("t/tombstone/v00000004-killed.del", b"{}")
    before = {v: ids(t.to_arrow(version=v)) for v in range(t.version + 1)}
    planned = t.vacuum(keep_versions=True, **NOW)
    assert planned == ["data/part-killed-00000.parquet", "tombstone/v00000004-killed.del"]
    assert t.vacuum(keep_versions=True, dry_run=False, **NOW) == planned
    assert not keys(fast_store, "t") & set(planned)
    for v, got in before.items():
        assert ids(t.to_arrow(version=v)) == got, v
    # The default mode also removes the history past the window.
    gone = t.vacuum(dry_run=False, **NOW)
    assert "manifest/v00000000.json" in gone and any(g.startswith("data/") for g in gone)
    with pytest.raises(NotFound):
        t.to_arrow(version=0)
    assert ids(t.to_arrow()) == before[t.version]


@pytest.mark.spec("S-2")
def test_keep_versions_on_a_pipeline(fast_store: Store) -> None:
    p = Pipeline.create(fast_store, "p")
    s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    for i in range(3):
        p.update({s.name: pa.table({"k": [1, i + 2], "v": [i, i]})})
    fast_store.write("p/nodes/s/content/killed-00000.parquet", b"PAR1 half")
    before = {v: p.read("s", version=v).to_pylist() for v in range(1, p.version + 1)}
    assert p.vacuum(keep_versions=True, dry_run=False, **NOW) == ["nodes/s/content/killed-00000.parquet"]
    for v, got in before.items():
        assert p.read("s", version=v).to_pylist() == got
    assert any(k.startswith("manifest/") for k in p.vacuum(**NOW)), "history would go without it"


@pytest.mark.spec("S-2")
def test_nothing_younger_than_min_age_goes(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    t = Table.create(lake.as_uri(), "t", data=rows(0, 10))
    t.append(rows(10, 20))
    store = pds.open_store(lake.as_uri())
    store.write("t/data/part-inflight-00000.parquet", b"PAR1 uploading")
    hour = datetime.timedelta(hours=1)
    assert t.vacuum(retain=hour, dry_run=False) == [], "everything is younger than the default floor"
    assert t.vacuum(retain=datetime.timedelta(days=7)) == []
    backdate(lake / "t", hours=2)
    # Both versions were created within the hour (their manifests say so): kept.
    assert t.vacuum(retain=hour, dry_run=False) == ["data/part-inflight-00000.parquet"]
    assert ids(t.to_arrow()) == list(range(20))
    assert ids(t.to_arrow(version=0)) == list(range(10))


@pytest.mark.spec("S-2")
def test_bad_arguments_fail_before_any_io(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 3))
    p = Pipeline.create(fast_store, "p")
    p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    p.update({"s": pa.table({"k": [1], "v": [1]})})
    # Both keys are gone: any I/O would raise NotFound.
    for k in files(fast_store, ""):
        fast_store.delete(k)
    day = datetime.timedelta(days=1)
    bad_values: list[dict[str, Any]] = [
        {"retain": ZERO},  # below the default floor of 1 hour
        {"retain": datetime.timedelta(minutes=59)},
        {"retain": -day},
        {"retain": -day, "min_age": -day},
        {"retain": day, "min_age": -datetime.timedelta(seconds=1)},
        {"retain": datetime.timedelta(seconds=1), "min_age": datetime.timedelta(seconds=2)},
    ]
    bad_types: list[dict[str, Any]] = [
        {"retain": 3},
        {"retain": day, "min_age": 60},
        {"keep_versions": "yes"},
        {"dry_run": None},
    ]
    for target in (t, p):
        for kwargs in bad_values:
            with pytest.raises(ValueError):
                target.vacuum(**kwargs)
        for kwargs in bad_types:
            with pytest.raises(TypeError):
                target.vacuum(**kwargs)
        with pytest.raises(NotFound):
            target.vacuum(**NOW)  # the arguments are fine: now the I/O fails


@pytest.mark.spec("S-6")
def test_any_retention_is_clamped_never_a_panic(fast_store: Store, tmp_path: Path) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 3))
    t.append(rows(3, 6))
    p = Pipeline.create(fast_store, "p")
    p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    p.update({"s": pa.table({"k": [1], "v": [1]})})
    for retain in (datetime.timedelta(days=10**8), datetime.timedelta.max):
        for target in (t, p):
            for keep in (False, True):
                assert target.vacuum(retain=retain, dry_run=False, keep_versions=keep) == []
                assert target.vacuum(retain=retain, min_age=retain, keep_versions=keep) == []
    assert ids(t.to_arrow(version=0)) == [0, 1, 2]
    lake = (tmp_path / "lake").as_uri()
    Table.create(lake, "t", data=rows(0, 3)).append(rows(3, 4))
    runner = CliRunner()
    out = runner.invoke(main, ["vacuum", lake, "t", "--retain", "100000000d", "--apply", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"applied": True, "removed": []}
    out = runner.invoke(main, ["vacuum", lake, "t", "--retain", "99999999999d"])
    assert out.exit_code == 2 and "longer than a duration" in out.output, out.output


@pytest.mark.spec("S-2")
def test_the_cli_vacuums_tables_and_pipelines_with_the_same_modes(tmp_path: Path) -> None:
    lake = (tmp_path / "lake").as_uri()
    t = Table.create(lake, "t", data=rows(0, 3))
    t.append(rows(3, 6))
    p = Pipeline.create(lake, "p")
    p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    for i in range(2):
        p.update({"s": pa.table({"k": [1], "v": [i]})})
    store = pds.open_store(lake)
    store.write("p/nodes/s/update/killed-00000.parquet", b"x")
    runner = CliRunner()
    out = runner.invoke(main, ["vacuum", lake, "t", "--retain", "0s"])
    assert out.exit_code == 2 and "--min-age" in out.output, out.output  # a usage error
    now = ["--retain", "0s", "--min-age", "0s", "--json"]
    out = runner.invoke(main, ["vacuum", lake, "p", "--keep-versions", "--apply", *now])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["removed"] == ["nodes/s/update/killed-00000.parquet"]
    assert p.read("s", version=1).to_pylist() == [{"k": 1, "v": 0}]
    out = runner.invoke(main, ["vacuum", lake, "p", "--apply", *now])
    assert "manifest/v00000001.json" in json.loads(out.output)["removed"]
    # Version 1's append rewrote version 0's small segment: that goes too.
    v0_only = [r["path"] for r in t.at(version=0).manifest["segments"] if r not in t.manifest["segments"]]
    assert len(v0_only) == 1
    out = runner.invoke(main, ["vacuum", lake, "t", "--apply", *now])
    assert json.loads(out.output)["removed"] == ["manifest/v00000000.json", *v0_only]
    assert "--keep-versions" in runner.invoke(main, ["vacuum", "--help"]).output


# -- section 3: keys inside keys ----------------------------------------------


@pytest.mark.spec("S-3")
def test_keys_nested_under_a_table_or_pipeline_survive_vacuum(fast_store: Store) -> None:
    t = Table.create(fast_store, "events", data=rows(0, 10))
    t.append(rows(10, 20))
    p = Pipeline.create(fast_store, "p")
    p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    for i in range(2):
        p.update({"s": pa.table({"k": [1], "v": [i]})})
    nested = nest(fast_store, "events") | nest(fast_store, "p")
    fast_store.write("events/notes.txt", b"not vacuum's")
    for keep in (True, False):
        t.vacuum(dry_run=False, keep_versions=keep, **NOW)
        p.vacuum(dry_run=False, keep_versions=keep, **NOW)
    for k, data in nested.items():
        assert fast_store.read_bytes(k) == data, k
    assert fast_store.read_bytes("events/notes.txt") == b"not vacuum's"
    assert "manifest/v00000000.json" not in keys(fast_store, "events"), "the table's own history went"
    assert ids(t.to_arrow()) == list(range(20))
    ds = ParquetDatasetStore(fast_store)
    assert ids(ds.read_dataset("events/archive")) == list(range(12))
    assert ids(Table.open(fast_store, "events/data/inner").to_arrow()) == list(range(9))
    assert Pipeline.open(fast_store, "p/nodes/inner").read("s").num_rows == 2


@pytest.mark.spec("S-3")
def test_overwrite_and_delete_dataset_leave_nested_keys(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=4)
    ds.write_dataset(rows(0, 10), "d")
    nested = copy_tree(store, "d", "d/inner")
    store.write("d/t/_latest_manifest", b"{}")
    nested["d/t/_latest_manifest"] = b"{}"
    before = {k: store.read_bytes(k) for k in files(store, "d")}
    # Keys are exclusive: an overwrite of a dataset that has other keys
    # nested under it is refused before anything is removed.
    with pytest.raises(AlreadyExists, match="inside it"):
        ParquetDatasetStore(store).write_dataset(rows(100, 103), "d", overwrite=True)
    assert {k: store.read_bytes(k) for k in files(store, "d")} == before
    assert ids(ds.read_dataset("d")) == list(range(10))
    for k, data in nested.items():
        assert store.read_bytes(k) == data, k
    ds.delete_dataset("d")
    assert not ds.dataset_exists("d")
    assert set(files(store, "d")) == set(nested)
    assert ids(ds.read_dataset("d/inner")) == list(range(10))
    with pytest.raises(NotFound):
        ds.delete_dataset("absent")
