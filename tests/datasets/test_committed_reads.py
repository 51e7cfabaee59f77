"""A dataset read takes the manifest only as it was at a moment when
``_SUCCESS`` was there (see "Reading" in the ``dataset`` module docs), and
a missing object is named by its key. Interleavings are made exact with
the fault proxy's hooks (tests/fault_proxy.py) in front of a real SeaweedFS:
the reader goes through the proxy and is held between its requests while
another writer runs.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import pds
from pds import _core

WAIT = 60.0


def _table(n: int, tag: int) -> pa.Table:
    return pa.table({"tag": pa.array([tag] * n, pa.int64()), "i": pa.array(range(n), pa.int64())})


def _committed(store: Any, key: str) -> str:
    """The manifest text the read of a committed dataset takes."""
    ds = pds.ParquetDatasetStore(store)
    return _core.committed_manifest(ds._native, ds._store.native_path(key))


def _delete_then_write(store: Any, table: pa.Table) -> None:
    """Replace the dataset ``d`` by deleting it and writing anew: what an
    overwrite on a foreign Store (or an older pds) does. pds's own overwrite
    swaps the manifest in place, which these readers' races do not need."""
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=400)
    ds.delete_dataset("d")
    ds.write_dataset(table, "d")


def _waited(event: threading.Event) -> None:
    assert event.wait(WAIT), "the other side never came"


@pytest.mark.parametrize("overwrites", [1, 2])
def test_a_reader_held_while_overwrites_commit_takes_the_last_manifest(faulty: Any, overwrites: int) -> None:
    """The reader's GET of ``manifest.json`` is answered, and before the
    reply reaches it a whole overwrite commits (once, or at each of its
    first two GETs: overwrites back to back). The manifest it read is no
    longer the committed one: it asks again and takes the last, never the
    replaced one."""
    direct = pds.ParquetDatasetStore(faulty.direct, max_rows_per_file=400)
    direct.write_dataset(_table(1_000, 0), "d")
    tags = iter(range(1, overwrites + 1))
    first_done = threading.Event()

    def overwrite(_: Any) -> None:
        tag = next(tags)
        direct.write_dataset(_table(1_000 + tag, tag), "d", overwrite=True)
        first_done.set()

    faulty.proxy.observe("GET", r"/d/manifest\.json$", after=overwrite, times=overwrites)
    # A HEAD of _SUCCESS sent with the GET is answered after the overwrite.
    faulty.proxy.observe("HEAD", r"/d/_SUCCESS$", before=lambda _: _waited(first_done), times=1)
    text = _committed(faulty.store, "d")
    assert text == faulty.direct.read_bytes("d/manifest.json").decode()
    assert pds.DatasetManifest.from_json(text).row_count == 1_000 + overwrites
    assert len(faulty.proxy.requests("GET", r"/d/manifest\.json$")) == overwrites + 1
    got = pds.ParquetDatasetStore(faulty.store).read_dataset("d")
    assert got.equals(_table(1_000 + overwrites, overwrites))


def test_a_dataset_that_keeps_changing_is_said_to(faulty: Any) -> None:
    """An overwrite commits between every GET of the manifest and the
    reader's next request: after a few attempts the read gives up with
    ``DatasetIncomplete`` saying the dataset kept changing, neither a
    replaced manifest nor a bare ``NotFound``."""
    direct = pds.ParquetDatasetStore(faulty.direct, max_rows_per_file=400)
    direct.write_dataset(_table(100, 0), "d")
    tags = iter(range(1, 100))

    def overwrite(_: Any) -> None:
        tag = next(tags)
        direct.write_dataset(_table(100 + tag, tag), "d", overwrite=True)

    faulty.proxy.observe("GET", r"/d/manifest\.json$", after=overwrite, times=None)
    with pytest.raises(pds.DatasetIncomplete, match="kept changing"):
        _committed(faulty.store, "d")
    gets = len(faulty.proxy.requests("GET", r"/d/manifest\.json$"))
    assert 2 <= gets <= 6, gets  # a few attempts, bounded
    faulty.proxy.clear_rules()
    assert pds.ParquetDatasetStore(faulty.store).read_dataset("d").num_rows == 100 + gets


def test_a_manifest_never_committed_is_never_taken(faulty: Any) -> None:
    """A delete-then-write replace has created its manifest and its
    ``_SUCCESS`` PUT is on its way when the reader's GET of the manifest is
    answered; that PUT then fails (refused), so the new manifest is never
    committed and the writer removes it. The reader, whose HEAD of
    ``_SUCCESS`` may have seen the old dataset's marker before the delete
    withdrew it, must not take the new manifest: it finds no dataset
    committed."""
    direct = pds.ParquetDatasetStore(faulty.direct, max_rows_per_file=400)
    direct.write_dataset(_table(1_000, 0), "d")
    at_marker = threading.Event()
    reader_got = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            _delete_then_write(faulty.open(), _table(2_000, 1))
        except BaseException as exc:  # noqa: BLE001 - checked below
            failures.append(exc)

    writer = threading.Thread(target=write)

    def start_writer(_: Any) -> None:
        writer.start()
        _waited(at_marker)  # the new manifest is there, its _SUCCESS not yet

    def marker_put(_: Any) -> None:
        at_marker.set()
        _waited(reader_got)

    faulty.proxy.fail("PUT", r"/d/_SUCCESS$", status=403, before=marker_put)
    faulty.proxy.observe("GET", r"/d/manifest\.json$", before=start_writer, after=lambda _: reader_got.set(), times=1)
    with pytest.raises(pds.DatasetIncomplete):
        _committed(faulty.store, "d")
    writer.join(WAIT)
    assert len(failures) == 1 and isinstance(failures[0], pds.PermissionDenied), failures
    with pytest.raises(pds.DatasetIncomplete):
        pds.ParquetDatasetStore(faulty.direct).read_dataset("d")


def test_a_manifest_missing_under_a_new_marker_is_asked_again(faulty: Any) -> None:
    """The reader's GET of the manifest is answered while a delete-then-write
    replace has cleared the key (no manifest), and its HEAD of ``_SUCCESS``
    after the new write committed: a commit landed between the two. It asks
    again and takes the new manifest, not a bare ``NotFound``."""
    direct = pds.ParquetDatasetStore(faulty.direct, max_rows_per_file=400)
    direct.write_dataset(_table(1_000, 0), "d")
    cleared = threading.Event()
    reader_got = threading.Event()
    done = threading.Event()

    def write() -> None:
        try:
            _delete_then_write(faulty.open(), _table(1_500, 1))
        finally:
            done.set()

    def start_writer(_: Any) -> None:
        threading.Thread(target=write).start()
        _waited(cleared)

    def manifest_put(_: Any) -> None:
        cleared.set()
        _waited(reader_got)

    def answered(_: Any) -> None:
        reader_got.set()  # the writer goes on and commits
        _waited(done)  # before the reader's next request

    faulty.proxy.observe("PUT", r"/d/manifest\.json$", before=manifest_put, times=1)
    faulty.proxy.observe("GET", r"/d/manifest\.json$", before=start_writer, after=answered, times=1)
    text = _committed(faulty.store, "d")
    assert pds.DatasetManifest.from_json(text).row_count == 1_500
    first = faulty.proxy.requests("GET", r"/d/manifest\.json$")[0]
    assert first.status == 404, first


def test_a_manifest_removed_by_hand_is_not_found(tmp_path: Path) -> None:
    """``_SUCCESS`` without a manifest at every attempt: ``NotFound``
    naming the manifest (PDS-003), after a few attempts."""
    store = pds.open_store((tmp_path / "lake").as_uri())
    ds = pds.ParquetDatasetStore(store)
    ds.write_dataset(_table(10, 0), "k")
    store.delete("k/manifest.json")
    with pytest.raises(pds.NotFound, match=r"k/manifest\.json"):
        _committed(store, "k")


def test_a_missing_table_data_file_is_named_by_its_key_on_file(tmp_path: Path) -> None:
    """On file://, a table's missing data file is named in the
    ``ManifestCorrupted`` message by its key in the store, as on S3, not by
    its absolute local path."""
    root = tmp_path / "lake"
    store = pds.open_store(root.as_uri())
    rows = _table(100, 0)
    t = pds.Table.create(store, "t", schema=rows.schema)
    t.append(rows)
    files = [str(f.path) for f in store.list_files("t", recursive=True) if str(f.path).endswith(".parquet")]
    assert len(files) == 1, files
    store.delete(files[0])
    with pytest.raises(pds.ManifestCorrupted) as info:
        pds.Table.open(store, "t").to_arrow()
    message = str(info.value)
    assert repr(files[0]) in message or f'"{files[0]}"' in message, message
    assert str(tmp_path) not in message, message
