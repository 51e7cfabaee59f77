"""``pds ls``, ``pds show`` and ``pds history``: what is stored and how it came to be."""

from __future__ import annotations

import datetime
import json
from typing import Any

import click
import pyarrow as pa
from remote_store import NotFound
from rich.text import Text

from pds.cli._args import MAX_COUNT, _check_key, _common, _key, _url
from pds.cli._context import _Context, kind_named
from pds.cli._group import _DATA_ERRORS, _one_line, main
from pds.cli._output import _when
from pds.cli._pipelines import _changes_text, _node_rows, _nodes, _pipeline_manifest
from pds.cli._secrets import redact
from pds.dataset import ParquetDatasetStore
from pds.producers.pipeline import Pipeline
from pds.table import Table


def _live_rows(files: list[dict[str, Any]]) -> int | None:
    """Live rows from ``Table.files()`` where every file's deletes are known."""
    if any(f["deleted_rows"] is None for f in files):
        return None
    return sum(int(f["rows"]) - int(f["deleted_rows"]) for f in files)


_LS_COLUMNS = ("key", "kind", "version", "files", "rows", "parts", "sources", "stages", "error")


def _ls_entry(ctx: _Context, folder: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": folder, "kind": "unknown"}
    try:
        found = ctx.found(folder)
        kind = kind_named(found)
        entry["kind"] = kind or "folder"
        if found == "unfinished dataset":
            entry["error"] = "unfinished: no _SUCCESS (a write in progress, or one that was killed)"
            return entry
        if kind == "table":
            t = Table.open(ctx.store, folder)
            files = t.files().to_pylist()
            entry.update(version=t.version, files=len(files), rows=_live_rows(files))
        elif kind == "pipeline":
            p = Pipeline.open(ctx.store, folder)
            nodes = _nodes(_pipeline_manifest(p))
            entry.update(
                version=p.version,
                sources=[n.name for n in nodes if n.kind == "source"],
                stages=[n.name for n in nodes if n.kind != "source"],
            )
        elif kind == "dataset":
            m = ParquetDatasetStore(ctx.store).read_manifest(folder)
            entry.update(rows=m.row_count, parts=len(m.parts))
    except _DATA_ERRORS as e:
        entry["error"] = _one_line(e)
    return entry


@main.command("ls")
@_url
@click.argument("prefix", default="")
@_common
def ls(url: str, prefix: str, options: tuple[str, ...], as_json: bool) -> None:
    """List the datasets, tables and pipelines below PREFIX.

    \b
    Tables show their version, files and live rows ("unknown" / null where
    a primary-key range delete applies: `pds show` counts those exactly);
    pipelines their version, sources and stages; datasets rows and parts.
    An entry that cannot be read is listed with its error, and the command
    then exits 1 after listing everything.
    Cost: one LIST, then per folder 5 HEADs to tell what it is (and 1 GET,
    3 if its first version is gone or damaged, to tell a table from a pipeline)
    and the reads of a table's or pipeline's latest manifest (and
    tombstones).
    """
    ctx = _Context(url, options, as_json)
    where = prefix.strip("/")
    if where:
        _check_key(where, "PREFIX")
    found = [_ls_entry(ctx, str(f.path)) for f in ctx.store.list_folders(where)]
    found.sort(key=lambda e: e["key"])
    damaged = [e for e in found if "error" in e]
    if as_json:
        ctx.emit(found)
    else:
        shown = []
        for e in found:
            row: dict[str, Any] = {c: e.get(c) for c in _LS_COLUMNS if any(c in f for f in found)}
            if e["kind"] == "table" and "error" not in e and e.get("rows") is None:
                row["rows"] = "unknown"
            for c in ("sources", "stages"):
                if row.get(c) is not None:
                    row[c] = ", ".join(row[c])
            if "error" in e:
                row["error"] = e["error"].partition(":")[0] + " (below)"
            shown.append(row)
        ctx.emit(shown or f"nothing below {where or 'the root'}", title=redact(f"{url} {where}".strip()))
        for e in damaged:
            click.echo(f"{e['key']}: {e['error']}")
    if damaged:
        raise click.exceptions.Exit(1)


def _schema_rows(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"column": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


def _count_live(t: Table) -> int | None:
    """Live rows by reading one column (the primary key) of the whole version."""
    names = t.schema.names
    if not names:
        return None
    column = t.primary_key or names[0]
    return sum(int(b.num_rows) for b in t.scan(columns=[column]))


def _show_table(ctx: _Context, key: str) -> None:
    t = Table.open(ctx.store, key)
    files = t.files().to_pylist()
    stored = sum(f["rows"] for f in files)
    live = _live_rows(files)
    counted = "manifest and tombstones"
    if live is None:
        live = _count_live(t)
        counted = f"reading column {t.primary_key or t.schema.names[0]!r}"
    info: dict[str, Any] = {
        "key": key,
        "kind": "table",
        "version": t.version,
        "primary_key": t.primary_key,
        "formats": t.formats,
        "files": len(files),
        "rows": live,
        "stored_rows": stored,
        "deleted_rows": None if live is None else stored - live,
        "rows_counted_by": counted,
        "bytes": sum(f["bytes"] for f in files),
    }
    for f in files:
        f["min"] = json.loads(f["min"])
        f["max"] = json.loads(f["max"])
    if ctx.as_json:
        ctx.emit({**info, "schema": _schema_rows(t.schema), "data_files": files})
        return
    shown = {**info, "formats": ", ".join(t.formats) or "pds only"}
    ctx.emit({k: ("unknown" if v is None and k.endswith("rows") else v) for k, v in shown.items()}, title=key)
    ctx.emit(_schema_rows(t.schema), title="schema")
    brief = ("path", "rows", "deleted_rows", "bytes", "row_groups")
    ctx.emit([{k: ("unknown" if f[k] is None else f[k]) for k in brief} for f in files], title="data files")
    notes = ["--json for statistics"]
    if any(f["deleted_rows"] is None for f in files):
        notes.insert(0, "deleted_rows unknown: a primary-key range delete applies (the total above is exact)")
    for note in notes:
        ctx.console.print(Text(note, style="dim"))


def _show_pipeline(ctx: _Context, key: str) -> None:
    p = Pipeline.open(ctx.store, key)
    m = _pipeline_manifest(p)
    nodes = _nodes(m)
    rows = _node_rows(m)
    created = m.get("timestamp_ms")
    info = {
        "key": key,
        "kind": "pipeline",
        "version": p.version,
        "created_at": None
        if created is None
        else datetime.datetime.fromtimestamp(int(created) / 1000, tz=datetime.UTC).isoformat(),
        "operation": m.get("operation"),
        "sources": sum(n.kind == "source" for n in nodes),
        "stages": sum(n.kind != "source" for n in nodes),
    }
    described = [
        {
            "name": n.name,
            "kind": n.kind,
            "reads": list(n.sources),
            "key": n.key_names,
            "values": [f.name for f in n.stored_values],
            "rows": rows[n.name],
            "parts": len(m.get("nodes", {}).get(n.name, {}).get("content", [])),
        }
        for n in nodes
    ]
    if ctx.as_json:
        schemas = {n.name: _schema_rows(n.public_schema) for n in nodes}
        ctx.emit({**info, "nodes": [{**d, "schema": schemas[str(d["name"])]} for d in described]})
        return
    ctx.emit(info, title=key)
    text = [{k: (", ".join(v) if isinstance(v, list) else v) for k, v in d.items()} for d in described]
    ctx.emit(text, title="sources and stages (scan one with --stage NAME)")


def _show_dataset(ctx: _Context, key: str) -> None:
    ds = ParquetDatasetStore(ctx.store)
    m = ds.read_manifest(key)
    schema = ds.read_schema(key)
    info = {
        "key": key,
        "kind": "dataset",
        "rows": m.row_count,
        "parts": len(m.parts),
        "compression": m.compression,
        "created_at_utc": m.created_at_utc,
    }
    parts = [{"part": p.name, "rows": p.row_count, "bytes": p.size_bytes} for p in (m.part_info or [])]
    if ctx.as_json:
        ctx.emit({**info, "schema": _schema_rows(schema), "parts": parts})
        return
    ctx.emit(info, title=key)
    ctx.emit(_schema_rows(schema), title="schema")
    if parts:
        ctx.emit(parts, title="parts")


@main.command()
@_url
@_key
@_common
def show(url: str, key: str, options: tuple[str, ...], as_json: bool) -> None:
    """Schema, version, files and rows of a dataset or table; a pipeline's
    version and its sources and stages (key and value columns, rows).

    \b
    Rows are live rows and exact. Where a primary-key range delete applies
    (the tombstones do not say which rows it hit), show reads the table's
    primary-key column once, every row group of it: one column's bytes.
    Per file, such deleted_rows are "unknown" (null in --json).
    """
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    {"table": _show_table, "pipeline": _show_pipeline, "dataset": _show_dataset}[ctx.need(key)](ctx, key)


@main.command()
@_url
@_key
@click.option("--limit", type=click.IntRange(min=1, max=MAX_COUNT), default=None, help="The newest N versions.")
@_common
def history(url: str, key: str, limit: int | None, options: tuple[str, ...], as_json: bool) -> None:
    """A table's or pipeline's versions, newest first.

    \b
    A table: rows and files each version added and removed (--json: every
    field, with the operation's parameters and commit ids).
    A pipeline: each version's changes (per source rows upserted (+) and keys
    deleted (-); per stage rows handed to Produce and rows emitted) and the
    rows of every source and stage after it (1 GET more per version).
    """
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    kind = ctx.need(key)
    if kind == "pipeline":
        p = Pipeline.open(ctx.store, key)
        rows = p.history(limit)
        for r in rows:
            try:
                r["rows"] = _node_rows(_pipeline_manifest(p, int(r["version"])))
            except NotFound:
                r["rows"] = None  # vacuumed meanwhile
        if not as_json:
            rows = [
                {
                    "version": r["version"],
                    "created (UTC)": _when(r["created_at"]),
                    "operation": r["operation"],
                    "changes": _changes_text(r["parameters"] or {}),
                    "rows": ", ".join(f"{n} {c}" for n, c in (r["rows"] or {}).items()),
                }
                for r in rows
            ]
        ctx.emit(rows, title=f"{key} history (pipeline)")
        return
    if kind != "table":
        raise NotFound(f"{key!r} is a dataset: datasets have no history", path=key)
    rows = Table.open(ctx.store, key).history(limit)
    if not as_json:
        rows = [
            {
                "version": r["version"],
                "created (UTC)": _when(r["created_at"]),
                "operation": r["operation"],
                "+rows": r["rows_added"],
                "-rows": "?" if r["rows_deleted"] is None else r["rows_deleted"],
                "+files": r["files_added"],
                "-files": r["files_removed"],
            }
            for r in rows
        ]
    ctx.emit(rows, title=f"{key} history")
    if not as_json and any(r["-rows"] == "?" for r in rows):
        ctx.console.print(Text("-rows ?: a primary-key range delete (pds show counts live rows)", style="dim"))
