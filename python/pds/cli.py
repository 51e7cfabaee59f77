"""The ``pds`` command: look at and look after datasets and tables.

::

    pds ls URL [PREFIX]                 datasets and tables below PREFIX
    pds show URL KEY                    schema, version, files, statistics
    pds history URL KEY                 a table's versions
    pds scan URL KEY [--columns a,b] [--filter 'id >= 5'] [--limit N]
    pds verify URL KEY                  every file's SHA-256 against its manifest
    pds compact URL KEY                 rewrite thinned and small files
    pds vacuum URL KEY [--retain 7d] [--min-age 1h] [--keep-versions] [--apply]
                                        a table's or pipeline's garbage; dry run unless --apply

Storage options come from ``--option key=value`` (repeatable) and, for S3,
the ``AWS_*`` environment variables. ``--json`` prints machine-readable
output instead of tables.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click
import pyarrow as pa
from remote_store import NotFound, RemoteStoreError, Store
from rich.console import Console
from rich.progress import Progress
from rich.table import Table as RichTable

from pds.backend import open_store
from pds.dataset import ParquetDatasetStore
from pds.producers.pipeline import Pipeline
from pds.table import MAX_VERSION, Table, is_table

__all__ = ["main"]

_OPS = ("not in", "is_not_null", "is_null", "in", ">=", "<=", "!=", "==", "=", ">", "<")
_FILTER = re.compile(r"^\s*([^\s=<>!]+)\s*(" + "|".join(re.escape(o) for o in _OPS) + r")\s*(.*?)\s*$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")


def _options(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {v!r}", param_hint="--option")
        out[key.strip()] = value
    return out


def _value(text: str) -> Any:
    """A filter value: JSON (numbers, "strings", lists, true/false), else the bare text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_filter(text: str) -> tuple[str, str, Any]:
    """``'id >= 5'``, ``'name == "x"'``, ``'id in [1, 2]'``, ``'x is_null'`` as a filter tuple."""
    m = _FILTER.match(text)
    if not m:
        raise click.BadParameter(f"expected 'column op value', got {text!r}", param_hint="--filter")
    column, op, value = m.group(1), m.group(2), m.group(3)
    if op in ("is_null", "is_not_null"):
        if value:
            raise click.BadParameter(f"{op} takes no value: {text!r}", param_hint="--filter")
        return (column, op, None)
    if not value:
        raise click.BadParameter(f"missing value: {text!r}", param_hint="--filter")
    return (column, "==" if op == "=" else op, _value(value))


def parse_duration(text: str) -> datetime.timedelta:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w``."""
    m = _DURATION.match(text.strip())
    if not m:
        raise click.BadParameter(f"expected a number and s, m, h, d or w (e.g. 7d), got {text!r}")
    n, unit = float(m.group(1)), m.group(2)
    name = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[unit]
    try:
        return datetime.timedelta(**{name: n})
    except OverflowError:
        raise click.BadParameter(f"{text!r} is longer than a duration can be (999999999 days)") from None


class _Context:
    def __init__(self, url: str, options: dict[str, str], as_json: bool) -> None:
        self.store: Store = open_store(url, **options)
        self.as_json = as_json
        self.console = Console()

    def kind(self, key: str) -> str | None:
        """``table``, ``dataset``, or ``None`` (two HEADs at most)."""
        key = key.strip("/")
        if is_table(self.store, key):
            return "table"
        if self.store.exists(f"{key}/_SUCCESS") or self.store.exists(f"{key}/manifest.json"):
            return "dataset"
        return None

    def emit(self, data: Any, title: str | None = None) -> None:
        if self.as_json:
            click.echo(json.dumps(data, indent=2, default=str, sort_keys=True))
        elif isinstance(data, list) and data and isinstance(data[0], dict):
            table = RichTable(title=title)
            columns = list(dict.fromkeys(k for row in data for k in row))
            for c in columns:
                table.add_column(c)
            for row in data:
                table.add_row(*[_cell(row.get(c)) for c in columns])
            self.console.print(table)
        elif isinstance(data, dict):
            table = RichTable(title=title, show_header=False)
            table.add_column("field", style="bold")
            table.add_column("value")
            for k, v in data.items():
                table.add_row(k, _cell(v))
            self.console.print(table)
        else:
            self.console.print(data if data else "(nothing)")


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return str(v)


def _errors(fn: Callable[..., None]) -> Callable[..., None]:
    """Report store errors as one line and exit 1, without a traceback."""

    def run(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except (RemoteStoreError, ValueError, TypeError) as e:
            click.echo(f"error: {type(e).__name__}: {e}", err=True)
            sys.exit(1)

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


_url = click.argument("url")
_key = click.argument("key")


def _common(fn: Callable[..., None]) -> Callable[..., None]:
    fn = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(fn)
    fn = click.option(
        "--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="A storage option (repeatable)."
    )(fn)
    return fn


@click.group()
@click.version_option(package_name="pds")
def main() -> None:
    """Look at and look after pds datasets and tables on any object store.

    URL is a store: file:///abs/path, /abs/path, s3://bucket/prefix or memory://.
    S3 credentials come from --option key=value or the AWS_* environment.
    """


@main.command("ls")
@_url
@click.argument("prefix", default="")
@_common
@_errors
def ls(url: str, prefix: str, options: tuple[str, ...], as_json: bool) -> None:
    """List the datasets and tables below PREFIX (one LIST, two HEADs per folder)."""
    ctx = _Context(url, _options(options), as_json)
    found = []
    for folder in sorted(str(f.path) for f in ctx.store.list_folders(prefix)):
        kind = ctx.kind(folder)
        if kind == "table":
            t = Table.open(ctx.store, folder)
            found.append(
                {"key": folder, "kind": "table", "version": t.version, "files": len(t.manifest.get("data_files", []))}
            )
        elif kind == "dataset":
            m = ParquetDatasetStore(ctx.store).read_manifest(folder)
            found.append({"key": folder, "kind": "dataset", "rows": m.row_count, "parts": len(m.parts)})
        else:
            found.append({"key": folder, "kind": "folder"})
    ctx.emit(found, title=f"{url} {prefix}".strip())


def _schema_rows(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"column": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


@main.command()
@_url
@_key
@_common
@_errors
def show(url: str, key: str, options: tuple[str, ...], as_json: bool) -> None:
    """Schema, version, files and statistics of a dataset or table."""
    ctx = _Context(url, _options(options), as_json)
    kind = ctx.kind(key)
    if kind == "table":
        t = Table.open(ctx.store, key)
        files = t.files().to_pylist()
        info = {
            "key": key,
            "kind": "table",
            "version": t.version,
            "primary_key": t.primary_key,
            "files": len(files),
            "rows": sum(f["rows"] for f in files),
            "deleted_rows": sum(f["deleted_rows"] or 0 for f in files),
            "bytes": sum(f["bytes"] for f in files),
        }
        if as_json:
            ctx.emit({**info, "schema": _schema_rows(t.schema), "data_files": files})
            return
        ctx.emit(info, title=key)
        ctx.emit(_schema_rows(t.schema), title="schema")
        brief = ("path", "rows", "deleted_rows", "bytes", "row_groups")
        ctx.emit([{k: f[k] for k in brief} for f in files], title="data files (--json for statistics)")
    elif kind == "dataset":
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
        if as_json:
            ctx.emit({**info, "schema": _schema_rows(schema), "parts": parts})
            return
        ctx.emit(info, title=key)
        ctx.emit(_schema_rows(schema), title="schema")
        if parts:
            ctx.emit(parts, title="parts")
    else:
        raise NotFound(f"no dataset or table at {key!r}", path=key)


@main.command()
@_url
@_key
@click.option("--limit", type=click.IntRange(min=1), default=None, help="The newest N versions.")
@_common
@_errors
def history(url: str, key: str, limit: int | None, options: tuple[str, ...], as_json: bool) -> None:
    """A table's versions, newest first."""
    ctx = _Context(url, _options(options), as_json)
    rows = Table.open(ctx.store, key).history(limit)
    if not as_json:
        for r in rows:
            del r["parameters"]  # In --json; the columns say the rest.
    ctx.emit(rows, title=f"{key} history")


@main.command()
@_url
@_key
@click.option("--columns", default=None, help="Comma-separated columns.")
@click.option("--filter", "filters", multiple=True, help="'column op value', e.g. 'id >= 5' (repeatable: all hold).")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Rows to print.")
@click.option(
    "--version", "version", type=click.IntRange(min=0, max=MAX_VERSION), default=None, help="A table version."
)
@_common
@_errors
def scan(
    url: str,
    key: str,
    columns: str | None,
    filters: tuple[str, ...],
    limit: int,
    version: int | None,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print the first rows of a dataset or table (deletes applied). Only the
    columns asked for are read, and the filter prunes files and row groups."""
    ctx = _Context(url, _options(options), as_json)
    cols = [c.strip() for c in columns.split(",")] if columns else None
    flt = [parse_filter(f) for f in filters] or None
    kind = ctx.kind(key)
    if kind == "table":
        reader = Table.open(ctx.store, key).scan(columns=cols, filter=flt, version=version)
    elif kind == "dataset":
        if version is not None:
            raise click.BadParameter("datasets have no versions", param_hint="--version")
        reader = ParquetDatasetStore(ctx.store).iter_batches(key, columns=cols, filter=flt)
    else:
        raise NotFound(f"no dataset or table at {key!r}", path=key)
    batches = []
    seen = 0
    for batch in reader:
        if seen >= limit:
            break
        batches.append(batch.slice(0, limit - seen))
        seen += batches[-1].num_rows
    rows = pa.Table.from_batches(batches, schema=reader.schema).to_pylist()
    if as_json:
        for r in rows:
            click.echo(json.dumps(r, default=str))
        return
    ctx.emit(rows or f"(no rows; columns: {', '.join(reader.schema.names)})", title=key)


def _table_files(store: Store, key: str) -> Iterator[tuple[str, str]]:
    for f in Table.open(store, key).manifest.get("data_files", []):
        yield f"{key.strip('/')}/{f['path']}", f["sha256"]


@main.command()
@_url
@_key
@_common
@_errors
def verify(url: str, key: str, options: tuple[str, ...], as_json: bool) -> None:
    """Read every file of a dataset or table whole and check its SHA-256
    against the manifest. Exits 1 if any differs."""
    ctx = _Context(url, _options(options), as_json)
    kind = ctx.kind(key)
    if kind == "table":
        expected = list(_table_files(ctx.store, key))
    elif kind == "dataset":
        m = ParquetDatasetStore(ctx.store).read_manifest(key)
        expected = [(f"{key.strip('/')}/{p.name}", p.sha256) for p in (m.part_info or [])]
        if not expected:
            raise ValueError("this manifest records no checksums (written by remote-store?)")
    else:
        raise NotFound(f"no dataset or table at {key!r}", path=key)
    results = []
    with Progress(console=Console(stderr=True), transient=True, disable=as_json) as progress:
        task = progress.add_task("verifying", total=len(expected))
        for path, sha in expected:
            try:
                ok = hashlib.sha256(ctx.store.read_bytes(path)).hexdigest() == sha
                status = "ok" if ok else "CHECKSUM MISMATCH"
            except NotFound:
                status = "MISSING"
            results.append({"file": path, "status": status})
            progress.advance(task)
    ctx.emit(results, title=f"{key}: {len(results)} files")
    if any(r["status"] != "ok" for r in results):
        sys.exit(1)


@main.command()
@_url
@_key
@click.option("--target-file-size", type=click.IntRange(min=1), default=None, help="Bytes per new file at most.")
@click.option("--min-deleted-fraction", type=click.FloatRange(0, 1), default=0.5, show_default=True)
@_common
@_errors
def compact(
    url: str,
    key: str,
    target_file_size: int | None,
    min_deleted_fraction: float,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Rewrite a table's thinned and small files; coalesce its tombstones."""
    ctx = _Context(url, _options(options), as_json)
    t = Table.open(ctx.store, key)
    before = t.version
    with Progress(console=Console(stderr=True), transient=True, disable=as_json) as progress:
        progress.add_task("compacting", total=None)
        after = t.compact(target_file_size=target_file_size, min_deleted_fraction=min_deleted_fraction)
    info: dict[str, Any] = {"key": key, "version_before": before, "version": after}
    if after != before:
        info.update(t.history(1)[0]["parameters"])
    ctx.emit(info, title="compaction" if after != before else "nothing to compact")


@main.command()
@_url
@_key
@click.option("--retain", default="7d", show_default=True, help="Keep versions this recent: 30m, 12h, 7d, 2w.")
@click.option(
    "--min-age",
    default="1h",
    show_default=True,
    help="Never remove an object younger than this (writers in flight); at most --retain. "
    "Lower it only when no writer can be running.",
)
@click.option(
    "--keep-versions",
    is_flag=True,
    help="Keep every version readable: remove only objects no version references (failed or killed writes).",
)
@click.option("--apply", is_flag=True, help="Delete; without it, only list what would go.")
@_common
@_errors
def vacuum(
    url: str,
    key: str,
    retain: str,
    min_age: str,
    keep_versions: bool,
    apply: bool,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Remove what no retained version of a table or pipeline needs (dry run unless --apply).

    \b
    Retained whatever --retain is: the latest version, the one the pointer
    names and any above them; then versions created within --retain and the
    newest one before. Each keeps its manifest and every file it references.
    Removed: files of failed or killed writes, manifests of versions past the
    window and the files only they referenced (with --keep-versions, only
    files no version references). Only the key's own layout is touched
    (a table's data/, tombstone/, manifest/, _latest_manifest; a pipeline's
    nodes/*/{content,mappings,update}/, manifest/, _latest_manifest), never
    a dataset, table or pipeline stored under KEY. Nothing younger than
    --min-age goes.
    """
    window, floor = parse_duration(retain), parse_duration(min_age)
    ctx = _Context(url, _options(options), as_json)
    target = _collectable(ctx.store, key)
    keys = target.vacuum(retain=window, dry_run=not apply, keep_versions=keep_versions, min_age=floor)
    if as_json:
        ctx.emit({"applied": apply, "removed" if apply else "would_remove": keys})
        return
    verb = "removed" if apply else "would remove (dry run; --apply to delete)"
    ctx.emit([{"key": k} for k in keys] or f"nothing to remove ({key})", title=f"{len(keys)} objects {verb}")


def _collectable(store: Store, key: str) -> Table | Pipeline:
    """The table or pipeline at *key*, told apart by its latest manifest's ``format``."""
    try:
        pointer = json.loads(store.read_bytes(f"{key.strip('/')}/_latest_manifest"))
        latest = json.loads(store.read_bytes(f"{key.strip('/')}/{pointer['manifest']}"))
        is_pipeline = str(latest.get("format", "")).startswith("pds-pipeline/")
    except (RemoteStoreError, ValueError, TypeError, KeyError, AttributeError):
        is_pipeline = False  # Table.open reports what is wrong
    return Pipeline.open(store, key) if is_pipeline else Table.open(store, key)


if __name__ == "__main__":  # pragma: no cover
    main()
