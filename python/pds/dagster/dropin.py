"""``dagster_dataset_io_manager(store)``: remote-store's function, same
signature and layout, on pds. Code written for ``remote_store.ext.dagster``
switches by changing the import, and gains streamed outputs and inputs
(``pyarrow.RecordBatchReader``), polars and pandas inputs by annotation, and
pds's checked reads."""

from __future__ import annotations

from typing import Any

from dagster import InputContext, IOManager, OutputContext
from remote_store import Store

from pds.dagster import datasets


class _DatasetIOManager(IOManager):
    """Datasets at ``<asset key path>`` or ``<asset key path>/<partition key>``."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store must be a remote_store.Store, got {type(store).__name__}")
        self._store = store

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        """Write *obj* as a Parquet dataset (replacing what is there)."""
        datasets.write_output(self._store, context, obj, None)

    def load_input(self, context: InputContext) -> Any:
        """Read the dataset, or a ``dict`` of partition key to value for
        several upstream partitions."""
        return datasets.load_input(self._store, context)


def dagster_dataset_io_manager(store: Store) -> IOManager:
    """Wrap a Store as a Dagster IOManager that writes and reads Parquet
    datasets through :class:`pds.ParquetDatasetStore`, as
    ``remote_store.ext.dagster.dagster_dataset_io_manager`` does: the same
    keys (``"/".join(asset_key.path)``, plus ``"/" + partition_key``), and
    the same manifest, so either library reads what the other wrote.

    Args:
        store: An existing Store; the caller owns its lifecycle. Any Store
            works; one over :class:`pds.ObjectStoreBackend` runs in Rust.

    Returns:
        A Dagster ``IOManager``.

    Raises:
        TypeError: *store* is not a ``remote_store.Store``.
    """
    return _DatasetIOManager(store)
