"""Arguments and options shared by the commands: URL, KEY, ``--option``, ``--json``,
and their checks (store location, keys, durations)."""

from __future__ import annotations

import datetime
import os
import pathlib
import re
import urllib.parse
import urllib.request
from collections.abc import Callable

import click
from remote_store import InvalidPath

from pds.cli._secrets import option_name, remember_options, remember_url
from pds.dataset import _check_key as _check_store_key

#: The largest count an option takes (rows, bytes, versions): Arrow's and
#: the core's 64-bit signed integers.
MAX_COUNT = 2**63 - 1

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")


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


def check_window(retain: str, min_age: str) -> tuple[datetime.timedelta, datetime.timedelta]:
    """``--retain`` and ``--min-age`` as durations, *min_age* at most *retain*."""
    window, floor = parse_duration(retain), parse_duration(min_age)
    if floor > window:
        raise click.BadParameter(
            f"{min_age} is longer than --retain ({retain}): nothing younger than "
            "--min-age is removed, so that writers in flight keep their files; give a smaller --min-age "
            "(--min-age 0s only when no writer can be running)",
            param_hint="--min-age",
        )
    return window, floor


def _options(values: tuple[str, ...]) -> dict[str, str]:
    """``--option key=value`` texts as a dict. A text that is not
    ``key=value`` is a usage error naming its key (the part before the
    separator), never its value, which may be a secret."""
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        if sep and key.strip():
            out[key.strip()] = value
            continue
        name = option_name(v)
        if sep:
            why = "an option with no name before '=' (its value is not shown)"
        elif name is not None:
            why = f"{name!r} is not followed by '=' (write {name}=VALUE; the rest is not shown)"
        else:
            why = "an option without '=' (it is not shown: it may be a secret)"
        raise click.BadParameter(f"expected key=value: {why}", param_hint="--option")
    return out


def _location(url: str) -> tuple[str, str | None]:
    """The URL to open and, for a local store, its folder: a path without a
    scheme is a folder (``~`` expanded, relative to the working directory)."""
    if not url.strip():
        raise click.BadParameter("an empty store URL", param_hint="URL")
    if "://" not in url:
        folder = os.path.abspath(os.path.expanduser(url))
        return pathlib.Path(folder).as_uri(), folder
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() == "file" and parts.netloc in ("", "localhost"):
        return url, urllib.request.url2pathname(parts.path)
    return url, None


def _check_key(key: str, what: str = "KEY") -> str:
    """*key* without its outer slashes: a key pds can store (no empty,
    ``.`` or ``..`` part, ``/`` or ``\\`` separating parts, valid Unicode,
    at most 1024 UTF-8 bytes, no NUL), else a usage error (exit 2)."""
    k = key.strip("/")
    if not k or any(s in ("", ".", "..") for s in k.replace("\\", "/").split("/")):
        raise click.BadParameter(
            f"{key!r} is not a key inside the store (no '.', '..' or empty parts)", param_hint=what
        )
    try:
        _check_store_key(k)
    except InvalidPath as e:
        raise click.BadParameter(f"{key!r} is not a key pds can store: {e}", param_hint=what) from None
    return k


_url = click.argument("url", callback=remember_url)
_key = click.argument("key")


def _common(fn: Callable[..., None]) -> Callable[..., None]:
    fn = click.option("--json", "as_json", is_flag=True, help="Print strict JSON instead of tables.")(fn)
    fn = click.option(
        "--option",
        "-o",
        "options",
        multiple=True,
        metavar="KEY=VALUE",
        callback=remember_options,
        help="A storage option (repeatable). Errors never show its value.",
    )(fn)
    return fn
