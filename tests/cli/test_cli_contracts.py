"""The ``pds`` command's contracts at its seams (issue S2): no option value or
URL secret in any error, numbers in filters read exactly and in ASCII digits
only, and every usage error (a bad option value, key, limit, duration or
filter) exits 2, while store and data errors keep exit 1."""

from __future__ import annotations

import decimal
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from test_cli_filters import ids  # `pds scan ... --json` of column id

import pds
from pds.cli import main

SECRET = "S3cr3tVALUE-9f2c"
# Digits of other scripts (written as escapes: they look like ASCII ones).
AR1, AR2, AR3, AR5 = "\u0661", "\u0662", "\u0663", "\u0665"  # Arabic-Indic 1, 2, 3, 5
FW2, FW5 = "\uff12", "\uff15"  # fullwidth 2, 5


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    data = pa.table(
        {
            "id": pa.array([-2, -1, 0, 1, 2, 3, 4], pa.int64()),
            "small": pa.array([-2, -1, 0, 1, 2, 3, 4], pa.int8()),
            "v": pa.array([-2.0, -1.0, 0.0, 1.5, 2.0, 3.0, 4.0], pa.float64()),
            "price": pa.array([decimal.Decimal(i) for i in (-2, -1, 0, 1, 2, 3, 4)], pa.decimal128(10, 2)),
            "name": ["a", "b", "c", "1", FW2, AR1, "e"],
        }
    )
    pds.Table.create(url, "t", data=data)
    pds.ParquetDatasetStore(pds.open_store(url)).write_dataset(data, "ds1")
    return url


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args), env=env)
    return r.exit_code, r.output


def script(*args: str, debug: bool = False) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "PDS_DEBUG"}
    if debug:
        env["PDS_DEBUG"] = "1"
    exe = Path(sys.executable).parent / "pds"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, check=False, env=env)


# -- secrets -----------------------------------------------------------------


@pytest.mark.spec("S2-2")
@pytest.mark.parametrize(
    ("text", "named"),
    [
        (f"secret_access_key:{SECRET}", "'secret_access_key'"),
        (f"secret_access_key {SECRET}", "'secret_access_key'"),
        (f"account_key=:{SECRET}", None),  # valid key=value: refused by the store, value hidden
        (SECRET, None),
        (f"={SECRET}", None),
    ],
)
def test_a_bad_option_is_named_by_its_key_never_shown_whole(lake: str, text: str, named: str | None) -> None:
    for args in (("ls", lake, "-o", text), ("show", lake, "t", "--option", text), ("ls", "memory://", "-o", text)):
        code, out = run(*args)
        assert code == 2, out
        assert SECRET not in out, out
        assert "S3cr3t" not in out, out
        if named is not None:
            assert named in out and "key=value" in out, out
    r = script("ls", lake, "-o", text)
    assert r.returncode == 2 and SECRET not in r.stdout + r.stderr, r.stderr


@pytest.mark.spec("S2-2")
def test_an_option_value_the_store_refuses_is_not_echoed(lake: str) -> None:
    # Checked when the store is configured, before any request.
    for key in ("max_retries", "retry_timeout_secs", "allow_http"):
        code, out = run("ls", "s3://bucket/x", "-o", f"{key}={SECRET}")
        assert code == 2, out
        assert SECRET not in out and "***" in out, out
    # Short flags and counts are no secrets: messages keep them readable.
    code, out = run("ls", "s3://bucket/x", "-o", "max_retries=x1")
    assert code == 2 and "max_retries" in out, out


@pytest.mark.spec("S2-2")
def test_store_urls_with_user_info_or_a_query_are_refused_without_their_secrets(lake: str) -> None:
    for url in (
        f"s3://user:{SECRET}@bucket/x",
        f"s3://bucket/x?sig={SECRET}",
        f"{lake}?sig={SECRET}",
        f"az://{SECRET}@cont/x",
    ):
        r = script("ls", url)
        both = r.stdout + r.stderr
        assert r.returncode == 2, both
        assert SECRET not in both, both


@pytest.mark.spec("S2-2")
def test_s3_request_errors_show_no_option_value_or_endpoint_password(seaweed: Any) -> None:
    """Against SeaweedFS: a request to a missing bucket through an endpoint
    with user info, and one signed with a wrong secret key, fail with the
    store's error (its request URL included), which shows neither secret."""
    o = seaweed.store_options()
    url = f"s3://pds-tests/{uuid.uuid4().hex}"
    missing = f"s3://pds-missing-{uuid.uuid4().hex[:8]}/x"
    with_user = o["endpoint"].replace("://", f"://user:{SECRET}@", 1)
    for where, opts in ((missing, {**o, "endpoint": with_user}), (url, {**o, "secret_access_key": SECRET})):
        args = ["ls", where]
        for k, v in opts.items():
            args += ["-o", f"{k}={v}"]
        code, out = run(*args)
        assert code in (1, 2), out  # a store error, or a refused endpoint
        assert SECRET not in out, out
        assert "error" in out.lower() and "Traceback" not in out, out
        # PDS_DEBUG=1's traceback is redacted too.
        r = script(*args, debug=True)
        assert r.returncode == code, r.stderr
        assert code == 2 or "Traceback" in r.stderr, r.stderr
        assert SECRET not in r.stdout + r.stderr, r.stderr
    # The right options still work, and what they list is shown.
    args = ["ls", url, "--json"]
    for k, v in o.items():
        args += ["-o", f"{k}={v}"]
    code, out = run(*args)
    assert code == 0 and json.loads(out) == [], out


# -- numbers in filters ------------------------------------------------------


@pytest.mark.spec("S2-4")
@pytest.mark.parametrize("key", ["t", "ds1"])
def test_numbers_compare_exactly_as_the_library_does_with_decimals(lake: str, key: str) -> None:
    t = pds.Table.open(lake, "t")
    cases = [
        ("id", "<", "3.0000000000000000001"),
        ("id", "<=", "2.9999999999999999999"),
        ("id", ">", "2.99999999999999999999999"),
        ("id", "==", "3.0000000000000000001"),
        ("id", "!=", "3.0000000000000000001"),
        ("id", ">=", "-1.00000000000000000001"),
        ("small", "<", "3.0000000000000000001"),
        ("small", "<", "1e30"),
        ("id", ">", "1e-30"),
        ("price", "<", "3.0000000000000000001"),
        ("price", ">", "1.999"),
        ("price", "==", "2.000000"),
        ("id", "<", "9223372036854775808.5"),
        ("id", ">=", "1E1"),
    ]
    for column, op, text in cases:
        expected = sorted(t.to_arrow(filter=[(column, op, decimal.Decimal(text))]).column("id").to_pylist())
        assert ids(lake, key, f"{column} {op} {text}") == expected, (column, op, text)
    assert ids(lake, key, "id < 3.0000000000000000001") == [-2, -1, 0, 1, 2, 3]
    # Exponents too large for an exact integer compare as their sign says
    # (no 10**999999999 is built).
    everything = [-2, -1, 0, 1, 2, 3, 4]
    assert ids(lake, key, "small < 1e999999999") == everything
    assert ids(lake, key, "small > -1e999999999") == everything
    assert ids(lake, key, "id == 1e99999999999999999999999") == []
    assert ids(lake, key, "id > 1e-999999999") == [1, 2, 3, 4]
    assert ids(lake, key, "id >= -1e-999999999") == [0, 1, 2, 3, 4]
    assert ids(lake, key, "id < -1e-9999999999999999999999") == [-2, -1]
    assert ids(lake, key, "price > 0e999999999999") == [1, 2, 3, 4]
    assert ids(lake, key, "id in (2.0000000000000000001, 3, 4.5)") == [3]
    assert ids(lake, key, "id not in (2.0000000000000000001, 3)") == [-2, -1, 0, 1, 2, 4]
    assert ids(lake, key, "id == '3.0000000000000000000'") == [3]
    assert ids(lake, key, "v > 1.5") == [2, 3, 4]  # a float column: the nearest double


@pytest.mark.spec("S2-4")
def test_a_pipeline_stage_filter_is_exact_too(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    p = pds.Pipeline.create(url, "p")
    p.source("s", key={"id": pa.int64()}, value={"v": pa.int64()})
    p.update({"s": pa.table({"id": [1, 2, 3], "v": [1, 2, 3]})})
    code, out = run("scan", url, "p", "--stage", "s", "--filter", "id < 2.0000000000000000001", "--json")
    assert code == 0, out
    assert [json.loads(line)["id"] for line in out.splitlines()] == [1, 2]


@pytest.mark.spec("S2-4")
@pytest.mark.parametrize(
    "flt",
    [
        f"id == {AR1}",
        f"id == '{AR1}'",
        f"id in ({AR1}, 2)",
        f"id == {FW5}",
        f"small < {AR3}",
        f"price == {AR1}",
        f"v == {AR1}.{AR5}",
        f"v == '{AR2}'",
        "id == 1_0",
    ],
)
def test_only_ascii_digits_are_numbers(lake: str, flt: str) -> None:
    for key in ("t", "ds1"):
        code, out = run("scan", lake, key, "--filter", flt)
        assert code == 2, out
        assert "--filter" in out and "digits 0-9" in out, out
    # On a string column such text is text.
    assert ids(lake, "t", f"name == {AR1}") == [3]
    assert ids(lake, "t", f"name == {FW2}") == [2]


# -- usage errors exit 2 -----------------------------------------------------


@pytest.mark.spec("S2-4")
def test_limits_beyond_64_bits_are_usage_errors_naming_the_range(lake: str, tmp_path: Path) -> None:
    huge = "99999999999999999999999"
    for args, option, low in (
        (("scan", lake, "t", "--limit", huge), "--limit", "0"),
        (("history", lake, "t", "--limit", huge), "--limit", "1"),
        (("compact", lake, "t", "--target-file-size", huge), "--target-file-size", "1"),
        (("compact", lake, "t", "--target-rows", huge), "--target-rows", "1"),
    ):
        r = script(*args)
        both = r.stdout + r.stderr
        assert r.returncode == 2, both
        assert option in both and f"{low}<=x<=9223372036854775807" in both, both
        assert "unexpected" not in both and "Traceback" not in both, both
    code, out = run("scan", lake, "t", "--limit", str(2**63 - 1), "--json", "--columns", "id")
    assert code == 0 and len(out.splitlines()) == 7, out
    code, out = run("history", lake, "t", "--limit", str(2**63 - 1), "--json")
    assert code == 0 and len(json.loads(out)) == 1, out


@pytest.mark.spec("S2-4")
def test_compact_options_of_the_other_kind_and_unknown_codecs_are_usage_errors(lake: str, tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    p = pds.Pipeline.create(url, "p")
    p.source("s", key={"id": pa.int64()}, value={"v": pa.int64()})
    p.update({"s": pa.table({"id": [1], "v": [1]})})
    for args, words in (
        (("compact", url, "p", "--compression", "bogus"), ["--compression", "'bogus' is not one of"]),
        (("compact", url, "t", "--target-rows", "5"), ["--target-rows", "pipelines only", "'t' is a table"]),
        (("compact", url, "t", "--compression", "zstd"), ["--compression", "pipelines only"]),
        (("compact", url, "p", "--min-deleted-fraction", "0.2"), ["--min-deleted-fraction", "tables only"]),
        (("compact", url, "p", "--target-file-size", "10"), ["--target-file-size", "tables only"]),
    ):
        code, out = run(*args)
        assert code == 2, (args, out)
        for w in words:
            assert w in out, (args, out)
    assert pds.Table.open(url, "t").version == 0  # nothing was compacted
    code, out = run("compact", url, "p", "--compression", "ZSTD", "--target-rows", "1000", "--json")
    assert code == 0, out


@pytest.mark.spec("S2-4")
def test_vacuum_min_age_longer_than_retain_is_a_usage_error(lake: str, tmp_path: Path) -> None:
    before = sorted(p.name for p in (tmp_path / "lake" / "t").rglob("*"))
    for args in (("--retain", "1h", "--min-age", "2h", "--apply"), ("--retain", "30m")):
        r = script("vacuum", lake, "t", *args)
        both = r.stdout + r.stderr
        assert r.returncode == 2, both
        assert "--min-age" in both and "--retain" in both and "Traceback" not in both, both
        assert "ValueError" not in both, both
    assert sorted(p.name for p in (tmp_path / "lake" / "t").rglob("*")) == before
    code, out = run("vacuum", lake, "t", "--retain", "2h", "--min-age", "2h", "--json")
    assert code == 0 and json.loads(out) == {"applied": False, "would_remove": []}, out


@pytest.mark.spec("S2-4")
@pytest.mark.parametrize(
    "key",
    ["..\\ds1", "a\\..\\..\\ds1", "ds1\\..\\..\\x", ".\\ds1", "a\x00b", "ds1\udcff", "k" * 1025],
)
def test_a_key_pds_cannot_store_is_a_usage_error(lake: str, key: str) -> None:
    for command in ("show", "scan", "history", "verify", "compact", "vacuum"):
        code, out = run(command, lake, key)
        assert code == 2, (command, out)
        assert "KEY" in out and "Traceback" not in out, (command, out)
    code, out = run("ls", lake, key)
    assert code == 2 and "PREFIX" in out, out


@pytest.mark.spec("S2-4")
def test_the_console_script_exits_2_for_a_backslash_key_as_the_readme_says(lake: str) -> None:
    r = script("show", lake, "..\\ds1")
    assert r.returncode == 2, r.stderr
    assert "KEY" in r.stderr and "Traceback" not in r.stderr
    r = script("show", lake, "ds1", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["rows"] == 7, r.stderr
    # A runtime error keeps exit 1.
    r = script("show", lake, "absent")
    assert r.returncode == 1 and "NotFound" in r.stderr


@pytest.mark.spec("S2-3")
@pytest.mark.parametrize("key", ["ds1/_SUCCESS", "ds1/manifest.json", "ds1/_SUCCESS/deeper"])
def test_a_key_naming_a_file_is_not_found_not_a_store_failure(lake: str, key: str) -> None:
    """On file://, a key that passes through a file (the dataset's marker)
    is absent, as on an object store: exit 1 with ``NotFound`` naming it (and
    the dataset it lies in), never the operating system's "Not a directory"
    as a store failure."""
    code, out = run("show", lake, key)
    assert code == 1, out
    assert "NotFound" in out and key in out and "Not a directory" not in out, out
