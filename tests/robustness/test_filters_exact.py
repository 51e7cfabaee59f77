"""Tuple filters compare exactly (R-4): a value the column's type cannot hold
is compared as a number, never cast lossily; incompatible kinds are TypeError.

The oracle is plain Python on the rows (Fractions for numbers), independent
of pds and of pyarrow.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import math
import random
import sys
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from remote_store import Store

import pds
from pds import DatasetIncomplete, ParquetDatasetStore


def _table() -> pa.Table:
    rng = random.Random(4)
    n = 300
    ids = list(range(-150, 150))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "u8": pa.array([None if i % 17 == 0 else (i * 7) % 256 for i in range(n)], pa.uint8()),
            "i8": pa.array([(i % 256) - 128 for i in range(n)], pa.int8()),
            "f32": pa.array([rng.choice([0.1, 0.5, 1.5, -2.25, 3.0]) for _ in range(n)], pa.float32()),
            "dec": pa.array([decimal.Decimal(i) / 8 for i in ids], pa.decimal128(6, 3)),
            "ts": pa.array([1_700_000_000_000 + i * 1500 for i in ids], pa.timestamp("ms")),
            "s": pa.array([f"s{i % 5}" for i in ids]),
        }
    )


def _number(v: Any) -> Fraction | float:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return v
    return Fraction(v)


def _cmp(op: str, a: Fraction, b: Fraction | float) -> bool:
    if isinstance(b, float) and math.isnan(b):
        return op == "!="
    return {
        "==": a == b,
        "!=": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[op]


def _oracle(table: pa.Table, column: str, op: str, value: Any) -> list[int]:
    """The ids of the rows where ``column op value`` holds, in exact arithmetic."""
    out = []
    for row in table.to_pylist():
        x = row[column]
        if x is None:
            continue
        if isinstance(x, datetime.datetime):
            x = Fraction(int((x - datetime.datetime(1970, 1, 1)).total_seconds() * 10**6))
            if isinstance(value, datetime.datetime):
                value = int((value - datetime.datetime(1970, 1, 1)) / datetime.timedelta(microseconds=1))
        if op == "in":
            hit = any(v is not None and _cmp("==", Fraction(x), _number(v)) for v in value)
        elif op == "not in":
            hit = all(v is not None and not _cmp("==", Fraction(x), _number(v)) for v in value)
        else:
            hit = _cmp(op, Fraction(x), _number(value))
        if hit:
            out.append(row["id"])
    return sorted(out)


NUMERIC_VALUES = [1.5, -1.5, 2.0, 2, 255, 256, 300, -1, -129, 127.5, 2**63, 2**70, -(2**70), 0.1, float("nan"),
                  float("inf"), -float("inf"), decimal.Decimal("3.1255"), decimal.Decimal("-2.875")]  # fmt: skip
OPS = ["==", "!=", "<", "<=", ">", ">="]


@pytest.fixture(params=["memory", "rs_memory"])
def filtered(request: pytest.FixtureRequest, tmp_path: Any) -> ParquetDatasetStore:
    from store_kinds import make_store

    store: Store = make_store(request.param, tmp_path, request)
    ds = ParquetDatasetStore(store, max_rows_per_file=100, row_group_size=25)
    ds.write_dataset(_table(), "t")
    return ds


@pytest.mark.spec("R-4")
@pytest.mark.parametrize("column", ["id", "u8", "i8", "dec", "f32"])
def test_numeric_comparisons_are_exact(filtered: ParquetDatasetStore, column: str) -> None:
    table = _table()
    for op, value in itertools.product(OPS, NUMERIC_VALUES):
        if column == "f32" and isinstance(value, decimal.Decimal):
            continue
        want = _oracle(table, column, op, value)
        got = filtered.read_dataset("t", columns=["id"], filter=[(column, op, value)])
        assert sorted(got.column("id").to_pylist()) == want, (column, op, value)
        streamed = filtered.iter_batches("t", columns=["id"], filter=[(column, op, value)]).read_all()
        assert sorted(streamed.column("id").to_pylist()) == want, (column, op, value)


@pytest.mark.spec("R-4")
def test_sets_drop_values_the_column_cannot_hold(filtered: ParquetDatasetStore) -> None:
    table = _table()
    for op, values in [
        ("in", [1, 1.5, 2**70, 3]),
        ("in", [1.5, 2**70]),
        ("not in", [1, 1.5, 2**70]),
        ("not in", [0.5]),
        ("in", []),
    ]:
        want = _oracle(table, "id", op, values)
        got = filtered.read_dataset("t", columns=["id"], filter=[("id", op, values)])
        assert sorted(got.column("id").to_pylist()) == want, (op, values)
    assert filtered.read_dataset("t", filter=[("id", "not in", [1, None])]).num_rows == 0


@pytest.mark.spec("R-4")
def test_timestamps_finer_than_the_column_compare_exactly(filtered: ParquetDatasetStore) -> None:
    table = _table()
    base = datetime.datetime(2023, 11, 14, 22, 13, 20, 1500)  # 1_700_000_000_001.5 ms: between two stored values
    for op in OPS:
        want = _oracle(table, "ts", op, base)
        got = filtered.read_dataset("t", columns=["id"], filter=[("ts", op, base)])
        assert sorted(got.column("id").to_pylist()) == want, op


@pytest.mark.spec("R-4")
@pytest.mark.parametrize(
    "condition",
    [
        ("id", "==", "abc"),
        ("id", "<", "5"),
        ("id", "==", True),
        ("s", "==", 1),
        ("ts", ">", datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)),
        ("ts", ">", datetime.date(2024, 1, 1)),
        ("dec", "in", [1, "x"]),
    ],
)
def test_incompatible_values_are_type_errors_before_any_part_is_read(store: Store, condition: tuple[Any, ...]) -> None:
    ds = ParquetDatasetStore(store)
    ds.write_dataset(_table(), "t")
    store.write("t/data.parquet", b"not parquet at all", overwrite=True)  # reading any part would fail
    with pytest.raises(TypeError, match=repr(condition[0])):
        ds.read_dataset("t", filter=[condition])
    with pytest.raises(TypeError, match=repr(condition[0])):
        ds.iter_batches("t", filter=[condition])


@pytest.mark.spec("R-4")
def test_a_filter_on_a_missing_dataset_is_still_dataset_incomplete(store: Store) -> None:
    with pytest.raises(DatasetIncomplete, match="nothing is stored"):
        ParquetDatasetStore(store).read_dataset("nope", filter=[("id", ">", 1)])


def _extreme_table() -> pa.Table:
    f32_max = float(np.finfo(np.float32).max)
    f32_tiny = float(np.finfo(np.float32).smallest_subnormal)
    big = sys.float_info.max
    return pa.table(
        {
            "id": pa.array(range(8), pa.int64()),
            "f64": pa.array([math.inf, -math.inf, 0.0, -0.0, 5e-324, -5e-324, big, -big], pa.float64()),
            "f32": pa.array([math.inf, -math.inf, 0.0, -0.0, f32_tiny, -f32_tiny, f32_max, -f32_max], pa.float32()),
            "i64": pa.array([0, 1, -1, 2**63 - 1, -(2**63), 7, -7, 2**40], pa.int64()),
            "dec": pa.array(
                [decimal.Decimal(s) for s in ["0", "0.001", "-0.001", "999.999", "-999.999", "1", "-1", "2"]],
                pa.decimal128(6, 3),
            ),
        }
    )


#: Values beyond every column type's range or resolution, some with exponents
#: whose exact integers would have a billion digits.
EXTREME_VALUES = [decimal.Decimal(v) for v in ["1e400", "-1e400", "1e-400", "-1e-400", "1e999999999", "-1e999999999",
                  "1e-999999999", "-1e-999999999"]] + [1e300, -1e300, 1e-300]  # fmt: skip


@pytest.mark.spec("R-4")
@pytest.mark.parametrize("column", ["f64", "f32", "i64", "dec"])
def test_values_beyond_every_type_compare_exactly_and_at_once(column: str) -> None:
    """A decimal or float beyond a column type's range or resolution compares
    as the number it is: a finite ``1e400`` is not infinity, ``1e300`` on a
    float32 column is no error, and ``Decimal("1e999999999")`` costs no
    billion-digit integer (it once hung). The oracle compares in Decimal."""
    ds = ParquetDatasetStore(pds.open_store("memory://"))
    table = _extreme_table()
    ds.write_dataset(table, "t")
    rows = table.to_pylist()
    for op, value in itertools.product(OPS, EXTREME_VALUES):
        want = sorted(
            r["id"]
            for r in rows
            if _cmp(op, decimal.Decimal(r[column]), decimal.Decimal(value))  # type: ignore[arg-type]
        )
        got = ds.read_dataset("t", columns=["id"], filter=[(column, op, value)])
        assert sorted(got.column("id").to_pylist()) == want, (column, op, value)
