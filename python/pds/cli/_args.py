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


def _options(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {v!r}", param_hint="--option")
        out[key.strip()] = value
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
    """*key* without its outer slashes; no empty, ``.`` or ``..`` segment."""
    k = key.strip("/")
    if not k or any(s in ("", ".", "..") for s in k.split("/")):
        raise click.BadParameter(
            f"{key!r} is not a key inside the store (no '.', '..' or empty parts)", param_hint=what
        )
    return k


_url = click.argument("url")
_key = click.argument("key")


def _common(fn: Callable[..., None]) -> Callable[..., None]:
    fn = click.option("--json", "as_json", is_flag=True, help="Print strict JSON instead of tables.")(fn)
    fn = click.option(
        "--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="A storage option (repeatable)."
    )(fn)
    return fn
