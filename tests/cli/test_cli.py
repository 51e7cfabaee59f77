"""The ``pds`` command (issue D-11), through click's runner and as the
installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner

import pds
from pds.cli import main, parse_duration, parse_filter


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    t = pds.Table.create(
        url, "events", data=pa.table({"id": list(range(100)), "c": [str(i % 3) for i in range(100)]}), row_group_size=10
    )
    t.delete([("c", "==", "1")])
    pds.ParquetDatasetStore(pds.open_store(url)).write_dataset(pa.table({"x": [1, 2]}), "ds")
    return url


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


@pytest.mark.spec("D-11")
def test_parsers() -> None:
    assert parse_filter("id >= 5") == ("id", ">=", 5)
    assert parse_filter('name == "a b"') == ("name", "==", "a b")
    assert parse_filter("name = x") == ("name", "==", "x")
    assert parse_filter("id in [1, 2]") == ("id", "in", [1, 2])
    assert parse_filter("id not in [1]") == ("id", "not in", [1])
    assert parse_filter("v is_null") == ("v", "is_null", None)
    assert parse_duration("7d").days == 7
    assert parse_duration("90m").total_seconds() == 5400
    for bad in ("id", "id >=", "v is_null 3"):
        with pytest.raises(click.BadParameter, match=r"expected|missing|takes no"):
            parse_filter(bad)


@pytest.mark.spec("D-11")
def test_ls_show_history_scan_as_json(lake: str) -> None:
    code, out = run("ls", lake, "--json")
    assert code == 0
    found = {e["key"]: e for e in json.loads(out)}
    assert found["events"] == {"key": "events", "kind": "table", "version": 1, "files": 1, "rows": 67}
    assert found["ds"] == {"key": "ds", "kind": "dataset", "rows": 2, "parts": 1}
    code, out = run("show", lake, "events", "--json")
    info = json.loads(out)
    assert (info["rows"], info["stored_rows"], info["deleted_rows"], info["version"]) == (67, 100, 33, 1)
    assert [c["column"] for c in info["schema"]] == ["id", "c"]
    code, out = run("history", lake, "events", "--json")
    assert [h["operation"] for h in json.loads(out)] == ["delete", "create"]
    code, out = run("scan", lake, "events", "--filter", "id >= 90", "--columns", "id", "--limit", "3", "--json")
    assert [json.loads(line) for line in out.splitlines()] == [{"id": 90}, {"id": 92}, {"id": 93}]
    code, out = run("scan", lake, "ds", "--json")
    assert [json.loads(line)["x"] for line in out.splitlines()] == [1, 2]
    code, out = run("show", lake, "events")
    assert code == 0 and "deleted_rows" in out  # a readable table


@pytest.mark.spec("D-11")
def test_verify_compact_vacuum(lake: str, tmp_path: Path) -> None:
    code, out = run("verify", lake, "events", "--json")
    assert code == 0 and {r["status"] for r in json.loads(out)} == {"ok"}
    code, out = run("compact", lake, "events", "--min-deleted-fraction", "0.2", "--json")
    assert code == 0 and json.loads(out)["version"] == 2
    code, out = run("vacuum", lake, "events", "--retain", "0s", "--min-age", "0s", "--json")
    planned = json.loads(out)["would_remove"]
    assert "manifest/v00000000.json" in planned
    assert (tmp_path / "lake" / "events" / "manifest" / "v00000000.json").exists(), "dry run by default"
    code, out = run("vacuum", lake, "events", "--retain", "0s", "--min-age", "0s", "--apply", "--json")
    assert json.loads(out)["removed"] == planned
    assert not (tmp_path / "lake" / "events" / "manifest" / "v00000000.json").exists()
    # A damaged file fails verify with exit code 1.
    data = next((tmp_path / "lake" / "events" / "data").glob("*.parquet"))
    raw = bytearray(data.read_bytes())
    raw[10] ^= 0xFF
    data.write_bytes(bytes(raw))
    code, out = run("verify", lake, "events", "--json")
    assert code == 1 and json.loads(out)[0]["status"] == "CHECKSUM MISMATCH"


@pytest.mark.spec("D-11")
def test_errors_options_and_the_console_script(lake: str) -> None:
    code, out = run("show", lake, "absent")
    assert code == 1 and "NotFound" in out
    code, out = run("scan", lake, "events", "--filter", "nope")
    assert code != 0 and "column op value" in out
    code, out = run("ls", "memory://", "--option", "bogus")
    assert code != 0 and "key=value" in out
    code, out = run("ls", "memory://", "-o", "no_such_option=1")
    assert code == 2 and "no_such_option" in out  # a usage error
    script = Path(sys.executable).parent / "pds"
    r = subprocess.run([str(script), "history", lake, "events", "--json"], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["version"] == 1


@pytest.mark.spec("S-6")
def test_scan_version_out_of_range_is_a_usage_error_and_a_missing_one_not_found(lake: str) -> None:
    for bad in (str(2**64), str(2**63), "-1"):
        code, out = run("scan", lake, "events", "--version", bad)
        assert code == 2, out
        assert "--version" in out and "Traceback" not in out
    code, out = run("scan", lake, "events", "--version", "7")
    assert code == 1
    assert "NotFound" in out and "has no version 7" in out
