"""Round trips of a dataset read (issue G, item 1), counted on a real
SeaweedFS through the proxy (tests/fault_proxy.py), which delays every
request so that requests in flight together overlap in time.

The sequential depth of a read is the longest chain of requests each of
which started after the one before it had its reply: 5 for a committed pds
dataset (the manifest, ``_SUCCESS``, the manifest's HEAD: the manifest as it
was while ``_SUCCESS`` was there; the footers, the column chunks), whatever
the number of parts.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

import pds

DELAY = 0.12
"""Seconds added to every request: far more than the scheduling jitter
between requests sent together, so overlap and sequence are unambiguous."""


class Timed:
    """Start and end of every request through the proxy."""

    def __init__(self, proxy: Any) -> None:
        self.lock = threading.Lock()
        self.spans: list[tuple[float, float, str, str, str | None]] = []
        self.starts: dict[int, float] = {}
        proxy.observe(None, r".", before=self._before, after=self._after)

    def _before(self, entry: Any) -> None:
        with self.lock:
            self.starts[id(entry)] = time.monotonic()
        time.sleep(DELAY)

    def _after(self, entry: Any) -> None:
        end = time.monotonic()
        with self.lock:
            start = self.starts.pop(id(entry))
            self.spans.append((start, end, entry.method, entry.path, entry.byte_range))

    def clear(self) -> None:
        with self.lock:
            self.spans.clear()

    def show(self) -> str:
        t0 = min((s[0] for s in self.spans), default=0.0)
        return "\n".join(
            f"{a - t0:6.3f}-{b - t0:6.3f} {m} {p.rsplit('/', 2)[-2:]} {r}" for a, b, m, p, r in sorted(self.spans)
        )

    def depth(self) -> int:
        """The longest chain of requests, each sent after the last one's reply."""
        spans = sorted(self.spans)
        chain = [0] * len(spans)
        for i, (start, _, *_) in enumerate(spans):
            chain[i] = 1 + max((chain[j] for j in range(i) if spans[j][1] <= start), default=0)
        return max(chain, default=0)


def _table(rows: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([f"n{i % 97}" for i in range(rows)]),
            "x": pa.array([i * 0.5 for i in range(rows)], pa.float64()),
        }
    )


@pytest.mark.spec("G-1")
def test_a_read_takes_five_round_trips_and_a_second_one_four(faulty: Any) -> None:
    """Four parts of two row groups each: 5 round trips cold, 4 warm (3 of
    them the committed manifest's)."""
    table = _table(4_000)
    # Two row groups per part: the second is fetched with the first.
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=1_000, row_group_size=500)
    manifest = ds.write_dataset(table, "d")
    assert len(manifest.parts) == 4 and manifest.part_info is not None
    footers = {p.name: p.footer_bytes for p in manifest.part_info}
    assert all(p.footer_bytes is not None and 12 <= p.footer_bytes < p.size_bytes for p in manifest.part_info)

    timed = Timed(faulty.proxy)
    reader = pds.ParquetDatasetStore(faulty.open())  # a new handle: nothing cached
    assert reader.read_dataset("d").equals(table)
    assert timed.depth() == 5, timed.show()
    spans = list(timed.spans)
    # No part is HEADed: its footer GET is its existence check, one GET of
    # exactly the size the manifest records.
    assert not [s for s in spans if s[2] == "HEAD" and s[3].endswith(".parquet")]
    for name, size in footers.items():
        tails = [
            s
            for s in spans
            if s[3].endswith(f"/d/{name}")
            and s[4] == f"bytes={_size(manifest, name) - size}-{_size(manifest, name) - 1}"
        ]
        assert len(tails) == 1, (name, [s for s in spans if s[3].endswith(name)])
        # Its two row groups' chunks: one GET each, none fetched twice.
        assert len([s for s in spans if s[3].endswith(f"/d/{name}")]) == 3, timed.show()

    # The same handle again: the footers come from its cache. A cached
    # footer is no existence check: each part gets one HEAD, sent with its
    # chunk GETs, not before them.
    timed.clear()
    assert reader.read_dataset("d", columns=["x"]).equals(table.select(["x"]))
    assert timed.depth() == 4, timed.show()
    heads = sorted(s[3].rsplit("/", 1)[-1] for s in timed.spans if s[2] == "HEAD" and s[3].endswith(".parquet"))
    assert heads == sorted(footers), timed.show()

    # A streaming scan: the same four round trips to open (every part's
    # footer is fetched before it returns), then the parts' chunks as it
    # decodes them, as many parts at once as there are cores (its memory
    # stays bounded).
    timed.clear()
    fresh = pds.ParquetDatasetStore(faulty.open())
    assert pa.Table.from_batches(list(fresh.iter_batches("d"))).equals(table)
    cores = max(2, os.cpu_count() or 2)
    assert timed.depth() == 4 + math.ceil(4 / cores), timed.show()


def _size(manifest: Any, name: str) -> int:
    return next(p.size_bytes for p in manifest.part_info if p.name == name)


@pytest.mark.spec("G-1")
def test_missing_parts_are_all_named_without_a_head_first(faulty: Any) -> None:
    table = _table(3_000)
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=1_000)
    ds.write_dataset(table, "d")
    faulty.direct.delete("d/part-00000.parquet")
    faulty.direct.delete("d/part-00002.parquet")
    for read in (
        lambda s: s.read_dataset("d"),
        lambda s: list(s.iter_batches("d")),
    ):
        with pytest.raises(pds.DatasetIncomplete, match=r"missing 2 of 3 parts: .part-00000.parquet., .part-00002"):
            read(pds.ParquetDatasetStore(faulty.open()))


@pytest.mark.spec("G-1")
def test_a_wrong_footer_hint_costs_a_get_never_a_wrong_read(faulty: Any) -> None:
    """A manifest whose footer sizes are wrong (too small, as pyarrow's own
    footer without page indexes can be) still reads right: the reader asks
    for more."""
    table = _table(2_000)
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=1_000)
    manifest = ds.write_dataset(table, "d")
    assert manifest.part_info is not None
    data = json.loads(faulty.direct.read_bytes("d/manifest.json").decode())
    for p in data["part_info"]:
        p["footer_bytes"] = 12
    faulty.direct.write("d/manifest.json", json.dumps(data, sort_keys=True, indent=2).encode(), overwrite=True)
    assert pds.ParquetDatasetStore(faulty.open()).read_dataset("d").equals(table)
    # One beyond the part's size is refused as corruption, before any part is read.
    for p in data["part_info"]:
        p["footer_bytes"] = p["size_bytes"] + 1
    faulty.direct.write("d/manifest.json", json.dumps(data, sort_keys=True, indent=2).encode(), overwrite=True)
    with pytest.raises(pds.ManifestCorrupted, match="footer"):
        pds.ParquetDatasetStore(faulty.open()).read_dataset("d")


@pytest.mark.spec("G-1")
def test_remote_store_manifests_without_part_info_still_read(faulty: Any) -> None:
    """No sizes and no schema recorded: one HEAD per part and the first
    part's footer for the schema come before the footers, as before (7)."""
    from remote_store.ext.parquet import ParquetDatasetStore as RemoteStoreDatasets

    table = _table(2_000)
    RemoteStoreDatasets(faulty.direct).write_dataset(table, "r")
    timed = Timed(faulty.proxy)
    assert pds.ParquetDatasetStore(faulty.open()).read_dataset("r").equals(table)
    assert timed.depth() == 7, timed.show()


@pytest.mark.spec("G-1")
@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_part_replaced_under_a_warm_footer_cache_is_corruption(kind: str, tmp_path: Any) -> None:
    """The cache keys a footer by the part's recorded SHA-256: a part replaced
    behind an unchanged manifest is refused (its chunk checksums), by the
    handle that cached the old footer and by a new one alike."""
    store = pds.open_store("memory://" if kind == "memory" else (tmp_path / "lake").as_uri())
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=1_000)
    table = _table(2_000)
    ds.write_dataset(table, "d")
    assert ds.read_dataset("d").equals(table)  # warms the cache
    other = table.set_column(2, "x", pa.array([-1.0] * 2_000, pa.float64()))
    ds.write_dataset(other, "e")
    store.write("d/part-00001.parquet", store.read_bytes("e/part-00001.parquet"), overwrite=True)
    for reader in (ds, pds.ParquetDatasetStore(store)):
        with pytest.raises(pds.PartCorrupted, match="part-00001"):
            reader.read_dataset("d")
        with pytest.raises(pds.PartCorrupted, match="part-00001"):
            pa.Table.from_batches(list(reader.iter_batches("d")))


@pytest.mark.spec("G-1")
def test_a_part_deleted_under_a_warm_footer_cache_is_reported(tmp_path: Any) -> None:
    """A footer from the handle's cache does not stand for the part: a part
    deleted since is named even by a read that fetches none of its chunks
    (every row group pruned by the filter)."""
    store = pds.open_store((tmp_path / "lake").as_uri())
    ds = pds.ParquetDatasetStore(store, max_rows_per_file=1_000)
    table = _table(3_000)
    ds.write_dataset(table, "d")
    assert ds.read_dataset("d").equals(table)  # warms the cache
    store.delete("d/part-00001.parquet")
    only_first = [("id", "<", 10)]
    for read in (
        lambda: ds.read_dataset("d", filter=only_first),
        lambda: list(ds.iter_batches("d", filter=only_first)),
    ):
        with pytest.raises(pds.DatasetIncomplete, match=r"missing 1 of 3 parts: .part-00001.parquet."):
            read()


@pytest.mark.spec("G-1")
def test_a_filtered_read_takes_no_more_round_trips(faulty: Any) -> None:
    """Filter tuples are made exact against the schema the manifest records:
    that manifest, read as committed (with ``_SUCCESS``), is the one the read
    uses, not read a second time."""
    table = _table(4_000)
    pds.ParquetDatasetStore(faulty.store, max_rows_per_file=1_000).write_dataset(table, "d")
    expected = table.filter(pa.compute.less(table["id"], 1_500))
    # 6 round trips: the manifest, _SUCCESS, the manifest's HEAD; the footers; then, for the
    # 2 parts that can match, the filter column's chunks, and the other
    # columns' chunks for the rows that passed (the decoder's row filter).
    for read, depth in (
        (lambda s: s.read_dataset("d", filter=[("id", "<", 1_500)]), 6),
        (lambda s: pa.Table.from_batches(list(s.iter_batches("d", filter=[("id", "<", 1_500)]))), 6),
    ):
        timed = Timed(faulty.proxy)
        assert read(pds.ParquetDatasetStore(faulty.open())).equals(expected)
        manifests = [s for s in timed.spans if s[2] == "GET" and s[3].endswith("/d/manifest.json")]
        assert len(manifests) == 1, timed.show()
        assert timed.depth() == depth, timed.show()
        faulty.proxy.clear()
    # Errors are those of an unfiltered read: no _SUCCESS is DatasetIncomplete.
    faulty.direct.delete("d/_SUCCESS")
    with pytest.raises(pds.DatasetIncomplete):
        pds.ParquetDatasetStore(faulty.open()).read_dataset("d", filter=[("id", "<", 1_500)])
