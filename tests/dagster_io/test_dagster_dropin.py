"""``pds.dagster.dagster_dataset_io_manager`` is a drop-in for remote-store's:
remote-store 0.33's own tests of it (tests/test_ext_dagster.py, DAG-017,
DAG-018, DAG-020) run unchanged but for the import, and each library reads
what the other wrote through Dagster."""

from typing import Any
from unittest import mock

import dagster as dg
import pyarrow as pa
import pytest
from dagster import AssetKey, InputContext, build_input_context, build_output_context
from remote_store import Store
from remote_store.backends import MemoryBackend
from remote_store.ext import dagster as rs_dagster

import pds
from pds.dagster import dagster_dataset_io_manager


def _multi_partition_input_context(asset_key: AssetKey, partition_keys: list[str]) -> InputContext:
    # As remote-store's test builds it (build_input_context takes one partition key).
    ctx = mock.MagicMock(spec=InputContext)
    ctx.asset_key = asset_key
    ctx.has_asset_partitions = True
    ctx.asset_partition_keys = partition_keys
    return ctx


# -- remote-store's own tests, with `from pds.dagster import ...` -------------


def test_dataset_roundtrip() -> None:
    store = Store(backend=MemoryBackend())
    mgr = dagster_dataset_io_manager(store)
    table = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    out_ctx = build_output_context(asset_key=AssetKey(["dataset", "test"]))
    mgr.handle_output(out_ctx, table)
    in_ctx = build_input_context(asset_key=AssetKey(["dataset", "test"]), upstream_output=out_ctx)
    result = mgr.load_input(in_ctx)
    assert result.equals(table)


def test_dataset_partitioned() -> None:
    store = Store(backend=MemoryBackend())
    mgr = dagster_dataset_io_manager(store)
    table = pa.table({"val": [10, 20]})
    out_ctx = build_output_context(asset_key=AssetKey(["data", "monthly"]), partition_key="2026-01")
    mgr.handle_output(out_ctx, table)
    in_ctx = build_input_context(
        asset_key=AssetKey(["data", "monthly"]), partition_key="2026-01", upstream_output=out_ctx
    )
    result = mgr.load_input(in_ctx)
    assert result.equals(table)
    assert store.exists("data/monthly/2026-01/_SUCCESS")


def test_dataset_unsupported_type_raises() -> None:
    store = Store(backend=MemoryBackend())
    mgr = dagster_dataset_io_manager(store)
    out_ctx = build_output_context(asset_key=AssetKey(["bad", "type"]))
    with pytest.raises(TypeError, match="Dataset mode expects a DataFrame"):
        mgr.handle_output(out_ctx, "not a dataframe")


def test_multi_partition_dataset() -> None:
    store = Store(backend=MemoryBackend())
    mgr = dagster_dataset_io_manager(store)
    tables = {"2026-01": pa.table({"val": [1, 2]}), "2026-02": pa.table({"val": [3, 4]})}
    for pk, table in tables.items():
        out_ctx = build_output_context(asset_key=AssetKey(["ds", "monthly"]), partition_key=pk)
        mgr.handle_output(out_ctx, table)
    in_ctx = _multi_partition_input_context(AssetKey(["ds", "monthly"]), ["2026-01", "2026-02"])
    result = mgr.load_input(in_ctx)
    assert set(result.keys()) == {"2026-01", "2026-02"}
    assert result["2026-01"].equals(tables["2026-01"])
    assert result["2026-02"].equals(tables["2026-02"])


def test_multi_partition_dataset_missing_raises() -> None:
    from remote_store.ext.parquet import DatasetIncomplete

    store = Store(backend=MemoryBackend())
    mgr = dagster_dataset_io_manager(store)
    out_ctx = build_output_context(asset_key=AssetKey(["ds", "sparse"]), partition_key="exists")
    mgr.handle_output(out_ctx, pa.table({"val": [1, 2]}))
    in_ctx = _multi_partition_input_context(AssetKey(["ds", "sparse"]), ["exists", "missing"])
    with pytest.raises(DatasetIncomplete, match="missing"):
        mgr.load_input(in_ctx)


# -- remote-store's guide example (monthly assets, a 3-month rolling input) ----


@pytest.mark.parametrize("writer", ["remote_store", "pds"])
def test_the_guide_example_runs_and_both_libraries_read_each_other(writer: str, tmp_path: Any) -> None:
    from remote_store.backends import LocalBackend

    store = Store(LocalBackend(root=str(tmp_path)))
    monthly = dg.MonthlyPartitionsDefinition(start_date="2026-01-01")

    @dg.asset(partitions_def=monthly)
    def sales_monthly(context: dg.AssetExecutionContext) -> pa.Table:
        return pa.table({"revenue": [100 * int(context.partition_key[5:7])]})

    seen: dict[str, Any] = {}

    @dg.asset(
        partitions_def=monthly,
        ins={"sales_monthly": dg.AssetIn(partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-2))},
    )
    def sales_rolling_3m(sales_monthly: dict[str, Any]) -> None:
        seen.update(sales_monthly)

    write = rs_dagster.dagster_dataset_io_manager if writer == "remote_store" else dagster_dataset_io_manager
    read = dagster_dataset_io_manager if writer == "remote_store" else rs_dagster.dagster_dataset_io_manager
    for month in ("2026-01-01", "2026-02-01", "2026-03-01"):
        assert dg.materialize([sales_monthly], partition_key=month, resources={"io_manager": write(store)}).success
    result = dg.materialize(
        [sales_monthly, sales_rolling_3m],
        partition_key="2026-03-01",
        selection=[sales_rolling_3m],
        resources={"io_manager": read(store)},
    )
    assert result.success
    assert {k: v.column("revenue").to_pylist() for k, v in seen.items()} == {
        "2026-01-01": [100],
        "2026-02-01": [200],
        "2026-03-01": [300],
    }


def test_streamed_input_through_the_drop_in(tmp_path: Any) -> None:
    store = pds.open_store(tmp_path.as_uri())

    @dg.asset
    def big() -> pa.RecordBatchReader:
        schema = pa.schema([("i", pa.int64())])
        return pa.RecordBatchReader.from_batches(
            schema, (pa.record_batch([list(range(i, i + 10))], schema=schema) for i in range(0, 50, 10))
        )

    seen: dict[str, Any] = {}

    @dg.asset
    def use(big: pa.RecordBatchReader) -> None:
        seen["type"] = type(big)
        seen["rows"] = sum(b.num_rows for b in big)

    assert dg.materialize([big, use], resources={"io_manager": dagster_dataset_io_manager(store)}).success
    assert seen == {"type": pa.RecordBatchReader, "rows": 50}
