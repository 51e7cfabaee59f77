"""The write engines under benches/dagster_compare.py, without Dagster.

One fresh process per call: PARTS partitions of ROWS rows (the same generator
and batches as dagster_compare.py) written as the two IO managers write them,
and the median time, CPU seconds (all threads) and peak RSS above the RSS
before the first write. Variants:

- ``pds``: ``Table.replace([("day", "==", day)], reader)`` on a table created
  empty (zstd, pds's default); ``pds-snappy``: the table created with
  ``compression="snappy"``; ``pds-append``: ``Table.append``;
- ``deltalake``: ``write_deltalake(mode="overwrite", partition_by=["day"],
  predicate="day = '<day>'")`` as dagster-deltalake calls it (snappy);
  ``deltalake-zstd``: the same with ``WriterProperties(compression="ZSTD")``;
- ``pyarrow-zstd``: ``pyarrow.parquet.write_table`` of the partition (read
  whole), zstd: a reference for the codec's cost;
- ``drain``: the generator alone.

Usage: ``python benches/dagster_breakdown.py VARIANT [--rows 1000000]
[--parts 8]``; for every variant and a few sizes: ``--all``. Run
``perf record -g`` on it to see where a variant's CPU goes.
"""

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from dagster_compare import SCHEMA, START, _reset_peak, _status, batches

VARIANTS = ("drain", "pds", "pds-snappy", "pds-append", "deltalake", "deltalake-zstd", "pyarrow-zstd")


def run(variant: str, root: str, rows: int, parts: int) -> dict[str, object]:
    """Write *parts* partitions with *variant* under *root*, in this process."""
    table = None
    if variant.startswith("pds"):
        from pds import Table

        codec = "snappy" if variant == "pds-snappy" else "zstd"
        table = Table.create(Path(root).as_uri(), "orders", schema=SCHEMA, compression=codec)
    elif variant.startswith("deltalake"):
        from deltalake import WriterProperties, write_deltalake

        props = WriterProperties(compression="ZSTD") if variant == "deltalake-zstd" else None
    wall, cpu = [], []
    base = _status("VmRSS")
    _reset_peak()
    for i in range(parts):
        day = START + datetime.timedelta(days=i)
        reader = pa.RecordBatchReader.from_batches(SCHEMA, batches(i, 0, rows, 65_536))
        t0, c0 = time.perf_counter(), time.process_time()
        if table is not None and variant == "pds-append":
            table.append(reader)
        elif table is not None:
            table.replace([("day", "==", day)], reader)
        elif variant.startswith("deltalake"):
            predicate = None if i == 0 else f"day = '{day}'"
            write_deltalake(
                root, reader, mode="overwrite", partition_by=["day"], predicate=predicate, writer_properties=props
            )
        elif variant == "pyarrow-zstd":
            import pyarrow.parquet as pq

            pq.write_table(reader.read_all(), f"{root}/{i}.parquet", compression="zstd")
        else:
            sum(b.num_rows for b in reader)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {
        "variant": variant,
        "rows": rows,
        "seconds": round(statistics.median(wall), 3),
        "cpu_seconds": round(statistics.median(cpu), 3),
        "first_seconds": round(wall[0], 3),
        "peak_above_base_mib": (_status("VmHWM") - base) >> 20,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("variant", nargs="?", choices=VARIANTS)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--all", action="store_true", help="every variant at 1M and 8M rows, one process each")
    args = ap.parse_args()
    if args.all:
        for rows, parts in ((1_000_000, 8), (8_000_000, 3)):
            for variant in VARIANTS:
                cmd = [sys.executable, __file__, variant, "--rows", str(rows), "--parts", str(parts)]
                subprocess.run(cmd, check=True)
        return
    if args.variant is None:
        ap.error("give a variant or --all")
    with tempfile.TemporaryDirectory(prefix="pds-dagster-breakdown-") as tmp:
        print(json.dumps(run(args.variant, tmp, args.rows, args.parts)), flush=True)


if __name__ == "__main__":
    main()
