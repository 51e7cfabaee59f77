"""One table, many producers: pyarrow, polars, pandas and DuckDB data mix.

Producers export the same columns as different physical Arrow types
(polars: ``string_view``, ``binary_view``, ``large_list``; DuckDB: lists
whose item is named ``l``, and views when asked). A table's schema check
compares logical types, and an append is cast to the table's types: the
table keeps the types it was created with, in strict and merge mode.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import duckdb
import pandas as pd  # type: ignore[import-untyped]
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pds

ROWS = pa.schema(
    [
        ("id", pa.int64()),
        ("s", pa.string()),
        ("b", pa.binary()),
        ("l", pa.list_(pa.string())),
        ("i", pa.int64()),
        ("f", pa.float64()),
    ]
)


def rows(start: int) -> pa.Table:
    """Three rows with ids from *start*, every column null somewhere."""
    n = start
    return pa.table(
        {
            "id": [n, n + 1, n + 2],
            "s": [f"s{n}", None, ""],
            "b": [b"\x00" + bytes([n % 256]), b"", None],
            "l": [[f"a{n}", None], None, []],
            "i": [n, None, -n],
            "f": [None, n + 0.5, -1.25],
        },
        schema=ROWS,
    )


_CONNECTIONS: list[Any] = []


def _duckdb(views: bool) -> Callable[[pa.Table], Any]:
    def make(t: pa.Table) -> Any:
        con = duckdb.connect()
        if views:
            con.execute("SET produce_arrow_string_view = true")
            con.execute("SET arrow_output_list_view = true")
            con.execute("SET arrow_output_version = '1.5'")
        con.register("t", t)
        _CONNECTIONS.append(con)  # a relation needs its connection open
        return con.sql("SELECT * FROM t")

    return make


def _pandas(t: pa.Table) -> pd.DataFrame:
    # Nullable integers as pandas' Int64, so that they export as int64.
    return t.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def _reader(t: pa.Table) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=2))


LIBRARIES: dict[str, Callable[[pa.Table], Any]] = {
    "pyarrow": lambda t: t,
    "reader": _reader,
    "polars": pl.from_arrow,
    "pandas": _pandas,
    "duckdb": _duckdb(views=False),
    "duckdb_views": _duckdb(views=True),
}
# A table cannot be created from list views (pds refuses them as a stored
# type); DuckDB's view output is exercised as an appender only.
CREATORS = [name for name in LIBRARIES if name != "duckdb_views"]


def exported_schema(data: Any) -> pa.Schema:
    """The schema a producer hands pds through the C stream."""
    if isinstance(data, pa.Table | pa.RecordBatchReader):
        return data.schema
    return pa.RecordBatchReader.from_stream(data).schema


def expected(chunks: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(chunks).select(schema.names).cast(schema)


def by_id(t: pa.Table) -> list[dict[str, Any]]:
    """The rows, ordered by id (pyarrow cannot sort view columns)."""
    return sorted(t.to_pylist(), key=lambda r: r["id"])


@pytest.mark.spec("U-2")
def test_the_producers_really_differ() -> None:
    """The matrix below is worth having: the libraries export other types."""
    data = rows(0)
    types = {name: exported_schema(make(data)) for name, make in LIBRARIES.items()}
    assert types["polars"].field("s").type == pa.string_view()
    assert types["polars"].field("b").type == pa.binary_view()
    assert pa.types.is_large_list(types["polars"].field("l").type)
    assert types["duckdb"].field("l").type.value_field.name == "l"
    assert types["duckdb_views"].field("s").type == pa.string_view()
    assert pa.types.is_list_view(types["duckdb_views"].field("l").type)
    assert types["pandas"].field("i").type == pa.int64()
    assert types["pyarrow"] == ROWS


@pytest.mark.spec("U-2")
@pytest.mark.parametrize("appender", list(LIBRARIES))
@pytest.mark.parametrize("creator", CREATORS)
def test_every_library_appends_to_a_table_of_every_other(tmp_path: pathlib.Path, creator: str, appender: str) -> None:
    created = LIBRARIES[creator](rows(0))
    table_types = exported_schema(LIBRARIES[creator](rows(0)))
    t = pds.Table.create(tmp_path.as_uri(), "t", data=created)
    schema = t.schema
    assert schema.equals(table_types), f"{schema} != {table_types}"

    t.append(LIBRARIES[appender](rows(10)))
    assert t.schema.equals(schema)
    t.append(LIBRARIES[appender](rows(20)), schema_mode="merge")
    assert t.schema.equals(schema), "merge keeps the table's types"
    assert all(h["schema_change"] is None for h in t.history())

    got = t.to_arrow()
    assert got.schema.equals(schema)
    want = expected([rows(0), rows(10), rows(20)], schema)
    assert by_id(got) == by_id(want)

    # Every data file was written with the table's types (cast before
    # encoding), so any reader of the files sees one schema.
    for f in t.manifest["data_files"]:
        footer = pq.read_schema(tmp_path / "t" / f["path"])
        assert footer.remove_metadata().equals(schema.remove_metadata()), f["path"]


@pytest.mark.spec("U-2")
@pytest.mark.parametrize("appender", ["polars", "duckdb", "duckdb_views", "pandas"])
def test_a_table_created_from_a_schema_takes_every_library(tmp_path: pathlib.Path, appender: str) -> None:
    t = pds.Table.create(tmp_path.as_uri(), "t", schema=ROWS)
    t.append(LIBRARIES[appender](rows(0)))
    t.append(LIBRARIES[appender](rows(10)), schema_mode="merge")
    assert t.schema.equals(ROWS)
    assert by_id(t.to_arrow()) == by_id(expected([rows(0), rows(10)], ROWS))


@pytest.mark.spec("U-2")
def test_create_exist_ok_takes_another_librarys_schema(tmp_path: pathlib.Path) -> None:
    """``exist_ok=True`` with the polars spelling of the table's schema
    returns the table (one logical schema); a real difference still fails."""
    url = tmp_path.as_uri()
    t = pds.Table.create(url, "t", schema=ROWS)
    polars_schema = pl.from_arrow(rows(0)).to_arrow().schema
    assert not polars_schema.equals(ROWS), "polars really spells it otherwise"
    again = pds.Table.create(url, "t", schema=polars_schema, exist_ok=True)
    assert again.version == t.version and again.schema.equals(ROWS)
    other = pa.schema([f.with_type(pa.int32()) if f.name == "i" else f for f in ROWS])
    with pytest.raises(pds.SchemaMismatch, match="exists with another schema"):
        pds.Table.create(url, "t", schema=other, exist_ok=True)
    renamed = pa.schema([f.with_name("j") if f.name == "i" else f for f in ROWS])
    with pytest.raises(pds.SchemaMismatch):
        pds.Table.create(url, "t", schema=renamed, exist_ok=True)


@pytest.mark.spec("U-2")
def test_nested_and_dictionary_variants_are_one_type(tmp_path: pathlib.Path) -> None:
    """Recursively: structs, maps, lists of lists; dictionaries of strings
    (polars' Categorical) against plain strings, both ways."""
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("st", pa.struct([("x", pa.string()), ("y", pa.list_(pa.binary()))])),
            ("m", pa.map_(pa.string(), pa.large_binary())),
            ("ll", pa.list_(pa.list_(pa.string()))),
            ("cat", pa.string()),
            ("d", pa.dictionary(pa.int32(), pa.string())),
        ]
    )
    first = pa.table(
        {
            "id": [0, 1],
            "st": [{"x": "a", "y": [b"1", None]}, None],
            "m": [[("k", b"v")], None],
            "ll": [[["a"], None, []], None],
            "cat": ["red", None],
            "d": pa.array(["u", None]).dictionary_encode(),
        },
        schema=schema,
    )
    views = pa.schema(
        [
            ("ll", pa.large_list(pa.list_view(pa.string_view()))),
            ("m", pa.map_(pa.string_view(), pa.binary())),
            ("st", pa.struct([("y", pa.large_list(pa.binary_view())), ("x", pa.large_string())])),
            ("id", pa.int64()),
            ("cat", pa.dictionary(pa.uint32(), pa.string_view())),
            ("d", pa.string_view()),
        ]
    )
    second = pa.table(
        {
            "ll": [[["b", None]], []],
            "m": [[("j", None)], []],
            "st": [{"y": [], "x": None}, {"y": None, "x": "z"}],
            "id": [2, 3],
            "cat": pa.array(["blue", "red"]).cast(pa.dictionary(pa.uint32(), pa.string_view())),
            "d": ["w", None],
        },
        schema=views,
    )
    t = pds.Table.create(tmp_path.as_uri(), "t", data=first)
    t.append(second)
    t.append(second.slice(0, 1).replace_schema_metadata(), schema_mode="merge")
    assert t.schema.equals(schema)
    # (pyarrow cannot cast a dictionary of string_view: compare values.)
    want = first.to_pylist() + second.to_pylist() + second.slice(0, 1).to_pylist()
    assert by_id(t.to_arrow()) == sorted(want, key=lambda r: r["id"])

    # And the other way: created with the view types, appended with plain ones.
    u = pds.Table.create(tmp_path.as_uri(), "u", data=pl.from_arrow(first.drop_columns(["ll", "m"])))
    u.append(first.drop_columns(["ll", "m"]))
    got = u.to_arrow()
    assert got.schema.equals(u.schema)
    assert got.column("cat").to_pylist() == ["red", None, "red", None]


@pytest.mark.spec("U-2")
@pytest.mark.parametrize("mode", ["strict", "merge"])
@pytest.mark.parametrize("creator", ["pyarrow", "polars"])
def test_another_logical_type_is_still_a_mismatch_naming_the_field(
    tmp_path: pathlib.Path, creator: str, mode: str
) -> None:
    t = pds.Table.create(tmp_path.as_uri(), "t", data=LIBRARIES[creator](rows(0)))
    bad = rows(10).set_column(ROWS.get_field_index("s"), "s", pa.array([1, 2, None], pa.int64()))
    for data in (bad, pl.from_arrow(bad)):
        with pytest.raises(pds.SchemaMismatch, match='"s"'):
            t.append(data, schema_mode=mode)
    strings_as_list = rows(10).set_column(ROWS.get_field_index("l"), "l", pa.array(["x", None, "y"]))
    with pytest.raises(pds.SchemaMismatch, match='"l"'):
        t.append(pl.from_arrow(strings_as_list), schema_mode=mode)
    assert t.version == 0
    assert t.to_arrow().num_rows == 3


@pytest.mark.spec("U-2")
@pytest.mark.parametrize(
    ("declared", "updater"), [("pyarrow", "polars"), ("polars", "pyarrow"), ("pyarrow", "duckdb"), ("pandas", "polars")]
)
def test_a_pipeline_source_takes_the_other_librarys_types(tmp_path: pathlib.Path, declared: str, updater: str) -> None:
    value = pa.schema([f for f in exported_schema(LIBRARIES[declared](rows(0))) if f.name != "id"])
    p = pds.Pipeline.create(tmp_path.as_uri(), "p")
    p.source("src", key={"id": pa.int64()}, value=value)
    p.update({"src": LIBRARIES[declared](rows(0))})
    p.update({"src": LIBRARIES[updater](rows(10))})
    p.update({"src": LIBRARIES[updater](rows(1).slice(0, 1))})  # replaces key 1
    got = p.read("src")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), *value])
    assert [(f.name, f.type) for f in got.schema] == [(f.name, f.type) for f in schema]
    want = pa.concat_tables([rows(0).slice(0, 1), rows(1).slice(0, 1), rows(0).slice(2), rows(10)])
    assert by_id(got) == by_id(expected([want], got.schema))
