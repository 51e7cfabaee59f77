"""Checks that ``tests/package/test_wheel.py`` runs inside a fresh venv holding only the pds wheel.

Not a test module: it runs as ``<venv>/bin/python tests/wheel_checks.py
<check> <dir>`` so that it imports pds from the installed wheel, never from
the source tree. Each check raises (exit code 1) on the first failure.

- ``quickstart``: imports every ``pds`` module but ``pds.spark`` and
  ``pds.dagster``, writes and reads a dataset and a table, and runs a small
  pipeline, on a ``file://`` store in *dir*.
- ``no-spark``: ``import pds.spark`` and ``import pds.dagster`` fail with an
  error naming their extras.
- ``spark``: ``pds.spark`` and ``pyspark_pds`` import; the mapInArrow helpers
  run a local[1] Spark job (write, read with ``engine="spark"``, upsert on
  a table, a pipeline update, one refused for a column's type); on PySpark >= 4.0 ``format("pds")`` reads
  and writes, on 3.5 the data source entry points raise
  ``SparkVersionError`` naming the helpers, and Spark itself does not find
  ``format("pds")``.

``manylinux2014`` is the one check run outside those venvs (``make wheel-check``,
``test_wheel.py``): ``wheel_checks.py manylinux2014 WHEEL...`` checks, with
binutils' ``readelf``, that each extension module in each wheel is built for the
wheel's architecture (ELF machine) and needs nothing beyond PEP 599's
manylinux2014 policy: symbol versions up to GLIBC_2.17 (GCC_4.8.0,
GLIBCXX_3.4.19, CXXABI_1.3.7) and only the policy's libraries.
"""

from __future__ import annotations

import os
import pkgutil
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any


def _inside_venv() -> None:
    import pds

    where = Path(pds.__file__).resolve()
    assert Path(sys.prefix).resolve() in where.parents, f"pds imported from {where}, not from the venv {sys.prefix}"


def quickstart(root: Path) -> None:
    import pyarrow as pa

    import pds

    _inside_venv()
    # Every module a user imports (pds.spark and pds.dagster need their
    # extras: see no_spark).
    for info in pkgutil.walk_packages(pds.__path__, "pds."):
        extra = info.name.startswith(("pds.spark", "pds.dagster"))
        if not extra and not info.name.endswith("__main__"):
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
    message = _error_of(lambda: import_module("pds.dagster"), ImportError)
    assert 'pip install "pds[dagster]"' in message, message
    print("no-dagster ok:", message)


def spark(root: Path) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyarrow as pa
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
    # A column of a type no value of which fits: SchemaMismatch naming the column, before any write.
    refused = ""
    try:
        pds.spark.update_pipeline(session, p, {"events": df.selectExpr("id", "user", "concat('x', id) AS n")})
    except pds.SchemaMismatch as e:
        refused = str(e)
    assert "'n'" in refused, f"a string column for an int64 value: {refused!r}"
    assert p.refresh() == 1

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


# PEP 599 (manylinux2014): the libraries an extension module may need, and the newest
# version of each family of versioned symbols it may use.
MANYLINUX2014_LIBRARIES = frozenset(
    {
        "libgcc_s.so.1",
        "libstdc++.so.6",
        "libm.so.6",
        "libdl.so.2",
        "librt.so.1",
        "libc.so.6",
        "libnsl.so.1",
        "libutil.so.1",
        "libpthread.so.0",
        "libresolv.so.2",
        "libX11.so.6",
        "libXext.so.6",
        "libXrender.so.1",
        "libICE.so.6",
        "libSM.so.6",
        "libGL.so.1",
        "libgobject-2.0.so.0",
        "libgthread-2.0.so.0",
        "libglib-2.0.so.0",
    }
)
MANYLINUX2014_NEWEST = {"GLIBC": (2, 17), "GCC": (4, 8, 0), "GLIBCXX": (3, 4, 19), "CXXABI": (1, 3, 7)}
# Per wheel architecture: the ELF machine readelf names, and glibc's dynamic loader (always there).
MACHINES = {
    "x86_64": ("Advanced Micro Devices X86-64", "ld-linux-x86-64.so.2"),
    "aarch64": ("AArch64", "ld-linux-aarch64.so.1"),
}


def _readelf(path: Path, option: str) -> str:
    return subprocess.run(["readelf", "--wide", option, str(path)], capture_output=True, text=True, check=True).stdout


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def elf_problems(library: Path, arch: str) -> list[str]:
    """What keeps *library* (an ELF shared object) out of a manylinux2014 *arch* wheel."""
    machine, loader = MACHINES[arch]
    problems = []
    found = re.search(r"Machine:\s+(.+)", _readelf(library, "--file-header"))
    if found is None or found.group(1).strip() != machine:
        problems.append(f"ELF machine {found and found.group(1).strip()!r}, not {machine!r}")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", _readelf(library, "--dynamic"))
    problems += [
        f"needs {lib}, not a manylinux2014 library" for lib in needed if lib not in MANYLINUX2014_LIBRARIES | {loader}
    ]
    # Only the versions it needs (.gnu.version_r), not those it would define.
    needs = _readelf(library, "--version-info").partition("Version needs section")[2]
    for name in sorted(set(re.findall(r"Name: (\S+)", needs))):
        family, _, version = name.partition("_")
        newest = MANYLINUX2014_NEWEST.get(family)
        if newest is None or not re.fullmatch(r"[0-9]+(\.[0-9]+)*", version):
            problems.append(f"needs symbol version {name}, outside manylinux2014")
        elif _version(version) > newest:
            problems.append(f"needs {name}, newer than {family}_{'.'.join(map(str, newest))}")
    return problems


def manylinux2014(wheels: list[Path]) -> None:
    """Each wheel is tagged manylinux2014 and each of its extension modules fits that tag."""
    for wheel in wheels:
        tag = re.search(r"-manylinux2014_(x86_64|aarch64)[.-]", wheel.name)
        assert tag is not None, f"{wheel.name} is not tagged manylinux2014_x86_64 or manylinux2014_aarch64"
        arch = tag.group(1)
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as z:
            modules = [m for m in z.namelist() if m.endswith(".so")]
            assert modules, f"{wheel.name} holds no extension module"
            problems = [f"{m}: {p}" for m in modules for p in elf_problems(Path(z.extract(m, tmp)), arch)]
        assert not problems, f"{wheel.name} is not manylinux2014:\n  " + "\n  ".join(problems)
        print(f"manylinux2014 ok: {wheel.name} ({', '.join(modules)}: ELF {MACHINES[arch][0]}, glibc <= 2.17)")


if __name__ == "__main__":
    if sys.argv[1] == "manylinux2014":
        manylinux2014([Path(arg) for arg in sys.argv[2:]])
        sys.exit(0)
    check, where = sys.argv[1], Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp())
    {"quickstart": quickstart, "no-spark": no_spark, "spark": spark}[check](where)
