"""Datasets on remote-store's own backends: pds's write protocol runs there
through ``RustStore.over_store``, each object operation a call of the
Store's method. What the Store raises reaches the caller as it was raised,
and a failed write leaves nothing behind."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from remote_store import AlreadyExists, BackendUnavailable, NotFound, PermissionDenied, Store
from remote_store.backends import LocalBackend, MemoryBackend

import pds
from pds import ParquetDatasetStore, _core

from helpers import files, sample


class _Failing(MemoryBackend):  # type: ignore[misc]
    """A real MemoryBackend whose writes of names containing *fail_on*
    raise *error* (after *after* such writes went through)."""

    def __init__(self, fail_on: str, error: Exception, after: int = 0) -> None:
        super().__init__()
        self.fail_on, self.error, self.after = fail_on, error, after
        self.calls: list[tuple[str, str]] = []
        self.threads: set[int] = set()
        self._inside = threading.local()

    def _hit(self, method: str, path: str) -> None:
        self.calls.append((method, str(path)))
        self.threads.add(threading.get_ident())
        if self.fail_on in str(path):
            if self.after > 0:
                self.after -= 1
                return
            raise self.error

    def write(self, path, content, *, overwrite=False, metadata=None):  # type: ignore[no-untyped-def]
        if not getattr(self._inside, "atomic", False):  # MemoryBackend's write_atomic writes through write
            self._hit("write", path)
        return super().write(path, content, overwrite=overwrite, metadata=metadata)

    def write_atomic(self, path, content, *, overwrite=False, metadata=None):  # type: ignore[no-untyped-def]
        self._hit("write_atomic", path)
        self._inside.atomic = True
        try:
            return super().write_atomic(path, content, overwrite=overwrite, metadata=metadata)
        finally:
            self._inside.atomic = False


class _SlowFirstPart(MemoryBackend):  # type: ignore[misc]
    """A real MemoryBackend whose first part takes a while to land; it
    records when each atomic write starts and ends."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def write_atomic(self, path, content, *, overwrite=False, metadata=None):  # type: ignore[no-untyped-def]
        name = str(path).rsplit("/", 1)[-1]
        with self._lock:
            self.events.append(("start", name))
        if name == "part-00000.parquet":
            time.sleep(0.3)  # the parts after it are encoded meanwhile
        try:
            return super().write_atomic(path, content, overwrite=overwrite, metadata=metadata)
        finally:
            with self._lock:
                self.events.append(("end", name))


def test_parts_encoded_at_once_land_one_after_the_other_in_their_order() -> None:
    backend = _SlowFirstPart()
    store = Store(backend)
    ParquetDatasetStore(store, max_rows_per_file=300).write_dataset(sample(1000), "d")
    names = [f"part-{i:05d}.parquet" for i in range(4)] + ["manifest.json", "_SUCCESS"]
    assert backend.events == [(event, n) for n in names for event in ("start", "end")]
    assert ParquetDatasetStore(store).read_dataset("d").equals(sample(1000))


def test_the_next_parts_are_encoded_while_one_is_written() -> None:
    # Part 0's write waits until the input was read up to part 2, which the
    # writer reaches only while part 0 is being written if it encodes the
    # parts after it meanwhile (one at a time, it would wait for part 0).
    table = sample(900)
    reached = threading.Event()

    def batches() -> Iterator[pa.RecordBatch]:
        for i, batch in enumerate(table.to_batches(max_chunksize=300)):
            if i == 2:
                reached.set()
            yield batch

    class _WaitsForPart2(MemoryBackend):  # type: ignore[misc]
        saw: bool | None = None

        def write_atomic(self, path, content, *, overwrite=False, metadata=None):  # type: ignore[no-untyped-def]
            if str(path).endswith("part-00000.parquet"):
                type(self).saw = reached.wait(10)
            return super().write_atomic(path, content, overwrite=overwrite, metadata=metadata)

    store = Store(_WaitsForPart2())
    reader = pa.RecordBatchReader.from_batches(table.schema, batches())
    ParquetDatasetStore(store, max_rows_per_file=300).write_dataset(reader, "d")
    assert _WaitsForPart2.saw is True, "part 2 was read only after part 0 was written"
    assert ParquetDatasetStore(store).read_dataset("d").equals(table)


@pytest.mark.parametrize(
    ("fail_on", "after"),
    [("part-00001", 0), ("manifest.json", 0), ("_SUCCESS", 0), ("_WRITING", 0)],
)
def test_the_stores_own_exception_reaches_the_caller_and_nothing_stays(fail_on: str, after: int) -> None:
    error = PermissionDenied(f"no writes to {fail_on} today", path=fail_on)
    backend = _Failing(fail_on, error, after)
    store = Store(backend)
    with pytest.raises(PermissionDenied) as info:
        ParquetDatasetStore(store, max_rows_per_file=300).write_dataset(sample(1000), "d")
    assert info.value is error, "the Store's exception object itself, not a copy or a wrapper"
    assert files(store) == []
    # Nothing was retried: each failing write was asked once.
    assert sum(1 for _, p in backend.calls if fail_on in p) == 1
    # The key is free again, and the same write then succeeds.
    backend.fail_on = "never"
    ParquetDatasetStore(store, max_rows_per_file=300).write_dataset(sample(1000), "d")
    assert ParquetDatasetStore(store).read_dataset("d").equals(sample(1000))


def test_store_calls_run_on_threads_of_the_core_while_the_caller_waits() -> None:
    backend = _Failing("never", RuntimeError("unused"))
    ParquetDatasetStore(Store(backend), max_rows_per_file=100).write_dataset(sample(500), "d")
    assert threading.get_ident() not in backend.threads
    methods = [m for m, _ in backend.calls]
    # The claim is a plain write; parts, manifest and marker are atomic writes, in order.
    assert backend.calls[0] == ("write", "d/_WRITING")
    assert [p for m, p in backend.calls if m == "write_atomic"] == [
        *(f"d/part-{i:05d}.parquet" for i in range(5)),
        "d/manifest.json",
        "d/_SUCCESS",
    ]
    assert methods.count("write") == 1


def test_an_unexpected_exception_of_the_store_is_raised_as_it_was() -> None:
    class Boom(Exception):
        pass

    error = Boom("the backend broke")
    store = Store(_Failing("data.parquet", error))
    with pytest.raises(Boom) as info:
        ParquetDatasetStore(store).write_dataset(sample(10), "d")
    assert info.value is error
    assert files(store) == []


def test_a_store_unavailable_during_the_commit_check_fails_the_write_cleanly() -> None:
    """The backend is gone for the manifest's write: the write fails with
    the backend's error and takes its parts and claim back."""
    store = Store(_Failing("manifest.json", BackendUnavailable("connection reset")))
    with pytest.raises(BackendUnavailable, match="connection reset"):
        ParquetDatasetStore(store, max_rows_per_file=3).write_dataset(sample(7), "x/y")
    assert files(store) == []


def test_overwrite_and_in_progress_on_a_local_backend(tmp_path: Path) -> None:
    store = Store(LocalBackend(str(tmp_path)))
    ds = ParquetDatasetStore(store, max_rows_per_file=400)
    ds.write_dataset(sample(1000), "k")
    with pytest.raises(AlreadyExists, match="already exists"):
        ds.write_dataset(sample(5), "k")
    ds.write_dataset(sample(20, offset=7), "k", overwrite=True)
    assert ds.read_dataset("k").equals(sample(20, offset=7))
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == ["_SUCCESS", "data.parquet", "manifest.json"]


def test_the_adapted_handle_pickles_as_its_store_and_refuses_other_objects(tmp_path: Path) -> None:
    store = Store(LocalBackend(str(tmp_path)))
    store.write("o", b"1")
    handle = _core.RustStore.over_store(store)
    assert handle.scheme == "remote-store"
    assert "RustStore(" in repr(handle)
    again = pickle.loads(pickle.dumps(handle))
    assert again.scheme == "remote-store"
    assert again.get("o") == b"1"
    with pytest.raises(TypeError, match=r"remote_store\.Store"):
        _core.RustStore.over_store(object())


def test_reads_through_the_handle_see_the_stores_objects() -> None:
    store = Store(MemoryBackend())
    store.write("a/b.txt", b"hello")
    handle = _core.RustStore.over_store(store)
    assert handle.get("a/b.txt") == b"hello"
    assert handle.get_range("a/b.txt", 1, 3) == b"el"
    meta = handle.head("a/b.txt")
    assert meta is not None and meta.size == 5
    assert handle.head("a/none") is None
    assert handle.head("a") is None, "a folder is no object"
    with pytest.raises(NotFound):
        handle.get("a/none")
    handle.put("a/c.txt", b"x", mode="create")
    with pytest.raises(AlreadyExists):
        handle.put("a/c.txt", b"y", mode="create")
    objects, folders = handle.list("a")
    assert sorted(o.key for o in objects) == ["a/b.txt", "a/c.txt"]
    assert folders == []
    handle.delete("a/c.txt")
    handle.delete("a/c.txt")  # absent is not an error
    assert store.read_bytes("a/b.txt") == b"hello"
    assert not store.exists("a/c.txt")


def test_a_compare_and_swap_put_is_refused_before_any_write() -> None:
    store = Store(MemoryBackend())
    store.write("k", b"v")
    handle = _core.RustStore.over_store(store)
    with pytest.raises(Exception, match="not implemented"):
        handle.put("k", b"w", mode="update", e_tag="x")
    assert store.read_bytes("k") == b"v"


class _AppliedThenFailed(MemoryBackend):  # type: ignore[misc]
    """A real MemoryBackend whose first atomic write of a name containing
    *on* lands, then raises as if its reply were lost."""

    def __init__(self, on: str) -> None:
        super().__init__()
        self.on, self.tries = on, 0

    def write_atomic(self, path, content, *, overwrite=False, metadata=None):  # type: ignore[no-untyped-def]
        mine = self.on in str(path)
        self.tries += mine
        done = super().write_atomic(path, content, overwrite=overwrite, metadata=metadata)
        if mine and self.tries == 1:
            raise BackendUnavailable("the reply was lost")
        return done


@pytest.mark.parametrize("on", ["_SUCCESS", "manifest.json", "part-00001"])
def test_a_write_that_landed_but_raised_is_recognised_as_its_own(on: str) -> None:
    backend = _AppliedThenFailed(on)
    store = Store(backend)
    manifest = ParquetDatasetStore(store, max_rows_per_file=300).write_dataset(sample(1000), "d")
    assert backend.tries >= 2, "tried again"
    ds = ParquetDatasetStore(store)
    assert ds.read_dataset("d").equals(sample(1000))
    assert ds.read_manifest("d").parts == manifest.parts
    assert files(store, "d") == sorted(
        ["d/_SUCCESS", "d/manifest.json", *(f"d/part-{i:05d}.parquet" for i in range(4))]
    )


@pytest.mark.parametrize(
    ("names", "match"),
    [
        (["part-a.parquet", "part-a.parquet"], "listed twice"),
        (["x/part-b.parquet"], "not a part"),
        (["_SUCCESS"], "not a part"),
    ],
)
def test_a_commit_of_uploaded_parts_refuses_names_that_are_not_parts(names: list[str], match: str) -> None:
    store = pds.open_store("memory://")
    handle = store.unwrap(_core.RustStore)
    token = _core.dataset_claim(handle, "d", take_over=False)
    parts = [(n, 1, 10, "00", None) for n in names]
    with pytest.raises(ValueError, match=match):
        _core.dataset_commit_parts(
            handle,
            "d",
            token,
            parts,
            schema=sample(1).schema,
            dataset_key="d",
            compression="zstd",
            schema_hash="h",
            run_id=None,
            metadata=None,
            overwrite=False,
        )
    assert files(store) == ["d/_WRITING"], "nothing written, the claim still held"


def test_a_listing_through_the_handle_is_read_in_pages_and_whole() -> None:
    """2,500 objects: a listing pulls them from the Store a page at a time
    and returns every one, once."""
    store = Store(MemoryBackend())
    for i in range(2_500):
        store.write(f"big/d{i % 7}/o{i:05d}", b"x")
    handle = _core.RustStore.over_store(store)
    objects, _ = handle.list("big", recursive=True)
    assert sorted(o.key for o in objects) == sorted(f"big/d{i % 7}/o{i:05d}" for i in range(2_500))
    assert handle.folder_exists("big")
    assert not handle.folder_exists("small")
    assert handle.list("small", recursive=True) == ([], [])


class _CountingListings(MemoryBackend):  # type: ignore[misc]
    """A real MemoryBackend that counts the files its listings hand out."""

    pulled = 0

    def list_files(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        for f in super().list_files(*args, **kwargs):
            self.pulled += 1
            yield f


def test_the_key_free_check_stops_listing_after_a_page() -> None:
    """5,000 objects below the key: the write's check of what lies below
    takes one page of them from the Store, not all."""
    backend = _CountingListings()
    store = Store(backend)
    for i in range(5_000):
        store.write(f"k/sub/o{i:05d}", b"x")
    backend.pulled = 0
    ParquetDatasetStore(store).write_dataset(sample(5), "k")
    assert backend.pulled < 2_000, backend.pulled
    assert ParquetDatasetStore(store).read_dataset("k").equals(sample(5))
