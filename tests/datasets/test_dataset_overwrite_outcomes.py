"""The outcome of an atomic overwrite when the store fails around its
manifest swap: a swap that committed is never taken back or left pointing
at deleted parts, whatever fails after it. SeaweedFS behind the fault
proxy."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from store_kinds import Faulty

import pds


def _rows(tag: int, n: int) -> pa.Table:
    return pa.table({"tag": pa.array([tag] * n, pa.int64()), "x": pa.array(range(n), pa.int64())})


def _read(store: Any) -> pa.Table:
    return pds.ParquetDatasetStore(store).read_dataset("ds").sort_by("x")


def test_a_swap_whose_outcome_cannot_be_read_back_keeps_its_parts(faulty: Faulty) -> None:
    """The swap is applied but its reply lost, its retry is refused (the
    manifest is already this write's), and the manifest cannot be read back
    to tell: the write fails, but the parts the committed manifest lists
    stay, so the dataset reads whole (the new rows)."""
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=1_000)
    ds.write_dataset(_rows(1, 2_500), "ds")
    faulty.proxy.clear()

    def fail_reads(_: Any) -> None:
        faulty.proxy.fail("GET", r"/ds/manifest\.json$", status=503, times=None)

    faulty.proxy.drop_reply("PUT", r"/ds/manifest\.json$", times=1, after=fail_reads)
    new = _rows(2, 3_000)
    with pytest.raises(Exception):  # noqa: B017 - the outcome is unknown; which error is the store's
        ds.write_dataset(new, "ds", overwrite=True)
    puts = faulty.proxy.requests("PUT", r"/ds/manifest\.json$")
    assert puts and puts[0].action == "drop_reply", puts
    faulty.proxy.clear()
    assert _read(faulty.direct).equals(new)


def test_a_failed_list_after_the_swap_keeps_the_commit(faulty: Faulty) -> None:
    """The LIST that checks the parts after the swap fails: the swap is
    committed (readers may have read it), so the write succeeds and the new
    rows stay; the old parts are left for a later overwrite."""
    ds = pds.ParquetDatasetStore(faulty.store, max_rows_per_file=1_000)
    ds.write_dataset(_rows(1, 2_500), "ds")
    faulty.proxy.clear()

    def fail_lists(_: Any) -> None:
        faulty.proxy.fail("GET", r".", query="list-type", status=503, times=None)

    faulty.proxy.observe("PUT", r"/ds/manifest\.json$", after=fail_lists, times=1)
    new = _rows(2, 3_000)
    written = ds.write_dataset(new, "ds", overwrite=True)
    assert faulty.proxy.requests("GET", None, action="fail"), "no LIST failed"
    faulty.proxy.clear()
    assert _read(faulty.direct).equals(new)
    assert pds.ParquetDatasetStore(faulty.direct).read_manifest("ds").parts == written.parts
    # The next overwrite removes what the skipped cleanup left.
    again = _rows(3, 1_500)
    last = ds.write_dataset(again, "ds", overwrite=True)
    assert _read(faulty.direct).equals(again)
    names = sorted(f.name for f in faulty.direct.list_files("ds"))
    assert names == sorted([*last.parts, "_SUCCESS", "manifest.json"])
