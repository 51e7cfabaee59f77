"""``pds drop``: remove a table."""

from __future__ import annotations

import click

from pds.cli._args import _check_key, _common, _key, _url
from pds.cli._context import _Context
from pds.cli._group import main
from pds.table import drop_table


@main.command()
@_url
@_key
@click.option("--yes", is_flag=True, help="Drop it: required, since a dropped table cannot be brought back.")
@_common
def drop(url: str, key: str, yes: bool, options: tuple[str, ...], as_json: bool) -> None:
    """Remove a table: every version, data file and tombstone under KEY.

    \b
    The first manifest and the pointer go first, so readers then get "not
    found", and a writer that had the table open fails saying it was
    dropped (also after a new table is created at KEY). Only the table's own
    objects are removed (data/, tombstone/, segment/, manifest/,
    _latest_manifest), never a dataset, table or pipeline stored under KEY.
    Stop writers first. Run it again to finish a drop that was interrupted.
    """
    key = _check_key(key)
    if not yes:
        raise click.UsageError(f"pds drop removes the table {key!r} and all its versions for good; pass --yes")
    ctx = _Context(url, options, as_json)
    removed = drop_table(ctx.store, key)
    if as_json:
        ctx.emit({"key": key, "removed": removed})
        return
    ctx.emit({"key": key, "objects removed": len(removed)}, title="dropped")
