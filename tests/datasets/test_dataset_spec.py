"""Spec 042 (PDS-001 .. PDS-012) on every store: pds fast path and portable path."""

from __future__ import annotations

import hashlib
import json
import re

import pyarrow as pa
import pytest
from remote_store import (
    AlreadyExists,
    Capability,
    CapabilityNotSupported,
    CapabilitySet,
    NotFound,
    RemoteStoreError,
    Store,
)
from remote_store.backends import MemoryBackend

import pds
from pds import DatasetIncomplete, DatasetManifest, ManifestCorrupted, ParquetDatasetStore

from helpers import files, sample


@pytest.mark.spec("PDS-001")
def test_constructor_defaults_and_properties(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    assert ds.store is store
    assert ds.compression == "zstd"
    assert ds.row_group_size is None
    assert ds.max_rows_per_file is None
    ds2 = ParquetDatasetStore(store, compression="snappy", row_group_size=10, max_rows_per_file=20)
    assert (ds2.compression, ds2.row_group_size, ds2.max_rows_per_file) == ("snappy", 10, 20)


@pytest.mark.spec("PDS-001")
def test_constructor_does_no_io() -> None:
    # Nothing listens on port 1: any request would fail.
    store = pds.open_store(
        "s3://nowhere/x",
        endpoint="http://127.0.0.1:1",
        region="us-east-1",
        allow_http=True,
        access_key_id="a",
        secret_access_key="b",
    )
    ParquetDatasetStore(store, max_rows_per_file=5)


@pytest.mark.spec("PDS-001")
@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"compression": "zip"}, ValueError),
        ({"row_group_size": 0}, ValueError),
        ({"max_rows_per_file": -1}, ValueError),
        ({"max_rows_per_file": True}, ValueError),
    ],
)
def test_constructor_rejects_bad_settings(kwargs: dict[str, object], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        ParquetDatasetStore(Store(MemoryBackend()), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ParquetDatasetStore(42)  # type: ignore[arg-type]


@pytest.mark.spec("PDS-002")
def test_write_layout_and_manifest(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    table = sample(100)
    m = ds.write_dataset(table, "silver/orders", run_id="run-1", metadata={"source": "unit"})
    assert isinstance(m, DatasetManifest)
    assert files(store) == ["silver/orders/_SUCCESS", "silver/orders/data.parquet", "silver/orders/manifest.json"]
    assert store.read_bytes("silver/orders/_SUCCESS") == b""
    assert (m.dataset_key, m.parts, m.row_count, m.compression) == ("silver/orders", ["data.parquet"], 100, "zstd")
    assert (m.run_id, m.metadata) == ("run-1", {"source": "unit"})
    assert ds.read_manifest("silver/orders") == m


@pytest.mark.spec("PDS-002")
def test_write_refuses_existing_dataset(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    ds.write_dataset(sample(10), "k")
    with pytest.raises(AlreadyExists):
        ds.write_dataset(sample(5), "k")
    assert ds.read_dataset("k").num_rows == 10


class _NoAtomic(MemoryBackend):
    """A real MemoryBackend that declares fewer capabilities."""

    def __init__(self, drop: set[Capability]) -> None:
        super().__init__()
        self._caps = CapabilitySet({c for c in MemoryBackend.CAPABILITIES if c not in drop})

    @property
    def capabilities(self):  # type: ignore[no-untyped-def]
        return self._caps


@pytest.mark.spec("PDS-002")
def test_capability_gates_before_io() -> None:
    ds = ParquetDatasetStore(Store(_NoAtomic({Capability.ATOMIC_WRITE})))
    with pytest.raises(CapabilityNotSupported):
        ds.write_dataset(sample(3), "k")
    no_delete = Store(_NoAtomic({Capability.DELETE}))
    ds = ParquetDatasetStore(no_delete)
    with pytest.raises(CapabilityNotSupported):
        ds.write_dataset(sample(3), "k", overwrite=True)
    assert files(no_delete) == []


class _Recording(MemoryBackend):
    """A real MemoryBackend that remembers the order of writes."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def write_atomic(self, path, content, *, overwrite=False, metadata=None):  # type: ignore[no-untyped-def]
        self.order.append(path)
        return super().write_atomic(path, content, overwrite=overwrite, metadata=metadata)


@pytest.mark.spec("PDS-002")
def test_portable_write_order_parts_manifest_success() -> None:
    backend = _Recording()
    ParquetDatasetStore(Store(backend), max_rows_per_file=3).write_dataset(sample(7), "d")
    assert backend.order == [
        "d/part-00000.parquet",
        "d/part-00001.parquet",
        "d/part-00002.parquet",
        "d/manifest.json",
        "d/_SUCCESS",
    ]


@pytest.mark.spec("PDS-003")
def test_read_round_trip_and_concatenation(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=300, row_group_size=128)
    table = sample(1000)
    ds.write_dataset(table, "a/b")
    got = ds.read_dataset("a/b")
    assert got.equals(table)
    assert got.schema == table.schema


@pytest.mark.spec("PDS-003")
def test_read_requires_success_marker(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    ds.write_dataset(sample(10), "k")
    store.delete("k/_SUCCESS")
    with pytest.raises(DatasetIncomplete):
        ds.read_dataset("k")


@pytest.mark.spec("PDS-003")
def test_read_requires_every_part(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=4)
    ds.write_dataset(sample(10), "k")
    store.delete("k/part-00001.parquet")
    with pytest.raises(DatasetIncomplete, match="part-00001"):
        ds.read_dataset("k")


@pytest.mark.spec("PDS-003")
def test_read_missing_manifest_is_not_found(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    ds.write_dataset(sample(10), "k")
    store.delete("k/manifest.json")
    with pytest.raises(NotFound):
        ds.read_dataset("k")


@pytest.mark.spec("PDS-004")
def test_manifest_json_canonical_and_round_trip(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=4)
    m = ds.write_dataset(sample(10), "k", metadata={"é": "ü", "b": "1"})
    text = store.read_bytes("k/manifest.json").decode()
    # The JSON on disk (written by Rust on the fast path) is exactly Python's to_json.
    assert DatasetManifest.from_json(text).to_json() == text
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, indent=2)
    assert DatasetManifest.from_json(m.to_json()) == m
    assert [p.name for p in m.part_info or []] == m.parts
    assert sum(p.row_count for p in m.part_info or []) == 10
    assert m.schema() == sample(1).schema


@pytest.mark.spec("PDS-004")
def test_schema_hash_is_remote_stores(store: Store) -> None:
    from remote_store.ext.parquet import _schema_hash

    table = sample(5)
    m = ParquetDatasetStore(store).write_dataset(table, "k")
    expected = hashlib.sha256(table.schema.to_string().encode()).hexdigest()[:16]
    assert m.schema_hash == expected == _schema_hash(table.schema)


@pytest.mark.spec("PDS-004")
@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"dataset_key": "k"}',
        '{"dataset_key": "k", "parts": "x", "row_count": 1, "schema_hash": "h", "compression": "z", "created_at_utc": "t"}',
        '{"dataset_key": "k", "parts": [], "row_count": true, "schema_hash": "h", "compression": "z", "created_at_utc": "t"}',
        '{"dataset_key": "k", "parts": ["../x"], "row_count": 1, "schema_hash": "h", "compression": "z", "created_at_utc": "t"}',
        '{"dataset_key": "k", "parts": ["a"], "row_count": 1, "schema_hash": "h", "compression": "z", "created_at_utc": "t", "arrow_schema": 3}',
        '{"dataset_key": "k", "parts": ["a"], "row_count": 1, "schema_hash": "h", "compression": "z", "created_at_utc": "t", "part_info": [{"name": "b", "row_count": 1, "size_bytes": 1, "sha256": "x"}]}',
    ],
)
def test_from_json_rejects_bad_manifests(text: str) -> None:
    with pytest.raises(ManifestCorrupted) as info:
        DatasetManifest.from_json(text)
    assert info.value.reason


@pytest.mark.spec("PDS-005")
def test_single_file_vs_multi_part(store: Store) -> None:
    assert ParquetDatasetStore(store).write_dataset(sample(50), "one").parts == ["data.parquet"]
    # remote-store names a lone part data.parquet even when max_rows_per_file is set.
    assert ParquetDatasetStore(store, max_rows_per_file=100).write_dataset(sample(50), "lone").parts == ["data.parquet"]
    ds = ParquetDatasetStore(store, max_rows_per_file=20)
    m = ds.write_dataset(sample(50), "many")
    assert m.parts == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert [p.row_count for p in m.part_info or []] == [20, 20, 10]
    assert ds.read_dataset("many").equals(sample(50))


@pytest.mark.spec("PDS-005")
def test_multi_part_from_stream_of_unknown_length(store: Store) -> None:
    table = sample(95)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=7))
    ds = ParquetDatasetStore(store, max_rows_per_file=20)
    m = ds.write_dataset(reader, "s")
    assert len(m.parts) == 5 and m.parts[0] == "part-00000.parquet"
    assert ds.read_dataset("s").equals(table)


@pytest.mark.spec("PDS-006")
def test_column_projection(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=40)
    table = sample(100)
    ds.write_dataset(table, "k")
    got = ds.read_dataset("k", columns=["price", "id"])
    assert got.column_names == ["price", "id"]
    assert got.equals(table.select(["price", "id"]))
    with pytest.raises(ValueError, match="nope"):
        ds.read_dataset("k", columns=["id", "nope"])
    with pytest.raises(TypeError):
        ds.read_dataset("k", columns="id")  # type: ignore[arg-type]


@pytest.mark.spec("PDS-007")
def test_dataset_exists(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    assert not ds.dataset_exists("k")
    ds.write_dataset(sample(3), "k")
    assert ds.dataset_exists("k")
    store.delete("k/_SUCCESS")
    assert not ds.dataset_exists("k")


@pytest.mark.spec("PDS-008")
def test_error_classes() -> None:
    import remote_store.ext.parquet as rsp

    assert issubclass(DatasetIncomplete, RemoteStoreError)
    assert issubclass(ManifestCorrupted, RemoteStoreError)
    # The very classes of remote_store.ext.parquet: except clauses written for it catch ours.
    assert pds.DatasetIncomplete is rsp.DatasetIncomplete
    assert pds.ManifestCorrupted is rsp.ManifestCorrupted
    for cls in (pds.PartCorrupted, pds.PreconditionFailed, pds.DataError):
        assert issubclass(cls, RemoteStoreError)


@pytest.mark.spec("PDS-010")
def test_delete_dataset(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=3)
    ds.write_dataset(sample(10), "x/k")
    ds.write_dataset(sample(2), "x/other")
    ds.delete_dataset("x/k")
    assert files(store, "x") == ["x/other/_SUCCESS", "x/other/data.parquet", "x/other/manifest.json"]
    with pytest.raises(NotFound):
        ds.delete_dataset("x/k")


@pytest.mark.spec("PDS-011")
def test_overwrite_replaces_every_file(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=4)
    ds.write_dataset(sample(10), "k")
    m = ParquetDatasetStore(store).write_dataset(sample(3, offset=500), "k", overwrite=True)
    if ParquetDatasetStore(store)._native is None:
        assert m.parts == ["data.parquet"]  # delete-then-write, RFC-0008's names (PDS-011)
    else:
        # pds's own backend replaces a committed dataset atomically, under
        # part names of that write alone (a Spark write's naming).
        assert len(m.parts) == 1 and re.fullmatch(r"part-[0-9a-f]{12}-00000\.parquet", m.parts[0]), m.parts
    assert files(store) == sorted(["k/_SUCCESS", f"k/{m.parts[0]}", "k/manifest.json"])
    assert ds.read_dataset("k").equals(sample(3, offset=500))
    # overwrite=True on a fresh key simply writes.
    assert ds.write_dataset(sample(2), "fresh", overwrite=True).row_count == 2


@pytest.mark.spec("PDS-012")
def test_read_manifest_errors(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    with pytest.raises(NotFound):
        ds.read_manifest("missing")
    store.write("bad/manifest.json", b"\xff\xfe not utf8")
    with pytest.raises(ManifestCorrupted):
        ds.read_manifest("bad")
    store.write("bad2/manifest.json", b'{"dataset_key": 1}')
    with pytest.raises(ManifestCorrupted) as info:
        ds.read_manifest("bad2")
    assert "Missing fields" in info.value.reason
