"""Memory of a long-lived writer: one process appends one row N times to one
table on a local folder and prints its RSS every ``--every`` appends.

A writer that runs for days must level off: its caches are bounded (the
store handle's object cache, the process-wide segment and tombstone caches).
RSS that keeps growing between the later steps is a leak.

Usage::

    PYTHONPATH=python .venv/bin/python benches/long_writer.py [N] [--every 500] [--dir PATH]

Prints one line per step: appends done, RSS in MiB, seconds since the
start, and (when the build has ``RustStore.cache_usage``) the entries and
MiB each cache holds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import psutil
import pyarrow as pa

import pds
from pds.backend import native_handle


def _usage(handle: Any) -> str:
    """The caches' entries and MiB, if this build can tell them."""
    usage: Any = getattr(handle, "cache_usage", None)
    if usage is None:
        return ""
    return "  " + "  ".join(
        f"{name}={entries}/{size / 2**20:.1f}MiB" for name, (entries, size) in sorted(usage().items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=8000, help="appends (default 8000)")
    parser.add_argument("--every", type=int, default=500, help="print every this many appends")
    parser.add_argument("--dir", default=None, help="folder for the table (default: a temporary one)")
    args = parser.parse_args()
    proc = psutil.Process()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        store = pds.open_store("file://" + folder)
        schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("value", pa.float64())])
        table = pds.Table.create(store, "t", schema)
        handle = native_handle(store)
        start = time.monotonic()
        print(f"appends=0 rss={proc.memory_info().rss / 2**20:.1f}MiB{_usage(handle)}", flush=True)
        for i in range(1, args.n + 1):
            row = pa.table({"id": [i], "name": [f"row-{i}"], "value": [i * 0.5]}, schema=schema)
            table.append(row)
            if i % args.every == 0 or i == args.n:
                rss = proc.memory_info().rss / 2**20
                took = time.monotonic() - start
                print(f"appends={i} rss={rss:.1f}MiB t={took:.1f}s{_usage(handle)}", flush=True)
        assert table.version == args.n, (table.version, args.n)
        print(f"pid={os.getpid()} version={table.version}", flush=True)


if __name__ == "__main__":
    main()
