"""Pipelines at their seams with user code (issue S2): what a row-form
``Produce`` yields is stored as it was at its yield; batched and row-form
output and source changes that do not fit are refused, naming what; errors
name a batched call's keys as a range and keep an input stream's own
exception; pipeline keys are checked as dataset and table keys are."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from remote_store import InvalidPath

import pds
from pds import Changes, Pipeline, ProduceError, SchemaMismatch
from pds.producers import produce

# -- 1.5: each pair is what it was at its yield ---------------------------------------


def _source(p: Pipeline) -> Any:
    return p.source("s", key={"k": pa.int64()}, value={"x": pa.int64()})


def _inputs() -> pa.Table:
    """Key 1 with x = 10, 20, 30; key 2 with x = 40, 50."""
    return pa.table({"k": [1, 1, 1, 2, 2], "x": [10, 20, 30, 40, 50]})


#: Flush after every pair, every two, every three, and once at the end.
_CHUNKS = [1, 2, 3, produce.ROW_CHUNK]


@pytest.mark.spec("S2-1.5")
@pytest.mark.parametrize("chunk", _CHUNKS)
def test_a_reused_dict_is_stored_as_it_was_at_each_yield(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(produce, "ROW_CHUNK", chunk)
    p = Pipeline.create(pds.open_store("memory://"), "reused")
    src = _source(p)
    shared: dict[str, Any] = {}  # one dict for every call, changed after each yield

    @p.stage("multi", sources=[src], key={"t": pa.int64()}, value={"x": pa.int64(), "y": pa.string()})
    def multi(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        for v in values:
            shared["x"] = v["x"]
            shared["y"] = f"y{v['x']}"
            yield v["x"], shared

    single_dict: dict[str, Any] = {}

    @p.stage("single", sources=[src], key={"t": pa.int64()}, value={"x": pa.int64()})
    def single(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        for v in values:
            single_dict["x"] = v["x"]
            yield v["x"], single_dict

    p.update({"s": _inputs()})
    xs = [10, 20, 30, 40, 50]
    assert p.read("multi").to_pylist() == [{"t": x, "x": x, "y": f"y{x}"} for x in xs]
    assert p.read("single").to_pylist() == [{"t": x, "x": x} for x in xs]


@pytest.mark.spec("S2-1.5")
@pytest.mark.parametrize("chunk", _CHUNKS)
def test_a_growing_list_is_stored_as_it_was_at_each_yield(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh dict (or the bare list) holding one list that grows, and a
    struct whose inner dict is reused: nested values are kept as yielded."""
    monkeypatch.setattr(produce, "ROW_CHUNK", chunk)
    p = Pipeline.create(pds.open_store("memory://"), "growing")
    src = _source(p)
    ints = pa.list_(pa.int64())

    @p.stage("bare", sources=[src], key={"t": pa.int64()}, value={"xs": ints})
    def bare(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, list[int]]]:
        acc: list[int] = []
        for v in values:
            acc.append(v["x"])
            yield v["x"], acc

    @p.stage("in_dict", sources=[src], key={"t": pa.int64()}, value={"xs": ints})
    def in_dict(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        acc: list[int] = []
        for v in values:
            acc.append(v["x"])
            yield v["x"], {"xs": acc}

    nested = pa.list_(ints)

    @p.stage("multi", sources=[src], key={"t": pa.int64()}, value={"xs": nested, "n": pa.int64()})
    def multi(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        acc: list[list[int]] = [[]]
        for v in values:
            acc[0].append(v["x"])
            yield v["x"], {"xs": acc, "n": len(acc[0])}

    point = pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))])

    @p.stage("struct", sources=[src], key={"t": pa.int64()}, value={"p": point, "n": pa.int64()})
    def struct(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        inner: dict[str, Any] = {"a": 0, "b": []}
        for v in values:
            inner["a"] = v["x"]
            inner["b"].append(v["x"])
            yield v["x"], {"p": inner, "n": 0}

    p.update({"s": _inputs()})
    want = {10: [10], 20: [10, 20], 30: [10, 20, 30], 40: [40], 50: [40, 50]}
    assert p.read("bare").to_pylist() == [{"t": t, "xs": xs} for t, xs in want.items()]
    assert p.read("in_dict").to_pylist() == [{"t": t, "xs": xs} for t, xs in want.items()]
    assert p.read("multi").to_pylist() == [{"t": t, "xs": [xs], "n": len(xs)} for t, xs in want.items()]
    assert p.read("struct").to_pylist() == [{"t": t, "p": {"a": t, "b": xs}, "n": 0} for t, xs in want.items()]


@pytest.mark.spec("S2-1.5")
@pytest.mark.parametrize("chunk", _CHUNKS)
def test_a_compound_target_key_changed_after_its_yield_is_stored_as_yielded(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(produce, "ROW_CHUNK", chunk)
    p = Pipeline.create(pds.open_store("memory://"), "target")
    src = _source(p)

    @p.stage("pairs", sources=[src], key={"a": pa.int64(), "b": pa.int64()}, value={"x": pa.int64()})
    def pairs(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[Any, int]]:
        target = [key, 0]  # a list, changed after each yield
        for v in values:
            target[1] = v["x"]
            yield (target, v["x"]) if v["x"] % 20 else ((target[0], target[1]), v["x"])

    p.update({"s": _inputs()})
    assert p.read("pairs").to_pylist() == [
        {"a": k, "b": x, "x": x} for k, x in [(1, 10), (1, 20), (1, 30), (2, 40), (2, 50)]
    ]


# -- section 3: errors that name what failed ----------------------------------------


@pytest.mark.spec("S2-3")
def test_a_batched_produce_error_names_its_keys_as_a_range() -> None:
    p = Pipeline.create(pds.open_store("memory://"), "batched")
    src = _source(p)

    @p.stage("b", sources=[src], key={"k": pa.int64()}, value={"x": pa.int64()}, batched=True)
    def b(groups: pa.Table) -> pa.Table:
        raise ZeroDivisionError("no")

    with pytest.raises(ProduceError, match=r"stage 'b' failed on keys 1 … 25: ZeroDivisionError: no") as err:
        p.update({"s": pa.table({"k": list(range(1, 26)), "x": list(range(25))})})
    assert isinstance(err.value, ZeroDivisionError)
    assert isinstance(err.value.__cause__, ZeroDivisionError)
    assert (err.value.key, err.value.last_key) == (1, 25)
    # One key: named alone.
    with pytest.raises(ProduceError, match=r"stage 'b' failed on key 7: ZeroDivisionError") as one:
        p.update({"s": pa.table({"k": [7], "x": [0]})})
    assert (one.value.key, one.value.last_key) == (7, 7)
    assert p.refresh() == 0


@pytest.mark.spec("S2-3")
def test_a_compound_keyed_batched_error_is_not_read_as_one_key() -> None:
    p = Pipeline.create(pds.open_store("memory://"), "compound")
    src = p.source("s", key={"a": pa.int64(), "b": pa.int64()}, value={"x": pa.int64()})

    @p.stage("b", sources=[src], key={"a": pa.int64()}, value={"x": pa.int64()}, batched=True)
    def b(groups: pa.Table) -> pa.Table:
        raise KeyError("gone")

    with pytest.raises(ProduceError, match=r"failed on keys \(1, 2\) … \(3, 4\): KeyError") as err:
        p.update({"s": pa.table({"a": [1, 3], "b": [2, 4], "x": [0, 0]})})
    assert (err.value.key, err.value.last_key) == ((1, 2), (3, 4))


class FeedBroke(Exception):
    """The user's own input error."""


@pytest.mark.spec("S2-3")
@pytest.mark.parametrize("good_batches", [0, 1, 3])
def test_an_input_stream_error_keeps_its_class_as_the_cause(good_batches: int) -> None:
    """Raised before the first row (while the update looks for one) or after
    some batches (while the engine reads it): a DataError naming the class,
    the exception its cause, nothing committed."""
    p = Pipeline.create(pds.open_store("memory://"), "stream")
    src = _source(p)

    @p.stage("copy", sources=[src], key={"k": pa.int64()}, value={"x": pa.int64()})
    def copy(key: int, values: Iterator[dict[str, Any]]) -> Iterator[tuple[int, int]]:
        for v in values:
            yield key, v["x"]

    schema = pa.schema([("k", pa.int64()), ("x", pa.int64())])

    def feed() -> Iterator[pa.RecordBatch]:
        for i in range(good_batches):
            yield pa.record_batch({"k": [i], "x": [i]}, schema=schema)
        raise FeedBroke("the feed broke")

    with pytest.raises(
        pds.DataError, match=r"source 's' upserts: the input stream raised FeedBroke: the feed broke"
    ) as err:
        p.update({"s": pa.RecordBatchReader.from_batches(schema, feed())})
    assert isinstance(err.value.__cause__, FeedBroke)
    assert p.refresh() == 0


# -- section 4: pipeline keys are checked as dataset and table keys are ---------------


@pytest.mark.spec("S2-4")
@pytest.mark.parametrize("key", ["\ud800x", "//", "", "/", "a/../b", "a\x00b", "k" * 1025])
@pytest.mark.parametrize("entry", ["create", "open"])
def test_a_bad_pipeline_key_is_invalid_path_before_any_io(key: str, entry: str, tmp_path: Path) -> None:
    store = pds.open_store(tmp_path.as_uri())
    with pytest.raises(InvalidPath):
        getattr(Pipeline, entry)(store, key)
    with pytest.raises(InvalidPath):  # the same key is refused for a table alike
        pds.Table.create(store, key, schema=pa.schema([("a", pa.int64())]))
    assert list(tmp_path.iterdir()) == [], "nothing written"


@pytest.mark.spec("S2-4")
def test_a_pipeline_key_that_is_not_a_str_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        Pipeline.create(pds.open_store("memory://"), 7)  # type: ignore[arg-type]


# -- section 4: output and changes that do not fit are refused, naming what -----------


@pytest.mark.spec("S2-4")
def test_a_batched_produces_extra_column_is_refused_naming_it() -> None:
    p = Pipeline.create(pds.open_store("memory://"), "extra")
    src = _source(p)

    @p.stage("b", sources=[src], key={"t": pa.int64()}, value={"x": pa.int64()}, batched=True)
    def b(groups: pa.Table) -> pa.Table:
        return pa.table({"t": groups["k"], "x": groups["x"], "k": groups["k"], "note": ["kept?"] * groups.num_rows})

    with pytest.raises(SchemaMismatch, match=r"stage 'b'.*extra columns \['note'\]"):
        p.update({"s": _inputs()})
    assert p.refresh() == 0


@pytest.mark.spec("S2-4")
def test_a_batched_produce_whose_value_is_named_like_its_key_is_not_extra() -> None:
    """Declared columns are never extra: a value column named like the
    target key, and a source key column named like either."""
    p = Pipeline.create(pds.open_store("memory://"), "named")
    src = _source(p)

    @p.stage("b", sources=[src], key={"k": pa.int64()}, value={"k": pa.int64(), "x": pa.int64()}, batched=True)
    def b(groups: pa.Table) -> pa.Table:
        return groups.select(["k", "x"])

    p.update({"s": _inputs()})
    assert p.read("b").num_rows == 5


@pytest.mark.spec("S2-4")
@pytest.mark.parametrize("single", [True, False])
def test_a_two_element_list_is_not_a_pair(single: bool) -> None:
    """Only tuples are (key, value) pairs: a yielded list is refused,
    naming it (with one value column, [key, value] could be a value)."""
    p = Pipeline.create(pds.open_store("memory://"), "lists")
    src = _source(p)
    value = {"x": pa.int64()} if single else {"x": pa.int64(), "y": pa.int64()}

    @p.stage("r", sources=[src], key={"t": pa.int64()}, value=value)
    def r(key: int, values: Iterator[dict[str, Any]]) -> Iterator[Any]:
        for v in values:
            yield [v["x"], v["x"] if single else {"x": v["x"], "y": 0}]

    with pytest.raises(SchemaMismatch, match=r"stage 'r'.*\(2-tuples\); key 1 yielded \[10, .*\] \(list\)"):
        p.update({"s": _inputs()})
    assert p.refresh() == 0


@pytest.mark.spec("S2-4")
def test_deletes_with_a_column_that_is_not_a_key_are_refused_naming_it() -> None:
    p = Pipeline.create(pds.open_store("memory://"), "deletes")
    _source(p)
    p.update({"s": _inputs()})
    with pytest.raises(SchemaMismatch, match=r"source 's' deletes: extra columns \['x'\]"):
        p.update({"s": Changes(deletes=pa.table({"k": [1], "x": [99]}))})
    assert p.refresh() == 1
    assert p.read("s").num_rows == 5
    # Only the key columns: deleted.
    p.update({"s": Changes(deletes=pa.table({"k": [1]}))})
    assert p.read("s").column("k").to_pylist() == [2, 2]


# -- section 3: a source takes the types Table.append takes -----------------------------


def _typed(p: Pipeline) -> Any:
    return p.source("s", key={"k": pa.int64()}, value={"f": pa.float64(), "s": pa.string()})


@pytest.mark.spec("S2-3")
@pytest.mark.parametrize(
    ("data", "column", "given"),
    [
        (pa.table({"k": [1], "f": [2], "s": ["a"]}), "f", "int64"),  # int -> float, exact but implicit
        (pa.table({"k": pa.array([1], pa.int32()), "f": [2.0], "s": ["a"]}), "k", "int32"),
        (pa.table({"k": [1.0], "f": [2.0], "s": ["a"]}), "k", "double"),
        (pa.table({"k": [1], "f": [2.0], "s": [b"a"]}), "s", "binary"),
    ],
    ids=["int-to-float", "int32-key", "float-key", "bytes-to-str"],
)
def test_a_source_refuses_what_a_table_append_refuses(data: pa.Table, column: str, given: str) -> None:
    store = pds.open_store("memory://")
    p = Pipeline.create(store, "p")
    _typed(p)
    with pytest.raises(SchemaMismatch, match=rf"source 's' upserts: column '{column}' is {given} in the data"):
        p.update({"s": data})
    if column == "k":  # deletes take the key's type alike
        with pytest.raises(SchemaMismatch, match=rf"source 's' deletes: column 'k' is {given} in the data"):
            p.update({"s": Changes(deletes=data.select(["k"]))})
    assert p.refresh() == 0
    # A table of the source's schema refuses the same data.
    t = pds.Table.create(store, "t", schema=pa.schema([("k", pa.int64()), ("f", pa.float64()), ("s", pa.string())]))
    with pytest.raises(SchemaMismatch, match=column):
        t.append(data)


@pytest.mark.spec("S2-3")
def test_a_source_takes_the_physical_variants_a_table_append_takes() -> None:
    p = Pipeline.create(pds.open_store("memory://"), "p")
    _typed(p)
    for s_type in (pa.large_string(), pa.string_view()):
        p.update({"s": pa.table({"k": [1], "f": [2.0], "s": pa.array(["a"], s_type)})})
    p.update({"s": pa.table({"k": [2], "f": [3.0], "s": pa.array(["b"]).dictionary_encode()})})
    assert p.read("s").to_pylist() == [{"k": 1, "f": 2.0, "s": "a"}, {"k": 2, "f": 3.0, "s": "b"}]
    assert p.read("s").schema.field("s").type == pa.string()


@pytest.mark.spec("S2-3")
def test_a_stream_of_another_type_is_refused_before_it_is_read() -> None:
    p = Pipeline.create(pds.open_store("memory://"), "p")
    _typed(p)
    schema = pa.schema([("k", pa.int64()), ("f", pa.int64()), ("s", pa.string())])
    read: list[int] = []

    def batches() -> Iterator[pa.RecordBatch]:
        read.append(1)
        yield pa.record_batch({"k": [1], "f": [2], "s": ["a"]}, schema=schema)

    with pytest.raises(SchemaMismatch, match=r"source 's' upserts: column 'f' is int64 in the data, double"):
        p.update({"s": pa.RecordBatchReader.from_batches(schema, batches())})
    assert read == [] and p.refresh() == 0
