"""The cost of publishing a table's Delta Lake view, and reading it back.

Two pds tables with the same rows (``id`` int64, ``customer`` string with
1,000 customers spread over every file, ``amount`` float64; files of 1M
rows), one created with ``formats=["delta"]``, on ``file://`` and on
``s3://`` (a SeaweedFS this script starts, behind a pass-through proxy that
counts requests). Rep by rep, alternating which table goes first:

- ``append``: 100,000 rows (one new data file);
- ``scattered delete``: one customer's rows (0.1 %, in every file: every
  file gets a new deletion vector).

Per operation: the median time, the bytes the operation added or rewrote
under the table key (a listing before and after), and on S3 the requests.
Then the same full scan through pds (``Table.to_arrow``) and through
deltalake's query engine (``QueryBuilder``, deletion vectors applied), rep
by rep, rows checked equal; and the view's first checkpoint
(``enable_format`` on the plain table). Prints a Markdown table and writes
it to ``--out``::

    python benches/delta_view.py                          # 4M rows, file and s3, 7 reps
    python benches/delta_view.py --rows 1000000 --stores file --reps 3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benches"))
sys.path.insert(0, str(REPO / "tests"))

from machine import git_state  # noqa: E402
from table_compare import FILE_ROWS, Counter, chunk, counted_seaweed  # noqa: E402

import pds  # noqa: E402

BUCKET = "pds-delta-bench"
APPEND_ROWS = 100_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def objects(store: Any, key: str) -> dict[str, tuple[int, Any]]:
    """Every object under *key*: size and modification time, by path."""
    return {str(f.path): (f.size, f.modified_at) for f in store.list_files(key, recursive=True)}


def written(before: dict[str, tuple[int, Any]], after: dict[str, tuple[int, Any]]) -> int:
    """Bytes of the objects that are new or rewritten in *after*."""
    return sum(size for path, (size, when) in after.items() if before.get(path, (None, None))[1] != when)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def run_store(kind: str, rows: int, reps: int, tmp: Path) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        if kind == "file":
            url, opts, delta_opts, proxy = (tmp / "lake").as_uri(), {}, {}, None
            table_url = str(tmp / "lake" / "view")
        else:
            raw, proxy, endpoint = counted_seaweed(stack, tmp, BUCKET)
            url, opts = f"s3://{BUCKET}/lake", {**raw, "endpoint": endpoint}
            table_url = f"{url}/view"  # the same bucket and key, either endpoint
            delta_opts = {  # straight to the server: deltalake's client and the counting proxy disagree
                "AWS_ENDPOINT_URL": raw["endpoint"],
                "AWS_REGION": raw["region"],
                "AWS_ACCESS_KEY_ID": raw["access_key_id"],
                "AWS_SECRET_ACCESS_KEY": raw["secret_access_key"],
                "AWS_ALLOW_HTTP": "true",
            }
        store = pds.open_store(url, **opts)
        counter = Counter(proxy)
        tables: dict[str, pds.Table] = {}
        for name, formats in (("plain", []), ("view", ["delta"])):
            log(f"{kind}: building {name} ({rows:,} rows)")
            for start in range(0, rows, FILE_ROWS):
                data = chunk(start, min(FILE_ROWS, rows - start))
                if start == 0:
                    tables[name] = pds.Table.create(
                        url, name, data=data, primary_key="id", target_file_size=256 * 1024 * 1024,
                        formats=formats, **opts,
                    )  # fmt: skip
                else:
                    tables[name].append(data)
        out: dict[str, Any] = {"requests": {}}
        nxt = rows
        for rep in range(reps):
            order = ["plain", "view"] if rep % 2 == 0 else ["view", "plain"]
            for op in ("append", "scattered delete"):
                for name in order:
                    t = tables[name]
                    before = objects(store, name)
                    requests: dict[str, str] = {}
                    with counter.count(requests, "r"):
                        t0 = time.perf_counter()
                        if op == "append":
                            t.append(chunk(nxt, APPEND_ROWS))
                        else:
                            t.delete([("customer", "==", f"c{rep}")])
                        took = time.perf_counter() - t0
                    out.setdefault((op, name, "s"), []).append(took)
                    out.setdefault((op, name, "bytes"), []).append(written(before, objects(store, name)))
                    if "r" in requests:
                        out["requests"][(op, name)] = requests["r"]
                if op == "append":
                    nxt += APPEND_ROWS
            log(f"{kind} rep {rep}: " + ", ".join(f"{k[0]} {k[1]} {v[-1]:.3f}s" for k, v in out.items()
                                                  if isinstance(k, tuple) and k[2] == "s"))  # fmt: skip
        view = tables["view"]
        view.refresh()
        want = view.to_arrow().num_rows
        for rep in range(reps):
            for tool in ["pds", "deltalake"] if rep % 2 == 0 else ["deltalake", "pds"]:
                t0 = time.perf_counter()
                if tool == "pds":
                    n = view.to_arrow().num_rows
                else:
                    dtab = deltalake.DeltaTable(table_url, storage_options=delta_opts)
                    got = deltalake.QueryBuilder().register("t", dtab).execute("select * from t").read_all()
                    n = pa.table(got).num_rows
                out.setdefault(("scan", tool, "s"), []).append(time.perf_counter() - t0)
                assert n == want, (tool, n, want)
        plain = tables["plain"]
        before = objects(store, "plain")
        requests = {}
        with counter.count(requests, "r"):
            t0 = time.perf_counter()
            plain.enable_format("delta")
            out["enable"] = time.perf_counter() - t0
        out["enable bytes"] = written(before, objects(store, "plain"))
        out["enable requests"] = requests.get("r", "")
        out["scan rows"] = want
        return out


def render(results: dict[str, dict[str, Any]], args: Any) -> str:
    lines = [
        "# Publishing the Delta Lake view",
        "",
        f"Command: `python benches/delta_view.py --rows {args.rows} --stores {args.stores} --reps {args.reps}`",
        f"Run: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{os.cpu_count()} cores{git_state(REPO)}",
        f"Medians of {args.reps} reps, the two tables alternating. Bytes: what the operation wrote under "
        "the table key.",
        "",
    ]
    for kind, res in results.items():
        lines += [
            f"## {kind}, {args.rows:,} rows",
            "",
            "| | without the view | with the view | overhead |",
            "|---|---|---|---|",
        ]
        for op in ("append", "scattered delete"):
            a, b = median(res[(op, "plain", "s")]), median(res[(op, "view", "s")])
            ab, bb = median(res[(op, "plain", "bytes")]), median(res[(op, "view", "bytes")])
            lines.append(f"| {op}: time | {a:.3f} s | {b:.3f} s | {100 * (b - a) / a:+.0f} % |")
            lines.append(f"| {op}: bytes | {ab:,.0f} | {bb:,.0f} | {bb - ab:+,.0f} |")
            if res["requests"]:
                lines.append(
                    f"| {op}: requests (last rep) | {res['requests'].get((op, 'plain'), '')} "
                    f"| {res['requests'].get((op, 'view'), '')} | |"
                )
        p, d = median(res[("scan", "pds", "s")]), median(res[("scan", "deltalake", "s")])
        lines += [
            "",
            f"Full scan of the view table after the deletes ({res['scan rows']:,} rows): "
            f"pds {p:.3f} s, deltalake QueryBuilder {d:.3f} s ({d / p:.2f}x pds).",
            "",
            f"First checkpoint (`enable_format` on the plain table, {args.reps} deletes in every file): "
            f"{res['enable']:.3f} s, {res['enable bytes']:,} bytes"
            + (f", {res['enable requests']}" if res["enable requests"] else "")
            + ".",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--stores", default="file,s3")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=str(REPO / "benches" / "delta_view_results.md"))
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    for kind in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix="pds-delta-bench-") as tmp:
            results[kind] = run_store(kind, args.rows, args.reps, Path(tmp))
    report = render(results, args)
    Path(args.out).write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
