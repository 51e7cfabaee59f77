"""A writer killed with SIGKILL mid-write never exposes partial data.

The reader sees the old dataset, the new one, or DatasetIncomplete.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from store_kinds import REMOTE, remote_url

import pds

WRITER = r"""
import json, sys
import pyarrow as pa, pds
url, options, rows = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
table = pa.table({"v": pa.array([2] * rows, pa.int64()), "x": pa.array(range(rows), pa.int64())})
ds = pds.ParquetDatasetStore(pds.open_store(url, **options), max_rows_per_file=rows // 16, row_group_size=rows // 64)
print("ready", flush=True)
ds.write_dataset(table, "ds", overwrite=True)
print("done", flush=True)
"""

ROWS = 2_000_000


def _old(rows: int = 1000) -> pa.Table:
    return pa.table({"v": pa.array([1] * rows, pa.int64()), "x": pa.array(range(rows), pa.int64())})


def _check_visible(ds: pds.ParquetDatasetStore) -> str:
    try:
        got = ds.read_dataset("ds")
    except pds.DatasetIncomplete:
        return "incomplete"
    values = set(got.column("v").to_pylist())
    assert len(values) == 1, "a mix of old and new rows"
    if values == {1}:
        assert got.equals(_old()), "old dataset altered"
        return "old"
    assert got.num_rows == ROWS, f"new dataset with {got.num_rows} of {ROWS} rows"
    assert got.column("x").to_pylist() == list(range(ROWS))
    return "new"


def _run(url: str, options: dict[str, str], delays: list[float]) -> list[str]:
    store = pds.open_store(url, **options)
    ds = pds.ParquetDatasetStore(store)
    seen = []
    for delay in delays:
        ds.write_dataset(_old(), "ds", overwrite=True)
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, url, json.dumps(options), str(ROWS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        seen.append(_check_visible(ds))
    return seen


@pytest.mark.slow
def test_sigkill_mid_write_on_file(tmp_path: Path) -> None:
    seen = _run(tmp_path.as_uri(), {}, [0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0, 30.0])
    # The last writer had time to finish: the new dataset is visible.
    assert seen[-1] == "new", seen
    assert "incomplete" in seen or "old" in seen, seen


@pytest.mark.slow
@pytest.mark.parametrize("kind", REMOTE)
def test_sigkill_mid_write_on_a_server(kind: str, request: pytest.FixtureRequest) -> None:
    seen = _run(*remote_url(kind, request), [0.05, 0.3, 0.8, 1.5, 30.0])
    assert seen[-1] == "new", seen
