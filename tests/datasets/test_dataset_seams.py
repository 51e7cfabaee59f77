"""Datasets where they meet other writers, retries and caches: racing
writers, lost replies, leftovers of failed writers, replaced parts.

The guarantee under test (see the ``dataset`` module docs): a writer told ok
keeps exactly its rows until a later write replaces them whole; racing
writers (with or without ``overwrite``) commit one writer's rows or none; a
reader never gets a mix. Races run on separate store handles (threads, GIL
released) and on separate processes; faults come from the proxy in front of
a real SeaweedFS or the GCS emulator.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from remote_store import AlreadyExists, Store
from store_kinds import lake_url

import pds

ROWS = {0: 50_000, 1: 30_000}
PART_ROWS = 10_000


def _rows(writer: int, round_: int) -> pa.Table:
    """Writer *writer*'s table in round *round_*: its rows are tagged with both."""
    n = ROWS[writer]
    return pa.table(
        {
            "writer": pa.array([writer] * n, pa.int64()),
            "round": pa.array([round_] * n, pa.int64()),
            "i": pa.array(range(n), pa.int64()),
        }
    )


def _outcome(read: Callable[[], pa.Table]) -> tuple[int, int] | None:
    """Whose rows the dataset holds, ``(writer, round)``, asserting that they
    are exactly that writer's; ``None`` when there is no committed dataset."""
    try:
        got = read()
    except pds.DatasetIncomplete:
        return None
    writers = set(got.column("writer").to_pylist())
    rounds = set(got.column("round").to_pylist())
    assert len(writers) == 1, f"a mix of writers {writers}"
    assert len(rounds) == 1, f"a mix of rounds {rounds}"
    writer, round_ = writers.pop(), rounds.pop()
    assert got.sort_by("i").equals(_rows(writer, round_)), "the rows are not exactly one writer's"
    return writer, round_


def _race(stores: list[Store], key: str, round_: int, overwrite: bool) -> dict[int, BaseException | None]:
    """Two writers of *key* at once, each on its own store handle."""
    results: dict[int, BaseException | None] = {}
    barrier = threading.Barrier(2)

    def write(w: int) -> None:
        ds = pds.ParquetDatasetStore(stores[w], max_rows_per_file=PART_ROWS)
        table = _rows(w, round_)
        barrier.wait()
        try:
            ds.write_dataset(table, key, overwrite=overwrite)
            results[w] = None
        except BaseException as exc:  # noqa: BLE001 - checked below
            results[w] = exc

    threads = [threading.Thread(target=write, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in results.values():
        if e is not None and not isinstance(e, AlreadyExists):
            raise e
    assert len(results) == 2
    return results


def _check_round(
    stores: list[Store], key: str, round_: int, overwrite: bool, before: tuple[int, int] | None
) -> tuple[int, int] | None:
    results = _race(stores, key, round_, overwrite)
    ok = [w for w, e in results.items() if e is None]
    held = _outcome(lambda: pds.ParquetDatasetStore(stores[0]).read_dataset(key))
    if ok:
        # A writer told ok keeps its rows until a later write replaces them:
        # here the only later write is the other racer, also told ok.
        assert held is not None, f"writers {ok} were told ok, but no dataset is committed"
        assert held in {(w, round_) for w in ok}, f"{held} committed, but writers {ok} were told ok"
    elif overwrite:
        # Both failed: an overwrite removed the old dataset, and none replaced it.
        assert held is None or held == before
    else:
        assert held == before
    return held


ROUNDS = {"file": 30, "s3": 12, "gcs": 12}


@pytest.mark.parametrize("kind", ["file", "s3", "gcs"])
@pytest.mark.parametrize("overwrite", [True, False])
def test_racing_writers_commit_one_writers_rows_or_none(
    kind: str, overwrite: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two writers of one key at once, many rounds, each writer on its own
    handle: a writer told ok finds exactly its rows; never a mix."""
    url, options = lake_url(kind, tmp_path, request)
    stores = [pds.open_store(url, **options) for _ in range(2)]
    held: tuple[int, int] | None = None
    committed = 0
    for r in range(ROUNDS[kind]):
        key = "ds" if overwrite else f"ds{r}"
        held = _check_round(stores, key, r, overwrite, held if overwrite else None)
        committed += held is not None
    assert committed > 0  # the race is not one that nobody ever wins


def _process_writer(url: str, options: dict[str, str], writer: int, rounds: int, start: Any, outcomes: Any) -> None:
    store = pds.open_store(url, **options)
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=PART_ROWS)
    for r in range(rounds):
        start.wait()
        try:
            ds.write_dataset(_rows(writer, r), "ds", overwrite=True)
            outcomes.put((writer, r, True))
        except AlreadyExists:
            outcomes.put((writer, r, False))
        start.wait()  # the parent reads the round's outcome


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_racing_overwrites_from_two_processes(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The same race between two processes (a Spark stage retry and a cron
    overlap are two processes): round after round, whatever the dataset
    holds is exactly the rows of a writer that was told ok."""
    url, options = lake_url(kind, tmp_path, request)
    rounds = 8
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(3)
    outcomes = ctx.Queue()
    procs = [ctx.Process(target=_process_writer, args=(url, options, w, rounds, start, outcomes)) for w in (0, 1)]
    for p in procs:
        p.start()
    reader = pds.ParquetDatasetStore(pds.open_store(url, **options))
    try:
        for r in range(rounds):
            start.wait(timeout=120)
            start.wait(timeout=120)
            told = [outcomes.get(timeout=30) for _ in (0, 1)]
            ok = {w for w, rr, good in told if good and rr == r}
            held = _outcome(lambda: reader.read_dataset("ds"))
            if ok:
                assert held in {(w, r) for w in ok}, f"round {r}: {held} committed, writers {ok} told ok"
            else:
                assert held is None
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)


FAULTY = ["faulty", "faulty_gcs"]


def _table(n: int, tag: int) -> pa.Table:
    return pa.table({"tag": pa.array([tag] * n, pa.int64()), "i": pa.array(range(n), pa.int64())})


@pytest.mark.parametrize("fixture", FAULTY)
@pytest.mark.parametrize("marker", ["_SUCCESS", "_WRITING"])
def test_a_lost_reply_to_a_marker_is_the_writers_own(fixture: str, marker: str, request: pytest.FixtureRequest) -> None:
    """The store applies the create of ``_SUCCESS`` (or of the ``_WRITING``
    claim) and the reply is lost: the retry's create-only PUT is refused, and
    the writer reads the marker back, finds its own token, and goes on. The
    dataset is committed, whole, and later writes see it."""
    faulty = request.getfixturevalue(fixture)
    faulty.proxy.drop_reply("PUT", rf"/d/{marker}$")
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=400)
    table = _table(1_000, 1)
    ds.write_dataset(table, "d")
    assert faulty.proxy.requests("PUT", rf"/d/{marker}$", action="drop_reply")
    direct = pds.ParquetDatasetStore(faulty.direct)
    assert direct.read_dataset("d", verify=True).equals(table)
    names = sorted(f.name for f in faulty.direct.list_files("d"))
    assert names == ["_SUCCESS", "manifest.json", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    with pytest.raises(AlreadyExists):
        direct.write_dataset(_table(5, 2), "d")
    direct.write_dataset(_table(5, 2), "d", overwrite=True)
    assert direct.read_dataset("d").equals(_table(5, 2))


@pytest.mark.parametrize("fixture", FAULTY)
def test_a_part_replaced_before_the_commit_is_never_told_ok(fixture: str, request: pytest.FixtureRequest) -> None:
    """Another writer's request lands on one of this writer's parts between
    its upload and its commit (here: run from the proxy's hook as the
    manifest goes up). The writer's check after ``_SUCCESS`` finds the part
    is not the object it wrote: it withdraws ``_SUCCESS`` and fails, and no
    reader ever gets the mix."""
    faulty = request.getfixturevalue(fixture)
    other = pds.ParquetDatasetStore(faulty.direct, max_rows_per_file=400)
    other.write_dataset(_table(1_000, 9), "elsewhere")
    stranger = faulty.direct.read_bytes("elsewhere/part-00001.parquet")

    def land_late(_: Any) -> None:
        faulty.direct.write_atomic("d/part-00001.parquet", stranger, overwrite=True)

    faulty.proxy.observe("PUT", r"/d/manifest\.json$", before=land_late, times=1)
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=400)
    with pytest.raises(AlreadyExists, match="another writer"):
        ds.write_dataset(_table(1_000, 1), "d")
    assert not pds.ParquetDatasetStore(faulty.direct).dataset_exists("d")


@pytest.mark.parametrize("fixture", FAULTY)
def test_a_late_part_of_a_writer_that_lost_the_key_never_replaces_the_winners(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """Writer A's second part is on its way when an overwrite by B takes the
    key and commits (run from the proxy's hook, as A's PUT arrives). A's part
    then lands create-only, so it cannot replace B's: A fails, and B's
    dataset stays exactly B's rows."""
    faulty = request.getfixturevalue(fixture)
    b_table = _table(1_000, 2)

    def overwrite_first(_: Any) -> None:
        pds.ParquetDatasetStore(faulty.direct, max_rows_per_file=400).write_dataset(b_table, "d", overwrite=True)

    faulty.proxy.observe("PUT", r"/d/part-00001\.parquet$", before=overwrite_first, times=1)
    a = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=400)
    with pytest.raises(AlreadyExists):
        a.write_dataset(_table(1_200, 1), "d")
    got = pds.ParquetDatasetStore(faulty.direct).read_dataset("d", verify=True)
    assert got.equals(b_table)


@pytest.mark.parametrize("leftover", ["part-00000.parquet", "data.parquet", "manifest.json"])
def test_a_failed_writers_leftovers_never_block_a_later_write(fast_store: Store, leftover: str) -> None:
    """A failed write may leave a part or a manifest (a lost reply of a
    multipart completion, a batch delete that failed). Nothing reads it; a
    later write without ``overwrite`` replaces it, and ``delete_dataset``
    removes it."""
    ds = pds.ParquetDatasetStore(fast_store, max_rows_per_file=400)
    fast_store.write(f"a/{leftover}", b"left by a killed writer")
    ds.write_dataset(_table(1_000, 1), "a")
    assert ds.read_dataset("a", verify=True).equals(_table(1_000, 1))
    fast_store.write(f"b/{leftover}", b"left by a killed writer")
    ds.delete_dataset("b")
    assert not fast_store.exists(f"b/{leftover}")
    ds.write_dataset(_table(10, 2), "b")
    assert ds.read_dataset("b").equals(_table(10, 2))


@pytest.mark.parametrize("kind", ["file", "s3", "gcs"])
def test_a_footer_cached_from_a_replaced_part_is_dropped(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A handle's first read meets a part replaced by another of the same
    size: the footer it caches is that other object's. Once the part is
    restored, the handle's next read finds the object changed (its ETag),
    drops the footer and reads the part's own: the same rows as a fresh
    handle, not the rows the stale footer's statistics would allow."""
    url, options = lake_url(kind, tmp_path, request)
    direct = pds.open_store(url, **options)
    writer = pds.ParquetDatasetStore(direct, compression="none")
    mine = pa.table({"v": pa.array(range(1_000), pa.int64())})
    other = pa.table({"v": pa.array(range(5_000, 6_000), pa.int64())})
    writer.write_dataset(mine, "d")
    writer.write_dataset(other, "e")
    original = direct.read_bytes("d/data.parquet")
    stranger = direct.read_bytes("e/data.parquet")
    assert len(original) == len(stranger)  # the same size: only the ETag tells them apart
    handle = pds.ParquetDatasetStore(pds.open_store(url, **options))
    direct.write_atomic("d/data.parquet", stranger, overwrite=True)
    handle.read_dataset("d", filter=[("v", "<", 1_000)])  # caches the stranger's footer
    direct.write_atomic("d/data.parquet", original, overwrite=True)
    fresh = pds.ParquetDatasetStore(pds.open_store(url, **options))
    for ds in (fresh, handle):
        assert ds.read_dataset("d", filter=[("v", "<", 1_000)]).num_rows == 1_000
        assert ds.read_dataset("d").equals(mine)
        streamed = pa.Table.from_batches(list(ds.iter_batches("d", filter=[("v", ">=", 0)])))
        assert streamed.num_rows == 1_000


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_reader_during_overwrites_gets_one_dataset_or_says_it_was_replaced(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A reader racing a writer that overwrites the dataset again and again
    gets, each time, exactly one write's rows, or ``DatasetIncomplete`` (the
    dataset withdrawn, or replaced twice while it was read): never a part
    checksum error, a bare ``NotFound`` or a mix."""
    url, options = lake_url(kind, tmp_path, request)
    writer = pds.ParquetDatasetStore(pds.open_store(url, **options), max_rows_per_file=PART_ROWS)
    reader = pds.ParquetDatasetStore(pds.open_store(url, **options))
    writer.write_dataset(_rows(0, 0), "ds")
    done = threading.Event()
    failures: list[BaseException] = []

    def overwrite() -> None:
        try:
            for r in range(1, 16):
                writer.write_dataset(_rows(r % 2, r), "ds", overwrite=True)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=overwrite)
    t.start()
    reads = 0
    while not done.is_set() or reads == 0:
        _outcome(lambda: reader.read_dataset("ds"))  # exactly one write's rows, or DatasetIncomplete
        reads += 1
    t.join()
    assert not failures, failures
    assert _outcome(lambda: reader.read_dataset("ds")) == (1, 15)
