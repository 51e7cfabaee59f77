"""Serializable table operations (issue S-2): a delete racing appends, and a
compaction racing appends and deletes, end as some serial order would.

Threads share one store (memory, file, SeaweedFS); every delete returns the
version it committed (or the one it found with nothing to delete), and that
version must hold no row its filter matches.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import pds
from pds import Table

from helpers import files, table_root

pytestmark = pytest.mark.spec("S-2")


def _run(*targets: Callable[[], Any]) -> list[Any]:
    results: list[Any] = [None] * len(targets)
    errors: list[BaseException] = []

    def wrap(i: int, f: Callable[[], Any]) -> None:
        try:
            results[i] = f()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i, f)) for i, f in enumerate(targets)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


def _rows(ids: range, x: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array([x] * len(ids), pa.int64())})


@pytest.mark.parametrize("keyed", [False, True], ids=["filter", "key-range"])
def test_a_delete_racing_appends_misses_no_row_committed_before_it(fast_store: Any, keyed: bool) -> None:
    t = Table.create(fast_store, "t", data=_rows(range(0, 5), 0), primary_key="id" if keyed else None)
    appends = 12

    def appender(w: int) -> Callable[[], list[int]]:
        def run() -> list[int]:
            mine = Table.open(fast_store, "t")
            base = 1000 * (w + 1)
            return [mine.append(_rows(range(base + 10 * i, base + 10 * i + 10), 1)) for i in range(appends)]

        return run

    def deleter() -> list[int]:
        mine = Table.open(fast_store, "t")
        flt = [("id", ">=", 1000)] if keyed else [("x", "==", 1)]
        return [mine.delete(flt) for _ in range(8)]

    added_a, added_b, deleted = _run(appender(0), appender(1), deleter)
    # Every delete's version holds none of the rows its filter matches.
    for v in deleted:
        left = t.to_arrow(version=v, filter=[("x", "==", 1)])
        assert left.num_rows == 0, f"version {v} (a delete's) still holds {left.num_rows} matching rows"
    # Every append landed exactly once: the versions after the last delete
    # hold the rows appended after it, each once.
    last = max(deleted)
    later = sorted(v for v in added_a + added_b if v > last)
    expected = len(later) * 10
    final = Table.open(fast_store, "t").to_arrow()
    ids = final.column("id").to_pylist()
    assert len(ids) == len(set(ids))
    assert final.filter(pa.compute.equal(final.column("x"), 1)).num_rows == expected
    assert sorted(ids)[:5] == [0, 1, 2, 3, 4]


def test_appends_that_lose_races_leave_no_segment_behind(fast_store: Any) -> None:
    """An attempt that loses its version's name to another writer removes the
    segments it wrote for it (the next attempt lays the list out anew): every
    segment object left is one a version names."""
    Table.create(fast_store, "t", data=_rows(range(0, 5), 0))
    writers, appends = 3, 8

    def appender(w: int) -> Callable[[], list[int]]:
        def run() -> list[int]:
            mine = Table.open(fast_store, "t")
            return [mine.append(_rows(range(100 * (w + 1) + i, 100 * (w + 1) + i + 1), 1)) for i in range(appends)]

        return run

    _run(*(appender(w) for w in range(writers)))
    latest = Table.open(fast_store, "t").version
    assert latest == writers * appends, "every append committed once"
    named = {s["path"] for v in range(latest + 1) for s in table_root(fast_store, "t", v)["segments"]}
    stored = {k.removeprefix("t/") for k in files(fast_store, "t/segment")}
    assert stored == named, f"segments no version names: {sorted(stored - named)[:5]}"


def test_schema_changing_appends_racing_each_other_and_plain_appends(fast_store: Any) -> None:
    """Writers each add a column of their own (``schema_mode="merge"``) while
    another appends rows without them (widened with nulls to the schema it
    last read). A writer whose schema went
    stale meanwhile is refused with ``SchemaMismatch`` and nothing of it is
    committed; retried (its batch widened to the new schema), it lands once.
    Every version reads, every row is there once with its own values, and no
    segment is left that no version names."""
    Table.create(fast_store, "t", data=_rows(range(0, 5), 0))
    writers, appends = 3, 4
    refused: list[int] = []
    # A writer is refused at most once per schema change it races.
    attempts = writers + 2

    def widened(batch: pa.Table, schema: pa.Schema) -> pa.Table:
        """*batch* with the columns of *schema* it lacks, as nulls."""
        for f in schema:
            if f.name not in batch.column_names:
                batch = batch.append_column(f, pa.nulls(batch.num_rows, f.type))
        return batch

    def merger(w: int) -> Callable[[], None]:
        def run() -> None:
            mine = Table.open(fast_store, "t")
            for i in range(appends):
                ids = range(100 * (w + 1) + i, 100 * (w + 1) + i + 1)
                batch = _rows(ids, w).append_column(f"c{w}", pa.array([w * 10 + i], pa.int64()))
                for _ in range(attempts):
                    try:
                        mine.append(batch, schema_mode="merge")
                        break
                    except pds.SchemaMismatch:
                        refused.append(w)
                        mine.refresh()
                        batch = widened(batch, mine.schema)
                else:
                    raise AssertionError(f"writer {w}: refused {attempts} times")

        return run

    def plain() -> None:
        mine = Table.open(fast_store, "t")
        for i in range(appends):
            batch = _rows(range(1000 + i, 1001 + i), 9)
            for _ in range(attempts):
                try:
                    mine.append(widened(batch, mine.schema))
                    break
                except pds.SchemaMismatch:
                    refused.append(-1)
                    mine.refresh()
            else:
                raise AssertionError(f"the plain appender: refused {attempts} times")

    _run(*(merger(w) for w in range(writers)), plain)
    t = Table.open(fast_store, "t")
    assert t.version == (writers + 1) * appends, "every append committed once"
    got = t.to_arrow().sort_by("id").to_pylist()
    expected = [{"id": i, "x": 0} for i in range(5)]
    expected += [{"id": 100 * (w + 1) + i, "x": w, f"c{w}": w * 10 + i} for w in range(writers) for i in range(appends)]
    expected += [{"id": 1000 + i, "x": 9} for i in range(appends)]
    names = ["id", "x"] + [f"c{w}" for w in range(writers)]
    assert sorted(t.schema.names) == sorted(names)
    assert got == sorted(({n: row.get(n) for n in names} for row in expected), key=lambda r: r["id"])
    for v in range(t.version + 1):
        rows = t.to_arrow(version=v)
        assert len(set(rows.column("id").to_pylist())) == rows.num_rows, f"version {v} duplicates a row"
    named = {s["path"] for v in range(t.version + 1) for s in table_root(fast_store, "t", v)["segments"]}
    stored = {k.removeprefix("t/") for k in files(fast_store, "t/segment")}
    assert stored == named, f"segments no version names: {sorted(stored - named)[:5]}"
    # The data files of refused attempts are removed too.
    data = {p for v in range(t.version + 1) for p in t.files(version=v).column("path").to_pylist()}
    stored = {k.removeprefix("t/") for k in files(fast_store, "t/data")}
    assert stored == data, f"data files no version names: {sorted(stored - data)[:5]}"


def test_compaction_racing_appends_and_deletes_loses_nothing(fast_store: Any) -> None:
    t = Table.create(fast_store, "t", data=_rows(range(0, 100), 0), row_group_size=10)
    for lo in range(0, 100, 10):
        t.append(_rows(range(100 + lo, 110 + lo), 0))

    def appender() -> None:
        mine = Table.open(fast_store, "t")
        for i in range(10):
            mine.append(_rows(range(1000 + 10 * i, 1010 + 10 * i), 0))

    def deleter() -> None:
        mine = Table.open(fast_store, "t")
        for lo in range(0, 200, 20):
            mine.delete([("id", ">=", lo), ("id", "<", lo + 5)])

    def compactor() -> None:
        mine = Table.open(fast_store, "t")
        for _ in range(3):
            # A compaction whose files keep being deleted from may give up;
            # it must never lose or resurrect a row.
            with contextlib.suppress(pds.CommitConflict):
                mine.compact(min_deleted_fraction=0.1)

    # Two compactors: one may rewrite a file while the other commits a
    # coalesced tombstone naming it (that plan must be found stale).
    _run(appender, deleter, compactor, compactor)
    expected = sorted(
        [i for i in range(200) if i % 20 >= 5] + list(range(1000, 1100)),
    )
    got = sorted(Table.open(fast_store, "t").to_arrow().column("id").to_pylist())
    assert got == expected
    # At rest, compaction completes (or has nothing left to do) and changes no row.
    t.refresh()
    assert t.compact(min_deleted_fraction=0.1) >= t.version
    assert sorted(t.to_arrow().column("id").to_pylist()) == expected


def test_commit_unknown_is_a_remote_store_error() -> None:
    import remote_store

    assert issubclass(pds.CommitUnknown, remote_store.RemoteStoreError)
    assert pds.CommitUnknown is pds.errors.CommitUnknown
