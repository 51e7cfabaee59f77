"""pds.dagster against dagster-deltalake on the same Dagster assets.

A daily-partitioned table asset ``orders`` (``day`` date32, ``order_id``
int64, ``amount`` float64): materialise PARTITIONS days of ROWS rows each,
one ``dagster.materialize`` run per day, then re-materialise the first REMAT
days with new amounts. The asset returns a ``pa.RecordBatchReader`` that
generates its rows batch by batch (a streamed output: no contender is handed
the whole partition). Contenders:

- ``pds``: ``pds.dagster.PdsIOManager`` with ``"pds/format": "table"`` and
  ``"partition_expr": "day"``: one ``Table.replace`` commit per partition
  (the table is created empty from the stream's schema by the first run);
- ``deltalake``: ``dagster_deltalake.DeltaLakePyarrowIOManager`` with
  ``"partition_expr": "day"``: ``write_deltalake(mode="overwrite",
  partition_by=["day"], predicate="day = '<key>'")`` (the first run creates
  the table with a plain overwrite); it takes a ``RecordBatchReader``;
- ``drain``: an IO manager that reads the stream and drops it: what Dagster
  and the data generator cost alone, to subtract;
- opt-in (``--tools``), each with the other's codec: ``pds-snappy`` (the
  table created beforehand with ``compression="snappy"``, deltalake's
  default) and ``deltalake-zstd`` (``writer_properties={"compression":
  "ZSTD"}``, level 1 as pds's default).

Every run is a fresh process (``--child``) on a fresh local folder, drain
first in each round, then the contenders, their order rotated every round
(two alternate: A B, B A, ...). Per run:
wall time of the whole process, of the build and of the re-materialisation
(and each Dagster step's own duration, which excludes the run's setup), the
kernel's peak RSS (VmHWM, reset between phases) of the build and of the
re-materialisation, the RSS after imports, the child's CPU seconds (wait4),
the load average before and after, the bytes on disk. Then another fresh
process reads the table back with the contender's own reader and checks
every day's row count, ``sum(order_id)`` and ``sum(amount)`` against the
generator's: a contender that drops, doubles or keeps stale rows fails.

Usage: ``python benches/dagster_compare.py [--partitions 30] [--rows 1000000]
[--remat 3] [--rounds 2]`` (``make compare-dagster``). The full size takes
several minutes and ~1 GB of disk per contender at a time (each run's data
is deleted after its check): try ``--partitions 3 --rows 10000 --remat 1
--rounds 1`` first. The report goes to ``--out``
(``benches/dagster_results.md``).
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
SCHEMA = pa.schema([("day", pa.date32()), ("order_id", pa.int64()), ("amount", pa.float64())])
START = datetime.date(2026, 1, 1)
TOOLS = ("drain", "pds", "deltalake", "pds-snappy", "deltalake-zstd")
DEFAULT_TOOLS = ("drain", "pds", "deltalake")


# -- the data: the same for every contender ----------------------------------


def batches(index: int, seed: int, rows: int, batch: int) -> Iterator[pa.RecordBatch]:
    """Day *index*'s rows for *seed*: order ids 0..rows-1, amounts uniform in
    [0, 1) from a generator seeded by (seed, index)."""
    rng = np.random.default_rng([seed, index])
    ordinal = (START - datetime.date(1970, 1, 1)).days + index
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        yield pa.record_batch(
            [
                pa.array(np.full(n, ordinal, np.int32), pa.int32()).cast(pa.date32()),
                pa.array(np.arange(start, start + n, dtype=np.int64)),
                pa.array(rng.random(n)),
            ],
            schema=SCHEMA,
        )


def expected(index: int, seed: int, rows: int, batch: int) -> tuple[int, int, float]:
    """(rows, sum(order_id), sum(amount)) of day *index* for *seed*."""
    total = 0.0
    for b in batches(index, seed, rows, batch):
        total += float(np.sum(b.column(2).to_numpy()))
    return rows, rows * (rows - 1) // 2, total


# -- the child: one contender, one run -----------------------------------------


def _status(field: str) -> int:
    """A ``/proc/self/status`` memory field, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> None:
    """Reset the kernel's peak RSS (VmHWM) of this process to its current RSS."""
    Path("/proc/self/clear_refs").write_text("5")


def child_run(tool: str, root: str, partitions: int, rows: int, remat: int, batch: int) -> dict[str, Any]:
    import dagster as dg

    meta: dict[str, Any] = {"partition_expr": "day"}
    io: Any
    if tool.startswith("pds"):
        from pds.dagster import PdsIOManager

        io = PdsIOManager(root_uri=Path(root).as_uri())
        meta["pds/format"] = "table"
        if tool == "pds-snappy":
            # deltalake's codec: the table created beforehand with it (the IO
            # manager writes to an existing table with the table's settings).
            from pds import Table

            Table.create(Path(root).as_uri(), "orders", schema=SCHEMA, compression="snappy")
    elif tool.startswith("deltalake"):
        from dagster_deltalake import DeltaLakePyarrowIOManager, LocalConfig

        # deltalake-zstd: pds's codec (zstd, at deltalake's default level 1, as pds's).
        props = {"compression": "ZSTD"} if tool == "deltalake-zstd" else None
        io = DeltaLakePyarrowIOManager(root_uri=root, storage_options=LocalConfig(), writer_properties=props)
    else:

        class Drain(dg.IOManager):
            def handle_output(self, context: dg.OutputContext, obj: pa.RecordBatchReader) -> None:
                n = sum(b.num_rows for b in obj)
                context.add_output_metadata({"dagster/row_count": n})

            def load_input(self, context: dg.InputContext) -> None:
                raise NotImplementedError

        io = Drain()

    daily = dg.DailyPartitionsDefinition(start_date=START.isoformat())
    keys = daily.get_partition_keys()[:partitions]

    @dg.asset(partitions_def=daily, metadata=meta)
    def orders(context: dg.AssetExecutionContext) -> pa.RecordBatchReader:
        index = keys.index(context.partition_key)
        seed = int(context.run.tags.get("seed", "0"))
        return pa.RecordBatchReader.from_batches(SCHEMA, batches(index, seed, rows, batch))

    def phase(days: list[str], seed: int) -> dict[str, Any]:
        _reset_peak()
        runs, steps = [], []
        t0 = time.perf_counter()
        for key in days:
            r0 = time.perf_counter()
            result = dg.materialize([orders], partition_key=key, resources={"io_manager": io}, tags={"seed": str(seed)})
            runs.append(time.perf_counter() - r0)
            assert result.success, key
            (success,) = [e for e in result.all_events if e.event_type_value == "STEP_SUCCESS"]
            steps.append(success.event_specific_data.duration_ms / 1000)
        return {"seconds": time.perf_counter() - t0, "runs": runs, "steps": steps, "peak_rss": _status("VmHWM")}

    base = _status("VmRSS")
    build = phase(keys, 0)
    again = phase(keys[:remat], 1)
    return {"base_rss": base, "build": build, "remat": again}


def child_verify(tool: str, root: str) -> dict[str, Any]:
    """Per day: [rows, sum(order_id), sum(amount)], read with the contender's own reader."""
    version: int | None = None
    if tool.startswith("pds"):
        from pds import Table

        table = Table.open(Path(root).as_uri(), "orders")
        reader = table.scan(columns=["day", "order_id", "amount"])
        version = table.version
    else:
        from deltalake import DeltaTable

        (log,) = list(Path(root).rglob("_delta_log"))
        delta = DeltaTable(str(log.parent))
        version = delta.version()
        reader = delta.to_pyarrow_dataset().scanner(columns=["day", "order_id", "amount"]).to_reader()
    days: dict[str, list[Any]] = {}
    for b in reader:
        grouped = (
            pa.Table.from_batches([b])
            .group_by("day")
            .aggregate([("order_id", "count"), ("order_id", "sum"), ("amount", "sum")])
        )
        cols = ("day", "order_id_count", "order_id_sum", "amount_sum")
        for day, n, ids, amount in zip(*(grouped.column(c).to_pylist() for c in cols), strict=True):
            acc = days.setdefault(day.isoformat(), [0, 0, 0.0])
            acc[0] += n
            acc[1] += ids
            acc[2] += amount
    return {"version": version, "days": days}


# -- the parent ------------------------------------------------------------------


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def disk(root: Path) -> tuple[int, int]:
    """(bytes allocated on disk, files) under *root*."""
    used = files = 0
    for p in root.rglob("*"):
        if p.is_file():
            used += p.stat().st_blocks * 512
            files += 1
    return used, files


def run_child(argv: list[str], env: dict[str, str]) -> tuple[dict[str, Any], float, Any]:
    """Run ``--child`` *argv* in a fresh process: (its JSON, wall seconds, its own rusage)."""
    with tempfile.TemporaryFile("w+") as errs:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", *argv],
            stdout=subprocess.PIPE,
            stderr=errs,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        # wait4: this child's own rusage (not the cumulative RUSAGE_CHILDREN).
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        errs.seek(0)
        err = errs.read()
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"child {argv[:2]} failed ({proc.returncode}):\n{err[-4000:]}")
    return json.loads(line[7:]), wall, usage


def check(tool: str, got: dict[str, Any], args: argparse.Namespace, want: list[tuple[int, int, float]]) -> str:
    """'' if the table read back holds exactly the expected rows, else what differs."""
    days = got["days"]
    problems = []
    names = [(START + datetime.timedelta(days=i)).isoformat() for i in range(args.partitions)]
    if sorted(days) != names:
        problems.append(f"days {sorted(days)[:3]}... != {names[:3]}...")
    for name, (n, ids, amount) in zip(names, want, strict=True):
        if name not in days:
            continue
        gn, gids, gamount = days[name]
        if gn != n or gids != ids or abs(gamount - amount) > 1e-6 * max(1.0, abs(amount)):
            problems.append(
                f"{name}: rows {gn} (want {n}), sum(order_id) {gids} (want {ids}), "
                f"sum(amount) {gamount:.6f} (want {amount:.6f})"
            )
    total = sum(v[0] for v in days.values())
    if total != args.partitions * args.rows:
        problems.append(f"{total} rows in all, want {args.partitions * args.rows}")
    return "; ".join(problems)


def one(tool: str, args: argparse.Namespace, workdir: Path, want: list[tuple[int, int, float]]) -> dict[str, Any]:
    root = workdir / f"{tool}-{time.monotonic_ns()}"
    root.mkdir()
    home = workdir / "dagster-home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    load0 = loadavg()
    spec = [tool, str(root), str(args.partitions), str(args.rows), str(args.remat), str(args.batch)]
    res, wall, usage = run_child(["run", *spec], env)
    load1 = loadavg()
    used, files = disk(root)
    row: dict[str, Any] = {
        "tool": tool,
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "wait4_maxrss": usage.ru_maxrss * 1024,
        "load_before": load0,
        "load_after": load1,
        "disk": used,
        "files": files,
        **res,
    }
    if tool != "drain":
        got, _, _ = run_child(["verify", tool, str(root)], env)
        row["version"] = got["version"]
        row["check"] = check(tool, got, args, want) or "ok"
    shutil.rmtree(root)
    return row


MIB = 1024 * 1024


def fmt_row(r: dict[str, Any]) -> str:
    b, m = r["build"], r["remat"]
    return (
        f"| {r['round']} | {r['tool']} | {r['wall']:.1f} | {b['seconds']:.1f} | {sum(b['steps']):.1f} | "
        f"{m['seconds']:.2f} | {sum(m['steps']):.2f} | {r['base_rss'] / MIB:.0f} | {b['peak_rss'] / MIB:.0f} | "
        f"{m['peak_rss'] / MIB:.0f} | {r['cpu']:.1f} | {r['disk'] / MIB:.0f} MiB, {r['files']} files | "
        f"{r.get('version', '')} | {r['load_before']} → {r['load_after']} | {r.get('check', '')} |"
    )


def report(rows: list[dict[str, Any]], args: argparse.Namespace, started: str, versions: dict[str, str]) -> str:
    med = {
        t: {
            "wall": statistics.median(r["wall"] for r in rs),
            "build": statistics.median(r["build"]["seconds"] for r in rs),
            "build_steps": statistics.median(sum(r["build"]["steps"]) for r in rs),
            "remat": statistics.median(r["remat"]["seconds"] for r in rs),
            "remat_steps": statistics.median(sum(r["remat"]["steps"]) for r in rs),
            "base_rss": statistics.median(r["base_rss"] for r in rs),
            "build_rss": statistics.median(r["build"]["peak_rss"] for r in rs),
            "remat_rss": statistics.median(r["remat"]["peak_rss"] for r in rs),
            "cpu": statistics.median(r["cpu"] for r in rs),
            "disk": statistics.median(r["disk"] for r in rs),
        }
        for t in TOOLS
        if (rs := [r for r in rows if r["tool"] == t])
    }
    so = REPO / "python" / "pds" / "_core.abi3.so"
    so_id = hashlib.md5(so.read_bytes()).hexdigest()[:12] if so.exists() else "?"
    cmd = (
        f"python benches/dagster_compare.py --partitions {args.partitions} --rows {args.rows} "
        f"--remat {args.remat} --rounds {args.rounds}"
        + ("" if args.tools == ",".join(DEFAULT_TOOLS) else f" --tools {args.tools}")
    )
    lines = [
        "# pds.dagster vs dagster-deltalake",
        "",
        f"Command: `{cmd}`",
        f"Run: {started} UTC, {platform.machine()}, {os.cpu_count()} cores{git_state()}; "
        f"_core.abi3.so md5 {so_id}; " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        "",
        f"{args.partitions} daily partitions of {args.rows:,} rows (streamed, batches of {args.batch:,}), "
        f"then {args.remat} re-materialised; one `dagster.materialize` per partition. "
        "Seconds; RSS in MiB (the kernel's VmHWM per phase, reset between phases; `base` = RSS after "
        "imports); `steps` = the sum of Dagster's step durations (the asset and its IO manager, "
        "without each run's setup); cpu = the child's user+system seconds; load = 1/5/15-min load "
        "average before → after the run. `check`: every day's rows, sum(order_id) and sum(amount) "
        "read back by the contender's own reader equal the generator's.",
        "",
        "| round | tool | process wall | build | build steps | remat | remat steps | base RSS | "
        "build peak RSS | remat peak RSS | cpu | disk | version | load | check |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|",
        *(fmt_row(r) for r in rows),
        "",
        "## Medians",
        "",
        "| tool | build | build steps | remat | remat steps | base RSS | build peak RSS | remat peak RSS "
        "| cpu | disk MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t, m in med.items():
        lines.append(
            f"| {t} | {m['build']:.1f} | {m['build_steps']:.1f} | {m['remat']:.2f} | {m['remat_steps']:.2f} | "
            f"{m['base_rss'] / MIB:.0f} | {m['build_rss'] / MIB:.0f} | {m['remat_rss'] / MIB:.0f} | "
            f"{m['cpu']:.1f} | {m['disk'] / MIB:.0f} |"
        )
    dr = med.get("drain")
    pairs = [
        ("build", "build"),
        ("build steps", "build_steps"),
        ("remat", "remat"),
        ("remat steps", "remat_steps"),
        ("build peak RSS", "build_rss"),
        ("remat peak RSS", "remat_rss"),
        ("cpu", "cpu"),
        ("disk", "disk"),
    ]
    # Each pds variant against deltalake with its defaults, and against the same codec.
    pairings = [("pds", "deltalake"), ("pds", "deltalake-zstd"), ("pds-snappy", "deltalake")]
    for variant, peer in [(v, q) for v, q in pairings if v in med and q in med]:
        p, d = med[variant], med[peer]
        lines += ["", f"## Ratios: {peer} ÷ {variant} (above 1: {variant} faster or smaller)", ""]
        lines += [f"- {label}: {d[k] / p[k]:.2f}" for label, k in pairs]
        paired = [
            (r["build"]["seconds"] / q["build"]["seconds"], r["remat"]["seconds"] / q["remat"]["seconds"])
            for r in rows
            if r["tool"] == peer
            for q in rows
            if q["tool"] == variant and q["round"] == r["round"]
        ]
        lines.append(
            "- per round (the same round's runs, build / remat): " + ", ".join(f"{b:.2f} / {m:.2f}" for b, m in paired)
        )
        if dr:
            lines.append(
                "- build steps minus drain's (the IO manager's own time): "
                f"{variant} {p['build_steps'] - dr['build_steps']:.1f} s, "
                f"{peer} {d['build_steps'] - dr['build_steps']:.1f} s"
            )
            floor = max(dr["build_rss"], dr["remat_rss"])
            lines.append(
                "- peak RSS above drain's (what the IO manager holds beyond Dagster and the generator): "
                f"{variant} {(max(p['build_rss'], p['remat_rss']) - floor) / MIB:.0f} MiB, "
                f"{peer} {(max(d['build_rss'], d['remat_rss']) - floor) / MIB:.0f} MiB"
            )
    lines += ["", "## Per-partition run times (seconds, first round of each tool)", ""]
    for t in med:
        r = next(r for r in rows if r["tool"] == t)
        runs, steps = r["build"]["runs"], r["build"]["steps"]
        lines.append(
            f"- {t}: runs median {statistics.median(runs):.2f} (first {runs[0]:.2f}, last {runs[-1]:.2f}); "
            f"steps median {statistics.median(steps):.2f} (first {steps[0]:.2f}, last {steps[-1]:.2f}); "
            f"remat runs {', '.join(f'{x:.2f}' for x in r['remat']['runs'])}"
        )
    return "\n".join(lines) + "\n"


def git_state() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from machine import git_state as state

    return state(REPO)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--remat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=65_536, help="rows per streamed batch")
    parser.add_argument(
        "--tools",
        default=",".join(DEFAULT_TOOLS),
        help="comma-separated, from " + ", ".join(TOOLS) + " (pds-snappy, deltalake-zstd: the other's codec)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "benches" / "dagster_results.md")
    args = parser.parse_args()
    if not 0 < args.remat <= args.partitions:
        parser.error("--remat must be between 1 and --partitions")
    tools = [t for t in args.tools.split(",") if t]
    if unknown := set(tools) - set(TOOLS):
        parser.error(f"unknown tools {sorted(unknown)}")
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in ("dagster", "dagster-deltalake", "deltalake", "pyarrow"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            if name != "pyarrow" and any(t.startswith("deltalake") for t in tools):
                parser.error(f"{name} is not installed: pip install dagster-deltalake (or --tools drain,pds)")
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    # What each contender must end with: the first REMAT days from seed 1, the rest from seed 0.
    want = [expected(i, 1 if i < args.remat else 0, args.rows, args.batch) for i in range(args.partitions)]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pds-dagster-bench-") as tmp:
        for rnd in range(args.rounds):
            # drain first, then the contenders, their order rotated every round
            # (two contenders alternate: A B, B A, ...).
            rest = [t for t in tools if t != "drain"]
            k = rnd % max(1, len(rest))
            order = [t for t in tools if t == "drain"] + rest[k:] + rest[:k]
            for tool in order:
                r = one(tool, args, Path(tmp), want)
                r["round"] = rnd + 1
                rows.append(r)
                print(fmt_row(r), flush=True)
    text = report(rows, args, started, versions)
    args.out.write_text(text)
    print(text)
    bad = [r for r in rows if r.get("check", "ok") != "ok"]
    if bad:
        sys.exit(f"{len(bad)} run(s) failed the check")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, tool, root, *rest = sys.argv[2:]
        out = child_run(tool, root, *(int(x) for x in rest)) if mode == "run" else child_verify(tool, root)
        print("RESULT " + json.dumps(out), flush=True)
    else:
        main()
