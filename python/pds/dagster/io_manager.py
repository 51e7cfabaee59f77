"""``PdsIOManager``: Dagster assets stored as pds datasets or tables."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableIOManager, InputContext, OutputContext
from pydantic import Field
from remote_store import Store

from pds.dagster import datasets, tables
from pds.dagster._context import input_format, metadata, output_format, store_key
from pds.dagster._stores import asset_uri, shared_store


class PdsIOManager(ConfigurableIOManager):
    """Stores each asset under ``root_uri`` at its key path (``["sales",
    "orders"]`` is ``sales/orders``), as a pds dataset (the default) or a
    pds table (asset metadata ``"pds/format": "table"``).

    Datasets: one per asset, or per partition at ``<key>/<partition_key>``,
    as remote-store lays them out. Tables: one per asset, its partitions
    being rows selected by ``"partition_expr"`` (the partition column, or a
    dict of dimension to column); ``"pds/write_mode"`` is ``"replace"``
    (default: one commit that swaps the partition's rows), ``"append"`` or
    ``"upsert"`` (by ``"pds/primary_key"``); ``"pds/schema_mode"`` is
    ``"strict"`` (default) or ``"merge"``.

    Outputs: ``pyarrow.Table``, ``RecordBatch``, ``RecordBatchReader``
    (streamed, never collected), polars or pandas DataFrames, DuckDB
    relations, anything with ``__arrow_c_stream__``; ``None`` writes
    nothing. Inputs: by annotation, ``pyarrow.Table`` (default),
    ``pyarrow.RecordBatchReader`` (streamed), ``polars.DataFrame`` /
    ``LazyFrame`` or ``pandas.DataFrame``; ``AssetIn`` metadata
    ``"columns"``, ``"pds/filter"`` and ``"pds/version"`` (tables). An
    upstream asset whose metadata states no ``"pds/format"`` (a
    ``SourceAsset``, an ``AssetSpec``, an asset of another code location)
    is read as a table if one is at its key, else as a dataset.

    The store is opened once per process and shared by the runs in it (a
    ``memory://`` store keeps its objects for the life of the process).
    """

    root_uri: str = Field(description="Where the assets live: any URL pds.open_store takes (s3://bucket/prefix, ...).")
    storage_options: dict[str, str] = Field(
        default={}, description="Options of the store (endpoint, region, credentials, ...), as pds.open_store takes."
    )

    def store(self) -> Store:
        """The store (opened on first use, then shared within the process)."""
        return shared_store(self.root_uri, self.storage_options)

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        """Write *obj* to its asset's dataset or table (see the class)."""
        asset = context.asset_key.to_user_string() if context.has_asset_key else context.name
        fmt = output_format(metadata(context), asset)
        if fmt == "table":
            uri = asset_uri(self.root_uri, store_key(context))
            tables.write_output(self.store(), context, obj, uri)
            return
        keys = context.asset_partition_keys if context.has_asset_partitions else None
        key = store_key(context, keys[0] if keys and len(keys) == 1 else None)
        datasets.write_output(self.store(), context, obj, asset_uri(self.root_uri, key))

    def load_input(self, context: InputContext) -> Any:
        """Read the input's dataset(s) or table (see the class)."""
        if input_format(context, self.store()) == "table":
            return tables.load_input(self.store(), context)
        return datasets.load_input(self.store(), context)
