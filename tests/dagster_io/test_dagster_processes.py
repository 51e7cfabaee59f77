"""pds.dagster across processes: concurrent partition runs from two
processes both land; a materialisation killed with SIGKILL mid-stream leaves
the table and the dataset as they were."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import pds

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import datetime, json, os, sys, time
import dagster as dg
import pyarrow as pa
from pds.dagster import PdsIOManager

url, options, what, keys, marker = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4].split(","), sys.argv[5]
DAILY = dg.DailyPartitionsDefinition(start_date="2026-01-01")
SCHEMA = pa.schema([("day", pa.date32()), ("n", pa.int64())])


def rows(key, n=1000):
    d = datetime.date.fromisoformat(key)
    return pa.table({"day": pa.array([d] * n, pa.date32()), "n": pa.array(range(n), pa.int64())})


def hang(key):
    def batches():
        for i in range(5):
            yield rows(key, 100).to_batches()[0]
        open(marker, "w").close()  # half the output is out: kill me now
        time.sleep(600)
        yield rows(key, 100).to_batches()[0]
    return pa.RecordBatchReader.from_batches(SCHEMA, batches())


@dg.asset(partitions_def=DAILY, metadata={"pds/format": "table", "partition_expr": "day"})
def orders(context):
    return hang(context.partition_key) if what == "hang" else rows(context.partition_key)


@dg.asset
def snapshot():
    return hang("2026-01-01") if what == "hang" else rows("2026-01-01", 7)


io = {"io_manager": PdsIOManager(root_uri=url, storage_options=options)}
for key in keys:
    assets = [snapshot] if key == "snapshot" else [orders]
    result = dg.materialize(assets, partition_key=None if key == "snapshot" else key, resources=io)
    assert result.success
print("done", flush=True)
"""


def _start(tmp_path: Path, url: str, options: dict[str, str], what: str, keys: list[str], marker: str = "-") -> Any:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT / "python")}
    return subprocess.Popen(
        [sys.executable, str(script), url, json.dumps(options), what, ",".join(keys), marker],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.s3
def test_two_processes_materialise_partitions_of_one_table_at_once(tmp_path: Path, s3_store: Any) -> None:
    url, options, store = s3_store
    days = [f"2026-01-{d:02d}" for d in range(1, 7)]
    a = _start(tmp_path, url, options, "rows", days[0::2])
    b = _start(tmp_path, url, options, "rows", days[1::2])
    for p in (a, b):
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out[-3000:]
    table = pds.Table.open(store, "orders")
    got = table.to_arrow()
    assert got.num_rows == 6 * 1000
    assert sorted({d.isoformat() for d in got.column("day").to_pylist()}) == days
    # Both first runs raced to create the table: one created it, the other wrote to it.
    assert table.version == 5


@pytest.mark.slow
def test_sigkill_mid_stream_changes_nothing(tmp_path: Path) -> None:
    url = (tmp_path / "lake").as_uri()
    setup = _start(tmp_path, url, {}, "rows", ["2026-01-01", "2026-01-02", "snapshot"])
    out, _ = setup.communicate(timeout=240)
    assert setup.returncode == 0, out[-3000:]
    store = pds.open_store(url)
    table = pds.Table.open(store, "orders")
    before = table.to_arrow().sort_by([("day", "ascending"), ("n", "ascending")])
    snapshot = pds.ParquetDatasetStore(store).read_dataset("snapshot")
    for key in ("2026-01-01", "snapshot"):
        marker = tmp_path / f"marker-{key}"
        p = _start(tmp_path, url, {}, "hang", [key], str(marker))
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert p.poll() is None, p.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the job never reached the middle of its output"
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        assert p.returncode == -signal.SIGKILL
    assert table.refresh() == 1
    assert table.to_arrow().sort_by([("day", "ascending"), ("n", "ascending")]).equals(before)
    assert pds.ParquetDatasetStore(store).read_dataset("snapshot").equals(snapshot)
    assert isinstance(snapshot, pa.Table) and snapshot.num_rows == 7
