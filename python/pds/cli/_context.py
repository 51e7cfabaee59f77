"""A command's store: opened from URL and ``--option``, and what lies at a key."""

from __future__ import annotations

import json
import os

import click
from remote_store import NotFound, RemoteStoreError, Store

from pds.backend import open_store
from pds.cli._args import _location, _options
from pds.cli._output import _Output


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
        """``table``, ``pipeline``, ``dataset`` or ``None``: a key with a
        commit pointer or a version 0 is a table or pipeline (its latest
        manifest's ``format`` tells which; an unreadable one counts as a
        table, whose opening says what is wrong)."""
        key = key.strip("/")
        try:
            name = str(json.loads(self.store.read_bytes(f"{key}/_latest_manifest"))["manifest"])
        except NotFound:
            name = "manifest/v00000000.json"
            if not self.store.exists(f"{key}/{name}"):
                name = ""
        except (RemoteStoreError, ValueError, TypeError, KeyError):
            return "table"
        if name:
            try:
                latest = json.loads(self.store.read_bytes(f"{key}/{name}"))
                is_pipeline = str(latest.get("format", "")).startswith("pds-pipeline/")
            except (RemoteStoreError, ValueError, TypeError, AttributeError):
                is_pipeline = False
            return "pipeline" if is_pipeline else "table"
        if self.store.exists(f"{key}/_SUCCESS") or self.store.exists(f"{key}/manifest.json"):
            return "dataset"
        return None

    def need(self, key: str) -> str:
        kind = self.kind(key)
        if kind is None:
            raise NotFound(f"no dataset, table or pipeline at {key!r}", path=key)
        return kind
