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
from conftest import REMOTE, lake_url

import pds

from helpers import run_together

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


def check_every_version(t: pds.Table, url: str, what: str) -> None:
    latest = t.refresh()
    assert deltalake.DeltaTable(url).version() == latest, what
    for v in range(latest + 1):
        assert delta_ids(url, v) == pds_ids(t, v), f"{what}: version {v}"


def test_deltalake_reads_every_version_of_random_operations(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    t = pds.Table.create(url, "t", data=rows(list(range(500)), "a"), primary_key="id", row_group_size=50,
                         formats=["delta"])  # fmt: skip
    assert t.formats == ["delta"]
    table_url = str(tmp_path / "lake" / "t")
    check_every_version(t, table_url, "created")
    rng = random.Random(5)
    nxt = 500
    for step in range(12):
        op = rng.choice(["append", "key_range", "scattered", "row_groups", "upsert", "update", "compact"])
        if op == "append":
            t.append(rows(list(range(nxt, nxt + 120)), "b"))
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
            t.upsert(rows(list(range(lo, lo + 30)), "u"))
        elif op == "update":
            t.update([("id", "<", rng.randrange(nxt))], {"v": "w"})
        else:
            t.compact(min_deleted_fraction=0.05)
        check_every_version(t, table_url, f"step {step}: {op}")


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
    if kind == "gcs":
        return  # deltalake is not pointed at the GCS emulator here
    table_url = str(tmp_path / "lake" / "t") if kind == "file" else f"{url}/t"
    opts = delta_options(kind, options)
    for v in range(latest + 1):
        dt = deltalake.DeltaTable(table_url, version=v, storage_options=opts)
        got = deltalake.QueryBuilder().register("t", dt).execute("select id from t").read_all()
        assert sorted(pa.table(got).column("id").to_pylist()) == pds_ids(t, v), f"version {v}"


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
