"""ObjectStoreBackend: the remote_store Backend contract on memory, file and S3,
plus the create-only and compare-and-swap puts that table commits build on."""

from __future__ import annotations

import io
import pickle
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from remote_store import (
    AlreadyExists,
    Capability,
    DirectoryNotEmpty,
    InvalidPath,
    NotFound,
    Store,
)
from remote_store.backends import LocalBackend
from store_kinds import BUCKET

import pds
from pds import _core


def test_every_abstract_method_is_implemented() -> None:
    from remote_store import Backend

    missing = sorted(getattr(Backend, "__abstractmethods__", set()) - set(vars(pds.ObjectStoreBackend)))
    assert missing == []
    pds.ObjectStoreBackend("memory://")  # instantiable: no abstract method left


def test_write_read_exists(fast_store: Store) -> None:
    s = fast_store
    r = s.write("a/b.txt", b"hello")
    assert r.size == 5 and r.etag
    assert s.read_bytes("a/b.txt") == b"hello"
    assert s.read("a/b.txt").read() == b"hello"
    assert s.exists("a/b.txt") and s.is_file("a/b.txt") and not s.is_folder("a/b.txt")
    assert s.exists("a") and s.is_folder("a") and not s.is_file("a")
    assert not s.exists("nope")
    with pytest.raises(AlreadyExists):
        s.write("a/b.txt", b"again")
    s.write("a/b.txt", io.BytesIO(b"stream"), overwrite=True)
    assert s.read_bytes("a/b.txt") == b"stream"
    with pytest.raises(NotFound):
        s.read_bytes("a/missing")
    with pytest.raises(InvalidPath):
        s.read_bytes("a")  # a folder


def test_atomic_writes(fast_store: Store) -> None:
    s = fast_store
    s.write_atomic("x", b"1")
    with pytest.raises(AlreadyExists):
        s.write_atomic("x", b"2")
    with s.open_atomic("y") as f:
        f.write(b"spooled")
    assert s.read_bytes("y") == b"spooled"
    with pytest.raises(RuntimeError), s.open_atomic("z") as f:
        f.write(b"half")
        raise RuntimeError("caller failed")
    assert not s.exists("z")


def test_delete_and_delete_folder(fast_store: Store) -> None:
    s = fast_store
    for k in ["d/1", "d/2", "d/sub/3", "keep"]:
        s.write(k, b"x")
    s.delete("d/1")
    assert not s.exists("d/1")
    with pytest.raises(NotFound):
        s.delete("d/1")
    s.delete("d/1", missing_ok=True)
    with pytest.raises(InvalidPath):
        s.delete("d")  # a folder
    with pytest.raises(DirectoryNotEmpty):
        s.delete_folder("d")
    with pytest.raises(InvalidPath):
        s.delete_folder("keep")  # a file
    s.delete_folder("d", recursive=True)
    assert not s.exists("d") and s.exists("keep")
    with pytest.raises(NotFound):
        s.delete_folder("d", recursive=True)
    s.delete_folder("d", recursive=True, missing_ok=True)


def test_listing_and_info(fast_store: Store) -> None:
    s = fast_store
    for k in ["r/a", "r/b", "r/s/c", "r/s/t/d"]:
        s.write(k, b"12345")
    assert sorted(f.name for f in s.list_files("r")) == ["a", "b"]
    assert sorted(str(f.path) for f in s.list_files("r", recursive=True)) == ["r/a", "r/b", "r/s/c", "r/s/t/d"]
    assert sorted(str(f.path) for f in s.list_files("r", recursive=True, max_depth=1)) == ["r/a", "r/b", "r/s/c"]
    assert [f.name for f in s.list_folders("r")] == ["s"]
    info = s.get_file_info("r/a")
    assert (info.size, info.name) == (5, "a")
    folder = s.get_folder_info("r")
    assert (folder.file_count, folder.total_size) == (4, 20)
    with pytest.raises(NotFound):
        s.get_file_info("r/zz")
    with pytest.raises(NotFound):
        s.get_folder_info("nothing")


ODD_KEYS = ["x[1]/a#b", "x[1]/100%25 {c}*?.parquet", "é ü/~tilde|pipe<>`^"]


def test_keys_with_characters_object_store_would_encode(fast_store: Store) -> None:
    """Keys are stored and listed verbatim, not as object_store's percent-encoded names."""
    s = fast_store
    for k in ODD_KEYS:
        s.write(k, k.encode())
    assert sorted(str(f.path) for f in s.list_files("", recursive=True)) == sorted(ODD_KEYS)
    assert sorted(f.name for f in s.list_folders("")) == sorted(["x[1]", "é ü"])
    for k in ODD_KEYS:
        assert s.read_bytes(k) == k.encode()
        assert s.exists(k)


def test_names_a_local_filesystem_reserves(fast_store: Store, tmp_path: Path) -> None:
    """file:// refuses names ending in '#<digits>' (object_store's staging files) before any I/O."""
    s = fast_store
    if s.unwrap(pds.ObjectStoreBackend).url.startswith("file://"):
        with pytest.raises(InvalidPath, match="in-progress"):
            s.write("d/x#12", b"1")
        assert not s.exists("d")
    else:
        s.write("d/x#12", b"1")
        assert s.read_bytes("d/x#12") == b"1"
    s.write("d/x#1a", b"2")
    assert s.read_bytes("d/x#1a") == b"2"


def test_odd_keys_are_the_same_objects_remote_store_sees(tmp_path: Path, seaweed: Any) -> None:
    """On disk and on S3 the object is named by the key itself, as remote-store and boto3 name it."""
    root = tmp_path / "lake"
    local = pds.open_store(root.as_uri())
    for k in ODD_KEYS:
        local.write(k, b"1")
    on_disk = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert on_disk == sorted(ODD_KEYS)
    plain = Store(LocalBackend(str(root)))
    assert sorted(str(f.path) for f in plain.list_files("", recursive=True)) == sorted(ODD_KEYS)

    prefix = uuid.uuid4().hex
    s3 = pds.open_store(f"s3://{BUCKET}/{prefix}", **seaweed.store_options())
    for k in ODD_KEYS:
        s3.write(k, b"2")
    listed = seaweed.client().list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")
    assert sorted(o["Key"][len(prefix) + 1 :] for o in listed["Contents"]) == sorted(ODD_KEYS)

    # A store URL is percent-decoded, as file:// paths are: my%20lake is the prefix "my lake".
    spaced = pds.open_store(f"s3://{BUCKET}/{prefix}/my%20lake%5B2%5D", **seaweed.store_options())
    spaced.write("k", b"3")
    listed = seaweed.client().list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/my ")
    assert [o["Key"] for o in listed["Contents"]] == [f"{prefix}/my lake[2]/k"]


def test_move_and_copy(fast_store: Store) -> None:
    s = fast_store
    s.write("src", b"data")
    s.copy("src", "cp")
    assert s.read_bytes("cp") == b"data"
    with pytest.raises(AlreadyExists):
        s.copy("src", "cp")
    s.move("cp", "mv")
    assert not s.exists("cp") and s.read_bytes("mv") == b"data"
    with pytest.raises(AlreadyExists):
        s.move("src", "mv")
    s.move("src", "mv", overwrite=True)
    assert not s.exists("src")
    with pytest.raises(NotFound):
        s.copy("src", "x")


def test_child_stores_are_confined(fast_store: Store) -> None:
    child = fast_store.child("tenant")
    child.write("f", b"1")
    assert fast_store.read_bytes("tenant/f") == b"1"
    for bad in ["../f", "a/../../f", "x\0"]:
        with pytest.raises(InvalidPath):
            child.write(bad, b"2")


def test_rust_handle_refuses_escaping_keys(fast_store: Store) -> None:
    rs = fast_store.unwrap(_core.RustStore)
    for bad in ["../x", "a/../../x", "a\\..\\..\\x", "\0"]:
        with pytest.raises(InvalidPath):
            rs.put(bad, b"x")


@pytest.mark.spec("STORE-CAS")
def test_create_only_and_compare_and_swap(fast_store: Store) -> None:
    rs = fast_store.unwrap(_core.RustStore)
    first = rs.put("tbl/_latest", b"v1", mode="create")
    with pytest.raises(AlreadyExists):
        rs.put("tbl/_latest", b"v1-again", mode="create")
    head = rs.head("tbl/_latest")
    assert head is not None and head.e_tag == first.e_tag
    won = rs.put("tbl/_latest", b"v2", mode="update", e_tag=head.e_tag, version=head.version)
    with pytest.raises(pds.PreconditionFailed):
        rs.put("tbl/_latest", b"v3", mode="update", e_tag=head.e_tag, version=head.version)
    assert rs.get("tbl/_latest") == b"v2"
    latest = rs.head("tbl/_latest")
    assert latest is not None and latest.e_tag == won.e_tag
    with pytest.raises(ValueError, match="e_tag"):
        rs.put("tbl/_latest", b"v4", mode="update")


@pytest.mark.spec("STORE-CAS")
def test_compare_and_swap_race_has_one_winner(fast_store: Store) -> None:
    """Eight threads race from the same ETag: exactly one commit lands."""
    from concurrent.futures import ThreadPoolExecutor

    rs = fast_store.unwrap(_core.RustStore)
    rs.put("race", b"base", mode="create")
    head = rs.head("race")
    assert head is not None

    def attempt(i: int) -> bool:
        try:
            rs.put("race", f"w{i}".encode(), mode="update", e_tag=head.e_tag, version=head.version)
            return True
        except pds.PreconditionFailed:
            return False

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(8)))
    assert results.count(True) == 1
    assert rs.get("race") == f"w{results.index(True)}".encode()


@pytest.mark.spec("STORE-CAS")
def test_create_only_race_has_one_winner(fast_store: Store) -> None:
    """Sixteen threads create one name at once: exactly one put lands, and its bytes stay."""
    from concurrent.futures import ThreadPoolExecutor

    rs = fast_store.unwrap(_core.RustStore)

    def attempt(i: int) -> bool:
        try:
            rs.put("claim", f"w{i}".encode(), mode="create")
            return True
        except AlreadyExists:
            return False

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(attempt, range(16)))
    assert results.count(True) == 1
    assert rs.get("claim") == f"w{results.index(True)}".encode()


def test_capabilities_are_truthful(fast_store: Store) -> None:
    for cap in (Capability.READ, Capability.WRITE, Capability.DELETE, Capability.LIST, Capability.ATOMIC_WRITE):
        assert fast_store.supports(cap)
    assert not fast_store.supports(Capability.USER_METADATA)
    assert not fast_store.supports(Capability.GLOB)


def test_pickle_round_trip_and_secret_free_repr(tmp_path, s3_url: Callable[[], tuple[str, dict[str, str]]]) -> None:  # type: ignore[no-untyped-def]
    url, options = s3_url()
    b = pds.ObjectStoreBackend(url, **options)
    assert options["secret_access_key"] not in repr(b)
    assert options["secret_access_key"] not in repr(b.unwrap(_core.RustStore))
    Store(b).write("p", b"pickled")
    clone = pickle.loads(pickle.dumps(b))
    assert Store(clone).read_bytes("p") == b"pickled"
    local = pds.ObjectStoreBackend(tmp_path.as_uri())
    Store(local).write("f", b"1")
    assert Store(pickle.loads(pickle.dumps(local))).read_bytes("f") == b"1"
    rs = pickle.loads(pickle.dumps(local.unwrap(_core.RustStore)))
    assert rs.get("f") == b"1"


@pytest.mark.parametrize(
    ("url", "options"),
    [("ftp://x", {}), ("file://relative", {}), ("s3://", {}), ("memory://", {"a": "b"}), ("s3://b", {"bogus": "1"})],
)
def test_bad_urls_and_options(url: str, options: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        pds.ObjectStoreBackend(url, **options)


def test_s3_options_accept_bool_and_int(seaweed) -> None:  # type: ignore[no-untyped-def]
    opts: dict[str, object] = dict(seaweed.store_options())
    opts["allow_http"] = True
    opts["max_retries"] = 2
    opts["retry_timeout_secs"] = 30
    opts["timeout"] = "30s"
    store = pds.open_store("s3://pds-tests/opts", **opts)
    store.write("k", b"v", overwrite=True)
    assert store.read_bytes("k") == b"v"
