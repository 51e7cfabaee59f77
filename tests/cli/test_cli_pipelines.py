"""Pipelines in every ``pds`` command (issue U §1.8), and ``pds ls`` over a
store holding a pipeline and a damaged table (§1.2)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

import pds
from pds.cli import main

from helpers import declare_words


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    p = declare_words(pds.Pipeline.create(url, "words"))
    p.update({"lines": pa.table({"n": [1, 2], "text": ["a b", "b c"]})})
    p.update({"lines": pds.Changes(deletes=pa.table({"n": [1]}))})
    t = pds.Table.create(url, "events", data=pa.table({"id": list(range(10))}))
    t.delete([("id", "<", 3)])
    pds.Table.create(url, "broken", data=pa.table({"id": [1]}))
    pds.ParquetDatasetStore(pds.open_store(url)).write_dataset(pa.table({"x": [1, 2]}), "ds")
    return url


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def damage(root: Path, key: str) -> None:
    m = root / key / "manifest" / "v00000000.json"
    m.write_bytes(m.read_bytes()[:-20] + b"garbage")


@pytest.mark.spec("U-1.2")
def test_ls_lists_pipelines_tables_with_rows_and_a_damaged_table_with_its_error(lake: str, tmp_path: Path) -> None:
    code, out = run("ls", lake, "--json")
    assert code == 0, out
    found = {e["key"]: e for e in json.loads(out)}
    assert found["words"] == {
        "key": "words",
        "kind": "pipeline",
        "version": 2,
        "sources": ["lines"],
        "stages": ["words"],
    }
    assert found["events"] == {"key": "events", "kind": "table", "version": 1, "files": 1, "rows": 7}
    assert found["ds"] == {"key": "ds", "kind": "dataset", "rows": 2, "parts": 1}
    damage(tmp_path / "lake", "broken")
    code, out = run("ls", lake, "--json")
    assert code == 1, "a damaged entry: exit 1, after listing everything"
    found = {e["key"]: e for e in json.loads(out)}
    assert set(found) == {"words", "events", "broken", "ds"}
    assert found["broken"]["kind"] == "table"
    assert found["broken"]["error"].startswith("ManifestCorrupted: ")
    code, out = run("ls", lake)
    assert code == 1
    assert "pipeline" in out and "ManifestCorrupted" in out and "Traceback" not in out


@pytest.mark.spec("U-1.2")
def test_ls_tells_each_kind_by_the_markers_at_its_key(lake: str, tmp_path: Path) -> None:
    # A killed dataset writer's claim alone: an unfinished dataset, not a folder.
    (tmp_path / "lake" / "half").mkdir()
    (tmp_path / "lake" / "half" / "_WRITING").write_bytes(b"")
    # A folder holding a dataset below it is a folder itself.
    (tmp_path / "lake" / "outer" / "inner").mkdir(parents=True)
    (tmp_path / "lake" / "outer" / "inner" / "_SUCCESS").write_bytes(b"")
    code, out = run("ls", lake, "--json")
    found = {e["key"]: e for e in json.loads(out)}
    assert found["half"]["kind"] == "dataset"
    assert found["half"]["error"].startswith("unfinished: no _SUCCESS"), found["half"]
    assert found["outer"] == {"key": "outer", "kind": "folder"}
    assert (found["words"]["kind"], found["events"]["kind"], found["ds"]["kind"]) == ("pipeline", "table", "dataset")
    assert code == 1, "an unreadable entry: exit 1"


@pytest.mark.spec("U-1.8")
def test_show_a_pipeline(lake: str) -> None:
    code, out = run("show", lake, "words", "--json")
    assert code == 0, out
    info = json.loads(out)
    assert (info["kind"], info["version"], info["operation"]) == ("pipeline", 2, "update")
    nodes = {n["name"]: n for n in info["nodes"]}
    assert nodes["lines"]["kind"] == "source" and nodes["lines"]["rows"] == 1
    assert nodes["lines"]["key"] == ["n"] and nodes["lines"]["values"] == ["text"]
    assert nodes["words"]["kind"] == "stage" and nodes["words"]["reads"] == ["lines"]
    assert nodes["words"]["rows"] == 2 and nodes["words"]["key"] == ["word"]
    assert [c["column"] for c in nodes["words"]["schema"]] == ["word", "n"]
    code, out = run("show", lake, "words")
    assert code == 0 and "lines" in out and "stage" in out


@pytest.mark.spec("U-1.8")
def test_history_of_a_pipeline(lake: str) -> None:
    code, out = run("history", lake, "words", "--json")
    assert code == 0, out
    rows = json.loads(out)
    assert [r["version"] for r in rows] == [2, 1, 0]
    assert [r["operation"] for r in rows] == ["update", "update", "create"]
    assert rows[0]["rows"] == {"lines": 1, "words": 2}
    assert rows[1]["rows"] == {"lines": 2, "words": 4}
    assert rows[1]["parameters"]["sources"]["lines"] == {"upserts": 2, "deletes": 0}
    code, out = run("history", lake, "words", "--json", "--limit", "1")
    assert [r["version"] for r in json.loads(out)] == [2]
    code, out = run("history", lake, "words")
    assert code == 0 and "lines +2 -0" in out and "words 2" in out


@pytest.mark.spec("U-1.8")
def test_scan_a_pipeline_stage(lake: str) -> None:
    code, out = run("scan", lake, "words")
    assert code == 2 and "--stage" in out and "lines, words" in out
    code, out = run("scan", lake, "words", "--stage", "nope")
    assert code == 2 and "lines, words" in out
    code, out = run("scan", lake, "words", "--stage", "words", "--json")
    assert code == 0, out
    assert [json.loads(line) for line in out.splitlines()] == [{"word": "b", "n": 2}, {"word": "c", "n": 2}]
    code, out = run("scan", lake, "words", "--stage", "words", "--version", "1", "--filter", "n == '1'", "--json")
    assert [json.loads(line)["word"] for line in out.splitlines()] == ["a", "b"]
    code, out = run("scan", lake, "words", "--stage", "lines", "--columns", "text", "--json")
    assert [json.loads(line) for line in out.splitlines()] == [{"text": "b c"}]
    code, out = run("scan", lake, "words", "--stage", "words", "--filter", "nope == 1")
    assert code == 2 and "word, n" in out
    code, out = run("scan", lake, "events", "--stage", "words")
    assert code == 2 and "not a pipeline" in out


@pytest.mark.spec("U-1.8")
def test_verify_a_pipeline(lake: str, tmp_path: Path) -> None:
    code, out = run("verify", lake, "words", "--json")
    assert code == 0, out
    results = json.loads(out)
    assert results and {r["status"] for r in results} == {"ok"}
    assert all(r["file"].startswith("words/nodes/") for r in results)
    part = tmp_path / "lake" / results[0]["file"]
    part.unlink()
    code, out = run("verify", lake, "words", "--json")
    assert code == 1
    assert {r["file"]: r["status"] for r in json.loads(out)}[results[0]["file"]] == "MISSING"


@pytest.mark.spec("U-1.8")
def test_vacuum_a_pipeline(lake: str) -> None:
    code, out = run("vacuum", lake, "words", "--json")
    assert code == 0, out
    assert json.loads(out)["applied"] is False
