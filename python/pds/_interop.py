"""A committed dataset as a ``pyarrow.dataset.Dataset``, for other readers.

``pyarrow.dataset.dataset(folder)`` cannot read a pds dataset folder: it
trips over ``manifest.json`` and ``_SUCCESS``, and it would read parts that
no commit lists (a killed writer's). :func:`pyarrow_dataset` builds a
dataset over exactly the parts of the committed manifest, with the
manifest's schema, on a pyarrow filesystem that reaches the same objects.
DuckDB (``duckdb.arrow(ds)``) and polars (``pl.scan_pyarrow_dataset(ds)``)
read it too.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
from remote_store import CapabilityNotSupported, Store

from pds.backend import ObjectStoreBackend

__all__ = ["pyarrow_dataset"]


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _s3_filesystem(options: dict[str, str]) -> pafs.S3FileSystem:
    def pick(*names: str) -> str | None:
        for n in names:
            if n in options:
                return options[n]
        return None

    endpoint = pick("endpoint", "endpoint_url", "aws_endpoint", "aws_endpoint_url")
    kwargs: dict[str, Any] = {}
    if endpoint:
        parsed = urllib.parse.urlparse(endpoint)
        kwargs["endpoint_override"] = parsed.netloc or endpoint
        kwargs["scheme"] = parsed.scheme or "https"
    region = pick("region", "aws_region", "aws_default_region")
    if region:
        kwargs["region"] = region
    key, secret = pick("access_key_id", "aws_access_key_id"), pick("secret_access_key", "aws_secret_access_key")
    if key and secret:
        kwargs["access_key"], kwargs["secret_key"] = key, secret
        token = pick("session_token", "aws_session_token", "token", "aws_token")
        if token:
            kwargs["session_token"] = token
    if _truthy(pick("skip_signature", "aws_skip_signature") or ""):
        kwargs["anonymous"] = True
    if _truthy(pick("virtual_hosted_style_request", "aws_virtual_hosted_style_request") or ""):
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)


def _filesystem(store: Store, key: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem reaching *store*'s objects, and the path of its root
    (empty if the store's native paths are already absolute)."""
    try:
        backend = store.unwrap(ObjectStoreBackend)
    except CapabilityNotSupported:
        backend = None
    if backend is not None:
        url = urllib.parse.urlparse(backend.url)
        if url.scheme == "file":
            return pafs.LocalFileSystem(), urllib.parse.unquote(url.path).rstrip("/")
        if url.scheme in ("s3", "s3a"):
            root = f"{url.netloc}/{urllib.parse.unquote(url.path).strip('/')}".rstrip("/")
            return _s3_filesystem(backend.options), root
        raise CapabilityNotSupported(
            f"pyarrow cannot reach a {url.scheme}:// store; read the dataset with pds "
            "(read_dataset / iter_batches) instead",
            capability="pyarrow_dataset",
        )
    # Another backend: a local folder if its native paths are local files
    # (remote-store's LocalBackend), judged by the dataset's _SUCCESS marker.
    native = store.native_path(f"{key}/_SUCCESS")
    if os.path.isabs(native) and os.path.isfile(native):
        return pafs.LocalFileSystem(), ""
    raise CapabilityNotSupported(
        "pyarrow cannot reach this store's backend; use a pds store (open_store) on file:// or s3://, "
        "or remote-store's LocalBackend",
        capability="pyarrow_dataset",
    )


def pyarrow_dataset(store: Store, key: str, parts: Sequence[str], schema: pa.Schema) -> pads.Dataset:
    """The committed dataset at *key* (checked by the caller) of *store*: its
    *parts*, read with *schema* through pyarrow's own filesystem. See
    :meth:`pds.ParquetDatasetStore.to_pyarrow_dataset`."""
    filesystem, root = _filesystem(store, key)
    # On remote-store's LocalBackend, native_path is already an absolute path.
    base = f"{root}/{store.native_path(key).strip('/')}" if root else store.native_path(key)
    paths = [f"{base}/{part}" for part in parts]
    return pads.dataset(paths, schema=schema, format="parquet", filesystem=filesystem)
