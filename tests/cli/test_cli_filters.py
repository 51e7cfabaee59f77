"""The ``pds scan --filter`` grammar (issue U §1.1): a tokenizer and parser
of our own, values typed by the column, usage errors for anything else."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner

import pds
from pds.cli import main, parse_filter, typed_filter

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("country", pa.dictionary(pa.int32(), pa.string())),
        ("v", pa.float64()),
        ("ok", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("naive", pa.timestamp("ms")),
        ("price", pa.decimal128(10, 2)),
        ("blob", pa.binary()),
        ("order id", pa.int32()),
    ]
)


@pytest.fixture
def lake(tmp_path: Path) -> str:
    url = (tmp_path / "lake").as_uri()
    data = pa.table(
        {
            "id": pa.array(range(10), pa.int64()),
            "country": ["DE", "FR", "US", "DE", "FR", "US", "DE", None, "NL", "DE"],
            "day": pa.array([datetime.date(2024, 1, 1 + i) for i in range(10)], pa.date32()),
            "ts": pa.array(
                [datetime.datetime(2024, 1, 1, i, tzinfo=datetime.UTC) for i in range(10)], pa.timestamp("us", tz="UTC")
            ),
            "code": [f"0{i}" for i in range(10)],
        }
    )
    pds.Table.create(url, "t", data=data)
    pds.ParquetDatasetStore(pds.open_store(url)).write_dataset(data, "ds")
    return url


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def ids(url: str, key: str, *filters: str) -> list[int]:
    args = ["scan", url, key, "--columns", "id", "--json", "--limit", "100"]
    for f in filters:
        args += ["--filter", f]
    code, out = run(*args)
    assert code == 0, out
    return [json.loads(line)["id"] for line in out.splitlines()]


@pytest.mark.spec("U-1.1")
def test_the_grammar() -> None:
    assert parse_filter("id>=5") == ("id", ">=", 5)
    assert parse_filter("id >= -5") == ("id", ">=", -5)
    assert parse_filter("v < 2.5e3") == ("v", "<", 2500.0)
    assert parse_filter("v <> 1") == ("v", "!=", 1)
    assert parse_filter("country == 'DE'") == ("country", "==", "DE")
    assert parse_filter("name = 'it''s'") == ("name", "==", "it's")
    assert parse_filter('name == "a \\"b\\""') == ("name", "==", 'a "b"')
    assert parse_filter("country == DE") == ("country", "==", "DE")
    assert parse_filter("country in ('DE','FR')") == ("country", "in", ["DE", "FR"])
    assert parse_filter("id NOT IN [1, 2, null]") == ("id", "not in", [1, 2, None])
    assert parse_filter("id in ()") == ("id", "in", [])
    assert parse_filter("v is null") == ("v", "is_null", None)
    assert parse_filter("v IS NOT NULL") == ("v", "is_not_null", None)
    assert parse_filter("v is_not_null") == ("v", "is_not_null", None)
    assert parse_filter('"order id" = 3') == ("order id", "==", 3)
    assert parse_filter("ok == true") == ("ok", "==", True)
    assert parse_filter("name == 'null'") == ("name", "==", "null")


@pytest.mark.spec("U-1.1")
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("name => n5", "unknown operator '=>'"),
        ("a !== b", "unknown operator '!=='"),
        ("a ! b", "unknown operator '!'"),
        ("id == 5 6", "expected the end"),
        ("id == 5 and x", "expected the end"),
        ("name == 'abc", "unbalanced ' quote"),
        ('name == "abc', 'unbalanced " quote'),
        ("id", "expected an operator"),
        ("id >=", "missing a value"),
        ("v is_null 3", "is_null takes no value"),
        ("v is nul", "expected 'null'"),
        ("v not 3", "expected 'in'"),
        ("id in 3", "takes a list"),
        ("id in (1, 2", "missing"),
        ("id in (1 2)", "expected ','"),
        ("id in [1, 2)", "expected ','"),
        ("id == null", "is null"),
        ("'id' == 1", "quote column names"),
        ("== 1", "expected a column"),
        ("", "missing a column"),
    ],
)
def test_anything_else_is_a_usage_error_showing_the_syntax(text: str, why: str) -> None:
    with pytest.raises(click.BadParameter) as e:
        parse_filter(text)
    assert why in e.value.message
    assert "column op value" in e.value.message and "not in" in e.value.message


@pytest.mark.spec("U-1.1")
def test_values_take_the_columns_type() -> None:
    assert typed_filter("id == '5'", SCHEMA) == ("id", "==", 5)
    assert typed_filter("id >= 1.5", SCHEMA) == ("id", ">=", 1.5)
    assert typed_filter("id in ('1', 2)", SCHEMA) == ("id", "in", [1, 2])
    assert typed_filter("name == 01234", SCHEMA) == ("name", "==", "01234")
    assert typed_filter("name == DE", SCHEMA) == ("name", "==", "DE")
    assert typed_filter("country in ('DE','FR')", SCHEMA) == ("country", "in", ["DE", "FR"])
    assert typed_filter("v > '2.5'", SCHEMA) == ("v", ">", 2.5)
    assert typed_filter("ok = 'true'", SCHEMA) == ("ok", "==", True)
    assert typed_filter("day >= '2024-01-31'", SCHEMA) == ("day", ">=", datetime.date(2024, 1, 31))
    assert typed_filter("day >= 2024-01-31", SCHEMA) == ("day", ">=", datetime.date(2024, 1, 31))
    utc = datetime.datetime(2024, 1, 1, 8, tzinfo=datetime.UTC)
    assert typed_filter("ts >= '2024-01-01T08:00:00Z'", SCHEMA) == ("ts", ">=", utc)
    assert typed_filter("ts >= '2024-01-01 08:00'", SCHEMA) == ("ts", ">=", utc)  # no offset: UTC
    assert typed_filter("naive < '2024-01-01T08:00'", SCHEMA) == ("naive", "<", datetime.datetime(2024, 1, 1, 8))
    assert typed_filter("price == 1.10", SCHEMA) == ("price", "==", decimal.Decimal("1.10"))
    assert typed_filter("blob == 'ab'", SCHEMA) == ("blob", "==", b"ab")
    assert typed_filter('"order id" = 3', SCHEMA) == ("order id", "==", 3)
    assert typed_filter("v is null", SCHEMA) == ("v", "is_null", None)


@pytest.mark.spec("U-1.1")
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("nope == 1", "unknown column 'nope'"),
        ("id == 'abc'", "cannot read 'abc' as int64"),
        ("id == true", "cannot read true as int64"),
        ("ok == 3", "cannot read 3 as bool"),
        ("day >= 'yesterday'", "cannot read 'yesterday' as date32"),
        ("day >= 20", "quoted ISO text"),
        ("naive < '2024-01-01T08:00+02:00'", "no zone"),
        ("v == 'x'", "cannot read 'x' as double"),
    ],
)
def test_values_the_column_cannot_hold_are_usage_errors(text: str, why: str) -> None:
    with pytest.raises(click.BadParameter) as e:
        typed_filter(text, SCHEMA)
    assert why in e.value.message
    if "unknown column" in why:
        assert "id, name, country" in e.value.message


@pytest.mark.spec("U-1.1")
def test_scan_with_sql_habits_on_a_table_and_a_dataset(lake: str) -> None:
    for key in ("t", "ds"):
        assert ids(lake, key, "country == 'DE'") == [0, 3, 6, 9]
        assert ids(lake, key, "country in ('DE','FR')") == [0, 1, 3, 4, 6, 9]
        assert ids(lake, key, "country not in ('DE','FR')") == [2, 5, 8]  # a null is never in or not in
        assert ids(lake, key, "country is null") == [7]
        assert ids(lake, key, "country == DE", "id > '3'") == [6, 9]
        assert ids(lake, key, "day >= '2024-01-09'") == [8, 9]
        assert ids(lake, key, "ts < '2024-01-01T02:00:00+00:00'") == [0, 1]
        assert ids(lake, key, "code == 07") == [7]


@pytest.mark.spec("U-1.1")
@pytest.mark.parametrize(
    ("flt", "words"),
    [
        ("name => n5", ["unknown operator"]),
        ("id !== 3", ["unknown operator"]),
        ("nope == 1", ["unknown column 'nope'", "id, country, day, ts, code"]),
        ("id == 'x'", ["cannot read 'x' as int64"]),
        ("id > 3 trailing", ["expected the end"]),
    ],
)
def test_bad_filters_exit_2_with_the_syntax(lake: str, flt: str, words: list[str]) -> None:
    code, out = run("scan", lake, "t", "--filter", flt)
    assert code == 2, out
    assert "Traceback" not in out
    for w in words:
        assert w in " ".join(out.split()), out


@pytest.mark.spec("U-1.1")
def test_scan_help_shows_the_grammar_with_examples() -> None:
    code, out = run("scan", "--help")
    assert code == 0
    for line in (
        "column op value",
        '"double quoted"',
        "== = != <> < <= > >=  in  not in  is null  is not null",
        "lists [1, 2] or ('DE', 'FR')",
        "pds scan ~/lake events --filter \"country in ('DE','FR')\"",
    ):
        assert line in out, out
