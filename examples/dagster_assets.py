"""Dagster assets on pds: a daily-partitioned table of orders feeding a pds
pipeline stage.

- ``orders`` is a pds table (``"pds/format": "table"``), one partition per
  day on its ``day`` column. Re-materialising a day replaces that day's rows
  in one commit: readers never see the day empty or doubled.
- ``customer_orders`` takes the day's orders (one filtered scan of the
  table) and feeds them to a pds pipeline, whose stage keeps every order
  keyed by customer. Each run is one pipeline update that touches only the
  customers that ordered that day.

Run it: ``python examples/dagster_assets.py [root_uri]`` (default: a
temporary folder). ``dagster dev -f examples/dagster_assets.py`` shows the
assets in the UI (``defs``).
"""

import datetime
import os
import pathlib
import random
import sys
import tempfile
from typing import Any

import dagster as dg
import pyarrow as pa

import pds
from pds.dagster import PdsIOManager, PdsResource

DAILY = dg.DailyPartitionsDefinition(start_date="2026-01-01")
CUSTOMERS = ["ada", "bob", "cyd", "dee", "eve"]


def day_orders(day: str, n: int = 20) -> pa.Table:
    """The orders of *day* (made up, the same every time for a day)."""
    rng = random.Random(day)
    date = datetime.date.fromisoformat(day)
    return pa.table(
        {
            "order_id": [f"{day}-{i:04d}" for i in range(n)],
            "day": pa.array([date] * n, pa.date32()),
            "customer": [rng.choice(CUSTOMERS) for _ in range(n)],
            "amount": [round(rng.uniform(1, 100), 2) for _ in range(n)],
        }
    )


@dg.asset(
    partitions_def=DAILY,
    key_prefix=["sales"],
    metadata={"pds/format": "table", "partition_expr": "day"},
)
def orders(context: dg.AssetExecutionContext) -> pa.Table:
    """One day of orders: a partition of the ``sales/orders`` table."""
    return day_orders(context.partition_key)


def customer_pipeline(lake: PdsResource) -> pds.Pipeline:
    """The pipeline: source ``orders`` (by order id), stage ``by_customer``
    (every order, keyed by customer then order id)."""
    pipe = lake.pipeline("sales/customer_orders")
    src = pipe.source(
        "orders",
        key={"order_id": pa.string()},
        value={"customer": pa.string(), "day": pa.date32(), "amount": pa.float64()},
    )

    @pipe.stage(
        "by_customer",
        sources=[src],
        key={"customer": pa.string(), "order_id": pa.string()},
        value={"amount": pa.float64()},
    )
    def by_customer(order_id: str, rows: Any) -> Any:
        for row in rows:
            yield (row["customer"], order_id), row["amount"]

    return pipe


@dg.asset(partitions_def=DAILY, key_prefix=["sales"], ins={"orders": dg.AssetIn(key=["sales", "orders"])})
def customer_orders(context: dg.AssetExecutionContext, orders: pa.Table, lake: PdsResource) -> None:
    """Feeds the day's orders to the pipeline (one update). The pipeline is
    this asset's storage, so it returns nothing for the IO manager."""
    version = customer_pipeline(lake).update({"orders": orders})
    context.add_output_metadata({"pds/pipeline_version": version, "dagster/row_count": orders.num_rows})


def definitions(root_uri: str, storage_options: dict[str, str] | None = None) -> dg.Definitions:
    options = storage_options or {}
    return dg.Definitions(
        assets=[orders, customer_orders],
        resources={
            "io_manager": PdsIOManager(root_uri=root_uri, storage_options=options),
            "lake": PdsResource(root_uri=root_uri, storage_options=options),
        },
    )


def run(root_uri: str, days: list[str], storage_options: dict[str, str] | None = None) -> pa.Table:
    """Materialise both assets for each of *days* (then the first day again,
    which replaces it), and return the pipeline's ``by_customer`` rows."""
    options = storage_options or {}
    for day in [*days, days[0]]:
        result = dg.materialize(
            [orders, customer_orders],
            partition_key=day,
            resources={
                "io_manager": PdsIOManager(root_uri=root_uri, storage_options=options),
                "lake": PdsResource(root_uri=root_uri, storage_options=options),
            },
        )
        assert result.success
    return customer_pipeline(PdsResource(root_uri=root_uri, storage_options=options)).read("by_customer")


#: For ``dagster dev -f examples/dagster_assets.py``: the lake is $PDS_LAKE, or a temporary folder.
defs = definitions(os.environ.get("PDS_LAKE") or pathlib.Path(tempfile.gettempdir(), "pds-dagster-lake").as_uri())

if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(tempfile.mkdtemp(prefix="pds-dagster-")).as_uri()
    by_customer = run(root, ["2026-01-01", "2026-01-02", "2026-01-03"])
    table = pds.Table.open(pds.open_store(root), "sales/orders")
    print(f"sales/orders: version {table.version}, {table.to_arrow().num_rows} rows")
    print(by_customer.group_by("customer").aggregate([("amount", "sum")]).sort_by("customer"))
