"""The gateway's HTTP/1.1 client to the upstream: pooled keep-alive connections (TLS for https upstreams), each
answer parsed by httptools (llhttp, the parser behind Node.js and aiohttp's own C parser), bodies handed on as they
arrive.

Why not aiohttp's ClientSession, which the gateway used until this module: bench/serve_bench.py --floor measured
bare pass-through proxies that record nothing, in one run against the same upstream (SCHED_FIFO, 2-vCPU VM):
aiohttp's server + ClientSession adds +1.0-1.2 ms p50; the same server with upstream calls on httptools connections
+0.64 ms. The ClientSession's request machinery (request object, tracing hooks, a writer task, timer contexts) cost
~0.4 ms of the issue's 1 ms budget on its own. Here a call on a pooled connection is one `transport.write` on the
caller's own loop turn, and the answer is a parser fed from `data_received`.

What it keeps of the ClientSession's behaviour: a connect timeout and a read timeout that restarts with every
arrival (aiohttp's sock_read); no redirects followed, no cookies kept, no decompression (the gateway asks for
identity); bodies framed by Content-Length, chunked or the connection's end; a pooled connection the upstream has
closed meanwhile is replaced, and the request sent once more, only when not one byte of an answer came on it
(the request cannot have been processed as far as the gateway can tell: the usual rule for idempotent-by-position
retries, as urllib3 and httpx do); anything else broken is an `UpstreamError` for the gateway to record.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from urllib.parse import urlsplit

import httptools

from .http_server import Headers

IDLE_S = 30.0  # a pooled connection idle longer is closed rather than reused (aiohttp's keepalive_timeout)
POOL_MAX = 512  # idle connections kept at most
PAUSE_AT = 4 * 1024 * 1024  # buffered body bytes above which reading from the upstream pauses until taken
MAX_HEAD = 64 * 1024  # bytes of header names and values an answer may have (aiohttp's client: 8190 a line)


class UpstreamError(Exception):
    """The upstream could not be reached, or its answer broke off; str() says which, in a few words."""


class Unreachable(UpstreamError):
    pass


class AnswerTooLarge(UpstreamError):
    """A non-streamed answer over the size the gateway will hold whole (`read(limit)`)."""


class BrokenOff(UpstreamError):
    pass


class _Conn(asyncio.Protocol):
    """One connection; the answer being received (`resp`) owns the parser."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.resp: UpstreamResponse | None = None
        self.lost = False
        self.idle_since = 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        resp = self.resp
        if resp is None or resp.done:  # bytes nobody asked for: the connection cannot be trusted any more
            self.transport.close()
            return
        resp.got_bytes = True
        try:
            resp.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            resp._fail(BrokenOff(f"a malformed answer ({exc})"))
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.lost = True
        if self.resp is not None:
            self.resp._lost()


class UpstreamResponse:
    """One answer: `status` and `headers` once `Call` returns it, the body through `read()` or `iter_any()`;
    `release()` (or `close()`) when done with it."""

    def __init__(self, client: "UpstreamClient", conn: _Conn, reused: bool, head_only: bool = False):
        self.client = client
        self.conn = conn
        self.reused = reused
        self.head_only = head_only  # the answer to a HEAD: no body follows whatever its Content-Length says
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers = Headers([])
        self.got_bytes = False
        self.done = False
        self._raw: list[tuple[str, str]] = []
        self._head_bytes = 0
        self._head = False
        self._framed = False  # Content-Length or chunked; else the body ends with the connection
        self._keep_alive = False
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future | None = None
        self._deadline: float | None = None  # end_within's: the loop time by which the answer must end
        self._later: asyncio.Task | None = None  # release_later's wait for the end
        conn.resp = self

    # -- parser callbacks (httptools) ------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.done:  # a second answer to one request, in the same bytes: nothing after the first can be trusted,
            self._fail(BrokenOff("it sent an answer nobody asked for"))  # so the connection is not pooled either
            raise self._error  # stops the parser: its bytes are neither relayed nor recorded

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > MAX_HEAD:  # a broken or hostile upstream would otherwise grow the gateway's memory
            self._fail(BrokenOff(f"its answer's headers are over {MAX_HEAD // 1024} KiB"))
            raise self._error  # stops the parser; data_received closes the connection
        key = name.decode("utf-8", "surrogateescape")
        low = key.lower()
        if low in ("content-length", "transfer-encoding"):
            self._framed = True
        self._raw.append((key, value.decode("utf-8", "surrogateescape")))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            self._raw.clear()
            self._framed = False
            return
        self.status = status
        self.headers = Headers(self._raw)
        self._keep_alive = self.parser.should_keep_alive()
        self._head = True
        if self.head_only:  # the parser would wait for the body a GET would get: end here, and drop the connection
            self.done = True
            self._keep_alive = False
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > PAUSE_AT and not self._paused and self.conn.transport is not None:
            self._paused = True
            self.conn.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._head:
            self.done = True
            self._wake()

    # -- connection events -----------------------------------------------------------------------------------------
    def _lost(self) -> None:
        if self.done:
            return
        if self._head and not self._framed and self._error is None:
            self.done = True  # a body delimited by the connection's end: this is its end
            self._keep_alive = False
        else:
            self._fail(BrokenOff("the upstream closed the connection mid-answer" if self.got_bytes
                                 else "the upstream closed the connection"))
        self._wake()

    def _fail(self, error: UpstreamError) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        """Until the parser or the connection has news; asyncio.TimeoutError after the read timeout."""
        loop = self.client.loop
        wait = self.client.read_timeout
        if self._deadline is not None:
            wait = min(wait, self._deadline - loop.time())
            if wait <= 0:
                raise asyncio.TimeoutError()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(wait, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    # -- for the gateway ---------------------------------------------------------------------------------------------
    async def head(self) -> None:
        while not self._head:
            if self._error is not None:
                raise self._error
            await self._wait()

    def _take(self) -> bytes:
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        if self._paused and self.conn.transport is not None:
            self._paused = False
            self.conn.transport.resume_reading()
        return data

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body; AnswerTooLarge (and the connection dropped) once it passes `limit` bytes."""
        parts = []
        size = 0
        while True:
            if self._chunks:
                part = self._take()
                parts.append(part)
                size += len(part)
                if limit is not None and size > limit:
                    self.close()
                    raise AnswerTooLarge(f"its answer is over {limit} bytes")
            if self.done:
                return parts[0] if len(parts) == 1 else b"".join(parts)
            if self._error is not None:
                raise self._error
            await self._wait()

    def end_within(self, seconds: float) -> None:
        """The answer must end within `seconds` from now, whatever still arrives (it is complete as far as its
        protocol goes; only the upstream's end of it is due): past that, reading raises asyncio.TimeoutError."""
        self._deadline = self.client.loop.time() + seconds

    async def iter_any(self):
        """The body as it arrives: whatever came since the last step, joined."""
        while True:
            if self._chunks:
                yield self._take()
                continue
            if self.done:
                return
            if self._error is not None:
                raise self._error
            await self._wait()

    def release_later(self, within: float) -> None:
        """Done with an answer whose end is still due (a stream complete as far as its protocol goes, whose upstream
        is slow to end it): its connection goes back to the pool if the end comes within `within` seconds with no
        more body bytes, else it is closed. Closed at once, a slow-ending upstream never had a connection reused:
        every call paid a new connect (and TLS handshake)."""
        if self.done or self._error is not None or self.conn.lost or self._chunks or self.client.loop is None:
            self.release()
            return
        self._deadline = self.client.loop.time() + within
        self._later = task = self.client.loop.create_task(self._release_at_end())
        self.client.ending.add(task)
        task.add_done_callback(self.client.ending.discard)

    async def _release_at_end(self) -> None:
        try:
            while not self.done and not self._chunks and self._error is None:
                await self._wait()
        except asyncio.TimeoutError:
            pass
        finally:
            self._later = None
            self.release()  # pooled only if it ended cleanly with nothing more: bytes after the end close it

    def release(self) -> None:
        """Done with the answer: its connection goes back to the pool when the answer ended cleanly and the upstream
        keeps the connection open, else it is closed."""
        if self._later is not None:  # release_later's task decides
            return
        conn = self.conn
        if conn.resp is not self:
            return
        conn.resp = None
        self.parser = None  # it refers back to this object: a cycle only the garbage collector would free
        if self.done and self._keep_alive and self._error is None and not conn.lost and not self._chunks:
            self.client._put_back(conn)
        elif conn.transport is not None:
            conn.transport.close()

    def close(self) -> None:
        """Drop the connection whatever state the answer is in (a client gone, a timeout, a shutdown)."""
        if self._later is not None:
            self._later.cancel()
            self._later = None
        conn = self.conn
        if conn.resp is self:
            conn.resp = None
            self.parser = None
        if conn.transport is not None:
            conn.transport.close()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())


class Call:
    """One request in flight: written at once when a pooled connection is free, else as soon as a new connection is
    up. `await call` gives the answer once its head is in; `cancel()` drops its connection."""

    def __init__(self, client: "UpstreamClient", message: bytes, head_only: bool = False):
        self.client = client
        self.message = message
        self.head_only = head_only
        self.resp: UpstreamResponse | None = None
        self._connecting: asyncio.Task | None = None
        conn = client._pooled()
        if conn is not None:
            self.resp = UpstreamResponse(client, conn, reused=True, head_only=head_only)
            conn.transport.write(message)
        else:
            self._connecting = asyncio.ensure_future(client._connect())

    def cancel(self) -> None:
        connecting = self._connecting
        if connecting is not None:
            if connecting.done() and not connecting.cancelled() and connecting.exception() is None:
                connecting.result().transport.close()  # connected, never used
            connecting.cancel()
        if self.resp is not None:
            self.resp.close()

    def __await__(self):
        return self._answer().__await__()

    async def _answer(self) -> UpstreamResponse:
        for _attempt in range(2):
            if self.resp is None:
                connecting, self._connecting = self._connecting, None
                conn = await (connecting if connecting is not None else self.client._connect())
                self.resp = UpstreamResponse(self.client, conn, reused=False, head_only=self.head_only)
                conn.transport.write(self.message)
            try:
                await self.resp.head()
                return self.resp
            except BrokenOff:
                if not (self.resp.reused and not self.resp.got_bytes):
                    raise
                self.resp.close()  # a pooled connection the upstream had closed: once more on a new one
                self.resp = None
        raise AssertionError("unreachable")  # the second attempt runs on a new connection and returns or raises


class UpstreamClient:
    """Keep-alive connections to one upstream origin (scheme, host, port)."""

    def __init__(self, base_url: str, *, connect_timeout: float, read_timeout: float):
        parts = urlsplit(base_url)
        self.host = parts.hostname or ""
        self.tls = parts.scheme == "https"
        default_port = 443 if self.tls else 80
        self.port = parts.port or default_port
        shown_host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = shown_host if self.port == default_port else f"{shown_host}:{self.port}"
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.ssl_context = ssl.create_default_context() if self.tls else None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.idle: list[_Conn] = []
        self.ending: set[asyncio.Task] = set()  # answers waiting for their end before their connection is pooled

    def start(self, method: str, target: str, headers: dict, body: bytes) -> Call:
        """Send `method target` with these headers (hop-by-hop ones already dropped) and body; await the Call for
        the answer."""
        self.loop = self.loop or asyncio.get_running_loop()
        lines = [f"{method} {target} HTTP/1.1\r\nHost: {self.host_header}\r\n"]
        for name, value in headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise UpstreamError(f"header {name!r} holds a line break and cannot be sent")
            lines.append(f"{name}: {value}\r\n")
        if body or method not in ("GET", "HEAD"):
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append("\r\n")
        return Call(self, "".join(lines).encode("utf-8", "surrogateescape") + body, head_only=method == "HEAD")

    def _pooled(self) -> _Conn | None:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if conn.lost or conn.transport.is_closing():
                continue
            if now - conn.idle_since > IDLE_S:
                conn.transport.close()
                continue
            return conn
        return None

    def _put_back(self, conn: _Conn) -> None:
        if len(self.idle) >= POOL_MAX:
            conn.transport.close()
            return
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    async def _connect(self) -> _Conn:
        loop = self.loop or asyncio.get_running_loop()
        try:
            _transport, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl_context,
                                       server_hostname=self.host if self.tls else None),
                self.connect_timeout)
        except asyncio.TimeoutError:
            raise
        except OSError as exc:  # refused, no route, name not resolved, TLS handshake or certificate refused
            raise Unreachable(type(exc).__name__) from exc
        return conn

    def close(self) -> None:
        """Close the idle connections (in-flight answers close theirs when released; those waiting for their end
        close theirs once cancelled)."""
        for task in list(self.ending):
            task.cancel()
        while self.idle:
            conn = self.idle.pop()
            if conn.transport is not None:
                conn.transport.close()
