"""``PdsResource``: the store, tables, pipelines and datasets, for asset
bodies that use pds directly."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field
from remote_store import Store

from pds.dagster._stores import shared_store
from pds.dataset import ParquetDatasetStore
from pds.producers import Pipeline
from pds.table import Table


class PdsResource(ConfigurableResource):  # type: ignore[type-arg]
    """pds objects under ``root_uri``, for asset bodies:

    >>> from pds.dagster import PdsResource
    >>> pds_res = PdsResource(root_uri="memory://")
    >>> pds_res.datasets().store is pds_res.store()
    True

    The store is opened once per process (shared with a ``PdsIOManager``
    of the same URL and options). No I/O until an object is used.
    """

    root_uri: str = Field(description="Any URL pds.open_store takes (s3://bucket/prefix, file:///abs, memory://).")
    storage_options: dict[str, str] = Field(default={}, description="Options of the store, as pds.open_store takes.")

    def store(self) -> Store:
        """The ``remote_store.Store`` over ``root_uri``."""
        return shared_store(self.root_uri, self.storage_options)

    def table(self, key: str) -> Table:
        """The table at *key* (:meth:`pds.Table.open`: 2 GETs + 1 HEAD).

        Raises:
            remote_store.NotFound: no table at *key*.
        """
        return Table.open(self.store(), key)

    def pipeline(self, key: str) -> Pipeline:
        """The pipeline at *key*, created empty if there is none
        (:meth:`pds.Pipeline.create` with ``exist_ok=True``): an asset body
        declares its sources and stages, then updates it.

        Raises:
            remote_store.AlreadyExists: a dataset or table is at *key* (or
                nests with it).
        """
        return Pipeline.create(self.store(), key, exist_ok=True)

    def datasets(self) -> ParquetDatasetStore:
        """A ``pds.ParquetDatasetStore`` over the store (no I/O)."""
        return ParquetDatasetStore(self.store())
