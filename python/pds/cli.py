"""The ``pds`` command: look at and look after datasets, tables and pipelines.

::

    pds ls URL [PREFIX]                 datasets, tables and pipelines below PREFIX
    pds show URL KEY                    schema, version, files, rows (a pipeline: its nodes)
    pds history URL KEY                 a table's or pipeline's versions
    pds scan URL KEY [--columns a,b] [--filter 'id >= 5'] [--limit N] [--stage NAME]
    pds verify URL KEY                  every file's SHA-256 against its manifest
    pds compact URL KEY                 rewrite thinned and small files
    pds vacuum URL KEY [--retain 7d] [--min-age 1h] [--keep-versions] [--apply]
                                        a table's or pipeline's garbage; dry run unless --apply

URL is a store URL or a local folder (relative paths resolve against the
working directory, ``~`` expands). Storage options come from ``--option
key=value`` (repeatable) and, for S3, the ``AWS_*`` environment variables.
``--json`` prints strict JSON (RFC 8259) instead of tables.

Exit codes: 0 success, 1 a store or data error (one line on stderr), 2 a
usage error. No traceback unless ``PDS_DEBUG=1``.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import inspect
import json
import math
import os
import pathlib
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

import click
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat
from remote_store import NotFound, RemoteStoreError, Store
from rich.console import Console
from rich.progress import Progress
from rich.table import Table as RichTable
from rich.text import Text

from pds._filters import exact_conditions
from pds.backend import open_store
from pds.dataset import ParquetDatasetStore
from pds.producers.graph import Node
from pds.producers.pipeline import Pipeline
from pds.table import MAX_VERSION, Table

__all__ = ["main", "parse_duration", "parse_filter", "to_json", "typed_filter"]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")

# -- filters -------------------------------------------------------------------

FILTER_SYNTAX = """\
syntax: column op value   (repeat --filter: all must hold)
  column   a bare name (id) or "double quoted" ("order id")
  op       == = != <> < <= > >=   in   not in   is null   is not null
  value    5  -2.5  1e3  'text'  "text"  bare_word  true  false
           lists: [1, 2]  or  ('DE', 'FR')
  values take the column's type: id == '5' is 5 on an int column;
  dates and times are quoted ISO text: ts >= '2024-01-01T08:00:00Z'
examples: 'id >= 100'  "country in ('DE','FR')"  'name == "Ann"'  'v is not null'"""

_COMPARE = {"==": "==", "=": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<sq>'(?:[^']|'')*')
    |(?P<dq>"(?:[^"\\]|\\.)*")
    |(?P<op>[=<>!]+)
    |(?P<punct>[(),\[\]])
    |(?P<word>[^\s'"=<>!(),\[\]]+)""",
    re.VERBOSE,
)


class _Token(NamedTuple):
    kind: str  # "sq", "dq", "op", "punct" or "word"
    text: str  # as written
    pos: int


class _Literal(NamedTuple):
    """A filter value as parsed, with its text as written (a bare ``01234``
    on a string column is ``"01234"``, not ``1234``)."""

    value: Any
    raw: str
    quoted: bool


def _bad_filter(text: str, why: str) -> NoReturn:
    raise click.BadParameter(f"{why} in {text!r}\n{FILTER_SYNTAX}", param_hint="--filter")


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            c = text[pos]
            _bad_filter(text, f"unbalanced {c} quote" if c in "'\"" else f"unexpected {c!r} at {pos}")
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            out.append(_Token(kind, m.group(), pos))
        pos = m.end()
    return out


class _Parser:
    """``column op value``: a small recursive descent over :func:`_tokens`."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, what: str) -> _Token:
        t = self.peek()
        if t is None:
            _bad_filter(self.text, f"missing {what} at the end")
        self.i += 1
        return t

    def word(self, *words: str) -> bool:
        t = self.peek()
        if t is not None and t.kind == "word" and t.text.lower() in words:
            self.i += 1
            return True
        return False

    def condition(self) -> tuple[str, str, Any]:
        column = self.column()
        op = self.operator(column)
        if op in ("is_null", "is_not_null"):
            value: Any = None
        elif op in ("in", "not in"):
            value = self.values(op)
        else:
            value = self.literal(f"a value after {op!r}")
            if value.value is None and not value.quoted:
                _bad_filter(self.text, f"nothing equals null: use 'is null' or 'is not null', not {op!r}")
        rest = self.peek()
        if rest is not None:
            if op in ("is_null", "is_not_null"):
                _bad_filter(self.text, f"{op} takes no value, got {rest.text!r}")
            _bad_filter(self.text, f"expected the end after the condition, got {self.text[rest.pos :]!r}")
        return column, op, value

    def column(self) -> str:
        t = self.take("a column")
        if t.kind == "word":
            return t.text
        if t.kind == "dq":
            return str(self.string(t))
        if t.kind == "sq":
            _bad_filter(self.text, f'expected a column, got the string {t.text}; quote column names with "..."')
        _bad_filter(self.text, f"expected a column, got {t.text!r}")

    def operator(self, column: str) -> str:
        t = self.peek()
        if t is None:
            _bad_filter(self.text, f"expected an operator after {column!r}")
        if t.kind == "op":
            self.i += 1
            if t.text not in _COMPARE:
                _bad_filter(self.text, f"unknown operator {t.text!r}")
            return _COMPARE[t.text]
        if self.word("is_null"):
            return "is_null"
        if self.word("is_not_null"):
            return "is_not_null"
        if self.word("in"):
            return "in"
        if self.word("not"):
            if not self.word("in"):
                _bad_filter(self.text, "expected 'in' after 'not'")
            return "not in"
        if self.word("is"):
            negated = self.word("not")
            if not self.word("null"):
                _bad_filter(self.text, "expected 'null' after 'is'" + (" not" if negated else ""))
            return "is_not_null" if negated else "is_null"
        _bad_filter(self.text, f"expected an operator after {column!r}, got {t.text!r}")

    def string(self, t: _Token) -> str:
        if t.kind == "sq":
            return t.text[1:-1].replace("''", "'")
        try:
            return str(json.loads(t.text))
        except ValueError:
            _bad_filter(self.text, f"bad escape in {t.text}")

    def literal(self, what: str) -> _Literal:
        t = self.take(what)
        if t.kind in ("sq", "dq"):
            return _Literal(self.string(t), t.text, True)
        if t.kind != "word":
            _bad_filter(self.text, f"expected {what}, got {t.text!r}")
        low = t.text.lower()
        if low in ("true", "false"):
            return _Literal(low == "true", t.text, False)
        if low == "null":
            return _Literal(None, t.text, False)
        if _NUMBER.fullmatch(t.text):
            is_int = not any(c in t.text for c in ".eE")
            return _Literal(int(t.text) if is_int else float(t.text), t.text, False)
        return _Literal(t.text, t.text, False)

    def values(self, op: str) -> list[_Literal]:
        t = self.take(f"a list after {op!r}")
        if t.kind != "punct" or t.text not in "([":
            _bad_filter(self.text, f"{op!r} takes a list: [1, 2] or ('a', 'b'), got {t.text!r}")
        close = ")" if t.text == "(" else "]"
        out: list[_Literal] = []
        first = self.peek()
        if first is not None and first.kind == "punct" and first.text == close:
            self.i += 1
            return out  # an empty list
        while True:
            out.append(self.literal("a list value"))
            t = self.take(f"{close!r}")
            if t.kind == "punct" and t.text == close:
                return out
            if not (t.kind == "punct" and t.text == ","):
                _bad_filter(self.text, f"expected ',' or {close!r} in the list, got {t.text!r}")


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [v.value for v in value]
    return value.value if isinstance(value, _Literal) else value


def parse_filter(text: str) -> tuple[str, str, Any]:
    """``'id >= 5'``, ``"c in ('DE','FR')"``, ``'v is not null'`` as a filter
    tuple, values as written (see :data:`FILTER_SYNTAX`; :func:`typed_filter`
    gives them the column's type).

    Raises:
        click.BadParameter: anything outside the grammar (the message shows it).
    """
    column, op, value = _Parser(text).condition()
    return column, op, _plain(value)


def _as_type(column: str, t: pa.DataType, lit: _Literal) -> Any:
    """*lit* as a value of the column's type *t* (a dictionary's value type)."""
    v = lit.value

    def bad(why: str = "") -> NoReturn:
        raise click.BadParameter(f"cannot read {lit.raw} as {t} for column {column!r}{why}", param_hint="--filter")

    if pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t):
        return v if isinstance(v, str) else lit.raw  # a bare 01234 or true is that text
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_binary_view(t) or pat.is_fixed_size_binary(t):
        return (v if isinstance(v, str) else lit.raw).encode()
    if pat.is_boolean(t):
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.lower() in ("true", "false"):
            return v.lower() == "true"
        bad(" (true or false)")
    if isinstance(v, bool):
        bad()
    if pat.is_integer(t) or pat.is_decimal(t):
        if isinstance(v, int | float) and not pat.is_decimal(t):
            return v
        try:
            d = decimal.Decimal(lit.raw if not lit.quoted else str(v).strip())
        except decimal.InvalidOperation:
            bad()
        if not d.is_finite():
            bad()
        return int(d) if pat.is_integer(t) and d == d.to_integral_value() else d
    if pat.is_floating(t):
        if isinstance(v, int | float):
            return v
        try:
            return float(str(v).strip())
        except ValueError:
            bad()
    if not isinstance(v, str):
        if pat.is_temporal(t):
            bad(" (write dates and times as quoted ISO text, e.g. '2024-01-31')")
        return v
    text = v.strip()
    try:
        if pat.is_date(t):
            return datetime.date.fromisoformat(text)
        if pat.is_timestamp(t):
            stamp = datetime.datetime.fromisoformat(text)
            if t.tz is not None and stamp.tzinfo is None:
                return stamp.replace(tzinfo=datetime.UTC)  # no offset on a zoned column: UTC
            if t.tz is None and stamp.tzinfo is not None:
                bad(" (the column's times have no zone: leave out the offset)")
            return stamp
        if pat.is_time(t):
            return datetime.time.fromisoformat(text)
    except ValueError:
        bad(" (ISO 8601, e.g. '2024-01-31' or '2024-01-31T08:00:00Z')")
    return v


def typed_filter(text: str, schema: pa.Schema) -> tuple[str, str, Any]:
    """:func:`parse_filter`, its value given the column's type in *schema*
    (``id == '5'`` on an int column is ``5``; ``d >= '2024-01-01'`` on a
    date column a ``datetime.date``; ``c == DE`` on a string column ``'DE'``).

    Raises:
        click.BadParameter: bad syntax, an unknown column (the message names
            the columns), or a value the column's type cannot hold.
    """
    column, op, value = _Parser(text).condition()
    if column not in schema.names:
        raise click.BadParameter(
            f"unknown column {column!r} in {text!r}; the columns are {', '.join(schema.names)}", param_hint="--filter"
        )
    t = schema.field(column).type
    t = t.value_type if pat.is_dictionary(t) else t
    if op in ("is_null", "is_not_null"):
        return column, op, None
    if isinstance(value, list):
        typed: Any = [None if v.value is None and not v.quoted else _as_type(column, t, v) for v in value]
    else:
        typed = _as_type(column, t, value)
    try:
        exact_conditions(column, op, typed, schema)
    except (TypeError, ValueError) as e:
        raise click.BadParameter(f"{e} ({text!r})", param_hint="--filter") from None
    return column, op, typed


def _expression(conditions: Sequence[tuple[str, str, Any]], schema: pa.Schema) -> pc.Expression | None:
    """The AND of *conditions* as a ``pyarrow.compute`` expression, with the
    same exact semantics as a pushed-down filter (nulls never match)."""
    out: pc.Expression | None = None
    for column, op, value in conditions:
        for c, o, v in exact_conditions(column, op, value, schema):
            t = schema.field(c).type
            t = t.value_type if pat.is_dictionary(t) else t
            f = pc.field(c)
            if o == "is_null":
                e = f.is_null()
            elif o == "is_not_null":
                e = f.is_valid()
            elif o in ("in", "not in"):
                e = f.isin(pa.array(list(v), type=t))
                e = (~e & f.is_valid()) if o == "not in" else e
            else:
                s = pa.scalar(v, type=t)
                e = {"==": f == s, "!=": f != s, "<": f < s, "<=": f <= s, ">": f > s, ">=": f >= s}[o]
            out = e if out is None else out & e
    return out


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


# -- strict JSON -------------------------------------------------------------------


def to_json(v: Any) -> Any:
    """*v* as values strict JSON holds (RFC 8259): NaN and infinities as the
    strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; bytes as base64
    text; dates, times and datetimes as ISO 8601 text; durations as ISO 8601
    ``PT<seconds>S``; decimals as text (every digit kept); a map's
    ``(key, value)`` entries as ``[key, value]`` pairs; other objects as
    ``str()``."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, Mapping):
        return {str(k): to_json(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [to_json(x) for x in v]
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, datetime.timedelta):
        return f"PT{decimal.Decimal(v.days * 86400 + v.seconds) + decimal.Decimal(v.microseconds).scaleb(-6)}S"
    if isinstance(v, datetime.date | datetime.time) or hasattr(v, "isoformat"):
        return str(v.isoformat())
    return str(v)


def _dumps(v: Any, indent: int | None = 2) -> str:
    return json.dumps(to_json(v), indent=indent, sort_keys=indent is not None, allow_nan=False, ensure_ascii=False)


# -- opening -------------------------------------------------------------------------


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


class _Context:
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
        self.as_json = as_json
        self.console = Console()

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

    def emit(self, data: Any, title: str | None = None) -> None:
        if self.as_json:
            click.echo(_dumps(data))
            return
        if title:
            self.console.print(Text(title, style="bold"))
        if isinstance(data, list) and data and isinstance(data[0], dict):
            self.rows(data)
        elif isinstance(data, dict):
            table = RichTable(show_header=False)
            table.add_column("field", style="bold", no_wrap=True)
            table.add_column("value", overflow="fold")
            for k, v in data.items():
                table.add_row(Text(k), Text(_cell(v)))
            self.console.print(table)
        else:
            self.console.print(Text(str(data) if data else "(nothing)"))

    def rows(self, data: list[dict[str, Any]]) -> None:
        """A table, every header whole; records one below the other when the
        headers alone are wider than the terminal."""
        columns = list(dict.fromkeys(k for row in data for k in row))
        if sum(len(c) + 3 for c in columns) + 1 > self.console.width:
            for i, row in enumerate(data):
                vertical = RichTable(show_header=False, title=f"#{i + 1}", title_justify="left")
                vertical.add_column("field", style="bold", no_wrap=True)
                vertical.add_column("value", overflow="fold")
                for c in columns:
                    vertical.add_row(Text(c), Text(_cell(row.get(c))))
                self.console.print(vertical)
            return
        table = RichTable()
        for c in columns:
            table.add_column(Text(c), min_width=len(c), overflow="fold")
        for row in data:
            table.add_row(*[Text(_cell(row.get(c))) for c in columns])
        self.console.print(table)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, dict | list | tuple):
        return json.dumps(to_json(v), ensure_ascii=False)
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ")
    return str(to_json(v))


# -- errors --------------------------------------------------------------------------


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
            expected = isinstance(e, RemoteStoreError | ValueError | TypeError | KeyError | OSError | pa.ArrowException)
            hint = "" if expected else " (unexpected; re-run with PDS_DEBUG=1 for the traceback)"
            click.echo(f"error: {_one_line(e)}{hint}", err=True)
            ctx.exit(1)


_url = click.argument("url")
_key = click.argument("key")


def _common(fn: Callable[..., None]) -> Callable[..., None]:
    fn = click.option("--json", "as_json", is_flag=True, help="Print strict JSON instead of tables.")(fn)
    fn = click.option(
        "--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="A storage option (repeatable)."
    )(fn)
    return fn


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


# -- pipelines -----------------------------------------------------------------------


def _pipeline_manifest(store: Store, p: Pipeline, version: int | None = None) -> dict[str, Any]:
    """The manifest of *version* (default: the one *p* loaded); 1 GET."""
    v = p.version if version is None else version
    m = json.loads(store.read_bytes(f"{p.key}/manifest/v{v:08d}.json"))
    if not isinstance(m, dict):
        raise ValueError(f"pipeline manifest {p.key}/manifest/v{v:08d}.json is not an object")
    return m


def _nodes(m: Mapping[str, Any]) -> list[Node]:
    return [Node.from_description(d) for d in m.get("graph", {}).get("nodes", [])]


def _node_rows(m: Mapping[str, Any]) -> dict[str, int]:
    """Rows per node at manifest *m*: its content parts' rows (a merge: its feeders')."""
    states = m.get("nodes", {})
    out: dict[str, int] = {}
    for n in _nodes(m):
        if n.kind == "merge":
            out[n.name] = sum(out.get(f, 0) for f in n.sources)
        else:
            out[n.name] = sum(int(part["rows"]) for part in states.get(n.name, {}).get("content", []))
    return out


def _pipeline_history(p: Pipeline, limit: int | None) -> list[dict[str, Any]]:
    """Newest first, as ``Table.history``: ``created_at`` and ``parameters``
    (older Pipeline.history called them ``timestamp`` and ``detail``)."""
    history: Callable[..., list[dict[str, Any]]] = p.history
    takes_limit = "limit" in inspect.signature(history).parameters
    rows = history(limit) if takes_limit else history()
    out = []
    for r in sorted(rows, key=lambda r: -int(r["version"])):
        out.append(
            {
                "version": r["version"],
                "previous": r.get("previous"),
                "created_at": r.get("created_at", r.get("timestamp")),
                "operation": r.get("operation"),
                "parameters": r.get("parameters", r.get("detail", {})),
                "commit_id": r.get("commit_id"),
            }
        )
    return out if limit is None else out[:limit]


def _changes_text(params: Mapping[str, Any]) -> str:
    """``people +2 -1; by_email 3 in, 2 out`` from a pipeline version's parameters."""
    parts = []
    for name, c in (params.get("sources") or {}).items():
        parts.append(f"{name} +{c.get('upserts', 0)} -{c.get('deletes', 0)}")
    for name, c in (params.get("stages") or {}).items():
        parts.append(f"{name} {c.get('rows_in', 0)} in, {c.get('rows_emitted', 0)} out")
    if params.get("stage"):
        parts.append(f"rebuilt {params['stage']}")
    return "; ".join(parts)


def _pipeline_parts(m: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for state in m.get("nodes", {}).values():
        yield from state.get("content", [])
        yield from state.get("mappings", [])
        update = state.get("update") or {}
        yield from update.get("rows", [])
        yield from update.get("deleted", [])


# -- commands ------------------------------------------------------------------------

_DATA_ERRORS = (RemoteStoreError, ValueError, TypeError, KeyError, OSError, pa.ArrowException)


def _live_rows(files: list[dict[str, Any]]) -> int | None:
    """Live rows from ``Table.files()`` where every file's deletes are known."""
    if any(f["deleted_rows"] is None for f in files):
        return None
    return sum(int(f["rows"]) - int(f["deleted_rows"]) for f in files)


_LS_COLUMNS = ("key", "kind", "version", "files", "rows", "parts", "sources", "stages", "error")


def _ls_entry(ctx: _Context, folder: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": folder, "kind": "unknown"}
    try:
        kind = ctx.kind(folder)
        entry["kind"] = kind or "folder"
        if kind == "table":
            t = Table.open(ctx.store, folder)
            files = t.files().to_pylist()
            entry.update(version=t.version, files=len(files), rows=_live_rows(files))
        elif kind == "pipeline":
            p = Pipeline.open(ctx.store, folder)
            nodes = _nodes(_pipeline_manifest(ctx.store, p))
            entry.update(
                version=p.version,
                sources=[n.name for n in nodes if n.kind == "source"],
                stages=[n.name for n in nodes if n.kind != "source"],
            )
        elif kind == "dataset":
            m = ParquetDatasetStore(ctx.store).read_manifest(folder)
            entry.update(rows=m.row_count, parts=len(m.parts))
    except _DATA_ERRORS as e:
        entry["error"] = _one_line(e)
    return entry


@main.command("ls")
@_url
@click.argument("prefix", default="")
@_common
def ls(url: str, prefix: str, options: tuple[str, ...], as_json: bool) -> None:
    """List the datasets, tables and pipelines below PREFIX.

    \b
    Tables show their version, files and live rows ("unknown" / null where
    a primary-key range delete applies: `pds show` counts those exactly);
    pipelines their version, sources and stages; datasets rows and parts.
    An entry that cannot be read is listed with its error, and the command
    then exits 1 after listing everything.
    Cost: one LIST, then per folder 1-3 requests to tell what it is and the
    reads of a table's or pipeline's latest manifest (and tombstones).
    """
    ctx = _Context(url, options, as_json)
    where = prefix.strip("/")
    if where:
        _check_key(where, "PREFIX")
    found = [_ls_entry(ctx, str(f.path)) for f in ctx.store.list_folders(where)]
    found.sort(key=lambda e: e["key"])
    damaged = [e for e in found if "error" in e]
    if as_json:
        ctx.emit(found)
    else:
        shown = []
        for e in found:
            row: dict[str, Any] = {c: e.get(c) for c in _LS_COLUMNS if any(c in f for f in found)}
            if e["kind"] == "table" and "error" not in e and e.get("rows") is None:
                row["rows"] = "unknown"
            for c in ("sources", "stages"):
                if row.get(c) is not None:
                    row[c] = ", ".join(row[c])
            if "error" in e:
                row["error"] = e["error"].partition(":")[0] + " (below)"
            shown.append(row)
        ctx.emit(shown or f"nothing below {where or 'the root'}", title=f"{url} {where}".strip())
        for e in damaged:
            click.echo(f"{e['key']}: {e['error']}")
    if damaged:
        raise click.exceptions.Exit(1)


def _schema_rows(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"column": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


def _count_live(t: Table) -> int | None:
    """Live rows by reading one column (the primary key) of the whole version."""
    names = t.schema.names
    if not names:
        return None
    column = t.primary_key or names[0]
    return sum(int(b.num_rows) for b in t.scan(columns=[column]))


def _show_table(ctx: _Context, key: str) -> None:
    t = Table.open(ctx.store, key)
    files = t.files().to_pylist()
    stored = sum(f["rows"] for f in files)
    live = _live_rows(files)
    counted = "manifest and tombstones"
    if live is None:
        live = _count_live(t)
        counted = f"reading column {t.primary_key or t.schema.names[0]!r}"
    info: dict[str, Any] = {
        "key": key,
        "kind": "table",
        "version": t.version,
        "primary_key": t.primary_key,
        "files": len(files),
        "rows": live,
        "stored_rows": stored,
        "deleted_rows": None if live is None else stored - live,
        "rows_counted_by": counted,
        "bytes": sum(f["bytes"] for f in files),
    }
    for f in files:
        f["min"] = json.loads(f["min"])
        f["max"] = json.loads(f["max"])
    if ctx.as_json:
        ctx.emit({**info, "schema": _schema_rows(t.schema), "data_files": files})
        return
    ctx.emit({k: ("unknown" if v is None and k.endswith("rows") else v) for k, v in info.items()}, title=key)
    ctx.emit(_schema_rows(t.schema), title="schema")
    brief = ("path", "rows", "deleted_rows", "bytes", "row_groups")
    ctx.emit([{k: ("unknown" if f[k] is None else f[k]) for k in brief} for f in files], title="data files")
    notes = ["--json for statistics"]
    if any(f["deleted_rows"] is None for f in files):
        notes.insert(0, "deleted_rows unknown: a primary-key range delete applies (the total above is exact)")
    for note in notes:
        ctx.console.print(Text(note, style="dim"))


def _show_pipeline(ctx: _Context, key: str) -> None:
    p = Pipeline.open(ctx.store, key)
    m = _pipeline_manifest(ctx.store, p)
    nodes = _nodes(m)
    rows = _node_rows(m)
    created = m.get("timestamp_ms")
    info = {
        "key": key,
        "kind": "pipeline",
        "version": p.version,
        "created_at": None
        if created is None
        else datetime.datetime.fromtimestamp(int(created) / 1000, tz=datetime.UTC).isoformat(),
        "operation": m.get("operation"),
        "sources": sum(n.kind == "source" for n in nodes),
        "stages": sum(n.kind != "source" for n in nodes),
    }
    described = [
        {
            "name": n.name,
            "kind": n.kind,
            "reads": list(n.sources),
            "key": n.key_names,
            "values": [f.name for f in n.stored_values],
            "rows": rows[n.name],
            "parts": len(m.get("nodes", {}).get(n.name, {}).get("content", [])),
        }
        for n in nodes
    ]
    if ctx.as_json:
        schemas = {n.name: _schema_rows(n.public_schema) for n in nodes}
        ctx.emit({**info, "nodes": [{**d, "schema": schemas[str(d["name"])]} for d in described]})
        return
    ctx.emit(info, title=key)
    text = [{k: (", ".join(v) if isinstance(v, list) else v) for k, v in d.items()} for d in described]
    ctx.emit(text, title="sources and stages (scan one with --stage NAME)")


def _show_dataset(ctx: _Context, key: str) -> None:
    ds = ParquetDatasetStore(ctx.store)
    m = ds.read_manifest(key)
    schema = ds.read_schema(key)
    info = {
        "key": key,
        "kind": "dataset",
        "rows": m.row_count,
        "parts": len(m.parts),
        "compression": m.compression,
        "created_at_utc": m.created_at_utc,
    }
    parts = [{"part": p.name, "rows": p.row_count, "bytes": p.size_bytes} for p in (m.part_info or [])]
    if ctx.as_json:
        ctx.emit({**info, "schema": _schema_rows(schema), "parts": parts})
        return
    ctx.emit(info, title=key)
    ctx.emit(_schema_rows(schema), title="schema")
    if parts:
        ctx.emit(parts, title="parts")


@main.command()
@_url
@_key
@_common
def show(url: str, key: str, options: tuple[str, ...], as_json: bool) -> None:
    """Schema, version, files and rows of a dataset or table; a pipeline's
    version and its sources and stages (key and value columns, rows).

    \b
    Rows are live rows and exact. Where a primary-key range delete applies
    (the tombstones do not say which rows it hit), show reads the table's
    primary-key column once, every row group of it: one column's bytes.
    Per file, such deleted_rows are "unknown" (null in --json).
    """
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    {"table": _show_table, "pipeline": _show_pipeline, "dataset": _show_dataset}[ctx.need(key)](ctx, key)


@main.command()
@_url
@_key
@click.option("--limit", type=click.IntRange(min=1), default=None, help="The newest N versions.")
@_common
def history(url: str, key: str, limit: int | None, options: tuple[str, ...], as_json: bool) -> None:
    """A table's or pipeline's versions, newest first.

    \b
    A table: rows and files each version added and removed (--json: every
    field, with the operation's parameters and commit ids).
    A pipeline: each version's changes (per source rows upserted (+) and keys
    deleted (-); per stage rows handed to Produce and rows emitted) and the
    rows of every source and stage after it (1 GET more per version).
    """
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    kind = ctx.need(key)
    if kind == "pipeline":
        p = Pipeline.open(ctx.store, key)
        rows = _pipeline_history(p, limit)
        for r in rows:
            try:
                r["rows"] = _node_rows(_pipeline_manifest(ctx.store, p, int(r["version"])))
            except NotFound:
                r["rows"] = None  # vacuumed meanwhile
        if not as_json:
            rows = [
                {
                    "version": r["version"],
                    "created (UTC)": _when(r["created_at"]),
                    "operation": r["operation"],
                    "changes": _changes_text(r["parameters"] or {}),
                    "rows": ", ".join(f"{n} {c}" for n, c in (r["rows"] or {}).items()),
                }
                for r in rows
            ]
        ctx.emit(rows, title=f"{key} history (pipeline)")
        return
    if kind != "table":
        raise NotFound(f"{key!r} is a dataset: datasets have no history", path=key)
    rows = Table.open(ctx.store, key).history(limit)
    if not as_json:
        rows = [
            {
                "version": r["version"],
                "created (UTC)": _when(r["created_at"]),
                "operation": r["operation"],
                "+rows": r["rows_added"],
                "-rows": "?" if r["rows_deleted"] is None else r["rows_deleted"],
                "+files": r["files_added"],
                "-files": r["files_removed"],
            }
            for r in rows
        ]
    ctx.emit(rows, title=f"{key} history")
    if not as_json and any(r["-rows"] == "?" for r in rows):
        ctx.console.print(Text("-rows ?: a primary-key range delete (pds show counts live rows)", style="dim"))


def _when(v: Any) -> str:
    if isinstance(v, datetime.datetime):
        return v.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if v is None else str(v)


def _check_columns(cols: list[str] | None, schema: pa.Schema) -> None:
    if cols is None:
        return
    unknown = [c for c in cols if c not in schema.names]
    if unknown or not cols:
        raise click.BadParameter(
            f"unknown columns {unknown}; the columns are {', '.join(schema.names)}", param_hint="--columns"
        )


@main.command()
@_url
@_key
@click.option("--columns", default=None, help="Comma-separated columns.")
@click.option("--filter", "filters", multiple=True, metavar="CONDITION", help="A condition (repeatable: all hold).")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Rows to print.")
@click.option(
    "--version",
    "version",
    type=click.IntRange(min=0, max=MAX_VERSION),
    default=None,
    help="A table's or pipeline's version.",
)
@click.option("--stage", default=None, help="A pipeline's source or stage to read (required for a pipeline).")
@_common
def scan(
    url: str,
    key: str,
    columns: str | None,
    filters: tuple[str, ...],
    limit: int,
    version: int | None,
    stage: str | None,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print the first rows of a dataset, table or pipeline stage (deletes
    applied). Only the columns asked for are read, and the filter prunes
    files and row groups (a pipeline stage is read whole, then filtered).
    --json prints one strict JSON object per line (JSON Lines).

    \b
    --filter CONDITION, repeatable (all must hold):
      column op value
      column   a bare name (id) or "double quoted" ("order id")
      op       == = != <> < <= > >=  in  not in  is null  is not null
      value    5  -2.5  1e3  'text'  "text"  bare_word  true  false
               lists [1, 2] or ('DE', 'FR')
    Values take the column's type: id == '5' is 5 on an int column,
    country == DE is 'DE' on a string column; dates and times are quoted
    ISO 8601 text (a time without offset on a zoned column is UTC).

    \b
    Examples:
      pds scan ~/lake events --filter 'id >= 100' --limit 5
      pds scan ~/lake events --filter "country in ('DE','FR')"
      pds scan ~/lake events --filter "ts >= '2024-01-01'" --filter 'v is not null'
      pds scan ~/lake words_pipeline --stage words --columns word
    """
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    cols = [c.strip() for c in columns.split(",")] if columns is not None else None
    kind = ctx.need(key)
    if stage is not None and kind != "pipeline":
        raise click.BadParameter(f"{key!r} is a {kind}, not a pipeline", param_hint="--stage")
    if kind == "table":
        t = Table.open(ctx.store, key)
        schema = t.schema if version is None else t.at(version=version).schema
        _check_columns(cols, schema)
        flt = [typed_filter(f, schema) for f in filters] or None
        reader = t.scan(columns=cols, filter=flt, version=version)
    elif kind == "dataset":
        if version is not None:
            raise click.BadParameter("datasets have no versions", param_hint="--version")
        ds = ParquetDatasetStore(ctx.store)
        schema = ds.read_schema(key)
        _check_columns(cols, schema)
        flt = [typed_filter(f, schema) for f in filters] or None
        reader = ds.iter_batches(key, columns=cols, filter=flt)
    else:
        p = Pipeline.open(ctx.store, key)
        names = [n.name for n in _nodes(_pipeline_manifest(ctx.store, p, version))]
        if stage not in names:
            why = "a pipeline needs --stage" if stage is None else f"no stage or source {stage!r}"
            raise click.BadParameter(f"{why}; choose one of {', '.join(names)}", param_hint="--stage")
        data = p.read(stage, version=version)
        _check_columns(cols, data.schema)
        conditions = [typed_filter(f, data.schema) for f in filters]
        expr = _expression(conditions, data.schema)
        if expr is not None:
            data = data.filter(expr)
        if cols is not None:
            data = data.select(cols)
        reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    batches = []
    seen = 0
    for batch in reader:
        if seen >= limit:
            break
        batches.append(batch.slice(0, limit - seen))
        seen += batches[-1].num_rows
    rows = pa.Table.from_batches(batches, schema=reader.schema).to_pylist()
    if as_json:
        for r in rows:
            click.echo(_dumps(r, indent=None))
        return
    title = key if stage is None else f"{key} {stage}"
    ctx.emit(rows or f"(no rows; columns: {', '.join(reader.schema.names)})", title=title)


@main.command()
@_url
@_key
@_common
def verify(url: str, key: str, options: tuple[str, ...], as_json: bool) -> None:
    """Read every file of a dataset's, table's or pipeline's latest version
    whole and check its SHA-256 against the manifest (a pipeline: every part
    of every source and stage). Exits 1 if any differs or is missing."""
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    kind = ctx.need(key)
    if kind == "table":
        expected = [(f"{key}/{f['path']}", str(f["sha256"])) for f in Table.open(ctx.store, key).manifest["data_files"]]
    elif kind == "pipeline":
        m = _pipeline_manifest(ctx.store, Pipeline.open(ctx.store, key))
        expected = list({f"{key}/{part['name']}": str(part["sha256"]) for part in _pipeline_parts(m)}.items())
    else:
        dm = ParquetDatasetStore(ctx.store).read_manifest(key)
        expected = [(f"{key}/{p.name}", p.sha256) for p in (dm.part_info or [])]
        if not expected:
            raise ValueError("this manifest records no checksums (written by remote-store?)")
    results = []
    with Progress(console=Console(stderr=True), transient=True, disable=as_json) as progress:
        task = progress.add_task("verifying", total=len(expected))
        for path, sha in expected:
            try:
                ok = hashlib.sha256(ctx.store.read_bytes(path)).hexdigest() == sha
                status = "ok" if ok else "CHECKSUM MISMATCH"
            except NotFound:
                status = "MISSING"
            results.append({"file": path, "status": status})
            progress.advance(task)
    ctx.emit(results, title=f"{key}: {len(results)} files")
    if any(r["status"] != "ok" for r in results):
        raise click.exceptions.Exit(1)


@main.command()
@_url
@_key
@click.option("--target-file-size", type=click.IntRange(min=1), default=None, help="Bytes per new file at most.")
@click.option("--min-deleted-fraction", type=click.FloatRange(0, 1), default=0.5, show_default=True)
@_common
def compact(
    url: str,
    key: str,
    target_file_size: int | None,
    min_deleted_fraction: float,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Rewrite a table's thinned and small files; coalesce its tombstones."""
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    kind = ctx.need(key)
    if kind != "table":
        raise ValueError(f"{key!r} is a {kind}: only tables are compacted")
    t = Table.open(ctx.store, key)
    before = t.version
    with Progress(console=Console(stderr=True), transient=True, disable=as_json) as progress:
        progress.add_task("compacting", total=None)
        after = t.compact(target_file_size=target_file_size, min_deleted_fraction=min_deleted_fraction)
    info: dict[str, Any] = {"key": key, "version_before": before, "version": after}
    if after != before:
        info.update(t.history(1)[0]["parameters"])
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
    (a table's data/, tombstone/, manifest/, _latest_manifest; a pipeline's
    nodes/*/{content,mappings,update}/, manifest/, _latest_manifest), never
    a dataset, table or pipeline stored under KEY. Nothing younger than
    --min-age goes.
    """
    window, floor = parse_duration(retain), parse_duration(min_age)
    key = _check_key(key)
    ctx = _Context(url, options, as_json)
    target = Pipeline.open(ctx.store, key) if ctx.kind(key) == "pipeline" else Table.open(ctx.store, key)
    keys = target.vacuum(retain=window, dry_run=not apply, keep_versions=keep_versions, min_age=floor)
    if as_json:
        ctx.emit({"applied": apply, "removed" if apply else "would_remove": keys})
        return
    verb = "removed" if apply else "would remove (dry run; --apply to delete)"
    ctx.emit([{"key": k} for k in keys] or f"nothing to remove ({key})", title=f"{len(keys)} objects {verb}")


if __name__ == "__main__":  # pragma: no cover
    main()
