"""The stores behind ``PdsIOManager`` and ``PdsResource``, opened once per process."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from remote_store import Store

from pds.backend import open_store

_LOCK = threading.Lock()
_OPEN: dict[tuple[str, tuple[tuple[str, str], ...]], Store] = {}


def shared_store(root_uri: str, storage_options: Mapping[str, str]) -> Store:
    """The Store for *root_uri* and *storage_options*, opened on first use and
    kept for the life of the process, so that runs share its clients and
    caches, and so that a ``memory://`` store keeps its objects from one run
    (or one Dagster resource instance) to the next within the process.

    Raises:
        ValueError: a relative path or a URL pds cannot open (no I/O).
    """
    if not isinstance(root_uri, str) or not root_uri:
        raise ValueError(f"root_uri must be a store URL such as s3://bucket/prefix, got {root_uri!r}")
    key = (root_uri, tuple(sorted((str(k), str(v)) for k, v in storage_options.items())))
    with _LOCK:
        store = _OPEN.get(key)
        if store is None:
            store = open_store(root_uri, **dict(key[1]))
            _OPEN[key] = store
        return store


def asset_uri(root_uri: str, key: str) -> str:
    """The URL of *key* below *root_uri* (``dagster/uri`` metadata)."""
    return f"{root_uri.rstrip('/')}/{key}"
