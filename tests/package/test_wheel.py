"""The built x86_64 manylinux2014 wheel, installed into fresh venvs with only
its declared dependencies: ``import pds``, the ``pds`` command and a quick
start; then with the ``spark`` extra (PySpark 4.x, ``format("pds")``), and
with PySpark 3.5 (the ``mapInArrow`` helpers; the data source says it needs
4.0). The checks themselves run inside the venvs: see ``wheel_checks.py``.

The wheel is the one ``make wheel`` ships for x86_64, built with zig by
``make wheel-x86_64`` (``make test`` runs it): its extension module needs
glibc 2.17 and only manylinux2014's libraries, which ``wheel_checks.py
manylinux2014`` checks with readelf (and is shown to refuse a library that
needs more). pip may take the packages from its cache; the first run downloads
PySpark 3.5 (~320 MB) and 4.x.
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

ROOT = Path(__file__).resolve().parents[2]
CHECKS = Path(__file__).resolve().parents[1] / "wheel_checks.py"
PYSPARK_35 = "pyspark>=3.5,<3.6"


def _wheel() -> Path:
    """The x86_64 manylinux2014 wheel of this version in dist/ (``make wheel-x86_64``'s),
    checked against python/."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    wheel = ROOT / "dist" / f"pds-{version}-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    if not wheel.is_file():
        pytest.fail(f"no {wheel.name} in dist/: `make wheel-x86_64` (run by `make test`) builds it")
    # The wheel must hold the Python sources as they are now (else it is stale).
    with zipfile.ZipFile(wheel) as z:
        for source in sorted((ROOT / "python").rglob("*.py")):
            member = source.relative_to(ROOT / "python").as_posix()
            assert z.read(member) == source.read_bytes(), f"{wheel.name} has an old {member}: run `make wheel-x86_64`"
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
    # -P: the checks see the installed wheel only, not the folders beside the script.
    return _run([str(python), "-P", str(CHECKS), check, str(data)], cwd=tmp_path)


def _manylinux2014(*wheels: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKS), "manylinux2014", *map(str, wheels)], capture_output=True, text=True, check=False
    )


def test_wheel_is_manylinux2014() -> None:
    """Its extension module is x86-64 code needing glibc <= 2.17 and only manylinux2014's libraries."""
    done = _manylinux2014(_wheel())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "manylinux2014 ok" in done.stdout and "X86-64" in done.stdout, done.stdout


def test_manylinux2014_check_refuses_newer_glibc_other_libraries_and_other_machines(tmp_path: Path) -> None:
    """The check itself: a library built here against getrandom (GLIBC_2.25) and a
    library of its own fails it, and so does x86-64 code in an aarch64 wheel."""
    (tmp_path / "extra.c").write_text("int pds_extra(void) { return 1; }\n")
    (tmp_path / "core.c").write_text(
        "#include <sys/random.h>\nint pds_extra(void);\n"
        "int pds_core(void) { char b[4]; return (int)getrandom(b, sizeof b, 0) + pds_extra(); }\n"
    )
    subprocess.run(["cc", "-shared", "-fPIC", "-o", "libpdsextra.so", "extra.c"], cwd=tmp_path, check=True)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", "_core.abi3.so", "core.c", "-L.", "-lpdsextra"], cwd=tmp_path, check=True
    )
    wheels = []
    for arch in ("x86_64", "aarch64"):
        wheel = tmp_path / f"pds-0.0.0-cp311-abi3-manylinux2014_{arch}.manylinux_2_17_{arch}.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.write(tmp_path / "_core.abi3.so", "pds/_core.abi3.so")
        wheels.append(wheel)
    done = _manylinux2014(wheels[0])
    assert done.returncode != 0
    assert "needs GLIBC_2.25, newer than GLIBC_2.17" in done.stderr, done.stderr
    assert "needs libpdsextra.so, not a manylinux2014 library" in done.stderr, done.stderr
    done = _manylinux2014(wheels[1])
    assert done.returncode != 0
    assert "ELF machine 'Advanced Micro Devices X86-64', not 'AArch64'" in done.stderr, done.stderr


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
