"""The kinds of store the tests run on, and the URLs, options and stores of
each: plain names the test modules import (the fixtures that start the
servers are in ``conftest.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from remote_store import Store
from remote_store.backends import LocalBackend, MemoryBackend

import pds

#: Stores on a server, started once per session.
REMOTE = ["s3", "gcs"]
FAST = ["memory", "file", *REMOTE]
PORTABLE = ["rs_memory", "rs_local"]
ALL = FAST + PORTABLE
BUCKET = "pds-tests"

#: Spark's ``local-cluster`` master for the tests on separate executors: 2
#: workers of 1 core and 1 GiB, each starting its own executor JVM (with its
#: own Python workers), as on a real cluster.
CLUSTER_MASTER = "local-cluster[2,1,1024]"


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


#: object_store retries through the proxy: few and quick, so that a
#: persistent fault fails a test in well under a second, yet one injected
#: 503 or dropped connection is retried.
FAULTY_RETRIES = {"max_retries": "2", "retry_timeout_secs": "10"}


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


def faulty_prefix(proxy: Any, url: str, direct_options: dict[str, str]) -> Iterator[Faulty]:
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
