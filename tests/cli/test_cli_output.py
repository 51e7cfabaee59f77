"""What ``pds`` prints (issue U §1.3-§1.7): exact deleted rows, strict JSON,
nothing created by reading, readable 80-column tables, no tracebacks."""

from __future__ import annotations

import datetime
import decimal
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

import pds
from pds.cli import main, to_json


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args), env=env)
    return r.exit_code, r.output


def strict(text: str) -> Any:
    """RFC 8259 JSON only: NaN, Infinity and -Infinity are refused."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def odd(tmp_path: Path) -> str:
    """A table of every awkward type, with a primary-key range delete."""
    url = (tmp_path / "lake").as_uri()
    data = pa.table(
        {
            "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "f": pa.array([float("nan"), float("inf"), float("-inf"), 1.5, None], pa.float64()),
            "b": pa.array([b"\x00\xff", b"ab", None, b"", b"z"], pa.binary()),
            "ts": pa.array(
                [datetime.datetime(2024, 1, i, 8, tzinfo=datetime.UTC) for i in range(1, 6)],
                pa.timestamp("us", tz="UTC"),
            ),
            "d": pa.array(
                [decimal.Decimal("1.10"), None, decimal.Decimal("-3.00"), decimal.Decimal("0.01"), None],
                pa.decimal128(10, 2),
            ),
            "l": pa.array([[1.0, float("nan")], [], None, [2.0], [float("inf")]], pa.list_(pa.float64())),
            "s": pa.array(
                [{"x": 1, "y": "a"}, None, {"x": 2, "y": None}, {"x": 3, "y": "c"}, {"x": 4, "y": "d"}],
                pa.struct([("x", pa.int32()), ("y", pa.string())]),
            ),
            "m": pa.array(
                [[("k", 1.0)], None, [], [("nan", float("nan"))], [("a", 2.0)]], pa.map_(pa.string(), pa.float64())
            ),
        }
    )
    t = pds.Table.create(url, "odd", data=data, primary_key="id")
    t.delete([("id", ">=", 4)])
    return url


@pytest.mark.spec("U-1.4")
def test_to_json_conventions() -> None:
    assert to_json(float("nan")) == "NaN"
    assert to_json([float("inf"), -float("inf")]) == ["Infinity", "-Infinity"]
    assert to_json(b"\x00\xff") == "AP8="
    assert to_json(decimal.Decimal("1.10")) == "1.10"
    assert to_json(datetime.datetime(2024, 1, 2, 3, tzinfo=datetime.UTC)) == "2024-01-02T03:00:00+00:00"
    assert to_json(datetime.date(2024, 1, 2)) == "2024-01-02"
    assert to_json(datetime.timedelta(days=1, microseconds=5)) == "PT86400.000005S"
    assert to_json({"m": [("k", 1)]}) == {"m": [["k", 1]]}


@pytest.mark.spec("U-1.4")
def test_every_json_output_is_strict(odd: str) -> None:
    code, out = run("scan", odd, "odd", "--json")
    assert code == 0, out
    rows = [strict(line) for line in out.splitlines()]
    assert [r["id"] for r in rows] == [1, 2, 3]
    first = rows[0]
    assert first["f"] == "NaN" and rows[1]["f"] == "Infinity" and rows[2]["f"] == "-Infinity"
    assert first["b"] == "AP8=" and rows[2]["b"] is None
    assert first["ts"] == "2024-01-01T08:00:00+00:00"
    assert first["d"] == "1.10"
    assert first["l"] == [1.0, "NaN"]
    assert first["s"] == {"x": 1, "y": "a"}
    assert first["m"] == [["k", 1.0]]
    for cmd in (("show", odd, "odd"), ("history", odd, "odd"), ("ls", odd), ("verify", odd, "odd")):
        code, out = run(*cmd, "--json")
        assert code == 0, (cmd, out)
        strict(out)
    info = strict(run("show", odd, "odd", "--json")[1])
    stats = info["data_files"][0]
    assert stats["min"]["id"] == 1 and stats["max"]["id"] == 5  # statistics as objects


@pytest.mark.spec("U-1.3")
def test_show_counts_deleted_rows_exactly_under_a_primary_key_range(odd: str) -> None:
    code, out = run("show", odd, "odd", "--json")
    info = json.loads(out)
    assert info["data_files"][0]["deleted_rows"] is None  # the tombstone names a key range
    assert (info["rows"], info["stored_rows"], info["deleted_rows"]) == (3, 5, 2)
    assert info["rows_counted_by"] == "reading column 'id'"
    code, out = run("show", odd, "odd")
    assert code == 0
    lines = out.splitlines()
    assert any("deleted_rows" in ln and "2" in ln for ln in lines)
    assert not any("deleted_rows" in ln and " 0 " in ln for ln in lines)
    assert "unknown" in out  # the file's own deleted rows
    code, out = run("show", "--help")
    assert "primary-key column" in out
    code, out = run("ls", odd, "--json")
    assert json.loads(out)[0]["rows"] is None  # ls reads no data: unknown, never a wrong count
    code, out = run("ls", odd)
    assert "unknown" in out


@pytest.mark.spec("U-1.5")
def test_read_only_commands_create_nothing(tmp_path: Path) -> None:
    nope = tmp_path / "nope"
    for cmd in (
        ("ls",),
        ("show", "k"),
        ("history", "k"),
        ("scan", "k"),
        ("verify", "k"),
        ("compact", "k"),
        ("vacuum", "k"),
    ):
        for url in (str(nope), nope.as_uri()):
            code, out = run(cmd[0], url, *cmd[1:])
            assert code == 1, (cmd, out)
            assert f"no such folder: {nope}" in out
            assert not nope.exists(), cmd
    lake = tmp_path / "lake"
    lake.mkdir()
    for cmd in ("show", "history", "scan", "verify"):
        code, out = run(cmd, str(lake), "absent/key")
        assert code == 1 and "NotFound" in out
    assert list(lake.iterdir()) == []


@pytest.mark.spec("U-1.5")
def test_relative_and_home_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "demo-data").mkdir()
    pds.ParquetDatasetStore(pds.open_store(str(tmp_path / "demo-data"))).write_dataset(pa.table({"x": [1]}), "ds")
    monkeypatch.chdir(tmp_path)
    code, out = run("ls", "demo-data", "--json")
    assert code == 0, out
    assert json.loads(out)[0]["key"] == "ds"
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out = run("scan", "~/demo-data", "ds", "--json")
    assert code == 0 and json.loads(out) == {"x": 1}


@pytest.mark.spec("U-1.6")
def test_tables_fit_80_columns_with_whole_headers(odd: str, tmp_path: Path) -> None:
    env = {"COLUMNS": "80"}
    t = pds.Table.open(odd, "odd")
    t.append(pa.table({c: t.to_arrow().column(c)[:1] for c in t.schema.names}).cast(t.schema))
    code, out = run("history", odd, "odd", env=env)
    assert code == 0, out
    assert max(len(line) for line in out.splitlines()) <= 80
    for header in ("version", "created (UTC)", "operation", "+rows", "-rows", "+files", "-files"):
        assert header in out, header
    assert "append" in out and "delete" in out and "create" in out
    pds.Table.create(odd, "narrow", data=pa.table({"i": [1]}))
    code, out = run("scan", odd, "narrow", env=env)
    assert out.splitlines()[0] == "narrow"  # the title on a line of its own, never wrapped
    code, out = run("ls", odd, env=env)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    for header in ("key", "kind", "version", "files", "rows"):
        assert header in out
    code, out = run("show", odd, "odd", env=env)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    for header in ("path", "rows", "deleted_rows", "bytes", "row_groups", "column", "type", "nullable"):
        assert header in out
    # Wider than the terminal: one record below the other, headers whole.
    code, out = run("scan", odd, "odd", env=env)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    for header in t.schema.names:
        assert f"┃ {header} " in out, header
    # Headers wider than the terminal: one record below the other, headers whole.
    wide = pa.table({f"a_rather_long_column_name_{i}": [i] for i in range(6)})
    pds.Table.create(odd, "wide", data=wide)
    code, out = run("scan", odd, "wide", env=env)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    for header in wide.column_names:
        assert f"│ {header} " in out, header


def _script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PDS_DEBUG"}
    script = Path(sys.executable).parent / "pds"
    return subprocess.run([str(script), *args], capture_output=True, text=True, check=False, cwd=cwd, env=env)


@pytest.mark.spec("U-1.7")
def test_no_traceback_for_any_user_error(odd: str, tmp_path: Path) -> None:
    root = tmp_path / "lake"
    pds.Table.create(odd, "broken", data=pa.table({"id": [1]}))
    m = root / "broken" / "manifest" / "v00000000.json"
    m.write_bytes(m.read_bytes()[:-10] + b"xx")
    cases = [
        (("ls", "ftp://host/x"), 2),
        (("ls", odd, "-o", "bogus"), 2),
        (("ls", odd, "-o", "no_such_option=1"), 2),
        (("ls", odd, "--bogus"), 2),
        (("show", odd, "absent"), 1),
        (("scan", odd, "odd", "--filter", "id => 3"), 2),
        (("scan", odd, "odd", "--filter", "nope == 3"), 2),
        (("scan", odd, "odd", "--columns", "nope"), 2),
        (("scan", odd, "odd", "--version", "x"), 2),
        (("scan", odd, "odd", "--version", "99"), 1),
        (("history", odd, "odd", "--limit", "0"), 2),
        (("show", odd, "broken"), 1),
        (("history", odd, "broken"), 1),
        (("scan", odd, "broken"), 1),
        (("verify", odd, "broken"), 1),
        (("show", odd, "../x"), 2),
        (("scan", odd, "a/../../x"), 2),
        (("ls", odd, "../x"), 2),
        (("compact", odd, "ds"), 1),
        (("vacuum", odd, "odd", "--retain", "7x"), 2),
        (("show", str(tmp_path / "missing"), "k"), 1),
    ]
    for args, expected in cases:
        r = _script(*args, cwd=tmp_path)
        both = r.stdout + r.stderr
        assert "Traceback" not in both, (args, both)
        assert r.returncode == expected, (args, r.returncode, both)
        assert both.strip(), args
        if expected == 1:
            assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
