"""``pds compact``, ``pds vacuum`` and ``pds sync``: rewrite thinned files, remove garbage, publish views."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from pds import _core
from pds.cli._args import MAX_COUNT, _check_key, _common, _key, _url, check_window
from pds.cli._context import _Context
from pds.cli._group import main, wants_progress
from pds.producers.pipeline import Pipeline
from pds.table import FORMATS, Table, _native

#: The part codecs pipelines write (the core's names).
_CODECS = ("none", "uncompressed", "snappy", "gzip", "brotli", "lz4", "lz4_raw", "zstd")
_TABLE_ONLY = ("target_file_size", "min_deleted_fraction")
_PIPELINE_ONLY = ("target_rows", "compression")


def _refuse_options_for(key: str, kind: str, names: tuple[str, ...]) -> None:
    """A usage error if the command line gave any of the options *names*,
    which a *kind* does not take (they would be ignored)."""
    ctx = click.get_current_context()
    given = [n for n in names if ctx.get_parameter_source(n) not in (None, ParameterSource.DEFAULT)]
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        other = "tables" if kind == "pipeline" else "pipelines"
        raise click.BadParameter(f"for {other} only: {key!r} is a {kind}", param_hint=flags)


@main.command()
@_url
@_key
@click.option(
    "--target-file-size",
    type=click.IntRange(min=1, max=MAX_COUNT),
    default=None,
    help="A table's bytes per new file at most.",
)
@click.option(
    "--min-deleted-fraction",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="A table's files with at least this fraction of rows deleted are rewritten.",
)
@click.option(
    "--target-rows",
    type=click.IntRange(min=1, max=MAX_COUNT),
    default=None,
    help="A pipeline's rows per part (default: pds's, 262144): the value it was built with.",
)
@click.option(
    "--compression",
    type=click.Choice(_CODECS, case_sensitive=False),
    default=None,
    help="A pipeline's part compression (default: zstd).",
)
@_common
def compact(
    url: str,
    key: str,
    target_file_size: int | None,
    min_deleted_fraction: float,
    target_rows: int | None,
    compression: str | None,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Rewrite a table's thinned and small files and coalesce its tombstones;
    merge a pipeline's patches and small parts.

    \b
    A pipeline is compacted as Pipeline.compact() does (no stage is run):
    new parts are cut at --target-rows with --compression, which the
    pipeline does not store (give the ones it was built with, or every
    part may count as small). --target-file-size and --min-deleted-fraction
    apply to tables only, --target-rows and --compression to pipelines only:
    given for the other kind, they are a usage error (exit 2)."""
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    kind = ctx.need(key)
    if kind in ("table", "pipeline"):
        _refuse_options_for(key, kind, _TABLE_ONLY if kind == "pipeline" else _PIPELINE_ONLY)
    if kind == "pipeline":
        opts: dict[str, Any] = {"target_rows": target_rows, "compression": compression}
        _compact_pipeline(ctx, key, {k: v for k, v in opts.items() if v is not None})
        return
    if kind != "table":
        raise ValueError(f"{key!r} is a {kind}: only tables and pipelines are compacted")
    t = Table.open(ctx.store, key)
    before = t.version
    after = t.compact(
        target_file_size=target_file_size, min_deleted_fraction=min_deleted_fraction, progress=wants_progress()
    )
    info: dict[str, Any] = {"key": key, "version_before": before, "version": after}
    if after != before:
        info.update(t.history(1)[0]["parameters"])
    ctx.emit(info, title="compaction" if after != before else "nothing to compact")


def _compact_pipeline(ctx: _Context, key: str, opts: dict[str, Any]) -> None:
    p = Pipeline.open(ctx.store, key, **opts)
    before = p.version
    after = p.compact(progress=wants_progress())
    info: dict[str, Any] = {"key": key, "version_before": before, "version": after}
    if after != before:
        for node, done in p.history(1)[0]["parameters"].get("nodes", {}).items():
            info[f"{node} parts"] = f"{done['parts_rewritten']} rewritten as {done['parts_written']}"
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
    (a table's data/, tombstone/, manifest/, _latest_manifest, and its Delta
    view's _delta_log/ entries below the newest usable checkpoint and
    unused deletion_vector_*.bin files; a pipeline's
    nodes/*/{content,mappings,update}/, manifest/, _latest_manifest), never
    a dataset, table or pipeline stored under KEY. Nothing younger than
    --min-age goes.
    """
    window, floor = check_window(retain, min_age)
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    target = Pipeline.open(ctx.store, key) if ctx.kind(key) == "pipeline" else Table.open(ctx.store, key)
    keys = target.vacuum(
        retain=window, dry_run=not apply, keep_versions=keep_versions, min_age=floor, progress=wants_progress()
    )
    if as_json:
        ctx.emit({"applied": apply, "removed" if apply else "would_remove": keys})
        return
    verb = "removed" if apply else "would remove (dry run; --apply to delete)"
    ctx.emit([{"key": k} for k in keys] or f"nothing to remove ({key})", title=f"{len(keys)} objects {verb}")


@main.command()
@_url
@_key
@click.option(
    "--enable",
    "enable",
    type=click.Choice(FORMATS),
    default=None,
    help="First publish this format for the table (one commit, starting with a checkpoint).",
)
@_common
def sync(url: str, key: str, enable: str | None, options: tuple[str, ...], as_json: bool) -> None:
    """Publish what a table's formats (its Delta Lake view) lack.

    \b
    Each commit publishes its version's Delta log entry after it commits; a
    writer that stopped between the two leaves the log at a consistent
    earlier version. This writes the missing entries, in order, and any
    checkpoint due. --enable delta first publishes the view for a table
    created without it (as Table.enable_format). Same as Table.sync_formats().
    An entry pds did not write in the log is an error (exit 1), naming it.
    """
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    kind = ctx.need(key)
    if kind != "table":
        raise ValueError(f"{key!r} is a {kind}: only tables publish formats")
    t = Table.open(ctx.store, key)
    enabled: dict[str, list[int]] = {}
    if enable is not None:
        store, handle = _native(ctx.store, {})
        since, _, committed = _core.table_enable_format(handle, store.native_path(key), enable)
        enabled[enable] = [since] if committed else []
        t.refresh()
    written = {name: sorted({*versions, *enabled.get(name, [])}) for name, versions in t.sync_formats().items()}
    info: dict[str, Any] = {"key": key, "version": t.version, "formats": t.formats}
    for name, versions in written.items():
        info[f"{name} written"] = versions
    if as_json:
        ctx.emit(info)
        return
    title = "synced" if any(written.values()) or enable else "nothing to publish"
    if not t.formats:
        title = "the table publishes no other format (--enable delta publishes one)"
    ctx.emit(info, title=title)
