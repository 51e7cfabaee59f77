"""The row form's fast paths (issue P, item 5): values converted a chunk at a
time and emitted pairs checked inline give exactly what the careful,
value-by-value paths give: the same Python types, the same errors."""

from __future__ import annotations

import datetime
import decimal
import re
import zoneinfo
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pytest

import pds
from pds import DataError, Pipeline, SchemaMismatch
from pds.producers import exact, produce
from pds.producers.exact import to_python

# Microseconds since the epoch: edges of datetime's range and a DST fold.
_US = [
    None,
    0,
    1,
    -1,
    1_700_000_000_123_456,
    -62_135_596_800_000_000,
    253_402_300_799_999_999,
    1_698_541_200_000_000,  # 2023-10-29 01:00 UTC: Europe/Paris 02:00, fold 1
    1_698_537_600_000_000,  # an hour before: 02:00, fold 0
]


def _leaves() -> list[pa.Array]:
    out = []
    for tz in (None, "UTC", "Europe/Paris", "+07:30", "America/New_York"):
        for unit, div in (("s", 10**6), ("ms", 10**3), ("us", 1)):
            # A zone whose offset pushes an instant out of datetime's range
            # fails in both paths alike (tested below): not here.
            vals = [v for v in _US if v is None or tz is None or abs(v) < 10**16]
            out.append(pa.array([None if v is None else v // div for v in vals], pa.timestamp(unit, tz)))
    return [
        *out,
        pa.array([None, 0, -719_162, 2_932_896, 19_000], pa.date32()),
        pa.array([None, 0, -1, 10**15, -(10**15)], pa.duration("us")),
        pa.array([None, 0, 5, -86_399], pa.duration("s")),
        pa.array([None, 0, 5, 86_399_999], pa.time32("ms")),
        pa.array([None, 0, 86_399], pa.time32("s")),
        pa.array([None, 0, 86_399_999_999], pa.time64("us")),
        pa.array(
            [decimal.Decimal(x) if x else None for x in ("0.00", "-1.50", None, "99999999.99")], pa.decimal128(10, 2)
        ),
        pa.array([decimal.Decimal("1.2E+3"), None], pa.decimal128(10, -2)),
        pa.array([decimal.Decimal("-1" + "0" * 70), None], pa.decimal256(76, 0)),
        pa.array([decimal.Decimal("1.5"), None], pa.decimal64(5, 1)),
        pa.array(["a", None, "b", "a"]).dictionary_encode(),
        pa.array([[1, None], None, []], pa.list_(pa.timestamp("ms", "UTC"))),
        pa.array([None, None], pa.timestamp("us")),
        pa.array([], pa.date32()),
        pa.array([1, 2, 3], pa.timestamp("us", "Europe/Paris")).slice(1),
    ]


def _same(got: list[Any], want: list[Any]) -> bool:
    return len(got) == len(want) and all(
        type(g) is type(w) and repr(g) == repr(w) and getattr(g, "fold", 0) == getattr(w, "fold", 0)
        for g, w in zip(got, want, strict=True)
    )


@pytest.mark.spec("P-5")
@pytest.mark.parametrize("arr", _leaves(), ids=lambda a: str(a.type))
def test_bulk_conversion_gives_what_to_pylist_gives(arr: pa.Array, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same types, reprs (time zones, decimal exponents) and folds; and
    without numpy (optional for pyarrow), the same by the careful path."""
    assert _same(to_python(arr), arr.to_pylist())
    monkeypatch.setattr(exact, "_HAVE_NUMPY", False)
    assert _same(to_python(arr), arr.to_pylist())


@pytest.mark.spec("P-5")
@pytest.mark.parametrize(
    "arr",
    [
        pa.array([2**62], pa.timestamp("us")),
        pa.array([-62_135_596_800_000_000], pa.timestamp("us", "America/New_York")),
        pa.array([10**9], pa.date32()),
        pa.array([2**62], pa.duration("s")),
    ],
    ids=str,
)
def test_a_value_out_of_the_python_types_range_fails_as_to_pylist_does(arr: pa.Array) -> None:
    with pytest.raises(OverflowError):
        arr.to_pylist()
    with pytest.raises(OverflowError):
        to_python(arr)


_TYPES = {
    "i": pa.int64(),
    "u": pa.uint64(),
    "f": pa.float32(),
    "s": pa.string(),
    "b": pa.binary(),
    "d": pa.decimal128(20, 3),
    "ts": pa.timestamp("us", "Europe/Paris"),
    "naive": pa.timestamp("ms"),
    "day": pa.date32(),
    "dur": pa.duration("s"),
    "t": pa.time64("us"),
    "l": pa.list_(pa.int16()),
    "st": pa.struct([("x", pa.int8()), ("y", pa.string())]),
}


def _many(n: int) -> pa.Table:
    """*n* rows of every type in :data:`_TYPES`, every third value null;
    keys ``(k, j)``, three rows per key."""
    paris = datetime.datetime(2023, 10, 29, 2, 30, fold=1, tzinfo=pa.lib.string_to_tzinfo("Europe/Paris"))

    def value(name: str, i: int) -> Any:
        if i % 3 == 1:
            return None
        return {
            "i": -(2**62) + i,
            "u": 2**64 - 1 - i,
            "f": 0.5 * i,
            "s": f"s{i}",
            "b": bytes([i % 256]),
            "d": decimal.Decimal(i).scaleb(-3),
            "ts": paris + datetime.timedelta(seconds=i),
            "naive": datetime.datetime(1, 1, 1) + datetime.timedelta(milliseconds=i),
            "day": datetime.date(9999, 12, 31) - datetime.timedelta(days=i),
            "dur": datetime.timedelta(seconds=-i),
            "t": datetime.time(23, 59, 59, i % 1_000_000),
            "l": [i % 100, None],
            "st": {"x": i % 100, "y": None},
        }[name]

    cols: dict[str, pa.Array] = {
        "k": pa.array([i // 3 for i in range(n)], pa.int64()),
        "j": pa.array([f"j{i // 3 % 2}" for i in range(n)]),
    }
    cols.update({name: pa.array([value(name, i) for i in range(n)], t) for name, t in _TYPES.items()})
    return pa.table(cols)


def _copy_pipeline(seen: list[tuple[Any, dict[str, Any]]]) -> Pipeline:
    p = Pipeline.create(pds.open_store("memory://"), "rows")
    src = p.source("src", key={"k": pa.int64(), "j": pa.string()}, value=_TYPES)

    @p.stage("copy", sources=[src], key={"k": pa.int64(), "j": pa.string(), "n": pa.int64()}, value=_TYPES)
    def copy(key: tuple[int, str], values: Iterator[dict[str, Any]]) -> Iterator[Any]:
        for n, v in enumerate(values):
            seen.append((key, v))
            yield (*key, n), v

    return p


@pytest.mark.spec("P-5")
def test_row_form_hands_over_and_takes_back_every_type_exactly() -> None:
    """Compound keys, nulls, decimals, zoned timestamps (a DST fold), huge
    unsigned ints and datetime's range edges, over several chunks."""
    n = produce.ROW_CHUNK * 2 + 7
    table = _many(n)
    seen: list[tuple[Any, dict[str, Any]]] = []
    p = _copy_pipeline(seen)
    p.update({"src": table})
    want = table.to_pylist()
    assert len(seen) == n
    for (key, got), row in zip(seen, want, strict=True):
        assert key == (row["k"], row["j"])
        assert list(got) == list(_TYPES)
        assert _same(list(got.values()), [row[name] for name in _TYPES]), (got, row)
    out = p.read("copy").sort_by([("k", "ascending"), ("n", "ascending")])
    for name, t in _TYPES.items():
        assert out.schema.field(name).type == t
        assert out.column(name).equals(table.column(name)), name


def _single(emit: Any) -> Pipeline:
    """One int64 value field ``n``; Produce yields ``emit(key, value)`` for
    each value."""
    p = Pipeline.create(pds.open_store("memory://"), "one")
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})

    @p.stage("one", sources=[src], key={"k": pa.int64()}, value={"n": pa.int64()})
    def one(key: int, values: Iterator[dict[str, Any]]) -> Iterator[Any]:
        for v in values:
            yield emit(key, v["v"])

    return p


class _Frozen(Mapping[str, Any]):
    """A mapping that is not a dict: takes the careful path."""

    def __init__(self, **items: Any) -> None:
        self.items_ = items

    def __getitem__(self, name: str) -> Any:
        return self.items_[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.items_)

    def __len__(self) -> int:
        return len(self.items_)


@pytest.mark.spec("P-5")
@pytest.mark.parametrize(
    "emit",
    [
        lambda k, v: (k, v),
        lambda k, v: (k, {"n": v}),
        lambda k, v: (k, _Frozen(n=v)),
        lambda k, v: (k, float(v)),
        lambda k, v: (k, None if v == 2 else v),
    ],
    ids=["scalar", "dict", "mapping", "integral-float", "null"],
)
def test_every_accepted_pair_shape_gives_the_same_rows(emit: Any) -> None:
    p = _single(emit)
    p.update({"s": pa.table({"k": [1, 1, 2], "v": [1, 3, 2]})})
    rows = sorted(p.read("one").to_pylist(), key=lambda r: (r["k"], r["n"] or 0))
    want: list[dict[str, int | None]] = [{"k": 1, "n": 1}, {"k": 1, "n": 3}, {"k": 2, "n": 2}]
    if emit(2, 2)[1] is None:
        want[2]["n"] = None
    assert rows == want


@pytest.mark.spec("P-5")
@pytest.mark.parametrize(
    ("emit", "message"),
    [
        (lambda k, v: (k, 2**64), "column 'n': value 18446744073709551616 (int)"),
        (lambda k, v: (k, 1.5), "column 'n': value 1.5 (float)"),
        (lambda k, v: (k, True), "column 'n': value True (bool)"),
        (lambda k, v: (k, "7"), "column 'n': value '7' (str)"),
        (lambda k, v: (k, {"n": 1, "m": 2}), "value for key 1 has extra fields ['m'] / lacks []"),
        (lambda k, v: (k, _Frozen(m=1)), "value for key 1 has extra fields ['m'] / lacks ['n']"),
        (lambda k, v: (k, v, 3), "key 1 yielded (1, 1, 3) (tuple)"),
        (lambda k, v: "kv", "key 1 yielded 'kv' (str)"),
        (lambda k, v: [k, v], "key 1 yielded [1, 1] (list)"),
        (lambda k, v: (2**63, v), "column 'k': value 9223372036854775808 (int)"),
    ],
)
def test_a_pair_that_does_not_fit_is_the_same_schema_mismatch(emit: Any, message: str) -> None:
    p = _single(emit)
    with pytest.raises(SchemaMismatch, match=r"stage 'one': output does not match.*" + re.escape(message)):
        p.update({"s": pa.table({"k": [1], "v": [1]})})


@pytest.mark.spec("P-5")
def test_a_call_that_emits_more_than_a_buffer_keeps_each_rows_source_key() -> None:
    """Flushing in the middle of one call (and of one chunk) keeps the
    source key of every row: a later delete of that key removes them all."""
    p = Pipeline.create(pds.open_store("memory://"), "many")
    src = p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    fan = produce.ROW_CHUNK + 5

    @p.stage("fan", sources=[src], key={"t": pa.int64()}, value={"n": pa.int64()})
    def spread(key: int, values: Iterator[dict[str, Any]]) -> Iterator[Any]:
        for v in values:
            for i in range(fan if key == 2 else 2):
                yield key * 100_000 + i, {"n": v["v"]}

    p.update({"s": pa.table({"k": [1, 2, 3], "v": [10, 20, 30]})})
    assert p.read("fan").num_rows == fan + 4
    p.update({"s": pds.Changes(deletes=pa.table({"k": [2]}))})
    assert sorted(p.read("fan").column("t").to_pylist()) == [100_000, 100_001, 300_000, 300_001]


@pytest.mark.spec("P-5")
@pytest.mark.parametrize("join", [False, True])
def test_a_value_without_a_python_value_is_an_error_only_where_produce_reads_it(join: bool) -> None:
    """A time64[ns] value with nanoseconds has no Python value: the chunk is
    then converted group by group, so the key a one-source Produce skips is
    no error and the key it reads is a DataError naming the column (a join
    converts each key's values before its call, as before)."""
    p = Pipeline.create(pds.open_store("memory://"), "ns")
    src = p.source("s", key={"k": pa.int64()}, value={"t": pa.time64("ns")})
    sources = [src, p.source("o", key={"k": pa.int64()}, value={"x": pa.int64()})] if join else [src]
    read = {"keys": {2}}

    @p.stage("st", sources=sources, key={"k": pa.int64()}, value={"us": pa.int64()})
    def st(key: int, values: Iterator[dict[str, Any]], *_: Any) -> Iterator[Any]:
        if key in read["keys"]:
            for v in values:
                yield key, v["t"].microsecond
        else:
            yield key, -1

    table = pa.table({"k": [1, 2, 3], "t": pa.array([1, 5_000, 7_000], pa.time64("ns"))})
    changes: dict[str, Any] = {"s": table}
    if join:
        changes["o"] = pa.table({"k": [1], "x": [1]})
        with pytest.raises(DataError, match=r"stage 'st': column 't'.*datetime\.time"):
            p.update(changes)
        return
    p.update(changes)
    assert sorted(p.read("st").to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "us": -1},
        {"k": 2, "us": 5},
        {"k": 3, "us": -1},
    ]
    read["keys"] = {1}
    with pytest.raises(DataError, match=r"stage 'st': column 't'.*datetime\.time"):
        p.rebuild("st")


_PARIS = zoneinfo.ZoneInfo("Europe/Paris")
_NAIVE = [
    None,
    datetime.datetime(1, 1, 1),
    datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
    datetime.datetime(2023, 10, 29, 2, 30, fold=1),
    datetime.datetime(1970, 1, 1, 0, 0, 0, 1),
]
_AWARE = [
    None,
    datetime.datetime(2023, 10, 29, 2, 30, tzinfo=_PARIS),
    datetime.datetime(2023, 10, 29, 2, 30, fold=1, tzinfo=_PARIS),  # the fold: an hour later
    datetime.datetime(2023, 3, 26, 2, 30, tzinfo=_PARIS),  # in the spring gap
    datetime.datetime(1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=7, seconds=5))),
    datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.timezone(datetime.timedelta(hours=-5))),
    datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC),
]


@pytest.mark.spec("P-5")
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Paris"])
def test_emitted_datetimes_in_bulk_give_what_the_careful_path_gives(unit: str, tz: str | None) -> None:
    """Plain datetimes are converted by pyarrow in bulk: the same instants
    (folds, gaps, fixed offsets, range edges) and the same refusals."""
    t = pa.timestamp(unit, tz)
    values = _NAIVE if tz is None else _AWARE
    for vals in (values, [v for v in values if v is None or (v.microsecond == 0 and v.second == 0)]):
        fast = exact._plain_datetimes(vals, t)
        assert fast is not None

        def outcome(arr: pa.Array) -> Any:
            try:
                return exact.conform(arr, t).cast(pa.int64()).to_pylist()
            except exact.Inexact as e:
                return str(e)

        assert outcome(fast) == outcome(exact._temporal_ns_or_us(vals, t))
    # A naive value for a zoned column, or the reverse: the careful path.
    other = _AWARE if tz is None else _NAIVE
    assert exact._plain_datetimes([other[1]], t) is None
    with pytest.raises(exact.Inexact, match="naive" if tz is None else "time-zone aware"):
        exact.from_python([other[1]], t)


@pytest.mark.spec("P-5")
def test_a_stored_date_past_python_range_fails_on_the_key_that_holds_it() -> None:
    """pyarrow cannot make a date past year 9999: the error (wrapped as the
    Produce error of the key being read) names that key, not the first key
    of its chunk, and a key Produce does not read is no error."""
    p = Pipeline.create(pds.open_store("memory://"), "far")
    src = p.source("s", key={"k": pa.int64()}, value={"d": pa.date32()})
    read = {"keys": {1, 3}}

    @p.stage("st", sources=[src], key={"k": pa.int64()}, value={"y": pa.int64()})
    def st(key: int, values: Iterator[dict[str, Any]]) -> Iterator[Any]:
        if key in read["keys"]:
            for v in values:
                yield key, v["d"].year
        else:
            yield key, -1

    p.update({"s": pa.table({"k": [1, 2, 3], "d": pa.array([0, 10**7, 0], pa.date32())})})
    assert sorted(r["y"] for r in p.read("st").to_pylist()) == [-1, 1970, 1970]
    read["keys"] = {1, 2, 3}
    with pytest.raises(pds.ProduceError, match="key 2"):
        p.rebuild("st")
