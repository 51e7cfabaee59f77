"""An overwrite of a committed dataset is atomic on pds's own backend.

The old dataset stays committed and readable while the new parts are
written (under names of that write alone), one compare-and-swap of
``manifest.json`` switches readers to the new one, and only then are the
old parts removed. So a reader never gets ``DatasetIncomplete`` from an
overwrite and never a mix of rows; an overwrite that fails or is killed
leaves the old dataset exactly as it was. Real stores: ``file://`` and
SeaweedFS, faults from the fault proxy, writers in real processes.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from store_kinds import Faulty, Lake

import pds

KINDS = ["file_store", "s3_store"]
#: A part of an overwrite of a committed dataset: ``part-<12 hex>-NNNNN.parquet``.
SWAPPED_PART = re.compile(r"^part-[0-9a-f]{12}-\d{5}\.parquet$")


@pytest.fixture(params=KINDS)
def lake(request: pytest.FixtureRequest) -> Lake:
    lake: Lake = request.getfixturevalue(request.param)
    return lake


def _rows(tag: int, n: int) -> pa.Table:
    return pa.table({"tag": pa.array([tag] * n, pa.int64()), "x": pa.array(range(n), pa.int64())})


def _names(store: Any, key: str) -> list[str]:
    return sorted(f.name for f in store.list_files(key))


def _which(got: pa.Table, tables: dict[int, pa.Table]) -> int:
    """The tag of the table *got* is exactly, else fail (a mix, or rows lost)."""
    tags = set(got.column("tag").to_pylist())
    assert len(tags) == 1, f"a mix of writers' rows: {tags}"
    (tag,) = tags
    assert got.sort_by("x").equals(tables[tag]), f"rows of writer {tag} altered"
    return int(tag)


def test_a_reader_never_misses_the_dataset_during_an_overwrite(lake: Lake) -> None:
    _, _, store = lake
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=10_000, row_group_size=5_000)
    tables = {1: _rows(1, 25_000), 2: _rows(2, 300_000)}
    ds.write_dataset(tables[1], "ds")
    seen: list[int] = []
    errors: list[Exception] = []
    done = threading.Event()

    def read() -> None:
        reader = pds.ParquetDatasetStore(store)
        while not done.is_set():
            try:
                seen.append(_which(reader.read_dataset("ds"), tables))
            except Exception as e:  # noqa: BLE001 - reported by the test below
                errors.append(e)
                return

    thread = threading.Thread(target=read)
    thread.start()
    try:
        while not seen:  # the reader is reading before the overwrite starts
            assert thread.is_alive(), errors
            time.sleep(0.01)
        ds.write_dataset(tables[2], "ds", overwrite=True)
        written = len(seen)
        while len(seen) < written + 2 and thread.is_alive():
            time.sleep(0.01)
    finally:
        done.set()
        thread.join(timeout=120)
    assert not errors, errors
    assert seen.count(1) >= 2 and seen[-1] == 2, seen
    # Once readers switched, never back.
    assert seen == sorted(seen), seen
    manifest = ds.read_manifest("ds")
    assert _names(store, "ds") == sorted([*manifest.parts, "_SUCCESS", "manifest.json"])
    assert len(manifest.parts) == 30 and all(SWAPPED_PART.match(p) for p in manifest.parts)


CHILD = r"""
import json, sys, time
import pyarrow as pa, pds
url, options, tag, go = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
batches, per, pause = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
schema = pa.schema([("tag", pa.int64()), ("x", pa.int64())])
def gen():
    for i in range(batches):
        time.sleep(pause)
        yield pa.record_batch([pa.array([tag] * per, pa.int64()), pa.array(range(i * per, (i + 1) * per), pa.int64())], schema=schema)
ds = pds.ParquetDatasetStore(pds.open_store(url, **options), max_rows_per_file=2 * per)
print("ready", flush=True)
while go and not __import__("os").path.exists(go):
    time.sleep(0.005)
try:
    ds.write_dataset(pa.RecordBatchReader.from_batches(schema, gen()), "ds", overwrite=True)
except pds.AlreadyExists as e:
    print("lost", type(e).__name__, e, flush=True)
else:
    print("done", flush=True)
"""


def _child(url: str, options: dict[str, str], tag: int, go: str, batches: int, per: int, pause: float) -> Any:
    args = [url, json.dumps(options), str(tag), go, str(batches), str(per), str(pause)]
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_a_killed_overwrite_leaves_the_old_dataset(lake: Lake) -> None:
    url, options, store = lake
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=1_000)
    old = _rows(1, 3_500)
    ds.write_dataset(old, "ds")
    before = _names(store, "ds")
    manifest = store.read_bytes("ds/manifest.json")
    proc = _child(url, options, 2, "", 10_000, 500, 0.01)
    try:
        deadline = time.monotonic() + 120
        while not any(SWAPPED_PART.match(n) for n in _names(store, "ds")):
            assert time.monotonic() < deadline and proc.poll() is None, "no part of the overwrite landed"
            assert _which(ds.read_dataset("ds"), {1: old}) == 1
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    # Killed after a part landed: the old dataset, exactly; its debris beside it.
    assert _which(ds.read_dataset("ds"), {1: old}) == 1
    assert store.read_bytes("ds/manifest.json") == manifest
    debris = sorted(set(_names(store, "ds")) - set(before))
    assert debris and all(n == "_WRITING" or SWAPPED_PART.match(n) for n in debris), debris
    # A later overwrite takes the key over and removes the debris.
    new = _rows(3, 2_500)
    written = ds.write_dataset(new, "ds", overwrite=True)
    assert _which(ds.read_dataset("ds"), {3: new}) == 3
    assert _names(store, "ds") == sorted([*written.parts, "_SUCCESS", "manifest.json"])


def test_racing_overwrites_from_two_processes_leave_one_writers_rows(lake: Lake, tmp_path: Path) -> None:
    url, options, store = lake
    ds = pds.ParquetDatasetStore(store)
    tables = {1: _rows(1, 1_000)}
    ds.write_dataset(tables[1], "ds")
    go = tmp_path / "go"
    batches, per = 12, 1_000
    procs: dict[int, Any] = {}
    outcomes = {}
    try:
        for tag in (2, 3):
            procs[tag] = _child(url, options, tag, str(go), batches, per, 0.01)
        go.touch()
        for tag, proc in procs.items():
            out, _ = proc.communicate(timeout=240)
            assert proc.returncode == 0, out
            outcomes[tag] = out.strip()
            tables[tag] = _rows(tag, batches * per)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
    assert any(o == "done" for o in outcomes.values()), outcomes
    for o in outcomes.values():
        assert o == "done" or o.startswith("lost AlreadyExists"), outcomes
    winner = _which(ds.read_dataset("ds"), tables)
    assert winner in (2, 3) and outcomes[winner] == "done", (winner, outcomes)
    manifest = ds.read_manifest("ds")
    assert all(SWAPPED_PART.match(p) for p in manifest.parts), manifest.parts
    # The manifest's parts are all there. Other parts may remain: a winner
    # that lost the key just after its swap leaves the cleanup to the next
    # writer; one more overwrite removes them.
    names = _names(store, "ds")
    assert set(manifest.parts) <= set(names), (manifest.parts, names)
    debris = set(names) - {*manifest.parts, "_SUCCESS", "manifest.json"}
    assert all(n.startswith("part-") for n in debris), debris
    last = ds.write_dataset(_rows(4, 10), "ds", overwrite=True)
    assert _names(store, "ds") == sorted([*last.parts, "_SUCCESS", "manifest.json"])


def test_a_lost_reply_to_the_manifest_swap_is_recognised(faulty: Faulty) -> None:
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=1_000)
    ds.write_dataset(_rows(1, 2_500), "ds")
    faulty.proxy.clear()
    faulty.proxy.drop_reply("PUT", r"/ds/manifest\.json$", times=1)
    new = _rows(2, 3_000)
    written = ds.write_dataset(new, "ds", overwrite=True)
    puts = [e for e in faulty.proxy.log if e.method == "PUT" and e.path.endswith("/ds/manifest.json")]
    assert puts[0].action == "drop_reply", puts
    # One commit: the swap landed once; the retry (if any) was refused and recognised.
    assert [e.status for e in puts[1:]] in ([], [412]), puts
    direct = pds.ParquetDatasetStore(faulty.direct)
    assert _which(direct.read_dataset("ds"), {2: new}) == 2
    assert direct.read_manifest("ds").parts == written.parts
    assert all(SWAPPED_PART.match(p) for p in written.parts), written.parts
    assert _names(faulty.direct, "ds") == sorted([*written.parts, "_SUCCESS", "manifest.json"])


@pytest.mark.parametrize("status", [503, 400])
def test_a_failed_manifest_swap_leaves_the_old_dataset(faulty: Faulty, status: int) -> None:
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=1_000)
    old = _rows(1, 2_500)
    ds.write_dataset(old, "ds")
    before = _names(faulty.direct, "ds")
    manifest = faulty.direct.read_bytes("ds/manifest.json")
    faulty.proxy.clear()
    # Every swap request fails (retries included): the write fails.
    faulty.proxy.fail("PUT", r"/ds/manifest\.json$", status=status, times=None)
    with pytest.raises(Exception) as raised:
        ds.write_dataset(_rows(2, 3_000), "ds", overwrite=True)
    assert not isinstance(raised.value, pds.DatasetIncomplete), raised.value
    assert any(e.action == "fail" for e in faulty.proxy.log)
    faulty.proxy.clear()
    direct = pds.ParquetDatasetStore(faulty.direct)
    assert _which(direct.read_dataset("ds"), {1: old}) == 1
    assert faulty.direct.read_bytes("ds/manifest.json") == manifest
    # This write's parts are removed, its claim released.
    assert _names(faulty.direct, "ds") == before


def test_a_spark_overwrite_swaps_the_manifest_in_place(faulty: Faulty) -> None:
    """A Spark overwrite (its driver's commit) keeps the old dataset
    committed and whole until the one compare-and-swap of its manifest:
    ``_SUCCESS`` is never withdrawn, and the old parts go only after."""
    from pds.spark._job import WriteJob, WriteSettings

    old, new = _rows(1, 2_500), _rows(2, 3_000)
    pds.ParquetDatasetStore(faulty.direct, max_rows_per_file=1_000).write_dataset(old, "ds")
    job = WriteJob.start(faulty.store, "ds", old.schema, WriteSettings(max_rows_per_file=1_000), overwrite=True)
    results = [job.write_task(new.slice(i * 1_500, 1_500).to_batches(), identity=(i, 0, 10 + i, 1)) for i in range(2)]
    seen: list[int] = []

    def read_old(_: Any) -> None:
        seen.append(_which(pds.ParquetDatasetStore(faulty.direct).read_dataset("ds"), {1: old}))

    faulty.proxy.clear()
    faulty.proxy.observe("PUT", r"/ds/manifest\.json$", before=read_old, times=1)
    manifest = job.commit(results)
    assert seen == [1]  # just before the swap, the old dataset, whole
    assert not faulty.proxy.requests("DELETE", r"/ds/_SUCCESS$")
    direct = pds.ParquetDatasetStore(faulty.direct)
    assert _which(direct.read_dataset("ds"), {2: new}) == 2
    assert _names(faulty.direct, "ds") == sorted([*manifest.parts, "_SUCCESS", "manifest.json"])


def test_a_stream_overtaken_by_an_overwrite_fails_without_repeating_rows(lake: Lake) -> None:
    """A streamed read holds the replaced manifest; the overwrite's cleanup
    deletes the parts it has not read yet. It raises ``DatasetIncomplete``
    (never a row twice, never the new rows mixed in); a new read gets the
    new dataset."""
    _, _, store = lake
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=500, row_group_size=500)
    old, new = _rows(1, 20_000), _rows(2, 700)
    ds.write_dataset(old, "ds")
    stream = ds.iter_batches("ds")
    got = [stream.read_next_batch()]
    ds.write_dataset(new, "ds", overwrite=True)
    with pytest.raises(pds.DatasetIncomplete):
        while True:
            got.append(stream.read_next_batch())  # StopIteration would fail the test
    rows = pa.Table.from_batches(got)
    assert set(rows.column("tag").to_pylist()) == {1}
    assert len(set(rows.column("x").to_pylist())) == rows.num_rows  # no row twice
    assert _which(ds.read_dataset("ds"), {2: new}) == 2


def _spark_overwrite(faulty: Faulty) -> tuple[Any, list[Any], pa.Table, pa.Table]:
    """A committed dataset (tag 1) and a Spark overwrite job (tag 2) with
    its tasks written, not committed."""
    from pds.spark._job import WriteJob, WriteSettings

    old, new = _rows(1, 2_500), _rows(2, 3_000)
    pds.ParquetDatasetStore(faulty.direct, max_rows_per_file=1_000).write_dataset(old, "ds")
    job = WriteJob.start(faulty.store, "ds", old.schema, WriteSettings(max_rows_per_file=1_000), overwrite=True)
    results = [job.write_task(new.slice(i * 1_500, 1_500).to_batches(), identity=(i, 0, 10 + i, 1)) for i in range(2)]
    return job, results, old, new


def test_a_spark_overwrite_whose_cleanup_fails_stays_committed(faulty: Faulty) -> None:
    """Once the manifest is swapped the job is committed: a failing delete
    of the replaced parts is logged, not raised, and an abort afterwards
    (what the Spark callers run when commit raises) deletes nothing."""
    job, results, _, new = _spark_overwrite(faulty)
    old_parts = pds.ParquetDatasetStore(faulty.direct).read_manifest("ds").parts
    faulty.proxy.clear()
    # The first delete of a replaced part is refused (S3 deletes are POST ?delete).
    faulty.proxy.fail("POST", r"", query="delete", status=403, times=1)
    manifest = job.commit(results)
    assert job.committed
    assert faulty.proxy.requests("POST", action="fail")
    faulty.proxy.clear()
    job.abort(results, settle=0)
    assert not faulty.proxy.requests("DELETE"), faulty.proxy.log
    direct = pds.ParquetDatasetStore(faulty.direct)
    assert direct.read_manifest("ds").parts == manifest.parts
    assert _which(direct.read_dataset("ds"), {2: new}) == 2
    # The replaced part not deleted stays as debris beside the committed dataset.
    debris = set(_names(faulty.direct, "ds")) - {*manifest.parts, "_SUCCESS", "manifest.json"}
    assert len(debris) == 1 and debris < set(old_parts), debris


def test_a_spark_manifest_swap_whose_replies_are_all_lost_is_recognised(faulty: Faulty) -> None:
    """The swap is applied but its reply is lost, and the swap's own reads
    of the manifest fail too, so it raises: the job reads the manifest back,
    finds its own and is committed."""
    job, results, _, new = _spark_overwrite(faulty)
    faulty.proxy.clear()
    reads: list[Any] = []

    def fail_reads(_: Any) -> None:
        if not reads:  # the swap's GETs (retries included) fail; the read-back after them does not
            reads.append(faulty.proxy.fail("GET", r"/ds/manifest\.json$", status=503, times=3))

    faulty.proxy.drop_reply("PUT", r"/ds/manifest\.json$", times=None, after=fail_reads)
    manifest = job.commit(results)
    assert job.committed
    assert faulty.proxy.requests("PUT", r"/ds/manifest\.json$", action="drop_reply")
    faulty.proxy.clear()
    job.abort(results, settle=0)
    direct = pds.ParquetDatasetStore(faulty.direct)
    assert direct.read_manifest("ds").parts == manifest.parts
    assert _which(direct.read_dataset("ds"), {2: new}) == 2


def _spark_fresh(faulty: Faulty) -> tuple[Any, list[Any], pa.Table]:
    """A Spark job (no overwrite) at a fresh key with its tasks written, not committed."""
    from pds.spark._job import WriteJob, WriteSettings

    new = _rows(3, 3_000)
    job = WriteJob.start(faulty.store, "fresh", new.schema, WriteSettings(max_rows_per_file=1_000), overwrite=False)
    results = [job.write_task(new.slice(i * 1_500, 1_500).to_batches(), identity=(i, 0, 20 + i, 1)) for i in range(2)]
    return job, results, new


@pytest.mark.parametrize("what", [r"/fresh/manifest\.json$", r"/fresh/_SUCCESS$"])
def test_a_spark_commit_whose_marker_or_manifest_reply_is_lost_commits_once(faulty: Faulty, what: str) -> None:
    """The commit's PUT is applied but its reply lost: the retry finds its
    own object and the job commits once, with exactly its rows."""
    job, results, new = _spark_fresh(faulty)
    faulty.proxy.clear()
    faulty.proxy.drop_reply("PUT", what, times=1)
    manifest = job.commit(results)
    assert job.committed
    assert faulty.proxy.requests("PUT", what, action="drop_reply")
    direct = pds.ParquetDatasetStore(faulty.direct)
    assert direct.read_dataset("fresh").sort_by("x").equals(new.sort_by("x"))
    assert _names(faulty.direct, "fresh") == sorted([*manifest.parts, "_SUCCESS", "manifest.json"])


def test_a_spark_commit_whose_manifest_put_fails_commits_nothing(faulty: Faulty) -> None:
    """Every PUT of the manifest fails: nothing is committed, and the
    abort the Spark callers then run leaves the key empty."""
    job, results, _ = _spark_fresh(faulty)
    faulty.proxy.clear()
    faulty.proxy.fail("PUT", r"/fresh/manifest\.json$", status=503, times=None)
    with pytest.raises(Exception):  # noqa: B017 - the store's error, whichever class it maps to
        job.commit(results)
    assert not job.committed
    faulty.proxy.clear()
    job.abort(results, settle=0)
    left = [str(f.path) for f in faulty.direct.list_files("", recursive=True)]
    assert not [k for k in left if k.startswith("fresh/")], left
    assert not pds.ParquetDatasetStore(faulty.direct).dataset_exists("fresh")


def test_a_spark_commit_after_another_writer_committed_is_refused_and_keeps_its_rows(faulty: Faulty) -> None:
    """An overwrite by another writer takes the key while the job runs: the
    job's commit is refused and the other writer's dataset stays whole."""
    job, results, _ = _spark_fresh(faulty)
    other = _rows(4, 700)
    pds.ParquetDatasetStore(faulty.direct).write_dataset(other, "fresh", overwrite=True)
    with pytest.raises(pds.AlreadyExists):
        job.commit(results)
    assert not job.committed
    job.abort(results, settle=0)
    assert _which(pds.ParquetDatasetStore(faulty.direct).read_dataset("fresh"), {4: other}) == 4
