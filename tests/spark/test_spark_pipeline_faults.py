"""Store faults inside the Spark tasks of a pipeline update (issue F under
issue #15's fault model): ``pds.spark.update_pipeline`` on local Spark,
the pipeline on SeaweedFS through the fault proxy (tests/fault_proxy.py,
fixture ``faulty``). The executors open the store with the same options,
so their requests pass through the proxy like the driver's.

The pipeline: events (id -> user, n) -> by_user (row form, key user) ->
totals (batched, key name). Version 1 is built; the update under test
upserts and deletes events across several key ranges, so that several map
tasks write ``by_user``'s key-mapping parts and several reduce tasks its
content parts. Objects a task writes are named after the update's Spark job
(``sp`` + 12 hex digits), which is how the log shows a fault hit a task.

- One failed (503) or applied-but-unanswered PUT of a task's mapping or
  content part, absorbed by object_store's retry, or repeated until the task
  fails and Spark runs it again (a new attempt writes other names; what the
  failed one wrote is removed).
- Every PUT of the stage's mapping (content) parts failing, so that the map
  (reduce) tasks fail on every attempt: the update raises, commits nothing,
  leaves nothing; with the faults cleared, the same update succeeds. It
  should raise what the local path raises (``remote_store.BackendUnavailable``)
  but raises pyspark's ``PythonException``: an expected failure until fixed.
- The commit's manifest PUT applied and its reply lost, once or every time:
  the same outcome as the local path's under the same fault.
- A pipeline's first build on Spark (Spark range-partitions the source's
  rows; its tasks write the source's parts; a stage's map output is kept
  while its target ranges are planned): a source or stage part's PUT whose
  reply is lost, failing until the task is run again, or failing on every
  attempt.

After each: every node equals a local twin's and a plain-Python recompute
(no row lost or duplicated), the objects the update added are exactly ones
its committed version references, and a local update lands on top.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
import remote_store
from pyspark.sql import DataFrame, SparkSession

import pds
import pds.spark

from fault_proxy import Rule
from helpers import files, pipeline_files, recorded_sources

pytestmark = [pytest.mark.spec("F"), pytest.mark.s3]

KEY = "pipe"
STAGE = "by_user"
NODES = ("events", "by_user", "fan", "totals")
EVENTS = pa.schema([("id", pa.int64()), ("user", pa.string()), ("n", pa.int64())])
KEYS = pa.schema([("id", pa.int64())])
ZERO = datetime.timedelta(0)
#: A part a Spark task of the update wrote: named after the job (``sp`` + 12 hex digits).
TASK_PART = r"/nodes/{stage}/{folder}/sp[0-9a-f]{{12}}[^/]*\.parquet$"

Events = dict[int, tuple[str, int]]  # id -> (user, n)
Rows = list[tuple[tuple[str, Any], ...]]


# -- the pipeline and its oracle ----------------------------------------------------


def declare(store: remote_store.Store, key: str) -> pds.Pipeline:
    """Create (or open) the pipeline under *key* and declare its nodes. The
    functions are nested so that PySpark sends them to the workers by value."""
    p = pds.Pipeline.create(store, key, target_rows=20, exist_ok=True)
    events = p.source("events", key={"id": pa.int64()}, value={"user": pa.string(), "n": pa.int64()})

    @p.stage(STAGE, sources=[events], key={"user": pa.string()}, value={"n": pa.int64(), "src": pa.int64()})
    def by_user(k: int, rows: Iterator[dict[str, Any]]) -> Iterator[tuple[str, dict[str, int]]]:
        for r in rows:
            yield r["user"], {"n": r["n"], "src": k}

    # Keyed (id, j): its key begins with the source's, so its key-mappings
    # are derived from its content (map tasks look them up with a seek);
    # those of the rows keyed id + 1000 are stored.
    @p.stage("fan", sources=[events], key={"id": pa.int64(), "j": pa.int64()}, value={"user": pa.string()})
    def fan(k: int, rows: Iterator[dict[str, Any]]) -> Iterator[tuple[tuple[int, int], dict[str, str]]]:
        for r in rows:
            for j in range(k % 3):
                yield (k, j), {"user": r["user"]}
            if k % 7 == 0:
                yield (k + 1000, -1), {"user": r["user"]}

    @p.stage(
        "totals",
        sources=[by_user],
        key={"name": pa.string()},
        value={"total": pa.int64(), "cnt": pa.int64()},
        batched=True,
    )
    def totals(groups: pa.Table) -> pa.Table:
        agg = groups.group_by("user").aggregate([("n", "sum"), ("n", "count")])
        return pa.table({"name": agg["user"], "total": agg["n_sum"], "cnt": agg["n_count"], "user": agg["user"]})

    return p


def canon(rows: list[dict[str, Any]]) -> Rows:
    """Rows as a sorted list (duplicates kept), each row's columns sorted by name."""
    return sorted(tuple(sorted(r.items())) for r in rows)


def recompute(events: Events) -> dict[str, Rows]:
    """Every node from the source's contents, in plain Python."""
    sums: dict[str, list[int]] = defaultdict(list)
    for user, n in events.values():
        sums[user].append(n)
    return {
        "events": canon([{"id": k, "user": u, "n": n} for k, (u, n) in events.items()]),
        "by_user": canon([{"user": u, "n": n, "src": k} for k, (u, n) in events.items()]),
        "fan": canon(
            [{"id": k, "j": j, "user": u} for k, (u, _) in events.items() for j in range(k % 3)]
            + [{"id": k + 1000, "j": -1, "user": u} for k, (u, _) in events.items() if k % 7 == 0]
        ),
        "totals": canon([{"name": u, "total": sum(ns), "cnt": len(ns)} for u, ns in sums.items()]),
    }


def content(p: pds.Pipeline, version: int | None = None) -> dict[str, Rows]:
    return {n: canon(p.read(n, version=version).to_pylist()) for n in NODES}


def events_table(events: Events) -> pa.Table:
    ids = sorted(events)
    return pa.table({"id": ids, "user": [events[i][0] for i in ids], "n": [events[i][1] for i in ids]}, schema=EVENTS)


@dataclass
class Case:
    """A built pipeline (version 1, through the proxy), its local twin
    (straight to the store) and the update under test."""

    p: pds.Pipeline
    twin: pds.Pipeline
    before: Events
    after: Events
    upserts: pa.Table
    deletes: pa.Table
    #: Every object under the pipeline's key at version 1.
    objects: set[str]

    def changes(self, spark: SparkSession) -> dict[str, pds.Changes]:
        """The update as Spark DataFrames."""
        ups: DataFrame = spark.createDataFrame(self.upserts)
        dels: DataFrame = spark.createDataFrame(self.deletes)
        return {"events": pds.Changes(upserts=ups, deletes=dels)}

    def local_changes(self) -> dict[str, pds.Changes]:
        return {"events": pds.Changes(upserts=self.upserts, deletes=self.deletes)}


def build(f: Any, store: remote_store.Store | None = None) -> Case:
    """Version 1 of 150 events over 23 users (several key ranges per node),
    and an update that changes users in most of them and deletes two keys.
    The pipeline is on *store* (default: the proxy's, ``f.store``)."""
    before: Events = {i: (f"u{i % 23:02d}", i * 3 - 50) for i in range(150)}
    p = declare(store or f.store, KEY)
    twin = declare(f.direct, "twin")
    assert p.update({"events": events_table(before)}) == 1
    assert twin.update({"events": events_table(before)}) == 1
    ups: Events = {i: (f"u{(i * 5) % 23:02d}", -i) for i in (3, 31, 64, 97, 128, 149, 300)}
    ups[77] = ("new", 7)
    dels = [10, 111]
    after = {k: v for k, v in {**before, **ups}.items() if k not in dels}
    return Case(
        p=p,
        twin=twin,
        before=before,
        after=after,
        upserts=events_table(ups),
        deletes=pa.table({"id": dels}, schema=KEYS),
        objects=set(files(f.direct, KEY)),
    )


# -- what is stored ------------------------------------------------------------------


def referenced(f: Any, version: int) -> dict[str, str | None]:
    """The objects version *version* names, as store keys, with their SHA-256 where recorded."""
    m = json.loads(f.direct.read_bytes(f"{KEY}/manifest/v{version:08d}.json"))
    return {f"{KEY}/{part['name']}": part.get("sha256") for part in pipeline_files(m)}


def versions(f: Any) -> list[int]:
    return sorted(
        int(m.group(1)) for k in files(f.direct, KEY) if (m := re.fullmatch(rf"{KEY}/manifest/v(\d{{8}})\.json", k))
    )


def check_committed(f: Any, case: Case, what: str) -> None:
    """Version 2 committed once, Pipeline.open reads it, every node equals
    the twin's (given the same update) and the recompute, and the objects the
    update added are exactly what version 2 references beyond version 1."""
    assert versions(f) == [0, 1, 2], f"{what}: versions {versions(f)}"
    fresh = pds.Pipeline.open(f.direct, KEY)
    assert fresh.version == 2, f"{what}: Pipeline.open reads version {fresh.version}"
    assert case.twin.update(case.local_changes()) == 2
    want = recompute(case.after)
    got = content(fresh)
    for node in NODES:
        assert got[node] == want[node], f"{what}: node {node!r} differs from the recompute (rows lost or duplicated)"
        assert got[node] == content(case.twin)[node], f"{what}: node {node!r} differs from the local twin"
    check_objects(f, 2, case.objects, what)
    assert fresh.vacuum(ZERO, True, keep_versions=True, min_age=ZERO) == []
    on_top(f, case.after, 3)


def check_objects(f: Any, version: int, before: set[str], what: str) -> None:
    """Every object *version* names exists with its SHA-256, and the
    objects added since *before* are exactly ones it names (and its manifest)."""
    now = set(files(f.direct, KEY))
    named = referenced(f, version)
    assert set(named) <= now, f"{what}: version {version} names missing objects {sorted(set(named) - now)}"
    for k, sha in named.items():
        if sha is not None:
            assert hashlib.sha256(f.direct.read_bytes(k)).hexdigest() == sha, f"{what}: {k} differs from its SHA-256"
    left = now - before - set(named) - {f"{KEY}/manifest/v{version:08d}.json"}
    assert not left, f"{what}: objects no version references were left behind: {sorted(left)}"


def check_unchanged(f: Any, case: Case, what: str) -> None:
    """Nothing committed, version 1 reads as before, not one object added or removed."""
    assert versions(f) == [0, 1], f"{what}: versions {versions(f)}"
    assert case.p.refresh() == 1, f"{what}: a version was committed"
    assert content(pds.Pipeline.open(f.direct, KEY)) == recompute(case.before), f"{what}: version 1 changed"
    now = set(files(f.direct, KEY))
    assert now == case.objects, (
        f"{what}: objects added {sorted(now - case.objects)}, removed {sorted(case.objects - now)}"
    )


def on_top(f: Any, events: Events, version: int) -> None:
    """A local update from a fresh writer (straight) builds on what was committed."""
    q = declare(f.direct, KEY)
    assert q.update({"events": events_table({1000: ("top", 1)})}) == version
    assert content(q) == recompute({**events, 1000: ("top", 1)}), "the next update does not build on the commit"


# -- faults --------------------------------------------------------------------------


def base(f: Any, key: str = KEY) -> str:
    """The request path of a pipeline's key (``/bucket/prefix/key``), as a regex."""
    bucket, prefix = str(f.url).removeprefix("s3://").split("/", 1)
    return re.escape(f"/{bucket}/{prefix}/{key}")


@dataclass
class Latched(Rule):
    """A rule for the first request that matches it, then for that same
    path only (the retries of that request, object_store's and pds's),
    ``times`` in all (``None``: every one)."""

    latched: str | None = None

    def matches(self, method: str, path: str, query: str) -> bool:
        if self.latched is not None and path != self.latched:
            return False
        if not super().matches(method, path, query):
            return False
        self.latched = path
        return True


def log_text(f: Any) -> str:
    return "\n".join(str(e) for e in f.proxy.log if e.method != "GET" or e.rule is not None)


def run(f: Any, call: Callable[[], Any]) -> tuple[str, Any]:
    """*call*'s outcome: ("ok", value), ("unknown", CommitUnknown) or ("error", exc)."""
    try:
        return "ok", call()
    except pds.CommitUnknown as e:
        return "unknown", e
    except Exception as e:  # noqa: BLE001 - the test looks at it
        return "error", e


# -- 1, 2. one fault on a task's part PUT -------------------------------------------

#: fault -> (action, how the request is answered, requests faulted (``None``:
#: every try of that PUT, so the task fails), what the retry of the PUT gets).
ONE_FAULT: dict[str, tuple[str, str | int, int | None, int | None]] = {
    # One retry absorbs it: the same name is written again, once.
    "503": ("fail", 503, 1, 200),
    # Parts are written create-only: the retry meets the first PUT's object
    # (412), which the task reads back and recognises as its own.
    "lost_reply": ("drop_reply", "close", 1, 412),
    # Every try of that PUT (object_store's retries, pds's): the task fails
    # and Spark runs it again, which writes the range under another name.
    "503_task": ("fail", 503, None, None),
    "lost_reply_task": ("drop_reply", "close", None, None),
}


@pytest.mark.parametrize("fault", list(ONE_FAULT))
@pytest.mark.parametrize(
    ("stage", "folder"),
    # Written by map tasks / by reduce tasks; totals' by the reduce tasks of
    # the last stage of the chain (by_user, fan, totals) run as one job.
    [(STAGE, "mappings"), (STAGE, "content"), ("totals", "content")],
)
def test_a_faulted_part_put_in_a_task_is_retried_without_duplicates_or_garbage(
    spark_session: SparkSession, faulty: Any, stage: str, folder: str, fault: str
) -> None:
    action, how, times, retried = ONE_FAULT[fault]
    case = build(faulty)
    path = base(faulty) + TASK_PART.format(stage=stage, folder=folder)
    if action == "fail":
        rule = Latched("PUT", path, "fail", status=how, times=times)
    else:
        rule = Latched("PUT", path, "drop_reply", how=str(how), times=times)
    faulty.proxy.add_rule(rule)
    got = pds.spark.update_pipeline(spark_session, case.p, case.changes(spark_session))
    faulty.proxy.clear_rules()
    what = f"{fault} on a {stage} {folder} PUT"
    assert got == 2, f"{what}: committed version {got}"

    # The fault hit a task's request (the proxy log), and only that one path.
    assert rule.latched is not None and rule.hits >= 1, f"{what}: no such request:\n{log_text(faulty)}"
    hit = [e for e in faulty.proxy.log if e.path == rule.latched and e.method == "PUT"]
    faulted = [e for e in hit if e.rule is not None]
    assert len(faulted) == rule.hits and [e.action for e in faulted] == [action] * rule.hits, log_text(faulty)
    assert hit[: rule.hits] == faulted, f"{what}: a try of the PUT got through before the fault:\n{log_text(faulty)}"
    if action == "drop_reply":
        # The first try was applied; the next ones met it (create-only: 412).
        statuses = [e.upstream_status for e in faulted]
        assert statuses == [200] + [412] * (rule.hits - 1), f"{what}: {statuses}"
    key = f"{KEY}/{rule.latched.split(f'/{KEY}/', 1)[1]}"
    if retried is None:
        # Every try failed, so the task did; the new attempt wrote the range
        # under another name, and what the failed one wrote was removed.
        assert rule.hits > 1 and hit == faulted, f"{what}: the name was written after all:\n{log_text(faulty)}"
        assert key not in referenced(faulty, 2)
        assert not faulty.direct.exists(key), f"{what}: the failed attempt's part was left behind"
    else:
        # The PUT was tried again, under the same name, and version 2 names that part.
        assert len(hit) == rule.hits + 1, f"{what}:\n{log_text(faulty)}"
        assert (hit[-1].action, hit[-1].status) == ("forward", retried), f"{what}:\n{log_text(faulty)}"
        assert key in referenced(faulty, 2)
    check_committed(faulty, case, what)


# -- 3. a persistent fault -------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "stage", "folder"),
    [
        ("PUT", STAGE, "mappings"),
        ("PUT", STAGE, "content"),
        ("PUT", "fan", "content"),
        ("GET", "fan", "content"),
        ("PUT", "totals", "content"),
    ],
)
def test_a_persistent_fault_in_the_tasks_commits_nothing_and_leaves_nothing(
    spark_session: SparkSession, faulty: Any, method: str, stage: str, folder: str
) -> None:
    """Every PUT to a stage's mapping (content) parts fails: the map
    (reduce) tasks fail on every attempt. The source's new parts were
    written before, and with content the stage's new mapping parts too:
    all of it is removed. With GET, every read of ``fan``'s content fails:
    the map tasks that look up its derived key-mappings there (and the
    reduce tasks reading its parts) fail. Every PUT to ``totals``' content,
    the last stage of the chain (by_user, fan, totals) updated in one Spark
    job, fails: what the chain's earlier stages wrote in that job is
    removed too. The update raises what the local path raises under the
    same fault."""
    # No object_store retries: each try of a request is one request (pds still tries 3 times).
    store = faulty.open(max_retries="0")
    case = build(faulty, store)
    local = declare(store, "local")
    local.update({"events": events_table(case.before)})
    faulty.proxy.fail(method, base(faulty, "local") + rf"/nodes/{stage}/{folder}/", status=503, times=None)
    with pytest.raises(remote_store.BackendUnavailable, match="503") as local_err:
        local.update(case.local_changes())
    faulty.proxy.clear()

    rule = faulty.proxy.fail(method, base(faulty) + rf"/nodes/{stage}/{folder}/", status=503, times=None)
    with pytest.raises(Exception, match="503") as err:
        pds.spark.update_pipeline(spark_session, case.p, case.changes(spark_session))
    faulty.proxy.clear_rules()
    what = f"every {stage} {folder} {method} failing"

    faulted = {e.path for e in faulty.proxy.log if e.rule is not None}
    assert rule.hits > 1, f"{what}:\n{log_text(faulty)}"
    written = {e.path for e in faulty.proxy.log if e.method == "PUT" and e.status == 200}
    assert any("/nodes/events/" in p for p in written), "the source's new parts were written"
    if method == "PUT":
        # Only task requests were faulted, of more than one task attempt
        # (each attempt names its parts anew).
        pattern = re.compile(base(faulty) + TASK_PART.format(stage=stage, folder=folder))
        assert len(faulted) > 1, f"{what}:\n{log_text(faulty)}"
        assert all(pattern.search(p) for p in faulted), f"{what}: not a task's part: {faulted}"
    if folder == "content" and stage == STAGE:
        maps = re.compile(base(faulty) + TASK_PART.format(stage=stage, folder="mappings"))
        assert any(maps.search(p) for p in written), "the map tasks wrote mapping parts"
    if stage == "totals":
        earlier = re.compile(base(faulty) + TASK_PART.format(stage=STAGE, folder="content"))
        assert any(earlier.search(p) for p in written), f"{what}: by_user's reduce tasks wrote content parts"
    check_unchanged(faulty, case, what)

    # The same update, with the proxy cleared, succeeds.
    assert pds.spark.update_pipeline(spark_session, case.p, case.changes(spark_session)) == 2
    check_committed(faulty, case, f"{what}, then again without faults")

    # The class the local path raises (not pyspark's PythonException), with its message.
    assert type(err.value) is type(local_err.value), f"{what}: Spark raised {type(err.value)!r}"
    assert "503" in str(err.value)


# -- 4. the commit's manifest PUT applied, its reply lost -------------------------------


@pytest.mark.parametrize("times", [1, None], ids=["once", "every"])
def test_a_lost_manifest_reply_on_the_spark_path_is_what_the_local_path_does(
    spark_session: SparkSession, faulty: Any, times: int | None
) -> None:
    case = build(faulty)
    manifest = r"/manifest/v\d{8}\.json$"

    # The local path under the same fault (a pipeline beside it, through the proxy).
    local = declare(faulty.store, "local")
    local.update({"events": events_table(case.before)})
    local_rule = faulty.proxy.drop_reply("PUT", base(faulty, "local") + manifest, times=times)
    local_kind, local_out = run(faulty, lambda: local.update(case.local_changes()))
    faulty.proxy.clear_rules()
    assert local_rule.hits >= 1

    rule = faulty.proxy.drop_reply("PUT", base(faulty) + manifest, times=times)
    kind, out = run(faulty, lambda: pds.spark.update_pipeline(spark_session, case.p, case.changes(spark_session)))
    faulty.proxy.clear_rules()
    what = f"the manifest PUT's reply lost ({'once' if times else 'every time'})"
    hit = [e for e in faulty.proxy.log if e.rule is not None and f"/{KEY}/" in e.path]
    assert hit and rule.hits == len(hit), f"{what}:\n{log_text(faulty)}"
    assert hit[0].path.endswith(f"/{KEY}/manifest/v00000002.json") and hit[0].upstream_status == 200, str(hit[0])

    # The local path returns the new version (the commit loop reads back
    # what landed, as in test_faults.py); so does the Spark path.
    assert (local_kind, local_out) == ("ok", 2), f"local: {local_kind} {local_out!r}"
    assert (kind, out) == (local_kind, local_out), f"{what}: Spark {kind} {out!r}, local {local_kind} {local_out!r}"
    check_committed(faulty, case, what)


# -- 5. a first build: the source's parts written by tasks of Spark's range partitions ------


FIRST_BUILD_FAULTS = [
    *(("events", "content", f) for f in ("lost_reply", "lost_reply_task", "503_task", "persistent")),
    # The stage's map tasks (output kept on the executors' disks, then
    # tagged with the planned target ranges by the JVM) and reduce tasks.
    (STAGE, "mappings", "lost_reply_task"),
    (STAGE, "content", "503_task"),
    (STAGE, "content", "persistent"),
]


@pytest.mark.parametrize(("node", "folder", "fault"), FIRST_BUILD_FAULTS)
def test_a_faulted_part_put_in_a_first_build_on_spark(
    spark_session: SparkSession, faulty: Any, monkeypatch: pytest.MonkeyPatch, node: str, folder: str, fault: str
) -> None:
    """Version 1 built on Spark from nothing: Spark range-partitions the
    source's upserts and deletes (of keys never stored) by key, and each
    partition's task writes its source parts; then each stage's map tasks
    write its key-mapping parts and its reduce tasks (given the map output
    tagged with the target ranges planned from it) its content parts. One
    of the source's (or of ``by_user``'s) part PUTs is faulted
    (``persistent``: every try, on every attempt). The build commits once,
    equal to the recompute and to a local twin (change feed included),
    with nothing left behind; or, persistently faulted, raises the local
    path's error, commits nothing and leaves nothing, and then succeeds."""
    persistent = fault == "persistent"
    store = faulty.open(max_retries="0") if persistent else faulty.store
    p = declare(store, KEY)
    twin = declare(faulty.direct, "twin")
    objects = set(files(faulty.direct, KEY))
    events: Events = {i: (f"u{i % 23:02d}", i * 3 - 50) for i in range(150)}
    dels = pa.table({"id": [500, 501, -4]}, schema=KEYS)

    def changes() -> dict[str, pds.Changes]:
        ups = spark_session.createDataFrame(events_table(events))
        return {"events": pds.Changes(upserts=ups, deletes=spark_session.createDataFrame(dels))}

    path = base(faulty) + TASK_PART.format(stage=node, folder=folder)
    if persistent:
        rule: Rule = faulty.proxy.fail("PUT", path, status=503, times=None)
    else:
        action, how, times, _ = ONE_FAULT[fault]
        if action == "fail":
            rule = Latched("PUT", path, "fail", status=how, times=times)
        else:
            rule = Latched("PUT", path, "drop_reply", how=str(how), times=times)
        faulty.proxy.add_rule(rule)
    runners = recorded_sources(monkeypatch)
    what = f"{fault} on a {node} {folder} PUT of a first build"
    if persistent:
        cached = spark_session.sparkContext._jsc.sc().getPersistentRDDs().size()
        with pytest.raises(remote_store.BackendUnavailable, match="503"):
            pds.spark.update_pipeline(spark_session, p, changes())
        faulty.proxy.clear_rules()
        kept = spark_session.sparkContext._jsc.sc().getPersistentRDDs().size()
        assert kept == cached, f"{what}: the failed build left {kept - cached} cached map outputs"
        assert rule.hits > 1, f"{what}:\n{log_text(faulty)}"
        assert versions(faulty) == [0] and p.refresh() == 0, f"{what}: versions {versions(faulty)}"
        now = set(files(faulty.direct, KEY))
        assert now == objects, f"{what}: objects added {sorted(now - objects)}, removed {sorted(objects - now)}"
        what += ", then again without faults"
    got = pds.spark.update_pipeline(spark_session, p, changes())
    faulty.proxy.clear_rules()
    assert got == 1, f"{what}: committed version {got}"
    assert runners[-1].stats["events"]["ranged_by_spark"] == 1, runners[-1].stats
    assert runners[-1].stats["events"]["applied_ranges"] > 2, runners[-1].stats
    assert rule.hits >= 1, f"{what}: no such request:\n{log_text(faulty)}"
    if not persistent:
        assert isinstance(rule, Latched) and rule.latched is not None
        key = f"{KEY}/{rule.latched.split(f'/{KEY}/', 1)[1]}"
        # Applied and recognised (412 on the retry), or the task ran again
        # under other names and its first attempt's part was removed.
        assert (key in referenced(faulty, 1)) == (fault == "lost_reply"), f"{what}:\n{log_text(faulty)}"
        assert faulty.direct.exists(key) == (fault == "lost_reply"), f"{what}: {key}"

    monkeypatch.undo()
    assert twin.update({"events": pds.Changes(upserts=events_table(events), deletes=dels)}) == 1
    assert versions(faulty) == [0, 1], f"{what}: versions {versions(faulty)}"
    fresh = pds.Pipeline.open(faulty.direct, KEY)
    want = recompute(events)
    assert content(fresh) == want == content(twin), f"{what}: rows lost or duplicated"
    a, b = fresh.changes("events"), twin.changes("events")
    assert a.upserts.equals(b.upserts) and a.deletes.equals(b.deletes), f"{what}: the change feed differs"
    check_objects(faulty, 1, objects, what)
    on_top(faulty, events, 2)
