"""The built x86_64 manylinux2014 wheel, installed into fresh venvs with only
its declared dependencies: ``import pds``, the ``pds`` command and a quick
start; then with the ``spark`` extra (PySpark 4.x, ``format("pds")``), and
with PySpark 3.5 (the ``mapInArrow`` helpers; the data source says it needs
4.0). The checks themselves run inside the venvs: see ``wheel_checks.py``.

``make build`` packs the extension it builds into this machine's wheel in
``dist/`` (no second compile), which is what these tests install: the
manylinux2014 wheels for other machines come from ``make wheel`` (zig), the
same sources and dependencies linked against glibc 2.17. pip may take the
packages from its cache; the first run downloads PySpark 3.5 (~320 MB) and 4.x.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKS = Path(__file__).with_name("wheel_checks.py")
PYSPARK_35 = "pyspark>=3.5,<3.6"


def _wheel() -> Path:
    """The newest x86_64 wheel of this version in dist/ (``make build``'s),
    checked against python/."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    built = sorted((ROOT / "dist").glob(f"pds-{version}-cp311-abi3-*x86_64.whl"), key=lambda p: p.stat().st_mtime)
    if not built:
        pytest.fail(f"no pds-{version} x86_64 wheel in dist/: `make build` builds it")
    wheel = built[-1]
    # The wheel must hold the Python sources as they are now (else it is stale).
    with zipfile.ZipFile(wheel) as z:
        for source in sorted((ROOT / "python").rglob("*.py")):
            member = source.relative_to(ROOT / "python").as_posix()
            assert z.read(member) == source.read_bytes(), f"{wheel.name} has an old {member}: run `make build`"
        assert "pds/_core.abi3.so" in z.namelist()
    return wheel


def _clean_env() -> dict[str, str]:
    """This environment without anything that would let a venv see the source tree or the dev venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _venv(where: Path) -> Path:
    """A fresh venv (no system site packages); its python."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, env=_clean_env())
    return where / "bin" / "python"


def _pip(python: Path, *args: str) -> float:
    """``pip install`` *args* into *python*'s venv; the seconds it took."""
    start = time.monotonic()
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--progress-bar", "off", *args],
        capture_output=True,
        text=True,
        env=_clean_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return time.monotonic() - start


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=_clean_env(), timeout=600, check=False)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _check(python: Path, check: str, tmp_path: Path) -> str:
    data = tmp_path / f"data-{check}"
    data.mkdir()
    return _run([str(python), str(CHECKS), check, str(data)], cwd=tmp_path)


@pytest.mark.timeout(1200)
def test_wheel_installs_and_runs_with_its_declared_dependencies(tmp_path: Path) -> None:
    wheel = _wheel()
    python = _venv(tmp_path / "venv")
    seconds = _pip(python, str(wheel))
    print(f"pip install {wheel.name}: {seconds:.1f} s")
    _check(python, "quickstart", tmp_path)
    _check(python, "no-spark", tmp_path)
    usage = _run([str(tmp_path / "venv" / "bin" / "pds"), "--help"], cwd=tmp_path)
    assert "Usage: pds" in usage and "scan" in usage
    _run([str(python), "-m", "pip", "check"], cwd=tmp_path)

    seconds = _pip(python, f"{wheel}[spark]")
    print(f"pip install {wheel.name}[spark]: {seconds:.1f} s")
    out = _check(python, "spark", tmp_path)
    assert "spark ok on PySpark 4." in out, out


@pytest.mark.timeout(1200)
def test_wheel_helpers_run_on_pyspark_35(tmp_path: Path) -> None:
    wheel = _wheel()
    python = _venv(tmp_path / "venv35")
    seconds = _pip(python, f"{wheel}[spark]", PYSPARK_35)
    print(f"pip install {wheel.name}[spark] {PYSPARK_35}: {seconds:.1f} s")
    out = _check(python, "spark", tmp_path)
    assert "spark ok on PySpark 3.5." in out, out
