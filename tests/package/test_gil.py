"""Long pds calls release the GIL: another Python thread keeps running during them."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from remote_store import Store

import pds


def _ticks_during(call) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """Run *call*; count a ticker thread's iterations in the middle half of it."""
    ticks: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.05)
    start = time.perf_counter()
    call()
    end = time.perf_counter()
    stop.set()
    t.join()
    q = (end - start) / 4
    return sum(1 for x in ticks if start + q <= x <= end - q), end - start


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_write_and_read_release_the_gil(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = "memory://" if kind == "memory" else tmp_path.as_uri()
    store: Store = pds.open_store(url)
    ds = pds.ParquetDatasetStore(store, compression="gzip")
    table = pa.table(
        {"v": pa.array(range(3_000_000), pa.int64()), "s": pa.array([str(i % 1000) for i in range(3_000_000)])}
    )
    ticks, took = _ticks_during(lambda: ds.write_dataset(table, "g"))
    assert took > 0.1, "the call was too short to tell"
    assert ticks >= 5, f"ticker ran {ticks} times in the middle of a {took:.2f}s write"
    ticks, took = _ticks_during(lambda: ds.read_dataset("g", verify=True))
    assert took > 0.05
    assert ticks >= 3, f"ticker ran {ticks} times in the middle of a {took:.2f}s read"
