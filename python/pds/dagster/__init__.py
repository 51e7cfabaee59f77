"""pds datasets, tables and pipelines as the storage of Dagster assets.

Install with ``pip install "pds[dagster]"``.

- :class:`PdsIOManager`: each asset is a pds dataset, or a pds table
  (``"pds/format": "table"``) whose partitions are rows; re-materialising a
  partition is one commit.
- :class:`PdsResource`: the store, tables, pipelines and datasets for asset
  bodies.
- :func:`dagster_dataset_io_manager`: a drop-in for remote-store's.
"""

try:
    import dagster  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError('pds.dagster needs Dagster 1.13: pip install "pds[dagster]"') from exc

from pds.dagster._stream import OutsidePartition
from pds.dagster.dropin import dagster_dataset_io_manager
from pds.dagster.io_manager import PdsIOManager
from pds.dagster.resource import PdsResource

__all__ = ["OutsidePartition", "PdsIOManager", "PdsResource", "dagster_dataset_io_manager"]
