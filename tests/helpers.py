"""Small helpers shared by the tests."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from remote_store import Store


def sample(n: int = 1000, offset: int = 0) -> pa.Table:
    """A deterministic table with int, string, float, timestamp and nullable columns."""
    ids = list(range(offset, offset + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i % 97}" for i in ids], pa.string()),
            "price": pa.array([i * 0.25 for i in ids], pa.float64()),
            "ts": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us", tz="UTC")),
            "maybe": pa.array([None if i % 5 == 0 else i for i in ids], pa.int32()),
        }
    )


def files(store: Store, prefix: str = "") -> list[str]:
    """Every file key below *prefix*, sorted."""
    if prefix and not store.exists(prefix):
        return []
    return sorted(str(f.path) for f in store.list_files(prefix, recursive=True))


def pipeline_files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every file a pipeline manifest names: each node's parts (content,
    key-mappings, update rows and deleted keys) and their patches' files."""
    out: list[dict[str, Any]] = []
    for node in manifest["nodes"].values():
        update = node.get("update") or {}
        for part in [
            *node.get("content", []),
            *node.get("mappings", []),
            *update.get("rows", []),
            *update.get("deleted", []),
        ]:
            out.append(part)
            for patch in part.get("patches") or []:
                out.extend(f for f in (patch.get("rows"), patch.get("deleted")) if f)
    return out
