"""``Produce`` in parallel worker processes (issue P, item 3): ``workers=``
on ``Pipeline.create``/``open``. Results do not depend on the worker
count: E's random pipelines (tests/pipelines/test_producers_oracle.py) updated with
1, 2 and 4 workers hold the same content, change feeds and history counts
as the in-process engine and the from-scratch oracle; a ``Produce`` that
raises in a worker is the same ``ProduceError``; a worker killed mid-update
commits nothing and leaves nothing."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_producers_oracle import build, check_version, oracle, random_changes

import pds
from pds import Pipeline, ProduceError
from pds.producers import _workers


@pytest.fixture(autouse=True)
def split_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stage with changes in several ranges goes to the pool, small or
    batched (by default only large row-form changes do: see
    test_the_pool_is_used_only_where_it_pays)."""
    monkeypatch.setattr(_workers, "pays", lambda task: True)


def listing(root: Path) -> list[str]:
    """Every file below *root* (staging files included)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def twins(url: str, seed: int, workers: int, target_rows: int) -> tuple[Pipeline, Pipeline, Any, Any]:
    """The same random pipeline twice: in this process and with *workers*."""
    ref = Pipeline.create(url, f"ref-{seed}-{workers}", target_rows=target_rows, workers=1)
    par = Pipeline.create(url, f"par-{seed}-{workers}", target_rows=target_rows, workers=workers)
    specs, shape = build(ref, random.Random(seed))
    assert build(par, random.Random(seed))[0][-1].name == specs[-1].name
    return ref, par, specs, shape


@pytest.mark.spec("P-3")
@pytest.mark.parametrize(("seed", "workers"), [(7, 1), (6, 2), (7, 4), (1, 2)])
def test_results_do_not_depend_on_the_worker_count(tmp_path: Path, seed: int, workers: int) -> None:
    url = (tmp_path / "lake").as_uri()
    ref, par, specs, shape = twins(url, seed, workers, target_rows=4)
    assert par.workers == workers and ref.workers == 1
    rng = random.Random(seed * 7)
    inputs: dict[str, dict[Any, list[dict[str, Any]]]] = {"s1": {}, "s2": {}}
    before = oracle(specs, inputs)
    split = 0
    for _ in range(6):
        changes = random_changes(rng, inputs, nkeys=80)
        assert par.update(changes) == ref.update(changes)
        split += len(par._worker_stats)
        expected = oracle(specs, inputs)
        check_version(par, specs, shape, expected, before)
        before = expected
        for s in specs:
            assert par.read(s.name).equals(ref.read(s.name)), s.name
            if s.kind == "stage":
                a, b = par.changes(s.name), ref.changes(s.name)
                assert a.upserts is not None and b.upserts is not None
                assert a.deletes is not None and b.deletes is not None
                assert a.upserts.equals(b.upserts) and a.deletes.equals(b.deletes), s.name
        assert par.history(1)[0]["parameters"] == ref.history(1)[0]["parameters"]
    assert (split > 0) == (workers > 1), "stages were split over the workers (and never with workers=1)"
    assert Pipeline.open(url, f"par-{seed}-{workers}").workers == (os.cpu_count() or 1)


def declare(url: str, key: str, workers: int, hook: Any, batched: bool = False) -> Pipeline:
    """A source and one stage whose Produce calls *hook(key)* first."""
    p = Pipeline.create(url, key, target_rows=10, workers=workers, exist_ok=True)
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    if batched:

        @p.stage("inv", sources=[src], key={"k": pa.int64()}, value={"r": pa.float64()}, batched=True)
        def inv_batched(groups: pa.Table) -> pa.Table:
            ks = groups.column("k").to_pylist()
            for k in ks:
                hook(k)
            rs = [1 / v for v in groups.column("v").to_pylist()]
            return pa.table({"k": pa.array(ks, pa.int64()), "r": rs})

        return p

    @p.stage("inv", sources=[src], key={"k": pa.int64()}, value={"r": pa.float64()})
    def inv(k: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, float]]:
        hook(k)
        for v in values:
            yield k, 1 / v["v"]

    return p


def table(ks: list[int], v: int = 1) -> pa.Table:
    return pa.table({"k": pa.array(ks, pa.int64()), "v": pa.array([v] * len(ks), pa.int64())})


def ignore(k: int) -> None:
    pass


@pytest.mark.spec("P-3")
@pytest.mark.parametrize(("batched", "bad_key"), [(False, 3), (False, 150), (True, 150)])
def test_a_produce_raising_in_a_worker_is_the_same_produce_error_and_writes_nothing(
    tmp_path: Path, batched: bool, bad_key: int
) -> None:
    url = (tmp_path / "lake").as_uri()
    errors = []
    for workers in (1, 2):
        p = declare(url, f"p{workers}", workers, ignore, batched)
        p.update({"s": table(list(range(200)))})
        listed = listing(tmp_path / "lake" / f"p{workers}")
        bad = pa.table(
            {
                "k": pa.array(range(200), pa.int64()),
                "v": pa.array([0 if k in (bad_key, 170) else 2 for k in range(200)], pa.int64()),
            }
        )
        with pytest.raises(ProduceError, match="stage 'inv' failed on key") as err:
            p.update({"s": bad})
        assert isinstance(err.value, ZeroDivisionError), "still the user's exception class"
        assert isinstance(err.value.__cause__, ZeroDivisionError)
        assert p.refresh() == 1
        assert listing(tmp_path / "lake" / f"p{workers}") == listed, "what the failed update wrote was removed"
        if workers > 1:
            assert p._worker_stats == {}, "the update failed before any stage was stitched"
        errors.append((type(err.value).__name__, err.value.stage, err.value.key, str(err.value)))
    if batched:  # the batch a key fails in depends on the ranges: the class and stage match
        assert errors[0][:2] == errors[1][:2]
    else:
        assert errors[0] == errors[1]
        assert errors[0][2] == bad_key, "the first failing key, as in this process"


@pytest.mark.spec("P-3")
def test_a_worker_killed_mid_update_commits_nothing_leaves_nothing_and_the_next_update_succeeds(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "lake").as_uri()
    marker = tmp_path / "killed"
    parent = os.getpid()

    def kill_once(k: int) -> None:
        # Only ever in a worker process (never the test's), and once.
        if k == 77 and os.getpid() != parent and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)

    p = declare(url, "p", 2, kill_once)
    p.update({"s": table(list(range(0, 200, 2)), 1)})
    listed = listing(tmp_path / "lake" / "p")
    change = table(list(range(1, 200, 2)), 3)
    with pytest.raises(BrokenProcessPool):
        p.update({"s": change})
    assert marker.exists(), "the worker was killed"
    assert p.refresh() == 1, "nothing committed"
    assert listing(tmp_path / "lake" / "p") == listed, "no leftover objects"
    assert p.update({"s": change}) == 2
    assert p._worker_stats["inv"]["map_ranges"] > 1
    got = p.read("inv")
    assert got.column("k").to_pylist() == list(range(200))
    assert got.column("r").to_pylist() == [1.0 if k % 2 == 0 else 1 / 3 for k in range(200)]


@pytest.mark.spec("P-3")
@pytest.mark.parametrize("bad", [0, -1])
def test_workers_below_one_is_refused_before_any_io(tmp_path: Path, bad: int) -> None:
    url = (tmp_path / "lake").as_uri()
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        Pipeline.create(url, "p", workers=bad)
    assert not (tmp_path / "lake").exists()
    Pipeline.create(url, "p")
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        Pipeline.open(url, "p", workers=bad)
    with pytest.raises(TypeError, match="workers"):
        Pipeline.open(url, "p", workers=2.0)  # type: ignore[arg-type]
    assert Pipeline.open(url, "p", workers=None).workers == (os.cpu_count() or 1)


@pytest.mark.spec("P-3")
def test_a_memory_pipeline_runs_in_this_process_whatever_the_worker_count() -> None:
    seen: list[int] = []
    p = declare("memory://", "p", 4, seen.append)
    p.update({"s": table(list(range(100)))})
    assert sorted(seen) == list(range(100)), "Produce ran here: worker processes cannot reach memory://"
    assert p._worker_stats == {}
    assert pds.Pipeline.open(p.store, "p", workers=4).workers == 4


def exchange_folders(tmp: Path) -> list[str]:
    """The exchange folders (and anything in them) left under *tmp*."""
    while True:
        try:
            return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if "pds-exchange" in str(p))
        except FileNotFoundError:  # removed while it was listed: list again
            continue


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temp directory, for this test: its own, to watch."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.mark.spec("P-3")
def test_rows_cross_through_spill_files_removed_after_success_failure_and_a_killed_worker(
    tmp_path: Path, temp_dir: Path
) -> None:
    url = (tmp_path / "lake").as_uri()
    marker = tmp_path / "killed"
    parent = os.getpid()

    def hook(k: int) -> None:
        if os.getpid() == parent:
            return
        if k == 5:  # in a map call: its exchange folder exists
            assert exchange_folders(temp_dir), "the update's exchange folder exists while it runs"
        if k == 77 and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        if k == 170 and marker.exists() and not (tmp_path / "raised").exists():
            (tmp_path / "raised").touch()
            raise ZeroDivisionError("k=170")

    p = declare(url, "p", 2, hook)
    p.update({"s": table(list(range(0, 200, 2)))})
    stats = p._worker_stats["inv"]
    assert stats["exchanged_rows"] == 100 and stats["exchanged_bytes"] > 0, "rows went through files"
    assert exchange_folders(temp_dir) == [], "removed after success"
    change = table(list(range(1, 200, 2)), 3)
    with pytest.raises(BrokenProcessPool):
        p.update({"s": change})
    assert exchange_folders(temp_dir) == [], "removed after a killed worker"
    with pytest.raises(ProduceError, match="k=170"):
        p.update({"s": table(list(range(1, 200)), 3)})
    assert exchange_folders(temp_dir) == [], "removed after a ProduceError"
    assert p.refresh() == 1
    assert p.update({"s": change}) == 2
    assert exchange_folders(temp_dir) == []


CRASHER = """
import os, sys, time
import pyarrow as pa
import pds
from pds.producers import _workers

_workers.pays = lambda task: True  # small as it is, split


def main():
    url, marker = sys.argv[1], sys.argv[2]
    p = pds.Pipeline.create(url, "p", target_rows=10, workers=2)
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

    @p.stage("inv", sources=[src], key={"k": pa.int64()}, value={"v": pa.int64()})
    def inv(k, values):
        if k == 150:  # a reduce's rows are on disk by now for the other ranges
            open(marker, "w").close()
            time.sleep(60)
        for v in values:
            yield k, v["v"]

    p.update({"s": pa.table({"k": pa.array(range(200), pa.int64()), "v": pa.array(range(200), pa.int64())})})

if __name__ == "__main__":
    main()
"""


@pytest.mark.spec("P-3")
def test_the_exchange_folder_goes_when_the_updating_process_is_killed(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER)
    marker = tmp_path / "producing"
    env = {**os.environ, "TMPDIR": str(tmp)}
    # (Its stderr: multiprocessing's warning about the killed pool's semaphores.)
    proc = subprocess.Popen(
        [sys.executable, str(script), (tmp_path / "lake").as_uri(), str(marker)], env=env, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, "the update ran"
            time.sleep(0.05)
        assert exchange_folders(tmp), "the update's exchange folder exists"
    finally:
        proc.kill()
        proc.wait(30)
    deadline = time.monotonic() + 30
    while exchange_folders(tmp) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert exchange_folders(tmp) == [], "the workers removed it once the process that started them died"


@pytest.mark.spec("P-3")
def test_the_pool_is_used_only_where_it_pays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    url = (tmp_path / "lake").as_uri()
    assert _workers.MIN_ROWS == 16_000_000
    rows = declare(url, "rows", 2, ignore)
    rows.update({"s": table(list(range(300)))})
    assert rows._worker_stats == {}, "a small change runs in this process"
    monkeypatch.setattr(_workers, "MIN_ROWS", 300)
    rows.update({"s": table(list(range(300)), 2)})
    assert rows._worker_stats["inv"]["map_ranges"] > 1, "300 changed rows: the row form goes to the pool"
    view = json.loads(rows._node_view("s", None)[1])
    assert _workers.produce_rows(view, rebuild=True) == 300 and _workers.produce_rows(view, rebuild=False) == 300
    rows.update({"s": table(list(range(299)), 3)})
    assert rows._worker_stats == {}, "fewer rows: in this process"
    batched = declare(url, "batched", 2, ignore, batched=True)
    batched.update({"s": table(list(range(300)))})
    assert batched._worker_stats == {}, "a batched stage runs in this process"
