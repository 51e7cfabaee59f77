"""Bad input gets the documented exception before any I/O, and nothing is half-written."""

from __future__ import annotations

import pyarrow as pa
import pytest
from remote_store import InvalidPath, RemoteStoreError, Store

from pds import DataError, ManifestCorrupted, ParquetDatasetStore, PartCorrupted

from helpers import files, sample

BAD_KEYS = ["../escape", "a/../../b", "a\\..\\..\\etc", "x\0y", "", "/", "."]


@pytest.mark.spec("PDS-002")
@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_refused_and_nothing_is_written(store: Store, key: str) -> None:
    ds = ParquetDatasetStore(store)
    with pytest.raises(InvalidPath):
        ds.write_dataset(sample(5), key)
    with pytest.raises(InvalidPath):
        ds.read_dataset(key)
    with pytest.raises(InvalidPath):
        ds.dataset_exists(key)
    assert files(store) == []


@pytest.mark.spec("PDS-002")
@pytest.mark.parametrize("data", [[1, 2, 3], {"a": [1]}, "table", None, 42])
def test_non_arrow_input_is_a_type_error(store: Store, data: object) -> None:
    with pytest.raises(TypeError, match="__arrow_c_stream__"):
        ParquetDatasetStore(store).write_dataset(data, "k")  # type: ignore[arg-type]
    assert files(store) == []


def test_bad_run_id_and_metadata(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    with pytest.raises(TypeError):
        ds.write_dataset(sample(1), "k", run_id=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ds.write_dataset(sample(1), "k", metadata={"a": 1})  # type: ignore[dict-item]
    assert files(store) == []


@pytest.mark.parametrize("codec", ["zip", "lzo2", "", "ZSTD9"])
def test_unknown_codec_is_a_value_error_before_io(store: Store, codec: str) -> None:
    with pytest.raises(ValueError, match="compression"):
        ParquetDatasetStore(store, compression=codec)
    assert files(store) == []


@pytest.mark.parametrize("codec", ["zstd", "snappy", "gzip", "brotli", "lz4", "none", "ZSTD"])
def test_every_codec_round_trips(store: Store, codec: str) -> None:
    ds = ParquetDatasetStore(store, compression=codec)
    ds.write_dataset(sample(50), "k")
    assert ds.read_dataset("k").equals(sample(50))
    assert ds.read_manifest("k").compression == codec


@pytest.mark.spec("PDS-008")
@pytest.mark.parametrize(
    "content",
    [b"", b"{", b'{"dataset_key": "k", "parts": ["data.parquet"]}', b"[1, 2]", b"\x00\x01\x02"],
)
def test_corrupted_manifest(store: Store, content: bytes) -> None:
    ds = ParquetDatasetStore(store)
    ds.write_dataset(sample(3), "k")
    store.write("k/manifest.json", content, overwrite=True)
    with pytest.raises(ManifestCorrupted) as info:
        ds.read_dataset("k")
    assert info.value.reason


def test_manifest_part_cannot_escape_the_dataset(store: Store) -> None:
    ds = ParquetDatasetStore(store)
    ds.write_dataset(sample(3), "k")
    ds.write_dataset(sample(3), "secret")
    m = ds.read_manifest("k")
    evil = m.to_json().replace('"data.parquet"', '"../secret/data.parquet"')
    store.write("k/manifest.json", evil.encode(), overwrite=True)
    with pytest.raises(ManifestCorrupted):
        ds.read_dataset("k")


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_bad_part_names_the_part(store: Store, damage: str) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=10)
    ds.write_dataset(sample(30), "k")
    raw = store.read_bytes("k/part-00001.parquet")
    bad = raw[: len(raw) // 2] if damage == "truncate" else b"this is not parquet at all" * 10
    store.write("k/part-00001.parquet", bad, overwrite=True)
    with pytest.raises(PartCorrupted, match="part-00001") as info:
        ds.read_dataset("k")
    assert isinstance(info.value, RemoteStoreError)


def test_verify_detects_a_swapped_part(store: Store) -> None:
    ds = ParquetDatasetStore(store, max_rows_per_file=10)
    ds.write_dataset(sample(30), "k")
    # A valid Parquet file, but not the one the manifest recorded.
    store.write("k/part-00002.parquet", store.read_bytes("k/part-00000.parquet"), overwrite=True)
    # Without verify, the size the manifest records refuses a part of another size.
    sizes = {p.name: p.size_bytes for p in (ds.read_manifest("k").part_info or [])}
    if sizes["part-00000.parquet"] != sizes["part-00002.parquet"]:
        with pytest.raises(PartCorrupted, match=r"not the .* recorded"):
            ds.read_dataset("k")
    else:
        assert ds.read_dataset("k").num_rows == 30  # same size: only verify tells
    with pytest.raises(PartCorrupted, match=r"checksum|not the .* recorded"):
        ds.read_dataset("k", verify=True)


def test_verify_needs_checksums(store: Store) -> None:
    from remote_store.ext.parquet import ParquetDatasetStore as RemoteStoreParquet

    RemoteStoreParquet(store).write_dataset(sample(5), "k")
    with pytest.raises(ManifestCorrupted, match="checksum"):
        ParquetDatasetStore(store).read_dataset("k", verify=True)


@pytest.mark.spec("PDS-005")
def test_empty_table_writes_a_valid_empty_dataset(store: Store) -> None:
    empty = sample(0)
    ds = ParquetDatasetStore(store, max_rows_per_file=10)
    m = ds.write_dataset(empty, "e")
    assert (m.parts, m.row_count) == (["data.parquet"], 0)
    got = ds.read_dataset("e")
    assert got.num_rows == 0 and got.schema == empty.schema
    assert ds.read_schema("e") == empty.schema


def test_failing_stream_commits_nothing(store: Store) -> None:
    table = sample(100)

    def batches():  # type: ignore[no-untyped-def]
        yield from table.to_batches(max_chunksize=10)[:5]
        raise RuntimeError("source went away")

    reader = pa.RecordBatchReader.from_batches(table.schema, batches())
    with pytest.raises(DataError, match="source went away"):
        ParquetDatasetStore(store, max_rows_per_file=20).write_dataset(reader, "k")
    assert files(store) == []
