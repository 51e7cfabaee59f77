"""``pds.spark.upsert`` (issue T, item 1): a DataFrame replaces rows of a pds
table by primary key in one commit per job, on file:// and SeaweedFS, with a
real local Spark; bad keys are refused before anything is written.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from remote_store import Store
from store_kinds import REMOTE

import pds
import pds.spark

from helpers import files

pytestmark = pytest.mark.spec("T-1")


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "tag": pa.array([f"{tag}{i}" for i in ids], pa.string())})


@pytest.mark.parametrize("kind", ["file", *REMOTE])
def test_spark_upsert_replaces_keys_and_inserts_the_rest_in_one_commit(
    spark_session: SparkSession, kind: str, request: pytest.FixtureRequest
) -> None:
    url, options, store = request.getfixturevalue(f"{kind}_store")
    t = pds.Table.create(store, "t", data=_rows(list(range(100)), "old"), primary_key="id")
    before = {f["path"]: f["sha256"] for f in t.manifest["data_files"]}
    new_ids = [*range(10, 20), 55, 77, *range(100, 130)]
    df = spark_session.createDataFrame(_rows(new_ids, "new")).repartition(3, "id")
    version = pds.spark.upsert(df, url, "t", **options)
    assert version == 1, "one commit for the job"
    t.refresh()
    assert t.history(1)[0]["operation"] == "upsert"
    got = {r["id"]: r["tag"] for r in t.to_arrow().to_pylist()}
    expected = {i: f"old{i}" for i in range(100)} | {i: f"new{i}" for i in new_ids}
    assert got == expected
    assert t.to_arrow().num_rows == len(expected)
    after = {f["path"]: f["sha256"] for f in t.manifest["data_files"]}
    assert all(after[p] == sha for p, sha in before.items()), "no file rewritten"
    # No file of the job is left outside the version.
    named = {f"t/{p}" for p in after}
    assert [k for k in files(store, "t/data") if k not in named] == []


def test_spark_upsert_refuses_bad_keys_and_keyless_tables_before_writing(
    spark_session: SparkSession, file_store: tuple[str, dict[str, str], Store]
) -> None:
    url, _, store = file_store
    pds.Table.create(store, "t", data=_rows([1, 2, 3], "old"), primary_key="id")
    before = files(store, "t")
    dup = spark_session.createDataFrame(_rows([5, 6, 5], "x"))
    with pytest.raises(ValueError, match="repeated primary keys"):
        pds.spark.upsert(dup, url, "t")
    nulls = spark_session.createDataFrame(pa.table({"id": pa.array([1, None], pa.int64()), "tag": ["a", "b"]}))
    with pytest.raises(ValueError, match="null"):
        pds.spark.upsert(nulls, url, "t")
    assert files(store, "t") == before
    pds.Table.create(store, "plain", data=_rows([1], "a"))
    with pytest.raises(ValueError, match="declares none"):
        pds.spark.upsert(spark_session.createDataFrame(_rows([1], "b")), url, "plain")
