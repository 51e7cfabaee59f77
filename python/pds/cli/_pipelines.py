"""Reading a pipeline's manifests for the commands: nodes, rows per node, parts,
a version's changes as text."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pds.producers._split import state_files
from pds.producers.graph import Node
from pds.producers.pipeline import Pipeline


def _pipeline_manifest(p: Pipeline, version: int | None = None) -> dict[str, Any]:
    """The manifest of *version*, as the core read and checked it (default:
    the one *p* loaded, no I/O; another version: 1 GET)."""
    return p._manifest if version is None else p._at(version)


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
    """Every file manifest *m* references: each part's, and its patches'."""
    for state in m.get("nodes", {}).values():
        yield from state_files(state)
