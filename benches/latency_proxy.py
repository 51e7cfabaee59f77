"""A TCP proxy on 127.0.0.1 that adds a fixed one-way latency to every byte.

Every chunk read from one side is delivered to the other side at
``arrival time + delay``. Chunks keep their order within a direction, but
their delays overlap: a stream of chunks is shifted in time, not spaced out,
so the proxy models latency, not a bandwidth limit. The TCP handshake is
modelled too (on by default): bytes the client sends reach the server no
earlier than one round trip after the connection was accepted, plus the
one-way delay.

Memory is bounded: each direction of each connection holds at most
``max_buffer`` bytes in flight (32 MiB by default, enough for 3.2 GB/s at
10 ms); past that, or while the receiving socket is backed up, the proxy
stops reading from the sender, which pushes back like a full TCP window.

Only loopback addresses are accepted, for listening and as the target.

In-process use (the proxy runs its own event loop in a daemon thread)::

    proxy = LatencyProxy("127.0.0.1", 8333, delay_ms=10)
    port = proxy.start_in_thread()
    ...  # point the client at 127.0.0.1:port
    proxy.stop()

Command line (prints ``listening on 127.0.0.1:PORT -> ...`` once ready; stops
on SIGINT/SIGTERM, at the end of standard input with ``--exit-on-stdin-eof``,
or after ``--duration`` seconds)::

    python benches/latency_proxy.py --listen 127.0.0.1:0 --target 127.0.0.1:8333 --delay-ms 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import cast

__all__ = ["LatencyProxy", "ProxyStats"]

_MAX_BUFFER = 32 * 1024 * 1024
_EOF = b""  # queue marker: the sender half-closed; pass the half-close on
_CLOSE = None  # queue marker: the sender's connection is gone; close the receiver after the data


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


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    try:
        return _loopback(host), int(port)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


@dataclass
class ProxyStats:
    """Counters, updated on the proxy's event loop."""

    connections: int = 0
    bytes_up: int = 0  # client -> target
    bytes_down: int = 0  # target -> client
    errors: list[str] = field(default_factory=list)
    # With trace=True: (monotonic time, connection number, first line) of each HTTP request and new connection.
    trace: list[tuple[float, int, str]] | None = None


_HTTP_METHODS = (b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ")


class _End(asyncio.Protocol):
    """One socket of a proxied connection: the client's, or the one to the target."""

    def __init__(self, conn: _Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.outgoing: _Direction | None = None  # bytes read here, going to the peer
        self.incoming: _Direction | None = None  # bytes to write here
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.conn.made(self)

    def data_received(self, data: bytes) -> None:
        assert self.outgoing is not None
        self.outgoing.push(data)

    def eof_received(self) -> bool:
        assert self.outgoing is not None
        self.outgoing.push(_EOF)
        return True  # keep the socket open: the other direction may still carry data

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None:
            self.conn.proxy.stats.errors.append(f"{self.name}: {type(exc).__name__}: {exc}")
        self.conn.lost(self)

    def pause_writing(self) -> None:  # our socket is backed up: stop reading from the peer
        if self.incoming is not None:
            self.incoming.set_receiver_blocked(True)

    def resume_writing(self) -> None:
        if self.incoming is not None:
            self.incoming.set_receiver_blocked(False)


class _Direction:
    """Bytes from *src* to *dst*, each chunk released at max(arrival, not_before) + delay."""

    def __init__(self, conn: _Connection, src: _End, dst: _End, not_before: float, upward: bool) -> None:
        self.conn = conn
        self.loop = conn.loop
        self.src = src
        self.dst = dst
        self.not_before = not_before
        self.upward = upward
        self.queue: deque[tuple[float, bytes | None]] = deque()
        self.buffered = 0
        self.timer: asyncio.TimerHandle | None = None
        self.receiver_blocked = False
        self.reading_paused = False
        self.eof_delivered = False

    def push(self, data: bytes | None) -> None:
        """Queue *data* (``b""`` = EOF, ``None`` = close) for delivery after the delay."""
        due = max(self.loop.time(), self.not_before) + self.conn.proxy.delay
        trace = self.conn.proxy.stats.trace
        if trace is not None and self.upward and data and data.startswith(_HTTP_METHODS):
            line = data[: data.find(b"\r\n")].decode("latin-1")[:160]
            trace.append((time.monotonic(), self.conn.number, line))
        self.queue.append((due, data))
        self.buffered += len(data) if data else 0
        self._update_reading()
        if self.timer is None:
            self.timer = self.loop.call_at(due, self.flush)

    def set_receiver_blocked(self, blocked: bool) -> None:
        self.receiver_blocked = blocked
        self._update_reading()

    def flush(self) -> None:
        """Deliver every chunk that is due, then wait for the next one."""
        self.timer = None
        transport = self.dst.transport
        if transport is None or self.dst.closed:
            if self.dst.closed:
                self.queue.clear()
                self.buffered = 0
            return  # not connected yet: _Connection.made() flushes again
        now = self.loop.time()
        chunks: list[bytes] = []
        marker: bytes | None = b"-"  # what ended this round: b"" EOF, None close, else nothing
        while self.queue and self.queue[0][0] <= now:
            _, data = self.queue.popleft()
            if not data:
                marker = data
                break
            chunks.append(data)
        if chunks:
            size = sum(len(c) for c in chunks)
            self.buffered -= size
            if self.upward:
                self.conn.proxy.stats.bytes_up += size
            else:
                self.conn.proxy.stats.bytes_down += size
            transport.writelines(chunks)
        if marker is _CLOSE:  # the sender is gone: close once the buffered bytes are written
            self.queue.clear()
            transport.close()
            return
        if marker == _EOF:
            self.eof_delivered = True
            if transport.can_write_eof():
                transport.write_eof()
            self.conn.maybe_done()
        if self.queue:
            self.timer = self.loop.call_at(self.queue[0][0], self.flush)
        self._update_reading()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()
        self.buffered = 0

    def _update_reading(self) -> None:
        transport = self.src.transport
        if transport is None or self.src.closed:
            return
        pause = self.receiver_blocked or self.buffered >= self.conn.proxy.max_buffer
        if pause and not self.reading_paused:
            transport.pause_reading()
            self.reading_paused = True
        elif not pause and self.reading_paused:
            transport.resume_reading()
            self.reading_paused = False


class _Connection:
    """A client connection and its connection to the target."""

    def __init__(self, proxy: LatencyProxy) -> None:
        self.proxy = proxy
        self.loop = asyncio.get_running_loop()
        accepted = self.loop.time()
        self.client = _End(self, "client")
        self.upstream = _End(self, "target")
        not_before = accepted + 2 * proxy.delay if proxy.model_handshake else 0.0
        self.up = _Direction(self, self.client, self.upstream, not_before, upward=True)
        self.down = _Direction(self, self.upstream, self.client, 0.0, upward=False)
        self.client.outgoing = self.upstream.incoming = self.up
        self.upstream.outgoing = self.client.incoming = self.down
        self.connect_task: asyncio.Task[None] | None = None
        self.number = 0

    def made(self, end: _End) -> None:
        if end is self.client:
            self.proxy.connections.add(self)
            self.proxy.stats.connections += 1
            self.number = self.proxy.stats.connections
            if self.proxy.stats.trace is not None:
                self.proxy.stats.trace.append((time.monotonic(), self.number, "(new connection)"))
            self.connect_task = self.loop.create_task(self._connect())
        else:
            self.up.flush()  # bytes the client sent while we were connecting

    async def _connect(self) -> None:
        try:
            await self.loop.create_connection(lambda: self.upstream, *self.proxy.target)
        except OSError as exc:
            self.proxy.stats.errors.append(f"connect {self.proxy.target}: {exc}")
            self.abort()

    def lost(self, end: _End) -> None:
        if end is self.client:
            self.down.cancel()
            if self.upstream.transport is None:
                self.abort()
                return
        else:
            self.up.cancel()
        assert end.outgoing is not None
        end.outgoing.push(_CLOSE)
        if self.client.closed and self.upstream.closed:
            self.proxy.connections.discard(self)

    def maybe_done(self) -> None:
        """Both directions half-closed: close both sockets."""
        if self.up.eof_delivered and self.down.eof_delivered:
            for end in (self.client, self.upstream):
                if end.transport is not None:
                    end.transport.close()

    def abort(self) -> None:
        if self.connect_task is not None:
            self.connect_task.cancel()
        self.up.cancel()
        self.down.cancel()
        for end in (self.client, self.upstream):
            if end.transport is not None:
                end.transport.abort()
        self.proxy.connections.discard(self)


class LatencyProxy:
    """Forward 127.0.0.1:*listen_port* to *target_host*:*target_port* with *delay_ms* each way.

    Args:
        target_host: Loopback address of the real server.
        target_port: Its port.
        delay_ms: One-way latency added to every chunk, in each direction.
        listen_host: Loopback address to listen on.
        listen_port: Port to listen on; 0 picks a free one (see :attr:`port`).
        model_handshake: Also delay a new connection's first client bytes by
            one round trip, as a real TCP connect would.
        max_buffer: Bytes in flight per direction before reading pauses.
        trace: Record each HTTP request line and new connection in
            ``stats.trace`` (a diagnostic: who waits on how many round trips).

    Raises:
        ValueError: a non-loopback address or a negative delay.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        delay_ms: float = 10.0,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        model_handshake: bool = True,
        max_buffer: int = _MAX_BUFFER,
        trace: bool = False,
    ) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        self.target = (_loopback(target_host), int(target_port))
        self.listen = (_loopback(listen_host), int(listen_port))
        self.delay = delay_ms / 1000.0
        self.model_handshake = model_handshake
        self.max_buffer = max_buffer
        self.stats = ProxyStats(trace=[] if trace else None)
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def port(self) -> int:
        """The port actually listened on (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("proxy not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    # -- asyncio API ---------------------------------------------------------

    async def start(self) -> None:
        """Bind and start accepting, on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._server = await self._loop.create_server(lambda: _Connection(self).client, self.listen[0], self.listen[1])

    async def aclose(self) -> None:
        """Stop accepting and drop every open connection. Idempotent."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
        if self._stopped is not None:
            self._stopped.set()

    async def wait_stopped(self) -> None:
        if self._stopped is None:
            raise RuntimeError("proxy not started")
        await self._stopped.wait()

    # -- thread API ----------------------------------------------------------

    def start_in_thread(self, timeout: float = 10.0) -> int:
        """Run the proxy on its own event loop in a daemon thread; return the port."""
        if self._thread is not None:
            raise RuntimeError("proxy already started")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_until_complete(self.wait_stopped())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("latency proxy did not start")
        if failure:
            raise failure[0]
        return self.port

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a proxy started with :meth:`start_in_thread`. Idempotent."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None or not thread.is_alive():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(timeout)
        thread.join(timeout)

    def __enter__(self) -> LatencyProxy:
        self.start_in_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- command line ---------------------------------------------------------------


async def _serve(args: argparse.Namespace) -> int:
    proxy = LatencyProxy(
        args.target[0],
        args.target[1],
        delay_ms=args.delay_ms,
        listen_host=args.listen[0],
        listen_port=args.listen[1],
        model_handshake=not args.no_handshake,
    )
    await proxy.start()
    loop = asyncio.get_running_loop()

    stopping: list[asyncio.Task[None]] = []

    def request_stop() -> None:
        if not stopping:
            stopping.append(loop.create_task(proxy.aclose()))

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, request_stop)
    if args.duration is not None:
        loop.call_later(args.duration, request_stop)
    if args.exit_on_stdin_eof:

        def watch_stdin() -> None:
            sys.stdin.buffer.read()  # returns at EOF: the parent closed the pipe, or died
            loop.call_soon_threadsafe(request_stop)

        threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    print(f"listening on {proxy.listen[0]}:{proxy.port} -> {args.target[0]}:{args.target[1]}", flush=True)
    await proxy.wait_stopped()
    s = proxy.stats
    print(
        f"latency proxy stopped: {s.connections} connections, {s.bytes_up} B up, {s.bytes_down} B down, "
        f"{len(s.errors)} socket errors",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="TCP proxy on loopback that adds a fixed one-way latency.")
    parser.add_argument("--listen", type=_host_port, default=("127.0.0.1", 0), help="HOST:PORT (default 127.0.0.1:0)")
    parser.add_argument("--target", type=_host_port, required=True, help="HOST:PORT of the real server (loopback)")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="one-way latency in ms (default 10)")
    parser.add_argument("--no-handshake", action="store_true", help="do not delay a new connection's first bytes")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="stop when standard input closes")
    args = parser.parse_args(argv)
    if args.delay_ms < 0:
        parser.error("--delay-ms must be >= 0")
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
