"""Interop with remote-store 0.33's ext.parquet, both ways, on every store."""

from __future__ import annotations

import json

import pytest
import remote_store.ext.parquet as rsp
from remote_store import Store

import pds

from helpers import sample


@pytest.mark.spec("PDS-004")
def test_pds_dataset_reads_with_remote_store(store: Store) -> None:
    table = sample(500)
    m = pds.ParquetDatasetStore(store, max_rows_per_file=200).write_dataset(table, "x/y", run_id="r")
    theirs = rsp.ParquetDatasetStore(store)
    assert theirs.dataset_exists("x/y")
    assert theirs.read_dataset("x/y").equals(table)
    assert theirs.read_dataset("x/y", columns=["name"]).equals(table.select(["name"]))
    their_manifest = theirs.read_manifest("x/y")
    for field in ("dataset_key", "parts", "row_count", "schema_hash", "compression", "created_at_utc", "run_id"):
        assert getattr(their_manifest, field) == getattr(m, field)


@pytest.mark.spec("PDS-004")
def test_remote_store_dataset_reads_with_pds(store: Store) -> None:
    table = sample(500)
    their = rsp.ParquetDatasetStore(store, max_rows_per_file=150).write_dataset(table, "legacy", metadata={"a": "b"})
    ours = pds.ParquetDatasetStore(store)
    assert ours.read_dataset("legacy").equals(table)
    assert ours.read_dataset("legacy", columns=["ts", "id"]).equals(table.select(["ts", "id"]))
    m = ours.read_manifest("legacy")
    assert m.arrow_schema is None and m.part_info is None
    assert (m.parts, m.schema_hash, m.metadata) == (their.parts, their.schema_hash, their.metadata)
    # No schema key: read_schema falls back to one part's footer.
    assert ours.read_schema("legacy") == table.schema


def test_manifest_bytes_are_identical_for_the_rfc_fields(store: Store) -> None:
    table = sample(10)
    ours = pds.ParquetDatasetStore(store).write_dataset(table, "a", run_id="r", metadata={"k": "v"})
    text = store.read_bytes("a/manifest.json").decode()
    data = json.loads(text)
    assert {"arrow_schema", "part_info"} <= set(data)
    # Dropping pds's extra keys leaves exactly what remote-store would write for these values.
    rfc = {k: v for k, v in data.items() if k not in ("arrow_schema", "part_info")}
    theirs = rsp.DatasetManifest(**rfc).to_json()
    assert json.dumps(rfc, sort_keys=True, indent=2) == theirs
    assert rsp.DatasetManifest.from_json(text).schema_hash == ours.schema_hash


def test_pds_manifest_is_a_remote_store_manifest(store: Store) -> None:
    m = pds.ParquetDatasetStore(store).write_dataset(sample(3), "k")
    assert isinstance(m, rsp.DatasetManifest)


def test_code_written_for_remote_store_runs_unchanged(store: Store) -> None:
    """A pipeline written against remote_store.ext.parquet, with only its import changed."""
    from pds import DatasetIncomplete, ParquetDatasetStore

    ds = ParquetDatasetStore(store.child("silver"), compression="zstd", max_rows_per_file=100)
    manifest = ds.write_dataset(sample(250), "orders", run_id="dagster-abc123")
    assert manifest.to_json() == type(manifest).from_json(manifest.to_json()).to_json()
    assert ds.dataset_exists("orders")
    assert ds.read_dataset("orders").num_rows == 250
    ds.write_dataset(sample(10), "orders", overwrite=True)
    ds.delete_dataset("orders")
    with pytest.raises(DatasetIncomplete):
        ds.read_dataset("orders")
