"""The ``--filter`` grammar: tokenizer, recursive-descent parser, values typed by
the column, and the same conditions as a ``pyarrow.compute`` expression."""

from __future__ import annotations

import datetime
import decimal
import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple, NoReturn

import click
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from pds._filters import exact_conditions

FILTER_SYNTAX = """\
syntax: column op value   (repeat --filter: all must hold)
  column   a bare name (id) or "double quoted" ("order id")
  op       == = != <> < <= > >=   in   not in   is null   is not null
  value    5  -2.5  1e3  'text'  "text"  bare_word  true  false
           lists: [1, 2]  or  ('DE', 'FR')
  values take the column's type: id == '5' is 5 on an int column;
  numbers use the digits 0-9 and are exact on integer and decimal columns;
  dates and times are quoted ISO text: ts >= '2024-01-01T08:00:00Z'
examples: 'id >= 100'  "country in ('DE','FR')"  'name == "Ann"'  'v is not null'"""

_COMPARE = {"==": "==", "=": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
# Numbers are written with ASCII digits only (Python's int() and Decimal()
# would take any script's digits: ``id == \u0661`` must not mean 1).
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?")
_FLOAT_WORDS = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
# |x| beyond 10**100 or below 10**-100 (not 0) compares with every integer
# and decimal column (at most 76 digits, scale at most 76) as its clamp does.
_CLAMP = 100
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
            # int(Decimal) rather than int(str): no limit on digits.
            return _Literal(int(decimal.Decimal(t.text)) if is_int else float(t.text), t.text, False)
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


def _exact(text: str) -> decimal.Decimal | None:
    """*text*, a number in ASCII digits (:data:`_NUMBER`), as an exact
    ``Decimal``; one too large or too small for any integer or decimal
    column clamped to ±10**101 or ±10**-101, which compare alike (so that
    ``1e999999999`` costs no giant integer); ``None`` if *text* is no such
    number."""
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    exponent = (m.group(1) or "0").lstrip("+-").lstrip("0")
    if len(exponent) > 9:  # beyond what Decimal parses
        d = decimal.Decimal(text[: m.start(1) - 1] or "0")
        if d == 0:
            return d
        large = not m.group(1).startswith("-")
    else:
        d = decimal.Decimal(text)
        if d == 0 or -_CLAMP <= d.adjusted() <= _CLAMP:
            return d
        large = d.adjusted() > _CLAMP
    return decimal.Decimal(1).scaleb(_CLAMP + 1 if large else -_CLAMP - 1).copy_sign(d)


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
    text = lit.raw if not lit.quoted else str(v).strip()
    if pat.is_integer(t) or pat.is_decimal(t):
        # Exactly as written (3.0000000000000000001 is not 3.0): the
        # library's exact filters then compare it with the column's values.
        d = _exact(text)
        if d is None:
            bad(" (a number in the digits 0-9, e.g. 42, -2.5 or 1e3)")
        return int(d) if pat.is_integer(t) and d == d.to_integral_value() else d
    if pat.is_floating(t):
        # The nearest double, as a float literal is in SQL and Python.
        if _NUMBER.fullmatch(text) is None and _FLOAT_WORDS.fullmatch(text) is None:
            bad(" (a number in the digits 0-9, e.g. 42, -2.5 or 1e3, or nan, inf)")
        return float(text)
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
