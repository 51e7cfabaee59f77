"""Every Python example of the README and the docs runs as written, and the
format pages list every field pds writes.

Each ```python block of README.md and docs/**/*.md is run on its own, in a
fresh working directory. A comment on the line just before a block changes
how it runs:

- ``<!-- needs: spark -->``: the block gets ``spark``, the session's local
  Spark (the ``spark_session`` fixture);
- ``<!-- no-run: <why> -->``: the block is only compiled, never run. Keep it
  for snippets that need a cluster or credentials, and say which.

``json`` blocks must parse.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import pds

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(
    r"(?:<!--\s*(?P<marker>[a-z-]+)(?::\s*(?P<arg>.*?))?\s*-->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```", re.S
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    marker: str | None
    arg: str | None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(lang: str) -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            if m["lang"] == lang:
                line = text.count("\n", 0, m.start("code")) + 1
                found.append(Block(page, line, lang, m["code"], m["marker"], m["arg"]))
    return found


PYTHON = blocks("python")
JSON = blocks("json")


def test_every_page_is_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/guides/tables.md", "docs/concepts/format-table.md"} <= names
    assert len(PYTHON) >= 10


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # Blocks start at their line in the page, so a traceback points into the page.
    code = compile("\n" * (block.line - 1) + block.code, str(block.page), "exec")
    if block.marker == "no-run":
        assert block.arg, f"{block.id}: a no-run block must say why: <!-- no-run: needs ... -->"
        return
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    if block.marker == "needs":
        assert block.arg == "spark", f"{block.id}: unknown need {block.arg!r}"
        namespace["spark"] = request.getfixturevalue("spark_session")
    else:
        assert block.marker is None, f"{block.id}: unknown marker {block.marker!r}"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(code, namespace)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("block", JSON, ids=[b.id for b in JSON])
def test_json_block_parses(block: Block) -> None:
    json.loads(block.code)


def documented_fields(page: str) -> set[str]:
    """Every name in backticks in the first column of a table on *page*."""
    text = (ROOT / "docs" / "concepts" / page).read_text()
    fields: set[str] = set()
    for row in re.findall(r"^\| ([^|]*) \|", text, flags=re.M):
        fields.update(re.findall(r"`([a-z_0-9]+)`", row))
    return fields


def stored_json(store_root: Path, key: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((store_root / key).read_text())
    return loaded


def test_format_pages_list_every_field(tmp_path: Path) -> None:
    store = pds.open_store(str(tmp_path))
    pds.ParquetDatasetStore(store).write_dataset(pa.table({"x": [1]}), "dset", run_id="r", metadata={"a": "b"})
    table = pds.Table.create(
        store, "events", data=pa.table({"id": [1, 2], "c": ["a", "b"]}), primary_key="id", formats=["delta"]
    )
    table.delete([("c", "==", "a")])
    p = pds.Pipeline.create(store, "pipe", workers=1)
    src = p.source("src", key={"k": pa.int64()}, value={"v": pa.int64()})

    @p.stage("st", sources=[src], key={"v": pa.int64()}, value={"n": pa.int64()})
    def st(key: Any, rows: Any) -> Any:
        for r in rows:
            yield r["v"], {"n": 1}

    p.update({"src": pa.table({"k": [1, 2], "v": [5, 6]})})
    p.update({"src": pa.table({"k": [1], "v": [7]})})

    dataset = stored_json(tmp_path, "dset/manifest.json")
    fields = documented_fields("format-dataset.md")
    assert set(dataset) <= fields
    text = (ROOT / "docs" / "concepts" / "format-dataset.md").read_text()
    for name in dataset["part_info"][0]:
        assert f"`{name}`" in text, name

    fields = documented_fields("format-table.md")
    root = stored_json(tmp_path, "events/manifest/v00000001.json")
    pointer = stored_json(tmp_path, "events/_latest_manifest")
    segment = stored_json(tmp_path, "events/" + root["segments"][0]["path"])
    tombstone = stored_json(tmp_path, "events/" + root["operation_parameters"]["tombstone"])
    assert root["format"] == "pds-table/3"
    assert set(root) | set(pointer) | set(root["segments"][0]) <= fields
    text = (ROOT / "docs" / "concepts" / "format-table.md").read_text()
    for name in [
        *root["schema"],
        *segment["files"][0],
        *tombstone,
        *tombstone["entries"][0],
        segment["format"],
        tombstone["format"],
    ]:
        assert f"`{name}`" in text, name

    fields = documented_fields("format-pipeline.md")
    manifest = stored_json(tmp_path, "pipe/manifest/v00000002.json")
    assert manifest["format"] == "pds-pipeline/2"
    assert set(manifest) <= fields
    node = manifest["nodes"]["st"]
    assert set(node) | set(node["content"][0]) <= fields
    text = (ROOT / "docs" / "concepts" / "format-pipeline.md").read_text()
    for name in [*node["update"], *manifest["graph"]["nodes"][0]]:
        assert f"`{name}`" in text, name
