"""The store layer's contracts on secrets and refusals (issue S2).

- No error pds raises shows a URL's query string (an Azure SAS rides in
  one) or an endpoint's user info, whatever object_store marks sensitive.
- A store that answers 401/403 raises ``PermissionDenied``, on every kind
  of request (LISTs and Azure's batch deletes included).
- An endpoint option with user info is refused before any I/O.
- A key pair given as options is not mixed with the environment's session
  token.
- A bucket that does not exist is named as such, not as a dataset without
  its ``_SUCCESS`` marker.

The 403 and header checks use a tiny HTTP server on a loopback port,
started by the test: it answers every request itself (403, or an empty
200 listing), so that object_store's real request path builds the error.
"""

from __future__ import annotations

import http.server
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from remote_store import BackendUnavailable, NotFound, PermissionDenied

import pds

#: A value that must never appear in an error (a SAS signature, a password).
MARKER = "MARKER-SIG-4242"
SAS = f"sv=2021-06-08&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00:00:00Z&sig={MARKER}"


class _Server:
    """An HTTP server on 127.0.0.1 that answers every request with *status*
    (and, for 200, an empty S3 listing), recording each request's method,
    path and headers."""

    def __init__(self, status: int) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                body = b""
                if status == 200 and self.command == "GET":
                    body = (
                        b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
                        b"<Name>b</Name><Prefix></Prefix><KeyCount>0</KeyCount>"
                        b"<IsTruncated>false</IsTruncated></ListBucketResult>"
                    )
                elif status != 200:
                    body = b"<Error><Code>AuthenticationFailed</Code></Error>"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def denying() -> Iterator[_Server]:
    """A loopback server that answers 403 to everything."""
    with _Server(403) as server:
        yield server


@pytest.fixture
def recording() -> Iterator[_Server]:
    """A loopback server that answers 200 (an empty listing) to everything."""
    with _Server(200) as server:
        yield server


def _texts(exc: BaseException) -> Iterator[str]:
    """The message and repr of *exc* and of every exception it chains to."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield str(cur)
        yield repr(cur)
        yield from (str(a) for a in cur.args)
        cur = cur.__cause__ or cur.__context__


def _assert_no_secret(exc: BaseException, *secrets: str) -> None:
    for text in _texts(exc):
        for secret in (*secrets, "sig="):
            assert secret not in text, text


def _store_calls(backend: pds.ObjectStoreBackend) -> dict[str, Callable[[], object]]:
    """One call of each kind of request the Rust handle makes."""
    rs = backend.unwrap(pds._core.RustStore)
    return {
        "delete": lambda: rs.delete("k"),
        "get": lambda: rs.get("k"),
        "head": lambda: rs.head("k"),
        "put": lambda: rs.put("k", b"x"),
        "list": lambda: rs.list("", recursive=True),
        "list_flat": lambda: rs.list(""),
        "delete_prefix": lambda: rs.delete_prefix("d"),
    }


@pytest.mark.parametrize("form", ["sas", "connection_string"])
def test_an_azure_sas_never_appears_in_an_error_and_a_403_is_permission_denied(denying: _Server, form: str) -> None:
    endpoint = f"{denying.url}/acct"
    if form == "sas":
        options = {"account": "acct", "sas": SAS, "endpoint": endpoint, "allow_http": "true"}
    else:
        options = {"connection_string": f"AccountName=acct;SharedAccessSignature={SAS};BlobEndpoint={endpoint}"}
    backend = pds.ObjectStoreBackend("az://cont/lake", max_retries=0, **options)
    for name, call in _store_calls(backend).items():
        with pytest.raises(PermissionDenied) as caught:
            call()
        _assert_no_secret(caught.value, MARKER)
        # The request is still named: scheme, host and path stay.
        assert "127.0.0.1" in str(caught.value) or "REDACTED" in str(caught.value), name
    # The dataset layer's calls reach the same mapping.
    datasets = pds.ParquetDatasetStore(pds.open_store("az://cont/lake", max_retries=0, **options))
    with pytest.raises(PermissionDenied) as caught:
        datasets.write_dataset(pa.table({"a": [1]}), "ds")
    _assert_no_secret(caught.value, MARKER)
    assert denying.requests, "the store was reached"


def test_a_403_from_s3_is_permission_denied_everywhere(denying: _Server) -> None:
    backend = pds.ObjectStoreBackend(
        "s3://b/lake",
        endpoint=denying.url,
        region="us-east-1",
        access_key_id="AKIA",
        secret_access_key=MARKER,
        allow_http=True,
        max_retries=0,
    )
    for call in _store_calls(backend).values():
        with pytest.raises(PermissionDenied) as caught:
            call()
        _assert_no_secret(caught.value, MARKER)


def test_wrong_credentials_on_seaweedfs_are_permission_denied(seaweed: Any) -> None:
    options = {**seaweed.store_options(), "secret_access_key": "wrong-" + MARKER, "max_retries": "0"}
    backend = pds.ObjectStoreBackend(f"s3://pds-tests/{uuid.uuid4().hex}", **options)
    for call in _store_calls(backend).values():
        with pytest.raises(PermissionDenied) as caught:
            call()
        assert not isinstance(caught.value, BackendUnavailable)
        _assert_no_secret(caught.value, MARKER)


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("s3://b/x", {"endpoint": f"http://user:{MARKER}@127.0.0.1:9", "allow_http": "true"}),
        ("s3://b/x", {"aws_endpoint": f"http://user:{MARKER}@127.0.0.1:9"}),
        ("s3://b/x", {"endpoint_url": f"https://{MARKER}@host.example/"}),
        ("gs://b/x", {"endpoint": f"http://user:{MARKER}@127.0.0.1:9", "anonymous": "true"}),
        ("az://c/x", {"account": "a", "endpoint": f"http://user:{MARKER}@127.0.0.1:9/a"}),
        ("az://c/x", {"connection_string": f"AccountName=a;BlobEndpoint=http://u:{MARKER}@127.0.0.1:9/a"}),
    ],
)
def test_endpoints_with_user_info_are_refused_without_echoing_them(
    recording: _Server, url: str, options: dict[str, str]
) -> None:
    options = {k: v.replace("127.0.0.1:9", recording.url.removeprefix("http://")) for k, v in options.items()}
    with pytest.raises(ValueError, match="user info") as caught:
        pds.open_store(url, **options)
    _assert_no_secret(caught.value, MARKER)
    assert not recording.requests, "refused before any I/O"


def _s3_on(server: _Server, **options: str) -> pds.ObjectStoreBackend:
    base = {"endpoint": server.url, "region": "us-east-1", "allow_http": "true", "max_retries": "0"}
    return pds.ObjectStoreBackend("s3://b/lake", **{**base, **options})


def _sent_token(server: _Server, backend: pds.ObjectStoreBackend) -> str | None:
    server.requests.clear()
    backend.unwrap(pds._core.RustStore).list("")
    assert server.requests, "the store was reached"
    return server.requests[-1][2].get("x-amz-security-token")


def test_a_key_pair_given_as_options_is_not_mixed_with_the_environments_session_token(
    recording: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENV-KEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ENV-SECRET")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "STALE-ENV-TOKEN")
    # Keys from the environment come with the environment's token.
    assert _sent_token(recording, _s3_on(recording)) == "STALE-ENV-TOKEN"
    # A pair given as options stands alone.
    given = _s3_on(recording, access_key_id="AKIA", secret_access_key="s")
    assert _sent_token(recording, given) is None
    assert "Credential=AKIA/" in recording.requests[-1][2]["authorization"]
    # A token given with them still applies.
    with_token = _s3_on(recording, access_key_id="AKIA", secret_access_key="s", session_token="GIVEN")
    assert _sent_token(recording, with_token) == "GIVEN"
    # One half of a pair given: the environment completes it, as before.
    half = _s3_on(recording, access_key_id="AKIA")
    assert _sent_token(recording, half) == "STALE-ENV-TOKEN"


def _missing_bucket(seaweed: Any) -> tuple[str, dict[str, str]]:
    return f"s3://no-such-bucket-{uuid.uuid4().hex[:12]}/lake", seaweed.store_options()


def test_a_missing_bucket_is_named_on_reads(seaweed: Any) -> None:
    url, options = _missing_bucket(seaweed)
    bucket = url.split("/")[2]
    store = pds.open_store(url, **options)
    datasets = pds.ParquetDatasetStore(store)
    with pytest.raises(NotFound, match=f'S3 bucket "{bucket}" does not exist') as caught:
        datasets.read_dataset("ds")
    assert caught.value.path == bucket
    with pytest.raises(NotFound, match=f'S3 bucket "{bucket}" does not exist'):
        pds.Table.open(store, "t")
    # Nothing exists in a bucket that does not: False, not an error.
    assert datasets.dataset_exists("ds") is False
    # A listing says why it has nothing to list.
    with pytest.raises(NotFound, match=f'S3 bucket "{bucket}" does not exist'):
        list(store.list_files(""))


def test_a_missing_bucket_does_not_hide_other_errors(seaweed: Any) -> None:
    """The probe's own failure (wrong credentials) is raised, not read as "missing"."""
    url, options = _missing_bucket(seaweed)
    options = {**options, "secret_access_key": "wrong", "max_retries": "0"}
    datasets = pds.ParquetDatasetStore(pds.open_store(url, **options))
    with pytest.raises(PermissionDenied):
        datasets.read_dataset("ds")
    with pytest.raises(PermissionDenied):
        datasets.dataset_exists("ds")
