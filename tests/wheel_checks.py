"""Checks that ``tests/test_wheel.py`` runs inside a fresh venv holding only the pds wheel.

Not a test module: it runs as ``<venv>/bin/python tests/wheel_checks.py
<check> <dir>`` so that it imports pds from the installed wheel, never from
the source tree. Each check raises (exit code 1) on the first failure.

- ``quickstart``: imports every ``pds`` module but ``pds.spark``, writes and
  reads a dataset and a table, and runs a small pipeline, on a ``file://``
  store in *dir*.
- ``no-spark``: ``import pds.spark`` fails with an error naming the extra.
- ``spark``: ``pds.spark`` and ``pyspark_pds`` import; the mapInArrow helpers
  run a local[1] Spark job (write, read with ``engine="spark"``, upsert on
  a table, a pipeline update); on PySpark >= 4.0 ``format("pds")`` reads
  and writes, on 3.5 the data source entry points raise
  ``SparkVersionError`` naming the helpers, and Spark itself does not find
  ``format("pds")``.
"""

from __future__ import annotations

import os
import pkgutil
import sys
import tempfile
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import pyarrow as pa


def _inside_venv() -> None:
    import pds

    where = Path(pds.__file__).resolve()
    assert Path(sys.prefix).resolve() in where.parents, f"pds imported from {where}, not from the venv {sys.prefix}"


def quickstart(root: Path) -> None:
    import pds

    _inside_venv()
    # Every module a user imports (pds.spark needs the extra: see no_spark).
    for info in pkgutil.walk_packages(pds.__path__, "pds."):
        if not info.name.startswith("pds.spark") and not info.name.endswith("__main__"):
            import_module(info.name)
    store = pds.open_store(root.as_uri())
    datasets = pds.ParquetDatasetStore(store, max_rows_per_file=2)
    orders = pa.table({"id": [1, 2, 3], "country": ["DE", "FR", "DE"], "amount": [9.5, 20.0, 3.25]})
    manifest = datasets.write_dataset(orders, "silver/orders")
    assert manifest.row_count == 3
    assert datasets.read_dataset("silver/orders").equals(orders)
    assert datasets.read_dataset("silver/orders", filter=[("amount", ">", 5)]).column("id").to_pylist() == [1, 2]

    t = pds.Table.create(store, "events", data=orders, primary_key="id")
    t.append(pa.table({"id": [4], "country": ["NL"], "amount": [1.0]}))
    t.delete([("country", "==", "FR")])
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 3, 4]
    assert t.to_arrow(version=0).num_rows == 3

    # A pipeline: its range assignment runs on numpy, a declared dependency.
    p = pds.Pipeline.create(store, "pipelines/demo")
    events = p.source("events", key={"id": pa.int64()}, value={"user": pa.string(), "n": pa.int64()})

    @p.stage("per_user", sources=[events], key={"user": pa.string()}, value={"n": pa.int64()})
    def per_user(key: Any, rows: Any) -> Any:
        for r in rows:
            yield r["user"], {"n": r["n"]}

    p.update({"events": pa.table({"id": [1, 2, 3], "user": ["a", "b", "a"], "n": [1, 2, 3]})})
    assert sorted(p.read("per_user").column("user").to_pylist()) == ["a", "a", "b"]
    print("quickstart ok")


def _error_of(call: Callable[[], object], kind: type[BaseException]) -> str:
    """The message of the *kind* error *call* raises (no pytest in these venvs)."""
    try:
        call()
    except kind as exc:
        return str(exc)
    raise AssertionError(f"{call} raised no {kind.__name__}")


def no_spark(root: Path) -> None:
    message = _error_of(lambda: import_module("pds.spark"), ImportError)
    assert 'pip install "pds[spark]"' in message, message
    print("no-spark ok:", message)


def spark(root: Path) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyspark
    from pyspark.sql import SparkSession

    import pds
    import pds.spark
    from pds.spark import SparkVersionError

    _inside_venv()
    modern = tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 0)
    session = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    url = root.as_uri()
    df = session.createDataFrame([(i, f"u{i % 3}", i * 1.5) for i in range(50)], "id long, user string, x double")
    manifest = pds.spark.write_dataset(df, url, "orders")
    assert manifest.row_count == 50
    back = pds.spark.read_dataset(session, url, "orders", columns=["id"], filter=[("id", ">=", 45)], engine="spark")
    assert sorted(r.id for r in back.collect()) == [45, 46, 47, 48, 49]

    pds.Table.create(url, "t", data=pa.table({"id": [1, 2], "user": ["old", "old"], "x": [0.0, 0.0]}), primary_key="id")
    version = pds.spark.upsert(df.where("id < 3"), url, "t")
    assert version == 1
    assert sorted(pds.Table.open(url, "t").to_arrow().column("user").to_pylist()) == ["u0", "u1", "u2"]

    p = pds.Pipeline.create(url, "pipelines/demo")
    events = p.source("events", key={"id": pa.int64()}, value={"user": pa.string(), "n": pa.int64()})

    @p.stage("per_user", sources=[events], key={"user": pa.string()}, value={"n": pa.int64()})
    def per_user(key: Any, rows: Any) -> Any:
        for r in rows:
            yield r["user"], {"n": r["n"]}

    pds.spark.update_pipeline(session, p, {"events": df.selectExpr("id", "user", "id * 2 AS n")})
    assert p.read("per_user").num_rows == 50

    if modern:
        import pyspark_pds  # noqa: F401

        df.write.format("pds").option("store", url).mode("append").save("via_source")
        assert session.read.format("pds").option("store", url).load("via_source").count() == 50
    else:
        for call in (
            lambda: pds.spark.register(session),
            lambda: pds.spark.read_dataset(session, url, "orders"),
            lambda: import_module("pyspark_pds"),
            lambda: pds.spark.PdsDataSource,
        ):
            message = _error_of(call, SparkVersionError)
            assert "PySpark >= 4.0" in message and "pds.spark.write_dataset" in message, message
        # Spark 3.5 itself looks the name up and never asks Python.
        message = _error_of(lambda: session.read.format("pds").option("store", url).load("orders"), Exception)
        assert "DATA_SOURCE_NOT_FOUND" in message, message
    session.stop()
    print(f"spark ok on PySpark {pyspark.__version__}")


if __name__ == "__main__":
    check, where = sys.argv[1], Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp())
    {"quickstart": quickstart, "no-spark": no_spark, "spark": spark}[check](where)
