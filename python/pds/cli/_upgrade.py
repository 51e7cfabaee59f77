"""``pds upgrade``: bring a table or pipeline written by an earlier format to this pds's."""

from __future__ import annotations

from pds import _core, _progress
from pds.cli._args import _check_key, _common, _key, _url
from pds.cli._context import _Context
from pds.cli._group import main, wants_progress
from pds.table import _native


@main.command()
@_url
@_key
@_common
def upgrade(url: str, key: str, options: tuple[str, ...], as_json: bool) -> None:
    """Upgrade the table or pipeline at KEY to this pds's on-disk format.

    \b
    pds reads every format it ever wrote, but never upgrades silently. A
    table or pipeline written by an earlier format (pds-table/1; manifests
    from before the sealed ones) opens read-only until this command commits
    one new version in the current format: the same data files and deletes
    (nothing rewritten), by compare-and-swap like any commit. A pds-table/2
    table stays writable (its schema changes rewrite every segment); this
    takes it to pds-table/3 by writing a new root alone. Earlier versions
    stay readable. A pds that reads only the earlier format cannot read the
    table afterwards. Already current: nothing is written (exit 0). Same as
    Table.upgrade() / Pipeline.upgrade().
    """
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    kind = ctx.need(key)
    if kind not in ("table", "pipeline"):
        raise ValueError(f"{key!r} is a {kind}: only tables and pipelines have formats to upgrade")
    store, handle = _native(ctx.store, {})
    path = store.native_path(key)
    upgrade_fn = _core.table_upgrade if kind == "table" else _core.pipeline_upgrade
    with _progress.shown(handle, f"upgrading {kind} {key}", wants_progress()):
        from_format, version = upgrade_fn(handle, path)
    if as_json:
        ctx.emit(
            {
                "key": key,
                "kind": kind,
                "upgraded": from_format is not None,
                "from_format": from_format,
                "version": version,
            }
        )
        return
    if from_format is None:
        ctx.emit({"key": key, "kind": kind, "version": version}, title="already in the current format: nothing written")
    else:
        ctx.emit({"key": key, "kind": kind, "from format": from_format, "version": version}, title="upgraded")
