"""Draw the benchmark charts of the docs from the results files in benches/.

    python benches/charts.py            # writes docs/images/bench-*.svg

Each chart reads one results file (written by the command named in the
chart's caption and in docs/benchmarks.md) and draws what its tables hold;
nothing is measured here. The SVGs are deterministic (no date, fixed ids), so
running this again without new results changes no file.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

BENCHES = Path(__file__).resolve().parent
OUT = BENCHES.parent / "docs" / "images"
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")

Table = tuple[list[str], list[list[str]]]


def tables(path: Path) -> list[tuple[str, Table]]:
    """Every Markdown table of *path*, with the heading it sits under."""
    found: list[tuple[str, Table]] = []
    heading = ""
    rows: list[list[str]] = []
    for line in [*path.read_text().splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
            continue
        if rows:
            found.append((heading, (rows[0], rows[1:])))
            rows = []
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
    return found


def first_number(cell: str) -> float | None:
    """The first number in a cell (``"1.025 s"``, ``"388 MiB (13 s)"``), or None."""
    m = NUMBER.search(cell.replace("**", ""))
    return float(m.group().replace(",", "")) if m else None


def table_under(path: Path, heading: str) -> Table:
    for h, t in tables(path):
        if h == heading:
            return t
    raise SystemExit(f"{path.name}: no table under the heading {heading!r}")


def table_with(path: Path, first_header: str) -> Table:
    for _, t in tables(path):
        if t[0] and t[0][0] == first_header:
            return t
    raise SystemExit(f"{path.name}: no table whose first column is {first_header!r}")


def bars(
    ax: plt.Axes, groups: Sequence[str], series: dict[str, list[float | None]], *, ylabel: str, log: bool = False
) -> None:
    """Grouped bars: one group per label, one bar per series."""
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None else 0.0 for v in values]
        ax.bar(xs, heights, width, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)


def save(fig: plt.Figure, name: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    plt.rcParams["svg.hashsalt"] = "pds"
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return path


def datasets_chart(out: Path) -> Path:
    """benches/results_g.md (benches/compare.py): time per workload, per store."""
    header, rows = table_with(BENCHES / "results_g.md", "store")
    tools = {
        "pds": "pds",
        "remote_store.ext.parquet (own backend)": "remote_store.ext.parquet",
        "pyarrow.dataset": "pyarrow.dataset",
        "deltalake": "deltalake",
    }
    stores = ["file", "s3", "s3-latency"]
    workloads = ["write", "full read", "1-column read", "filtered read"]
    fig, axes = plt.subplots(1, len(stores), figsize=(12, 4))
    for ax, store in zip(axes, stores, strict=True):
        by_workload = {r[1]: r for r in rows if r[0] == store}
        series = {
            label: [first_number(by_workload[w][header.index(col)]) if w in by_workload else None for w in workloads]
            for col, label in tools.items()
        }
        bars(ax, workloads, series, ylabel="seconds (lower is better)")
        ax.set_title({"s3-latency": "S3 + 10 ms"}.get(store, store))
    axes[0].legend(fontsize=8)
    fig.suptitle("Datasets: 4M rows, 287 MiB (benches/compare.py)")
    return save(fig, "bench-datasets.svg", out)


def tables_chart(out: Path) -> Path:
    """benches/table_results.md (benches/table_compare.py): 8M-row operations."""
    ops = ["append", "scan", "delete customer", "delete pk 1%", "scan after 10%", "time travel", "upsert 1%"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, store in zip(axes, ["file", "s3"], strict=True):
        header, rows = table_under(BENCHES / "table_results.md", f"{store}, 8,000,000 rows")
        by_op = {r[0]: r for r in rows}
        series = {tool: [first_number(by_op[op][header.index(tool)]) for op in ops] for tool in header[1:]}
        bars(ax, ops, series, ylabel="seconds, log scale (lower is better)", log=True)
        ax.set_title(f"{store}, 8M rows")
    axes[0].legend(fontsize=8)
    fig.suptitle("Tables: pds vs deltalake and pyiceberg (benches/table_compare.py)")
    return save(fig, "bench-tables.svg", out)


def pipelines_chart(out: Path) -> Path:
    """benches/producers_results.md (benches/producers_compare.py): build and updates."""
    _, rows = table_with(BENCHES / "producers_results.md", "measure")
    by_measure = {r[0]: r[1] for r in rows}
    build = by_measure["full build, 10,000,000 events"]
    peers = {
        name: float(m.group(1))
        for name, m in ((n, re.search(rf"{n}[^,]*?([\d.]+) s", build)) for n in ("pds", "DuckDB", "Spark"))
        if m
    }
    localized = first_number(by_measure["localized update, 1 % of users (contiguous)"])
    scattered = first_number(by_measure["scattered update, 1 % of users (uniform)"])
    labels = [
        "pds: full build",
        "DuckDB: full build",
        "Spark: full build",
        "pds: 1 % update\n(contiguous)",
        "pds: 1 % update\n(scattered)",
    ]
    values = [peers.get("pds"), peers.get("DuckDB"), peers.get("Spark"), localized, scattered]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(range(len(labels)), [v or 0.0 for v in values], color=["C0", "C1", "C2", "C0", "C0"])
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("seconds (lower is better)")
    ax.grid(axis="y", alpha=0.3)
    for i, v in enumerate(values):
        if v is not None:
            ax.annotate(f"{v:g} s", (i, v), ha="center", va="bottom", fontsize=8)
    ax.set_title("Pipelines: 10M events, two stages (benches/producers_compare.py)")
    return save(fig, "bench-pipelines.svg", out)


def spark_chart(out: Path) -> Path:
    """benches/spark_results.md and spark_results_bytecap.md (benches/spark_compare.py)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    _, rows = table_with(BENCHES / "spark_results.md", "operation")
    _, capped_rows = table_with(BENCHES / "spark_results_bytecap.md", "operation")
    by_op = {r[0]: r for r in rows}
    capped = {r[0]: r for r in capped_rows}
    groups = ["write", "write, byte cap lifted", "read"]
    sources = [by_op["write"], capped["write"], by_op["read"]]
    cols = {
        "Spark Parquet (native)": 1,
        'format("pds")': 2,
        "pds.spark helper": 3,
    }
    series = {label: [first_number(r[i]) for r in sources] for label, i in cols.items()}
    bars(ax, groups, series, ylabel="seconds (lower is better)")
    ax.legend(fontsize=8)
    ax.set_title("Datasets on Spark local[2]: 4M rows (benches/spark_compare.py)")
    return save(fig, "bench-spark.svg", out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the SVG files (default: docs/images)")
    args = parser.parse_args(argv)
    for chart in (datasets_chart, tables_chart, pipelines_chart, spark_chart):
        print(chart(args.out))


if __name__ == "__main__":
    main()
