"""The fault proxy itself (tests/fault_proxy.py): pass-through fidelity,
each action, ``times``, rule order, hooks and the log.

Framing is checked against an independent upstream (``http.server``, which
records what it received); signed requests against the real SeaweedFS.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fault_proxy import FaultProxy, Rule

pytestmark = pytest.mark.spec("S-1")


class _Recorder(BaseHTTPRequestHandler):
    """Records each request (method, path, headers as received, body) and
    answers with the body's SHA-256 and length; ``/chunked`` answers with a
    chunked body, ``/big`` with 3 MiB."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n) if n else b""

    def _handle(self) -> None:
        body = self._read_body()
        self.server.seen.append(  # type: ignore[attr-defined]
            {
                "method": self.command,
                "path": self.path,
                "headers": list(self.headers.items()),
                "body": body,
                "peer": self.client_address,
            }
        )
        digest = hashlib.sha256(body).hexdigest().encode()
        if self.path.startswith("/hangup"):
            self.close_connection = True  # no reply at all
            return
        if self.path.startswith("/chunked"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (b"hello ", b"chunked ", b"world"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")
            return
        payload = os.urandom(3 * 1024 * 1024) if self.path.startswith("/big") else digest
        self.send_response(201 if self.command == "PUT" else 200)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Body-Length", str(len(body)))
        self.send_header("X-Payload-Sha256", hashlib.sha256(payload).hexdigest())
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []  # type: ignore[attr-defined]
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(upstream: ThreadingHTTPServer) -> Iterator[FaultProxy]:
    with FaultProxy(f"http://127.0.0.1:{upstream.server_address[1]}") as p:
        yield p


def _conn(proxy: FaultProxy) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)


def _raw(proxy: FaultProxy, data: bytes) -> bytes:
    """Send *data* on a fresh connection and read until the proxy closes it."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(data)
        out = bytearray()
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(65536):
                out += chunk
        return bytes(out)


def test_requests_and_replies_pass_unchanged_over_one_keep_alive_connection(
    proxy: FaultProxy, upstream: ThreadingHTTPServer
) -> None:
    seen: list[dict[str, Any]] = upstream.seen  # type: ignore[attr-defined]
    c = _conn(proxy)
    body = os.urandom(5 * 1024 * 1024 + 3)  # several 64 KiB pieces
    headers = {"X-Amz-Date": "20260101T000000Z", "Authorization": "AWS4-HMAC-SHA256 Credential=x", "x-odd-Case": "v"}
    c.request("PUT", "/bucket/a%20b/key.parquet?x-id=PutObject", body=body, headers=headers)
    r = c.getresponse()
    assert r.status == 201
    assert r.read() == hashlib.sha256(body).hexdigest().encode()
    # The same connection: a HEAD (no body), a GET with a large reply, a chunked reply.
    c.request("HEAD", "/bucket/k")
    r = c.getresponse()
    assert (r.status, r.read(), r.getheader("X-Body-Length")) == (200, b"", "0")
    c.request("GET", "/big")
    r = c.getresponse()
    got = r.read()
    assert len(got) == 3 * 1024 * 1024
    assert hashlib.sha256(got).hexdigest() == r.getheader("X-Payload-Sha256")
    c.request("GET", "/chunked")
    r = c.getresponse()
    assert r.read() == b"hello chunked world"
    # A chunked request body.
    c.putrequest("POST", "/bucket?delete")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for piece in (b"<Delete>", b"x" * 100_000, b"</Delete>"):
        c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    expected = b"<Delete>" + b"x" * 100_000 + b"</Delete>"
    assert r.read() == hashlib.sha256(expected).hexdigest().encode()
    c.close()

    assert [s["method"] for s in seen] == ["PUT", "HEAD", "GET", "GET", "POST"]
    assert seen[0]["path"] == "/bucket/a%20b/key.parquet?x-id=PutObject"
    assert seen[0]["body"] == body
    # Headers arrive as sent: Host (the proxy's address, which a SigV4
    # signature covers) and every other header, names and values unchanged.
    sent = dict(seen[0]["headers"])
    assert sent["Host"] == f"127.0.0.1:{proxy.port}"
    for k, v in headers.items():
        assert sent[k] == v
    assert seen[4]["body"] == expected
    # One client connection, one upstream connection.
    assert len({s["peer"] for s in seen}) == 1
    assert proxy.counters["connections"] == 1
    assert [(e.method, e.path, e.query, e.action, e.status, e.upstream_status) for e in proxy.log] == [
        ("PUT", "/bucket/a%20b/key.parquet", "x-id=PutObject", "forward", 201, 201),
        ("HEAD", "/bucket/k", "", "forward", 200, 200),
        ("GET", "/big", "", "forward", 200, 200),
        ("GET", "/chunked", "", "forward", 200, 200),
        ("POST", "/bucket", "delete", "forward", 200, 200),
    ]


def test_concurrent_connections_are_served_at_once(proxy: FaultProxy, upstream: ThreadingHTTPServer) -> None:
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            c = _conn(proxy)
            for j in range(5):
                body = f"{i}-{j}".encode() * 1000
                c.request("PUT", f"/b/{i}/{j}", body=body)
                r = c.getresponse()
                assert r.read() == hashlib.sha256(body).hexdigest().encode()
            c.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(proxy.log) == 40
    assert proxy.counters["connections"] == 8
    assert len(upstream.seen) == 40  # type: ignore[attr-defined]


def test_fail_answers_without_forwarding_with_an_s3_error(proxy: FaultProxy, upstream: ThreadingHTTPServer) -> None:
    proxy.fail("PUT", r"/manifest/v\d+\.json$")
    c = _conn(proxy)
    c.request("PUT", "/b/t/manifest/v00000001.json", body=b"{}")
    r = c.getresponse()
    assert r.status == 503
    text = r.read().decode()
    assert "<Code>ServiceUnavailable</Code>" in text
    assert "/b/t/manifest/v00000001.json" in text
    # The connection stays usable, and the rule (times=1) is used up.
    c.request("PUT", "/b/t/manifest/v00000001.json", body=b"{}")
    r = c.getresponse()
    assert (r.status, len(r.read())) == (201, 64)
    c.request("HEAD", "/b/x")
    r = c.getresponse()
    assert (r.status, r.read()) == (200, b"")
    c.close()
    assert [s["path"] for s in upstream.seen] == ["/b/t/manifest/v00000001.json", "/b/x"]  # type: ignore[attr-defined]
    log = proxy.log
    assert [(e.action, e.status, e.upstream_status, e.rule) for e in log] == [
        ("fail", 503, None, 0),
        ("forward", 201, 201, None),
        ("forward", 200, 200, None),
    ]
    assert log[0].request_bytes >= 2
    assert proxy.counters["fail"] == 1
    assert proxy.rules[0].hits == 1 and proxy.rules[0].exhausted


def test_fail_with_another_status_and_on_head(proxy: FaultProxy) -> None:
    proxy.fail("HEAD", r"/k$", status=500)
    proxy.fail(None, r"/k$", status=429)
    c = _conn(proxy)
    c.request("HEAD", "/b/k")
    r = c.getresponse()
    assert (r.status, r.read()) == (500, b"")
    c.request("GET", "/b/k")
    r = c.getresponse()
    assert r.status == 429 and b"<Code>SlowDown</Code>" in r.read()
    c.close()


@pytest.mark.parametrize("how", ["close", "reset"])
def test_fail_without_a_reply(proxy: FaultProxy, upstream: ThreadingHTTPServer, how: str) -> None:
    proxy.fail("PUT", r"/data/", status=how)
    request = b"PUT /b/t/data/p.parquet HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    if how == "close":
        assert _raw(proxy, request) == b""
    else:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(request)
            with pytest.raises(ConnectionResetError):
                while s.recv(65536):
                    pass
    assert upstream.seen == []  # type: ignore[attr-defined]
    assert [(e.action, e.status, e.upstream_status) for e in proxy.log] == [("fail", None, None)]


@pytest.mark.parametrize("how", ["close", "reset"])
def test_drop_reply_forwards_then_closes_without_any_reply(
    proxy: FaultProxy, upstream: ThreadingHTTPServer, how: str
) -> None:
    proxy.drop_reply("PUT", r"/_latest_manifest$", how=how)
    c = _conn(proxy)
    c.request("PUT", "/b/t/_latest_manifest", body=b'{"version": 3}')
    expected: type[BaseException] = http.client.RemoteDisconnected if how == "close" else ConnectionResetError
    with pytest.raises(expected):
        c.getresponse()
    c.close()
    # The upstream applied it; the proxy read its whole reply.
    seen = upstream.seen  # type: ignore[attr-defined]
    assert [(s["method"], s["path"], s["body"]) for s in seen] == [("PUT", "/b/t/_latest_manifest", b'{"version": 3}')]
    assert [(e.action, e.status, e.upstream_status) for e in proxy.log] == [("drop_reply", None, 201)]
    # Used up: the next one passes.
    c = _conn(proxy)
    c.request("PUT", "/b/t/_latest_manifest", body=b"{}")
    assert c.getresponse().status == 201
    c.close()


def test_times_order_query_and_method_sets(proxy: FaultProxy) -> None:
    proxy.fail(("PUT", "POST"), r"^/b/", query="uploads", status=500, times=2)
    proxy.fail(None, r"^/b/", status=503, times=None)
    c = _conn(proxy)

    def status(method: str, target: str) -> int:
        c.request(method, target, body=b"" if method in ("PUT", "POST") else None)
        r = c.getresponse()
        r.read()
        return r.status

    assert status("POST", "/b/k?uploads") == 500
    assert status("PUT", "/b/k?partNumber=1&uploads") == 500
    # The first rule is used up; the second (times=None) applies to everything else under /b/.
    assert status("POST", "/b/k?uploads") == 503
    assert status("GET", "/b/k") == 503
    assert status("GET", "/other") == 200
    proxy.clear_rules()
    assert status("GET", "/b/k") == 200
    c.close()
    assert [r.hits for r in proxy.rules] == []
    assert [e.rule for e in proxy.log] == [0, 0, 1, 1, None, None]
    assert [e.query for e in proxy.requests(path=r"^/b/k$", action="fail")] == [
        "uploads",
        "partNumber=1&uploads",
        "uploads",
        "",
    ]
    proxy.clear()
    assert proxy.log == [] and proxy.counters == {}


def test_hooks_run_before_forwarding_and_after_the_reply(proxy: FaultProxy, upstream: ThreadingHTTPServer) -> None:
    calls: list[tuple[str, int, int | None]] = []
    seen = upstream.seen  # type: ignore[attr-defined]
    proxy.drop_reply(
        "PUT",
        r"/k$",
        before=lambda e: calls.append(("before", len(seen), e.upstream_status)),
        after=lambda e: calls.append(("after", len(seen), e.upstream_status)),
    )
    c = _conn(proxy)
    c.request("PUT", "/b/k", body=b"x")
    with pytest.raises(http.client.RemoteDisconnected):
        c.getresponse()
    c.close()
    assert calls == [("before", 0, None), ("after", 1, 201)]


def test_an_upstream_that_hangs_up_is_passed_on_and_logged(proxy: FaultProxy) -> None:
    c = _conn(proxy)
    c.request("PUT", "/hangup", body=b"x")
    with pytest.raises(http.client.RemoteDisconnected):
        c.getresponse()
    c.close()
    [entry] = proxy.log
    assert (entry.action, entry.status, entry.upstream_status) == ("forward", None, None)
    assert entry.error is not None and "closed" in entry.error
    assert proxy.counters["broken"] == 1


def test_bad_rules_and_non_loopback_addresses_are_refused() -> None:
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("http://10.1.2.3:8333")
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("http://127.0.0.1:8333", host="0.0.0.0")
    with pytest.raises(ValueError, match="action"):
        Rule("PUT", "/", "explode")
    with pytest.raises(ValueError, match="status"):
        Rule("PUT", "/", "fail", status="slow")
    with pytest.raises(ValueError, match="times"):
        Rule("PUT", "/", "fail", times=0)


# -- through SeaweedFS: signed requests ------------------------------------------


@pytest.mark.s3
def test_signed_requests_pass_through_to_seaweedfs(seaweed: Any, fault_proxy: FaultProxy) -> None:
    """boto3 (SigV4, signed for the proxy's host) through the proxy: put, head,
    get, list, a multipart upload (12 MiB, ``uploads``/``partNumber``
    queries) and delete all pass SeaweedFS's signature check."""
    import boto3
    from botocore.config import Config

    fault_proxy.clear()
    s3 = boto3.client(
        "s3",
        endpoint_url=fault_proxy.url,
        aws_access_key_id=seaweed.access_key,
        aws_secret_access_key=seaweed.secret_key,
        region_name=seaweed.region,
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1, "mode": "standard"},
        ),
    )
    bucket = "pds-tests"
    s3.put_object(Bucket=bucket, Key="proxy/one", Body=b"one")
    assert s3.head_object(Bucket=bucket, Key="proxy/one")["ContentLength"] == 3
    assert s3.get_object(Bucket=bucket, Key="proxy/one")["Body"].read() == b"one"
    part = os.urandom(6 * 1024 * 1024)
    up = s3.create_multipart_upload(Bucket=bucket, Key="proxy/mp")
    parts = []
    for n in (1, 2):
        r = s3.upload_part(Bucket=bucket, Key="proxy/mp", UploadId=up["UploadId"], PartNumber=n, Body=part)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    s3.complete_multipart_upload(
        Bucket=bucket, Key="proxy/mp", UploadId=up["UploadId"], MultipartUpload={"Parts": parts}
    )
    got = s3.get_object(Bucket=bucket, Key="proxy/mp")["Body"].read()
    assert got == part + part
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="proxy/")["Contents"]]
    assert keys == ["proxy/mp", "proxy/one"]
    s3.delete_object(Bucket=bucket, Key="proxy/one")
    log = fault_proxy.log
    assert all(e.action == "forward" and e.status is not None and e.status < 300 for e in log), [str(e) for e in log]
    assert any("uploads" in e.query for e in log) and any("partNumber" in e.query for e in log)
    # A request the proxy fails is a real S3 error to boto3, and nothing is written.
    from botocore.exceptions import ClientError

    fault_proxy.fail("PUT", r"/proxy/failed$")
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=bucket, Key="proxy/failed", Body=b"x")
    assert info.value.response["Error"]["Code"] == "ServiceUnavailable"
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    direct = seaweed.client()
    with pytest.raises(ClientError):
        direct.head_object(Bucket=bucket, Key="proxy/failed")
    fault_proxy.clear()


@pytest.mark.s3
def test_pds_through_the_proxy_and_each_fault_seen_by_object_store(faulty: Any) -> None:
    """pds (object_store, a connection pool) through the proxy; a failed
    create-only PUT writes nothing, a dropped reply's PUT lands."""
    import pyarrow as pa
    import remote_store

    import pds

    proxy = faulty.proxy
    ds = pds.ParquetDatasetStore(faulty.store)
    table = pa.table({"a": list(range(1000))})
    ds.write_dataset(table, "ds")
    assert ds.read_dataset("ds").equals(table)
    assert proxy.requests("PUT", r"/ds/")
    assert all(e.action == "forward" for e in proxy.log)
    rs = faulty.store
    none = faulty.open(max_retries="0")
    # fail, persistent: the error reaches the caller, nothing is written.
    proxy.fail("PUT", r"/k1$", times=None)
    with pytest.raises(remote_store.RemoteStoreError):
        rs.write("k1", b"1", overwrite=True)
    assert not faulty.direct.exists("k1")
    assert len(proxy.requests("PUT", r"/k1$")) == 3  # the first try and max_retries=2
    # drop_reply without retries: an error, but the object is there.
    proxy.clear_rules()
    proxy.drop_reply("PUT", r"/k2$")
    with pytest.raises(remote_store.RemoteStoreError):
        none.write("k2", b"2", overwrite=True)
    assert faulty.direct.read_bytes("k2") == b"2"
    # One 503 is retried by object_store: the write succeeds.
    proxy.fail("PUT", r"/k3$")
    rs.write("k3", b"3", overwrite=True)
    assert faulty.direct.read_bytes("k3") == b"3"
    assert [e.action for e in proxy.requests("PUT", r"/k3$")] == ["fail", "forward"]
