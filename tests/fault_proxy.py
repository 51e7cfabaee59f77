"""A fault-injecting HTTP/1.1 proxy for tests, in front of an S3 endpoint.

Real object stores fail in two ways: a request fails outright, or the store
applies a request and its reply never arrives (a timeout, a reset), so the
client cannot tell whether it took effect. The proxy produces both, for
chosen requests, between a client (pds through object_store) and a real
store (SeaweedFS in the tests)::

    proxy = FaultProxy("http://127.0.0.1:8333")
    url = proxy.start()                     # http://127.0.0.1:<port>
    proxy.fail("PUT", r"/manifest/v\\d+\\.json$", status=503, times=2)
    proxy.drop_reply("PUT", r"/_latest_manifest$")
    ...                                     # point the client at url
    [e.action for e in proxy.log]           # ['forward', 'fail', ...]
    proxy.clear()                           # rules, log and counters
    proxy.stop()

Rules are matched in the order added, by method (``None``: any), a regular
expression searched in the request path (as sent, percent-encoded, query
excluded; percent-decoded with ``decode_paths=True``, for clients such as
object_store's GCS one that encode the ``/`` inside object names) and optionally a substring of the query string (``uploads``,
``partNumber``, ``delete``). The first rule that matches and has uses left
(``times``; ``None``: until cleared) applies:

- ``fail``: the request is read whole and not forwarded; the client gets
  ``status`` (503 by default) with a small S3-style XML error body, or no
  reply at all: ``"close"`` closes the connection (the client sees the
  connection closed before a response), ``"reset"`` resets it (TCP RST).
- ``drop_reply``: the request is forwarded whole, the upstream's whole reply
  is read (so the store applied it), then the client connection is closed
  (``how="close"``) or reset (``how="reset"``) without any of the reply.
- ``forward``: forwarded unchanged (:meth:`FaultProxy.observe`); only the
  hooks run, e.g. to delay requests or to time them.

A rule may carry hooks, ``before`` (called before the request is forwarded
or failed) and ``after`` (called once the upstream's reply is read, before
the client gets anything), each with the log entry; tests use them to run
another writer at an exact moment. Hooks run on the connection's thread.

Everything else is forwarded byte for byte: request line, headers (Host and
every signed header unchanged, so SigV4 signatures stay valid) and body;
replies likewise. Keep-alive, ``Content-Length`` and chunked bodies (both
ways), ``HEAD`` (no body), ``Expect: 100-continue`` and bodies of any size
(streamed in 64 KiB pieces, never buffered whole) are handled, each client
connection on its own thread with its own upstream connection.

Every request is logged (:class:`LogEntry`: method, path, query, action,
the status the client got, the upstream's status, the bytes sent, the
``Range`` and ``x-amz-copy-source`` (or ``x-goog-copy-source``) headers) before the client gets
the reply, so a test that returns from its call sees the whole log.

Only loopback addresses are accepted, for listening and as the upstream.
Standard library only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

__all__ = ["FaultProxy", "LogEntry", "Rule"]

_PIECE = 64 * 1024
_MAX_HEAD = 64 * 1024
_MAX_LINE = 8 * 1024
_IDLE_TIMEOUT = 300.0

ACTIONS = ("fail", "drop_reply", "forward")
_NO_REPLY = ("close", "reset")
_REASONS = {
    400: ("Bad Request", "BadRequest"),
    403: ("Forbidden", "AccessDenied"),
    404: ("Not Found", "NoSuchKey"),
    409: ("Conflict", "OperationAborted"),
    412: ("Precondition Failed", "PreconditionFailed"),
    429: ("Too Many Requests", "SlowDown"),
    500: ("Internal Server Error", "InternalError"),
    502: ("Bad Gateway", "BadGateway"),
    503: ("Service Unavailable", "ServiceUnavailable"),
    504: ("Gateway Timeout", "GatewayTimeout"),
}


def _loopback(host: str) -> str:
    """*host* if it is a loopback address (``localhost`` means 127.0.0.1); ValueError otherwise."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ValueError(f"only loopback addresses are allowed, got {host!r}")


@dataclass
class LogEntry:
    """One request the proxy saw."""

    method: str
    path: str
    query: str
    #: ``forward``, ``fail`` or ``drop_reply``.
    action: str
    #: The status the client got; ``None`` if it got no reply.
    status: int | None = None
    #: The upstream's status; ``None`` if the request was not forwarded (or the upstream failed).
    upstream_status: int | None = None
    #: The index of the rule that applied (in :attr:`FaultProxy.rules`), if any.
    rule: int | None = None
    request_bytes: int = 0
    #: The request's ``Range`` header (a ranged GET), if any.
    byte_range: str | None = None
    #: The request's ``x-amz-copy-source`` header (a server-side copy), if any.
    copy_source: str | None = None
    #: Why the exchange broke off, if it did (a peer closed the connection, ...).
    error: str | None = None
    time: float = field(default_factory=time.time)

    def __str__(self) -> str:
        q = f"?{self.query}" if self.query else ""
        broke = f" [{self.error}]" if self.error else ""
        return f"{self.method} {self.path}{q} -> {self.action} {self.status} (upstream {self.upstream_status}){broke}"


Hook = Callable[[LogEntry], None]


@dataclass
class Rule:
    """What to do with matching requests (see the module docs)."""

    method: str | Collection[str] | None
    path: str
    action: str
    query: str | None = None
    #: ``fail``: an HTTP status, ``"close"`` or ``"reset"``.
    status: int | str = 503
    #: ``drop_reply``: ``"close"`` or ``"reset"``.
    how: str = "close"
    #: Matching requests this rule applies to; ``None``: all until cleared.
    times: int | None = 1
    before: Hook | None = None
    after: Hook | None = None
    #: Requests this rule applied to so far.
    hits: int = 0
    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")
        if isinstance(self.status, str):
            if self.status not in _NO_REPLY:
                raise ValueError(f"status must be an HTTP status or one of {_NO_REPLY}, got {self.status!r}")
        elif isinstance(self.status, bool) or not 100 <= self.status <= 599:
            raise ValueError(f"status must be from 100 to 599, got {self.status!r}")
        if self.how not in _NO_REPLY:
            raise ValueError(f"how must be one of {_NO_REPLY}, got {self.how!r}")
        if self.times is not None and self.times < 1:
            raise ValueError(f"times must be >= 1 or None, got {self.times!r}")
        self._pattern = re.compile(self.path)

    def matches(self, method: str, path: str, query: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method is not None:
            wanted = {self.method} if isinstance(self.method, str) else set(self.method)
            if method.upper() not in {m.upper() for m in wanted}:
                return False
        if self.query is not None and self.query not in query:
            return False
        return self._pattern.search(path) is not None

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times


class _Closed(Exception):
    """The peer closed the connection (or sent something we cannot frame)."""


class _Conn:
    """A socket with a read buffer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _fill(self) -> bool:
        try:
            data = self.sock.recv(_PIECE)
        except (ConnectionError, TimeoutError, OSError):
            return False
        if not data:
            return False
        self.buf += data
        return True

    def head(self) -> bytes | None:
        """Bytes up to and including the blank line; ``None`` at a clean EOF
        before any byte."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                out = bytes(self.buf[: end + 4])
                del self.buf[: end + 4]
                return out
            if len(self.buf) > _MAX_HEAD:
                raise _Closed("head too large")
            if not self._fill():
                if self.buf:
                    raise _Closed("connection closed inside a message head")
                return None

    def line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n")
            if end >= 0:
                out = bytes(self.buf[: end + 2])
                del self.buf[: end + 2]
                return out
            if len(self.buf) > _MAX_LINE:
                raise _Closed("line too long")
            if not self._fill():
                raise _Closed("connection closed inside a chunked body")

    def pieces(self, n: int) -> Iterator[bytes]:
        """Exactly *n* bytes, in pieces of at most 64 KiB."""
        while n > 0:
            if not self.buf and not self._fill():
                raise _Closed("connection closed inside a body")
            take = min(n, len(self.buf), _PIECE)
            out = bytes(self.buf[:take])
            del self.buf[:take]
            n -= take
            yield out

    def until_eof(self) -> Iterator[bytes]:
        while True:
            if self.buf:
                out = bytes(self.buf)
                self.buf.clear()
                yield out
            if not self._fill():
                return

    def alive(self) -> bool:
        """False if the peer closed the connection (checked without blocking)."""
        if self.buf:
            return True
        try:
            self.sock.setblocking(False)
            try:
                data = self.sock.recv(_PIECE)
            finally:
                self.sock.setblocking(True)
                self.sock.settimeout(_IDLE_TIMEOUT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        self.buf += data
        return True

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self, reset: bool = False) -> None:
        with contextlib.suppress(OSError):
            if reset:
                # SO_LINGER with a zero timeout: close() sends RST, not FIN.
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class _Head:
    """A parsed request or response head (the raw bytes are kept for forwarding)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        lines = raw[:-4].split(b"\r\n")
        self.start = lines[0].decode("latin-1")
        self.headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise _Closed(f"bad header line {line!r}")
            self.headers.append((name.strip().lower(), value.strip()))

    def get(self, name: str) -> str | None:
        for n, v in self.headers:
            if n == name:
                return v
        return None

    def tokens(self, name: str) -> set[str]:
        out: set[str] = set()
        for n, v in self.headers:
            if n == name:
                out |= {t.strip().lower() for t in v.split(",") if t.strip()}
        return out

    @property
    def chunked(self) -> bool:
        return "chunked" in self.tokens("transfer-encoding")

    @property
    def length(self) -> int | None:
        v = self.get("content-length")
        if v is None:
            return None
        if not v.isdigit():
            raise _Closed(f"bad Content-Length {v!r}")
        return int(v)


def _body(conn: _Conn, head: _Head, *, response_to: str | None = None, status: int = 0) -> Iterator[bytes]:
    """The raw bytes of the body that follows *head* on *conn* (chunk framing
    included, as sent). For a response, *response_to* is the request method."""
    if response_to is not None and (response_to == "HEAD" or 100 <= status < 200 or status in (204, 304)):
        return
    if head.chunked:
        while True:
            line = conn.line()
            yield line
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Closed(f"bad chunk size {line!r}") from None
            if size == 0:
                # Trailers, then the blank line.
                while True:
                    trailer = conn.line()
                    yield trailer
                    if trailer == b"\r\n":
                        return
            yield from conn.pieces(size)
            crlf = b"".join(conn.pieces(2))
            if crlf != b"\r\n":
                raise _Closed("chunk not followed by CRLF")
            yield crlf
        return
    length = head.length
    if length is not None:
        yield from conn.pieces(length)
    elif response_to is not None:
        yield from conn.until_eof()  # a response framed by closing the connection


def _error_reply(status: int, method: str, path: str, request_id: int) -> bytes:
    reason, code = _REASONS.get(status, ("Injected Fault", "InjectedFault"))
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>injected by the fault proxy</Message>"
        f"<Resource>{path}</Resource><RequestId>fault-proxy-{request_id}</RequestId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"x-amz-request-id: fault-proxy-{request_id}\r\n"
        "\r\n"
    ).encode()
    return head if method == "HEAD" else head + body


class FaultProxy:
    """The proxy (see the module docs). Thread-safe."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0, decode_paths: bool = False) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://HOST:PORT, got {upstream!r}")
        self.upstream = (_loopback(parts.hostname), parts.port)
        self.host = _loopback(host)
        self.port = port
        self.decode_paths = decode_paths
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._log: list[LogEntry] = []
        self._counters: dict[str, int] = {}
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[_Conn] = set()
        self._stopping = False

    # -- lifecycle -------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Listen and serve on a daemon thread; returns :attr:`url`."""
        if self._listener is not None:
            raise RuntimeError("the proxy is already started")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop listening and close every connection. Idempotent."""
        self._stopping = True
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- rules, log, counters --------------------------------------------------

    def add_rule(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def fail(
        self,
        method: str | Collection[str] | None,
        path: str,
        *,
        query: str | None = None,
        status: int | str = 503,
        times: int | None = 1,
        before: Hook | None = None,
    ) -> Rule:
        """Answer matching requests without forwarding them: *status* with an
        S3-style error body, or no reply (``"close"``, ``"reset"``)."""
        return self.add_rule(Rule(method, path, "fail", query=query, status=status, times=times, before=before))

    def drop_reply(
        self,
        method: str | Collection[str] | None,
        path: str,
        *,
        query: str | None = None,
        how: str = "close",
        times: int | None = 1,
        before: Hook | None = None,
        after: Hook | None = None,
    ) -> Rule:
        """Forward matching requests, read the upstream's whole reply, then
        close (or reset) the client connection without any of it."""
        return self.add_rule(
            Rule(method, path, "drop_reply", query=query, how=how, times=times, before=before, after=after)
        )

    def observe(
        self,
        method: str | Collection[str] | None,
        path: str,
        *,
        query: str | None = None,
        times: int | None = None,
        before: Hook | None = None,
        after: Hook | None = None,
    ) -> Rule:
        """Forward matching requests unchanged, running the hooks: *before*
        (e.g. a delay, to stand for a store far away) and *after*."""
        return self.add_rule(Rule(method, path, "forward", query=query, times=times, before=before, after=after))

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    def clear(self) -> None:
        """Forget every rule, the log and the counters."""
        with self._lock:
            self._rules.clear()
            self._log.clear()
            self._counters.clear()

    @property
    def log(self) -> list[LogEntry]:
        """Every request so far, in the order their replies were decided."""
        with self._lock:
            return list(self._log)

    def requests(self, method: str | None = None, path: str | None = None, action: str | None = None) -> list[LogEntry]:
        """Log entries by method, path regex (searched) and action."""
        pattern = re.compile(path) if path is not None else None
        return [
            e
            for e in self.log
            if (method is None or e.method == method.upper())
            and (pattern is None or pattern.search(e.path))
            and (action is None or e.action == action)
        ]

    @property
    def counters(self) -> dict[str, int]:
        """``connections``, ``requests``, ``forward``, ``fail``, ``drop_reply``,
        ``upstream_errors`` (could not connect), ``broken`` (an exchange a
        peer broke off), ``bytes_up``, ``bytes_down``."""
        with self._lock:
            return dict(self._counters)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + n

    def _decide(self, method: str, path: str, query: str) -> tuple[LogEntry, Rule | None]:
        with self._lock:
            for i, rule in enumerate(self._rules):
                if rule.matches(method, path, query):
                    rule.hits += 1
                    return LogEntry(method, path, query, rule.action, rule=i), rule
            return LogEntry(method, path, query, "forward"), None

    def _record(self, entry: LogEntry) -> None:
        with self._lock:
            self._log.append(entry)
            self._counters["requests"] = self._counters.get("requests", 0) + 1
            self._counters[entry.action] = self._counters.get(entry.action, 0) + 1

    # -- serving ---------------------------------------------------------------

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None and not self._stopping:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(_IDLE_TIMEOUT)
            self._count("connections")
            threading.Thread(target=self._serve, args=(_Conn(sock),), name="fault-proxy-conn", daemon=True).start()

    def _track(self, conn: _Conn | None, add: bool) -> None:
        if conn is None:
            return
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _serve(self, client: _Conn) -> None:
        self._track(client, True)
        upstream: _Conn | None = None
        reset = False
        entry: LogEntry | None = None
        try:
            while not self._stopping:
                entry = None
                raw = client.head()
                if raw is None:
                    return
                head = _Head(raw)
                method, _, rest = head.start.partition(" ")
                target = rest.rpartition(" ")[0] or rest
                path, _, query = target.partition("?")
                if self.decode_paths:
                    path = unquote(path)
                entry, rule = self._decide(method.upper(), path, query)
                entry.byte_range = head.get("range")
                entry.copy_source = head.get("x-amz-copy-source") or head.get("x-goog-copy-source")
                if rule is not None and rule.before is not None:
                    rule.before(entry)
                if rule is not None and rule.action == "fail":
                    keep, reset = self._fail(client, head, entry, rule)
                    if not keep:
                        return
                    continue
                if upstream is not None and not upstream.alive():
                    upstream.close()  # the upstream closed it while idle: never send into that race
                    self._track(upstream, False)
                    upstream = None
                if upstream is None:
                    upstream = self._connect()
                    self._track(upstream, True)
                    if upstream is None:
                        self._bad_gateway(client, head, entry)
                        return
                keep, reset = self._forward(client, upstream, head, entry, rule)
                if not keep:
                    return
        except (_Closed, OSError) as e:
            if entry is not None and all(x is not entry for x in self.log):
                entry.error = f"{type(e).__name__}: {e}"
                self._count("broken")
                self._record(entry)
            return
        finally:
            client.close(reset=reset)
            self._track(client, False)
            if upstream is not None:
                upstream.close()
                self._track(upstream, False)

    def _connect(self) -> _Conn | None:
        try:
            sock = socket.create_connection(self.upstream, timeout=_IDLE_TIMEOUT)
        except OSError:
            return None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(sock)

    def _bad_gateway(self, client: _Conn, head: _Head, entry: LogEntry) -> None:
        self._count("upstream_errors")
        entry.status = 502
        self._record(entry)
        with contextlib.suppress(OSError):
            client.send(_error_reply(502, entry.method, entry.path, len(self._log)))

    def _fail(self, client: _Conn, head: _Head, entry: LogEntry, rule: Rule) -> tuple[bool, bool]:
        """Answer without forwarding; returns (keep the connection, reset it)."""
        expects = "100-continue" in head.tokens("expect")
        if not expects:
            for piece in _body(client, head):
                entry.request_bytes += len(piece)
        entry.status = rule.status if isinstance(rule.status, int) else None
        self._record(entry)
        if isinstance(rule.status, str):
            return False, rule.status == "reset"
        client.send(_error_reply(rule.status, entry.method, entry.path, len(self._log)))
        # A client told to wait for 100 Continue never sent its body: close.
        keep = not expects and "close" not in head.tokens("connection")
        return keep, False

    def _forward(
        self, client: _Conn, upstream: _Conn, head: _Head, entry: LogEntry, rule: Rule | None
    ) -> tuple[bool, bool]:
        """Forward one exchange; returns (keep the connection, reset it)."""
        dropping = rule is not None and rule.action == "drop_reply"
        upstream.send(head.raw)
        entry.request_bytes = len(head.raw)
        if "100-continue" in head.tokens("expect"):
            # Relay interim replies until the upstream asks for the body, or
            # answers at once (then the client sends no body).
            rhead = _Head(self._head_or_closed(upstream))
            status = self._status(rhead)
            if status == 100:
                client.send(rhead.raw)  # not the reply: the client needs it to send the body
            else:
                return self._reply(client, upstream, head, entry, rule, rhead, status, body_sent=False)
        for piece in _body(client, head):
            upstream.send(piece)
            entry.request_bytes += len(piece)
        self._count("bytes_up", entry.request_bytes)
        while True:
            rhead = _Head(self._head_or_closed(upstream))
            status = self._status(rhead)
            if 100 <= status < 200:
                if not dropping:
                    client.send(rhead.raw)
                continue
            return self._reply(client, upstream, head, entry, rule, rhead, status, body_sent=True)

    @staticmethod
    def _head_or_closed(conn: _Conn) -> bytes:
        raw = conn.head()
        if raw is None:
            raise _Closed("the upstream closed the connection")
        return raw

    @staticmethod
    def _status(head: _Head) -> int:
        parts = head.start.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise _Closed(f"bad status line {head.start!r}")
        return int(parts[1])

    def _reply(
        self,
        client: _Conn,
        upstream: _Conn,
        head: _Head,
        entry: LogEntry,
        rule: Rule | None,
        rhead: _Head,
        status: int,
        *,
        body_sent: bool,
    ) -> tuple[bool, bool]:
        entry.upstream_status = status
        method = entry.method
        if rule is not None and rule.action == "drop_reply":
            for _ in _body(upstream, rhead, response_to=method, status=status):
                pass
            if rule.after is not None:
                rule.after(entry)
            self._record(entry)
            return False, rule.how == "reset"
        if rule is not None and rule.after is not None:
            rule.after(entry)
        entry.status = status
        self._record(entry)
        client.send(rhead.raw)
        down = len(rhead.raw)
        framed_by_close = (
            not rhead.chunked
            and rhead.length is None
            and method != "HEAD"
            and status >= 200
            and status not in (204, 304)
        )
        for piece in _body(upstream, rhead, response_to=method, status=status):
            client.send(piece)
            down += len(piece)
        self._count("bytes_down", down)
        keep = (
            body_sent
            and not framed_by_close
            and "close" not in head.tokens("connection")
            and "close" not in rhead.tokens("connection")
        )
        return keep, False


def _main(argv: list[str]) -> int:
    """``python tests/fault_proxy.py UPSTREAM_URL [PORT]``: a pass-through
    proxy that prints its log, for poking at by hand."""
    if len(argv) < 2:
        print(__doc__)
        return 2
    proxy = FaultProxy(argv[1], port=int(argv[2]) if len(argv) > 2 else 0)
    print(f"listening on {proxy.start()} -> {argv[1]}", flush=True)
    seen = 0
    try:
        while True:
            time.sleep(0.5)
            log = proxy.log
            for e in log[seen:]:
                print(e, flush=True)
            seen = len(log)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv))
