"""The typed version a ``Table`` is pinned to (``pds._core.TableVersion``)
says what the manifest says: each getter against the manifest's own JSON."""

from __future__ import annotations

import copy
import datetime
import json
import pickle
from pathlib import Path

import pyarrow as pa
import pytest
from remote_store import Store

import pds
from pds import Table, _core

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "name": [f"n{i}" for i in range(lo, hi)]}, SCHEMA)


def stored(store: Store, key: str, version: int) -> dict[str, object]:
    """The manifest object itself, as bytes on the store."""
    raw = json.loads(store.read_bytes(f"{key}/manifest/v{version:08d}.json"))
    assert isinstance(raw, dict)
    return raw


@pytest.mark.spec("D-1")
def test_each_getter_says_what_the_stored_manifest_says(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10), primary_key="id", row_group_size=4, formats=["delta"])
    t.delete([("id", "<", 3)])
    t.append(rows(10, 12))
    for v in range(t.version + 1):
        state = _core.table_manifest(t._native, t._path, version=v)
        m = stored(fast_store, "t", v)
        assert state.version == m["version"] == v
        assert state.previous == m.get("previous")
        assert state.operation == m["operation"]
        assert state.parameters == m.get("operation_parameters", {})
        assert state.commit_id == m["commit_id"]
        assert state.table_id == m["table_id"]
        assert state.formats == sorted(m["formats"]) == ["delta"]
        assert state.primary_key == "id"
        assert state.properties == m["properties"]
        assert state.created_at == datetime.datetime.fromisoformat(str(m["created_at"]))
        assert state.created_at.tzinfo is not None
        assert state.schema.equals(SCHEMA)
    history = t.history()
    assert [h["version"] for h in history] == [2, 1, 0]
    assert [h["operation"] for h in history] == [stored(fast_store, "t", v)["operation"] for v in (2, 1, 0)]


@pytest.mark.spec("D-1")
def test_a_version_is_immutable_and_hands_out_copies(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 5))
    state = t._state
    with pytest.raises(AttributeError):
        state.version = 7  # type: ignore[misc]
    state.parameters["rows_added"] = -1
    state.properties["compression"] = "none"
    assert state.parameters["rows_added"] == 5
    assert state.properties["compression"] == "zstd"
    assert t.primary_key is None and t.commit_id == stored(fast_store, "t", 0)["commit_id"]
    assert repr(state) == 'TableVersion(version=0, operation="create")'


@pytest.mark.spec("D-1")
def test_the_whole_manifest_is_the_stored_one_with_its_file_list(fast_store: Store) -> None:
    t = Table.create(fast_store, "t", data=rows(0, 10), primary_key="id")
    t.delete([("id", "==", 4)])
    whole = t.manifest
    m = stored(fast_store, "t", 1)
    for field in ("version", "operation", "schema", "segments", "properties", "commit_id", "table_id"):
        assert whole[field] == m[field], field
    assert [f["total_rows"] for f in whole["data_files"]] == [10]
    assert len(whole["tombstones"]) == 1


@pytest.mark.spec("D-1")
def test_a_table_pickles_pinned_to_its_version(tmp_path: Path) -> None:
    store = pds.open_store(f"file://{tmp_path}")
    t = Table.create(store, "t", data=rows(0, 5), primary_key="id")
    t.append(rows(5, 8))
    old = t.at(version=0)
    t.append(rows(8, 9))
    for copied in (pickle.loads(pickle.dumps(old)), copy.deepcopy(old)):
        assert copied.version == 0 and copied.commit_id == old.commit_id
        assert copied._state.created_at == old._state.created_at
        assert copied.schema.equals(SCHEMA) and copied.primary_key == "id"
        assert copied.to_arrow().column("id").to_pylist() == list(range(5))
        assert copied.refresh() == 2
    with pytest.raises(ValueError, match="not a pickled TableVersion"):
        _core.TableVersion._restore("{}")
