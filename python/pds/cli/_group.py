"""The ``pds`` click group and its error handling: one line on stderr, exit 1."""

from __future__ import annotations

import os
from typing import Any

import click
import pyarrow as pa
from remote_store import RemoteStoreError

# Store and data errors: one line on stderr, no hint to re-run with PDS_DEBUG=1.
_DATA_ERRORS = (RemoteStoreError, ValueError, TypeError, KeyError, OSError, pa.ArrowException)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class _Group(click.Group):
    """Every command's errors as one line: exit 1 for store and data errors
    (and anything unexpected), 2 for usage errors (click's own). ``PDS_DEBUG=1``
    lets the traceback through."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, BrokenPipeError):
            raise
        except Exception as e:
            if os.environ.get("PDS_DEBUG", "") not in ("", "0"):
                raise
            expected = isinstance(e, _DATA_ERRORS)
            hint = "" if expected else " (unexpected; re-run with PDS_DEBUG=1 for the traceback)"
            click.echo(f"error: {_one_line(e)}{hint}", err=True)
            ctx.exit(1)


@click.group(cls=_Group)
@click.version_option(package_name="pds")
def main() -> None:
    """Look at and look after pds datasets, tables and pipelines on any object store.

    \b
    URL is a store: file:///abs/path, s3://bucket/prefix, memory://, or a
    local folder (/abs/path, ~/lake, or relative to the working directory).
    Read-only commands never create anything: a missing folder is an error.
    S3 credentials come from --option key=value or the AWS_* environment.

    \b
    --json prints strict JSON (RFC 8259): NaN and infinities as the strings
    "NaN", "Infinity", "-Infinity"; binary as base64; dates and times as
    ISO 8601; decimals as strings; maps as [key, value] pairs.

    \b
    Exit codes: 0 ok, 1 a store or data error, 2 a usage error.
    """
