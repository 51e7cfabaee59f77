"""``ObjectStoreBackend``: a remote_store ``Backend`` implemented in Rust.

It runs on the ``object_store`` crate and covers ``memory://``,
``file:///abs/path`` and ``s3://bucket/prefix``. Every call releases the GIL
while it waits on the store. Wrap it in a ``remote_store.Store`` (or call
:func:`open_store`) and hand that to ``pds.ParquetDatasetStore``: datasets on
this backend take the fast path, where encoding, upload and download all run
in Rust.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import io
import logging
import os
import pathlib
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar, TypeVar

from remote_store import (
    Backend,
    Capability,
    CapabilitySet,
    FileInfo,
    FolderEntry,
    FolderInfo,
    RemotePath,
    Store,
    WriteResult,
)
from remote_store._path import is_root

from pds import _core
from pds.errors import (
    AlreadyExists,
    CapabilityNotSupported,
    DirectoryNotEmpty,
    InvalidPath,
    NotFound,
    PermissionDenied,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from remote_store._types import WritableContent

__all__ = ["ObjectStoreBackend", "open_store"]

T = TypeVar("T")

_log = logging.getLogger("pds.store")

#: Options that give S3 keys: with them, ``AWS_PROFILE`` does not apply.
_S3_KEY_OPTIONS = ("access_key_id", "aws_access_key_id", "secret_access_key", "aws_secret_access_key")

#: The longest time the Rust store reuses a profile's temporary credentials
#: before it asks botocore again (botocore refreshes them itself when due).
_MAX_CREDENTIAL_TTL = 900.0

_COMMON = {
    Capability.READ,
    Capability.WRITE,
    Capability.DELETE,
    Capability.LIST,
    Capability.MOVE,
    Capability.COPY,
    Capability.ATOMIC_WRITE,
    Capability.METADATA,
    Capability.SEEKABLE_READ,
    Capability.WRITE_RESULT_NATIVE,
}


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise TypeError(f"store options must be str, int, float or bool, got {type(value).__name__}")


def _s3_profile(url: str, options: Mapping[str, str]) -> str | None:
    """The AWS profile an ``s3://`` store uses: the ``profile`` option, else
    ``AWS_PROFILE`` when no keys are given (as options or as
    ``AWS_ACCESS_KEY_ID``), requests are signed (no ``skip_signature=true``)
    and botocore is installed. No I/O.

    Raises:
        ValueError: ``profile`` given with keys, or empty.
        ImportError: ``profile`` given and botocore is not installed.
    """
    if url.split("://", 1)[0].lower() not in ("s3", "s3a"):
        return None
    keys_given = any(k in options for k in _S3_KEY_OPTIONS)
    profile = options.get("profile")
    if profile is not None:
        if not profile:
            raise ValueError("the profile option must name an AWS profile")
        if keys_given:
            raise ValueError("give either profile= or access_key_id= and secret_access_key=, not both")
        if importlib.util.find_spec("botocore") is None:
            raise ImportError(
                f"profile={profile!r} needs botocore to read ~/.aws profiles: pip install 'pds[aws]' "
                "(or pip install botocore)"
            )
        return profile
    env = os.environ.get("AWS_PROFILE")
    unsigned = any(options.get(k, "").lower() == "true" for k in ("skip_signature", "aws_skip_signature"))
    if not env or keys_given or unsigned or os.environ.get("AWS_ACCESS_KEY_ID"):
        return None
    if importlib.util.find_spec("botocore") is None:
        _log.debug("AWS_PROFILE=%s is not read: botocore is not installed (pip install 'pds[aws]')", env)
        return None
    return env


class _ProfileCredentials:
    """The credentials of an AWS profile, as the Rust store asks for them.

    Resolved by botocore (``~/.aws/config`` and ``credentials``, SSO,
    assume-role, ``credential_process``, ...), which also renews temporary
    ones. Pickles as the profile's name only: an unpickled copy (say, on a
    Spark executor) resolves the profile again from its own ``~/.aws`` and
    environment, and no secret travels.
    """

    #: Its pickle is the profile's name: it travels with a store opened
    #: with ``pickle_secrets=False`` (``_core.RustStore`` checks this).
    pickles_without_secrets = True

    def __init__(self, profile: str, credentials: Any = None) -> None:
        self.profile = profile
        self._credentials = credentials

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_ProfileCredentials, (self.profile,))

    def __repr__(self) -> str:
        return f"_ProfileCredentials({self.profile!r})"

    def __call__(self) -> tuple[str, str, str | None, float | None]:
        """``(access_key_id, secret_access_key, session_token, seconds valid)``;
        seconds valid is ``None`` for credentials that do not expire."""
        if self._credentials is None:
            self._credentials = _resolve_profile(self.profile)[0]
            if self._credentials is None:
                raise PermissionDenied(f"the AWS profile {self.profile!r} has no credentials")
        import botocore.credentials

        creds = self._credentials
        frozen = creds.get_frozen_credentials()
        ttl: float | None = None
        if isinstance(creds, botocore.credentials.RefreshableCredentials):
            # botocore keeps the expiry private (obstore reads it too);
            # without it, ask again in a minute.
            expiry = getattr(creds, "_expiry_time", None)
            ttl = 60.0
            if isinstance(expiry, datetime.datetime) and expiry.tzinfo is not None:
                left = (expiry - datetime.datetime.now(datetime.UTC)).total_seconds()
                ttl = min(_MAX_CREDENTIAL_TTL, left)
        return (frozen.access_key, frozen.secret_key, frozen.token, ttl)


def _resolve_profile(profile: str) -> tuple[Any, dict[str, str]]:
    """botocore's credentials for *profile* (``None`` if it has none) and
    its ``region`` and ``endpoint_url`` settings. Runs a
    ``credential_process`` or asks SSO/STS if the profile says so; no store
    I/O.

    Raises:
        ValueError: the profile does not exist or the config cannot be read.
        PermissionDenied: the profile's credentials cannot be obtained.
    """
    import botocore.exceptions
    import botocore.session

    try:
        session = botocore.session.Session(profile=profile)
        settings = {"region": session.get_config_variable("region"), "endpoint": _profile_endpoint(session)}
        credentials = session.get_credentials()
    except (
        botocore.exceptions.ProfileNotFound,
        botocore.exceptions.ConfigParseError,
        botocore.exceptions.ConfigNotFound,
        botocore.exceptions.InvalidConfigError,
    ) as e:
        raise ValueError(f"AWS profile {profile!r}: {e}") from None
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
        raise PermissionDenied(f"the credentials of the AWS profile {profile!r} cannot be obtained: {e}") from None
    _log.debug(
        "S3 store uses the AWS profile %r (credentials: %s)",
        profile,
        "none" if credentials is None else getattr(credentials, "method", "found"),
    )
    return credentials, {k: v for k, v in settings.items() if v}


def _profile_endpoint(session: Any) -> str | None:
    """The S3 endpoint the profile's config gives (``endpoint_url``,
    ``services``, or ``AWS_ENDPOINT_URL[_S3]``), as botocore resolves it for
    its clients; ``None`` if none or if this botocore has no such lookup."""
    if session.get_config_variable("ignore_configured_endpoint_urls"):
        return None
    try:
        from botocore.configprovider import ConfiguredEndpointProvider

        provider = ConfiguredEndpointProvider(
            full_config=session.full_config, scoped_config=session.get_scoped_config(), client_name="s3"
        )
        found = provider.provide()
    except (ImportError, AttributeError, TypeError):
        return None
    return found if isinstance(found, str) else None


def _rebuild(url: str, options: dict[str, str], pickle_secrets: bool = True) -> ObjectStoreBackend:
    return ObjectStoreBackend(url, pickle_secrets=pickle_secrets, **options)


def _refuse_connection_string(options: Mapping[str, str]) -> None:
    """``ValueError`` for an Azure connection string with
    ``pickle_secrets=False``: it names the account and endpoint as well as
    the key, so a copy without it would reach another account, or none."""
    found = [
        k for k in options if k.lower().removeprefix("azure_storage_").removeprefix("azure_") == "connection_string"
    ]
    if found:
        raise ValueError(
            f"{found[0]} holds the account and endpoint with the key, and pickle_secrets=False would leave "
            "all of them out of pickled copies: give account= (and endpoint=) as options instead, and the "
            "key through each process's environment (AZURE_STORAGE_ACCOUNT_KEY)"
        )


def pickle_secrets_flag(value: object) -> bool:
    """*value* of ``pickle_secrets`` as a bool: a bool, or ``"true"`` /
    ``"false"`` (any case; options are often given as text). No I/O.

    Raises:
        TypeError: neither a bool nor a str.
        ValueError: another text.
    """
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise TypeError(f"pickle_secrets must be a bool, got {type(value).__name__}")
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"pickle_secrets must be true or false, got {value!r}")
    return text == "true"


def without_credentials(options: Mapping[str, str]) -> dict[str, str]:
    """*options* without the ones that give credentials: every secret
    (``secret_access_key``, ``session_token``, ``account_key``, ``sas``,
    ``service_account_key``, ...) and S3's ``access_key_id``. What a store
    opened with ``pickle_secrets=False`` pickles. No I/O."""
    return {k: v for k, v in options.items() if not _core.is_credential_option(k)}


def _info(meta: _core.ObjectMeta) -> FileInfo:
    path = RemotePath(meta.key)
    return FileInfo(path=path, name=path.name, size=meta.size, modified_at=meta.last_modified, etag=meta.e_tag)


class ObjectStoreBackend(Backend):
    """A remote_store backend on Rust's ``object_store``.

    Args:
        url: ``memory://``, ``file:///abs/path``, ``s3://bucket[/prefix]``,
            ``gs://bucket[/prefix]`` or ``az://container[/prefix]`` (also
            ``abfs://``, ``abfss://``).
        **options: For S3: ``endpoint``, ``region``, ``access_key_id``,
            ``secret_access_key``, ``session_token``, ``allow_http``, or any
            of object_store's ``aws_*`` keys. For GCS:
            ``service_account_key`` (the key JSON), ``service_account`` (a
            key file's path), ``token``, ``anonymous``, ``endpoint``, or any
            ``google_*`` key. For Azure: ``account``, ``account_key``, ``sas``,
            ``token``, ``connection_string``, ``endpoint``, ``use_emulator``,
            ``anonymous``, or any ``azure_*`` key. Every remote store takes
            ``max_retries``, ``retry_timeout_secs``, ``allow_http`` and
            ``timeout``. The service's environment variables (``AWS_*``,
            ``GOOGLE_*``, ``AZURE_*``) are read first; options win. Values
            may be str, int or bool.
            S3 also takes ``profile``: an AWS profile of ``~/.aws/config``
            and ``~/.aws/credentials`` (SSO, assume-role and
            ``credential_process`` included), resolved by botocore (the
            ``aws`` extra), whose credentials (renewed before they expire)
            sign every request and whose ``region`` and ``endpoint_url``
            apply unless given as options. Without ``profile`` and without
            keys (options or ``AWS_ACCESS_KEY_ID``), ``AWS_PROFILE`` names
            the profile when botocore is installed (otherwise it is not read,
            and a DEBUG line says so).
        pickle_secrets: Whether a pickled copy (say, in a Spark task)
            carries the credential options (a bool, or ``"true"`` /
            ``"false"``). With ``False`` it carries every
            other option (``endpoint``, ``region``, ``allow_http``,
            ``profile``, ...) and this flag, but no secret and no
            ``access_key_id`` (see :func:`without_credentials`): the
            unpickled copy takes its credentials from its own process, as a
            store opened without keys does (``AWS_*``/``GOOGLE_*``/
            ``AZURE_*`` variables, web identity, container or instance
            credentials, managed identity, ``AWS_PROFILE``). If it finds
            none, its first request fails with ``PermissionDenied`` (naming
            where it looked); it never falls back to unsigned requests, which
            only ``skip_signature``/``anonymous`` (options, and so pickled)
            ask for. This store itself uses every option given.

    Raises:
        ValueError: an unsupported URL or an unknown option, an unknown AWS
            profile, or ``profile`` given with keys (no I/O is done).
        TypeError / ValueError: *pickle_secrets* is neither a bool nor
            ``"true"`` / ``"false"``.
        ImportError: ``profile`` given and botocore is not installed.
        PermissionDenied: the profile's credentials cannot be obtained (say,
            an expired SSO login); no store I/O is done.

    Notes:
        - Every put is atomic: a reader never sees a partial object.
          ``write(..., overwrite=False)`` is a create-only put (If-None-Match),
          not a check-then-write.
        - Folders are key prefixes. An empty folder does not exist.
        - ``memory://`` lives in this backend object; a pickled copy (say, on a
          Spark executor) starts empty. Use ``file://`` or ``s3://`` to share.
        - The backend pickles as URL + options, so by default credentials
          given as options travel with it: treat such pickles as secrets.
          With ``pickle_secrets=False`` they do not (see above); ``repr()``
          then says ``pickle_secrets=False``, and always hides secrets. A
          ``profile`` travels as its name: the unpickled copy resolves it
          again from its own ``~/.aws`` and environment.
    """

    CAPABILITIES: ClassVar[CapabilitySet] = CapabilitySet(set(_COMMON))

    def __init__(self, url: str | os.PathLike[str], *, pickle_secrets: object = True, **options: object) -> None:
        # object, not bool: callers pass options as **dict[str, object].
        pickle_secrets = pickle_secrets_flag(pickle_secrets)
        url = _store_url(url)
        self._url = url
        self._pickle_secrets = pickle_secrets
        self._options = {k: _option_text(v) for k, v in options.items()}
        if not pickle_secrets:
            _refuse_connection_string(self._options)
        profile = _s3_profile(url, self._options)
        if profile is None:
            self._rs = _core.RustStore(url, self._options, pickle_secrets=pickle_secrets)
        else:
            # The options pickle as given (profile= is a name, not a secret);
            # the resolved region/endpoint go to Rust only, the keys never
            # leave botocore but through the callable.
            credentials, settings = _resolve_profile(profile)
            rust_options = {k: v for k, v in self._options.items() if k != "profile"}
            for key, value in settings.items():
                if not any(k in rust_options for k in (key, f"aws_{key}", f"{key}_url", f"aws_{key}_url")):
                    rust_options[key] = value
            provider = None if credentials is None else _ProfileCredentials(profile, credentials)
            self._rs = _core.RustStore(url, rust_options, provider, pickle_secrets=pickle_secrets)
        caps = set(_COMMON)
        if self._rs.scheme == "file":
            caps.add(Capability.ATOMIC_MOVE)
        self._caps = CapabilitySet(caps)

    # -- identity --------------------------------------------------------

    @property
    def name(self) -> str:
        return "object_store"

    @property
    def capabilities(self) -> CapabilitySet:
        return self._caps

    @property
    def url(self) -> str:
        """The store URL this backend was opened with."""
        return self._url

    @property
    def scheme(self) -> str:
        """``"memory"``, ``"file"``, ``"s3"``, ``"gs"`` or ``"az"``."""
        return self._rs.scheme

    @property
    def options(self) -> dict[str, str]:
        """A copy of the options this backend was opened with (they may hold secrets)."""
        return dict(self._options)

    @property
    def pickle_secrets(self) -> bool:
        """Whether a pickled copy carries the credential options (see the class)."""
        return self._pickle_secrets

    def __reduce__(self) -> tuple[Any, tuple[str, dict[str, str]] | tuple[str, dict[str, str], bool]]:
        # The default pickles as before (URL and options), so that a pickle
        # made by this version unpickles in an older pds (executors upgraded later).
        if self._pickle_secrets:
            return (_rebuild, (self._url, dict(self._options)))
        return (_rebuild, (self._url, without_credentials(self._options), False))

    def __copy__(self) -> ObjectStoreBackend:
        """A copy in this process keeps every option, keys included (only a
        pickle leaves them out)."""
        return ObjectStoreBackend(self._url, pickle_secrets=self._pickle_secrets, **self._options)

    def __deepcopy__(self, memo: dict[int, Any]) -> ObjectStoreBackend:
        return self.__copy__()

    def __repr__(self) -> str:
        shown = {k: ("***" if _core.is_secret_option(k) else v) for k, v in self._options.items()}
        flag = "" if self._pickle_secrets else ", pickle_secrets=False"
        return f"ObjectStoreBackend({self._url!r}{flag}, **{shown!r})"

    def unwrap(self, type_hint: type[T]) -> T:
        """``_core.RustStore`` (the Rust handle) or this backend itself."""
        if type_hint is _core.RustStore:
            return self._rs  # type: ignore[return-value]
        if isinstance(self, type_hint):
            return self
        return super().unwrap(type_hint)

    def check_health(self) -> None:
        self._rs.folder_exists("")

    # -- queries ---------------------------------------------------------

    def exists(self, path: str) -> bool:
        """Whether a file or a folder is at *path*: one HEAD, and one LIST if
        no file is. ``False`` in a bucket that does not exist (nothing is
        there); other failures (permissions, network) are raised."""
        if is_root(path):
            return True
        if self._rs.head(path) is not None:
            return True
        try:
            return self._rs.folder_exists(path)
        except NotFound:
            # The one NotFound a listing raises: the bucket does not exist.
            return False

    def is_file(self, path: str) -> bool:
        return not is_root(path) and self._rs.head(path) is not None

    def is_folder(self, path: str) -> bool:
        return is_root(path) or self._rs.folder_exists(path)

    def _missing(self, path: str) -> Exception:
        """NotFound, or InvalidPath if *path* is a folder."""
        if self.is_folder(path):
            return InvalidPath(f"{path!r} is a folder, not a file", path=path, backend=self.name)
        return NotFound(f"no file at {path!r}", path=path, backend=self.name)

    def _require_file_key(self, path: str) -> None:
        if is_root(path) or not path.strip("/"):
            raise InvalidPath("the store root is not a file", path=path, backend=self.name)

    # -- reads -----------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        self._require_file_key(path)
        try:
            return self._rs.get(path)
        except NotFound:
            raise self._missing(path) from None

    def read(self, path: str) -> BinaryIO:
        return io.BytesIO(self.read_bytes(path))

    def get_file_info(self, path: str) -> FileInfo:
        self._require_file_key(path)
        meta = self._rs.head(path)
        if meta is None:
            raise self._missing(path)
        return _info(meta)

    def get_folder_info(self, path: str) -> FolderInfo:
        if not is_root(path) and self.is_file(path):
            raise InvalidPath(f"{path!r} is a file, not a folder", path=path, backend=self.name)
        objects, _ = self._rs.list(path, recursive=True)
        if not objects and not is_root(path):
            raise NotFound(f"no folder at {path!r}", path=path, backend=self.name)
        return FolderInfo(
            path=RemotePath.from_backend_path(path),
            file_count=len(objects),
            total_size=sum(o.size for o in objects),
            modified_at=max((o.last_modified for o in objects), default=None),
        )

    def list_files(self, path: str, *, recursive: bool = False, max_depth: int | None = None) -> Iterator[FileInfo]:
        objects, _ = self._rs.list(path, recursive=recursive)
        base = "" if is_root(path) else path.strip("/")
        for meta in objects:
            if recursive and max_depth is not None:
                rel = meta.key[len(base) + 1 :] if base else meta.key
                if rel.count("/") > max_depth:
                    continue
            yield _info(meta)

    def list_folders(self, path: str) -> Iterator[FolderEntry]:
        _, folders = self._rs.list(path, recursive=False)
        for key in folders:
            p = RemotePath(key)
            yield FolderEntry(path=p, name=p.name)

    # -- writes ----------------------------------------------------------

    def _payload(self, content: WritableContent) -> bytes:
        if isinstance(content, bytes | bytearray | memoryview):
            return bytes(content)
        if hasattr(content, "read"):
            data = content.read()
            if isinstance(data, str):
                raise TypeError("content streams must be binary")
            return bytes(data)
        raise TypeError(f"content must be bytes or a binary stream, got {type(content).__name__}")

    def write(
        self,
        path: str,
        content: WritableContent,
        *,
        overwrite: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> WriteResult:
        self._require_file_key(path)
        if metadata:
            raise CapabilityNotSupported(
                "ObjectStoreBackend does not store user metadata",
                capability=Capability.USER_METADATA.value,
                backend=self.name,
            )
        data = self._payload(content)
        if self._rs.folder_exists(path):
            raise InvalidPath(f"{path!r} is a folder", path=path, backend=self.name)
        result = self._rs.put(path, data, mode="overwrite" if overwrite else "create")
        return WriteResult(
            path=RemotePath(path),
            size=result.size,
            source="native",
            etag=result.e_tag,
            version_id=result.version,
        )

    def write_atomic(
        self,
        path: str,
        content: WritableContent,
        *,
        overwrite: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> WriteResult:
        """Same as :meth:`write`: every object_store put is already atomic."""
        return self.write(path, content, overwrite=overwrite, metadata=metadata)

    def open_atomic(self, path: str, *, overwrite: bool = False) -> AbstractContextManager[BinaryIO]:
        """Buffer writes in a spooled temp file; put it atomically on clean exit.

        Memory: up to 8 MiB in RAM, the rest on local disk, then one put.
        """
        self._require_file_key(path)
        if not overwrite and self.is_file(path):
            raise AlreadyExists(f"{path!r} exists", path=path, backend=self.name)
        return self._atomic(path, overwrite)

    @contextlib.contextmanager
    def _atomic(self, path: str, overwrite: bool) -> Iterator[BinaryIO]:
        with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as spool:
            yield spool  # type: ignore[misc]
            spool.seek(0)
            self.write(path, spool.read(), overwrite=overwrite)

    def delete(self, path: str, *, missing_ok: bool = False) -> None:
        self._require_file_key(path)
        if self._rs.head(path) is None:
            if self.is_folder(path):
                raise InvalidPath(f"{path!r} is a folder", path=path, backend=self.name)
            if missing_ok:
                return
            raise NotFound(f"no file at {path!r}", path=path, backend=self.name)
        self._rs.delete(path)

    def delete_folder(self, path: str, *, recursive: bool = False, missing_ok: bool = False) -> None:
        if not is_root(path) and self.is_file(path):
            raise InvalidPath(f"{path!r} is a file, not a folder", path=path, backend=self.name)
        if not self.is_folder(path) or (is_root(path) and not self._rs.folder_exists("")):
            if missing_ok or is_root(path):
                return
            raise NotFound(f"no folder at {path!r}", path=path, backend=self.name)
        if not recursive:
            raise DirectoryNotEmpty(f"folder {path!r} is not empty", path=path, backend=self.name)
        self._rs.delete_prefix(path)

    def move(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._require_file_key(src)
        self._require_file_key(dst)
        if self._rs.head(src) is None:
            raise self._missing(src)
        if src == dst:
            return
        self._rs.rename(src, dst, overwrite=overwrite)

    def copy(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._require_file_key(src)
        self._require_file_key(dst)
        if self._rs.head(src) is None:
            raise self._missing(src)
        if src == dst:
            return
        self._rs.copy(src, dst, overwrite=overwrite)


def _store_url(url: object) -> str:
    """A store URL from a URL or a local folder path.

    An absolute path (or ``~/...``, or a ``pathlib.Path``) means that local
    folder, as ``file://`` + path; a relative path is refused with a hint,
    since its meaning would change with the working directory.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        raise TypeError(f"url must be a str or a path, got {type(url).__name__}")
    if "://" in url:
        return url
    path = os.path.expanduser(url)
    if os.path.isabs(path):
        return pathlib.Path(path).resolve().as_uri()
    raise ValueError(
        f"store location {url!r} is neither a URL nor an absolute path; use memory://, "
        f"s3://bucket/prefix, file:///absolute/path, or an absolute folder path such as "
        f"{str(pathlib.Path(path).resolve())!r}"
    )


def open_store(url: str | os.PathLike[str], *, pickle_secrets: object = True, **options: object) -> Store:
    """``remote_store.Store(ObjectStoreBackend(url, pickle_secrets=pickle_secrets, **options))``.

    ``open_store("file:///data/lake")`` or ``open_store("/data/lake")`` (an
    absolute folder path, ``~`` expanded, or a ``pathlib.Path``),
    ``open_store("memory://")``, ``open_store("s3://bucket/prefix",
    endpoint=..., region=..., access_key_id=..., secret_access_key=...)``,
    ``open_store("gs://bucket/prefix", service_account_key=...)`` or
    ``open_store("az://container/prefix", account=..., account_key=...)`` (see
    :class:`ObjectStoreBackend` for every option).
    ``pickle_secrets=False``: pickled copies of the store (Spark tasks) carry
    no credential option; they take their credentials from their own
    environment (see :class:`ObjectStoreBackend`).

    Raises:
        ValueError: a relative path, or a URL pds cannot open.
        TypeError / ValueError: *pickle_secrets* is neither a bool nor
            ``"true"`` / ``"false"``.
        PermissionDenied: (on the first request to a cloud store) no
            credentials were found.
    """
    return Store(ObjectStoreBackend(url, pickle_secrets=pickle_secrets, **options))


def native_handle(store: Store) -> _core.RustStore | None:
    """The Rust handle behind *store*, or ``None`` if its backend is not pds's.

    Uses only public Store API (``unwrap``) and does no I/O.
    """
    try:
        return store.unwrap(_core.RustStore)
    except CapabilityNotSupported:
        return None
