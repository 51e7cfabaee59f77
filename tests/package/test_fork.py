"""A process forked after pds has run (as Spark's Python workers and
``multiprocessing``'s fork start method are) gets working threads of its
own: neither the I/O runtime's nor the encoders' and sorts' CPU pool's
threads survive a fork, and reusing the parent's would hang the child."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import pds

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def rows(n: int) -> pa.Table:
    return pa.table({"k": pa.array([i % 97 for i in range(n)], pa.int64()), "v": [float(i) for i in range(n)]})


def work(root: Path, tag: str) -> None:
    """A dataset write and read (encoders on the CPU pool, I/O on the
    runtime), a table append, and a pipeline update (its sort and gather)."""
    store = pds.open_store(root.as_uri())
    ds = pds.ParquetDatasetStore(store)
    ds.write_dataset(rows(300_000), f"ds-{tag}")
    assert ds.read_dataset(f"ds-{tag}").num_rows == 300_000
    t = pds.Table.create(store, f"t-{tag}", data=rows(1_000))
    t.append(rows(2_000))
    assert t.to_arrow().num_rows == 3_000
    p = pds.Pipeline.create(store, f"p-{tag}")
    p.source("events", key={"k": pa.int64()}, value={"v": pa.float64()})
    p.update({"events": rows(200_000)})
    assert p.read("events").num_rows == 200_000


def test_a_forked_child_writes_reads_and_sorts_after_its_parent_did(tmp_path: Path) -> None:
    work(tmp_path, "parent")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by its exit code
        code = 1
        try:
            work(tmp_path, "child")
            code = 0
        except BaseException as e:  # noqa: BLE001 - any failure is the child's exit code
            print(f"child failed: {e!r}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung (threads of the parent's pools reused)")
    # The parent's pools still work.
    work(tmp_path, "parent-again")
