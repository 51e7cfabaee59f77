"""What pds.dagster reads from Dagster's contexts: keys, metadata and the
input annotation, tolerant of the mocked contexts remote-store's own tests use."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from dagster import DagsterInvariantViolationError, InputContext, MetadataValue, OutputContext, TableColumn, TableSchema
from remote_store import Store

from pds.table import is_table

FORMATS = ("dataset", "table")


def store_key(context: OutputContext | InputContext, partition_key: str | None = None) -> str:
    """``a/b`` for asset key ``["a", "b"]``, plus ``/<partition_key>`` when given."""
    if not context.has_asset_key:
        raise ValueError(
            "pds.dagster stores asset outputs; this output has no asset key (give the op's output an asset key, "
            "or use another IO manager for plain ops)"
        )
    parts = [str(p) for p in context.asset_key.path]
    if partition_key is not None:
        parts.append(str(partition_key))
    return "/".join(parts)


def metadata(context: object) -> Mapping[str, Any]:
    """The definition metadata of *context* (empty when it has none)."""
    try:
        meta = getattr(context, "definition_metadata", None)
    except DagsterInvariantViolationError:
        return {}
    return meta if isinstance(meta, Mapping) else {}


def upstream_metadata(context: InputContext) -> Mapping[str, Any]:
    """The definition metadata of the asset an input loads."""
    try:
        upstream = getattr(context, "upstream_output", None)
    except DagsterInvariantViolationError:
        return {}
    return metadata(upstream) if upstream is not None else {}


def output_format(meta: Mapping[str, Any], asset: str) -> str:
    fmt = meta.get("pds/format", "dataset")
    if fmt not in FORMATS:
        raise ValueError(f"asset {asset}: pds/format must be one of {FORMATS}, got {fmt!r}")
    return str(fmt)


def input_format(context: InputContext, store: Store) -> str:
    """The format of the asset an input loads: ``pds/format`` of its
    definition metadata; when that says nothing (a ``SourceAsset`` or an
    ``AssetSpec`` without it, an asset of another code location), what the
    store holds at its key: a table if a table's pointer or first manifest
    is there (1 HEAD, 2 when there is none), else a dataset.

    Raises:
        ValueError: ``pds/format`` is neither ``"dataset"`` nor ``"table"``.
    """
    meta = upstream_metadata(context)
    if "pds/format" in meta:
        return output_format(meta, context.asset_key.to_user_string())
    return "table" if is_table(store, store_key(context)) else "dataset"


def annotation(context: InputContext) -> object:
    """The input's type annotation, or ``None`` when there is none."""
    try:
        dagster_type = context.dagster_type
    except DagsterInvariantViolationError:  # a context built without one (build_input_context)
        return None
    target = getattr(dagster_type, "typing_type", None)
    if isinstance(target, type) or typing.get_origin(target) is not None:
        return target
    return None


def partition_keys(context: OutputContext | InputContext) -> list[str] | None:
    """The partition keys of the output or input, ``None`` when unpartitioned."""
    if not context.has_asset_partitions:
        return None
    return list(context.asset_partition_keys)


def column_schema(schema: pa.Schema) -> MetadataValue:
    """``dagster/column_schema`` of an Arrow schema."""
    return MetadataValue.table_schema(TableSchema(columns=[TableColumn(name=f.name, type=str(f.type)) for f in schema]))
