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


def test_a_result_with_an_update_but_no_part_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="update but no content"):
        tiled([(0, result(1)), (1, result(None, update=True))])


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
