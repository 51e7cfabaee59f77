"""The pieces of a first build range-partitioned by Spark
(``pds.spark._spark_ranges``): which Spark types Spark orders as pds does,
and how the tasks' results get their ranges. No Spark needed."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as st

from pds.spark._spark_ranges import ALL, ordered_alike, tiled


def result(first: int | None, last: int | None = None, *, update: bool = False) -> str:
    parts = [] if first is None else [{"name": f"p{first}", "first_key": [first], "last_key": [last or first]}]
    rows = [{"name": "u"}] if update else []
    return json.dumps({"content": {"range": json.loads(ALL), "parts": parts}, "update": {"rows": rows, "deleted": []}})


def ranges(done: list[str]) -> list[tuple[Any, Any]]:
    return [(d["content"]["range"]["lo"], d["content"]["range"]["hi"]) for d in map(json.loads, done)]


def test_results_get_ranges_from_their_first_keys_in_partition_order() -> None:
    # Collected in any order; partition 2 wrote nothing (an empty or delete-only partition).
    applied = [(3, result(70, 90)), (0, result(-5, 10)), (2, result(None)), (1, result(11, 69))]
    done = tiled(applied)
    assert ranges(done) == [(None, [11]), ([11], [70]), ([70], None)]
    assert [json.loads(d)["content"]["parts"][0]["name"] for d in done] == ["p-5", "p11", "p70"]
    assert ranges(tiled([(0, result(5))])) == [(None, None)]
    assert tiled([]) == []


def test_a_partition_of_deleted_keys_only_keeps_its_update() -> None:
    """A first build records deleted keys in its change feed even where
    nothing was stored: a partition holding only deleted keys has update
    files and no content part, and keeps its place."""
    deleted = json.loads(result(None))
    deleted["update"]["deleted"] = [{"name": "d", "first_key": [40], "last_key": [45]}]
    done = tiled([(0, result(1, 9)), (1, json.dumps(deleted)), (2, result(50))])
    assert ranges(done) == [(None, [40]), ([40], [50]), ([50], None)]
    assert json.loads(done[1])["update"]["deleted"][0]["name"] == "d"


@pytest.mark.parametrize(
    ("spark", "arrow", "alike"),
    [
        (st.LongType(), pa.int64(), True),
        (st.IntegerType(), pa.int32(), True),
        (st.LongType(), pa.uint64(), True),  # only values >= 0 conform
        (st.StringType(), pa.string(), True),
        (st.StringType(), pa.large_string(), True),
        (st.DateType(), pa.date32(), True),
        (st.TimestampType(), pa.timestamp("us", "UTC"), True),
        (st.TimestampNTZType(), pa.timestamp("us"), True),
        (st.BooleanType(), pa.bool_(), True),
        (st.DayTimeIntervalType(), pa.duration("us"), True),
        (st.LongType(), pa.string(), False),  # "10" < "9"
        (st.StringType(), pa.int64(), False),
        (st.DoubleType(), pa.float64(), False),  # -0.0, NaN
        (st.BinaryType(), pa.binary(), False),
    ],
)
def test_which_spark_types_spark_orders_as_pds(spark: st.DataType, arrow: pa.DataType, alike: bool) -> None:
    assert ordered_alike(spark, arrow) is alike


def test_a_string_of_another_collation_is_ordered_otherwise() -> None:
    lcase = st.StringType("UTF8_LCASE") if "collation" in st.StringType().__dict__ else None
    if lcase is None:
        pytest.skip("this PySpark has no collations")
    assert not ordered_alike(lcase, pa.string())
