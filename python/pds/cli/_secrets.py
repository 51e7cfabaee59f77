"""Keeping storage options and store URLs out of what the command prints.

The ``--option`` values and the store URL's user info and query string are
remembered as the command line is parsed (:func:`remember_options`,
:func:`remember_url`), and :func:`redact` replaces them, and the user info
and query string of any URL, with ``***`` in every error and title the
command prints: a secret given as an option never reaches the terminal,
whatever message the store or a library under it builds."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

import click

_META = "pds.cli.secrets"
_HIDDEN = "***"
#: Values this short, flags and small counts are no secrets; redacting them
#: would only garble messages ("pass skip_signature=*** for ...").
_SHORTEST = 3
_PLAIN = re.compile(r"(?i)true|false|yes|no|on|off|[0-9]{1,6}(?:\.[0-9]{1,6})?")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# ``scheme://userinfo@``: user info holds no "/" (nor does a URL's host).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]*@")
# ``scheme://...?query``: up to a space, a quote or a fragment.
_QUERY = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s?#'\"]*)\?[^\s#'\"]*")


def option_name(text: str) -> str | None:
    """The name at the start of an ``--option`` text that is not
    ``key=value`` (``secret_access_key`` of ``secret_access_key:SECRET``),
    or ``None`` when no separator follows one (the whole text may be the
    value)."""
    m = _NAME.match(text.strip())
    if m is None or m.end() == len(text.strip()):
        return None
    return m.group()


def _remember(values: Iterable[str]) -> None:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    found: set[str] = ctx.meta.setdefault(_META, set())
    found.update(v for v in values if len(v) >= _SHORTEST and not _PLAIN.fullmatch(v))


def _url_secrets(url: str) -> list[str]:
    """*url*'s user name, password, query string and query values."""
    if "://" not in url:
        return []
    try:
        parts = urllib.parse.urlsplit(url.strip())
        query = [v for _, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
        return [parts.password or "", parts.username or "", parts.query, *query]
    except ValueError:
        return []  # an unparseable URL: the patterns in redact() still apply


def remember_options(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """A click callback: remember each ``--option``'s value (for a text
    that is not ``key=value``, everything after its name, or all of it)
    and, for a URL (an endpoint), its user info and query values."""
    for text in values:
        key, sep, value = text.partition("=")
        name = option_name(text)
        if sep and key.strip():
            _remember([value, value.strip(), *_url_secrets(value)])
        elif name is not None:
            rest = text.strip()[len(name) :]
            _remember([text, rest, rest[1:], rest[1:].strip()])
        else:
            _remember([text, text.strip()])
    return values


def remember_url(ctx: click.Context, param: click.Parameter, url: str) -> str:
    """A click callback: remember the store URL's user info and query values."""
    _remember(_url_secrets(url))
    return url


def redact(text: str) -> str:
    """*text* with every remembered option value, and the user info and query
    string of every URL in it, replaced by ``***``."""
    text = _USERINFO.sub(rf"\1{_HIDDEN}@", text)
    text = _QUERY.sub(rf"\1?{_HIDDEN}", text)
    ctx = click.get_current_context(silent=True)
    secrets: set[str] = set() if ctx is None else ctx.meta.get(_META, set())
    for value in sorted(secrets, key=len, reverse=True):
        # Whole words only, so that a value such as "true" or "us-east-1"
        # is not cut out of longer words; a long value wherever it occurs.
        if len(value) >= 8:
            text = text.replace(value, _HIDDEN)
        else:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", _HIDDEN, text)
    return text
