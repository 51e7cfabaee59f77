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
    for place in ("access_key_id", "AWS_ACCESS_KEY_ID", "instance metadata", "profile=", "pds[aws]"):
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


# -- U-2: what a new user meets in the first hour --------------------------------------


@pytest.mark.spec("U-2")
@pytest.mark.parametrize("kind", ["file", "rs_local"])
def test_the_wrong_kind_of_object_is_named(kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    """read_dataset on a table, Table.open and Pipeline.open on a dataset, a key
    inside a table: each error says what is stored there and how to read it."""
    lake = (tmp_path / "lake").as_uri()
    pds.Table.create(lake, "events", data=pa.table({"id": [1, 2]}))
    pds.ParquetDatasetStore(lake).write_dataset(sample(3), "orders")
    store = pds.open_store(lake) if kind == "file" else Store(LocalBackend(str(tmp_path / "lake")))
    datasets = pds.ParquetDatasetStore(store)
    says = r'a table is stored at "events", not a dataset: open it with pds\.Table\.open'
    for read in (datasets.read_dataset, datasets.iter_batches):
        with pytest.raises(pds.DatasetIncomplete, match=says):
            read("events")
    for read_manifest in (datasets.read_schema, datasets.read_manifest):
        with pytest.raises(pds.NotFound, match=says):
            read_manifest("events")
    with pytest.raises(
        pds.DatasetIncomplete, match=r'no dataset is stored at "events/2024": it lies inside the table at "events"'
    ):
        datasets.read_dataset("events/2024")
    with pytest.raises(pds.DatasetIncomplete, match="nothing is stored under this key"):
        datasets.read_dataset("nothing")
    for open_ in (pds.Table.open, pds.Pipeline.open):
        with pytest.raises(pds.NotFound, match=r'a dataset is stored at "orders", not a (table|pipeline)'):
            open_(lake, "orders")


@pytest.mark.spec("U-2")
def test_a_version_that_does_not_exist_names_the_latest(tmp_path: pathlib.Path) -> None:
    t = pds.Table.create(tmp_path.as_uri(), "events", data=pa.table({"id": [1]}))
    t.append(pa.table({"id": [2]}))
    for call in (lambda: t.to_arrow(version=999), lambda: t.at(version=999), lambda: t.files(999)):
        with pytest.raises(pds.NotFound, match=r'table "events" has no version 999: the latest is 1 ') as info:
            call()
        assert str(tmp_path) not in str(info.value), "no internal path"


@pytest.mark.spec("U-2")
def test_a_dataset_store_takes_a_url_or_a_path(tmp_path: pathlib.Path) -> None:
    for given in (str(tmp_path / "a"), tmp_path / "b", (tmp_path / "c").as_uri(), "memory://"):
        datasets = pds.ParquetDatasetStore(given)
        datasets.write_dataset(sample(3), "d")
        assert datasets.read_dataset("d").equals(sample(3))
    assert (tmp_path / "a" / "d" / "_SUCCESS").exists() and (tmp_path / "c" / "d" / "_SUCCESS").exists()
    with pytest.raises(ValueError, match="absolute"):
        pds.ParquetDatasetStore("relative/lake")
    with pytest.raises(TypeError, match="storage_options"):
        pds.ParquetDatasetStore(pds.open_store("memory://"), storage_options={"region": "x"})
    with pytest.raises(TypeError, match="a URL or a path"):
        pds.ParquetDatasetStore(42)  # type: ignore[arg-type]


@pytest.mark.spec("U-2")
def test_the_primary_key_is_not_enforced_as_documented() -> None:
    """Appending a key the table holds keeps both rows: the tables guide and the
    docstrings say so (this test fails if that ever changes unnoticed)."""
    t = pds.Table.create("memory://", "t", data=pa.table({"id": [1, 2], "v": ["a", "b"]}), primary_key="id")
    t.append(pa.table({"id": [2], "v": ["c"]}))
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["v"]) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "b"},
        {"id": 2, "v": "c"},
    ]
    assert "not enforced" in (pds.Table.create.__doc__ or "")
    guide = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "guides" / "tables.md").read_text()
    assert "primary key is not enforced" in guide


@pytest.mark.spec("U-2")
def test_other_readers_see_deleted_rows_and_scan_does_not(tmp_path: pathlib.Path) -> None:
    """What the README says of DuckDB's read_parquet over a table's folder."""
    duckdb: Any = pytest.importorskip("duckdb")
    t = pds.Table.create(tmp_path.as_uri(), "events", data=pa.table({"id": list(range(10))}))
    t.delete([("id", "<", 5)])
    glob = str(tmp_path / "events" / "**" / "*.parquet")
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(10,)]
    reader = t.scan()  # noqa: F841 (DuckDB finds it by name)
    assert duckdb.sql("select count(*) from reader").fetchall() == [(5,)]


@pytest.mark.spec("U-2")
def test_table_and_pipeline_history_have_one_shape() -> None:
    t = pds.Table.create("memory://", "t", data=pa.table({"k": [1], "v": [1]}))
    t.append(pa.table({"k": [2], "v": [2]}))
    p = pds.Pipeline.create("memory://", "p")
    p.source("s", key={"k": pa.int64()}, value={"v": pa.int64()})
    p.update({"s": pa.table({"k": [1], "v": [1]})})
    p.update({"s": pa.table({"k": [2], "v": [2]})})
    th, ph = t.history(), p.history()
    assert [h["version"] for h in th] == [1, 0] and [h["version"] for h in ph] == [2, 1, 0]
    common = {"version", "previous", "created_at", "operation", "parameters", "commit_id"}
    assert common <= set(th[0]) and common == set(ph[0])
    assert [h["previous"] for h in th] == [0, None] and [h["previous"] for h in ph] == [1, 0, None]
    assert p.history(limit=1) == ph[:1] and t.history(limit=1)[0]["version"] == 1
