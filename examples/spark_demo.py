"""The main job as a Spark pipeline on ``local[2]``: generate orders, write them
as a pds dataset, read them back with a filter and a projection, print the
manifest and the counts.

    python examples/spark_demo.py                  # a local folder: ./demo-data (file://)
    python examples/spark_demo.py --rows 100000
    python examples/spark_demo.py --store s3://bucket/prefix \\
        --option endpoint=http://127.0.0.1:8333 --option region=us-east-1 \\
        --option access_key_id=... --option secret_access_key=...

The data source is used by name (``format("pds")``, found through the
``pyspark_pds`` module); ``pds.spark.read_dataset`` gives the same rows.
Spark's console progress bar shows long stages; each step prints its time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import pds
import pds.spark
from pds.spark.filters import filters_to_json

# PySpark 4.3 warns on pandas 3 on every Arrow UDF/data source call; not ours to fix here.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
COUNTRIES = ["DE", "FR", "NL", "US", "JP", "BR"]
BASE_TS_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
DAY_US = 86_400_000_000


def orders(spark: SparkSession, rows: int, partitions: int, seed: int = 7) -> DataFrame:
    """*rows* deterministic orders: order_id, ts (one day of 2026, UTC), country, amount, customer."""
    ids = F.col("id")
    bucket = F.pmod(F.xxhash64(ids, F.lit(seed)), F.lit(len(COUNTRIES))).cast("int") + 1
    return spark.range(0, rows, numPartitions=partitions).select(
        ids.alias("order_id"),
        F.timestamp_micros(F.lit(BASE_TS_US) + F.pmod(F.xxhash64(ids, F.lit(seed + 1)), F.lit(DAY_US))).alias("ts"),
        F.element_at(F.array(*[F.lit(c) for c in COUNTRIES]), bucket).alias("country"),
        # Roughly exponential amounts with a mean of 60, in cents.
        F.round(-F.log1p(-F.rand(seed + 2)) * 60.0, 2).alias("amount"),
        F.format_string("c%07d", F.pmod(F.xxhash64(ids, F.lit(seed + 3)), F.lit(200_000))).alias("customer"),
    )


@contextlib.contextmanager
def stage(number: int, total: int, title: str) -> Iterator[None]:
    """Print a stage line before and after the block, with its time."""
    print(f"[{number}/{total}] {title} ...", flush=True)
    start = time.perf_counter()
    yield
    print(f"[{number}/{total}] {title}: done in {time.perf_counter() - start:.2f}s", flush=True)


def parse_options(items: list[str]) -> dict[str, str]:
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--option wants KEY=VALUE, got {item!r}")
        options[key] = value
    return options


def shown_manifest(text: str) -> str:
    """The manifest JSON with its base64 ``arrow_schema`` shortened."""
    doc = json.loads(text)
    schema = doc.get("arrow_schema")
    if isinstance(schema, str) and len(schema) > 32:
        doc["arrow_schema"] = f"{schema[:24]}... ({len(schema)} chars)"
    return json.dumps(doc, indent=2, sort_keys=True)


def main() -> None:
    default = (Path(__file__).resolve().parent.parent / "demo-data").as_uri()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default=default, help=f"store URL (default: {default})")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="store option, repeatable")
    p.add_argument("--rows", type=int, default=2_000_000, help="orders to generate (default: 2,000,000)")
    p.add_argument("--partitions", type=int, default=4, help="Spark partitions = write tasks (default: 4)")
    p.add_argument("--max-rows-per-file", type=int, default=250_000, help="rows per part (default: 250,000)")
    p.add_argument("--key", default="silver/orders", help="dataset key (default: silver/orders)")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()
    options = parse_options(args.option)
    url = args.store.rstrip("/")

    # Executors run this interpreter (the venv's), whatever python is on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    total = 5
    print(f"pds Spark demo: {args.rows:,} orders -> {url} key {args.key!r} on {args.master}", flush=True)
    with stage(1, total, "start Spark"):
        spark = (
            SparkSession.builder.master(args.master)
            .appName("pds-spark-demo")
            .config("spark.ui.showConsoleProgress", "true")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "2g")
            # No per-row Arrow size estimate when Spark hands batches to the pds writer (README: Spark).
            .config("spark.sql.execution.arrow.maxBytesPerBatch", "2147483647")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
    try:
        df = orders(spark, args.rows, args.partitions)
        df.printSchema()

        with stage(2, total, f"write {args.rows:,} orders with format('pds')"):
            (
                df.write.format("pds")
                .option("store", url)
                .options(**options)
                .option("compression", "zstd")
                .option("max_rows_per_file", args.max_rows_per_file)
                .option("run_id", "spark-demo")
                .option("metadata", json.dumps({"source": "examples/spark_demo.py"}))
                .mode("overwrite")
                .save(args.key)
            )

        with stage(3, total, "read the manifest"):
            store = pds.ParquetDatasetStore(pds.open_store(url, **options))
            manifest = store.read_manifest(args.key)
        print(f"wrote {manifest.row_count:,} rows as {len(manifest.parts)} parts to {url}/{args.key}")
        if manifest.row_count != args.rows:
            raise SystemExit(f"expected {args.rows:,} rows in the manifest, found {manifest.row_count:,}")

        with stage(4, total, "count orders per country (projection: country)"):
            everything = spark.read.format("pds").option("store", url).options(**options).load(args.key)
            per_country = {
                r["country"]: r["count"]
                for r in everything.select("country").groupBy("country").count().orderBy("country").collect()
            }
        read_back = sum(per_country.values())

        filters = [("country", "in", ["DE", "FR"]), ("amount", ">=", 100.0)]
        columns = ["order_id", "country", "amount"]
        with stage(5, total, f"read with filter {filters} and projection {columns}"):
            filtered = (
                spark.read.format("pds")
                .option("store", url)
                .options(**options)
                .option("columns", json.dumps(columns))
                .option("filters", filters_to_json(filters))
                .load(args.key)
            )
            agg = filtered.groupBy("country").agg(F.count("*").alias("orders"), F.sum("amount").alias("amount"))
            filtered_rows = {r["country"]: (r["orders"], r["amount"]) for r in agg.orderBy("country").collect()}
            # The mapInArrow-era helper reads the same rows.
            helper = pds.spark.read_dataset(spark, url, args.key, columns=columns, filter=filters, **options)
            helper_count = helper.count()
            if url.startswith("file://"):  # Spark's own Parquet reader over the manifest's parts
                native = pds.spark.read_dataset(spark, url, args.key, columns=columns, filter=filters, engine="spark")
                if native.count() != helper_count:
                    raise SystemExit("engine='spark' and engine='pds' disagree")
        n_filtered = sum(n for n, _ in filtered_rows.values())

        print()
        print(f"rows written (manifest):     {manifest.row_count:>12,}")
        print(f"rows read back (Spark):      {read_back:>12,}")
        print(f"rows after filter:           {n_filtered:>12,}  (pds.spark.read_dataset: {helper_count:,})")
        print("per country:   all orders   filtered   filtered amount")
        for country in sorted(per_country):
            n, amount = filtered_rows.get(country, (0, 0.0))
            print(f"  {country}:       {per_country[country]:>10,} {n:>10,}   {amount or 0.0:>15,.2f}")
        print("manifest.json:")
        print(shown_manifest(manifest.to_json()))
        filtered.orderBy("order_id").show(5)  # every task runs to its end: no early-closed Python workers
        if read_back != manifest.row_count or helper_count != n_filtered:
            raise SystemExit("row counts disagree")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
