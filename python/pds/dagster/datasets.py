"""Dataset assets: one pds dataset per asset, or per partition at
``<key>/<partition_key>`` (remote-store's layout)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from dagster import InputContext, OutputContext
from remote_store import NotFound, Store

from pds.dagster._context import annotation, column_schema, metadata, partition_keys, store_key
from pds.dagster._stream import CheckedStream
from pds.dagster.handlers import from_reader, to_reader, value_type
from pds.dataset import ParquetDatasetStore
from pds.errors import DatasetIncomplete
from pds.manifest import DatasetManifest

#: Where an output is staged before it replaces an existing dataset on a
#: foreign Store (one dataset per write, ``_pds_staging/<hex>``, removed
#: once copied); pds's own backend overwrites atomically, without it.
STAGING = "_pds_staging"

_log = logging.getLogger("pds.dagster")


def write_output(store: Store, context: OutputContext, obj: object, uri: str | None) -> None:
    """Write *obj* as the dataset of the output's asset (or partition),
    replacing what is there, so that an exception while it streams, a store
    failure while it uploads, or a killed process leaves the dataset as it
    was. Nothing is written for ``None``.

    On pds's own backend (any store :func:`pds.open_store` opens) this is
    one ``write_dataset(..., overwrite=True)``, which is atomic: the old
    dataset stays readable until the new one's manifest replaces it (one
    compare-and-swap), and an overwrite that fails changes nothing. A
    foreign remote_store ``Store`` overwrites by delete-then-write, so there
    the output is first written whole to a staging dataset under
    ``_pds_staging/`` and then copied over: a failure while the output
    streams leaves the dataset as it was, readers during the copy get
    ``DatasetIncomplete``, and a copy that fails keeps the staging dataset
    (the error names it) so the new rows are not lost.

    Raises:
        TypeError: an output type no handler takes ("Dataset mode expects a
            DataFrame ..."), before any I/O.
        ValueError: a run that materialises several partitions at once
            (a dataset holds one partition).
    """
    if obj is None:
        return
    keys = partition_keys(context)
    if keys is not None and len(keys) != 1:
        raise ValueError(
            f"asset {context.asset_key.to_user_string()}: a dataset holds one partition, and this run writes "
            f"{len(keys)}; materialise them one per run, or use pds/format 'table'"
        )
    key = store_key(context, keys[0] if keys else None)
    try:
        out = to_reader(obj, "a dataset output")
    except TypeError as exc:
        raise TypeError(f"Dataset mode expects a DataFrame or an Arrow stream: {exc}") from None
    datasets = ParquetDatasetStore(store)
    stream = CheckedStream(out.reader, None, context.asset_key.to_user_string())
    if datasets._native is None and datasets.dataset_exists(key):
        manifest = _staged_overwrite(datasets, stream.reader, key, context.asset_key.to_user_string())
    else:
        manifest = datasets.write_dataset(stream.reader, key, overwrite=True)
    meta: dict[str, Any] = {
        "dataset_key": key,
        "dagster/row_count": manifest.row_count,
        "dagster/column_schema": column_schema(out.reader.schema),
    }
    if uri is not None:
        meta["dagster/uri"] = uri
    context.add_output_metadata(meta)


def _staged_overwrite(
    datasets: ParquetDatasetStore, reader: pa.RecordBatchReader, key: str, asset: str
) -> DatasetManifest:
    """Overwrite *key* on a foreign Store (delete-then-write) through a
    staging dataset: written whole first, then copied over *key*."""
    staging = f"{STAGING}/{uuid.uuid4().hex}"
    try:
        datasets.write_dataset(reader, staging)
    except BaseException:
        _drop_staging(datasets, staging)
        raise
    try:
        manifest = datasets.write_dataset(datasets.iter_batches(staging), key, overwrite=True)
    except Exception as exc:
        raise RuntimeError(
            f"asset {asset}: copying the new rows over dataset {key!r} failed "
            f"({type(exc).__name__}: {exc}); {key!r} is incomplete, and the new rows are kept in the "
            f"dataset {staging!r}: materialise the asset again (and delete that dataset)"
        ) from exc
    _drop_staging(datasets, staging)
    return manifest


def _drop_staging(datasets: ParquetDatasetStore, staging: str) -> None:
    """Delete a staging dataset, best effort: a failure is logged, never
    raised over the error or result it follows."""
    try:
        datasets.delete_dataset(staging)
    except (NotFound, DatasetIncomplete):
        pass
    except Exception as exc:  # noqa: BLE001 - cleanup must not hide the outcome
        _log.warning("could not delete the staging dataset %r: %s", staging, exc)


def load_input(store: Store, context: InputContext, options: Mapping[str, Any] | None = None) -> Any:
    """The input's dataset as its annotation's type (``pyarrow.Table`` by
    default), or, for several upstream partitions, a ``dict`` of partition
    key to value. *options* (the input's metadata): ``columns`` and
    ``pds/filter``, pushed down.

    Raises:
        remote_store.NotFound / pds.DatasetIncomplete: a dataset is missing
            (the first missing one, before the others are read).
    """
    meta = metadata(context) if options is None else options
    columns = meta.get("columns")
    flt = meta.get("pds/filter")
    target = annotation(context)
    datasets = ParquetDatasetStore(store)

    def read(key: str) -> Any:
        if value_type(target) is pa.RecordBatchReader:
            return datasets.iter_batches(key, columns=columns, filter=flt)
        # Whole: read_dataset decodes every part at once.
        return from_reader(datasets.read_dataset(key, columns=columns, filter=flt).to_reader(), target)

    keys = partition_keys(context)
    if keys is not None and len(keys) > 1:
        return {k: read(store_key(context, k)) for k in keys}
    return read(store_key(context, keys[0] if keys else None))
