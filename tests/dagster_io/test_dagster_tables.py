"""pds.dagster table assets, further cases (issue K, review fixes): what a
run reports when it commits nothing new, sub-daily partitions across a DST
change, and upstream assets whose format no metadata states. Real
``dagster.materialize`` runs."""

import datetime
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from test_dagster import DAILY, TABLE, _failure, metadata, run, store_of

import pds
from pds.table import is_table

pytestmark = pytest.mark.spec("K-1")


def _orders(key: str, n: int) -> pa.Table:
    day = datetime.date.fromisoformat(key)
    return pa.table({"day": pa.array([day] * n, pa.date32()), "id": pa.array(range(n), pa.int64())})


def test_re_materialising_an_empty_partition_is_one_version_and_reports_it(
    file_lake: tuple[str, dict[str, str]],
) -> None:
    """An output of no rows for a partition that holds none: each run is
    one version all the same, and reports that version and its commit id."""

    @dg.asset(partitions_def=DAILY, metadata={**TABLE, "partition_expr": "day"})
    def orders(context: dg.AssetExecutionContext) -> pa.Table:
        return _orders(context.partition_key, 3 if context.partition_key == "2026-01-01" else 0)

    run([orders], file_lake, partition="2026-01-01")
    table = pds.Table.open(store_of(file_lake), "orders")
    for expected in (1, 2):
        meta = metadata(run([orders], file_lake, partition="2026-01-05"), "orders")
        table.refresh()
        assert table.version == expected, "a re-materialisation is exactly one version"
        assert meta["pds/committed"] is True
        assert meta["pds/version"] == expected
        assert meta["pds/commit_id"] == table.commit_id == table.history(1)[0]["commit_id"]
        assert meta["dagster/row_count"] == 0
    assert table.to_arrow().num_rows == 3


def test_an_append_of_no_rows_reports_that_it_committed_nothing(file_lake: tuple[str, dict[str, str]]) -> None:
    @dg.asset(metadata={**TABLE, "pds/write_mode": "append"})
    def log(context: dg.AssetExecutionContext) -> pa.Table:
        return pa.table({"x": pa.array([1, 2] if context.run.tags.get("rows") else [], pa.int64())})

    first = metadata(run([log], file_lake, tags={"rows": "1"}), "log")
    assert first["pds/committed"] is True and first["pds/version"] == 0
    empty = metadata(run([log], file_lake), "log")
    assert empty["pds/committed"] is False
    assert "pds/commit_id" not in empty, "no commit of this run to name"
    assert empty["pds/version"] == 0, "the version the table is at"
    assert pds.Table.open(store_of(file_lake), "log").version == 0


BERLIN = dg.HourlyPartitionsDefinition(
    start_date="2026-10-24-00:00", end_date="2026-10-26-00:00", timezone="Europe/Berlin"
)


@pytest.mark.parametrize("column", [pa.timestamp("us"), pa.string()], ids=["naive-timestamp", "string"])
def test_hourly_partitions_with_daylight_saving_refuse_wall_clock_columns(
    file_lake: tuple[str, dict[str, str]], column: pa.DataType
) -> None:
    """In Europe/Berlin the clocks go back on 2026-10-25 at 03:00: the hour
    from 02:00 is two partitions with the same wall-clock bounds. A
    timestamp column without a time zone, or a string column, cannot tell
    them apart: refused for every partition, naming the asset, the time
    zone and what to use instead; nothing is written."""

    @dg.asset(partitions_def=BERLIN, metadata={**TABLE, "partition_expr": "at"})
    def clicks(context: dg.AssetExecutionContext) -> pa.Table:
        start = context.partition_time_window.start.replace(tzinfo=None)
        value: Any = start if pa.types.is_timestamp(column) else start.strftime("%Y-%m-%d-%H:%M")
        return pa.table({"at": pa.array([value], column), "n": [1]})

    for key in ("2026-10-25-02:00", "2026-10-24-10:00"):
        bad = run([clicks], file_lake, partition=key, ok=False)
        message = _failure(bad)
        assert "asset clicks" in message and "'Europe/Berlin'" in message, message
        assert "daylight saving" in message and "timestamp column with a time zone" in message, message
    assert not is_table(store_of(file_lake), "clicks")


@pytest.mark.parametrize("column", [pa.timestamp("us"), pa.string()], ids=["naive-timestamp", "string"])
def test_hourly_partitions_on_wall_clock_columns_still_load(
    file_lake: tuple[str, dict[str, str]], column: pa.DataType
) -> None:
    """The refusal is for writes only: a table such partitions select from
    (written before it was refused, or by other means) still loads
    partition by partition, away from the clock change exactly."""
    hours = [datetime.datetime(2026, 10, 24, h) for h in (9, 10, 10, 11)]
    values: list[Any] = hours if pa.types.is_timestamp(column) else [h.strftime("%Y-%m-%d-%H:%M") for h in hours]
    pds.Table.create(store_of(file_lake), "clicks", data=pa.table({"at": pa.array(values, column), "n": [1, 2, 3, 4]}))
    seen: dict[str, Any] = {}

    @dg.asset(partitions_def=BERLIN, metadata={**TABLE, "partition_expr": "at"})
    def clicks() -> pa.Table:
        raise AssertionError("not materialised: only read")

    @dg.asset(partitions_def=BERLIN, metadata=TABLE)
    def per_hour(clicks: pa.Table) -> None:
        seen["rows"] = clicks

    run([clicks, per_hour], file_lake, partition="2026-10-24-10:00", selection=[per_hour])
    assert sorted(seen["rows"].column("n").to_pylist()) == [2, 3]


def test_hourly_partitions_across_daylight_saving_on_a_zoned_timestamp_column(
    file_lake: tuple[str, dict[str, str]],
) -> None:
    """The advice works: with a time-zone-aware column, the two partitions
    of the repeated hour hold their own rows, each replaced alone."""

    @dg.asset(partitions_def=BERLIN, metadata={**TABLE, "partition_expr": "at"})
    def clicks(context: dg.AssetExecutionContext) -> pa.Table:
        start = context.partition_time_window.start
        n = int(context.run.tags.get("n", "1"))
        return pa.table({"at": pa.array([start] * n, pa.timestamp("us", "UTC")), "key": [context.partition_key] * n})

    repeated = [k for k in BERLIN.get_partition_keys() if k.startswith("2026-10-25-02:00")]
    assert len(repeated) == 2
    for key in repeated:
        run([clicks], file_lake, partition=key)
    run([clicks], file_lake, partition=repeated[0], tags={"n": "3"})
    rows = pds.Table.open(store_of(file_lake), "clicks").to_arrow().to_pylist()
    assert sorted(r["key"] for r in rows) == sorted([repeated[0]] * 3 + [repeated[1]])
    hours = sorted({r["at"] for r in rows})
    assert [h.isoformat() for h in hours] == ["2026-10-25T00:00:00+00:00", "2026-10-25T01:00:00+00:00"]


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_an_upstream_asset_without_metadata_is_read_as_what_the_store_holds(kind: str, tmp_path: Path) -> None:
    """An upstream asset that states no pds/format (an AssetSpec, as a
    SourceAsset or an asset of another code location is) is probed: a
    table at its key is read as a table, anything else as a dataset."""
    lake = (f"memory://{uuid.uuid4().hex}", {}) if kind == "memory" else ((tmp_path / "lake").as_uri(), {})
    store = store_of(lake)
    pds.Table.create(store, "events", data=pa.table({"a": [1, 2]}))
    pds.Table.open(store, "events").append(pa.table({"a": [3]}))
    pds.ParquetDatasetStore(store).write_dataset(pa.table({"b": ["x"]}), "raw")
    seen: dict[str, Any] = {}

    @dg.asset
    def use(events: pa.Table, raw: pa.Table) -> None:
        seen["events"], seen["raw"] = events, raw

    run([dg.AssetSpec("events"), dg.AssetSpec("raw"), use], lake, selection=[use])
    assert sorted(seen["events"].column("a").to_pylist()) == [1, 2, 3]
    assert seen["raw"].column("b").to_pylist() == ["x"]
