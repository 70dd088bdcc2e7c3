"""The gateway's answers as its HTTP/1.1 server writes them: a whole `Response` in one send, or a `StreamResponse`
relayed as it comes, chunked (HTTP/1.0: until the connection's end).

Kept apart from the connection handling (http_server.py) because this is where the gateway's latency is made:
when bytes leave, and how many sends they take. A `Response` can be rendered before a record's sync and sent the
moment the record is durable; a `StreamResponse` coalesces the writes of one loop turn into one send and can hold
its head and last events for what follows them (HOLD_S), and, while none of it has left, be withdrawn for an error
answer in its place.
"""

from __future__ import annotations

import asyncio
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .http_server import Request

FLUSH_AT = 64 * 1024  # a streamed answer's writes are held to the end of the loop's turn up to this many bytes
HOLD_S = 0.01  # a held stream write (its head; the gateway's last events) waits this long for what follows it


class ClientGone(ConnectionError):
    """The client's connection closed before the answer was written."""


class BadHeader(ValueError):
    """An answer's header that cannot be written (a line break would split the response)."""


def _pairs(headers) -> list[tuple[str, str]]:
    return list(headers.items()) if isinstance(headers, dict) else list(headers or ())


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


_date = [0, ""]


def _http_date() -> str:
    now = int(time.time())
    if _date[0] != now:
        _date[0], _date[1] = now, formatdate(now, usegmt=True)
    return _date[1]


def _head(status: int, headers: list[tuple[str, str]], extra: str) -> bytes:
    """The status line and headers; `extra` holds the server's own header lines, each ending in CRLF."""
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    has_date = False
    for name, value in headers:
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name or ":" in name:
            raise BadHeader(f"header {name!r} holds a line break or is not a name")
        if not has_date and name.lower() == "date":
            has_date = True
        lines.append(f"{name}: {value}")
    if not has_date:
        lines.append("Date: " + _http_date())
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode("utf-8", "surrogateescape")


class _Answer:
    """What both kinds of answer share: `headers` as (name, value) pairs, read back by the access log."""

    __slots__ = ()

    def header(self, name: str) -> str | None:
        low = name.lower()
        return next((v for k, v in self.headers if k.lower() == low), None)


class Response(_Answer):
    """A whole answer: status, headers, body, written in one send."""

    __slots__ = ("status", "headers", "body", "head_length", "_bytes", "_close", "_sent")

    def __init__(self, body: bytes = b"", status: int = 200, headers: list[tuple[str, str]] | None = None,
                 content_type: str | None = None, head_length: str | None = None):
        self.status, self.body = status, body
        self.head_length = head_length  # the answer to a HEAD: the length a GET's body would have (relayed)
        self._bytes: bytes | None = None
        self._close = False
        self._sent = False
        self.headers = _pairs(headers)
        if content_type is not None:
            self.headers.append(("Content-Type", content_type))

    def render(self, request: Request) -> None:
        """Build the bytes now (the gateway does it before a record's sync, so that after it only the send is
        left: ~70 us less between a durable record and its receipt on a small VM)."""
        # closing_after: the connection ends after this answer whatever the request asked (a stream withdrawn for
        # this answer set it for an HTTP/1.0 client): the answer must say so, not promise keep-alive
        self._close = close = request.conn.closing_after or not request.conn.keep_open(request)
        length = self.head_length if request.head and self.head_length is not None else len(self.body)
        extra = f"Content-Length: {length}\r\n" + ("Connection: close\r\n" if close else
                                                              "" if request.http11 else "Connection: keep-alive\r\n")
        data = _head(self.status, self.headers, extra)
        self._bytes = data + self.body if not request.head and self.body else data

    def send_now(self, request: Request) -> None:
        """Send it before the handler returns (the gateway does, the moment its record is durable); the server's
        own send after the handler then sends nothing more. It must be the connection's current request."""
        conn = request.conn
        if self._sent or conn.lost or conn.transport.is_closing():
            return
        request.answer = self
        self._send(request)

    def _send(self, request: Request) -> None:
        if self._sent:
            return
        if self._bytes is None:
            self.render(request)
        conn = request.conn
        if not conn.lost:
            conn.transport.write(self._bytes)
            self._sent = True
        conn.closing_after = conn.closing_after or self._close


class StreamResponse(_Answer):
    """An answer written as it comes: chunked on HTTP/1.1, until the connection's end on HTTP/1.0.

    Writes made in one turn of the event loop go out as one send at the end of that turn (or at once past
    FLUSH_AT bytes or on `write_eof`): when the upstream's head, events and end arrive together, the client gets
    them in one send instead of three, and a write never waits longer than the handler's current turn. A send on
    loopback costs ~0.1 ms on a small VM (it wakes the reader), which is what issue 11's budget is made of.

    A held write waits up to HOLD_S for what follows it: the head, for the body's first bytes (an upstream
    usually writes its head and its first events in separate sends), and the events the gateway has after an
    upstream's final one, for the end of the stream. Relayed alone, each cost a send and a wake-up of the client
    between the upstream's answer and its record. Nothing is held longer than HOLD_S."""

    __slots__ = ("status", "headers", "_request", "_chunked", "_ended", "_pending", "_size", "_scheduled", "_gone",
                 "_held", "_wrote", "_body")

    def __init__(self, status: int = 200, headers: list[tuple[str, str]] | None = None):
        self.status, self.headers = status, _pairs(headers)
        self._request: Request | None = None
        self._chunked = True
        self._ended = False
        self._pending: list[bytes] = []
        self._size = 0
        self._scheduled = False
        self._gone = False
        self._held: asyncio.TimerHandle | None = None
        self._wrote = False  # some of it has left (until then an error answer can still take its place)
        self._body = False  # some of its body was given to write: the answer has begun, sent or not

    async def prepare(self, request: Request) -> None:
        self._request = request
        conn = request.conn
        self._chunked = request.http11 and not request.head
        close = not self._chunked or not conn.keep_open(request)
        extra = ("Transfer-Encoding: chunked\r\n" if self._chunked else "") + ("Connection: close\r\n" if close else "")
        conn.closing_after = conn.closing_after or close
        if conn.lost or conn.transport.is_closing():
            raise ClientGone("the client hung up")
        head = _head(self.status, self.headers, extra)  # a BadHeader here begins nothing
        request.answer = self
        self._queue(head, hold=True)

    async def write(self, data: bytes, hold: bool = False) -> None:
        """Queue `data` for this turn's send; `hold`: for up to HOLD_S, unless something not held comes first."""
        if self._gone or self._request.conn.lost:
            raise ClientGone("the client hung up")
        if not data or self._request.head:
            return
        self._body = True
        self._queue(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data, hold)
        if self._size >= FLUSH_AT or self._request.conn.paused:  # a client not reading holds the writer here
            await self._send_now()

    async def write_eof(self, data: bytes = b"") -> None:
        if self._ended:
            return
        self.end_now(data)
        await self._send_now()

    def end_now(self, data: bytes = b"") -> None:
        """`write_eof` without waiting: `data` and the end go out in this send (the gateway ends a stream the
        moment its record is durable); a later `write_eof` does nothing."""
        if self._ended:
            return
        self._ended = True
        if not self._request.head:
            if self._chunked:
                self._pending.append((b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data)) if data else b"0\r\n\r\n")
            elif data:
                self._pending.append(data)
        self._flush()

    def withdraw(self) -> bool:
        """Take back an answer none of which has left and none of whose body was written (only its head, still
        held): True if it could be. Body bytes queued for the loop's next turn are part of the answer already
        (an upstream's error event: dropping it for a generic error would hide what the upstream said)."""
        if self._wrote or self._body:
            return False
        self._unhold()
        self._pending, self._size, self._ended = [], 0, True
        return True

    def cut(self) -> None:
        """End the stream broken (a handler failed after the head went out: a 500 now would be a second answer to
        one request). Chunked, what is queued goes out and the connection closes without the chunked end; on
        HTTP/1.0, where a close is the body's clean end, the connection is reset."""
        conn = self._request.conn
        if not self._ended:
            self._ended = True
            if self._chunked:
                self._flush()
        self._unhold()
        if self._chunked or conn.lost:
            conn.close()
        else:
            conn.reset()

    def _unhold(self) -> None:
        if self._held is not None:
            self._held.cancel()
            self._held = None

    def _queue(self, data: bytes, hold: bool = False) -> None:
        self._pending.append(data)
        self._size += len(data)
        if self._scheduled:
            return
        if not hold:
            self._scheduled = True
            self._request.conn.loop.call_soon(self._flush)
        elif self._held is None:
            self._held = self._request.conn.loop.call_later(HOLD_S, self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        self._unhold()
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending, self._size = [], 0
        self._wrote = True
        try:
            self._request.conn.write(data)
        except ClientGone:
            self._gone = True

    async def _send_now(self) -> None:
        self._flush()
        if self._gone:
            raise ClientGone("the client hung up")
        conn = self._request.conn
        if conn.paused:
            await conn.drain()
