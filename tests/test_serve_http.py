"""reef serve's HTTP/1.1 server (reef_cli/serve/http_server.py) on its own, in-process, with short timeouts: what the
gateway tests cannot wait for (a keep-alive idle timeout of 75 s)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from reef_cli.serve import http_server
from reef_cli.serve.http_server import HttpServer, Response, StreamResponse


_WRITTEN = [0]  # events the /flood handler got written
_ACCESS: list = []  # (path, the status of the answer sent or None) per access-log call
_LOOP: list = [None]  # the running server's loop


def server_loop() -> asyncio.AbstractEventLoop:
    return _LOOP[0]


@pytest.fixture()
def server(monkeypatch):
    monkeypatch.setattr(http_server, "KEEPALIVE_S", 0.4)
    monkeypatch.setattr(http_server, "HEAD_TIMEOUT_S", 0.6)
    monkeypatch.setattr(http_server, "LINGER_S", 0.3)
    monkeypatch.setattr(http_server, "BODY_IDLE_S", 0.5)
    notes: list[str] = []
    _WRITTEN[0] = 0
    _ACCESS.clear()

    async def handler(request):
        if request.path == "/slow":  # longer than every timeout above: a handler at work is never cut
            await asyncio.sleep(1.0)
        if request.path == "/flood":  # many small events to a client that does not read
            out = StreamResponse(200, [("Content-Type", "text/event-stream")])
            await out.prepare(request)
            try:
                for _ in range(20_000):
                    await out.write(b"data: " + b"x" * 1000 + b"\n\n")
                    _WRITTEN[0] += 1
                    await asyncio.sleep(0)
            except ConnectionError:
                pass
            return out
        if request.path in ("/held-head", "/held-event"):  # what follows a held write comes in 3 ms, or in 0.5 s
            pause = float(request.query.get("pause", 0.003))
            out = StreamResponse(200, [("Content-Type", "text/event-stream")])
            await out.prepare(request)
            if request.path == "/held-event":
                await out.write(b"data: 0\n\n")
                await asyncio.sleep(0.05)  # that one goes out on its own
                await out.write(b"data: held\n\n", hold=True)
            await asyncio.sleep(pause)
            await out.write(b"data: 1\n\n")
            await asyncio.sleep(0.2)
            await out.write_eof()
            return out
        if request.path in ("/stream-then-error", "/held-then-error", "/queued-then-error"):  # begins a stream,
            out = StreamResponse(200, [("Content-Type", "text/event-stream")])  # then answers an error
            await out.prepare(request)
            if request.path == "/stream-then-error":  # its head and first event leave (the held one does not)
                await out.write(b"data: 0\n\n")
                await asyncio.sleep(0.05)
            if request.path == "/queued-then-error":  # an event queued for the loop's next turn, not yet sent
                await out.write(b"data: queued\n\n")
            return Response(b"the record could not be kept", 503)
        if request.path == "/crash-stream":  # a handler that fails after its stream began
            out = StreamResponse(200, [("Content-Type", "text/event-stream")])
            await out.prepare(request)
            await out.write(b"data: 0\n\n")
            await asyncio.sleep(0.05)
            raise RuntimeError("boom")
        if request.path == "/endless-stream":  # still streaming when it is cancelled
            out = StreamResponse(200, [("Content-Type", "text/event-stream")])
            await out.prepare(request)
            await out.write(b"data: 0\n\n")
            await asyncio.sleep(30)
        if request.path == "/early-then-crash":  # a whole answer sent early (as a receipt is), then a failure
            Response(b"x" * (8 << 20), 200).send_now(request)
            raise RuntimeError("after the answer")
        if request.path == "/stream":
            out = StreamResponse(200, [("Content-Type", "text/event-stream")])
            await out.prepare(request)
            for i in range(3):
                await out.write(b"data: %d\n\n" % i)
                await asyncio.sleep(0)
            await out.write_eof()
            return out
        body = await request.read()
        return Response(json.dumps({"path": request.path, "len": len(body)}).encode(), 200,
                        {"Content-Type": "application/json"})

    ready, box = threading.Event(), {}

    def run():
        async def main():
            srv = HttpServer(handler, max_body=1000, error=lambda status, msg: Response(msg.encode(), status),
                             access=lambda request, response: _ACCESS.append((request.path, getattr(response, "status", None))),
                             note=notes.append)
            box["port"] = (await srv.start("127.0.0.1", 0))[1]
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            _LOOP[0] = box["loop"]
            ready.set()
            await box["stop"].wait()
            await srv.close()
        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield box["port"], notes
    box["loop"].call_soon_threadsafe(box["stop"].set)
    thread.join(10)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _closed_within(s: socket.socket, seconds: float) -> float:
    """Seconds until the server ends the connection (reads and drops what it sends first)."""
    started = time.monotonic()
    s.settimeout(seconds)
    while s.recv(65536):
        pass
    return time.monotonic() - started


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(server):
    port, _ = server
    s = _connect(port)
    s.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    assert s.recv(65536).startswith(b"HTTP/1.1 200 OK")
    assert 0.2 < _closed_within(s, 3) < 2.0


def test_headers_dribbled_past_the_head_timeout_end_the_connection(server):
    port, _ = server
    s = _connect(port)
    s.sendall(b"GET /a HTTP/1.1\r\n")
    started = time.monotonic()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        while time.monotonic() - started < 5:
            s.sendall(b"X-A: b\r\n")  # a header line every 0.1 s keeps bytes coming, never the end of the head
            time.sleep(0.1)
    assert time.monotonic() - started < 2.0


def test_a_handler_at_work_is_not_cut_by_the_connection_timers(server):
    port, _ = server
    s = _connect(port)
    s.sendall(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    s.settimeout(5)
    answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b'{"path": "/slow", "len": 2}')


def test_a_streamed_answer_is_chunked_and_keeps_the_connection(server):
    port, _ = server
    s = _connect(port)
    s.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"Connection: close" not in head
    assert body.count(b"data: ") == 3
    s.sendall(b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n")  # the same connection serves the next request
    assert b'"path": "/again"' in s.recv(65536)


def test_a_refused_request_is_answered_and_logged_without_its_bytes(server):
    port, notes = server
    s = _connect(port)
    s.sendall(b"GET /a HTTP/1.1\r\nAuthorization: Bearer sk-secret\x01\r\n\r\n")
    s.settimeout(5)
    answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request") and b"sk-secret" not in answer
    assert _closed_within(s, 3) < 1.0
    assert notes and all("sk-secret" not in note for note in notes)


def test_a_pipelined_refusal_behind_a_long_answer_waits_for_it(server):
    """A malformed request pipelined behind an answer under way: the head timeout it armed must not cut that answer
    (it did: a 75 s stream died at 60 s, recorded as the client's hang-up); the 400 follows it."""
    port, _ = server
    s = _connect(port)
    s.sendall(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
              b"GET /a HTTP/1.1\r\nContent-Length: +1\r\n\r\n")
    data = b""
    s.settimeout(5)
    while chunk := s.recv(65536):
        data += chunk
    first, _, second = data.partition(b"HTTP/1.1 400")
    assert first.startswith(b"HTTP/1.1 200 OK") and first.endswith(b'{"path": "/slow", "len": 2}') and second


def test_a_body_that_stops_arriving_gets_408(server):
    port, notes = server
    s = _connect(port)
    s.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    s.settimeout(5)
    started = time.monotonic()
    assert s.recv(65536).startswith(b"HTTP/1.1 408 Request Timeout")
    assert time.monotonic() - started < 3 and any("body stopped arriving" in note for note in notes)


def test_a_client_that_does_not_read_holds_the_writer(server):
    port, _ = server
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /flood HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(1.5)
    held = _WRITTEN[0]
    time.sleep(1.0)
    # the writer waits once the transport's buffer passes its high-water mark (256 KiB, on top of what the kernel's
    # socket buffers take): it did not, and all 20 MB piled up in the gateway
    assert 0 < held == _WRITTEN[0] < 10_000, (held, _WRITTEN[0])
    s.close()


def test_half_closed_client_still_gets_its_answer(server):
    port, _ = server
    s = _connect(port)
    s.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    s.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b'{"path": "/a", "len": 2}')


def _first_arrival(port: int, target: str) -> tuple[bytes, float]:
    """The bytes of the first send a streamed answer came in (after any the test skips), and when they came."""
    s = _connect(port)
    started = time.monotonic()
    s.sendall(b"GET " + target.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    first = s.recv(65536)
    if target.startswith("/held-event"):  # the head and event 0 came first
        assert first.endswith(b"data: 0\n\n\r\n"), first
        first = s.recv(65536)
    took = time.monotonic() - started
    s.close()
    return first, took


def test_a_held_write_goes_out_with_what_follows_it(server):
    """A stream's head, and the events the gateway holds once the upstream's final event is in, wait up to
    HOLD_S for what comes next and go out in one send with it: the client is woken once, not twice, between the
    upstream's answer and the receipt."""
    port, _ = server
    for target, begins in (("/held-head", b"HTTP/1.1 200 OK"), ("/held-event", b"c\r\ndata: held")):
        # What follows comes 3 ms later, within the 10 ms hold, unless a loaded machine stalls the handler past it:
        # one of five tries going out in one send shows the hold (without it, none ever would).
        firsts = [_first_arrival(port, target)[0] for _ in range(5)]
        assert all(first.startswith(begins) for first in firsts), firsts
        assert any(b"data: 1" in first for first in firsts), (target, firsts)


def test_a_held_write_is_not_held_longer_than_the_hold(server):
    port, _ = server
    for target in ("/held-head?pause=0.5", "/held-event?pause=0.5"):
        first, took = _first_arrival(port, target)
        assert b"data: 1" not in first and took < 0.4, (target, first, took)


def test_a_handler_failing_mid_stream_breaks_the_stream_rather_than_answer_twice(server):
    """A 500 after a stream's 200 head would be a second answer to one request, read by the client as the start
    of the next one; the stream is cut instead (no chunked end), and the failure gets its one line."""
    port, notes = server
    s = _connect(port)
    s.sendall(b"GET /crash-stream HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK") and b"data: 0" in data
    assert b"HTTP/1.1 500" not in data and not data.endswith(b"0\r\n\r\n")
    assert any("RuntimeError" in note for note in notes)


def _until_closed(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_an_error_answer_after_a_stream_began_cuts_the_stream(server):
    """A handler that began a stream and then returned an error answer (the gateway's ReefError path: a record
    that could not be kept, NaN in the upstream's usage) had that answer written inside the open chunked body."""
    port, notes = server
    s = _connect(port)
    s.sendall(b"GET /stream-then-error HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    data = _until_closed(s)
    assert data.startswith(b"HTTP/1.1 200 OK") and b"data: 0" in data and data.count(b"HTTP/1.1 ") == 1
    assert not data.endswith(b"0\r\n\r\n")
    assert any("failed after it began (503)" in note for note in notes)
    assert _ACCESS == [("/stream-then-error", 200)]


def test_an_error_answer_after_a_streams_event_was_queued_cuts_the_stream(server):
    """An event written but not yet sent (queued for the loop's next turn) begins the answer as much as one sent:
    the stream was taken back for the error answer and the event, an upstream's own error message, was lost."""
    port, notes = server
    s = _connect(port)
    s.sendall(b"GET /queued-then-error HTTP/1.1\r\nHost: x\r\n\r\n")
    data = _until_closed(s)
    assert data.startswith(b"HTTP/1.1 200 OK") and b"data: queued" in data and data.count(b"HTTP/1.1 ") == 1
    assert not data.endswith(b"0\r\n\r\n") and b"could not be kept" not in data


def test_a_cut_stream_on_http_10_is_a_reset_not_a_clean_end(server):
    """HTTP/1.0 streams end with the connection: a plain close would read as the body's clean end."""
    port, _ = server
    s = _connect(port)
    s.sendall(b"GET /crash-stream HTTP/1.0\r\n\r\n")
    with pytest.raises(ConnectionResetError):
        while s.recv(65536):
            pass


def test_a_streamed_request_is_freed_without_the_garbage_collector(server):
    """A stream referred back to its request and the request to the stream: each streamed request (with its body,
    up to the body cap) stayed in memory until a full collection."""
    import gc

    port, _ = server
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            s = _connect(port)
            s.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            _until_closed(s)
            s.close()
        time.sleep(0.2)
        alive = sum(1 for obj in gc.get_objects() if type(obj) is http_server.Request)
    finally:
        gc.enable()
    assert alive <= 1


def test_a_request_cut_by_cancellation_still_gets_its_log_line(server):
    """The gateway's drain cancels handlers still running when its time is up; each gets its access-log line."""
    port, _ = server
    s = _connect(port)
    s.sendall(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    time.sleep(0.2)
    loop = server_loop()
    loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(loop) if "_answer" in repr(t)])
    _until_closed(s)
    time.sleep(0.1)
    assert [path for path, _ in _ACCESS] == ["/slow"]


def test_an_error_before_any_of_a_stream_left_is_the_only_answer(server):
    """A stream whose head is still held has sent nothing: an error answer can still be the one answer, on a
    connection that stays usable (it used to be cut, the access log saying 200)."""
    port, notes = server
    s = _connect(port)
    s.sendall(b"GET /held-then-error HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n"
              b"Connection: close\r\n\r\n")
    data = _until_closed(s)
    assert data.startswith(b"HTTP/1.1 503 ") and b"text/event-stream" not in data
    assert data.count(b"HTTP/1.1 ") == 2 and data.endswith(b'{"path": "/a", "len": 0}')
    assert _ACCESS[:1] == [("/held-then-error", 503)] and not notes


def test_a_stream_cancelled_by_the_drain_on_http_10_is_a_reset(server):
    port, _ = server
    s = _connect(port)
    s.sendall(b"GET /endless-stream HTTP/1.0\r\n\r\n")
    assert b"data: 0" in s.recv(65536)
    loop = server_loop()
    loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(loop) if "_answer" in repr(t)])
    with pytest.raises(ConnectionResetError):
        while s.recv(65536):
            pass


def test_an_answer_sent_early_reaches_a_slow_client_whole_when_the_handler_fails_after(server):
    """The connection ends after an answer sent early when the handler then fails; an abrupt close with the
    client's pipelined bytes unread reset it, cutting what the client had not read yet."""
    port, _ = server
    s = _connect(port)
    junk = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n" + b"j" * 900
    s.sendall(b"GET /early-then-crash HTTP/1.1\r\nHost: x\r\n\r\n" + junk * 200)
    time.sleep(0.5)  # the server is done; the client has read nothing yet
    data = _until_closed(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and len(body) == 8 << 20
