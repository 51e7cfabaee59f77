"""Round trips of a table snapshot read (issue G, item 1), counted on a real
SeaweedFS through the proxy, as in tests/datasets/test_dataset_round_trips.py.

Opening a table takes 2 (the pointer; then the manifest it names, with a
HEAD of the next version's name). A scan of the opened version then takes,
in a process that has not read the table before: its segments; its
tombstones together with the footers of the files it reads; the column
chunks, one round per ``cores`` files. The version's root is not read again:
the handle keeps the manifests it has read (a version's manifest is never
replaced).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from test_dataset_round_trips import Timed, _table

import pds

WRITER = """
import json, sys
import pyarrow as pa
import pds
url, options, files = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
t = None
for i in range(files):
    rows = pa.table({
        "id": pa.array(range(i * 1000, i * 1000 + 1000), pa.int64()),
        "name": pa.array([f"n{j % 97}" for j in range(1000)]),
        "x": pa.array([j * 0.5 for j in range(1000)], pa.float64()),
    })
    if t is None:
        t = pds.Table.create(pds.open_store(url, **options), "t", schema=rows.schema)
    t.append(rows)
t.delete([("id", "<", 10)])
"""


def _write_elsewhere(faulty: Any, files: int) -> pa.Table:
    """A table of *files* files and one tombstone, written by another process
    (so that this one has none of its objects cached); its rows."""
    subprocess.run(
        [sys.executable, "-c", WRITER, faulty.url, json.dumps(faulty.direct_options), str(files)],
        check=True,
        timeout=120,
    )
    parts = []
    for i in range(files):
        rows = _table(1000).set_column(0, "id", pa.array(range(i * 1000, i * 1000 + 1000), pa.int64()))
        parts.append(rows)
    return pa.concat_tables(parts).filter(pa.compute.greater_equal(pa.concat_tables(parts)["id"], 10))


def _name(span: tuple[float, float, str, str, str | None]) -> str:
    return span[3].rsplit("/", 2)[-2]


@pytest.mark.spec("G-1")
def test_a_snapshot_scan_takes_three_round_trips_in_a_new_process(faulty: Any) -> None:
    # One round of chunk fetches; footers are fetched 32 at once on S3.
    cores = min(max(2, os.cpu_count() or 2), 32)
    expected = _write_elsewhere(faulty, cores)

    timed = Timed(faulty.proxy)
    table = pds.Table.open(faulty.open(), "t")
    assert timed.depth() == 2, timed.show()

    timed.clear()
    assert table.to_arrow().sort_by("id").equals(expected)
    assert timed.depth() == 3, timed.show()
    spans = sorted(timed.spans)
    # The root is not read again; the segments come first, then the
    # tombstone and every file's footer (one suffix GET each) together.
    assert not [s for s in spans if _name(s) == "manifest"], timed.show()
    segments = [s for s in spans if _name(s) == "segment"]
    tombstones = [s for s in spans if _name(s) == "tombstone"]
    data = [s for s in spans if _name(s) == "data"]
    assert segments and len(tombstones) == 1, timed.show()
    footers = [s for s in data if s[0] < min(d[1] for d in data)]
    assert len(footers) == cores, timed.show()
    second_round = footers + tombstones
    assert max(s[1] for s in segments) <= min(s[0] for s in second_round), timed.show()
    assert max(s[0] for s in second_round) < min(s[1] for s in second_round), timed.show()

    # Again on the same handle: the footers and tombstone are cached, so
    # only the chunks are fetched.
    timed.clear()
    assert table.to_arrow().sort_by("id").equals(expected)
    assert timed.depth() == 1, timed.show()
    assert {_name(s) for s in timed.spans} == {"data"}, timed.show()


@pytest.mark.spec("G-1")
def test_footers_are_fetched_ahead_of_their_files_turns(faulty: Any) -> None:
    """More files than cores: every footer is fetched in the first round,
    and the chunks follow one round per ``cores`` files."""
    cores = max(2, os.cpu_count() or 2)
    files = 2 * min(cores, 16)  # within the 32 footers fetched at once on S3
    expected = _write_elsewhere(faulty, files)
    table = pds.Table.open(faulty.open(), "t")
    table.files()  # reads the segments: only footers and chunks remain
    timed = Timed(faulty.proxy)
    assert table.to_arrow().sort_by("id").equals(expected)
    assert timed.depth() == 1 + math.ceil(files / cores), timed.show()
    data = sorted(s for s in timed.spans if _name(s) == "data")
    first_end = min(s[1] for s in timed.spans)
    assert len([s for s in data if s[0] < first_end]) == files, timed.show()


@pytest.mark.spec("G-1")
def test_a_manifest_replaced_through_the_handle_is_read_afresh(tmp_path: Any) -> None:
    """The handle keeps a version's manifest, but forgets it when a write
    or delete through the same handle touches its key: a damaged manifest
    is reported, and a vacuumed version is gone, not served from memory."""
    store = pds.open_store((tmp_path / "lake").as_uri())
    rows = _table(100)
    t = pds.Table.create(store, "t", schema=rows.schema)
    t.append(rows)
    t.append(rows)
    assert t.to_arrow(version=1).num_rows == 100  # caches version 1's manifest
    key = "t/manifest/v00000001.json"
    good = store.read_bytes(key)
    store.write(key, b"{not json", overwrite=True)
    with pytest.raises(pds.ManifestCorrupted):
        t.to_arrow(version=1)
    store.write(key, good, overwrite=True)
    assert t.to_arrow(version=1).num_rows == 100
    store.delete(key)
    with pytest.raises(pds.NotFound):
        t.to_arrow(version=1)
