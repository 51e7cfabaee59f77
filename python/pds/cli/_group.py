"""The ``pds`` click group and its error handling: one line on stderr, exit 1
for a store or data error, 2 for a usage error; no option value ever shown."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import click
import pyarrow as pa
from remote_store import InvalidPath, RemoteStoreError

from pds.cli._secrets import redact

# Store and data errors: one line on stderr, no hint to re-run with PDS_DEBUG=1.
_DATA_ERRORS = (RemoteStoreError, ValueError, TypeError, KeyError, OSError, pa.ArrowException)


# Usage errors the library raises for what the command line gave (a key pds
# cannot store): exit 2, as click's own usage errors.
_USAGE_ERRORS = (InvalidPath,)


def _one_line(e: BaseException) -> str:
    """*e* as one line, option values and URL secrets redacted."""
    text = redact(" ".join(str(e).split()))
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class _Group(click.Group):
    """Every command's errors as one line: exit 2 for usage errors (click's
    own, and a key pds cannot store), 1 for store and data errors (and
    anything unexpected). No error shows an ``--option`` value or a URL's
    user info or query string. ``PDS_DEBUG=1`` prints the traceback (redacted
    too)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.ClickException as e:
            shown = e.format_message()
            if redact(shown) == shown:
                raise
            # The same error, its text redacted: a usage error keeps its usage
            # line and exit 2; click's other errors all exit 1.
            if isinstance(e, click.exceptions.UsageError):
                raise click.exceptions.UsageError(redact(shown), e.ctx) from None
            raise click.exceptions.ClickException(redact(shown)) from None
        except (click.exceptions.Exit, click.exceptions.Abort, BrokenPipeError):
            raise
        except Exception as e:  # noqa: BLE001 -- the command's last word: every error as one line
            code = 2 if isinstance(e, _USAGE_ERRORS) else 1
            if os.environ.get("PDS_DEBUG", "") not in ("", "0"):
                click.echo(redact("".join(traceback.format_exception(e))), err=True, nl=False)
                ctx.exit(code)
            expected = isinstance(e, _DATA_ERRORS)
            hint = "" if expected else " (unexpected; re-run with PDS_DEBUG=1 for the traceback)"
            click.echo(f"error: {_one_line(e)}{hint}", err=True)
            ctx.exit(code)


def wants_progress() -> bool:
    """Whether the running command shows its progress: ``--progress`` /
    ``--no-progress`` if given, else whether stderr is a terminal."""
    chosen = click.get_current_context().find_root().params.get("progress")
    return sys.stderr.isatty() if chosen is None else bool(chosen)


@click.group(cls=_Group)
@click.version_option(package_name="pds")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show the progress of long commands (compact, vacuum, upgrade) on stderr: "
    "a bar on a terminal, else a plain line every few seconds and one at the end "
    "(verify: its bar, on a terminal only). Default: on when stderr is a terminal.",
)
def main(progress: bool | None) -> None:
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
    Exit codes: 0 ok, 1 a store or data error, 2 a usage error (a bad
    option, filter, key, limit or duration). Errors never show an --option
    value or a URL's user info or query string.

    \b
    --progress / --no-progress go before the command: pds --progress
    compact URL KEY. Progress goes to stderr, never into --json output.
    """
