"""Small helpers shared by the tests."""

from __future__ import annotations

import copy
import hashlib
import io
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from remote_store import Store


def declare_words(p: Any) -> Any:
    """Declare the tests' small pipeline on *p* (a ``pds.Pipeline``) and return
    it: a source ``lines`` (``n`` -> ``text``) and a stage ``words`` that splits
    each line into its words (``word`` -> ``n``). The pipeline fixture of
    ``fixtures/make_old_formats.py`` was built with it."""
    lines = p.source("lines", key={"n": pa.int64()}, value={"text": pa.string()})

    @p.stage("words", sources=[lines], key={"word": pa.string()}, value={"n": pa.int64()})
    def words(n, lines):  # type: ignore[no-untyped-def]
        for line in lines:
            for w in line["text"].split():
                yield w, n

    return p


def sample(n: int = 1000, offset: int = 0) -> pa.Table:
    """A deterministic table with int, string, float, timestamp and nullable columns."""
    ids = list(range(offset, offset + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i % 97}" for i in ids], pa.string()),
            "price": pa.array([i * 0.25 for i in ids], pa.float64()),
            "ts": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us", tz="UTC")),
            "maybe": pa.array([None if i % 5 == 0 else i for i in ids], pa.int32()),
        }
    )


def files(store: Store, prefix: str = "") -> list[str]:
    """Every file key below *prefix*, sorted."""
    if prefix and not store.exists(prefix):
        return []
    return sorted(str(f.path) for f in store.list_files(prefix, recursive=True))


def pipeline_files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every file a pipeline manifest names: each node's parts (content,
    key-mappings, update rows and deleted keys) and their patches' files."""
    out: list[dict[str, Any]] = []
    for node in manifest["nodes"].values():
        update = node.get("update") or {}
        for part in [
            *node.get("content", []),
            *node.get("mappings", []),
            *update.get("rows", []),
            *update.get("deleted", []),
        ]:
            out.append(part)
            for patch in part.get("patches") or []:
                out.extend(f for f in (patch.get("rows"), patch.get("deleted")) if f)
    return out


# -- table manifests as stored: a sealed root and its segment objects ---------------------


def seal(content: dict[str, Any]) -> bytes:
    """A root manifest as pds writes it: pretty JSON (sorted keys) whose
    top-level ``checksum`` is the SHA-256 of these bytes with its digits all ``0``."""
    body = {k: v for k, v in content.items() if k != "checksum"}
    body["checksum"] = "0" * 64
    raw = json.dumps(body, sort_keys=True, indent=2, ensure_ascii=False).encode()
    line = b'\n  "checksum": "'
    return raw.replace(line + b"0" * 64, line + hashlib.sha256(raw).hexdigest().encode())


def table_root(store: Store, table: str, version: int | None = None) -> dict[str, Any]:
    """The root manifest of *version* of the table at *table* as stored (the
    pointer's version when ``None``): no ``data_files`` or ``tombstones``."""
    if version is None:
        version = int(json.loads(store.read_bytes(f"{table}/_latest_manifest"))["version"])
    return dict(json.loads(store.read_bytes(f"{table}/manifest/v{version:08d}.json")))


def table_segment(store: Store, table: str, ref: dict[str, Any]) -> dict[str, Any]:
    """The segment object a root's segment reference *ref* names, checked
    against the SHA-256 the reference records."""
    raw = store.read_bytes(f"{table}/{ref['path']}")
    assert hashlib.sha256(raw).hexdigest() == ref["sha256"], f"{ref['path']} differs from its reference"
    body = dict(json.loads(raw))
    assert body["format"] == "pds-table-segment/1"
    return body


def table_manifest(store: Store, table: str, version: int | None = None) -> dict[str, Any]:
    """A stored manifest expanded from its segments, as ``Table.manifest``
    gives it: the root plus ``data_files`` and ``tombstones`` (in segment
    order; a tombstone listed by several segments is one reference naming
    the files of all of them). Reads an old inline manifest as it is."""
    m = table_root(store, table, version)
    if "segments" not in m:
        return m
    data_files: list[dict[str, Any]] = []
    tombstones: list[dict[str, Any]] = []
    at: dict[str, int] = {}
    for ref in m["segments"]:
        body = table_segment(store, table, ref)
        data_files.extend(body["files"])
        for t in body.get("tombstones", []):
            if t["path"] in at:
                tombstones[at[t["path"]]]["files"].extend(t["files"])
            else:
                at[t["path"]] = len(tombstones)
                tombstones.append(copy.deepcopy(t))
    return {**m, "data_files": data_files, "tombstones": tombstones}


def segment_bytes(body: dict[str, Any]) -> bytes:
    """A segment object's bytes: compact JSON, as pds writes it."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def rewrite_segment(
    store: Store,
    table: str,
    version: int,
    index: int,
    edit: Callable[[dict[str, Any]], Any],
    *,
    recount: bool = False,
) -> None:
    """Apply *edit* to the body of segment *index* of *version* (in place),
    write it as a new segment object (other versions may share the old one),
    point the root's reference at it with its SHA-256 (with *recount*, also
    its file, row, byte and tombstone counts) and reseal the root: what a
    buggy writer could produce, past the checksums."""
    root = table_root(store, table, version)
    ref = root["segments"][index]
    body = table_segment(store, table, ref)
    edit(body)
    raw = segment_bytes(body)
    ref["sha256"] = hashlib.sha256(raw).hexdigest()
    ref["path"] = f"segment/{ref['sha256'][:32]}.json"
    if recount:
        ref["file_count"] = len(body["files"])
        ref["total_rows"] = sum(f["total_rows"] for f in body["files"])
        ref["size_bytes"] = sum(f["size_bytes"] for f in body["files"])
        ref["tombstone_count"] = len(body["tombstones"])
    store.write(f"{table}/{ref['path']}", raw, overwrite=True)
    store.write(f"{table}/manifest/v{version:08d}.json", seal(root), overwrite=True)


def run_together(argvs: list[list[str]], timeout: float = 600) -> list[str]:
    """Run one process per argv, started together: each prints ``ready``,
    then waits for a line on stdin before it works. Returns their stdouts,
    after checking that each exited with 0. Whatever fails, every child
    is killed and waited for before this returns or raises."""
    import subprocess

    procs: list[subprocess.Popen[str]] = []
    try:
        for argv in argvs:
            procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            assert p.returncode == 0, out
            outs.append(out)
        return outs
    finally:
        # On a failed check or a timeout, no child outlives the test.
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def recorded_sources(monkeypatch: Any) -> list[Any]:
    """The source runners update_pipeline creates from now on (their stats)."""
    return _recorded(monkeypatch, "SparkSources")


def recorded_stages(monkeypatch: Any) -> list[Any]:
    """The stage runners update_pipeline creates from now on (their stats, their job groups)."""
    return _recorded(monkeypatch, "_SparkStages")


def _recorded(monkeypatch: Any, runner: str) -> list[Any]:
    """The instances of ``pds.spark._pipeline_update``'s class *runner* made from now on."""
    from pds.spark import _pipeline_update as pu

    made: list[Any] = []
    base = getattr(pu, runner)

    class Recording(base):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(pu, runner, Recording)
    return made


def kill_while_held(proxy: Any, method: str, path: str, argv: list[str], check: Any = None, **rule: Any) -> Any:
    """Run *argv* and SIGKILL it while the fault proxy holds its first
    *method* request to *path* (a regex; further rule options in *rule*,
    ``query=`` say), after calling *check* (if given) while it is held.
    The held request is then failed with a 503 that nobody reads. Returns
    the rule (``exhausted`` once it held one)."""
    import signal
    import subprocess
    import threading

    held, release = threading.Event(), threading.Event()

    def hold(_entry: Any) -> None:
        held.set()
        release.wait(60)

    applied = proxy.fail(method, path, status=503, times=1, before=hold, **rule)
    proc = subprocess.Popen(argv)
    try:
        assert held.wait(120), f"the process never sent {method} {path}"
        if check is not None:
            check()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        release.set()
        proc.kill()
    return applied


def chunk_ranges(raw: bytes) -> list[tuple[int, int, range]]:
    """Each column chunk of the Parquet file *raw*, in file order: its row group,
    its column's index and the range of its bytes (its dictionary page included)."""
    meta = pq.ParquetFile(io.BytesIO(raw)).metadata
    out = []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            start = col.dictionary_page_offset or col.data_page_offset
            out.append((g, c, range(start, start + col.total_compressed_size)))
    return out


def garble_chunks(raw: bytearray, keep: Callable[[int, int], bool]) -> None:
    """Overwrite with 0xff the bytes of each column chunk of the Parquet file *raw*
    whose row group and column index *keep* selects."""
    for g, c, r in chunk_ranges(bytes(raw)):
        if keep(g, c):
            raw[r.start : r.stop] = b"\xff" * len(r)
