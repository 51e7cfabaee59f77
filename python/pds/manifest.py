"""``DatasetManifest``: RFC-0008's manifest, plus the facts pds records.

``DatasetManifest`` subclasses ``remote_store.ext.parquet.DatasetManifest``:
the RFC's eight fields come first and mean the same, ``to_json`` writes the
same canonical JSON (sorted keys, 2-space indent, ``None`` left out), and
``from_json`` validates with the same messages. pds adds two optional keys
that remote-store's reader ignores:

- ``arrow_schema``: the full Arrow schema as a base64 Arrow IPC stream, as the
  ODF ``SetDataSchema`` event stores it, so the schema is known without
  opening a data file;
- ``part_info``: row count, byte size and SHA-256 for every part.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Any

import pyarrow as pa
from remote_store.ext.parquet import DatasetManifest as _RemoteStoreManifest

from pds.errors import ManifestCorrupted

__all__ = ["DatasetManifest", "PartInfo", "schema_from_ipc", "schema_hash", "schema_to_ipc"]


def schema_hash(schema: pa.Schema) -> str:
    """RFC-0008's schema hash: the first 16 hex chars of SHA-256 of ``schema.to_string()``."""
    return hashlib.sha256(schema.to_string().encode("utf-8")).hexdigest()[:16]


def schema_to_ipc(schema: pa.Schema) -> str:
    """The schema as a base64 Arrow IPC stream holding no batches."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema):
        pass
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def schema_from_ipc(text: str) -> pa.Schema:
    """Inverse of :func:`schema_to_ipc`.

    The text is parsed in Rust, which verifies the flatbuffer and contains
    any failure, so a damaged or hostile schema raises ``ValueError`` with
    the reason, never a crash.
    """
    from pds import _core

    schema: pa.Schema = _core.schema_from_ipc(text)
    return schema


@dataclasses.dataclass(frozen=True)
class PartInfo:
    """Facts about one part file, recorded by pds at write time."""

    name: str
    row_count: int
    size_bytes: int
    sha256: str
    footer_bytes: int | None = None
    """The bytes after the part's last row group (page indexes, footer and
    trailer): a reader fetches them with one GET. ``None`` where not recorded."""


_MAX_ROWS = 2**63 - 1


def _corrupted(message: str) -> ManifestCorrupted:
    return ManifestCorrupted(message, reason=message)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_part_info(raw: object, parts: list[str]) -> list[PartInfo]:
    if not isinstance(raw, list):
        raise _corrupted("Field 'part_info' must be a list")
    out: list[PartInfo] = []
    for item in raw:
        if not isinstance(item, dict):
            raise _corrupted("Entries of 'part_info' must be objects")
        name, rows, size, sha = item.get("name"), item.get("row_count"), item.get("size_bytes"), item.get("sha256")
        if not (
            isinstance(name, str)
            and isinstance(rows, int)
            and _is_int(rows)
            and 0 <= rows <= _MAX_ROWS
            and isinstance(size, int)
            and _is_int(size)
            and size >= 0
            and isinstance(sha, str)
        ):
            raise _corrupted("Entries of 'part_info' need name: str, row_count: int, size_bytes: int, sha256: str")
        footer = item.get("footer_bytes")
        if footer is not None and not (_is_int(footer) and 12 <= footer <= size):
            raise _corrupted(f"part_info of {name!r} states a footer of {footer!r} bytes in a part of {size}")
        out.append(PartInfo(name=name, row_count=rows, size_bytes=size, sha256=sha, footer_bytes=footer))
    if [p.name for p in out] != parts:
        raise _corrupted("Field 'part_info' does not list the same parts as 'parts'")
    return out


@dataclasses.dataclass(frozen=True)
class DatasetManifest(_RemoteStoreManifest):
    """Canonical manifest for a Parquet dataset snapshot (RFC-0008, PDS-004).

    Attributes:
        dataset_key: The store-relative key the dataset lives under.
        parts: Relative file names of the parts, in order.
        row_count: Total rows across all parts.
        schema_hash: First 16 hex chars of SHA-256 of pyarrow's ``schema.to_string()``.
        compression: The Parquet codec the parts were written with.
        created_at_utc: ISO 8601 time of writing.
        run_id: Optional pipeline run identifier.
        metadata: Optional caller key/value pairs.
        arrow_schema: pds: the Arrow schema as a base64 IPC stream (``None``
            in manifests written by remote-store).
        part_info: pds: rows, bytes and SHA-256 per part (``None`` likewise).
    """

    arrow_schema: str | None = None
    part_info: list[PartInfo] | None = None

    @classmethod
    def from_json(cls, text: str) -> DatasetManifest:
        """Parse manifest JSON written by pds or by remote-store.

        Raises:
            ManifestCorrupted: invalid JSON, a missing or mistyped field, a part
                name that is not a plain file name, or unreadable pds keys.
        """
        try:
            base = _RemoteStoreManifest.from_json(text)
            data: dict[str, Any] = json.loads(text)
        except RecursionError:
            raise _corrupted("Manifest JSON is nested too deeply") from None
        if not base.parts:
            raise _corrupted("Manifest lists no parts (an empty dataset has one empty part)")
        if len(set(base.parts)) != len(base.parts):
            raise _corrupted("Manifest lists a part twice")
        for part in base.parts:
            if not part or part in (".", "..") or any(c in part for c in "/\\\0"):
                raise _corrupted(f"Part name {part!r} is not a plain file name inside the dataset")
        if not 0 <= base.row_count <= _MAX_ROWS:
            raise _corrupted(f"Field 'row_count' is {base.row_count}; it must be from 0 to 2**63 - 1")
        arrow_schema = data.get("arrow_schema")
        if arrow_schema is not None:
            if not isinstance(arrow_schema, str):
                raise _corrupted("Field 'arrow_schema' must be a string")
            try:
                schema_from_ipc(arrow_schema)
            except (ValueError, pa.ArrowException) as exc:
                raise _corrupted(f"Field 'arrow_schema' is not a base64 Arrow IPC schema: {exc}") from exc
        raw_info = data.get("part_info")
        part_info = None if raw_info is None else _parse_part_info(raw_info, base.parts)
        if part_info is not None and sum(p.row_count for p in part_info) != base.row_count:
            raise _corrupted(
                f"Field 'row_count' is {base.row_count}, but 'part_info' row counts add up to "
                f"{sum(p.row_count for p in part_info)}"
            )
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(_RemoteStoreManifest)}
        return cls(**fields, arrow_schema=arrow_schema, part_info=part_info)

    def to_json(self) -> str:
        """The manifest as canonical JSON: sorted keys, 2-space indent, ``None``
        fields left out (in ``part_info`` entries too), as pds's Rust core
        writes it and remote-store reads it."""
        data = dataclasses.asdict(self)
        if data.get("part_info") is not None:
            data["part_info"] = [{k: v for k, v in p.items() if v is not None} for p in data["part_info"]]
        return json.dumps({k: v for k, v in data.items() if v is not None}, sort_keys=True, indent=2)

    def schema(self) -> pa.Schema | None:
        """The Arrow schema recorded in the manifest, or ``None`` if it has none."""
        return None if self.arrow_schema is None else schema_from_ipc(self.arrow_schema)
