"""Table assets: one pds table per asset; partitions are rows, selected by
the partition column(s) (``partition_expr``, see :mod:`pds.dagster.partitions`).

Write modes (``pds/write_mode``): ``replace`` (default) swaps the
partition's rows, or all rows of an unpartitioned asset, for the output in
one commit (:meth:`pds.Table.replace`: readers never see the partition empty
or doubled); ``append`` adds the rows; ``upsert`` replaces rows by primary
key (``pds/primary_key``). All three stream the output: only an upsert
keeps a column in memory, its keys. Every row written is checked to lie in
the partitions being written, and nothing commits unless the whole output was
read: a failed materialisation leaves the table as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from dagster import InputContext, OutputContext
from remote_store import AlreadyExists, NotFound, Store

from pds.dagster._context import annotation, column_schema, metadata, partition_keys, store_key, upstream_metadata
from pds.dagster._stream import CheckedStream
from pds.dagster.handlers import from_reader, to_reader
from pds.dagster.partitions import PartitionSlice, partition_slice
from pds.dataset import _filtered
from pds.table import Table

WRITE_MODES = ("replace", "append", "upsert")
SCHEMA_MODES = ("strict", "merge")


def _settings(meta: Mapping[str, Any], asset: str) -> tuple[str, str, str | None]:
    mode = meta.get("pds/write_mode", "replace")
    if mode not in WRITE_MODES:
        raise ValueError(f"asset {asset}: pds/write_mode must be one of {WRITE_MODES}, got {mode!r}")
    schema_mode = meta.get("pds/schema_mode", "strict")
    if schema_mode not in SCHEMA_MODES:
        raise ValueError(f"asset {asset}: pds/schema_mode must be one of {SCHEMA_MODES}, got {schema_mode!r}")
    pk = meta.get("pds/primary_key")
    if pk is not None and not isinstance(pk, str):
        raise TypeError(f"asset {asset}: pds/primary_key must be a column name (str), got {pk!r}")
    return str(mode), str(schema_mode), pk


def _open(store: Store, key: str) -> Table | None:
    try:
        return Table.open(store, key)
    except NotFound:
        return None


def _slice(context: OutputContext | InputContext, partition_expr: object, schema: pa.Schema) -> PartitionSlice | None:
    keys = partition_keys(context)
    if keys is None:
        return None
    asset = context.asset_key.to_user_string()
    writing = isinstance(context, OutputContext)
    return partition_slice(context.asset_partitions_def, keys, partition_expr, schema, asset, writing=writing)


def write_output(store: Store, context: OutputContext, obj: object, uri: str) -> None:
    """Write *obj* to the output's table as its write mode says, and report
    ``dagster/row_count``, ``dagster/column_schema``, ``dagster/uri``,
    ``pds/committed`` (whether this run committed a version), and
    ``pds/version`` and ``pds/commit_id``: those of the last commit this
    run made (a replace always commits one, even of no rows; an append or
    upsert of no rows commits none: ``pds/committed`` is then ``False``,
    ``pds/version`` is the table's version as the run left it, and there is
    no ``pds/commit_id``). Nothing is written for ``None``. An append or
    upsert of no rows that created the table from a streamed output (a
    ``RecordBatchReader``, or an object with ``__arrow_c_stream__``: the table is created
    empty from its schema, then the rows go in) reports ``pds/committed``
    ``True``: that run committed version 0, which ``pds/version`` and
    ``pds/commit_id`` name.

    A missing table is created from the output (its schema, and
    ``pds/primary_key``) as version 0.

    Cost: opening the table (2 GETs + 1 HEAD), then the write's own cost
    (see :meth:`pds.Table.replace`, :meth:`~pds.Table.append`,
    :meth:`~pds.Table.upsert`).

    Raises:
        ValueError: bad metadata, a partition key that does not parse as its
            column's type, an upsert without a primary key (all before any
            I/O beyond opening the table); ``OutsidePartition`` (a
            ``ValueError``) for a row outside the partition, naming it,
            with nothing committed.
        pds.SchemaMismatch: the output's schema is not the table's (per
            ``pds/schema_mode``); nothing is committed.
        Exception: an exception the output's stream raised; nothing is
            committed.
    """
    if obj is None:
        return
    asset = context.asset_key.to_user_string()
    meta = metadata(context)
    mode, schema_mode, pk = _settings(meta, asset)
    key = store_key(context)
    out = to_reader(obj)
    table = _open(store, key)
    if mode == "upsert":
        declared = table.primary_key if table is not None else pk
        if declared is None:
            raise ValueError(
                f"asset {asset}: pds/write_mode 'upsert' replaces rows by primary key; set pds/primary_key"
                + (" (the table declares none: create it with one)" if table is not None else "")
            )
        if pk is not None and table is not None and pk != table.primary_key:
            raise ValueError(f"asset {asset}: pds/primary_key is {pk!r} but the table's primary key is {declared!r}")
    partition_expr = meta.get("partition_expr")
    where = _slice(context, partition_expr, table.schema if table is not None else out.reader.schema)
    if where is not None and not where.exact and mode == "replace":
        raise ValueError(
            f"asset {asset}: the partitions of this run ({where.description}) are not one range per dimension, "
            "so no single filter replaces them; materialise them in separate runs"
        )
    # The version and commit id of the last commit this run made, if any.
    made: tuple[int, str | None] | None = None
    while True:
        stream = CheckedStream(out.reader, where, asset, streamed=out.streamed)
        try:
            if table is None:
                table = _create(store, key, stream, pk)
                if table is None:
                    # Another run created the table first: write to it. An output read
                    # by the lost attempt is read again if it is in memory.
                    table = Table.open(store, key)
                    where = _slice(context, partition_expr, table.schema)
                    if stream.started:
                        out = to_reader(obj)
                    continue
                made = (table.version, table.commit_id)
                if not stream.streamed:
                    break  # created with the rows, as version 0
                # Created empty from a streamed output's schema: the rows go in next.
                continue
            table = _write(table, mode, schema_mode, where, stream)
            # A replace always commits; an append or upsert of no rows commits nothing.
            if mode == "replace" or stream.rows:
                made = (table.version, table.commit_id)
            break
        except Exception as exc:
            stream.reraise(exc)
            raise
    report: dict[str, Any] = {
        "dagster/row_count": stream.rows,
        "dagster/column_schema": column_schema(table.schema),
        "dagster/uri": uri,
        "pds/committed": made is not None,
    }
    if made is not None:
        report["pds/version"] = made[0]
        if made[1] is not None:
            report["pds/commit_id"] = made[1]
    else:
        report["pds/version"] = table.version
    context.add_output_metadata(report)


def _create(store: Store, key: str, stream: CheckedStream, pk: str | None) -> Table | None:
    """The table created from *stream* (with its rows; for a streamed
    output, empty, see below); ``None`` if another writer created it first
    (the output is then written to that table).

    A streamed output cannot be read twice, so its table is created empty
    from the stream's schema first (that create is what races); the rows go
    in by the caller's next step, as for an existing table."""
    try:
        if stream.streamed:
            return Table.create(store, key, schema=stream.reader.schema, primary_key=pk)
        return Table.create(store, key, data=stream.reader, primary_key=pk)
    except AlreadyExists:
        if (stream.started and stream.streamed) or _open(store, key) is None:
            raise
        return None


def _write(table: Table, mode: str, schema_mode: str, where: PartitionSlice | None, stream: CheckedStream) -> Table:
    if mode == "append":
        table.append(stream.reader, schema_mode=schema_mode)
    elif mode == "upsert":
        table.upsert(stream.reader, schema_mode=schema_mode)
    else:
        table.replace(where.conditions if where is not None else [], stream.reader, schema_mode=schema_mode)
    return table


def load_input(store: Store, context: InputContext) -> Any:
    """The input's table (the rows of the upstream partitions it depends on,
    in one filtered scan) as its annotation's type.

    Input metadata: ``columns`` (projection), ``pds/filter`` (tuples,
    pushed down, or a ``pyarrow.compute.Expression``) and ``pds/version``
    (time travel).

    Raises:
        remote_store.NotFound: no table, or no such version.
    """
    meta = metadata(context)
    key = store_key(context)
    table = Table.open(store, key)
    version = meta.get("pds/version")
    if version is not None:
        table = table.at(version=version)
    columns = meta.get("columns")
    where = _slice(context, upstream_metadata(context).get("partition_expr"), table.schema)
    conditions: list[tuple[str, str, Any]] = list(where.conditions) if where is not None else []
    post = where.expression if where is not None and not where.exact else None
    flt = meta.get("pds/filter")
    if isinstance(flt, pc.Expression):
        post = flt if post is None else post & flt
    elif flt is not None:
        if isinstance(flt, str) or not isinstance(flt, Sequence):
            raise TypeError(f"pds/filter must be a list of (column, op, value) tuples or an Expression, got {flt!r}")
        conditions += [tuple(c) for c in flt]
    reader = table.scan(columns=None if post is not None else columns, filter=conditions or None)
    if post is not None:
        reader = _filtered(reader, post, columns)
    return from_reader(reader, annotation(context))
