"""One peak-RSS measurement, run by compare.py in a fresh process.

Protocol on stdout (one line each; the parent samples this process's RSS):

1. ``READY``: imports done, store and tool built, the input stream created
   (nothing generated yet). The parent takes the baseline RSS now.
2. The parent writes ``GO`` on stdin; the child writes the stream.
3. ``DONE {"seconds": ...}``: the write returned. The parent stops sampling.
4. ``ROWS {"rows": ..., "arrow_bytes": ...}``: rows found in the written
   dataset, counted through the tool after sampling; then the dataset is deleted.

Instead of READY or DONE it may print ``NA reason`` or ``ERROR message``.

Usage: ``python benches/rss_child.py '<json spec>'`` with keys tool, store
(a StoreSpec as a dict), layout (a Layout as a dict), rows, seed, key, data
("mixed" or "numeric", see bench_data).
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from collections.abc import Iterator

import pyarrow as pa
from bench_data import stream_reader
from bench_tools import Layout, NotApplicable, StoreSpec, make_tool


def _counting(reader: pa.RecordBatchReader, total: list[int]) -> pa.RecordBatchReader:
    """*reader*, adding each batch's Arrow size to total[0] as it passes."""

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            total[0] += batch.nbytes
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    store = StoreSpec(**spec["store"])
    layout = Layout(**spec["layout"])
    try:
        tool = make_tool(spec["tool"], store, layout)
    except NotApplicable as exc:
        print(f"NA {exc}", flush=True)
        return 0
    generated = [0]
    reader = _counting(stream_reader(int(spec["rows"]), int(spec["seed"]), spec.get("data", "mixed")), generated)
    gc.collect()
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        return 1
    t0 = time.perf_counter()
    try:
        tool.write(reader, spec["key"])
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it
        traceback.print_exc()
        print(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " ")[:500], flush=True)
        return 1
    print("DONE " + json.dumps({"seconds": time.perf_counter() - t0}), flush=True)
    rows = tool.count_rows(spec["key"])
    tool.delete(spec["key"])
    print("ROWS " + json.dumps({"rows": rows, "arrow_bytes": generated[0]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
