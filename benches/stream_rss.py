"""Peak RSS of a 2 GiB streaming write into large parts, pds against
pyarrow.dataset: 64 batches of 1,048,576 rows of four random columns (two
int64, two float64; 32 MiB each), ``max_rows_per_file`` 16,777,216 (four
parts of 512 MiB), row groups of 1,048,576 rows, zstd, to a local folder.
Each write runs in a fresh process; the tools take turns rep by rep. The
figure is peak RSS (sampled every 10 ms) above the process's RSS after its
imports, with the write's duration.

    python benches/stream_rss.py [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, shutil, sys, tempfile, threading, time
import numpy as np, psutil, pyarrow as pa, pyarrow.dataset as pads
import pds
tool = sys.argv[1]
schema = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.float64()), ("d", pa.float64())])
def batches():
    rng = np.random.default_rng(1)
    for _ in range(64):
        n = 1 << 20
        yield pa.record_batch([pa.array(rng.integers(0, 1 << 62, n)), pa.array(rng.integers(0, 1 << 62, n)),
                               pa.array(rng.random(n)), pa.array(rng.random(n))], schema=schema)
root = tempfile.mkdtemp()
reader = pa.RecordBatchReader.from_batches(schema, batches())
me = psutil.Process()
base = me.memory_info().rss
peak = [base]
stop = threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], me.memory_info().rss)
        stop.wait(0.01)
sampler = threading.Thread(target=sample)
sampler.start()
t0 = time.perf_counter()
if tool == "pds":
    ds = pds.ParquetDatasetStore(pds.open_store(f"file://{root}"), compression="zstd",
                                 row_group_size=1 << 20, max_rows_per_file=1 << 24)
    ds.write_dataset(reader, "ds")
else:
    pads.write_dataset(reader, f"{root}/ds", format="parquet", max_rows_per_file=1 << 24,
                       max_rows_per_group=1 << 20, min_rows_per_group=1 << 20,
                       file_options=pads.ParquetFileFormat().make_write_options(compression="zstd"))
seconds = time.perf_counter() - t0
stop.set()
sampler.join()
shutil.rmtree(root)
print(json.dumps({"mib": (peak[0] - base) / 2**20, "seconds": seconds}))
"""

TOOLS = ("pds", "pyarrow")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    got: dict[str, list[dict[str, float]]] = {t: [] for t in TOOLS}
    for rep in range(args.reps):
        for tool in TOOLS if rep % 2 == 0 else reversed(TOOLS):
            out = subprocess.run([sys.executable, "-c", CHILD, tool], check=True, capture_output=True, text=True)
            got[tool].append(json.loads(out.stdout))
            print(f"rep {rep + 1} {tool:<8} +{got[tool][-1]['mib']:.0f} MiB ({got[tool][-1]['seconds']:.1f} s)")
    print(f"\n`python benches/stream_rss.py --reps {args.reps}`, median of {args.reps}:\n")
    print("| tool | peak RSS over baseline | seconds |\n|---|---:|---:|")
    for tool in TOOLS:
        mib = statistics.median(r["mib"] for r in got[tool])
        sec = statistics.median(r["seconds"] for r in got[tool])
        print(f"| {tool} | +{mib:.0f} MiB | {sec:.1f} |")


if __name__ == "__main__":
    main()
