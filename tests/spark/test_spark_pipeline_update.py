"""Pipelines updated on Spark (issue F, the write side):
``pds.spark.update_pipeline(spark, p, changes)`` on a real local Spark.

Each Spark-updated pipeline is checked against a twin updated locally with
``Pipeline.update`` and against a plain-Python recompute from the current
source contents: a chain (source -> row stage -> batched stage), a merge
of two stages, a join, a compound key, deletions and empty updates. Then
the errors (raised before any write, or with what the tasks wrote
removed), a task retried by Spark (no duplicate, no garbage left) and a
job that fails for good (nothing committed, nothing left).
"""

from __future__ import annotations

import datetime
import random
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession, functions
from pyspark.sql.types import LongType, StringType
from store_kinds import BUCKET

import pds
import pds.spark

from helpers import recorded_sources, recorded_stages

Hook = Callable[[str, Any], None]
Model = dict[int, list[dict[str, Any]]]  # source key -> its rows' values

EVENTS = pa.schema([("id", pa.int64()), ("user", pa.string()), ("n", pa.int64())])
SCORES = pa.schema([("id", pa.int64()), ("w", pa.int64())])
KEYS = pa.schema([("id", pa.int64())])
NODES = ("events", "scores", "by_user", "totals", "by_tag", "all_users", "spans", "joined", "pairs", "pair_sums")
ZERO = datetime.timedelta(0)


# -- the pipeline ------------------------------------------------------------------


def declare(url: str, key: str, *, hook: Hook | None = None, target_rows: int = 20, **options: Any) -> pds.Pipeline:
    """Create (or open) and declare the test pipeline under *key*:

    events(id -> user, n) -> by_user (row) -> totals (batched)       a chain
    events -> by_tag (batched); all_users = merge(by_user, by_tag)   a merge
    events -> spans (row, key (id, part): mostly led by the source key)
    joined = stage(events, scores) (row)                             a join
    scores -> pairs (row, key (m, tag)) -> pair_sums (batched)       a compound key

    *hook(stage, key)* is called by by_user (per source key) and totals (per
    source key in its groups) before they produce. Every Produce is nested
    here, so that cloudpickle sends it by value to Spark's workers."""
    p = pds.Pipeline.create(url, key, target_rows=target_rows, exist_ok=True, **options)
    events = p.source("events", key={"id": pa.int64()}, value={"user": pa.string(), "n": pa.int64()})
    scores = p.source("scores", key={"id": pa.int64()}, value={"w": pa.int64()})

    @p.stage("by_user", sources=[events], key={"user": pa.string()}, value={"n": pa.int64(), "src": pa.int64()})
    def by_user(k: int, rows: Iterator[dict[str, Any]]) -> Iterator[tuple[str, dict[str, int]]]:
        if hook is not None:
            hook("by_user", k)
        for r in rows:
            yield r["user"], {"n": r["n"], "src": k}

    @p.stage(
        "totals",
        sources=[by_user],
        key={"name": pa.string()},
        value={"total": pa.int64(), "cnt": pa.int64()},
        batched=True,
    )
    def totals(groups: pa.Table) -> pa.Table:
        users = groups.column("user").to_pylist()
        if hook is not None:
            for u in sorted(set(users)):
                hook("totals", u)
        sums: dict[str, int] = defaultdict(int)
        counts: dict[str, int] = defaultdict(int)
        for u, n in zip(users, groups.column("n").to_pylist(), strict=True):
            sums[u] += n
            counts[u] += 1
        order = sorted(sums)
        return pa.table(
            {
                "name": pa.array(order, pa.string()),
                "total": pa.array([sums[u] for u in order], pa.int64()),
                "cnt": pa.array([counts[u] for u in order], pa.int64()),
                "user": pa.array(order, pa.string()),
            }
        )

    @p.stage(
        "by_tag",
        sources=[events],
        key={"user": pa.string()},
        value={"n": pa.int64(), "src": pa.int64()},
        batched=True,
    )
    def by_tag(groups: pa.Table) -> pa.Table:
        ids = groups.column("id").to_pylist()
        return pa.table(
            {
                "user": pa.array([f"t{i % 7}" for i in ids], pa.string()),
                "n": groups.column("n"),
                "src": pa.array(ids, pa.int64()),
                "id": pa.array(ids, pa.int64()),
            }
        )

    p.merge("all_users", [by_user, by_tag])

    @p.stage("spans", sources=[events], key={"id": pa.int64(), "part": pa.int64()}, value={"n": pa.int64()})
    def spans(k: int, rows: Iterator[dict[str, Any]]) -> Iterator[tuple[tuple[int, int], dict[str, int]]]:
        # Targets that begin with the source key (key-mappings derived from
        # the content), and some that do not (their pairs stored).
        for r in rows:
            yield (k, r["n"] % 3), {"n": r["n"]}
            if r["n"] % 4 == 0:
                yield (k + 1, -1), {"n": r["n"]}

    @p.stage("joined", sources=[events, scores], key={"g": pa.int64()}, value={"total": pa.int64(), "cnt": pa.int64()})
    def joined(
        k: int, left: Iterator[dict[str, Any]], right: Iterator[dict[str, Any]]
    ) -> Iterator[tuple[int, dict[str, int]]]:
        a = [r["n"] for r in left]
        b = [r["w"] for r in right]
        yield k % 10, {"total": sum(a) + 10 * sum(b), "cnt": 100 * len(a) + len(b)}

    @p.stage("pairs", sources=[scores], key={"m": pa.int64(), "tag": pa.string()}, value={"w": pa.int64()})
    def pairs(k: int, rows: Iterator[dict[str, Any]]) -> Iterator[tuple[tuple[int, str], dict[str, int]]]:
        for r in rows:
            yield (r["w"] % 3, "x" if k % 2 else "y"), {"w": r["w"]}

    @p.stage("pair_sums", sources=[pairs], key={"label": pa.string()}, value={"total": pa.int64()}, batched=True)
    def pair_sums(groups: pa.Table) -> pa.Table:
        sums: dict[tuple[int, str], int] = defaultdict(int)
        for m, tag, w in zip(*(groups.column(c).to_pylist() for c in ("m", "tag", "w")), strict=True):
            sums[(m, tag)] += w
        order = sorted(sums)
        return pa.table(
            {
                "label": pa.array([f"{t}{m}" for m, t in order], pa.string()),
                "total": pa.array([sums[mt] for mt in order], pa.int64()),
                "m": pa.array([m for m, _ in order], pa.int64()),
                "tag": pa.array([t for _, t in order], pa.string()),
            }
        )

    return p


def recompute(events: Model, scores: Model) -> dict[str, list[dict[str, Any]]]:
    """Every node's rows from the sources' current contents, in plain Python."""
    out: dict[str, list[dict[str, Any]]] = {}
    out["events"] = [{"id": k, **v} for k, vs in events.items() for v in vs]
    out["scores"] = [{"id": k, **v} for k, vs in scores.items() for v in vs]
    out["by_user"] = [{"user": v["user"], "n": v["n"], "src": k} for k, vs in events.items() for v in vs]
    sums: dict[str, list[int]] = defaultdict(list)
    for r in out["by_user"]:
        sums[r["user"]].append(r["n"])
    out["totals"] = [{"name": u, "total": sum(ns), "cnt": len(ns)} for u, ns in sums.items()]
    out["by_tag"] = [{"user": f"t{k % 7}", "n": v["n"], "src": k} for k, vs in events.items() for v in vs]
    out["all_users"] = out["by_user"] + out["by_tag"]
    out["spans"] = [{"id": k, "part": v["n"] % 3, "n": v["n"]} for k, vs in events.items() for v in vs] + [
        {"id": k + 1, "part": -1, "n": v["n"]} for k, vs in events.items() for v in vs if v["n"] % 4 == 0
    ]
    out["joined"] = []
    for k in set(events) | set(scores):
        a = [v["n"] for v in events.get(k, [])]
        b = [v["w"] for v in scores.get(k, [])]
        if a or b:
            out["joined"].append({"g": k % 10, "total": sum(a) + 10 * sum(b), "cnt": 100 * len(a) + len(b)})
    out["pairs"] = [
        {"m": v["w"] % 3, "tag": "x" if k % 2 else "y", "w": v["w"]} for k, vs in scores.items() for v in vs
    ]
    pair_sums: dict[tuple[int, str], int] = defaultdict(int)
    for r in out["pairs"]:
        pair_sums[(r["m"], r["tag"])] += r["w"]
    out["pair_sums"] = [{"label": f"{t}{m}", "total": s} for (m, t), s in pair_sums.items()]
    return out


def canon(rows: list[dict[str, Any]]) -> list[tuple[tuple[str, Any], ...]]:
    """Rows as a sorted list, each row's columns sorted by name."""
    return sorted(tuple(sorted(r.items())) for r in rows)


def check(p: pds.Pipeline, twin: pds.Pipeline | None, events: Model, scores: Model, what: str) -> None:
    """Every node of *p* equals the recompute, and the twin's."""
    want = recompute(events, scores)
    for node in NODES:
        got = canon(p.read(node).to_pylist())
        assert got == canon(want[node]), f"{what}: node {node!r} differs from the recompute"
        if twin is not None:
            assert got == canon(twin.read(node).to_pylist()), f"{what}: node {node!r} differs from the local twin"


# -- changes: as Arrow (local) and as Spark DataFrames ------------------------------

Step = dict[str, tuple[pa.Table | None, pa.Table | None]]  # source -> (upserts, deletes)


def random_step(rng: random.Random, events: Model, scores: Model, nkeys: int, size: int) -> Step:
    """Random upserts and deletions of both sources (applied to the models)."""
    step: Step = {}
    for name, model, schema in (("events", events, EVENTS), ("scores", scores, SCORES)):
        if rng.random() < 0.2:
            continue  # this source is left alone
        ups: dict[str, list[Any]] = defaultdict(list)
        dels: list[int] = []
        for k in rng.sample(range(nkeys), size):
            if rng.random() < 0.3:
                dels.append(k)  # present or not
                model.pop(k, None)
                continue
            vals = []
            for _ in range(rng.choice([1, 1, 1, 2])):
                v: dict[str, Any] = {"w": rng.randint(-50, 50)}
                if name == "events":
                    v = {"user": f"u{rng.randint(0, 30)}", "n": rng.randint(-100, 100)}
                vals.append(v)
                ups["id"].append(k)
                for c, x in v.items():
                    ups[c].append(x)
            model[k] = vals
        upserts = pa.table({f.name: ups[f.name] for f in schema}, schema=schema) if ups else None
        deletes = pa.table({"id": dels}, schema=KEYS) if dels else None
        step[name] = (upserts, deletes)
    return step


def local(step: Step) -> dict[str, pds.Changes]:
    return {name: pds.Changes(upserts=u, deletes=d) for name, (u, d) in step.items()}


def frame(spark: SparkSession, t: pa.Table) -> DataFrame:
    df = spark.createDataFrame(t)
    for f in t.schema:  # the key and value types come through
        want = LongType() if f.type == pa.int64() else StringType()
        assert df.schema[f.name].dataType == want, (f.name, df.schema[f.name].dataType)
    return df


def on_spark(spark: SparkSession, step: Step, as_tuple: bool = True) -> dict[str, Any]:
    """The same changes as DataFrames: a bare upserts frame, an (upserts,
    deletes) tuple, or a ``pds.Changes`` of frames."""
    out: dict[str, Any] = {}
    for name, (u, d) in step.items():
        ups = None if u is None else frame(spark, u)
        dels = None if d is None else frame(spark, d)
        if dels is None and ups is not None:
            out[name] = ups
        elif ups is not None and as_tuple:
            out[name] = (ups, dels)
        else:
            out[name] = pds.Changes(upserts=ups, deletes=dels)
    return out


def initial(nkeys: int, events: Model, scores: Model) -> Step:
    """Every key in events, two thirds of them in scores."""
    ev = pa.table(
        {
            "id": list(range(nkeys)),
            "user": [f"u{i % 23}" for i in range(nkeys)],
            "n": [i * 3 - 50 for i in range(nkeys)],
        },
        schema=EVENTS,
    )
    sc_ids = [i for i in range(nkeys) if i % 3]
    sc = pa.table({"id": sc_ids, "w": [(i * 7) % 41 - 20 for i in sc_ids]}, schema=SCORES)
    for r in ev.to_pylist():
        events[r["id"]] = [{"user": r["user"], "n": r["n"]}]
    for r in sc.to_pylist():
        scores[r["id"]] = [{"w": r["w"]}]
    return {"events": (ev, None), "scores": (sc, None)}


def objects(root: Path) -> set[str]:
    """Every file below *root* (a file:// pipeline's directory)."""
    return {str(f.relative_to(root)) for f in root.rglob("*") if f.is_file()}


def garbage(p: pds.Pipeline) -> list[str]:
    """What vacuum would remove that no version references (nothing is too young)."""
    return p.vacuum(retain=ZERO, min_age=ZERO, keep_versions=True, dry_run=True)


# -- 1. the oracle --------------------------------------------------------------------


@pytest.mark.spec("F")
def test_spark_updates_match_local_updates_and_a_recompute_after_every_version(
    spark: SparkSession, tmp_path: Path
) -> None:
    rng = random.Random(20261124)
    url = (tmp_path / "lake").as_uri()
    a = declare(url, "pipelines/spark")
    b = declare(url, "pipelines/local")
    events: Model = {}
    scores: Model = {}
    nkeys = 240
    step = initial(nkeys, events, scores)
    assert pds.spark.update_pipeline(spark, a, on_spark(spark, step)) == 1, "the first update builds the pipeline"
    assert b.update(local(step)) == 1
    check(a, b, events, scores, "version 1")
    # Many key-range parts per node: the Spark path has ranges to split.
    assert len(a._partition_views("events")[2]) > 5

    version = 1
    for i in range(4):
        if i == 2:
            # Empty-ish: an empty frame for one source and one row for the other.
            events[7] = [{"user": "solo", "n": 1}]
            step = {
                "events": (pa.table({"id": [7], "user": ["solo"], "n": [1]}, schema=EVENTS), None),
                "scores": (SCORES.empty_table(), None),
            }
        else:
            step = random_step(rng, events, scores, nkeys + 40, size=rng.randint(5, 60))
        version += 1 if step else 0  # no source changed: no new version
        got = pds.spark.update_pipeline(spark, a, on_spark(spark, step, as_tuple=i % 2 == 0))
        assert got == version, f"update {i} committed version {got}, not {version}"
        assert b.update(local(step)) == version
        assert a.refresh() == version
        check(a, b, events, scores, f"version {version}")

    # Nothing at all: no new version, on Spark as locally.
    empty = {"events": frame(spark, EVENTS.empty_table())}
    assert pds.spark.update_pipeline(spark, a, empty) == version
    assert b.update({"events": EVENTS.empty_table()}) == version
    assert a.refresh() == version
    assert garbage(a) == [] and garbage(b) == []

    # The Spark updates wrote patches over the parts they landed in (issue
    # P); compacting them changes no row, and Spark updates go on from there.
    patched = [
        part
        for v in range(2, version + 1)
        for state in a._at(v)["nodes"].values()
        for part in [*state.get("content", []), *state.get("mappings", [])]
        if part.get("patches")
    ]
    assert patched, "no Spark update wrote a patch"
    version = a.compact()
    check(a, b, events, scores, f"version {version} (compacted)")
    assert not any(part.get("patches") for state in a._at(None)["nodes"].values() for part in state.get("content", []))
    step = {}
    while not step:  # both sources left alone: draw again
        step = random_step(rng, events, scores, nkeys + 40, size=20)
    assert pds.spark.update_pipeline(spark, a, on_spark(spark, step)) == version + 1
    b.update(local(step))
    check(a, b, events, scores, f"version {version + 1} (after the compaction)")


# -- 2. alternating Spark and local updates on one pipeline ---------------------------


def alternate(spark: SparkSession, url: str, options: dict[str, str], updates: int) -> None:
    rng = random.Random(7)
    p = declare(url, "pipelines/both", **options)
    twin = declare(url, "pipelines/twin", **options)
    events: Model = {}
    scores: Model = {}
    step = initial(120, events, scores)
    assert p.update(local(step)) == 1  # built locally, then updated on Spark
    assert twin.update(local(step)) == 1
    for version in range(2, updates + 2):
        step = {}
        while not step:  # both sources left alone: draw again
            step = random_step(rng, events, scores, 150, size=rng.randint(5, 40))
        if version % 2 == 0:
            assert pds.spark.update_pipeline(spark, p, on_spark(spark, step)) == version
        else:
            # Another Pipeline object, opened afresh: what Spark committed is a normal version.
            again = declare(url, "pipelines/both", **options)
            assert again.version == version - 1
            assert again.update(local(step)) == version
        assert twin.update(local(step)) == version
        assert p.refresh() == version
        check(p, twin, events, scores, f"version {version} ({'spark' if version % 2 == 0 else 'local'})")
    assert [h["version"] for h in p.history()] == list(range(updates + 1, -1, -1))


@pytest.mark.spec("F")
def test_spark_and_local_updates_alternate_on_one_pipeline(spark: SparkSession, tmp_path: Path) -> None:
    alternate(spark, (tmp_path / "lake").as_uri(), {}, updates=4)


@pytest.mark.spec("F")
def test_spark_and_local_updates_alternate_on_seaweedfs(spark: SparkSession, seaweed: Any) -> None:
    url = f"s3://{BUCKET}/spark-update-{uuid.uuid4().hex[:12]}"
    alternate(spark, url, seaweed.store_options(), updates=2)


# -- 3. errors leave nothing --------------------------------------------------------


@pytest.mark.spec("F")
def test_errors_are_pipeline_updates_errors_and_leave_nothing(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    root = tmp_path / "lake" / "pipelines" / "err"
    zero = {"on": False}

    def hook(stage: str, key: Any) -> None:
        if zero["on"] and stage == "by_user" and key == 77:
            raise ZeroDivisionError("division by zero on purpose")

    p = declare(url, "pipelines/err", hook=hook)
    events: Model = {}
    scores: Model = {}
    step = initial(150, events, scores)
    assert pds.spark.update_pipeline(spark, p, on_spark(spark, step)) == 1
    before = objects(root)
    content = {n: canon(p.read(n).to_pylist()) for n in NODES}

    def unchanged(what: str) -> None:
        assert p.refresh() == 1, f"{what}: a version was committed"
        assert objects(root) == before, f"{what}: objects added or removed: {objects(root) ^ before}"
        assert {n: canon(p.read(n).to_pylist()) for n in NODES} == content, what

    # A key both upserted and deleted.
    both = pa.table({"id": [3, 4], "user": ["a", "b"], "n": [1, 2]}, schema=EVENTS)
    with pytest.raises(ValueError, match=r"upserted and deleted|both"):
        pds.spark.update_pipeline(spark, p, {"events": (frame(spark, both), frame(spark, both.select(["id"])))})
    unchanged("a key upserted and deleted")

    # A column missing.
    with pytest.raises(pds.SchemaMismatch, match="user"):
        pds.spark.update_pipeline(spark, p, {"events": frame(spark, both.select(["id", "n"]))})
    unchanged("a column missing")

    # An unknown source.
    with pytest.raises(ValueError, match="nope"):
        pds.spark.update_pipeline(spark, p, {"nope": frame(spark, both)})
    unchanged("an unknown source")

    # A Produce that raises: ProduceError naming the stage and the key, and
    # still the user's exception class (as Pipeline.update raises it).
    zero["on"] = True
    ups = pa.table({"id": [5, 77, 140], "user": ["a", "b", "c"], "n": [1, 2, 3]}, schema=EVENTS)
    with pytest.raises(pds.ProduceError, match=r"by_user.*77") as err:
        pds.spark.update_pipeline(spark, p, {"events": frame(spark, ups)})
    assert err.value.stage == "by_user" and err.value.key == 77
    unchanged("a Produce that raised")
    assert garbage(p) == []
    # The same Produce raises locally the same way.
    with pytest.raises(pds.ProduceError, match=r"by_user.*77") as local_err:
        p.update({"events": ups})
    unchanged("the local twin of the failure")
    assert isinstance(local_err.value, ZeroDivisionError)
    assert isinstance(err.value, ZeroDivisionError), (
        f"still the user's exception class, as Pipeline.update raises it ({type(local_err.value).__name__}); "
        f"got {type(err.value).__name__}"
    )


# -- 4. a task retried by Spark --------------------------------------------------------


@pytest.mark.spec("F")
def test_a_task_failing_once_is_retried_without_duplicates_or_garbage(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark import TaskContext

    def hook(stage: str, key: Any) -> None:
        ctx = TaskContext.get()
        if ctx is None or ctx.attemptNumber() != 0:
            return  # locally, or Spark's retry: no failure
        # Mid-range keys, after the task emitted rows for earlier keys.
        if (stage == "by_user" and key in (47, 133)) or (stage == "totals" and key == "u9"):
            raise RuntimeError(f"injected failure at {stage} {key!r}")

    url = (tmp_path / "lake").as_uri()
    p = declare(url, "pipelines/retry", hook=hook)
    twin = declare(url, "pipelines/twin")
    events: Model = {}
    scores: Model = {}
    step = initial(200, events, scores)
    assert pds.spark.update_pipeline(spark, p, on_spark(spark, step)) == 1, "the build retried its failed tasks"
    assert twin.update(local(step)) == 1
    check(p, twin, events, scores, "a retried build")
    assert garbage(p) == [], "the failed attempts' files were removed"

    ups = pa.table(
        {"id": [10, 47, 99, 133, 180], "user": ["u9", "u2", "u9", "u5", "new"], "n": [5, 6, 7, 8, 9]}, schema=EVENTS
    )
    for r in ups.to_pylist():
        events[r["id"]] = [{"user": r["user"], "n": r["n"]}]
    assert pds.spark.update_pipeline(spark, p, {"events": frame(spark, ups)}) == 2
    assert twin.update({"events": ups}) == 2
    check(p, twin, events, scores, "a retried update")
    for node in NODES:
        t = p.read(node).to_pylist()
        assert len(t) == len(twin.read(node)), f"{node}: rows duplicated by the retry"
    assert garbage(p) == [], "the failed attempts' files were removed"


# -- 5. a job that fails for good --------------------------------------------------------


@pytest.mark.spec("F")
def test_a_job_that_fails_for_good_commits_nothing_and_leaves_nothing(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark import TaskContext

    fail = {"on": False}

    def hook(stage: str, key: Any) -> None:
        # Every attempt fails, on Spark only: the other tasks succeed and write.
        if fail["on"] and stage == "by_user" and key == 161 and TaskContext.get() is not None:
            raise RuntimeError("injected: key 161 always fails")

    url = (tmp_path / "lake").as_uri()
    root = tmp_path / "lake" / "pipelines" / "killed"
    p = declare(url, "pipelines/killed", hook=hook)
    events: Model = {}
    scores: Model = {}
    step = initial(200, events, scores)
    assert pds.spark.update_pipeline(spark, p, on_spark(spark, step)) == 1
    before = objects(root)
    content = {n: canon(p.read(n).to_pylist()) for n in NODES}

    fail["on"] = True
    ids = [*range(0, 200, 3), 161]
    ups = pa.table({"id": ids, "user": [f"v{i % 5}" for i in ids], "n": [-i for i in ids]}, schema=EVENTS)
    with pytest.raises(Exception, match="161") as err:
        pds.spark.update_pipeline(spark, p, {"events": frame(spark, ups)})
    assert isinstance(err.value, pds.ProduceError), f"not a ProduceError: {type(err.value).__mro__}"
    assert err.value.stage == "by_user" and err.value.key == 161
    assert p.refresh() == 1, "the failed job committed a version"
    assert {n: canon(p.read(n).to_pylist()) for n in NODES} == content
    assert garbage(p) == [], "what the job's tasks wrote was left behind"
    assert objects(root) == before

    # The pipeline goes on: the same update succeeds once the key stops failing.
    fail["on"] = False
    for r in ups.to_pylist():
        events[r["id"]] = [{"user": r["user"], "n": r["n"]}]
    assert pds.spark.update_pipeline(spark, p, {"events": frame(spark, ups)}) == 2
    check(p, None, events, scores, "after the failed job")


@pytest.mark.spec("F")
def test_a_job_cancelled_between_tasks_commits_nothing_and_leaves_nothing(spark: SparkSession, tmp_path: Path) -> None:
    """The job is killed (cancelled from the driver) while one task runs,
    after others finished and wrote their parts: nothing is committed and
    nothing the job wrote is left behind; the next update goes on."""
    import threading
    import time

    from pyspark import TaskContext

    marker = tmp_path / "task-started"
    slow = {"on": False}

    def hook(stage: str, key: Any) -> None:
        if slow["on"] and stage == "by_user" and key == 161 and TaskContext.get() is not None:
            marker.write_text("started")
            time.sleep(3)

    url = (tmp_path / "lake").as_uri()
    root = tmp_path / "lake" / "pipelines" / "cancelled"
    p = declare(url, "pipelines/cancelled", hook=hook)
    events: Model = {}
    scores: Model = {}
    assert pds.spark.update_pipeline(spark, p, on_spark(spark, initial(200, events, scores))) == 1
    before = objects(root)
    content = {n: canon(p.read(n).to_pylist()) for n in NODES}

    def cancel_when_started() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        spark.sparkContext.cancelAllJobs()

    slow["on"] = True
    ids = [*range(0, 200, 3), 161]
    ups = pa.table({"id": ids, "user": [f"w{i % 5}" for i in ids], "n": [i * 7 for i in ids]}, schema=EVENTS)
    killer = threading.Thread(target=cancel_when_started)
    killer.start()
    try:
        with pytest.raises(Exception, match=r"(?i)cancel"):
            pds.spark.update_pipeline(spark, p, {"events": frame(spark, ups)})
    finally:
        killer.join()
    assert marker.exists(), "the slow task ran"
    assert p.refresh() == 1, "the cancelled job committed a version"
    assert {n: canon(p.read(n).to_pylist()) for n in NODES} == content
    assert garbage(p) == [], "what the job's tasks wrote was left behind"
    assert objects(root) == before

    slow["on"] = False
    for r in ups.to_pylist():
        events[r["id"]] = [{"user": r["user"], "n": r["n"]}]
    assert pds.spark.update_pipeline(spark, p, {"events": frame(spark, ups)}) == 2
    check(p, None, events, scores, "after the cancelled job")


@pytest.mark.spec("F")
@pytest.mark.parametrize("first", [False, True], ids=["update", "first_build"])
def test_two_racing_spark_updates_commit_one_and_lose_nothing(spark: SparkSession, tmp_path: Path, first: bool) -> None:
    """Two update_pipeline calls on one pipeline at once, from two threads
    (two pipeline objects, as two drivers would have): one commits, the
    other raises CommitConflict having committed and left nothing; run
    again, it lands on top. Every row of both updates is there once.
    *first*: both are the pipeline's first build (Spark range-partitions
    each one's source rows, and each stage's map output is kept while its
    target ranges are planned)."""
    import threading

    url = (tmp_path / "lake").as_uri()
    a = declare(url, "pipelines/race")
    events: Model = {}
    scores: Model = {}
    if first:
        ids = {"a": range(0, 150), "b": range(100, 260)}  # overlapping: the later one wins those
    else:
        assert pds.spark.update_pipeline(spark, a, on_spark(spark, initial(120, events, scores))) == 1
        ids = {"a": [1, 2, 500], "b": [3, 4, 501]}
    b = declare(url, "pipelines/race")
    ups = {
        k: pa.table({"id": list(v), "user": [f"r{k}{i % 7}" for i in v], "n": [i * 3 for i in v]}, schema=EVENTS)
        for k, v in ids.items()
    }
    frames = {k: frame(spark, t) for k, t in ups.items()}
    outcome: dict[str, Any] = {}
    start = threading.Barrier(2)
    built = 0 if first else 1

    def run(name: str, p: pds.Pipeline) -> None:
        start.wait()
        try:
            outcome[name] = pds.spark.update_pipeline(spark, p, {"events": frames[name]})
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            outcome[name] = exc

    threads = [threading.Thread(target=run, args=(n, p)) for n, p in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if sorted(o for o in outcome.values() if isinstance(o, int)) == [built + 1, built + 2]:
        order = sorted(outcome, key=lambda n: outcome[n])  # they ran one after the other after all
    else:
        won = [n for n, o in outcome.items() if o == built + 1]
        lost = [n for n, o in outcome.items() if isinstance(o, pds.CommitConflict)]
        assert len(won) == 1 and len(lost) == 1, outcome
        assert garbage(a) == [], "the losing update left objects behind"
        loser = {"a": a, "b": b}[lost[0]]
        assert pds.spark.update_pipeline(spark, loser, {"events": frames[lost[0]]}) == built + 2
        order = [won[0], lost[0]]
    for t in (ups[order[0]], ups[order[1]]):
        for r in t.to_pylist():
            events[r["id"]] = [{"user": r["user"], "n": r["n"]}]
    check(a, None, events, scores, "after the race")
    assert garbage(a) == [], "the losing update left objects behind"
    fresh = pds.Pipeline.open(url, "pipelines/race")
    assert fresh.version == built + 2


# -- 6. read_stage after a Spark update -------------------------------------------------


@pytest.mark.spec("F")
def test_read_stage_after_a_spark_update_is_pipeline_read(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    p = declare(url, "pipelines/read")
    events: Model = {}
    scores: Model = {}
    pds.spark.update_pipeline(spark, p, on_spark(spark, initial(100, events, scores)))
    dels = pa.table({"id": list(range(0, 100, 4))}, schema=KEYS)
    for k in dels.column("id").to_pylist():
        events.pop(k, None)
    assert pds.spark.update_pipeline(spark, p, {"events": pds.Changes(deletes=frame(spark, dels))}) == 2
    check(p, None, events, scores, "version 2")
    for node, version in [*((n, None) for n in NODES), ("events", 1), ("totals", 1), ("all_users", 1)]:
        got = pds.spark.read_stage(spark, p, node, version=version).toArrow()
        expected = p.read(node, version=version)
        assert got.schema.names == expected.schema.names, node
        assert canon(got.to_pylist()) == canon(expected.to_pylist()), (node, version)


# -- the work is split ----------------------------------------------------------------


@pytest.mark.spec("F")
def test_a_stage_runs_in_several_spark_tasks(spark: SparkSession, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()

    def hook(stage: str, key: Any) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            (marks / f"{stage}.{ctx.stageId()}.{ctx.partitionId()}").touch()

    url = (tmp_path / "lake").as_uri()
    p = declare(url, "pipelines/split", hook=hook)
    events: Model = {}
    scores: Model = {}
    pds.spark.update_pipeline(spark, p, on_spark(spark, initial(300, events, scores)))
    check(p, None, events, scores, "version 1")
    tasks: dict[str, set[str]] = defaultdict(set)
    for m in marks.iterdir():
        stage, rest = m.name.split(".", 1)
        tasks[stage].add(rest)
    assert len(tasks["by_user"]) > 1, f"by_user ran in Spark tasks {sorted(tasks['by_user'])}: its work was not split"


#: The chains of stages an update of the test pipeline runs, each as one
#: Spark job (node order; the merge ends the first): stage -> link.
CHAINS = {"by_user": 0, "totals": 1, "by_tag": 2, "spans": 0, "joined": 1, "pairs": 2, "pair_sums": 3}


def built_with_twin(spark: SparkSession, tmp_path: Path, nkeys: int) -> tuple[pds.Pipeline, pds.Pipeline, Model, Model]:
    """The test pipeline built on Spark from :func:`initial`, its twin built
    locally from the same rows, and the sources' models."""
    url = (tmp_path / "lake").as_uri()
    p, twin = declare(url, "pipelines/chain"), declare(url, "pipelines/twin")
    events: Model = {}
    scores: Model = {}
    first = initial(nkeys, events, scores)
    pds.spark.update_pipeline(spark, p, on_spark(spark, first))
    twin.update(local(first))
    return p, twin, events, scores


@pytest.mark.spec("F")
def test_a_chain_of_stages_updates_in_one_spark_job(spark: SparkSession, tmp_path: Path, monkeypatch: Any) -> None:
    """Stages that follow one another in node order, each fed by nodes done
    before them or by the chain, update in one Spark job: a later stage's
    map tasks read what the earlier ones' reduce tasks wrote, with no
    driver step between them. Every node equals the recompute and the
    local update, and the history says what the local one says."""
    runners = recorded_stages(monkeypatch)
    p, twin, events, scores = built_with_twin(spark, tmp_path, 120)
    rng = random.Random(11)
    for n in range(3):
        step = random_step(rng, events, scores, 160, 12)
        if not step:
            continue
        pds.spark.update_pipeline(spark, p, on_spark(spark, step))
        twin.update(local(step))
        check(p, twin, events, scores, f"update {n}")
        assert p.history()[0]["parameters"] == twin.history()[0]["parameters"], f"update {n}"
        stats = runners[-1].stats
        chained = {name: s["chain_link"] for name, s in stats.items() if "chain_link" in s}
        # A chained stage none of whose sources changed does nothing (no stats).
        if "events" not in step:  # by_user, totals, by_tag and spans are kept: the chain begins at joined
            want = {"joined": 0, "pairs": 1, "pair_sums": 2}
        elif "scores" not in step:  # pairs and pair_sums: kept
            want = {name: link for name, link in CHAINS.items() if name not in ("pairs", "pair_sums")}
        else:
            want = CHAINS
        assert chained == want, (n, sorted(step), stats)
        for name, link in chained.items():
            # The chain's jobs run in its first stage's job group; the others have none.
            assert (runners[-1]._jobs(name) > 0) == (link == 0), (name, stats)
            assert stats[name]["spark_jobs"] > 0


@pytest.mark.spec("F")
def test_a_chained_stage_whose_source_update_is_empty_is_kept(
    spark: SparkSession, tmp_path: Path, monkeypatch: Any
) -> None:
    """Deleting keys no source holds changes no stage's rows: the first
    stages of each chain run (their source changed) and find nothing to
    do, and the stages after them in the chain, whose sources' updates
    turn out empty, keep their state, as the local update does: the same
    rows, the same history, no object added but the version's."""
    runners = recorded_stages(monkeypatch)
    p, twin, events, scores = built_with_twin(spark, tmp_path, 90)
    before = {name: p.read(name) for name in ("totals", "pair_sums")}
    absent = pa.table({"id": [1000, 1001]}, schema=KEYS)
    step: Step = {"events": (None, absent), "scores": (None, absent)}
    pds.spark.update_pipeline(spark, p, on_spark(spark, step))
    twin.update(local(step))
    check(p, twin, events, scores, "after deleting absent keys")
    assert p.history()[0]["parameters"] == twin.history()[0]["parameters"]
    stages = p.history()[0]["parameters"]["stages"]
    assert "totals" not in stages and "pair_sums" not in stages, stages
    assert all(s["rows_emitted"] == 0 for s in stages.values()), stages
    assert "totals" not in runners[-1].stats and runners[-1].stats["by_user"]["chain_link"] == 0
    for name, rows in before.items():
        assert p.read(name).equals(rows), name
    assert garbage(p) == []


# -- source changes are applied by tasks, by source-key range ------------------------------


@pytest.mark.spec("F")
def test_source_changes_are_applied_by_tasks_per_key_range(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first build cuts the source into ranges from sampled keys, and a
    later update is shuffled to the ranges of the stored parts; the driver
    never applies a change itself; the results are the local engine's."""
    from pds import _core

    def not_on_the_driver(*a: Any, **kw: Any) -> Any:
        raise AssertionError("a source change was applied on the driver")

    monkeypatch.setattr(_core, "pipeline_apply_source", not_on_the_driver)
    runners = recorded_sources(monkeypatch)
    url = (tmp_path / "lake").as_uri()
    p = declare(url, "pipelines/sources")
    events: Model = {}
    scores: Model = {}
    step = initial(240, events, scores)
    assert pds.spark.update_pipeline(spark, p, on_spark(spark, step)) == 1
    built = runners[-1].stats
    # 240 rows at 20 rows a part: about 12 samples, so several ranges and tasks' parts.
    assert built["events"]["source_ranges"] > 2 and built["events"]["applied_ranges"] > 2, built
    assert built["events"]["ranged_by_spark"] == 1, built  # Spark's range partitioning, no tagging task
    monkeypatch.undo()  # the twin updates locally
    twin = declare(url, "pipelines/twin")
    assert twin.update(local(step)) == 1
    check(p, twin, events, scores, "a first build by range")
    for name in ("events", "scores"):
        got, want = p.changes(name), twin.changes(name)
        assert got.upserts.equals(want.upserts) and got.deletes.equals(want.deletes), name

    monkeypatch.setattr(_core, "pipeline_apply_source", not_on_the_driver)
    runners = recorded_sources(monkeypatch)
    ups = pa.table({"id": [3, 120, 239, 400], "user": ["a", "b", "c", "d"], "n": [1, 2, 3, 4]}, schema=EVENTS)
    dels = pa.table({"id": [5, 200, 999]}, schema=KEYS)
    for r in ups.to_pylist():
        events[r["id"]] = [{"user": r["user"], "n": r["n"]}]
    for k in dels.column("id").to_pylist():
        events.pop(k, None)
    v = pds.spark.update_pipeline(spark, p, {"events": (frame(spark, ups), frame(spark, dels))})
    assert v == 2
    stats = runners[-1].stats["events"]
    assert stats["source_ranges"] > 2 and 1 < stats["applied_ranges"] < stats["source_ranges"], stats
    assert stats["ranged_by_spark"] == 0, stats  # cut at the stored parts' ranges
    monkeypatch.undo()
    assert twin.update({"events": pds.Changes(upserts=ups, deletes=dels)}) == 2
    check(p, twin, events, scores, "an update by range")
    got, want = p.changes("events"), twin.changes("events")
    assert got.upserts.equals(want.upserts) and got.deletes.equals(want.deletes)
    assert garbage(p) == []


def test_a_first_build_is_range_partitioned_by_spark_where_spark_orders_keys_as_pds(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first build's rows go straight from Spark's range partitioning to
    the apply tasks, deleted keys included (a key both upserted and deleted
    is the local ValueError, and nothing is left); rows Spark would order
    otherwise are tagged by pds's tasks. Either way the source equals the
    local engine's, row for row."""
    url = (tmp_path / "lake").as_uri()

    def make(key: str) -> pds.Pipeline:
        p = pds.Pipeline.create(url, key, target_rows=8, exist_ok=True)
        p.source("s", key={"k": pa.int64(), "j": pa.string()}, value={"v": pa.int64()})
        return p

    rng = random.Random(5)
    keys = [(rng.randrange(-50, 50), rng.choice("aBcDeFgH")) for _ in range(400)]
    ups = (
        pa.table(
            {"k": [k for k, _ in keys], "j": [j for _, j in keys], "v": list(range(len(keys)))},
            schema=pa.schema([("k", pa.int64()), ("j", pa.string()), ("v", pa.int64())]),
        )
        .group_by(["k", "j"])
        .aggregate([("v", "max")])
        .rename_columns(["k", "j", "v"])
    )
    # Deleted keys that were never stored, most of them above every upserted key: Spark
    # gives some partitions deleted keys only (the change feed records them, as locally).
    gone = [10_000 + i for i in range(300)]
    dels = pa.table(
        {"k": [-1_000, *gone], "j": ["x"] * (len(gone) + 1)}, schema=pa.schema([("k", pa.int64()), ("j", pa.string())])
    )

    # Spark orders a string column of a case-insensitive collation
    # otherwise ("a" < "B"): pds's tasks tag those rows.
    for collation, by_spark in (("UTF8_BINARY", 1), ("UTF8_LCASE", 0)):
        runners = recorded_sources(monkeypatch)
        p, twin = make(f"p/{collation}"), make(f"p/{collation}-twin")

        def collated(t: pa.Table, collation: str = collation) -> DataFrame:
            df = spark.createDataFrame(t)
            return df.withColumn("j", functions.collate("j", collation))

        on = {"s": (collated(ups), collated(dels))}
        assert pds.spark.update_pipeline(spark, p, on) == 1
        stats = runners[-1].stats["s"]
        assert stats["ranged_by_spark"] == by_spark and stats["applied_ranges"] > 2, stats
        monkeypatch.undo()
        assert twin.update({"s": pds.Changes(upserts=ups, deletes=dels)}) == 1
        assert p.read("s").equals(twin.read("s")), "the parts' order is the key order"
        assert p.read("s").num_rows == ups.num_rows
        got, want = p.changes("s"), twin.changes("s")
        assert got.upserts.equals(want.upserts) and got.deletes.equals(want.deletes)
        assert got.deletes.num_rows == dels.num_rows
        assert garbage(p) == []

    # A key both upserted and deleted in a first build: the local error.
    p = make("p/both")
    both = pa.table({"k": [int(ups["k"][7].as_py())], "j": [ups["j"][7].as_py()]}, schema=dels.schema)
    with pytest.raises(ValueError, match="both upserted and deleted"):
        pds.spark.update_pipeline(spark, p, {"s": (frame(spark, ups), frame(spark, both))})
    with pytest.raises(ValueError, match="both upserted and deleted"):
        make("p/both-local").update({"s": pds.Changes(upserts=ups, deletes=both)})
    assert pds.Pipeline.open(url, "p/both").version == 0
    assert garbage(pds.Pipeline.open(url, "p/both")) == []


@pytest.mark.spec("F")
def test_bad_source_changes_raise_the_local_errors_and_leave_nothing(spark: SparkSession, tmp_path: Path) -> None:
    """A null key, a value its column cannot hold exactly, a column of the
    wrong type and a key both upserted and deleted: the error and message
    Pipeline.update gives, nothing committed and nothing left (the rows are
    checked by the tasks that apply them: what they wrote is removed)."""
    url = (tmp_path / "lake").as_uri()
    root = tmp_path / "lake" / "pipelines" / "bad"
    p = declare(url, "pipelines/bad")
    events: Model = {}
    scores: Model = {}
    assert pds.spark.update_pipeline(spark, p, on_spark(spark, initial(60, events, scores))) == 1
    before = objects(root)
    ok = {"id": [1, 2, 3], "user": ["a", "b", "c"], "n": [1, 2, 3]}
    cases: list[tuple[str, Any, Any]] = [
        ("a null key", {"events": pa.table({**ok, "id": [1, None, 3]})}, pds.SchemaMismatch),
        ("an inexact value", {"events": pa.table({**ok, "n": [1.0, 2.5, 3.0]})}, pds.SchemaMismatch),
        ("a column of another type", {"events": pa.table({**ok, "n": ["1", "2", "3"]})}, pds.SchemaMismatch),
        (
            "a key upserted and deleted",
            {"scores": (pa.table({"id": [1, 2], "w": [1, 2]}), pa.table({"id": [9, 2]}))},
            ValueError,
        ),
        (
            "a null deleted key",
            {"scores": (None, pa.table({"id": [None, 4]}, schema=pa.schema([("id", pa.int64())])))},
            pds.SchemaMismatch,
        ),
    ]
    for what, change, cls in cases:
        spark_change: dict[str, Any] = {}
        local_change: dict[str, Any] = {}
        for name, c in change.items():
            u, d = c if isinstance(c, tuple) else (c, None)
            spark_change[name] = (
                None if u is None else spark.createDataFrame(u),
                None if d is None else spark.createDataFrame(d),
            )
            local_change[name] = pds.Changes(upserts=u, deletes=d)
        with pytest.raises(cls) as local_err:
            p.update(local_change)
        with pytest.raises(cls) as spark_err:
            pds.spark.update_pipeline(spark, p, spark_change)
        assert str(spark_err.value) == str(local_err.value), what
        assert p.refresh() == 1, what
        assert objects(root) == before, f"{what}: {objects(root) ^ before}"


@pytest.mark.spec("F")
def test_a_source_task_failing_once_leaves_no_duplicates(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt of a source range task fails after it wrote a
    range's parts: Spark retries it, and the version holds each row once
    and no object of the failed attempt."""
    from pds.spark import _pipeline_sources as ps

    marker = tmp_path / "failed-once"

    class FailingOnce(ps._SourceTasks):  # type: ignore[misc, name-defined]
        """Defined here, so that cloudpickle sends it by value."""

        def apply(self, given: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            for n, row in enumerate(super().apply(given)):
                yield row
                if n == 0 and ctx is not None and ctx.attemptNumber() == 0 and ctx.partitionId() == 0:
                    marker.write_text("failed")
                    raise RuntimeError("injected: a source task fails after its first range")

    monkeypatch.setattr(ps, "_SourceTasks", FailingOnce)
    url = (tmp_path / "lake").as_uri()
    p = declare(url, "pipelines/source-retry")
    twin = declare(url, "pipelines/twin")
    events: Model = {}
    scores: Model = {}
    step = initial(200, events, scores)
    assert pds.spark.update_pipeline(spark, p, on_spark(spark, step)) == 1
    assert twin.update(local(step)) == 1
    ups = pa.table({"id": list(range(0, 200, 9)), "user": ["r"] * 23, "n": list(range(23))}, schema=EVENTS)
    for r in ups.to_pylist():
        events[r["id"]] = [{"user": r["user"], "n": r["n"]}]
    marker.unlink(missing_ok=True)  # the build's tasks failed once too
    assert pds.spark.update_pipeline(spark, p, {"events": frame(spark, ups)}) == 2
    assert marker.exists(), "no source task failed"
    assert twin.update({"events": ups}) == 2
    check(p, twin, events, scores, "a retried source task")
    assert len(p.read("events")) == len(twin.read("events"))
    assert garbage(p) == [], "the failed attempt's files were removed"
