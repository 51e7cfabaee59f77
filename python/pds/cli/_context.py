"""A command's store: opened from URL and ``--option``, and what lies at a key."""

from __future__ import annotations

import os

import click
from remote_store import NotFound, Store

from pds import _core
from pds.backend import open_store
from pds.cli._args import _location, _options
from pds.cli._output import _Output

#: What the core finds at a key, as the commands treat it.
_KINDS = {
    "dataset": "dataset",
    "unfinished dataset": "dataset",
    "table": "table",
    "table or pipeline": "table",
    "pipeline": "pipeline",
}


def kind_named(found: str | None) -> str | None:
    """The kind the commands treat *found* (``_Context.found``) as."""
    return None if found is None else _KINDS[found]


class _Context(_Output):
    """A command's opened store, and its output (:class:`_Output`)."""

    def __init__(self, url: str, options: tuple[str, ...], as_json: bool) -> None:
        opened, folder = _location(url)
        opts = _options(options)
        if folder is not None and not os.path.isdir(folder):
            # Checked before opening, which would create the folder.
            raise NotFound(f"no such folder: {folder}", path=folder)
        try:
            self.store: Store = open_store(opened, **opts)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="URL or --option") from None
        super().__init__(as_json)

    def kind(self, key: str) -> str | None:
        """``table``, ``pipeline``, ``dataset`` or ``None``: what lives at
        *key* itself, by its markers (5 HEADs) and, for a table or pipeline,
        its first manifest's ``format`` (1 GET). An unfinished dataset counts
        as a dataset and a table or pipeline whose manifests cannot tell
        which as a table: opening either says what is wrong."""
        return kind_named(self.found(key))

    def found(self, key: str) -> str | None:
        """What the core finds at *key* itself, in its words (``"unfinished
        dataset"``, ``"table or pipeline"``, ...; see ``_core.kind_at``)."""
        handle = self.store.unwrap(_core.RustStore)  # the commands open every store on pds's backend
        return _core.kind_at(handle, self.store.native_path(key.strip("/")))

    def need(self, key: str) -> str:
        kind = self.kind(key)
        if kind is None:
            raise NotFound(f"no dataset, table or pipeline at {key!r}", path=key)
        return kind
