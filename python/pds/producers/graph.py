"""The stage graph: sources, stages and merges, their keys and schemas, and
how they are stored (in every pipeline manifest) and described to the Rust
engine."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pds.producers.errors import GraphMismatch

__all__ = ["SOURCE_PREFIX", "Node", "key_schema", "value_schema"]

#: A stage's source key columns are stored under this prefix.
SOURCE_PREFIX = "__pds_src."
_NAME = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,127}$")


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a node name must be 1-128 of [A-Za-z0-9_.-], not starting with '.': {name!r}")
    return name


def _key_type_ok(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
    )


def _fields(spec: object, what: str) -> list[pa.Field]:
    if isinstance(spec, pa.Schema):
        fields = list(spec)
    elif isinstance(spec, Mapping):
        fields = []
        for n, t in spec.items():
            if not isinstance(n, str):
                raise TypeError(f"{what}: column names must be str, got {n!r}")
            if isinstance(t, pa.Field):
                fields.append(t.with_name(n))
            elif isinstance(t, pa.DataType):
                fields.append(pa.field(n, t))
            else:
                raise TypeError(f"{what}: column {n!r} needs a pyarrow DataType, got {type(t).__name__}")
    elif isinstance(spec, Sequence) and all(isinstance(f, pa.Field) for f in spec):
        fields = list(spec)
    else:
        raise TypeError(f"{what} must be a pyarrow Schema or a {{name: pyarrow type}} dict, got {type(spec).__name__}")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names a column twice: {names}")
    for f in fields:
        if f.name.startswith("__pds"):
            raise ValueError(f"{what}: column names starting with '__pds' are reserved: {f.name!r}")
    return [f.remove_metadata() for f in fields]


def key_schema(spec: object) -> pa.Schema:
    """A key: at least one column of an orderable type; never null."""
    fields = _fields(spec, "key")
    if not fields:
        raise ValueError("a key needs at least one column")
    for f in fields:
        if not _key_type_ok(f.type):
            raise TypeError(
                f"key column {f.name!r} has type {f.type}: keys are integers, strings, booleans, dates, "
                "times, timestamps or durations"
            )
    return pa.schema([f.with_nullable(False) for f in fields])


def value_schema(spec: object) -> pa.Schema:
    return pa.schema(_fields(spec, "value"))


def schema_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_of_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclass
class Node:
    """A source, stage or merge of a :class:`pds.Pipeline`; pass it as a
    stage's source or a merge's feeder. ``key`` and ``value`` are the
    declared schemas; a value column named like a key column is that key."""

    name: str
    kind: str
    key: pa.Schema
    value: pa.Schema
    sources: tuple[str, ...] = ()
    batched: bool = False
    fn: Callable[..., Any] | None = field(default=None, repr=False)
    #: The first source's key (a stage's source key), for the physical schema.
    source_key: pa.Schema | None = None

    @property
    def key_names(self) -> list[str]:
        return list(self.key.names)

    @property
    def stored_values(self) -> list[pa.Field]:
        """Value columns that are not key columns (stored once)."""
        keys = set(self.key.names)
        return [f for f in self.value if f.name not in keys]

    @property
    def public_schema(self) -> pa.Schema:
        """Key then stored values: what read() returns."""
        return pa.schema(list(self.key) + self.stored_values)

    @property
    def physical_schema(self) -> pa.Schema:
        if self.kind != "stage":
            return self.public_schema
        assert self.source_key is not None
        src = [pa.field(SOURCE_PREFIX + f.name, f.type, nullable=False) for f in self.source_key]
        return pa.schema(list(self.key) + src + self.stored_values)

    def check_value_keys(self) -> None:
        """A value column named like a key column must have its type."""
        for f in self.value:
            if f.name in self.key.names and self.key.field(f.name).type != f.type:
                raise TypeError(
                    f"{self.kind} {self.name!r}: value column {f.name!r} is a key column of type "
                    f"{self.key.field(f.name).type}, declared as {f.type}"
                )

    def describe(self) -> dict[str, Any]:
        """How the graph is stored in every manifest."""
        return {
            "name": self.name,
            "kind": self.kind,
            "sources": list(self.sources),
            "key": schema_b64(self.key),
            "value": schema_b64(self.value),
            "schema": schema_b64(self.physical_schema),
            "batched": self.batched,
        }

    @classmethod
    def from_description(cls, d: Mapping[str, Any]) -> Node:
        """A node as stored (no Produce: readable, not updatable)."""
        try:
            node = cls(
                name=check_name(d["name"]),
                kind=str(d["kind"]),
                key=schema_of_b64(d["key"]),
                value=schema_of_b64(d["value"]),
                sources=tuple(str(s) for s in d["sources"]),
                batched=bool(d.get("batched", False)),
            )
            if node.kind == "stage":
                phys = schema_of_b64(d["schema"])
                node.source_key = pa.schema(
                    [f.with_name(f.name[len(SOURCE_PREFIX) :]) for f in phys if f.name.startswith(SOURCE_PREFIX)]
                )
        except (KeyError, TypeError, ValueError, pa.ArrowInvalid) as e:
            raise ValueError(f"stored graph node is damaged: {e}") from e
        if node.kind not in ("source", "stage", "merge"):
            raise ValueError(f"stored graph node {node.name!r} has unknown kind {node.kind!r}")
        return node

    def check_same(self, stored: Node) -> None:
        """``GraphMismatch`` naming what differs from the stored node."""
        diffs = []
        if self.kind != stored.kind:
            diffs.append(f"kind {stored.kind} -> {self.kind}")
        if self.sources != stored.sources:
            diffs.append(f"sources {list(stored.sources)} -> {list(self.sources)}")
        if not self.key.equals(stored.key):
            diffs.append(f"key {_show(stored.key)} -> {_show(self.key)}")
        if not self.value.equals(stored.value):
            diffs.append(f"value {_show(stored.value)} -> {_show(self.value)}")
        if (
            self.kind == "stage"
            and stored.source_key is not None
            and self.source_key is not None
            and [f.type for f in self.source_key] != [f.type for f in stored.source_key]
        ):
            diffs.append("source key types")
        if diffs:
            raise GraphMismatch(
                f"{self.kind} {self.name!r} differs from the one the pipeline stores: {'; '.join(diffs)}. "
                "A stored node keeps its sources and schemas; create a new pipeline (or a node under a new name)"
            )


def _show(schema: pa.Schema) -> str:
    return "{" + ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema) + "}"
