"""What the commands print: strict JSON (RFC 8259) or rich tables."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text


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


class _Output:
    """Prints a command's results: strict JSON with ``--json``, else rich tables."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = Console()

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


def _when(v: Any) -> str:
    if isinstance(v, datetime.datetime):
        return v.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if v is None else str(v)
