"""The external sort alone: pds vs DuckDB, each in a fresh process (issue P).

Reuses ``producers_compare``'s data and its ``measure_sort`` (a pds source
load within ``sort_budget`` against DuckDB's ``ORDER BY`` to Parquet with the
same ``memory_limit``; peak RSS sampled every 20 ms)::

    python benches/sort_compare.py                      # 10M rows, 256 MiB
    python benches/sort_compare.py --rows 1000000 --budget-mib 64 --tools pds
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from producers_compare import measure_sort, write_events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--budget-mib", type=int, default=256)
    ap.add_argument("--tools", default="pds,duckdb")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pds-sort-compare-"))
    try:
        src = tmp / "events.parquet"
        write_events(src, args.rows, args.rows // 10, seed=1)
        budget = args.budget_mib << 20
        print(f"load: {os.getloadavg()[0]:.2f}; {args.rows:,} rows, budget {args.budget_mib} MiB", flush=True)
        for _ in range(args.repeat):
            for tool in args.tools.split(","):
                work = tmp / f"sort-{tool}"
                seconds, rss = measure_sort(tool, src, work, budget)
                shutil.rmtree(work, ignore_errors=True)
                print(f"{tool}: {seconds:.2f} s, peak RSS {rss:.0f} MiB", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
