"""``pds scan`` and ``pds verify``: read rows, check files against their checksums."""

from __future__ import annotations

import hashlib

import click
import pyarrow as pa
from remote_store import NotFound
from rich.console import Console
from rich.progress import Progress

from pds.cli._args import MAX_COUNT, _check_key, _common, _key, _url
from pds.cli._context import _Context
from pds.cli._filter import _expression, typed_filter
from pds.cli._group import main, wants_progress
from pds.cli._output import _dumps
from pds.cli._pipelines import _nodes, _pipeline_manifest, _pipeline_parts
from pds.dataset import ParquetDatasetStore
from pds.producers.pipeline import Pipeline
from pds.table import MAX_VERSION, Table


def _check_columns(cols: list[str] | None, schema: pa.Schema) -> None:
    if cols is None:
        return
    unknown = [c for c in cols if c not in schema.names]
    if unknown or not cols:
        raise click.BadParameter(
            f"unknown columns {unknown}; the columns are {', '.join(schema.names)}", param_hint="--columns"
        )


@main.command()
@_url
@_key
@click.option("--columns", default=None, help="Comma-separated columns.")
@click.option("--filter", "filters", multiple=True, metavar="CONDITION", help="A condition (repeatable: all hold).")
@click.option(
    "--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=20, show_default=True, help="Rows to print."
)
@click.option(
    "--version",
    "version",
    type=click.IntRange(min=0, max=MAX_VERSION),
    default=None,
    help="A table's or pipeline's version.",
)
@click.option("--stage", default=None, help="A pipeline's source or stage to read (required for a pipeline).")
@_common
def scan(
    url: str,
    key: str,
    columns: str | None,
    filters: tuple[str, ...],
    limit: int,
    version: int | None,
    stage: str | None,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print the first rows of a dataset, table or pipeline stage (deletes
    applied). Only the columns asked for are read, and the filter prunes
    files and row groups (a pipeline stage is read whole, then filtered).
    --json prints one strict JSON object per line (JSON Lines).

    \b
    --filter CONDITION, repeatable (all must hold):
      column op value
      column   a bare name (id) or "double quoted" ("order id")
      op       == = != <> < <= > >=  in  not in  is null  is not null
      value    5  -2.5  1e3  'text'  "text"  bare_word  true  false
               lists [1, 2] or ('DE', 'FR')
    Values take the column's type: id == '5' is 5 on an int column,
    country == DE is 'DE' on a string column; dates and times are quoted
    ISO 8601 text (a time without offset on a zoned column is UTC).

    \b
    Examples:
      pds scan ~/lake events --filter 'id >= 100' --limit 5
      pds scan ~/lake events --filter "country in ('DE','FR')"
      pds scan ~/lake events --filter "ts >= '2024-01-01'" --filter 'v is not null'
      pds scan ~/lake words_pipeline --stage words --columns word
    """
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    cols = [c.strip() for c in columns.split(",")] if columns is not None else None
    kind = ctx.need(key)
    if stage is not None and kind != "pipeline":
        raise click.BadParameter(f"{key!r} is a {kind}, not a pipeline", param_hint="--stage")
    if kind == "table":
        t = Table.open(ctx.store, key)
        schema = t.schema if version is None else t.at(version=version).schema
        _check_columns(cols, schema)
        flt = [typed_filter(f, schema) for f in filters] or None
        reader = t.scan(columns=cols, filter=flt, version=version)
    elif kind == "dataset":
        if version is not None:
            raise click.BadParameter("datasets have no versions", param_hint="--version")
        ds = ParquetDatasetStore(ctx.store)
        schema = ds.read_schema(key)
        _check_columns(cols, schema)
        flt = [typed_filter(f, schema) for f in filters] or None
        reader = ds.iter_batches(key, columns=cols, filter=flt)
    else:
        p = Pipeline.open(ctx.store, key)
        names = [n.name for n in _nodes(_pipeline_manifest(p, version))]
        if stage not in names:
            why = "a pipeline needs --stage" if stage is None else f"no stage or source {stage!r}"
            raise click.BadParameter(f"{why}; choose one of {', '.join(names)}", param_hint="--stage")
        data = p.read(stage, version=version)
        _check_columns(cols, data.schema)
        conditions = [typed_filter(f, data.schema) for f in filters]
        expr = _expression(conditions, data.schema)
        if expr is not None:
            data = data.filter(expr)
        if cols is not None:
            data = data.select(cols)
        reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
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
            click.echo(_dumps(r, indent=None))
        return
    title = key if stage is None else f"{key} {stage}"
    ctx.emit(rows or f"(no rows; columns: {', '.join(reader.schema.names)})", title=title)


@main.command()
@_url
@_key
@_common
def verify(url: str, key: str, options: tuple[str, ...], as_json: bool) -> None:
    """Read every file of a dataset's, table's or pipeline's latest version
    whole and check its SHA-256 against the manifest (a pipeline: every part
    of every source and stage). Exits 1 if any differs or is missing."""
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    kind = ctx.need(key)
    if kind == "table":
        # The file list as Arrow (built in Rust), not as Python objects.
        listed = Table.open(ctx.store, key).files().select(["path", "sha256"]).to_pydict()
        expected = [(f"{key}/{p}", str(sha)) for p, sha in zip(listed["path"], listed["sha256"], strict=True)]
    elif kind == "pipeline":
        m = _pipeline_manifest(Pipeline.open(ctx.store, key))
        expected = list({f"{key}/{part['name']}": str(part["sha256"]) for part in _pipeline_parts(m)}.items())
    else:
        dm = ParquetDatasetStore(ctx.store).read_manifest(key)
        expected = [(f"{key}/{p.name}", p.sha256) for p in (dm.part_info or [])]
        if not expected:
            raise ValueError("this manifest records no checksums (written by remote-store?)")
    results = []
    with Progress(console=Console(stderr=True), transient=True, disable=as_json or not wants_progress()) as progress:
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
        raise click.exceptions.Exit(1)
