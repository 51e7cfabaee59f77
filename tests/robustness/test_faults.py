"""Storage faults during a commit (issue #15, section 1), against SeaweedFS
through the fault proxy (tests/fault_proxy.py, fixture ``faulty``).

Every request a commit makes is faulted in turn: the data PUT(s), the
tombstone PUT, the PUT(s) of a table manifest's segments, the create-only
manifest PUT, the pointer PUT (create-only for a table's first version,
compare-and-swap after), a pipeline's part PUTs, and vacuum's deletes.
Each step is tried under four faults:

- ``fail``: every matching request is answered 503 without reaching the store
  (a persistent failure; the writer's store has no object_store retries
  here, see ``writer_store``);
- ``reset``: the first matching request's connection is reset (TCP RST)
  before it reaches the store (object_store retries only idempotent ones);
- ``drop_reply``: the first matching request reaches the store and is
  applied, then the connection closes without a reply (object_store retries
  it, and the retry meets the first one's effect: 412 for a create-only or
  compare-and-swap PUT);
- ``drop_reply_all``: every matching request is applied and its reply lost,
  so the error reaches pds itself with the outcome unknown.

After each call the faults are cleared and the same invariants are checked
(``judge_table``, ``judge_pipeline``):

- the call returned, or raised ``pds.CommitUnknown``, or raised another
  ``remote_store.RemoteStoreError`` (nothing else);
- the table (pipeline) opens and reads; manifest versions are contiguous and
  each one's ``previous`` is the one before; every segment, data file,
  tombstone and part that any manifest names exists, and every version reads;
  ``pds verify`` passes;
- success: the new rows are there exactly once, at version ``before + 1``,
  and ``Table.open`` sees it (the pointer names it);
- ``CommitUnknown``: the table is exactly as before or exactly as after,
  at ``before`` or ``before + 1``;
- any other error: the table is exactly as before (rows and versions), and
  the same call, retried, then succeeds exactly once;
- then one more commit (a sentinel append) lands on top, and nothing the
  faulted call left behind appears or disappears with it.

Also: one injected 503 or one closed connection on any step is retried by
object_store and the call succeeds; and two writers, one of which loses its
manifest PUT's reply while the other commits.
"""

from __future__ import annotations

import datetime
import hashlib
import inspect
import itertools
import json
import os
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import remote_store
from click.testing import CliRunner
from remote_store import Store
from store_kinds import REMOTE

import pds
from pds import Changes, Pipeline, Table
from pds.cli import main as pds_cli
from pds.spark._table_job import TableSettings, TableWriteJob

from helpers import files, pipeline_files, table_manifest, table_root


class _NotYetInPds(remote_store.RemoteStoreError):
    """Stands for pds.CommitUnknown in a pds that does not have it (nothing raises it)."""


CommitUnknown: type[remote_store.RemoteStoreError] = getattr(pds, "CommitUnknown", None) or getattr(
    pds.errors, "CommitUnknown", _NotYetInPds
)

pytestmark = [pytest.mark.spec("S-1"), pytest.mark.s3]

KEY = "t"

#: The requests of a commit, by what they write: method, a regex on the path
#: after the table key, a substring of the query.
REQUESTS: dict[str, tuple[str, str, str | None]] = {
    "data": ("PUT", r"/data/part-[^/]+\.parquet$", None),
    "tombstone": ("PUT", r"/tombstone/[^/]+\.del$", None),
    "segment": ("PUT", r"/segment/[^/]+\.json$", None),
    "manifest": ("PUT", r"/manifest/v\d{8}\.json$", None),
    "pointer": ("PUT", r"/_latest_manifest$", None),
    "parts": ("PUT", r"/nodes/[^/]+/.+\.parquet$", None),
    # The parts of test stage ``g``: in the worker-pool test, only workers write them.
    "g_parts": ("PUT", r"/nodes/g/.+\.parquet$", None),
    # A data file above 8 MiB is a multipart upload.
    "mpu_create": ("POST", r"/data/part-[^/]+\.parquet$", "uploads"),
    "mpu_part": ("PUT", r"/data/part-[^/]+\.parquet$", "partNumber"),
    "mpu_complete": ("POST", r"/data/part-[^/]+\.parquet$", "uploadId"),
}

#: How a matching request is faulted: (action, status or how, times).
FAULTS: dict[str, tuple[str, int | str, int | None]] = {
    "fail": ("fail", 503, None),
    "reset": ("fail", "reset", 1),
    "drop_reply": ("drop_reply", "close", 1),
    "drop_reply_all": ("drop_reply", "close", None),
}

#: One transient fault on any request, which the call must absorb: a 503 or a
#: connection closed before the store saw the request (object_store retries
#: both), or one lost reply (object_store retries; pds recognises its own
#: object or commit in what the retry meets).
TRANSIENT: dict[str, tuple[str, int | str, int | None]] = {
    "503": ("fail", 503, 1),
    "close": ("fail", "close", 1),
    "lost_reply": ("drop_reply", "close", 1),
}


# -- faults ------------------------------------------------------------------------


def _prefix(f: Any) -> str:
    return str(f.url).split("/", 3)[3]


def _bucket(f: Any) -> str:
    return str(f.url).split("/", 3)[2]


def inject(f: Any, step: str, fault: tuple[str, int | str, int | None], key: str = KEY) -> list[Any]:
    """Add the rule(s) faulting *step* of the table/pipeline at *key*."""
    action, how, times = fault
    base = re.escape(f"/{_bucket(f)}/{_prefix(f)}/{key}")
    proxy = f.proxy
    if step == "delete":
        # Vacuum's deletes: one DELETE per object, or S3's bulk delete (POST /bucket?delete).
        methods_paths = [("DELETE", base + "/"), ("POST", rf"^/{re.escape(_bucket(f))}/?$")]
        out = []
        for method, path in methods_paths:
            query = "delete" if method == "POST" else None
            if action == "fail":
                out.append(proxy.fail(method, path, query=query, status=how, times=times))
            else:
                out.append(proxy.drop_reply(method, path, query=query, how=how, times=times))
        return out
    method, pattern, query = REQUESTS[step]
    path = base + pattern
    if action == "fail":
        return [proxy.fail(method, path, query=query, status=how, times=times)]
    return [proxy.drop_reply(method, path, query=query, how=how, times=times)]


def confirm(f: Any, rules: list[Any], step: str) -> None:
    """The faulted request was made (the proxy log shows it)."""
    f.proxy.clear_rules()
    assert sum(r.hits for r in rules) >= 1, f"no {step} request was made; the proxy saw:\n" + "\n".join(
        str(e) for e in f.proxy.log
    )


@dataclass
class Outcome:
    kind: str  # "ok", "unknown", "error"
    value: Any = None
    error: BaseException | None = None

    def __str__(self) -> str:
        if self.error is None:
            return f"{self.kind} ({self.value!r})"
        return f"{self.kind}: {type(self.error).__name__}: {self.error}"


def writer_store(f: Any, fault: str) -> Store:
    """The writer's store: through the proxy, with no object_store retries
    under a persistent ``fail`` (pds's commit loop tries a failing manifest
    PUT up to 64 times; with 2 retries each that is ~45 s a case). Retries
    themselves are tested by the TRANSIENT cases."""
    return f.open(max_retries="0") if fault == "fail" else f.store


def note(out: Outcome) -> Outcome:
    """With ``PDS_FAULT_OUTCOMES=<file>``, append what the faulted call did
    (test id, outcome) to that file: the raw material of the README's failure
    model."""
    path = os.environ.get("PDS_FAULT_OUTCOMES")
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0].rpartition("::")[2]
        with open(path, "a") as fh:
            fh.write(f"{test}\t{str(out).splitlines()[0][:300]}\n")
    return out


def attempt(f: Any, call: Callable[[], Any]) -> Outcome:
    """Run *call*: success, CommitUnknown, another RemoteStoreError; anything
    else fails the test."""
    try:
        return Outcome("ok", call())
    except CommitUnknown as e:
        return Outcome("unknown", error=e)
    except remote_store.RemoteStoreError as e:
        return Outcome("error", error=e)
    except Exception as e:  # noqa: BLE001 - the contract allows only the above
        log = "\n".join(str(x) for x in f.proxy.log[-30:])
        pytest.fail(f"raised {type(e).__module__}.{type(e).__name__} (not a RemoteStoreError): {e}\nlog:\n{log}")


def _vacuum(obj: Table | Pipeline) -> list[str]:
    """vacuum(retain=0, dry_run=False), with min_age=0 where vacuum has it."""
    kw: dict[str, Any] = {}
    if "min_age" in inspect.signature(obj.vacuum).parameters:
        kw["min_age"] = datetime.timedelta(0)
    return obj.vacuum(datetime.timedelta(0), False, **kw)


def _vacuum_dry(obj: Table | Pipeline) -> list[str]:
    kw: dict[str, Any] = {}
    if "min_age" in inspect.signature(obj.vacuum).parameters:
        kw["min_age"] = datetime.timedelta(0)
    return obj.vacuum(datetime.timedelta(0), True, **kw)


# -- tables ------------------------------------------------------------------------

Rows = list[dict[str, Any]]
SCHEMA = pa.schema([("id", pa.int64()), ("val", pa.int64())])


def make_rows(ids: range | list[int], schema: pa.Schema = SCHEMA, **extra: Any) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "val": (i * 7) % 100, **extra} for i in ids], schema=schema)


def rows_of(t: pa.Table) -> Rows:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


def with_nulls(rows: Rows, schema: pa.Schema) -> Rows:
    return [{name: r.get(name) for name in schema.names} for r in rows]


@dataclass
class TableCase:
    """A table set up through the proxy, and the call to fault."""

    call: Callable[[], Any]
    #: Rows before the call (``None``: no table) and after it succeeds.
    before: Rows | None
    after: Rows
    #: The latest version before the call (-1: no table).
    version: int
    #: Checks of the manifest the call commits.
    check: Callable[[dict[str, Any]], None] | None = None


def _table_create(store: Store) -> TableCase:
    data = make_rows(range(100))
    return TableCase(
        call=lambda: Table.create(store, KEY, data=data, primary_key="id"),
        before=None,
        after=rows_of(data),
        version=-1,
    )


def _base_table(store: Store) -> Table:
    return Table.create(store, KEY, data=make_rows(range(100)), primary_key="id")


def _table_append(store: Store) -> TableCase:
    t = _base_table(store)
    new = make_rows(range(100, 150))
    return TableCase(
        call=lambda: t.append(new),
        before=rows_of(make_rows(range(100))),
        after=rows_of(make_rows(range(150))),
        version=0,
    )


def _table_append_merge(store: Store) -> TableCase:
    t = _base_table(store)
    schema = SCHEMA.append(pa.field("extra", pa.string()))
    new = make_rows(range(100, 150), schema, extra="x")
    after = with_nulls(rows_of(make_rows(range(100))), schema) + rows_of(new)

    def check(m: dict[str, Any]) -> None:
        assert "extra" in json.dumps(m["schema"]), "the merged column is in the committed schema"

    return TableCase(
        call=lambda: t.append(new, schema_mode="merge"),
        before=rows_of(make_rows(range(100))),
        after=after,
        version=0,
        check=check,
    )


def _table_delete_filter(store: Store) -> TableCase:
    t = _base_table(store)
    base = rows_of(make_rows(range(100)))
    return TableCase(
        call=lambda: t.delete([("val", "<", 30)]),
        before=base,
        after=[r for r in base if r["val"] >= 30],
        version=0,
    )


def _table_delete_pk(store: Store) -> TableCase:
    t = _base_table(store)
    base = rows_of(make_rows(range(100)))
    return TableCase(
        call=lambda: t.delete([("id", ">=", 10), ("id", "<", 70)]),
        before=base,
        after=[r for r in base if not 10 <= r["id"] < 70],
        version=0,
    )


def _table_compact(store: Store) -> TableCase:
    """Two files: the first 60 % deleted (rewritten), the second lightly
    (kept, its tombstones coalesced into a new one); the target size keeps
    the second file from counting as small."""
    t = _base_table(store)
    t.append(make_rows(range(100, 200)))
    t.delete([("id", "<", 60)])
    t.delete([("id", "in", [150, 151])])
    t.delete([("val", "==", 3)])  # one more tombstone, on both files
    # Not small: size >= target / 2 for both files.
    target = 2 * min(int(d["size_bytes"]) for d in t.manifest["data_files"])
    rows = rows_of(t.to_arrow())
    files_before = {d["path"] for d in t.manifest["data_files"]}

    def check(m: dict[str, Any]) -> None:
        assert m["operation"] == "compact"
        paths = {d["path"] for d in m["data_files"]}
        assert paths - files_before, "compaction wrote a new data file"
        assert len(m["tombstones"]) == 1, "compaction coalesced the kept file's tombstones into one"

    return TableCase(
        call=lambda: t.compact(target_file_size=target, min_deleted_fraction=0.5),
        before=rows,
        after=rows,
        version=t.version,
        check=check,
    )


def _table_append_large(store: Store) -> TableCase:
    """An append whose data file (10 MiB of random bytes) is a multipart upload."""
    schema = SCHEMA.append(pa.field("blob", pa.binary()))
    base = make_rows(range(10), schema)
    t = Table.create(store, KEY, data=base, primary_key="id")
    rng = random.Random(15)
    new = pa.Table.from_pylist(
        [{"id": i, "val": i, "blob": rng.randbytes(1024 * 1024)} for i in range(100, 110)], schema=schema
    )
    return TableCase(
        call=lambda: t.append(new),
        before=rows_of(base),
        after=rows_of(base) + rows_of(new),
        version=0,
    )


def _replaced(base: Rows, new: pa.Table) -> Rows:
    """*base* with the rows of *new*'s keys replaced and the rest added."""
    fresh = {r["id"]: r for r in new.to_pylist()}
    kept = [r for r in base if r["id"] not in fresh]
    return sorted(kept + list(fresh.values()), key=lambda r: r["id"])


def _table_upsert(store: Store) -> TableCase:
    """Scattered keys, some new: bitmap entries for the replaced rows."""
    t = _base_table(store)
    base = rows_of(make_rows(range(100)))
    new = pa.Table.from_pylist([{"id": i, "val": 1000 + i} for i in [3, 17, 42, 88, 150, 151]], schema=SCHEMA)
    return TableCase(call=lambda: t.upsert(new), before=base, after=_replaced(base, new), version=0)


def _table_upsert_range(store: Store) -> TableCase:
    """Consecutive keys: one key-range entry for the replaced rows."""
    t = _base_table(store)
    base = rows_of(make_rows(range(100)))
    new = pa.Table.from_pylist([{"id": i, "val": 2000 + i} for i in range(60, 130)], schema=SCHEMA)
    return TableCase(call=lambda: t.upsert(new), before=base, after=_replaced(base, new), version=0)


def _table_spark_upsert(store: Store) -> TableCase:
    """``pds.spark.upsert``'s write and commit, as its task and driver run
    them (``TableWriteJob``), without Spark: a task uploads the rows, the
    driver commits them with the tombstone of the keys they replace, and a
    failure removes the job's files (as ``collect_written`` does)."""
    t = _base_table(store)
    base = rows_of(make_rows(range(100)))
    new = pa.Table.from_pylist([{"id": i, "val": 3000 + i} for i in [5, 6, 7, 61, 99, 160]], schema=SCHEMA)

    def call() -> int:
        job = TableWriteJob.start(store, KEY, t.schema, TableSettings(), overwrite=False)
        results = []
        try:
            results.append(job.write_task(new.to_batches(), identity=(0, 0, 1, 2)))
            return job.commit(results, upsert=True)
        except CommitUnknown:
            raise  # its files may be committed: left to vacuum
        except BaseException:
            job.abort(results, settle=0)
            raise

    return TableCase(call=call, before=base, after=_replaced(base, new), version=0)


def _table_update(store: Store) -> TableCase:
    t = _base_table(store)
    base = rows_of(make_rows(range(100)))
    after = [{"id": r["id"], "val": r["val"] + 1000 if r["val"] < 30 else r["val"]} for r in base]
    return TableCase(
        call=lambda: t.update([("val", "<", 30)], {"val": pc.field("val") + 1000}),
        before=base,
        after=after,
        version=0,
    )


TABLE_OPS: dict[str, Callable[[Store], TableCase]] = {
    "create": _table_create,
    "append": _table_append,
    "append_merge": _table_append_merge,
    "delete_filter": _table_delete_filter,
    "delete_pk": _table_delete_pk,
    "compact": _table_compact,
    "append_large": _table_append_large,
    "upsert": _table_upsert,
    "upsert_range": _table_upsert_range,
    "spark_upsert": _table_spark_upsert,
    "update": _table_update,
}

TABLE_STEPS = [
    ("create", "data"),
    ("create", "segment"),
    ("create", "manifest"),
    ("create", "pointer"),
    ("append", "data"),
    ("append", "segment"),
    ("append", "manifest"),
    ("append", "pointer"),
    ("append_merge", "data"),
    ("append_merge", "segment"),
    ("append_merge", "manifest"),
    ("append_merge", "pointer"),
    ("delete_filter", "tombstone"),
    ("delete_filter", "segment"),
    ("delete_filter", "manifest"),
    ("delete_filter", "pointer"),
    ("delete_pk", "tombstone"),
    ("delete_pk", "segment"),
    ("delete_pk", "manifest"),
    ("delete_pk", "pointer"),
    ("compact", "data"),
    ("compact", "tombstone"),
    ("compact", "segment"),
    ("compact", "manifest"),
    ("compact", "pointer"),
    ("append_large", "mpu_create"),
    ("append_large", "mpu_part"),
    ("append_large", "mpu_complete"),
    ("upsert", "data"),
    ("upsert", "tombstone"),
    ("upsert", "segment"),
    ("upsert", "manifest"),
    ("upsert", "pointer"),
    ("upsert_range", "tombstone"),
    ("upsert_range", "segment"),
    ("upsert_range", "manifest"),
    ("spark_upsert", "data"),
    ("spark_upsert", "tombstone"),
    ("spark_upsert", "segment"),
    ("spark_upsert", "manifest"),
    ("spark_upsert", "pointer"),
    ("update", "data"),
    ("update", "tombstone"),
    ("update", "segment"),
    ("update", "manifest"),
    ("update", "pointer"),
]


@dataclass
class TableSeen:
    """What a table looks like from a fresh reader (straight to the store)."""

    #: Rows of ``Table.open`` (the pointer's version); ``None``: no table.
    rows: Rows | None
    #: The highest manifest version, and its rows.
    latest: int
    latest_rows: Rows | None
    #: The version the pointer names.
    pointed: int
    versions: list[int] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)


def _verify_cli(f: Any, key: str) -> None:
    args = ["verify", f.url, key, "--json"]
    for k, v in f.direct_options.items():
        args += ["--option", f"{k}={v}"]
    result = CliRunner().invoke(pds_cli, args)
    assert result.exit_code == 0, f"pds verify failed ({result.exit_code}):\n{result.output}"


def _manifests(store: Store, key: str) -> tuple[list[int], set[str]]:
    """Manifest versions under *key* (checked contiguous) and every object
    name relative to it."""
    present = {p[len(key) + 1 :] for p in files(store, key)}
    versions = sorted(int(m.group(1)) for p in present if (m := re.fullmatch(r"manifest/v(\d{8})\.json", p)))
    if versions:
        assert versions == list(range(versions[0], versions[-1] + 1)), (
            f"manifest versions are not contiguous: {versions}"
        )
    return versions, present


def observe_table(f: Any, key: str = KEY) -> TableSeen:
    """Every invariant a table must keep, checked from a fresh reader; what it reads."""
    store = f.direct
    versions, present = _manifests(store, key)
    if not versions:
        with pytest.raises(remote_store.NotFound):
            Table.open(store, key)
        return TableSeen(rows=None, latest=-1, latest_rows=None, pointed=-1)
    manifests = {}
    for v in versions:
        m = table_root(store, key, v)
        assert m["version"] == v
        if v > versions[0]:
            assert m.get("previous") == v - 1, f"version {v}: previous is {m.get('previous')}"
        segments = [r["path"] for r in m["segments"]]
        missing = [p for p in segments if p not in present]
        assert not missing, f"version {v} ({m['operation']}) names segments that do not exist: {missing}"
        m = table_manifest(store, key, v)  # each segment's SHA-256 checked against the root's
        named = [d["path"] for d in m["data_files"]] + [t["path"] for t in m.get("tombstones", [])]
        missing = [p for p in named if p not in present]
        assert not missing, f"version {v} ({m['operation']}) names objects that do not exist: {missing}"
        manifests[v] = m
    t = Table.open(store, key)
    for v in versions:
        t.at(version=v).to_arrow()  # every version reads
    latest = versions[-1]
    assert t.version <= latest
    _verify_cli(f, key)
    rows = rows_of(t.to_arrow())
    latest_rows = rows_of(t.at(version=latest).to_arrow())
    for name, got in (("Table.open", rows), (f"version {latest}", latest_rows)):
        ids = [r["id"] for r in got]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        assert not twice, f"{name}: rows committed more than once (ids {twice[:5]}..., {len(twice)} in all)"
    return TableSeen(
        rows=rows,
        latest=latest,
        latest_rows=latest_rows,
        pointed=t.version,
        versions=versions,
        manifest=manifests[latest],
    )


def _sentinel(f: Any, seen: TableSeen) -> None:
    """One more append lands on top of whatever the faulted call left, and
    brings exactly its own rows (it rolls the pointer forward past a version
    whose pointer PUT failed: those rows must be the call's, once)."""
    if seen.latest < 0:
        return
    t = Table.open(f.direct, KEY)
    sentinel = pa.Table.from_pylist([{"id": 10_000, "val": -1}], schema=t.schema)
    t.append(sentinel)
    now = observe_table(f)
    assert now.latest == seen.latest + 1
    assert now.pointed == now.latest
    assert seen.latest_rows is not None
    assert now.rows == seen.latest_rows + rows_of(sentinel), "the sentinel append brought other rows along"


def judge_table(f: Any, case: TableCase, out: Outcome, retry: bool = True) -> TableSeen:
    """The invariants after a faulted call (see the module docs)."""
    seen = observe_table(f)
    v = case.version
    what = f"after {out}: "
    if out.kind == "ok":
        assert seen.latest == v + 1, what + f"versions {seen.versions}, expected one new version {v + 1}"
        assert seen.pointed == seen.latest, (
            what + f"Table.open reads version {seen.pointed}, not the committed {seen.latest} (pointer not moved)"
        )
        assert seen.rows == case.after, what + "the rows are not exactly the call's result"
        if case.check is not None:
            case.check(seen.manifest)
    elif out.kind == "unknown":
        assert seen.latest in (v, v + 1), what + f"versions {seen.versions} (from {v})"
        expected = case.after if seen.latest == v + 1 else case.before
        assert seen.latest_rows == expected, what + f"version {seen.latest} holds other rows"
        assert seen.rows in (case.before, case.after), what + "Table.open reads rows neither before nor after"
    else:
        assert seen.latest == v, (
            what + f"the call failed but versions are {seen.versions} (was {v}): it committed all the same"
        )
        assert seen.rows == case.before, what + "the call failed but the rows changed"
        if retry:
            again = attempt(f, case.call)
            assert again.kind == "ok", f"{what}the same call, retried without faults: {again}"
            seen = observe_table(f)
            assert seen.latest == v + 1 and seen.pointed == v + 1, f"retried: versions {seen.versions}"
            assert seen.rows == case.after, "retried: the rows are not exactly the call's result"
            if case.check is not None:
                case.check(seen.manifest)
    _sentinel(f, seen)
    return seen


#: On GCS (issue H), whose create-only and compare-and-swap puts are generation
#: preconditions: the commit PUTs (manifest, pointer) of the operations that
#: write them differently, and an append's data upload.
GCS_TABLE_STEPS = [
    (op, step)
    for op, step in TABLE_STEPS
    if (op in ("create", "append", "delete_filter", "upsert") and step in ("manifest", "pointer"))
    or (op, step) == ("append", "data")
]
TABLE_CASES = [("s3", op, step) for op, step in TABLE_STEPS] + [("gcs", op, step) for op, step in GCS_TABLE_STEPS]
TABLE_CASE_IDS = [f"{kind}-{op}-{step}" for kind, op, step in TABLE_CASES]


def faulty_on(kind: str, request: pytest.FixtureRequest) -> Any:
    """``faulty`` (S3) or ``faulty_gcs``."""
    return request.getfixturevalue("faulty" if kind == "s3" else "faulty_gcs")


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize(("kind", "op", "step"), TABLE_CASES, ids=TABLE_CASE_IDS)
def test_a_table_commit_step_under_a_fault_keeps_every_row_once(
    request: pytest.FixtureRequest, kind: str, op: str, step: str, fault: str
) -> None:
    f = faulty_on(kind, request)
    case = TABLE_OPS[op](writer_store(f, fault))
    rules = inject(f, step, FAULTS[fault])
    out = note(attempt(f, case.call))
    confirm(f, rules, step)
    judge_table(f, case, out)


@pytest.mark.parametrize("fault", list(TRANSIENT))
@pytest.mark.parametrize(("kind", "op", "step"), TABLE_CASES, ids=TABLE_CASE_IDS)
def test_one_transient_fault_on_a_table_commit_step_is_retried(
    request: pytest.FixtureRequest, kind: str, op: str, step: str, fault: str
) -> None:
    f = faulty_on(kind, request)
    case = TABLE_OPS[op](f.store)
    rules = inject(f, step, TRANSIENT[fault])
    out = note(attempt(f, case.call))
    confirm(f, rules, step)
    assert out.kind == "ok", f"one {fault} on the {step} request: {out}"
    faulted = [e for e in f.proxy.log if e.rule is not None]
    assert len(faulted) == 1
    again = [e for e in f.proxy.log if e.path == faulted[0].path and e.method == faulted[0].method]
    assert again[-1].action == "forward", "object_store sent the request again"
    judge_table(f, case, out)


@pytest.mark.parametrize("fault", list(TRANSIENT))
def test_one_transient_fault_on_a_vacuum_delete_is_retried(faulty: Any, fault: str) -> None:
    t = _vacuum_table(faulty.store)
    rows = rows_of(t.to_arrow())
    rules = inject(faulty, "delete", TRANSIENT[fault])
    out = note(attempt(faulty, lambda: _vacuum(t)))
    confirm(faulty, rules, "delete")
    assert out.kind == "ok" and out.value, f"one {fault} on vacuum's delete: {out}"
    assert _vacuum_dry(Table.open(faulty.direct, KEY)) == [], "vacuum removed everything it meant to"
    seen = observe_table(faulty)
    assert seen.rows == rows


# -- vacuum ------------------------------------------------------------------------


def _vacuum_table(store: Store) -> Table:
    t = _base_table(store)
    t.append(make_rows(range(100, 200)))
    t.delete([("id", "<", 80)])
    t.compact()  # the first file's replacement; its old file and the tombstone become garbage
    return t


@pytest.mark.parametrize("fault", list(FAULTS))
def test_table_vacuum_under_a_fault_never_breaks_the_table(faulty: Any, fault: str) -> None:
    t = _vacuum_table(faulty.store)
    rows = rows_of(t.to_arrow())
    assert _vacuum_dry(t), "the setup leaves garbage to remove"
    rules = inject(faulty, "delete", FAULTS[fault])
    out = note(attempt(faulty, lambda: _vacuum(t)))
    confirm(faulty, rules, "delete")
    if out.kind == "ok":
        assert out.value, "vacuum removed something"
    seen = observe_table(faulty)
    assert seen.rows == rows and seen.pointed == seen.latest == t.version, f"after {out}"
    # However far it got, vacuum can run again and finish.
    done = attempt(faulty, lambda: _vacuum(Table.open(faulty.store, KEY)))
    assert done.kind == "ok", f"vacuum again after {out}: {done}"
    assert _vacuum_dry(Table.open(faulty.direct, KEY)) == []
    seen = observe_table(faulty)
    assert seen.rows == rows
    _sentinel(faulty, seen)


# -- pipelines ---------------------------------------------------------------------


def _d(k: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[tuple[int, int], dict[str, Any]]]:
    for r in values:
        for j in range(k % 3):
            yield (k, j), {"v": r["v"] + j}
        if k % 7 == 0:
            yield (k + 10_000, -1), {"v": r["v"]}


def _d_model(src: dict[int, int]) -> Rows:
    d = [{"k": k, "j": j, "v": v + j} for k, v in src.items() for j in range(k % 3)]
    d += [{"k": k + 10_000, "j": -1, "v": v} for k, v in src.items() if k % 7 == 0]
    return sorted(d, key=lambda r: (r["k"], r["j"], r["v"]))


def declare(p: Pipeline) -> None:
    """s (k -> v) -> g (k % 5 -> k, v) -> tot (g -> count, sum), the last
    batched; and s -> d ((k, j) -> v), whose key begins with its source's:
    its key-mappings are derived from its content (only those of the rows
    keyed ``k + 10000`` are stored)."""
    s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

    p.stage("d", sources=[s], key={"k": pa.int64(), "j": pa.int64()}, value={"v": pa.int64()})(_d)

    @p.stage("g", sources=[s], key={"g": pa.int64()}, value={"k": pa.int64(), "v": pa.int64()})
    def g(k: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        for r in values:
            yield k % 5, {"k": k, "v": r["v"]}

    @p.stage("tot", sources=[g], key={"g": pa.int64()}, value={"n": pa.int64(), "total": pa.int64()}, batched=True)
    def tot(groups: pa.Table) -> pa.Table:
        agg = groups.group_by("g").aggregate([("k", "count"), ("v", "sum")])
        return pa.table({"g": agg["g"], "n": agg["k_count"], "total": agg["v_sum"]})


def model(src: dict[int, int]) -> dict[str, Rows]:
    """The pipeline's content, from scratch, in plain Python."""
    tot: dict[int, list[int]] = {}
    for k, v in src.items():
        tot.setdefault(k % 5, []).append(v)
    return {
        "s": [{"k": k, "v": v} for k, v in sorted(src.items())],
        "d": _d_model(src),
        "g": sorted(({"g": k % 5, "k": k, "v": v} for k, v in src.items()), key=lambda r: (r["g"], r["k"])),
        "tot": [{"g": g, "n": len(vs), "total": sum(vs)} for g, vs in sorted(tot.items())],
    }


def _sorted(rows: Rows) -> Rows:
    return sorted(rows, key=lambda r: tuple(r.values()))


def src_table(src: dict[int, int]) -> pa.Table:
    return pa.table({"k": pa.array(list(src), pa.int64()), "v": pa.array(list(src.values()), pa.int64())})


@dataclass
class PipeSeen:
    content: dict[str, Rows] | None
    latest: int
    latest_content: dict[str, Rows] | None
    pointed: int
    versions: list[int] = field(default_factory=list)


def _read_all(p: Pipeline, version: int | None = None) -> dict[str, Rows]:
    return {n: _sorted(p.read(n, version=version).to_pylist()) for n in ("s", "d", "g", "tot")}


def observe_pipeline(f: Any, key: str = KEY) -> PipeSeen:
    store = f.direct
    versions, present = _manifests(store, key)
    assert versions, "the pipeline has no manifest"
    for v in versions:
        m = json.loads(store.read_bytes(f"{key}/manifest/v{v:08d}.json"))
        assert m["version"] == v
        if v > versions[0]:
            assert m.get("previous") == v - 1
        named = [p["name"] for p in pipeline_files(m)]
        missing = [n for n in named if n not in present]
        assert not missing, f"version {v} ({m['operation']}) names parts that do not exist: {missing}"
        if v == versions[-1]:  # the pipeline's own check: each part's SHA-256
            for part in pipeline_files(m):
                got = hashlib.sha256(store.read_bytes(f"{key}/{part['name']}")).hexdigest()
                assert got == part["sha256"], f"version {v}: part {part['name']} differs from its SHA-256"
    p = Pipeline.open(store, key)
    for v in versions[1:]:
        _read_all(p, v)  # every version reads
    latest = versions[-1]
    return PipeSeen(
        content=_read_all(p) if p.version > 0 else None,
        latest=latest,
        latest_content=_read_all(p, latest) if latest > 0 else None,
        pointed=p.version,
        versions=versions,
    )


@dataclass
class PipeCase:
    p: Pipeline
    call: Callable[[], Any]
    before: dict[str, Rows]
    after: dict[str, Rows]
    before_src: dict[int, int]
    after_src: dict[int, int]
    version: int


def _pipeline_case(store: Store, **options: Any) -> PipeCase:
    p = Pipeline.create(store, KEY, **options)
    declare(p)
    src0 = {k: k * 3 for k in range(50)}
    p.update({"s": src_table(src0)})
    ups = {k: k * 3 + 1000 for k in range(40, 60)}
    dels = [0, 1, 2]
    src1 = {k: v for k, v in {**src0, **ups}.items() if k not in dels}
    changes = Changes(upserts=src_table(ups), deletes=pa.table({"k": pa.array(dels, pa.int64())}))
    return PipeCase(
        p=p,
        call=lambda: p.update({"s": changes}),
        before=model(src0),
        after=model(src1),
        before_src=src0,
        after_src=src1,
        version=p.version,
    )


def judge_pipeline(f: Any, case: PipeCase, out: Outcome) -> None:
    seen = observe_pipeline(f)
    v = case.version
    what = f"after {out}: "
    src = case.after_src
    if out.kind == "ok":
        assert seen.latest == v + 1, what + f"versions {seen.versions}, expected {v + 1}"
        assert seen.pointed == seen.latest, what + f"Pipeline.open reads version {seen.pointed}, not {seen.latest}"
        assert seen.content == case.after, what + "the content is not the from-scratch result"
    elif out.kind == "unknown":
        assert seen.latest in (v, v + 1), what + f"versions {seen.versions}"
        expected = case.after if seen.latest == v + 1 else case.before
        assert seen.latest_content == expected, what + f"version {seen.latest} holds another content"
        assert seen.content in (case.before, case.after)
        if seen.latest == v:
            src = case.before_src
    else:
        assert seen.latest == v, what + f"the update failed but versions are {seen.versions}: it committed"
        assert seen.content == case.before, what + "the update failed but the content changed"
        again = attempt(f, case.call)
        assert again.kind == "ok", f"{what}the same update, retried without faults: {again}"
        seen = observe_pipeline(f)
        assert seen.latest == seen.pointed == v + 1
        assert seen.content == case.after
    # One more update on top, from a fresh writer straight to the store.
    q = Pipeline.open(f.direct, KEY)
    declare(q)
    q.update({"s": src_table({1000: 1})})
    now = observe_pipeline(f)
    assert now.latest == now.pointed == seen.latest + 1
    assert now.content == model({**src, 1000: 1}), "the next update does not build on the committed content"


PIPE_STEPS = ["parts", "manifest", "pointer"]


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("step", PIPE_STEPS)
@pytest.mark.parametrize("kind", REMOTE)
def test_a_pipeline_update_step_under_a_fault_matches_a_rebuild(
    request: pytest.FixtureRequest, kind: str, step: str, fault: str
) -> None:
    f = faulty_on(kind, request)
    case = _pipeline_case(writer_store(f, fault))
    rules = inject(f, step, FAULTS[fault])
    out = note(attempt(f, case.call))
    confirm(f, rules, step)
    judge_pipeline(f, case, out)


@pytest.mark.parametrize("fault", list(TRANSIENT))
@pytest.mark.parametrize("step", PIPE_STEPS)
@pytest.mark.parametrize("kind", REMOTE)
def test_one_transient_fault_on_a_pipeline_update_step_is_retried(
    request: pytest.FixtureRequest, kind: str, step: str, fault: str
) -> None:
    f = faulty_on(kind, request)
    case = _pipeline_case(f.store)
    rules = inject(f, step, TRANSIENT[fault])
    out = note(attempt(f, case.call))
    confirm(f, rules, step)
    assert out.kind == "ok", f"one {fault} on the {step} request: {out}"
    judge_pipeline(f, case, out)


def _spanning(f: Any) -> int:
    """How many of stage g's content parts share a key with the next one
    (a key spanning parts), in the latest manifest."""
    versions, _ = _manifests(f.direct, KEY)
    m = json.loads(f.direct.read_bytes(f"{KEY}/manifest/v{versions[-1]:08d}.json"))
    parts = m["nodes"]["g"]["content"]
    return sum(a["last_key"] == b["first_key"] for a, b in itertools.pairwise(parts))


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("step", PIPE_STEPS)
def test_an_update_of_keys_spanning_parts_under_a_fault_matches_a_rebuild(faulty: Any, step: str, fault: str) -> None:
    """With two rows a part, each of stage g's keys (ten rows) spans three
    parts, and the update rewrites the touched ones as a stream (old rows
    scanned, merged with the new ones, the selection read back): under
    each fault, the same outcomes as any update."""
    case = _pipeline_case(writer_store(faulty, fault), target_rows=2)
    assert _spanning(faulty) >= 10, "the setup's keys span parts"
    rules = inject(faulty, step, FAULTS[fault])
    out = note(attempt(faulty, case.call))
    confirm(faulty, rules, step)
    judge_pipeline(faulty, case, out)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_pipeline_vacuum_under_a_fault_never_breaks_the_pipeline(faulty: Any, fault: str) -> None:
    case = _pipeline_case(faulty.store)
    case.call()
    assert _vacuum_dry(case.p), "the setup leaves garbage to remove"
    rules = inject(faulty, "delete", FAULTS[fault])
    out = note(attempt(faulty, lambda: _vacuum(case.p)))
    confirm(faulty, rules, "delete")
    seen = observe_pipeline(faulty)
    assert seen.content == case.after and seen.pointed == seen.latest == case.version + 1, f"after {out}"
    done = attempt(faulty, lambda: _vacuum(Pipeline.open(faulty.store, KEY)))
    assert done.kind == "ok", f"vacuum again after {out}: {done}"
    assert _vacuum_dry(Pipeline.open(faulty.direct, KEY)) == []
    assert observe_pipeline(faulty).content == case.after


# -- a race and a lost reply -------------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_lost_manifest_reply_while_another_writer_commits_keeps_every_row_once(faulty: Any, when: str) -> None:
    """Writer A's manifest PUT: the other writer B commits just before it
    reaches the store (A lost the race; its PUT gets 412) or just after it was
    applied (A won); either way A's reply is lost. Both appends land once, in
    contiguous versions."""
    a = _base_table(faulty.store)
    b = Table.open(faulty.open(), KEY)
    rows_a = make_rows(range(100, 130))
    rows_b = make_rows(range(200, 230))
    b_out: list[Outcome] = []

    def other_writer(_: Any) -> None:
        b_out.append(attempt(faulty, lambda: b.append(rows_b)))

    base = re.escape(f"/{_bucket(faulty)}/{_prefix(faulty)}/{KEY}")
    hook = {"before": other_writer} if when == "before" else {"after": other_writer}
    rule = faulty.proxy.drop_reply("PUT", base + REQUESTS["manifest"][1], **hook)
    out = note(attempt(faulty, lambda: a.append(rows_a)))
    confirm(faulty, [rule], "manifest")
    assert [o.kind for o in b_out] == ["ok"], f"the other writer: {b_out}"
    seen = observe_table(faulty)
    assert seen.versions == [0, 1, 2] or (out.kind != "ok" and seen.versions == [0, 1]), f"{out}: {seen.versions}"
    ids = [r["id"] for r in seen.latest_rows or []]
    assert len(ids) == len(set(ids)), f"after {out}: rows committed twice"
    expected_a = rows_of(rows_a) if out.kind == "ok" or seen.latest == 2 else []
    assert seen.latest_rows == sorted(
        rows_of(make_rows(range(100))) + expected_a + rows_of(rows_b), key=lambda r: r["id"]
    ), f"after {out}"
    if out.kind == "ok":
        assert seen.pointed == seen.latest
        assert seen.rows == seen.latest_rows
    else:
        assert out.kind == "unknown" or seen.latest == 1, f"A failed ({out}) yet its rows were committed"
    _sentinel(faulty, seen)


def test_a_lost_pipeline_manifest_reply_while_another_update_commits(faulty: Any) -> None:
    """Pipeline A's manifest PUT is applied and its reply lost while update B
    runs: B reads A's version (readers look past a lagging pointer), builds
    on it and commits the next one; A learns that its own version landed.
    Both updates count once, in the order they committed."""
    case = _pipeline_case(faulty.store)
    other = Pipeline.open(faulty.open(), KEY)
    declare(other)
    b_out: list[Outcome] = []

    def other_update(_: Any) -> None:
        b_out.append(attempt(faulty, lambda: other.update({"s": src_table({500: 5})})))

    base = re.escape(f"/{_bucket(faulty)}/{_prefix(faulty)}/{KEY}")
    rule = faulty.proxy.drop_reply("PUT", base + REQUESTS["manifest"][1], after=other_update)
    out = note(attempt(faulty, case.call))
    confirm(faulty, [rule], "manifest")
    assert len(b_out) == 1
    assert b_out[0].kind == "ok", f"B, built on A's landed version: {b_out[0]}"
    assert out.kind in ("ok", "unknown"), f"A's version landed, yet A reports {out}"
    seen = observe_pipeline(faulty)
    assert seen.versions == [0, 1, 2, 3]
    assert seen.latest_content == model({**case.after_src, 500: 5}), "B's version is not A's plus B's change"
    assert seen.content == seen.latest_content


# -- Pipeline.compact: its commit under faults and races ------------------------------


def _compact_case(store: Store) -> PipeCase:
    """A pipeline whose parts carry patches; the call compacts it (no row changes)."""
    p = Pipeline.create(store, KEY, target_rows=16)
    declare(p)
    src = {k: k * 3 for k in range(100)}
    p.update({"s": src_table(src)})
    src[7] = 1
    p.update({"s": src_table({7: 1})})
    assert any(part.get("patches") for s in p._at(None)["nodes"].values() for part in s.get("content", []))
    return PipeCase(
        p=p,
        call=p.compact,
        before=model(src),
        after=model(src),
        before_src=dict(src),
        after_src=dict(src),
        version=p.version,
    )


def _unnamed(f: Any) -> list[str]:
    """Objects under the pipeline that no manifest names (garbage)."""
    versions, present = _manifests(f.direct, KEY)
    named = {
        p["name"]
        for v in versions
        for p in pipeline_files(json.loads(f.direct.read_bytes(f"{KEY}/manifest/v{v:08d}.json")))
    }
    return sorted(n for n in present if n.startswith("nodes/") and n not in named)


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("step", PIPE_STEPS)
def test_a_pipeline_compaction_step_under_a_fault_keeps_every_row(faulty: Any, step: str, fault: str) -> None:
    case = _compact_case(writer_store(faulty, fault))
    rules = inject(faulty, step, FAULTS[fault])
    out = note(attempt(faulty, case.call))
    confirm(faulty, rules, step)
    judge_pipeline(faulty, case, out)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_compaction_racing_an_update_commits_each_once_and_keeps_every_row(faulty: Any, when: str) -> None:
    """Another update B commits just before the compaction's manifest PUT
    reaches the store (the compaction loses: CommitConflict, nothing of it
    kept) or just after it was applied with its reply lost (B builds on the
    compacted version). Every row counts once either way."""
    case = _compact_case(faulty.store)
    other = Pipeline.open(faulty.open(), KEY)
    declare(other)
    b_out: list[Outcome] = []

    def other_update(_: Any) -> None:
        b_out.append(attempt(faulty, lambda: other.update({"s": src_table({500: 5})})))

    base = re.escape(f"/{_bucket(faulty)}/{_prefix(faulty)}/{KEY}")
    hook = {"before": other_update} if when == "before" else {"after": other_update}
    rule = faulty.proxy.drop_reply("PUT", base + REQUESTS["manifest"][1], times=1, **hook)
    out = note(attempt(faulty, case.call))
    confirm(faulty, [rule], "manifest")
    assert [o.kind for o in b_out] == ["ok"], f"the other update: {b_out}"
    seen = observe_pipeline(faulty)
    want = model({**case.after_src, 500: 5})
    assert seen.latest_content == want and seen.content == want, f"after {out}"
    if when == "before":
        assert out.kind == "error" and isinstance(out.error, pds.CommitConflict), f"the compaction: {out}"
        assert seen.versions == list(range(case.version + 2)), "the compaction committed nothing"
        assert _unnamed(faulty) == [], "the compaction's parts were left behind"
    else:
        assert out.kind in ("ok", "unknown"), f"the compaction's version landed, yet it reports {out}"
        assert seen.versions == list(range(case.version + 3))
        ops = [h["operation"] for h in Pipeline.open(faulty.direct, KEY).history(limit=2)]
        assert ops == ["update", "compact"]


@pytest.mark.parametrize("fault", list(FAULTS))
def test_worker_processes_under_a_fault_keep_every_row_and_leave_nothing(
    faulty: Any, fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stage ``g`` runs in worker processes (``workers=2``, the pool forced
    for this small change), which write its parts. A PUT of those parts is
    failed for good, reset once or applied with its reply lost: the update
    commits once with the from-scratch result, or fails with a store error,
    commits nothing, and leaves none of the workers' objects; the same
    update then succeeds."""
    from pds.producers import _workers

    monkeypatch.setattr(_workers, "pays", lambda task: True)
    case = _pipeline_case(writer_store(faulty, fault), workers=2, target_rows=8)
    rules = inject(faulty, "g_parts", FAULTS[fault])
    out = note(attempt(faulty, case.call))
    confirm(faulty, rules, "g_parts")
    if fault == "fail":
        assert out.kind == "error", f"every PUT of g's parts failed, yet the update reports {out}"
        assert _unnamed(faulty) == [], "the workers' objects were left behind"
    judge_pipeline(faulty, case, out)
    assert case.p._worker_stats.get("g", {}).get("map_ranges", 0) > 1, "g ran in the worker pool"
    assert _unnamed(faulty) == [], "objects no version names were left behind"


# -- seeking reads (ranged GETs of the page index and pages) under faults -----------

SEEK_KEYS = 200_000  # d then holds ~228,600 rows in one part: large enough for a one-key change to seek


def _declare_seek(p: Pipeline) -> None:
    """s (k -> v) -> d ((k, j) -> v), as in ``declare``."""
    s = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    p.stage("d", sources=[s], key={"k": pa.int64(), "j": pa.int64()}, value={"v": pa.int64()})(_d)


def _node_gets(f: Any, node: str) -> list[Any]:
    return [e for e in f.proxy.log if e.method == "GET" and f"/{KEY}/nodes/{node}/content/" in e.path]


@pytest.mark.parametrize("fault", ["fail", "reset", "drop_reply"])
def test_an_update_reading_pages_under_a_fault_commits_the_right_rows_or_nothing(faulty: Any, fault: str) -> None:
    """A one-key change to stages holding 200,000-228,600 rows in one part
    each: the update reads only the pages holding the key (ranged GETs of the
    footer, page index and pages) and patches the parts. A GET of those parts
    fails for good (the update fails and commits nothing; the same update
    then succeeds), or is reset once or loses its reply once (retried). The
    result is the from-scratch one either way."""
    src = {k: k * 3 for k in range(SEEK_KEYS)}
    p = Pipeline.create(writer_store(faulty, fault), KEY, target_rows=500_000)
    _declare_seek(p)
    p.update({"s": src_table(src)})
    assert _seek_rows(p) == _seek_model(src)
    # The change: key 35,000 (two rows in d) gets a new value.
    faulty.proxy.clear()
    action, how, times = FAULTS[fault]
    base = re.escape(f"/{_bucket(faulty)}/{_prefix(faulty)}/{KEY}")
    path = base + r"/nodes/[^/]+/.+\.parquet$"
    rule = (
        faulty.proxy.fail("GET", path, status=how, times=times)
        if action == "fail"
        else faulty.proxy.drop_reply("GET", path, how=str(how), times=times)
    )
    change = {35_000: 7}
    version = p.version
    out = note(attempt(faulty, lambda: p.update({"s": src_table(change)})))
    confirm(faulty, [rule], "node part GET")
    after = {**src, **change}
    q = Pipeline.open(faulty.direct, KEY)
    _declare_seek(q)
    if fault == "fail":
        assert out.kind == "error", f"every GET of the parts failed, yet the update reports {out}"
        assert q.version == version and _seek_rows(q) == _seek_model(src), "a failed update changed the content"
        assert _unnamed(faulty) == [], "the failed update left objects behind"
        faulty.proxy.clear()
        out = attempt(faulty, lambda: p.update({"s": src_table(change)}))
    assert out.kind == "ok", f"after {fault}: {out}"
    q = Pipeline.open(faulty.direct, KEY)
    _declare_seek(q)
    assert q.version == version + 1
    assert _seek_rows(q) == _seek_model(after)
    # It sought: d's part was read in ranges (footer, page index, pages; on
    # S3, object_store merges ranges less than 1 MiB apart into one request,
    # so the bytes fetched from a part this small are most of it), never by
    # a whole-object GET, and took a patch.
    gets = _node_gets(faulty, "d")
    assert len(gets) >= 2 and all(e.byte_range for e in gets), [f"{e} {e.byte_range}" for e in gets]
    assert any(part.get("patches") for part in q._at(None)["nodes"]["d"]["content"]), "d's part took a patch"


def _seek_model(src: dict[int, int]) -> list[tuple[int, int, int]]:
    return [(r["k"], r["j"], r["v"]) for r in _d_model(src)]


def _seek_rows(p: Pipeline) -> list[tuple[int, int, int]]:
    t = p.read("d")
    return sorted(zip(t["k"].to_pylist(), t["j"].to_pylist(), t["v"].to_pylist(), strict=True))
