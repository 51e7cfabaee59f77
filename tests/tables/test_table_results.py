"""pds.Table gives exact results (issue #15, section 5, the table items):
every widening ``schema_mode="merge"`` allows, checked against a pyarrow
oracle for filtered scans, deletes and the change feed; the change feed of
an overwrite; compaction coalescing tombstones alone; ``history()`` and
``changes()`` leaving the pin alone; deletes that match nothing committing
nothing.
"""

from __future__ import annotations

import datetime
import math
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from remote_store import Store

import pds
from pds import SchemaMismatch, Table, _core

# -- widenings -----------------------------------------------------------------

# What schema_mode="merge" allows (src/parquet/part_schema.rs `widens`).
_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
WIDENINGS: list[tuple[pa.DataType, pa.DataType]] = [
    (pa.int8(), pa.int16()),
    (pa.int8(), pa.int32()),
    (pa.int8(), pa.int64()),
    (pa.int8(), pa.float32()),
    (pa.int8(), pa.float64()),
    (pa.int16(), pa.int32()),
    (pa.int16(), pa.int64()),
    (pa.int16(), pa.float32()),
    (pa.int16(), pa.float64()),
    (pa.int32(), pa.int64()),
    (pa.int32(), pa.float64()),
    (pa.uint8(), pa.uint16()),
    (pa.uint8(), pa.uint32()),
    (pa.uint8(), pa.uint64()),
    (pa.uint8(), pa.int16()),
    (pa.uint8(), pa.int32()),
    (pa.uint8(), pa.int64()),
    (pa.uint8(), pa.float32()),
    (pa.uint8(), pa.float64()),
    (pa.uint16(), pa.uint32()),
    (pa.uint16(), pa.uint64()),
    (pa.uint16(), pa.int32()),
    (pa.uint16(), pa.int64()),
    (pa.uint16(), pa.float32()),
    (pa.uint16(), pa.float64()),
    (pa.uint32(), pa.uint64()),
    (pa.uint32(), pa.int64()),
    (pa.uint32(), pa.float64()),
    (pa.float16(), pa.float32()),
    (pa.float16(), pa.float64()),
    (pa.float32(), pa.float64()),
    (pa.string(), pa.large_string()),
    (pa.binary(), pa.large_binary()),
    (pa.date32(), pa.date64()),
]

DAY_MS = 86_400_000


def _int_range(t: pa.DataType) -> tuple[int, int]:
    if pa.types.is_unsigned_integer(t):
        return 0, 2**t.bit_width - 1
    return -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1


def _f(t: pa.DataType, v: float) -> float:
    """*v* as a value of float type *t* (exactly what the column holds)."""
    if t == pa.float16():
        return float(np.float16(v))
    if t == pa.float32():
        return float(np.float32(v))
    return float(v)


def old_values(t: pa.DataType) -> list[Any]:
    if pa.types.is_integer(t):
        lo, hi = _int_range(t)
        signed = [-1] if lo < 0 else []
        return sorted({lo, lo + 1, *signed, 0, 1, 2, hi - 1, hi})
    if t == pa.float16():
        return [-65504.0, -2.5, -0.0, 0.0, 0.5, 1.0, 2048.0, 65504.0, math.nan]
    if t == pa.float32():
        return [_f(t, v) for v in (-3.0e38, -2.5, 0.0, 0.001, 1.0, 16777216.0, 3.0e38, math.nan)]
    if t == pa.date32():
        return [-1, 0, 1, 18000, 18001]
    if t == pa.string():
        return ["", "a", "b", "ba", "z"]
    if t == pa.binary():
        return [b"", b"\x00", b"a", b"z"]
    raise AssertionError(t)


def new_values(old: pa.DataType, t: pa.DataType) -> list[Any]:
    if pa.types.is_integer(t):
        lo, hi = _int_range(old)
        tlo, thi = _int_range(t)
        out = {tlo, thi, hi + 1, 0, 5}
        if lo - 1 >= tlo:
            out.add(lo - 1)
        return sorted(out)
    if pa.types.is_floating(t) and pa.types.is_integer(old):
        lo, hi = _int_range(old)
        return [_f(t, v) for v in (lo - 0.5, hi + 0.5, 2.5, -0.0, math.inf, -math.inf, math.nan)]
    if t == pa.float32():
        return [_f(t, v) for v in (70000.5, -70000.5, 0.25, 65504.0, math.nan, math.inf)]
    if t == pa.float64() and old == pa.float16():
        return [1e300, -70000.5, 0.1, 65504.0, math.nan]
    if t == pa.float64():
        return [1e300, -1e300, 0.1, 3.0e38, math.nan]
    if t == pa.date64():
        return [d * DAY_MS for d in (-2, 18001, 18002, 30000)]
    if t == pa.large_string():
        return ["a", "c", "zz", "é"]
    if t == pa.large_binary():
        return [b"a", b"c", b"\xff"]
    raise AssertionError(t)


def _as_filter_value(t: pa.DataType, v: Any) -> Any:
    """A Python value the filter takes for a value *v* (storage form) of *t*."""
    if t == pa.date64():
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=v // DAY_MS)
    return v


def filter_values(old: pa.DataType, t: pa.DataType) -> list[Any]:
    """Values of the new type at and around both ranges (storage form)."""
    seen = [v for v in old_values(old) + new_values(old, t) if not (isinstance(v, float) and math.isnan(v))]
    if t == pa.date64():
        days = set(old_values(old)) | {v // DAY_MS for v in new_values(old, t)}
        return sorted({(d + k) * DAY_MS for d in days for k in (-1, 0, 1)})
    if pa.types.is_integer(t):
        tlo, thi = _int_range(t)
        return sorted({v + k for v in seen for k in (-1, 0, 1) if tlo <= v + k <= thi})
    if pa.types.is_floating(t):
        out = {_f(t, v + k) for v in seen for k in (-0.5, 0.0, 0.5) if math.isfinite(v)}
        return [*sorted(out | {math.inf, -math.inf}), math.nan]
    if pa.types.is_large_string(t):
        return sorted(set(seen) | {"", "b0", "zzz"})
    return sorted(set(seen) | {b"\x01"})


def _column(t: pa.DataType, values: list[Any]) -> pa.Array:
    if t == pa.float16():
        return pa.array(
            np.array([v if v is not None else 0.0 for v in values], np.float16),
            mask=np.array([v is None for v in values]),
        )
    if t == pa.date32():
        return pa.array(values, pa.int32()).cast(t)
    if t == pa.date64():
        return pa.array(values, pa.int64()).cast(t)
    return pa.array(values, t)


def _rows(t: pa.DataType, values: list[Any], first_id: int) -> pa.Table:
    vals = [*values, None]
    return pa.table({"id": pa.array(range(first_id, first_id + len(vals)), pa.int64()), "v": _column(t, vals)})


def _cast_to(table: pa.Table, t: pa.DataType) -> pa.Table:
    v = table.column("v")
    if v.type == pa.float16():
        arr = v.combine_chunks()
        as_np = arr.to_numpy(zero_copy_only=False).astype(np.float64 if t == pa.float64() else np.float32)
        cast = pa.array(as_np, t, mask=arr.is_null().to_numpy(zero_copy_only=False))
    else:
        cast = v.cast(t)
    return table.set_column(1, "v", cast)


_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "==": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def oracle_mask(data: pa.Table, cond: tuple[str, str, Any], t: pa.DataType) -> pa.ChunkedArray:
    """pyarrow.compute's answer for one condition (SQL nulls, IEEE floats)."""
    column, op, value = cond
    col = data.column(column)
    if op == "is_null":
        return pc.is_null(col)
    if op == "is_not_null":
        return pc.is_valid(col)
    if op in ("in", "not in"):
        any_eq = pc.fill_null(pc.equal(col, pa.scalar(value[0], t)), False)
        for v in value[1:]:
            any_eq = pc.or_(any_eq, pc.fill_null(pc.equal(col, pa.scalar(v, t)), False))
        return any_eq if op == "in" else pc.and_(pc.invert(any_eq), pc.is_valid(col))
    return pc.fill_null(_CMP[op](col, pa.scalar(value, t)), False)


def _ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def _py(t: pa.Table) -> list[tuple[Any, ...]]:
    """Rows as sortable tuples (NaN spelled out: it is never equal to itself)."""
    out = []
    for i, v in zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True):
        if isinstance(v, float) and math.isnan(v):
            v = "nan"
        elif isinstance(v, float) and v == 0.0:
            v = ("zero", math.copysign(1.0, v))
        out.append((i, repr(v)))
    return sorted(out)


def _one_logical_type(a: pa.DataType, b: pa.DataType) -> bool:
    """string/large_string (binary/large_binary) are one type to the strict
    check: a strict append of the other casts to the table's type (U-2)."""
    kinds = (pa.types.is_string, pa.types.is_large_string), (pa.types.is_binary, pa.types.is_large_binary)
    return any(any(k(a) for k in ks) and any(k(b) for k in ks) for ks in kinds)


def widened_table(store: Store, key: str, old: pa.DataType, new: pa.DataType, **create: Any) -> tuple[Table, pa.Table]:
    """Old rows in two files, a merge that widens ``v``, then new rows in
    two more files. Returns the table and the oracle's data (cast)."""
    first = _rows(old, old_values(old), 0)
    second = _rows(old, list(reversed(old_values(old))), 100)
    t = Table.create(store, key, data=first, row_group_size=3, **create)
    t.append(second)
    if not _one_logical_type(old, new):
        with pytest.raises(SchemaMismatch):
            t.append(_rows(new, new_values(old, new), 200))
    third = _rows(new, new_values(old, new), 200)
    t.append(third, schema_mode="merge")
    assert t.schema.field("v").type == new
    fourth = _cast_to(_rows(old, old_values(old), 300), new)  # old values, new type
    t.append(fourth)
    data = pa.concat_tables([_cast_to(first, new), _cast_to(second, new), third, fourth])
    return t, data


def _conditions(old: pa.DataType, new: pa.DataType) -> Iterator[tuple[str, str, Any]]:
    values = filter_values(old, new)
    for v in values:
        for op in _CMP:
            yield ("v", op, v)
    plain = [v for v in values if not (isinstance(v, float) and (math.isnan(v) or v == 0.0))]
    yield ("v", "in", plain[::3][:6])
    yield ("v", "not in", plain[1::4][:6])
    yield ("v", "is_null", None)
    yield ("v", "is_not_null", None)


def _pds_filter(cond: tuple[str, str, Any], t: pa.DataType) -> list[tuple[str, str, Any]]:
    column, op, value = cond
    if isinstance(value, list):
        return [(column, op, [_as_filter_value(t, v) for v in value])]
    return [(column, op, _as_filter_value(t, value) if value is not None else None)]


def _name(pair: tuple[pa.DataType, pa.DataType]) -> str:
    return f"{pair[0]}->{pair[1]}"


@pytest.mark.spec("S-5")
def test_merge_allows_exactly_the_listed_widenings() -> None:
    types = [
        *_INTS,
        pa.float16(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.date32(),
        pa.date64(),
    ]
    store = pds.open_store("memory://")
    allowed = {(str(a), str(b)) for a, b in WIDENINGS}
    for i, a in enumerate(types):
        for j, b in enumerate(types):
            if a == b:
                continue
            key = f"t{i}-{j}"
            t = Table.create(store, key, pa.schema([pa.field("v", a)]))
            data = pa.table({"v": pa.nulls(1, b)})
            if (str(a), str(b)) in allowed:
                assert t.append(data, schema_mode="merge") == 1
                assert t.schema.field("v").type == b
            elif (str(b), str(a)) in allowed:  # narrower data is cast up to the table's type
                assert t.append(data, schema_mode="merge") == 1
                assert t.schema.field("v").type == a
            else:
                with pytest.raises(SchemaMismatch):
                    t.append(data, schema_mode="merge")
                assert t.refresh() == 0


@pytest.mark.spec("S-5")
@pytest.mark.parametrize("pair", WIDENINGS, ids=_name)
def test_filtered_scans_after_every_widening_match_pyarrow(pair: tuple[pa.DataType, pa.DataType]) -> None:
    old, new = pair
    store = pds.open_store("memory://")
    t, data = widened_table(store, "t", old, new)
    assert _py(t.to_arrow()) == _py(data)
    for cond in _conditions(old, new):
        expected = sorted(data.filter(oracle_mask(data, cond, new)).column("id").to_pylist())
        got = _ids(t.to_arrow(filter=_pds_filter(cond, new)))
        assert got == expected, cond
    # Two conditions at once, across the old and new ranges.
    values = [v for v in filter_values(old, new) if not (isinstance(v, float) and math.isnan(v))]
    lo, hi = values[len(values) // 4], values[-len(values) // 4]
    both = data.filter(pc.and_(oracle_mask(data, ("v", ">=", lo), new), oracle_mask(data, ("v", "<", hi), new)))
    got = t.to_arrow(filter=_pds_filter(("v", ">=", lo), new) + _pds_filter(("v", "<", hi), new))
    assert _ids(got) == _ids(both)


def _delete_plan(old: pa.DataType, new: pa.DataType) -> list[tuple[str, str, Any]]:
    """Deletes that cross the old and new ranges, then ones that match only
    rows already deleted."""
    o = [v for v in old_values(old) if not (isinstance(v, float) and math.isnan(v))]
    if new == pa.date64():
        o = [d * DAY_MS for d in o]
    n = [v for v in new_values(old, new) if not (isinstance(v, float) and (math.isnan(v) or math.isinf(v)))]
    mid = o[len(o) // 2]
    plan: list[tuple[str, str, Any]] = [
        ("v", "==", mid),
        ("v", ">=", o[-1]),  # the old maximum and everything new above it
        ("v", "<", o[1]),
        ("v", "==", mid),  # already gone: no commit
        ("v", ">", max(n + o)),  # nothing there: no commit
    ]
    if pa.types.is_floating(new):
        plan.insert(2, ("v", "<=", 2.5))
    return plan


# Binary columns cannot be primary keys.
_DELETE_CASES = [
    pytest.param(pair, pk, id=f"{_name(pair)}-{'key' if pk else 'filter'}")
    for pair in WIDENINGS
    for pk in (None, "v")
    if not (pk and pair[0] == pa.binary())
]


@pytest.mark.spec("S-5")
@pytest.mark.parametrize(("pair", "primary_key"), _DELETE_CASES)
def test_deletes_and_changes_after_every_widening_match_pyarrow(
    pair: tuple[pa.DataType, pa.DataType], primary_key: str | None
) -> None:
    old, new = pair
    store = pds.open_store("memory://")
    t, data = widened_table(store, "t", old, new, primary_key=primary_key)
    start = t.version + 1
    live = data
    deleted_by_version: dict[int, pa.Table] = {}
    for cond in _delete_plan(old, new):
        before = t.version
        hit = oracle_mask(live, cond, new)
        v = t.delete(_pds_filter(cond, new))
        gone = live.filter(hit)
        if gone.num_rows:
            assert v == before + 1, cond
            deleted_by_version[v] = gone
        else:
            assert v == before, f"{cond} matched nothing, yet committed"
        live = live.filter(pc.invert(hit))
        assert _py(t.to_arrow()) == _py(live), cond
    for cond in list(_conditions(old, new))[::5]:
        expected = sorted(live.filter(oracle_mask(live, cond, new)).column("id").to_pylist())
        assert _ids(t.to_arrow(filter=_pds_filter(cond, new))) == expected, cond
    feed = t.changes(start).read_all()
    assert set(feed["_change_type"].to_pylist()) <= {"delete"}
    for version, gone in deleted_by_version.items():
        mine = feed.filter(pc.equal(feed["_commit_version"], version)).select(["id", "v"])
        assert _py(mine) == _py(gone), version
    assert feed.num_rows == sum(g.num_rows for g in deleted_by_version.values())
    inserts = t.changes(0, start - 1).read_all()
    assert _py(inserts.select(["id", "v"])) == _py(data)
    # Coalescing keeps each key range's type; rewriting applies it.
    t.compact(target_file_size=1, min_deleted_fraction=1.0)
    assert len(t.manifest["tombstones"]) <= 1
    assert _py(t.to_arrow()) == _py(live)
    t.compact(min_deleted_fraction=0.0)
    assert _py(t.to_arrow()) == _py(live)
    assert t.changes(start).read_all().num_rows == feed.num_rows


@pytest.mark.spec("S-5")
@pytest.mark.parametrize(
    "pair", [(pa.date32(), pa.date64()), (pa.int32(), pa.float64()), (pa.uint32(), pa.int64())], ids=_name
)
def test_widened_tables_on_every_store(fast_store: Store, pair: tuple[pa.DataType, pa.DataType]) -> None:
    """The issue's case (date32 -> date64: days were read as milliseconds)
    and two others, on memory, file and SeaweedFS."""
    old, new = pair
    t, data = widened_table(fast_store, "t", old, new, primary_key="v")
    for cond in list(_conditions(old, new))[::3]:
        expected = sorted(data.filter(oracle_mask(data, cond, new)).column("id").to_pylist())
        assert _ids(t.to_arrow(filter=_pds_filter(cond, new))) == expected, cond
    live = data
    for cond in _delete_plan(old, new)[:3]:
        hit = oracle_mask(live, cond, new)
        t.delete(_pds_filter(cond, new))
        live = live.filter(pc.invert(hit))
        assert _py(t.to_arrow()) == _py(live), cond
    other = Table.open(fast_store, "t")
    other.delete([("id", ">=", 0)])
    assert _py(Table.open(fast_store, "t").to_arrow()) == []


@pytest.mark.spec("S-5")
def test_date32_to_date64_statistics_are_days_not_milliseconds(fast_store: Store) -> None:
    """The issue's report, spelled out: a filter and a delete on dates of
    the old files after the widening."""
    days = pa.array([18000, 18001, 18002], pa.int32()).cast(pa.date32())
    t = Table.create(fast_store, "t", data=pa.table({"id": [0, 1, 2], "d": days}))
    later = pa.array([19000 * DAY_MS], pa.int64()).cast(pa.date64())
    t.append(pa.table({"id": [3], "d": later}), schema_mode="merge")
    day = datetime.date(1970, 1, 1) + datetime.timedelta(days=18001)
    assert _ids(t.to_arrow(filter=[("d", "==", day)])) == [1]
    assert _ids(t.to_arrow(filter=[("d", ">", day)])) == [2, 3]
    v = t.delete([("d", "<=", day)])
    assert _ids(t.to_arrow()) == [2, 3]
    assert sorted(t.changes(v, v).read_all()["id"].to_pylist()) == [0, 1]


# -- the change feed of an overwrite -------------------------------------------


def _overwrite(t: Table, data: pa.Table, schema: pa.Schema | None = None) -> int:
    """Overwrite *t* as the Spark writer does: upload, then commit the files
    with mode="overwrite"."""
    schema = schema or data.schema
    native = t._native
    files = _core.table_write_files(
        native,
        t._path,
        data.to_reader(),
        prefix=uuid.uuid4().hex,  # unique per job, as the Spark writer's
        schema=schema,
        compression="zstd",
        row_group_size=None,
        target_file_size=None,
        parallelism=1,
    )
    state = _core.table_commit_files(
        native,
        t._path,
        files,
        mode="overwrite",
        schema=schema,
        primary_key=t.primary_key,
        compression="zstd",
        row_group_size=None,
        target_file_size=None,
        metadata=None,
    )
    return state.version


def _rows3(start: int, stop: int) -> pa.Table:
    ids = list(range(start, stop))
    return pa.table({"id": pa.array(ids, pa.int64()), "s": [f"r{i}" for i in ids]})


def _feed(reader: pa.RecordBatchReader) -> list[tuple[int, str, int]]:
    f = reader.read_all()
    return sorted(
        zip(f["_commit_version"].to_pylist(), f["_change_type"].to_pylist(), f["id"].to_pylist(), strict=True)
    )


@pytest.mark.spec("S-5")
def test_the_change_feed_of_an_overwrite_shows_every_row_it_replaced(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=_rows3(0, 10), primary_key="id", row_group_size=3)
    t.append(_rows3(10, 20))
    t.delete([("id", "<", 3)])  # key range
    t.delete([("s", "==", "r15")])  # positions
    t.delete([("id", ">=", 18)])
    live_before = _ids(t.to_arrow())
    v = _overwrite(t, _rows3(100, 105))
    assert t.refresh() == v
    assert _ids(t.to_arrow()) == list(range(100, 105))
    expected = [(v, "delete", i) for i in live_before] + [(v, "insert", i) for i in range(100, 105)]
    assert _feed(t.changes(v, v)) == sorted(expected)
    # Across the whole history, every row that ever left shows once.
    everything = _feed(t.changes(0))
    deletes = sorted(i for _, kind, i in everything if kind == "delete")
    assert deletes == list(range(20))
    # An overwrite of an empty table, and one that changes the schema to one
    # the old rows can be read in, are fine; an incompatible one says so.
    v2 = _overwrite(t, _rows3(200, 201))
    assert _feed(t.changes(v2, v2)) == sorted([(v2, "delete", i) for i in range(100, 105)] + [(v2, "insert", 200)])
    wider = pa.table({"id": pa.array([300], pa.int64()), "s": ["x"], "extra": [1.5]})
    v3 = _overwrite(t, wider)
    f = t.changes(v3, v3).read_all()
    assert f.column_names == ["id", "s", "extra", "_change_type", "_commit_version"]
    assert sorted(zip(f["_change_type"].to_pylist(), f["id"].to_pylist(), f["extra"].to_pylist(), strict=True)) == [
        ("delete", 200, None),
        ("insert", 300, 1.5),
    ]
    other = pa.table({"id": ["a"], "s": ["x"]})
    v4 = _overwrite(t, other)
    with pytest.raises(SchemaMismatch):
        t.changes(v4, v4).read_all()
    assert _feed(t.changes(v3, v3)) == [(v3, "delete", 200), (v3, "insert", 300)]


@pytest.mark.spec("S-5")
def test_compaction_still_adds_nothing_to_the_feed(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=_rows3(0, 50), row_group_size=10)
    for i in range(1, 4):
        t.append(_rows3(i * 50, i * 50 + 50))
    t.delete([("id", "<", 40)])
    t.delete([("s", "in", ["r55", "r160"])])
    expected = _ids(t.to_arrow())
    v = t.compact(min_deleted_fraction=0.5)
    assert t.history(1)[0]["operation"] == "compact" and t.history(1)[0]["files_removed"] > 0
    assert t.changes(v, v).read_all().num_rows == 0
    assert _ids(t.to_arrow()) == expected


# -- compaction coalesces tombstones on its own --------------------------------


@pytest.mark.spec("S-5")
def test_ten_light_deletes_leave_one_tombstone_after_compaction(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=_rows3(0, 1000), row_group_size=100, primary_key="id")
    for i in range(5):
        t.delete([("s", "==", f"r{i * 100 + 7}")])  # row positions
    for i in range(5):
        t.delete([("id", "==", i * 100 + 50)])  # key ranges
    assert len(t.manifest["tombstones"]) == 10
    expected = _ids(t.to_arrow())
    assert len(expected) == 990
    data_before = sorted(f["path"] for f in t.manifest["data_files"])
    before = t.version
    v = t.compact()
    assert v == before + 1
    m = t.manifest
    assert len(m["tombstones"]) == 1
    assert sorted(f["path"] for f in m["data_files"]) == data_before, "no data file rewritten"
    h = t.history(1)[0]
    assert h["operation"] == "compact" and h["files_removed"] == 0 and h["parameters"]["files_added"] == 0
    assert _ids(t.to_arrow()) == expected
    assert t.changes(v, v).read_all().num_rows == 0
    assert _ids(t.to_arrow(version=before)) == expected
    # One tombstone: nothing left to do.
    assert t.compact() == v
    # A later delete still applies after the coalesced one.
    t.delete([("id", "==", 999)])
    assert _ids(t.to_arrow()) == [i for i in expected if i != 999]


# -- history() and changes() leave the pin alone ---------------------------------


@pytest.mark.spec("S-5")
def test_history_and_changes_read_the_latest_without_moving_the_pin(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=_rows3(0, 10))
    other = Table.open(fast_store, "t")
    other.append(_rows3(10, 20))
    other.delete([("id", "<", 5)])
    assert t.version == 0
    h = t.history()
    assert [x["version"] for x in h] == [2, 1, 0]
    assert t.version == 0
    assert _ids(t.to_arrow()) == list(range(10))
    feed = _feed(t.changes(1))
    assert [k for _, k, _ in feed].count("delete") == 5 and [k for _, k, _ in feed].count("insert") == 10
    assert t.version == 0
    assert _ids(t.to_arrow()) == list(range(10))
    assert t.history(limit=1)[0]["version"] == 2 and t.version == 0
    assert t.refresh() == 2


# -- a delete that matches nothing commits nothing -----------------------------


@pytest.mark.spec("S-5")
def test_key_range_deletes_that_match_no_live_row_commit_nothing(fast_store: Store) -> None:
    ids = [i for i in range(0, 3000) if not 1000 <= i < 2000]  # a gap inside one file's range
    data = pa.table({"id": pa.array(ids, pa.int64()), "s": [f"r{i}" for i in ids]})
    t = Table.create(fast_store, "t", data=data, primary_key="id", row_group_size=250)
    t.append(pa.table({"id": pa.array([5000, 5001], pa.int64()), "s": ["a", "b"]}))
    v = t.version
    assert t.delete([("id", ">=", 1200), ("id", "<", 1800)]) == v, "a gap: nothing matches"
    assert t.delete([("id", "==", 1500)]) == v
    assert t.delete([("id", ">", 5001)]) == v, "beyond every file"
    assert t.delete([("id", ">=", 4000), ("id", "<", 5000)]) == v
    # Matches: committed, then the same range again matches only deleted rows.
    assert t.delete([("id", ">=", 900), ("id", "<", 2100)]) == v + 1
    assert t.delete([("id", ">=", 950), ("id", "<=", 2050)]) == v + 1, "every row in range already deleted"
    assert t.delete([("s", "==", "r10")]) == v + 2
    assert t.delete([("id", "==", 10)]) == v + 2, "deleted by position already"
    assert t.delete([("id", "==", 5000)]) == v + 3
    assert t.delete([("id", "==", 5000)]) == v + 3
    assert t.delete([("id", "<", 250)]) == v + 4  # a whole row group, by key
    assert t.delete([("id", "<", 249)]) == v + 4
    expected = [i for i in [*ids, 5000, 5001] if not 900 <= i < 2100 and i not in (10, 5000) and i >= 250]
    assert _ids(t.to_arrow()) == expected
    assert [h["operation"] for h in t.history()].count("delete") == 4


@pytest.mark.spec("S-5")
def test_filter_deletes_that_match_no_live_row_commit_nothing(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=_rows3(0, 500), row_group_size=50)
    v = t.version
    assert t.delete([("s", "==", "nope")]) == v
    assert t.delete([("s", "==", "r5")]) == v + 1
    assert t.delete([("s", "==", "r5")]) == v + 1, "already deleted"
    assert t.delete([("id", "<", 50)]) == v + 2  # a whole row group
    assert t.delete([("id", "<", 40), ("s", "!=", "x")]) == v + 2, "inside a deleted row group"
    assert len(t.history()) == 3
