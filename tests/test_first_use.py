"""A new user's first steps (R-9): local paths, missing credentials, other
readers over a committed dataset."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import pyarrow as pa
import pytest
from remote_store import CapabilityNotSupported, Store
from remote_store.backends import LocalBackend, MemoryBackend

import pds

from helpers import sample


@pytest.mark.spec("R-9")
def test_open_store_takes_an_absolute_folder_path(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for given in (str(tmp_path / "a"), tmp_path / "b"):
        store = pds.open_store(given)
        pds.ParquetDatasetStore(store).write_dataset(sample(3), "d")
        assert (pathlib.Path(given) / "d" / "_SUCCESS").exists()
    monkeypatch.setenv("HOME", str(tmp_path))
    pds.ParquetDatasetStore(pds.open_store("~/c")).write_dataset(sample(3), "d")
    assert (tmp_path / "c" / "d" / "manifest.json").exists()


@pytest.mark.spec("R-9")
def test_a_relative_path_gets_a_hint() -> None:
    with pytest.raises(ValueError, match="absolute"):
        pds.open_store("relative/lake")


@pytest.mark.spec("R-9")
def test_s3_without_credentials_says_where_it_looked() -> None:
    """No keys anywhere: the error names the places pds looked, not a bare 403.

    The instance metadata endpoint is pointed at a closed local port, so the
    last step of the credential chain fails at once, as it does off EC2.
    """
    script = textwrap.dedent(
        """
        import pds
        store = pds.open_store(
            "s3://bucket/prefix", region="us-east-1", endpoint="http://127.0.0.1:9", allow_http="true",
            metadata_endpoint="http://127.0.0.1:9", max_retries="0", retry_timeout_secs="1",
        )
        try:
            pds.ParquetDatasetStore(store).read_dataset("d")
        except pds.PermissionDenied as exc:
            print("PermissionDenied:", exc)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("PermissionDenied:"), done.stdout
    for place in ("access_key_id", "AWS_ACCESS_KEY_ID", "instance metadata"):
        assert place in done.stdout


def _dataset_store(kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> Store:
    if kind == "rs_local":
        root = tmp_path / "local"
        root.mkdir()
        return Store(LocalBackend(str(root)))
    if kind == "s3":
        import uuid

        server = request.getfixturevalue("seaweed")
        return pds.open_store(f"s3://pds-tests/{uuid.uuid4().hex}", **server.store_options())
    return pds.open_store((tmp_path / "lake dir").as_uri())


@pytest.mark.spec("R-9")
@pytest.mark.parametrize("kind", ["file", "s3", "rs_local"])
def test_to_pyarrow_dataset_covers_exactly_the_committed_parts(
    kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    store = _dataset_store(kind, tmp_path, request)
    datasets = pds.ParquetDatasetStore(store, max_rows_per_file=300)
    table = sample(1000)
    datasets.write_dataset(table, "orders/v1")
    store.write("orders/v1/part-09999.parquet", b"a killed writer's leftover, not in the manifest")
    ds = datasets.to_pyarrow_dataset("orders/v1")
    assert ds.to_table().equals(table)
    assert ds.to_table(filter=pa.compute.field("id") < 10).num_rows == 10

    import polars as pl

    assert pl.scan_pyarrow_dataset(ds).filter(pl.col("id") >= 990).collect().height == 10


@pytest.mark.spec("R-9")
def test_to_pyarrow_dataset_refuses_what_pyarrow_cannot_reach() -> None:
    for store in (pds.open_store("memory://"), Store(MemoryBackend())):
        datasets = pds.ParquetDatasetStore(store)
        datasets.write_dataset(sample(3), "d")
        with pytest.raises(CapabilityNotSupported):
            datasets.to_pyarrow_dataset("d")


@pytest.mark.spec("R-9")
def test_to_pyarrow_dataset_needs_a_committed_dataset(tmp_path: pathlib.Path) -> None:
    with pytest.raises(pds.DatasetIncomplete, match="nothing is stored"):
        pds.ParquetDatasetStore(pds.open_store(tmp_path.as_uri())).to_pyarrow_dataset("none")


def test_duckdb_reads_the_dataset_when_installed(tmp_path: pathlib.Path) -> None:
    duckdb: Any = pytest.importorskip("duckdb")
    datasets = pds.ParquetDatasetStore(pds.open_store(tmp_path.as_uri()))
    datasets.write_dataset(sample(100), "d")
    con = duckdb.connect()
    con.register("orders", datasets.to_pyarrow_dataset("d"))
    assert con.sql("select count(*) from orders where id < 10").fetchall() == [(10,)]
