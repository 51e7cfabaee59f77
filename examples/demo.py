"""A Spark-free job in plain Python: write orders as a pds dataset, read them
back with a projection and a filter, stream them, print the manifest.

``make demo`` runs the main job on Spark (``examples/spark_demo.py``); this is
the smaller one that needs no Java:

    make demo-python                      # a local folder: ./demo-data
    make demo-python DEMO_ARGS="--store s3://bucket/prefix --option endpoint=http://... --option region=..."
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import pds


def orders(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "order_id": pa.array(np.arange(rows, dtype=np.int64)),
            "ts": pa.array(1_767_225_600_000_000 + rng.integers(0, 86_400_000_000, rows), pa.timestamp("us", tz="UTC")),
            "country": pa.array(rng.choice(["DE", "FR", "NL", "US", "JP", "BR"], rows)),
            "amount": pa.array(rng.gamma(2.0, 30.0, rows).round(2)),
            "customer": pa.array([f"c{n:07d}" for n in rng.integers(0, 200_000, rows)]),
        }
    )


def main() -> None:
    default = (Path(__file__).resolve().parent.parent / "demo-data").as_uri()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default=default, help=f"store URL (default: {default})")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="store option, repeatable")
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--key", default="silver/orders")
    args = p.parse_args()
    options = dict(o.split("=", 1) for o in args.option)

    store = pds.open_store(args.store, **options)
    ds = pds.ParquetDatasetStore(store, compression="zstd", max_rows_per_file=500_000)
    table = orders(args.rows)

    start = time.perf_counter()
    manifest = ds.write_dataset(table, args.key, overwrite=True, run_id="demo", metadata={"source": "examples/demo.py"})
    wrote = time.perf_counter() - start
    print(
        f"wrote {manifest.row_count:,} rows as {len(manifest.parts)} parts to {args.store}/{args.key} in {wrote:.2f}s"
    )

    start = time.perf_counter()
    back = ds.read_dataset(args.key, columns=["country", "amount"], verify=True)
    read = time.perf_counter() - start
    print(f"read {back.num_rows:,} rows x {back.num_columns} columns (projection, checksums verified) in {read:.2f}s")
    totals = back.group_by("country").aggregate([("amount", "sum")]).sort_by("country")
    for country, amount in zip(totals["country"].to_pylist(), totals["amount_sum"].to_pylist(), strict=True):
        print(f"  {country}: {amount:,.2f}")
    start = time.perf_counter()
    big = ds.read_dataset(args.key, columns=["order_id", "amount"], filter=[("amount", ">=", 200.0)])
    print(f"filtered read: {big.num_rows:,} orders of at least 200.00 in {time.perf_counter() - start:.2f}s")
    start = time.perf_counter()
    streamed = sum(b.num_rows for b in ds.iter_batches(args.key, columns=["order_id"], batch_size=100_000))
    print(f"streamed {streamed:,} rows in batches of 100,000 in {time.perf_counter() - start:.2f}s")
    print(f"schema from the manifest alone: {ds.read_schema(args.key).names}")
    print("manifest.json:")
    shown = manifest.to_json()
    if manifest.arrow_schema:
        shown = shown.replace(manifest.arrow_schema, manifest.arrow_schema[:24] + "...")
    print(shown)


if __name__ == "__main__":
    main()
