"""Fixtures of the Dagster tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def file_lake(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A fresh file:// root URL and its (empty) options."""
    return (tmp_path / "lake").as_uri(), {}
