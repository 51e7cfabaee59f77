"""The commit of a Spark ``format("pds")`` table append in
``schema_mode="merge"``, racing another writer and under store faults.

The table is on SeaweedFS through the fault proxy (tests/fault_proxy.py,
fixture ``faulty``); Spark's tasks and driver open the store through the
proxy, the other writer and the checks go straight to SeaweedFS. The append
adds a column ``a`` to a table of ``id`` (not nullable) and ``v``.

- **Races**: the other writer (``pds.Table.append`` on a thread of its own,
  started by a hook of the proxy when the Spark job's driver sends its first
  manifest PUT, so that it commits between the job's write and its commit)
  appends rows, adds the same column, adds another column, or widens ``v``.
  Rows alone or the same column merge: both appends land once. Another
  column or a widening is the documented ``SchemaMismatch`` ("the table's
  schema changed meanwhile"): nothing of the job committed, its files
  removed.
- **Faults** at the commit's segment PUT, manifest PUT (create-only) and
  pointer PUT (compare-and-swap): one lost reply (the store applied the PUT)
  or one 503, which the commit absorbs, committing once; every manifest PUT's
  reply lost, which ends committed once or in ``CommitUnknown``; every
  manifest PUT failing, which ends in an error with nothing committed.

After each: manifest versions are contiguous and each reads, each version's
schema has exactly the columns of its files, the rows are the expected ones
(none lost or twice), no data file is left that no version references
(``CommitUnknown`` may leave the job's files, as documented), and what no
version references (a lost attempt's segment, say) is exactly what vacuum
removes.
"""

from __future__ import annotations

import datetime
import io
import re
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import pds

from helpers import files, table_manifest, table_root

pytestmark = [pytest.mark.s3]

KEY = "t"
BASE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int32())])
#: A commit's PUTs, by what they write (a regex on the path).
STEPS = {
    "segment": rf"/{KEY}/segment/[^/]+\.json$",
    "manifest": rf"/{KEY}/manifest/v\d{{8}}\.json$",
    "pointer": rf"/{KEY}/_latest_manifest$",
}
Row = tuple[tuple[str, Any], ...]
ZERO = datetime.timedelta(0)


def _rows(table: pa.Table) -> list[Row]:
    """Rows as sorted (column, value) tuples, sorted, nulls left out: a
    column a row lacks and a null compare equal."""
    return sorted(tuple(sorted((k, v) for k, v in r.items() if v is not None)) for r in table.to_pylist())


def _expected(*tables: pa.Table) -> list[Row]:
    return sorted(r for t in tables for r in _rows(t))


def _make(faulty: Any) -> tuple[pds.Table, pa.Table]:
    base = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array(range(10), pa.int32())}, schema=BASE)
    return pds.Table.create(faulty.direct, KEY, BASE, data=base), base


def _spark_rows(spark: SparkSession) -> tuple[Any, pa.Table]:
    """The Spark job's rows: ids 100.., ``v`` and the new column ``a``."""
    rows = [(100 + i, i, f"a{i}") for i in range(12)]
    df = spark.createDataFrame(rows, "id bigint, v int, a string").repartition(3)
    return df, pa.Table.from_pylist([{"id": i, "v": v, "a": a} for i, v, a in rows])


def _append(df: Any, faulty: Any) -> None:
    w = df.write.format("pds").option("store", faulty.url).options(**faulty.options)
    w.option("schema_mode", "merge").mode("append").save(KEY)


def _outcome(call: Callable[[], None]) -> tuple[str, BaseException | None]:
    """("ok", None), ("unknown", e) for CommitUnknown, or ("error", e).
    ``format("pds")`` relays the driver's pds error inside Spark's
    exception (its traceback last), so it is recognised by the traceback's
    last line, ``pds.errors.CommitUnknown: <reason>``."""
    try:
        call()
    except pds.CommitUnknown as e:
        return "unknown", e
    except Exception as e:  # noqa: BLE001 - the test looks at it
        return ("unknown" if re.search(r"\bCommitUnknown: \S", str(e)) else "error"), e
    return "ok", None


def _log(faulty: Any) -> str:
    return "\n".join(str(e) for e in faulty.proxy.log if e.method != "GET")


def _check(faulty: Any, rows: list[Row], *, unknown: bool = False) -> pds.Table:
    """The table, straight from the store: contiguous versions that each
    read, each version's columns those of its files, the latest with *rows*,
    no data file that no version references (unless *unknown*), and vacuum
    removing exactly what no version references."""
    store = faulty.direct
    present = files(store, f"{KEY}/manifest")
    versions = sorted(int(m.group(1)) for p in present if (m := re.search(r"/v(\d{8})\.json$", p)))
    assert versions == list(range(len(versions))), versions
    t = pds.Table.open(store, KEY)
    assert t.version == versions[-1], (t.version, versions)
    referenced: set[str] = set()
    for v in versions:
        at = t.at(version=v)
        got = at.to_arrow()
        assert got.schema.names == at.schema.names
        paths = [d["path"] for d in table_manifest(store, KEY, v)["data_files"]]
        segments = [r["path"] for r in table_root(store, KEY, v).get("segments", [])]
        referenced |= {f"{KEY}/{p}" for p in paths + segments}
        columns: set[str] = set()
        for p in paths:
            columns |= set(pq.read_schema(io.BytesIO(store.read_bytes(f"{KEY}/{p}"))).names)
        assert columns == set(at.schema.names), f"version {v}: files hold {sorted(columns)}, schema {at.schema}"
    assert _rows(t.to_arrow()) == rows
    stray = (set(files(store, f"{KEY}/data")) | set(files(store, f"{KEY}/segment"))) - referenced
    if not unknown:
        assert not any("/data/" in k for k in stray), f"unreferenced data files: {sorted(stray)}\n{_log(faulty)}"
    # What no version references (the segment of an attempt that lost its
    # version's race or failed, and under CommitUnknown the job's files) is
    # garbage that vacuum removes, every version kept.
    swept = t.vacuum(ZERO, dry_run=False, keep_versions=True, min_age=ZERO)
    assert {f"{KEY}/{k}" for k in swept} == stray, (swept, stray)
    return t


# -- races ----------------------------------------------------------------------------

#: The other writer's append: (its rows, whether the Spark append then lands).
OTHER: dict[str, tuple[pa.Table, bool]] = {
    "rows": (pa.table({"id": pa.array([50, 51], pa.int64()), "v": pa.array([1, 2], pa.int32())}), True),
    "same_column": (
        pa.table({"id": pa.array([50, 51], pa.int64()), "v": pa.array([1, 2], pa.int32()), "a": ["x", None]}),
        True,
    ),
    "other_column": (
        pa.table({"id": pa.array([50, 51], pa.int64()), "v": pa.array([1, 2], pa.int32()), "b": [1.5, 2.5]}),
        False,
    ),
    "widen": (pa.table({"id": pa.array([50, 51], pa.int64()), "v": pa.array([2**40, 2], pa.int64())}), False),
}


@pytest.mark.parametrize("at", ["manifest", "pointer"])
@pytest.mark.parametrize("other", list(OTHER))
def test_a_merge_append_racing_another_writer_lands_once_or_commits_nothing(
    spark_session: SparkSession, faulty: Any, other: str, at: str
) -> None:
    """The other writer commits just before the job's driver sends its
    manifest PUT (it takes version 1: the job rebases onto it, if its files
    still merge) or its pointer PUT (the job has version 1: the other
    builds on it, and the job's pointer compare-and-swap loses to it)."""
    _, base = _make(faulty)
    data, merges = OTHER[other]
    lands = merges or at == "pointer"
    df, spark_rows = _spark_rows(spark_session)
    done: list[object] = []

    def commit_the_other(_entry: Any) -> None:
        # The other writer on a thread of its own, straight to the store.
        def run() -> None:
            try:
                done.append(pds.Table.open(faulty.direct, KEY).append(data, schema_mode="merge"))
            except Exception as e:  # noqa: BLE001 - asserted below
                done.append(e)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(60)

    rule = faulty.proxy.observe("PUT", STEPS[at], times=1, before=commit_the_other)
    outcome, error = _outcome(lambda: _append(df, faulty))
    assert rule.hits == 1 and done == [1 if at == "manifest" else 2], (done, _log(faulty))
    manifests = [e for e in faulty.proxy.log if e.method == "PUT" and re.search(STEPS["manifest"], e.path)]
    if lands:
        assert outcome == "ok", str(error)[:3000]
        t = _check(faulty, _expected(base, data, spark_rows))
        assert t.version == 2
        assert set(t.schema.names) == {"id", "v", "a"} | set(data.schema.names)
        if at == "manifest":
            # The job's manifest PUT lost the race for version 1 and was rebased onto the other's.
            assert [e.path.rsplit("/", 1)[1] for e in manifests] == ["v00000001.json", "v00000002.json"], _log(faulty)
            assert [e.status for e in manifests] == [412, 200], _log(faulty)
        else:
            assert [(e.path.rsplit("/", 1)[1], e.status) for e in manifests] == [("v00000001.json", 200)]
    else:
        assert outcome == "error" and "SchemaMismatch" in str(error), str(error)[:3000]
        assert "changed meanwhile" in str(error), str(error)[:3000]
        t = _check(faulty, _expected(base, data))
        assert t.version == 1 and "a" not in t.schema.names


# -- faults at the commit's PUTs --------------------------------------------------------

#: fault -> (action, status or how, times).
FAULTS: dict[str, tuple[str, int | str, int | None]] = {
    "lost_reply": ("drop_reply", "close", 1),
    "503": ("fail", 503, 1),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("step", list(STEPS))
def test_one_fault_at_a_merge_append_commit_step_commits_once(
    spark_session: SparkSession, faulty: Any, step: str, fault: str
) -> None:
    _, base = _make(faulty)
    df, spark_rows = _spark_rows(spark_session)
    action, how, times = FAULTS[fault]
    if action == "fail":
        rule = faulty.proxy.fail("PUT", STEPS[step], status=how, times=times)
    else:
        rule = faulty.proxy.drop_reply("PUT", STEPS[step], how=str(how), times=times)
    outcome, error = _outcome(lambda: _append(df, faulty))
    assert rule.hits == 1, _log(faulty)
    assert outcome == "ok", f"{error}\n{_log(faulty)}"
    t = _check(faulty, _expected(base, spark_rows))
    assert t.version == 1 and t.schema.names == ["id", "v", "a"]


@pytest.mark.parametrize("step", list(STEPS))
def test_every_reply_lost_at_a_commit_step_commits_once_or_nothing(
    spark_session: SparkSession, faulty: Any, step: str
) -> None:
    """Every PUT of the step applied and its reply lost (object_store's
    retries included): committed once, or ``CommitUnknown`` with the table
    as before or as after, or an error with the table as before and the
    job's files removed; then the same append, with the store back, lands
    (once more if it had landed: an append is not idempotent)."""
    _, base = _make(faulty)
    df, spark_rows = _spark_rows(spark_session)
    rule = faulty.proxy.drop_reply("PUT", STEPS[step], times=None)
    outcome, error = _outcome(lambda: _append(df, faulty))
    faulty.proxy.clear_rules()
    assert rule.hits >= 1, _log(faulty)
    after = _expected(base, spark_rows)
    if outcome == "ok":
        t = _check(faulty, after)
    elif outcome == "unknown":
        t = pds.Table.open(faulty.direct, KEY)
        t = _check(faulty, after if t.version == 1 else _expected(base), unknown=True)
    else:
        t = _check(faulty, _expected(base))
        assert t.version == 0, f"{error}\n{_log(faulty)}"
    landed = t.version
    _append(df, faulty)
    t = _check(faulty, _expected(base, *[spark_rows] * (landed + 1)), unknown=outcome == "unknown")
    assert t.version == landed + 1 and t.schema.names == ["id", "v", "a"]


def test_every_manifest_put_failing_commits_nothing(spark_session: SparkSession, faulty: Any) -> None:
    """No manifest PUT reaches the store: an error, or ``CommitUnknown``
    (pds cannot tell a PUT that failed without an answer from one applied
    late, so it may keep the job's files for vacuum); the table is as before,
    and the same append, with the store back, lands once."""
    _, base = _make(faulty)
    df, spark_rows = _spark_rows(spark_session)
    rule = faulty.proxy.fail("PUT", STEPS["manifest"], status=503, times=None)
    outcome, error = _outcome(lambda: _append(df, faulty))
    faulty.proxy.clear_rules()
    assert rule.hits >= 1 and outcome in ("error", "unknown"), f"{outcome} {error}\n{_log(faulty)}"
    t = _check(faulty, _expected(base), unknown=outcome == "unknown")
    assert t.version == 0 and t.schema.names == ["id", "v"]
    _append(df, faulty)
    t = _check(faulty, _expected(base, spark_rows), unknown=outcome == "unknown")
    assert t.version == 1 and t.schema.names == ["id", "v", "a"]
