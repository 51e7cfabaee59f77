"""pds tables against deltalake and pyiceberg (sqlite catalog), on the same
data, in one run, on ``file://`` and on ``s3://`` (a SeaweedFS this script
starts; every tool talks to it through a pass-through proxy that counts the
HTTP requests of each operation).

Per store and table size (rows of ``id`` int64, ``customer`` string with
1,000 customers spread over every file, ``amount`` float64; files of 1M
rows), each tool:

- ``append``: appends of 1M rows (the table is built that way; median);
- ``scan``: a full scan, before any delete (median of 3);
- ``delete customer``: one customer's rows (0.1 %, in every file; median of 3
  customers);
- ``delete pk 1%``: a 1 % range of ``id`` (pds declares ``id`` its primary key;
  median of 5 ranges);
- ``scan after 10%``: a full scan after deleting 10 % of rows (scattered:
  100 customers; median of 3), as a ratio to the scan before;
- ``time travel``: a full read of the version before the deletes;
- ``8 appenders``: 8 threads appending 5 x 10k rows each at once; commits
  that landed, and commits per second;
- ``upsert 1%``: 1 % of the rows by ``id``, scattered, half of them new
  keys (pds ``Table.upsert``, deltalake ``merge`` with
  ``when_matched_update_all().when_not_matched_insert_all()``, pyiceberg
  ``upsert(df, join_cols=["id"])``), one run.

Every read is checked (row counts against the truth). Prints a Markdown
table and writes it to ``--out``::

    python benches/table_compare.py                       # 1M and 8M rows, file and s3
    python benches/table_compare.py --rows 1000000 --stores file --tools pds,delta
    python benches/table_compare.py --scale-files 100000   # plus 100,000-file tables (table_scale.py)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime as dt
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benches"))
sys.path.insert(0, str(REPO / "tests"))

from machine import git_state  # noqa: E402

import pds  # noqa: E402

from latency_proxy import LatencyProxy  # noqa: E402

FILE_ROWS = 1_000_000
CUSTOMERS = 1000
BUCKET = "pds-table-bench"


def chunk(start: int, n: int) -> pa.Table:
    """Rows start..start+n: id, customer (id * 7919 % 1000: every file holds every customer), amount."""
    ids = np.arange(start, start + n, dtype=np.int64)
    customers = (ids * 7919) % CUSTOMERS
    names = np.char.add("c", customers.astype(str))
    return pa.table(
        {
            "id": pa.array(ids),
            "customer": pa.array(names.tolist(), pa.string()),
            "amount": pa.array(ids.astype(np.float64) / 100.0),
        }
    )


class Where:
    """A store location for one tool: file directory or S3 prefix (via the counting proxy)."""

    def __init__(self, kind: str, root: Path, endpoint: str = "", creds: dict[str, str] | None = None) -> None:
        self.kind = kind
        self.root = root
        self.endpoint = endpoint
        self.creds = creds or {}


class Tool:
    name = ""

    def __init__(self, where: Where, key: str) -> None:
        self.where = where
        self.key = key

    def create(self, first: pa.Table) -> None:
        raise NotImplementedError

    def append(self, data: pa.Table) -> None:
        raise NotImplementedError

    def scan_rows(self, version: int | None = None) -> int:
        raise NotImplementedError

    def delete(self, column: str, lo: Any, hi: Any | None = None, values: list[str] | None = None) -> None:
        raise NotImplementedError

    def version(self) -> int:
        raise NotImplementedError

    def upsert(self, data: pa.Table) -> None:
        """Replace the rows of *data*'s ids, insert the rest."""
        raise NotImplementedError

    def concurrent_append(self, data: pa.Table) -> bool:
        """One append from a thread (its own handle); False if it gave up."""
        raise NotImplementedError


class PdsTool(Tool):
    name = "pds"

    def _url(self) -> tuple[str, dict[str, str]]:
        if self.where.kind == "file":
            return (self.where.root / "pds").as_uri(), {}
        return f"s3://{BUCKET}/pds", {**self.where.creds, "endpoint": self.where.endpoint}

    def create(self, first: pa.Table) -> None:
        url, opts = self._url()
        self.t = pds.Table.create(
            url, self.key, data=first, primary_key="id", target_file_size=256 * 1024 * 1024, **opts
        )

    def append(self, data: pa.Table) -> None:
        self.t.append(data)

    def scan_rows(self, version: int | None = None) -> int:
        self.t.refresh()
        return sum(b.num_rows for b in self.t.scan(version=version))

    def delete(self, column: str, lo: Any, hi: Any | None = None, values: list[str] | None = None) -> None:
        if values is not None:
            self.t.delete([(column, "in", values)])
        elif hi is None:
            self.t.delete([(column, "==", lo)])
        else:
            self.t.delete([(column, ">=", lo), (column, "<", hi)])

    def version(self) -> int:
        return self.t.refresh()

    def upsert(self, data: pa.Table) -> None:
        self.t.refresh()
        self.t.upsert(data)

    def concurrent_append(self, data: pa.Table) -> bool:
        url, opts = self._url()
        pds.Table.open(url, self.key, **opts).append(data)
        return True


class DeltaTool(Tool):
    name = "deltalake"

    def _uri(self) -> tuple[str, dict[str, str] | None]:
        if self.where.kind == "file":
            return str(self.where.root / "delta" / self.key), None
        return f"s3://{BUCKET}/delta/{self.key}", {
            "AWS_ENDPOINT_URL": self.where.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": self.where.creds["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": self.where.creds["secret_access_key"],
            "AWS_REGION": self.where.creds.get("region", "us-east-1"),
            "conditional_put": "etag",
        }

    def _write(self, data: pa.Table, mode: str) -> None:
        from deltalake import write_deltalake

        uri, opts = self._uri()
        write_deltalake(uri, data, mode=mode, storage_options=opts)

    def create(self, first: pa.Table) -> None:
        self._write(first, "error")

    def append(self, data: pa.Table) -> None:
        self._write(data, "append")

    def _dt(self, version: int | None = None) -> Any:
        from deltalake import DeltaTable

        uri, opts = self._uri()
        return DeltaTable(uri, storage_options=opts, version=version)

    def scan_rows(self, version: int | None = None) -> int:
        return sum(b.num_rows for b in self._dt(version).to_pyarrow_dataset().to_batches())

    def delete(self, column: str, lo: Any, hi: Any | None = None, values: list[str] | None = None) -> None:
        if values is not None:
            self._dt().delete(f"{column} IN ({', '.join(repr(v) for v in values)})")
        elif hi is None:
            self._dt().delete(f"{column} = {lo!r}")
        else:
            self._dt().delete(f"{column} >= {lo} AND {column} < {hi}")

    def version(self) -> int:
        return int(self._dt().version())

    def upsert(self, data: pa.Table) -> None:
        (
            self._dt()
            .merge(source=data, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    def concurrent_append(self, data: pa.Table) -> bool:
        self._write(data, "append")
        return True


class IcebergTool(Tool):
    name = "pyiceberg"

    def _catalog(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        props: dict[str, str] = {"uri": f"sqlite:///{self.where.root / 'iceberg.db'}"}
        if self.where.kind == "file":
            props["warehouse"] = (self.where.root / "iceberg").as_uri()
        else:
            props.update(
                {
                    "warehouse": f"s3://{BUCKET}/iceberg",
                    "s3.endpoint": self.where.endpoint,
                    "s3.access-key-id": self.where.creds["access_key_id"],
                    "s3.secret-access-key": self.where.creds["secret_access_key"],
                    "s3.region": self.where.creds.get("region", "us-east-1"),
                }
            )
        return SqlCatalog("bench", **props)

    def _table(self) -> Any:
        return self._catalog().load_table(f"bench.{self.key}")

    def create(self, first: pa.Table) -> None:
        cat = self._catalog()
        with contextlib.suppress(Exception):
            cat.create_namespace("bench")
        self.t = cat.create_table(f"bench.{self.key}", schema=first.schema)
        self.t.append(first)
        self.snapshots = [self.t.current_snapshot().snapshot_id]

    def append(self, data: pa.Table) -> None:
        self.t.append(data)
        self.snapshots.append(self.t.current_snapshot().snapshot_id)

    def scan_rows(self, version: int | None = None) -> int:
        t = self._table()
        snap = None if version is None else self.snapshots[version]
        return sum(b.num_rows for b in t.scan(snapshot_id=snap).to_arrow_batch_reader())

    def delete(self, column: str, lo: Any, hi: Any | None = None, values: list[str] | None = None) -> None:
        from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, LessThan

        t = self._table()
        if values is not None:
            t.delete(In(column, values))
        elif hi is None:
            t.delete(EqualTo(column, lo))
        else:
            t.delete(And(GreaterThanOrEqual(column, lo), LessThan(column, hi)))
        self.t = self._table()
        self.snapshots.append(self.t.current_snapshot().snapshot_id)

    def version(self) -> int:
        return len(self.snapshots) - 1

    def upsert(self, data: pa.Table) -> None:
        self._table().upsert(data, join_cols=["id"])

    def concurrent_append(self, data: pa.Table) -> bool:
        from pyiceberg.exceptions import CommitFailedException

        try:
            self._table().append(data)
            return True
        except CommitFailedException:
            return False


TOOLS: dict[str, type[Tool]] = {"pds": PdsTool, "deltalake": DeltaTool, "pyiceberg": IcebergTool}


class Counter:
    """HTTP requests through the proxy during one operation (S3 only)."""

    def __init__(self, proxy: LatencyProxy | None) -> None:
        self.proxy = proxy

    @contextlib.contextmanager
    def count(self, into: dict[str, str], name: str) -> Iterator[None]:
        trace = self.proxy.stats.trace if self.proxy else None
        start = len(trace) if trace is not None else 0
        yield
        if trace is None:
            return
        time.sleep(0.05)
        lines = [line for _, _, line in trace[start:] if line != "(new connection)"]
        by = {m: sum(1 for line in lines if line.startswith(m + " ")) for m in ("GET", "HEAD", "PUT", "POST", "DELETE")}
        into[name] = " ".join(f"{n} {m}" for m, n in by.items() if n)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run_tool(cls: type[Tool], where: Where, rows: int, counter: Counter, log: Callable[[str], None]) -> dict[str, Any]:
    tool = cls(where, f"t{rows}")
    res: dict[str, Any] = {"requests": {}}
    appends = []
    for start in range(0, rows, FILE_ROWS):
        data = chunk(start, min(FILE_ROWS, rows - start))
        if start == 0:
            tool.create(data)
        else:
            with counter.count(res["requests"], "append"):
                s, _ = timed(lambda d=data: tool.append(d))
            appends.append(s)
    res["append"] = statistics.median(appends) if appends else None
    before = tool.version()

    def scans() -> tuple[float, int]:
        runs = [timed(tool.scan_rows) for _ in range(3)]
        return statistics.median(r[0] for r in runs), runs[0][1]

    res["scan"], n = scans()
    assert n == rows, (cls.name, n, rows)
    # The small deletes, repeated on other customers / key ranges: the median.
    times = []
    for i, c in enumerate(("c42", "c43", "c44")):
        with counter.count(res["requests"] if i == 0 else {}, "delete customer"):
            s, _ = timed(lambda c=c: tool.delete("customer", c))
        times.append(s)
    res["delete customer"] = statistics.median(times)
    times = []
    for i in range(5):
        lo = rows // 2 + i * (rows // 100)
        with counter.count(res["requests"] if i == 0 else {}, "delete pk 1%"):
            s, _ = timed(lambda lo=lo: tool.delete("id", lo, lo + rows // 100))
        times.append(s)
    res["delete pk 1%"] = statistics.median(times)
    after_small = rows - 3 * rows // CUSTOMERS - 5 * rows // 100
    _, n = timed(tool.scan_rows)
    assert abs(n - after_small) <= 3 * rows // 1000, (cls.name, n, after_small)
    ten = [f"c{i}" for i in range(100, 200)]
    res["delete 10%"], _ = timed(lambda: tool.delete("customer", None, values=ten))
    res["scan after 10%"], n = scans()
    assert n < after_small, (cls.name, n)
    res["scan ratio"] = res["scan after 10%"] / res["scan"]
    res["time travel"], n = timed(lambda: tool.scan_rows(before))
    assert n == rows, (cls.name, "time travel", n)
    # 8 appenders at once, 5 appends of 10k rows each.
    small = chunk(10**10, 10_000)

    def attempt(_: int) -> bool:
        try:
            return tool.concurrent_append(small)
        except Exception as e:  # noqa: BLE001 - a commit that gave up is counted, not fatal
            log(f"    {cls.name} concurrent append gave up: {type(e).__name__}: {str(e)[:80]}")
            return False

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        landed = list(pool.map(attempt, range(40)))
    wall = time.perf_counter() - t0
    res["8 appenders"] = f"{sum(landed)}/40 landed, {sum(landed) / wall:.1f} commits/s"
    # Upsert 1 % of the rows: scattered ids, half of them new.
    _, live = timed(tool.scan_rows)
    rng = np.random.default_rng(rows)
    old = rng.choice(rows, size=rows // 200, replace=False)
    new = np.arange(2 * 10**10, 2 * 10**10 + rows // 200)
    ids = np.concatenate([old, new]).astype(np.int64)
    upserted = pa.table(
        {
            "id": pa.array(ids),
            "customer": pa.array([f"u{i % CUSTOMERS}" for i in ids.tolist()], pa.string()),
            "amount": pa.array(ids.astype(np.float64)),
        }
    )
    with counter.count(res["requests"], "upsert 1%"):
        res["upsert 1%"], _ = timed(lambda: tool.upsert(upserted))
    _, n = timed(tool.scan_rows)
    # The sampled old ids some earlier delete removed are inserted again.
    assert live + len(new) <= n <= live + len(ids), (cls.name, "upsert", n, live)
    log(f"  {cls.name} {rows:,}: " + ", ".join(f"{k} {v:.2f}s" for k, v in res.items() if isinstance(v, float)))
    return res


def _seaweed() -> Any:
    import seaweed

    return seaweed


def counted_seaweed(stack: contextlib.ExitStack, tmp: Path, bucket: str) -> tuple[dict[str, str], LatencyProxy, str]:
    """A SeaweedFS in *tmp* with *bucket*, and a request-counting proxy in
    front of it, both stopped with *stack*: the server's own store options,
    the proxy, and the proxy's endpoint."""
    sw = _seaweed().SeaweedFS(_seaweed().find_weed(), str(tmp / "weed"))
    sw.start()
    stack.callback(sw.stop)
    sw.create_bucket(bucket)
    opts = sw.store_options()
    host, port = opts["endpoint"].removeprefix("http://").split(":")
    proxy = LatencyProxy(host, int(port), delay_ms=0, model_handshake=False, trace=True)
    endpoint = f"http://127.0.0.1:{proxy.start_in_thread()}"
    stack.callback(proxy.stop)
    return opts, proxy, endpoint


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000000,8000000")
    ap.add_argument("--stores", default="file,s3")
    ap.add_argument("--tools", default="pds,deltalake,pyiceberg")
    ap.add_argument("--out", default=str(REPO / "benches" / "table_results.md"))
    ap.add_argument(
        "--scale-files",
        type=int,
        default=0,
        help="also run benches/table_scale.py with tables of this many files (memory and file stores)",
    )
    args = ap.parse_args(argv)
    sizes = [int(r) for r in args.rows.split(",")]
    tools = [TOOLS[t] for t in args.tools.split(",")]

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    results: dict[tuple[str, int, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="pds-table-bench-") as tmp:
        for store in args.stores.split(","):
            with contextlib.ExitStack() as stack:
                proxy = None
                endpoint = ""
                creds: dict[str, str] = {}
                if store == "s3":
                    opts, proxy, endpoint = counted_seaweed(stack, Path(tmp), BUCKET)
                    creds = {k: v for k, v in opts.items() if k != "endpoint"}
                for rows in sizes:
                    for cls in tools:
                        root = Path(tmp) / f"{store}-{rows}-{cls.name}"
                        root.mkdir()
                        where = Where(store, root, endpoint, creds)
                        log(f"{store} {rows:,} rows: {cls.name}")
                        try:
                            results[(store, rows, cls.name)] = run_tool(cls, where, rows, Counter(proxy), log)
                        except Exception as e:  # noqa: BLE001 - a tool's failure is reported, not fatal
                            log(f"  {cls.name} failed: {type(e).__name__}: {e}")
                            results[(store, rows, cls.name)] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
                        shutil.rmtree(root, ignore_errors=True)
    report = render(results, sizes, [c.name for c in tools], args)
    if args.scale_files:
        import table_scale

        scaled = {kind: table_scale.run_store(kind, args.scale_files, 15, log) for kind in ("memory", "file")}
        report += "\n" + table_scale.render(scaled, args.scale_files, 15)
    Path(args.out).write_text(report)
    print(report)
    return 0


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def render(results: dict[tuple[str, int, str], dict[str, Any]], sizes: list[int], tools: list[str], args: Any) -> str:
    metrics = [
        "append",
        "scan",
        "delete customer",
        "delete pk 1%",
        "scan after 10%",
        "scan ratio",
        "time travel",
        "8 appenders",
        "upsert 1%",
    ]
    lines = [
        "# pds tables vs deltalake and pyiceberg",
        "",
        f"Command: `python benches/table_compare.py --rows {args.rows} --stores {args.stores} --tools {args.tools}`",
        f"Run: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
        f"{__import__('os').cpu_count()} cores, {git_state(REPO)}",
        "Times in seconds: appends, scans and small deletes are medians, the rest one run each;",
        "`scan ratio` = scan after deleting 10 % / scan before.",
        "",
    ]
    for store in args.stores.split(","):
        for rows in sizes:
            lines += [
                f"## {store}, {rows:,} rows",
                "",
                "| | " + " | ".join(tools) + " |",
                "|---" * (len(tools) + 1) + "|",
            ]
            for m in metrics:
                cells = []
                for t in tools:
                    r = results.get((store, rows, t), {})
                    cells.append(r["error"] if "error" in r and m == "append" else _fmt(r.get(m)))
                lines.append(f"| {m} | " + " | ".join(cells) + " |")
            if store == "s3":
                for op in ("append", "delete customer", "delete pk 1%", "upsert 1%"):
                    cells = [results.get((store, rows, t), {}).get("requests", {}).get(op, "n/a") for t in tools]
                    lines.append(f"| requests: {op} | " + " | ".join(cells) + " |")
            lines.append("")
    # The ratio targets.
    lines += ["## Targets", ""]
    for store in args.stores.split(","):
        big = max(sizes)
        p = results.get((store, big, "pds"), {})
        for t in ("deltalake", "pyiceberg"):
            o = results.get((store, big, t), {})
            for m in ("append", "delete customer", "delete pk 1%", "upsert 1%"):
                if isinstance(p.get(m), float) and isinstance(o.get(m), float):
                    lines.append(f"- {store}, {big:,} rows, {m}: pds is {o[m] / p[m]:.1f}x faster than {t}")
        if len(sizes) > 1:
            small = results.get((store, min(sizes), "pds"), {})
            if isinstance(small.get("delete pk 1%"), float) and isinstance(p.get("delete pk 1%"), float):
                lines.append(
                    f"- {store}: pds pk-range delete {max(sizes):,} / {min(sizes):,} rows = "
                    f"{p['delete pk 1%'] / small['delete pk 1%']:.2f} (target <= 1.5)"
                )
        if isinstance(p.get("scan ratio"), float):
            lines.append(f"- {store}: pds scan after 10% deleted / before = {p['scan ratio']:.2f} (target <= 1.15)")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
