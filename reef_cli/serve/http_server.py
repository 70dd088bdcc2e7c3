"""The gateway's HTTP/1.1 server: one asyncio.Protocol per client connection, requests parsed by httptools (llhttp),
the parser the upstream client (upstream_http.py) already uses, so both sides of the hop stand on one stack.

Why not aiohttp's server, which the gateway ran on until this module: issue 11 asks for <= 1 ms added p50 with
every call durably recorded, and a durable append costs ~0.5 ms inside a gateway on the 2-vCPU VM (fdatasync,
~100 us of it CPU). bench/serve_bench.py --floor measured bare recording proxies in one run: aiohttp's low-level
server + reef's client + one append added +0.92-1.18 ms p50, uvicorn's +0.81-1.04, a Protocol server on httptools
+0.64-0.86. Only the last leaves room for reef's own work (record, digests, log line) under the line.

What it keeps of aiohttp's server, for the gateway's clients: keep-alive (HTTP/1.1 by default, HTTP/1.0 when asked),
pipelined requests answered in order, `Expect: 100-continue` left to the handler (it checks auth and the cap
first), bodies by Content-Length or chunked, streamed answers chunked (HTTP/1.0: until the connection's end), HEAD
without a body, write back-pressure (a slow reader holds the handler at `write`, not the gateway's memory), a
keep-alive idle timeout, and limits: request line 8 KiB, one header 8 KiB, headers 64 KiB and 128 fields (431 or
414 beyond), the body cap (the handler's 413). A request the parser refuses gets a 400 with one log line that
never quotes the request's bytes (a malformed `Authorization: Bearer sk-...` must not reach the log).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections import deque
from typing import Awaitable, Callable
from urllib.parse import parse_qsl, unquote

import httptools

from .answers import BadHeader, ClientGone, Response, StreamResponse, _head  # noqa: F401 - the server's answers

MAX_LINE = 8190  # request target and each header line (aiohttp's limits)
MAX_HEADERS_BYTES = 64 * 1024
MAX_FIELDS = 128
KEEPALIVE_S = 75.0  # an idle keep-alive connection is closed after this (aiohttp's keepalive_timeout)
HEAD_TIMEOUT_S = 60.0  # a request's line and headers must arrive within this
BODY_IDLE_S = 300.0  # a request body that stops arriving for this long ends the connection
LINGER_S = 2.0  # after the last answer on a closing connection, request bytes still coming are dropped this long
WRITE_HIGH = 256 * 1024  # transport buffer above which a streamed write waits for the client to read


class BodyTooLarge(Exception):
    """The request body is over the server's cap; the handler answers 413."""


class Headers:
    """Headers as they came: case-insensitive lookup of the first value (`get`, `[]`, `in`), every value of a
    repeated name (`getall`), all of them in order (`items`). Requests here, answers in upstream_http.py."""

    __slots__ = ("_items", "_first")

    def __init__(self, items: list[tuple[str, str]]):
        self._items = items
        self._first: dict[str, str] | None = None

    def _index(self) -> dict[str, str]:
        first = self._first
        if first is None:
            first = self._first = {}
            for name, value in self._items:
                first.setdefault(name.lower(), value)
        return first

    def get(self, name: str, default=None):
        return self._index().get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._index()[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._index()

    def getall(self, name: str) -> list[str]:
        low = name.lower()
        return [value for key, value in self._items if key.lower() == low]

    def items(self):
        return iter(self._items)


class Request:
    """One request as the handler sees it. The body is read with `await read()` (it may still be arriving)."""

    __slots__ = ("method", "raw_path", "path", "query_string", "http11", "headers", "keep_alive", "content_length",
                 "conn", "t0", "route", "_body", "_size", "_done", "_cut_off", "_waiter", "too_large", "head", "answer",
                 "exchange")

    def __init__(self, conn: "_Connection", method: str, raw_path: str, path: str, query: str, http11: bool,
                 headers: Headers, keep_alive: bool, content_length: int | None):
        self.conn = conn
        self.method, self.raw_path, self.path, self.query_string = method, raw_path, path, query
        self.http11, self.headers, self.keep_alive, self.content_length = http11, headers, keep_alive, content_length
        self.t0 = time.perf_counter()
        self.route = None  # the gateway's (route, session)
        self._body: list[bytes] = []
        self._size = 0
        self._done = False
        self._cut_off = False
        self._waiter: asyncio.Future | None = None
        self.too_large = content_length is not None and content_length > conn.server.max_body
        self.head = method == "HEAD"
        # The answer that began to go out before the handler returned: a stream whose head is out or queued, or a
        # Response sent early (send_now). Nothing else may be sent for this request after it (_answer).
        self.answer: StreamResponse | Response | None = None
        self.exchange = None  # what the gateway records of it (its log line says whether a record was kept)

    @property
    def transport(self) -> asyncio.Transport | None:
        """The client's transport; None once the connection is lost."""
        return None if self.conn.lost else self.conn.transport

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(self.query_string, keep_blank_values=True))

    async def read(self) -> bytes:
        """The whole body; BodyTooLarge over the cap; ClientGone if the connection ended before it did."""
        if self.too_large:
            raise BodyTooLarge()
        if not self._done:
            if self._cut_off or self.conn.lost:
                raise ClientGone("the client hung up before its request body ended")
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            if self.too_large:
                raise BodyTooLarge()
        body = self._body
        return body[0] if len(body) == 1 else b"".join(body)

    def send_continue(self) -> None:
        """The interim `100 Continue` (the handler decided it wants the body)."""
        if not self._done and not self.conn.lost:
            self.conn.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    # -- fed by the connection
    def _feed(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self.conn.server.max_body:
            self.too_large = True
            self._body = []
            self._finish()
        elif not self.too_large:
            self._body.append(data)

    def _finish(self) -> None:
        self._done = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _cut(self) -> None:
        self._cut_off = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ClientGone("the client hung up before its request body ended"))


Handler = Callable[[Request], Awaitable["Response | StreamResponse"]]


class HttpServer:
    """Serves `handler` on a socket. `error(status, message)` builds the server's own error answers (400, 414, 431,
    500, 505) in the gateway's JSON shape; `access(request, response)` is called once an answer is out; `note(text)`
    takes one line about a request the server refused or a handler that crashed (never the request's bytes)."""

    def __init__(self, handler: Handler, *, max_body: int, error: Callable[[int, str], Response],
                 access: Callable[[Request, object], None], note: Callable[[str], None]):
        self.handler, self.max_body, self.error, self.access, self.note = handler, max_body, error, access, note
        self.connections: set[_Connection] = set()
        self.shutting_down = False
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int, *, backlog: int = 2048) -> tuple:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, backlog=backlog,
                                                reuse_address=True)
        return self._server.sockets[0].getsockname()

    def stop_accepting(self) -> None:
        """No new connections; idle keep-alive connections end now, busy ones after their current answer."""
        self.shutting_down = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if conn.idle():
                conn.close()

    async def close(self) -> None:
        self.stop_accepting()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self.parser = httptools.HttpRequestParser(self)
        self.lost = False
        self.paused = False
        self._drain: asyncio.Future | None = None
        self.queue: deque[Request] = deque()  # requests whose headers are in, in order; [0] is being answered
        self.current: Request | None = None  # the request whose body is being parsed
        self.in_head = False  # a request's line and headers are arriving
        self.task: asyncio.Task | None = None
        self.closing_after = False  # the last answer said Connection: close: nothing after it is answered
        self.reading_paused = False
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None  # when the timer's check acts (None: disarmed); see _arm
        self.timer_at = 0.0
        self.loop = asyncio.get_running_loop()
        self._url = b""
        self._fields: list[tuple[str, str]] = []
        self._head_bytes = 0
        self._head_raw = 0  # bytes received while a head was incomplete (llhttp holds a header until it ends)
        self._upgrade = False
        self.refusal: tuple[int, str] | None = None  # the answer to a refused request, once those before it are out
        self.refused: Request | None = None  # the queued request the refusal belongs to (its body broke)
        self.refusal_sent = False

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        self.server.connections.add(self)
        self._arm(KEEPALIVE_S)

    def connection_lost(self, exc) -> None:
        self.lost = True
        self.server.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for request in self.queue:
            request._cut()
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(ClientGone("the client hung up"))
        self.parser = None  # it refers back to this connection

    def data_received(self, data: bytes) -> None:
        if self.parser is None:  # refused, or lingering after the last answer: what comes is dropped
            return
        if self.in_head:
            self._head_raw += len(data)
            if self._head_raw > MAX_HEADERS_BYTES + MAX_LINE:  # one endless header: llhttp would hold all of it
                self._refuse(431, f"the request's headers are over {MAX_HEADERS_BYTES} bytes")
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._upgrade = True  # answered as a plain request (it has no body: on_headers_complete); then the end
        except httptools.HttpParserError as exc:
            refused = exc.__context__  # a callback's refusal comes wrapped in HttpParserCallbackError
            if isinstance(refused, _Refused):
                self._refuse(refused.status, refused.message)
            else:
                self._refuse(400, f"bad request: {_parser_reason(exc)}")

    def eof_received(self):
        """The client has sent all it will. Requests already in are still answered (a client may half-close after
        its request); a request cut short is not."""
        if self.queue and self.current is None and not self.in_head:
            self.closing_after = True
            return True
        return False

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # -- httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._fields, self._head_bytes, self._head_raw = b"", [], 0, 0
        self.in_head = True
        self._arm(HEAD_TIMEOUT_S)

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_LINE:
            raise _Refused(414, f"the request target is over {MAX_LINE} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if len(name) + len(value) > MAX_LINE:
            raise _Refused(431, f"a header line is over {MAX_LINE} bytes")
        if self._head_bytes > MAX_HEADERS_BYTES or len(self._fields) >= MAX_FIELDS:
            raise _Refused(431, f"the request's headers are over {MAX_HEADERS_BYTES} bytes or {MAX_FIELDS} fields")
        self._fields.append((name.decode("latin-1"), value.decode("utf-8", "surrogateescape")))

    def on_headers_complete(self) -> None:
        self.in_head = False
        parser = self.parser
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise _Refused(505, f"HTTP/{version} is not served here (HTTP/1.1)")
        raw = self._url.decode("utf-8", "surrogateescape")
        if raw.startswith("/"):
            path, _, query = raw.partition("?")
        else:  # absolute form (a client configured as if reef were a proxy)
            try:
                url = httptools.parse_url(self._url)
            except httptools.HttpParserInvalidURLError:
                raise _Refused(400, "the request target is not a path or URL") from None
            path = (url.path or b"/").decode("utf-8", "surrogateescape")
            query = (url.query or b"").decode("utf-8", "surrogateescape")
            raw = path + ("?" + query if query else "")
        headers = Headers(self._fields)
        length = headers.get("content-length")
        length = length.strip() if length is not None else None
        coding = headers.get("transfer-encoding")
        if coding is not None and coding.strip().lower() != "chunked":
            raise _Refused(501, f"Transfer-Encoding {coding.strip()[:40]} is not served (chunked only)")
        if parser.should_upgrade() and (coding is not None or length not in (None, "0")):
            # llhttp stops at an upgrade's headers, so its body would never be read: refused, not relayed empty
            raise _Refused(400, "a request with a body cannot ask to switch protocols (Upgrade) here")
        request = Request(self, parser.get_method().decode("ascii"), raw, unquote(path, errors="surrogateescape"),
                          query, version == "1.1", headers, parser.should_keep_alive(),
                          int(length) if length is not None and length.isdigit() else None)
        self.current = request
        self.queue.append(request)
        self._arm(BODY_IDLE_S)
        if len(self.queue) == 1:
            self._start(request)
        elif not self.reading_paused:  # pipelined: hold further requests until the ones before are answered
            self.reading_paused = True
            self.transport.pause_reading()

    def on_body(self, body: bytes) -> None:
        self.current._feed(body)  # over the cap it is dropped as it comes; the handler answers 413
        self._arm(BODY_IDLE_S)  # the body timeout counts silence, not the whole upload

    def on_message_complete(self) -> None:
        request, self.current = self.current, None
        if request is not None:
            request._finish()
        self.deadline = None

    # -- answering
    def _start(self, request: Request) -> None:
        self.task = self.loop.create_task(self._answer(request))

    async def _answer(self, request: Request) -> None:
        server = self.server
        crashed = False
        try:
            response = await server.handler(request)
        except (ClientGone, ConnectionError):
            response = None
        except asyncio.CancelledError:  # the drain's time ran out: the connection ends with no answer
            if isinstance(request.answer, StreamResponse):
                request.answer.cut()  # visibly broken, HTTP/1.0 included
            else:
                self.close()
            try:
                server.access(request, request.answer)
            except Exception:  # noqa: BLE001 - the log line must not hide the cancellation
                pass
            request.answer = None
            raise
        except Exception as exc:  # noqa: BLE001 - a handler's bug: one 500 and one line, not a traceback
            server.note(f"the gateway failed on {request.method} {request.path}: {type(exc).__name__}"
                        f"{_where(exc)}")
            response = server.error(500, f"the gateway failed ({type(exc).__name__}); see its log")
            crashed = True  # its line is written: the one below would say it twice
        begun = request.answer
        if isinstance(begun, StreamResponse) and response is not begun and begun.withdraw():
            begun = request.answer = None  # nothing of it left: the error answer is the only one
        if begun is not None and response is not begun:
            # Its answer began (a stream's head, or a receipt sent the moment its record was durable) and something
            # else came back: an error answer or a crash. Sent, it would be a second answer to one request, read as
            # the answer to the next; the connection ends instead, a stream visibly cut.
            if response is not None and not crashed:
                server.note(f"the gateway's answer to {request.method} {request.path} failed after it began "
                            f"({response.status}); the connection is closed")
            if isinstance(begun, StreamResponse):
                begun.cut()
            else:  # the answer is out whole: end after it (an abrupt close could reset what the client has not read)
                self.closing_after = True
            response = None
        if self.refused is request and not self.refusal_sent:  # its body broke: one answer, the handler's or this
            self.refusal_sent = True
            if response is None:
                response = server.error(*self.refusal)
        sent = None
        if response is not None and not self.lost and not self.transport.is_closing():
            try:
                if isinstance(response, StreamResponse):
                    if response._request is None:
                        await response.prepare(request)
                    await response.write_eof()
                else:
                    response._send(request)
                sent = response
            except (ClientGone, ConnectionError):
                pass
            except BadHeader as exc:  # never written: it would split the response
                server.note(f"the gateway's answer to {request.method} {request.path} was not sent: {exc}")
                self.close()
        elif begun is not None:
            sent = begun  # its status went out (streamed until the client left or it was cut; or sent early)
        try:
            server.access(request, sent)
        except Exception:  # noqa: BLE001 - the log line must not end the connection
            pass
        request.answer = None  # a stream refers back to its request: no cycle left for the collector
        self._next()

    def _next(self) -> None:
        self.task = None
        if self.queue:
            self.queue.popleft()
        if self.lost or self.transport.is_closing():  # gone, or closed by the gateway (a broken stream)
            return
        if self.closing_after or self._upgrade:
            self.linger()
        elif self.queue:  # pipelined requests complete before a refusal are answered first, in order
            self._start(self.queue[0])
            if self.reading_paused and len(self.queue) == 1:  # its body may still be coming
                self.reading_paused = False
                self.transport.resume_reading()
        elif self.refusal is not None:
            if not self.refusal_sent:
                self._send_refusal()
            self.linger()
        elif self.server.shutting_down:
            self.linger()
        else:
            if self.reading_paused:
                self.reading_paused = False
                self.transport.resume_reading()
            if self.current is None and not self.in_head:
                self._arm(KEEPALIVE_S)

    def keep_open(self, request: Request) -> bool:
        return (request.keep_alive and not request.too_large and not self._upgrade and not self.server.shutting_down
                and (request._done or request.content_length == 0))

    def write(self, data: bytes) -> None:
        if self.lost or self.transport.is_closing():
            raise ClientGone("the client hung up")
        self.transport.write(data)

    async def drain(self) -> None:
        if self.lost:
            raise ClientGone("the client hung up")
        if self.paused:
            if self._drain is None:
                self._drain = self.loop.create_future()
            await self._drain

    def idle(self) -> bool:
        return not self.queue and self.current is None and not self.in_head

    def reset(self) -> None:
        """Close with a reset (RST), not the orderly end a client reads as a complete HTTP/1.0 body."""
        if self.lost or self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except (OSError, AttributeError):
            pass
        self.transport.abort()

    def close(self) -> None:
        if not self.lost and self.transport is not None:
            self.transport.close()

    def linger(self) -> None:
        """End the connection after the last answer without losing it: closing a socket with unread request bytes
        (a body over the cap, pipelined requests after a refusal) sends a reset, and a client may then never read
        the answer. So send our end, drop whatever still comes, and close when the client does or after a while."""
        if self.lost:
            return
        self.parser = None
        self.queue.clear()
        if not self.transport.can_write_eof():
            self.close()
            return
        if not self.transport.is_closing():
            try:
                self.transport.write_eof()
            except OSError:  # the client reset the connection meanwhile (asyncio's loop raises; uvloop does not)
                self.close()
                return
        if self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()
        self._arm(LINGER_S)

    def _arm(self, seconds: float) -> None:
        """Move the connection's one deadline. Requests move it several times each; a timer is only scheduled when
        none is pending or the new deadline is earlier, and one that fires early re-schedules itself for what is
        left (uvloop's call_later and cancel cost more than the float)."""
        self.deadline = deadline = self.loop.time() + seconds
        if self.timer is None or self.timer_at > deadline:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.timer_at = self.loop.call_at(deadline, self._timed_out), deadline

    def _timed_out(self) -> None:
        """The client was silent too long: lingering after the last answer, idle between requests, or a head or a
        body that stopped arriving. An answer under way is never cut here (the gateway has its own timeouts); a
        request whose body stopped gets 408 from its handler's read()."""
        self.timer = None
        if self.deadline is None or self.lost:
            return
        if self.deadline > self.loop.time():
            self.timer, self.timer_at = self.loop.call_at(self.deadline, self._timed_out), self.deadline
            return
        self.deadline = None
        current = self.current
        if self.parser is not None and (self.in_head or current is not None):
            what = "headers" if self.in_head else "body"
            self.server.note(f"timed out a request from {self.peer[0] if self.peer else 'a client'}: its {what} "
                             "stopped arriving")
            self._refuse(408, f"the request's {what} stopped arriving")
        elif self.task is None:
            self.close()

    def _refuse(self, status: int, message: str) -> None:
        """A request the server will not hand on: one log line (never its bytes), its answer once the answers
        before it are out (at once when none is under way), then the connection ends."""
        self.parser = None  # nothing more is parsed; bytes still coming are dropped
        if status != 408:
            self.server.note(f"refused a request from {self.peer[0] if self.peer else 'a client'}: {status} "
                             f"{message}")
        self.refusal = (status, message)
        self.in_head = False
        current, self.current = self.current, None
        if current is not None and current is not (self.queue[0] if self.queue else None):
            self.queue.remove(current)  # pipelined behind an answer under way: the refusal replaces it
        elif current is not None:
            self.refused = current
            current._cut()  # its handler stops at read(); the refusal is its answer unless it answered already
        if self.task is None and not self.lost:
            self._send_refusal()
            self.linger()

    def _send_refusal(self) -> None:
        self.refusal_sent = True
        if not self.lost and not self.transport.is_closing():
            response = self.server.error(*self.refusal)
            data = _head(response.status, response.headers,
                         f"Content-Length: {len(response.body)}\r\nConnection: close\r\n")
            self.transport.write(data + response.body)


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _parser_reason(exc: Exception) -> str:
    """llhttp's reason, without the bytes it choked on."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split(" b'", 1)[0].split(' b"', 1)[0][:120]


def _where(exc: BaseException) -> str:
    import traceback
    from pathlib import Path

    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
