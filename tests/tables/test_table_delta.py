"""The Delta Lake view of a table, read back by deltalake (delta-rs).

A table created with ``formats=["delta"]`` publishes ``_delta_log`` beside
its versions: after every operation, deltalake's rows at every version
equal pds's at that version (deleted rows applied as deletion vectors)."""

from __future__ import annotations

import datetime
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
import remote_store
from store_kinds import REMOTE, lake_url

import pds

from helpers import kill_while_held, run_together

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def delta_ids(url: str, version: int | None = None) -> list[int]:
    """The sorted ids deltalake reads at *version* (latest: None), deletion vectors applied."""
    dt = deltalake.DeltaTable(url) if version is None else deltalake.DeltaTable(url, version=version)
    got = deltalake.QueryBuilder().register("t", dt).execute("select id from t").read_all()
    return sorted(pa.table(got).column("id").to_pylist())


def pds_ids(t: pds.Table, version: int) -> list[int]:
    return sorted(t.at(version=version).to_arrow(columns=["id"]).column("id").to_pylist())


def rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i % 5}" for i in ids]}, schema=SCHEMA)


def check_every_version(t: pds.Table, url: str, what: str, opts: dict[str, str] | None = None,
                        since: int = 0) -> None:  # fmt: skip
    """deltalake opens *t*'s latest version, and reads at every version from
    *since* that pds still holds (vacuum removes older ones) the ids pds
    reads; at the latest, every column too."""
    opts = opts or {}
    latest = t.refresh()
    assert deltalake.DeltaTable(url, storage_options=opts).version() == latest, what
    for v in range(since, latest + 1):
        try:
            want = pds_ids(t, v)
        except pds.NotFound:
            continue  # vacuumed
        dt = deltalake.DeltaTable(url, version=v, storage_options=opts)
        got = deltalake.QueryBuilder().register("t", dt).execute("select id from t").read_all()
        assert sorted(pa.table(got).column("id").to_pylist()) == want, f"{what}: version {v}"
    dt = deltalake.DeltaTable(url, storage_options=opts)
    names = t.schema.names
    got = pa.table(deltalake.QueryBuilder().register("t", dt).execute(f"select {', '.join(names)} from t").read_all())
    mine = t.to_arrow()

    def key(r: dict[str, Any]) -> str:
        return json.dumps(r, sort_keys=True, default=str)

    assert sorted(got.select(names).to_pylist(), key=key) == sorted(mine.select(names).to_pylist(), key=key), (
        f"{what}: every column"
    )


def batch(t: pds.Table, ids: list[int], tag: str) -> pa.Table:
    """Rows *ids* in *t*'s current schema: ``id``, ``v`` and any columns
    merges added (``c1``, ``c2``, ...: ``id * n``)."""
    data: dict[str, Any] = {"id": ids, "v": [f"{tag}{i % 5}" for i in ids]}
    for name in t.schema.names[2:]:
        data[name] = [i * int(name[1:]) for i in ids]
    return pa.table(data, schema=t.schema)


@pytest.mark.parametrize(("kind", "start"), [("file", "create"), ("s3", "enable")])
def test_deltalake_reads_every_version_of_random_operations(
    kind: str, start: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Random appends, deletes of every kind, upserts, updates, compactions,
    schema-merge appends and vacuums; after each, deltalake reads every
    version pds holds as pds does. ``enable``: the view is enabled after
    three operations and starts with a checkpoint."""
    url, options = lake_url(kind, tmp_path, request)
    formats = ["delta"] if start == "create" else []
    t = pds.Table.create(url, "t", data=rows(list(range(500)), "a"), primary_key="id", row_group_size=50,
                         formats=formats, **options)  # fmt: skip
    table_url = str(tmp_path / "lake" / "t") if kind == "file" else f"{url}/t"
    opts = delta_options(kind, options)
    since = 0
    if start == "enable":
        t.append(rows(list(range(500, 600)), "b"))
        t.delete([("v", "==", "a1")])
        t.delete([("id", ">=", 20), ("id", "<", 60)])
        assert t.formats == []
        since = t.enable_format("delta")
        assert (since, t.formats) == (4, ["delta"])
        assert t.history(1)[0]["operation"] == "enable_format"
        with pytest.raises(deltalake.exceptions.TableNotFoundError):
            deltalake.DeltaTable(table_url, version=3, storage_options=opts)
    assert t.formats == ["delta"]
    check_every_version(t, table_url, "start", opts, since)
    rng = random.Random(5 if kind == "file" else 6)
    nxt = 600
    merged = 0
    ops = ["append", "key_range", "scattered", "row_groups", "upsert", "update", "compact", "merge", "vacuum"]
    plan = ops + [rng.choice(ops) for _ in range(4)]  # every operation at least once
    rng.shuffle(plan)
    for step, op in enumerate(plan):
        if op == "append":
            t.append(batch(t, list(range(nxt, nxt + 120)), "b"))
            nxt += 120
        elif op == "key_range":
            lo = rng.randrange(nxt)
            t.delete([("id", ">=", lo), ("id", "<", lo + 40)])
        elif op == "scattered":
            t.delete([("v", "==", f"a{rng.randrange(5)}")])
        elif op == "row_groups":
            lo = rng.randrange(0, nxt, 50)
            t.delete([("id", ">=", lo), ("id", "<", lo + 100), ("v", "!=", "none")])
        elif op == "upsert":
            lo = rng.randrange(nxt)
            t.upsert(batch(t, list(range(lo, lo + 30)), "u"))
        elif op == "update":
            t.update([("id", "<", rng.randrange(nxt))], {"v": "w"})
        elif op == "merge":
            merged += 1
            wide = batch(t, list(range(nxt, nxt + 50)), "m")
            wide = wide.append_column(f"c{merged + 1}", pa.array([i * (merged + 1) for i in range(nxt, nxt + 50)]))
            t.append(wide, schema_mode="merge")
            nxt += 50
        elif op == "vacuum":
            t.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0), dry_run=False)
        else:
            t.compact(min_deleted_fraction=0.05)
        check_every_version(t, table_url, f"step {step}: {op}", opts, since)


def test_bad_formats_are_refused_before_any_io(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    with pytest.raises(ValueError, match="iceberg"):
        pds.Table.create(url, "t", schema=SCHEMA, formats=["iceberg"])
    with pytest.raises(TypeError, match="formats"):
        pds.Table.create(url, "t", schema=SCHEMA, formats="delta")  # type: ignore[arg-type]
    unsigned = pa.schema([("id", pa.int64()), ("n", pa.uint32())])
    with pytest.raises(TypeError, match='column "n" cannot be written: UInt32 has no exact Delta'):
        pds.Table.create(url, "t", schema=unsigned, formats=["delta"])
    assert not (tmp_path / "lake").exists() or not any((tmp_path / "lake").rglob("*"))
    # A schema-merge append that would add such a column: refused before it commits.
    t = pds.Table.create(url, "t", data=rows([1, 2], "a"), formats=["delta"])
    wide = rows([3], "b").append_column("n", pa.array([7], pa.uint32()))
    with pytest.raises(TypeError, match='column "n" cannot be written: UInt32'):
        t.append(wide, schema_mode="merge")
    assert t.refresh() == 0 and t.schema == SCHEMA
    assert len(list((tmp_path / "lake" / "t" / "data").iterdir())) == 1, "its file was removed"
    assert t.append(rows([3], "b").append_column("n", pa.array([7], pa.int64())), schema_mode="merge") == 1
    assert delta_ids(str(tmp_path / "lake" / "t")) == [1, 2, 3]


def test_other_delta_writers_refuse_and_sync_fills_a_lost_entry(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    t = pds.Table.create(url, "t", data=rows(list(range(100)), "a"), primary_key="id", formats=["delta"])
    t.delete([("id", "<", 10)])
    table_url = str(tmp_path / "lake" / "t")
    with pytest.raises(Exception, match="pdsManaged"):
        deltalake.write_deltalake(table_url, rows([1000], "x"), mode="append")
    with pytest.raises(Exception, match="pdsManaged"):
        deltalake.DeltaTable(table_url).delete("id = 50")
    assert delta_ids(table_url) == list(range(10, 100)) == pds_ids(t, 1)
    # A writer that stopped between its commit and its entry: the log lags; sync fills it.
    entry = tmp_path / "lake" / "t" / "_delta_log" / f"{1:020}.json"
    written = entry.read_bytes()
    entry.unlink()
    assert deltalake.DeltaTable(table_url).version() == 0
    assert t.sync_formats() == {"delta": [1]}
    assert entry.read_bytes() == written
    assert t.sync_formats() == {"delta": []}


def test_vacuum_keeps_what_the_delta_view_reads(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    t = pds.Table.create(url, "t", data=rows(list(range(300)), "a"), primary_key="id", formats=["delta"])
    t.delete([("v", "==", "a1")])
    t.compact(min_deleted_fraction=0.0)
    t.delete([("v", "==", "a2")])
    table_url = str(tmp_path / "lake" / "t")
    want = pds_ids(t, t.refresh())
    t.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0), dry_run=False)
    assert delta_ids(table_url) == want


APPENDER = r"""
import json, sys
import pyarrow as pa, pds
url, options, worker, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = pds.Table.open(url, "t", **options)
print("ready", flush=True)
sys.stdin.readline()  # start together
for i in range(count):
    base = (worker * 1000 + i) * 10
    t.append(pa.table({"id": pa.array(range(base, base + 10), pa.int64()), "v": ["r"] * 10}))
    t.delete([("id", "==", base)])
print("done", flush=True)
"""


def delta_options(kind: str, options: dict[str, str]) -> dict[str, str]:
    """deltalake's storage options for a pds store's (S3 only here)."""
    if kind != "s3":
        return {}
    return {
        "AWS_ENDPOINT_URL": options["endpoint"],
        "AWS_REGION": options["region"],
        "AWS_ACCESS_KEY_ID": options["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": options["secret_access_key"],
        "AWS_ALLOW_HTTP": "true",
    }


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_racing_writers_publish_every_version_with_no_gap(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Four processes append and delete at once: each publishes its version
    after its commit, with any entry before it that is still missing; the
    log ends complete, every entry as pds computes it, and (file, S3)
    deltalake reads every version as pds does."""
    url, options = lake_url(kind, tmp_path, request)
    pds.Table.create(url, "t", SCHEMA, primary_key="id", formats=["delta"], **options)
    run_together([[sys.executable, "-c", APPENDER, url, json.dumps(options), str(w), "3"] for w in range(4)], 300)
    t = pds.Table.open(url, "t", **options)
    latest = t.refresh()
    assert latest == 24
    store = pds.open_store(url, **options)
    entries = sorted(str(f.path).rsplit("/", 1)[-1] for f in store.list_files("t/_delta_log"))
    assert entries == [f"{v:020}.json" for v in range(latest + 1)]
    assert t.sync_formats() == {"delta": []}
    table_url = str(tmp_path / "lake" / "t") if kind == "file" else f"{url}/t"
    opts = delta_options(kind, options)
    if kind == "gcs":
        # deltalake is not pointed at the GCS emulator: it reads a copy of every object.
        table_url = str(copy_down(store, "t", tmp_path / "copy"))
    for v in range(latest + 1):
        dt = deltalake.DeltaTable(table_url, version=v, storage_options=opts)
        got = deltalake.QueryBuilder().register("t", dt).execute("select id from t").read_all()
        assert sorted(pa.table(got).column("id").to_pylist()) == pds_ids(t, v), f"version {v}"


def copy_down(store: Any, key: str, into: Path) -> Path:
    """Every object under *key* in *store*, copied below *into*; the copy of *key*."""
    for f in store.list_files(key, recursive=True):
        target = into / str(f.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.read_bytes(str(f.path)))
    return into / key


def request_path(f: Any, key: str) -> str:
    """The request path of *key* under the faulty prefix (``/bucket/prefix/key``), as a regex."""
    bucket, prefix = str(f.url).removeprefix("s3://").split("/", 1)
    return re.escape(f"/{bucket}/{prefix}/{key}")


def entries_of(store: Any) -> list[str]:
    return sorted(str(f.path).rsplit("/", 1)[-1] for f in store.list_files("t/_delta_log"))


def test_a_lost_entry_reply_is_the_writers_own_entry(faulty: Any) -> None:
    """The entry PUT is applied but its reply lost: the retry meets the
    object, reads it back, and finds pds's bytes; the log is complete."""
    t = pds.Table.create(faulty.url, "t", data=rows(list(range(50)), "a"), primary_key="id", formats=["delta"],
                         **faulty.options)  # fmt: skip
    rule = faulty.proxy.drop_reply("PUT", request_path(faulty, "t/_delta_log/") + r"0+1\.json$", times=1)
    assert t.delete([("id", "<", 5)]) == 1
    faulty.proxy.clear_rules()
    assert rule.hits == 1
    assert entries_of(faulty.direct) == [f"{v:020}.json" for v in range(2)]
    assert t.sync_formats() == {"delta": []}


def test_a_failed_entry_leaves_the_version_committed_and_the_next_commit_fills_it(
    faulty: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Every PUT of version 1's entry fails: the delete is committed anyway
    (the Delta log stays at version 0, a consistent older version, and a
    warning says so); the next commit writes entries 1 and 2."""
    t = pds.Table.create(faulty.url, "t", data=rows(list(range(50)), "a"), primary_key="id", formats=["delta"],
                         **faulty.options)  # fmt: skip
    rule = faulty.proxy.fail("PUT", request_path(faulty, "t/_delta_log/") + r"0+1\.json$", status=503, times=None)
    with caplog.at_level("WARNING"):
        assert t.delete([("id", "<", 5)]) == 1
    faulty.proxy.clear_rules()
    assert rule.hits >= 1
    assert any("Delta log entry was not published" in r.getMessage() for r in caplog.records), caplog.text
    assert entries_of(faulty.direct) == [f"{0:020}.json"]
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(5, 50))
    assert t.append(rows([100], "b")) == 2
    assert entries_of(faulty.direct) == [f"{v:020}.json" for v in range(3)]


def test_pds_show_names_the_published_formats(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from pds.cli import main

    url = (tmp_path / "lake").as_uri()
    pds.Table.create(url, "t", data=rows([1, 2], "a"), formats=["delta"])
    pds.Table.create(url, "plain", data=rows([1, 2], "a"))
    runner = CliRunner()
    shown = json.loads(runner.invoke(main, ["show", url, "t", "--json"], catch_exceptions=False).output)
    assert shown["formats"] == ["delta"]
    plain = json.loads(runner.invoke(main, ["show", url, "plain", "--json"], catch_exceptions=False).output)
    assert plain["formats"] == []
    human = runner.invoke(main, ["show", url, "t"], catch_exceptions=False).output
    assert "delta" in human


def test_exist_ok_compares_the_published_formats(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    pds.Table.create(url, "t", schema=SCHEMA, formats=["delta"])
    assert pds.Table.create(url, "t", schema=SCHEMA, formats=["delta"], exist_ok=True).formats == ["delta"]
    with pytest.raises(pds.SchemaMismatch, match="formats"):
        pds.Table.create(url, "t", schema=SCHEMA, exist_ok=True)
    pds.Table.create(url, "plain", schema=SCHEMA)
    with pytest.raises(pds.SchemaMismatch, match="formats"):
        pds.Table.create(url, "plain", schema=SCHEMA, formats=["delta"], exist_ok=True)


def test_enable_format_publishes_an_existing_table_from_a_checkpoint(tmp_path: Path) -> None:
    """``pds sync --enable delta`` on a table created without the view: one
    commit, a checkpoint of it (deletes as deletion vectors) that deltalake
    opens, entries after it; enabling again commits nothing. Bad formats and
    columns with no Delta type are refused with nothing written."""
    from click.testing import CliRunner

    from pds.cli import main

    url = (tmp_path / "lake").as_uri()
    t = pds.Table.create(url, "t", data=rows(list(range(300)), "a"), primary_key="id", row_group_size=50)
    t.delete([("v", "==", "a3")])
    t.delete([("id", ">=", 100), ("id", "<", 200), ("v", "!=", "none")])
    with pytest.raises(ValueError, match="iceberg"):
        t.enable_format("iceberg")
    unsigned = pds.Table.create(url, "u", data=pa.table({"id": pa.array([1], pa.uint32())}))
    with pytest.raises(TypeError, match='column "id" cannot be written: UInt32 has no exact Delta'):
        unsigned.enable_format("delta")
    assert unsigned.refresh() == 0 and unsigned.formats == []
    assert t.refresh() == 2 and not (tmp_path / "lake" / "t" / "_delta_log").exists()

    runner = CliRunner()
    out = runner.invoke(main, ["sync", url, "t", "--enable", "delta", "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"key": "t", "version": 3, "formats": ["delta"], "delta written": [3]}
    log = tmp_path / "lake" / "t" / "_delta_log"
    assert sorted(p.name for p in log.iterdir()) == [f"{3:020}.checkpoint.parquet", "_last_checkpoint"]
    table_url = str(tmp_path / "lake" / "t")
    t.refresh()
    assert t.formats == ["delta"]
    check_every_version(t, table_url, "enabled", since=3)
    t.delete([("id", "<", 20)])
    check_every_version(t, table_url, "a delete after", since=3)
    assert t.enable_format("delta") == 4, "already published: nothing committed"
    out = runner.invoke(main, ["sync", url, "t"], catch_exceptions=False)
    assert out.exit_code == 0 and "nothing to publish" in out.output, out.output
    plain = runner.invoke(main, ["sync", url, "u"], catch_exceptions=False)
    assert plain.exit_code == 0 and "publishes no other format" in plain.output, plain.output


def test_a_checkpoint_every_hundred_versions_opens_the_table_after_vacuum(tmp_path: Path) -> None:
    """Version 100 gets a checkpoint and ``_last_checkpoint``; once vacuum
    removes what only older versions needed (entries below the checkpoint,
    superseded deletion vectors), deltalake still opens the latest version
    and every one pds holds."""
    url = (tmp_path / "lake").as_uri()
    t = pds.Table.create(url, "t", data=rows(list(range(100)), "a"), primary_key="id", formats=["delta"])
    t.delete([("v", "==", "a1")])
    for i in range(2, 101):
        if i % 25 == 0:
            t.delete([("id", "==", i - 1)])
        else:
            t.append(rows([1000 + i], "b"))
    log = tmp_path / "lake" / "t" / "_delta_log"
    assert (log / f"{100:020}.checkpoint.parquet").exists()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 100
    table_url = str(tmp_path / "lake" / "t")
    t.append(rows([5000], "c"))
    check_every_version(t, table_url, "checkpointed")
    vectors = {p.name for p in (tmp_path / "lake" / "t").glob("deletion_vector_*.bin")}
    removed = t.vacuum(retain=datetime.timedelta(0), min_age=datetime.timedelta(0), dry_run=False)
    assert sum(k.startswith("_delta_log/") for k in removed) == 100, removed
    assert sorted(p.name for p in log.iterdir()) == [
        f"{100:020}.checkpoint.parquet", f"{100:020}.json", f"{101:020}.json", "_last_checkpoint"
    ]  # fmt: skip
    left = {p.name for p in (tmp_path / "lake" / "t").glob("deletion_vector_*.bin")}
    assert left < vectors and len(left) == 1, (left, vectors)
    check_every_version(t, table_url, "vacuumed", since=100)
    t.delete([("id", "<", 50)])
    check_every_version(t, table_url, "after vacuum", since=100)
    assert t.sync_formats() == {"delta": []}


KILLED_PUBLISHER = r"""
import json, sys
import pyarrow as pa, pds
url, options = sys.argv[1], json.loads(sys.argv[2])
t = pds.Table.open(url, "t", **options)
t.delete([("id", "<", 10)])
"""


def test_a_writer_killed_between_its_commit_and_its_entry(faulty: Any) -> None:
    """SIGKILL while version 1's entry PUT is in flight (the commit's CAS
    done, its deletion vector written): the version stands, the Delta log
    stays at version 0 (a consistent older version, no gap), and the next
    commit writes entries 1 and 2, equal to what pds computes."""
    t = pds.Table.create(faulty.url, "t", data=rows(list(range(50)), "a"), primary_key="id", formats=["delta"],
                         **faulty.options)  # fmt: skip
    argv = [sys.executable, "-c", KILLED_PUBLISHER, faulty.url, json.dumps(faulty.options)]
    rule = kill_while_held(faulty.proxy, "PUT", request_path(faulty, "t/_delta_log/") + r"0+1\.json$", argv)
    assert rule.exhausted
    faulty.proxy.clear()
    assert t.refresh() == 1, "the version is committed"
    assert entries_of(faulty.direct) == [f"{0:020}.json"]
    assert t.append(rows([100], "b")) == 2
    assert entries_of(faulty.direct) == [f"{v:020}.json" for v in range(3)]
    assert t.sync_formats() == {"delta": []}, "every entry equals pds's"
    assert sorted(t.to_arrow().column("id").to_pylist()) == [*range(10, 50), 100]


def test_partial_rewrites_of_a_segmented_table_race_through_faults(faulty: Any) -> None:
    """Three writers at once run point deletes, upserts, updates and appends
    on a table of three segments, each rewrite loading only the segments
    its keys can be in, while the store fails requests and loses replies of
    applied PUTs (manifests, segments, log entries): every operation lands
    once, no row is lost or duplicated, and deltalake reads each version as
    pds does."""
    import threading

    def tagged(ids: list[int], tag: str) -> pa.Table:
        return pa.table({"id": ids, "v": [tag] * len(ids)}, schema=SCHEMA)

    t = pds.Table.create(faulty.url, "t", data=tagged(list(range(64)), "a"), primary_key="id", target_file_size=1,
                         formats=["delta"], **faulty.options)  # fmt: skip
    for i in range(40):
        t.append(tagged([1000 + i], "a"))
    assert [s["file_count"] for s in t.manifest["segments"]] == [64, 32, 8]
    model = {i: "a" for i in [*range(64), *range(1000, 1040)]}
    base = request_path(faulty, "t/")
    rules = [
        faulty.proxy.fail("PUT", base + r"manifest/v\d{8}\.json$", status=503, times=2),
        faulty.proxy.drop_reply("PUT", base + r"manifest/v\d{8}\.json$", times=2),
        faulty.proxy.drop_reply("PUT", base + r"segment/[^/]+\.json$", times=2),
        faulty.proxy.fail("GET", base + r"segment/[^/]+\.json$", status=503, times=2),
        faulty.proxy.drop_reply("PUT", base + r"_delta_log/\d{20}\.json$", times=1),
    ]
    errors: list[str] = []

    def writer(w: int) -> None:
        h = pds.Table.open(faulty.url, "t", **faulty.options)
        try:
            for j in range(4):
                k = 4 + 16 * w + 3 * j
                h.delete([("id", "==", k)])
                h.upsert(tagged([k + 1, 5000 + 10 * w + j], "u"))
                h.update([("id", "==", k + 2)], {"v": "w"})
                h.append(tagged([9000 + 10 * w + j], "n"))
        except Exception as e:  # noqa: BLE001 - reported below with the others
            errors.append(f"writer {w}: {e!r}")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    faulty.proxy.clear_rules()
    assert not errors, errors
    assert all(r.hits >= 1 for r in rules), [(r.action, r.path, r.hits) for r in rules]
    for w in range(3):
        for j in range(4):
            k = 4 + 16 * w + 3 * j
            del model[k]
            model.update({k + 1: "u", 5000 + 10 * w + j: "u", k + 2: "w", 9000 + 10 * w + j: "n"})
    assert t.refresh() == 40 + 3 * 4 * 4, "every operation committed once"
    got = t.to_arrow()
    ids = got.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "no duplicated row"
    assert dict(zip(ids, got.column("v").to_pylist(), strict=True)) == model
    assert len(t.manifest["segments"]) >= 3
    dt = deltalake.DeltaTable(f"{faulty.url}/t", storage_options=delta_options("s3", faulty.direct_options))
    assert dt.version() == t.version
    # Every fourth version of the race and the last (each read is ~100 GETs of one-row files).
    for v in [*range(41, t.version, 4), t.version]:
        dt.load_as_version(v)
        got = pa.table(deltalake.QueryBuilder().register("t", dt).execute("select id, v from t").read_all())
        mine = t.at(version=v).to_arrow()
        assert sorted(zip(got["id"].to_pylist(), got["v"].to_pylist(), strict=True)) == sorted(
            zip(mine["id"].to_pylist(), mine["v"].to_pylist(), strict=True)
        ), f"version {v}"


@pytest.mark.parametrize("fault", ["fail", "drop_reply"])
def test_a_compaction_in_windows_under_a_fault_commits_each_window_once(faulty: Any, fault: str) -> None:
    """Two segments of 260 one-row files: a compaction works in two windows, each
    its own version (the last segment's first). The second window's manifest PUT
    fails every time (the first window's version stays, the call raises, and a
    retry compacts the rest) or lands with its reply lost (committed once). Every
    version reads the same rows in pds and in deltalake."""
    url, opts = f"{faulty.url}/t", delta_options("s3", faulty.direct_options)
    every = list(range(520))
    SIZE = 64 << 20  # the files are created one row each (1 byte), and merged up to this
    made = pds.Table.create(faulty.direct, "t", data=rows(every[:260], "a"), target_file_size=1, formats=["delta"])
    made.append(rows(every[260:], "a"))
    assert [s["file_count"] for s in made.manifest["segments"]] == [260, 260]
    writer = faulty.open(max_retries="0") if fault == "fail" else faulty.store
    t = pds.Table.open(writer, "t")
    bucket, prefix = faulty.url.split("/", 3)[2:]
    path = rf"^/{bucket}/{prefix}/t/manifest/v00000003\.json$"
    if fault == "fail":
        rule = faulty.proxy.fail("PUT", path, status=503, times=None)
    else:
        rule = faulty.proxy.drop_reply("PUT", path, how="close", times=1)
    try:
        t.compact(target_file_size=SIZE)
        raised: Exception | None = None
    except (pds.CommitUnknown, remote_store.RemoteStoreError) as e:
        raised = e
    finally:
        faulty.proxy.clear_rules()
    assert rule.hits >= 1, "the second window's commit was attempted"
    reader = pds.Table.open(faulty.direct, "t")
    first = reader.at(version=2)
    assert first.manifest["operation"] == "compact"
    assert len(first.manifest["data_files"]) == 261, "the last segment's window: 260 files into 1"
    if fault == "fail":
        assert raised is not None and reader.version == 2, (raised, reader.version)
        with pytest.raises(remote_store.NotFound, match="has no version"):
            reader.at(version=3)
        assert pds.Table.open(faulty.direct, "t").compact(target_file_size=SIZE) == 3, "the other window"
    else:
        assert raised is None or isinstance(raised, pds.CommitUnknown), raised
    reader = pds.Table.open(faulty.direct, "t")
    assert reader.version == 3
    assert len(reader.manifest["data_files"]) == 2
    assert pds_ids(reader, 0) == every[:260]
    for v in range(1, 4):
        assert pds_ids(reader, v) == every, f"version {v}"
    check_every_version(reader, url, f"compaction under {fault}", opts)
