"""How a recorded stream ends when its upstream misbehaves, against raw asyncio upstreams on 127.0.0.1 that send
exactly the bytes each case needs: a head and then death, an error event and a clean end, a late end after the
final event, a second answer nobody asked for. Gateways run in-process (tests/gateway.py's in_process)."""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time

import pytest

from gateway import in_process, init_project
from reef_cli.ledger import Ledger


class RawUpstream:
    """A raw asyncio HTTP upstream on 127.0.0.1: `script(reader, writer)` runs per connection."""

    def __init__(self, script):
        self.script, self.conns = script, 0
        ready = threading.Event()

        def run():
            async def main():
                async def handle(r, w):
                    self.conns += 1
                    try:
                        await self.script(r, w)
                    except Exception:  # noqa: BLE001
                        pass
                    finally:
                        w.close()
                self.loop, self.stop_ev = asyncio.get_running_loop(), asyncio.Event()
                srv = await asyncio.start_server(handle, "127.0.0.1", 0)
                self.url = "http://127.0.0.1:%d" % srv.sockets[0].getsockname()[1]
                ready.set()
                await self.stop_ev.wait()
                srv.close()
            asyncio.run(main())
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(5)

    def stop(self):
        self.loop.call_soon_threadsafe(self.stop_ev.set)
        self.thread.join(5)


async def read_request(r):
    head = await r.readuntil(b"\r\n\r\n")
    n = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")), 0)
    return head, (await r.readexactly(n) if n else b"")


def gateway_for(tmp_path, url):
    from reef_cli.project import Project
    from reef_cli.serve.app import Gateway, ServeConfig
    project = init_project(tmp_path / "proj")
    return project, Gateway(ServeConfig(project=Project(project), scenario="default", upstream=url, port=0), {},
                            log=open(tmp_path / "log", "w"), out=open(tmp_path / "out", "w"))


def post(url, body, version=b"HTTP/1.1", extra=b"", sock=None):
    host, port = url.split("//")[1].split(":")
    s = sock or socket.create_connection((host, int(port)), timeout=5)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions " + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
              + extra + b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def read_all(s, timeout=5, whole_answer=False):
    """What the gateway sends until it closes (or `timeout`); with `whole_answer`, done once one answer with a
    Content-Length is in (a 502 on a kept-alive connection is complete there: no EOF comes)."""
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            head, sep, body = out.partition(b"\r\n\r\n")
            if whole_answer and sep:
                n = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")), None)
                if n is not None and len(body) >= n:
                    break
            got = s.recv(65536)
            if not got:
                break
            out += got
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def read_answer(s, timeout=5):
    return read_all(s, timeout, whole_answer=True)


async def dies_after_head(r, w):
    await read_request(r)
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 100\r\n\r\n")
    await w.drain()


def test_a_recorded_stream_broken_before_its_first_event_is_a_502_even_when_the_sync_outlasts_the_hold(tmp_path, monkeypatch):
    """With HOLD_S as shipped (0.01 s) and a ledger sync of 20 ms, the head's hold ran out during the record's sync:
    the head left, the error answer could no longer take its place, and the client got a 200 and a cut while the
    record said 502. The head is now taken back before the sync."""
    import reef_cli.ledger.writer as writer_mod
    real = writer_mod._fdatasync
    monkeypatch.setattr(writer_mod, "_fdatasync", lambda fd: (time.sleep(0.02), real(fd))[1])
    up = RawUpstream(dies_after_head)
    project, gw = gateway_for(tmp_path, up.url)
    try:
        with in_process(gw) as url:
            outs = [read_answer(post(url, {"model": "m", "messages": [], "stream": True})) for _ in range(5)]
    finally:
        up.stop()
    recs = [r.payload for r in Ledger(project / ".reef/scenarios/default/ledger.jsonl", "default").iter_records()
             if r.kind == "inference"]
    assert [(r["outcome"], r["status"]) for r in recs] == [("upstream_died", 502)] * 5
    assert [o[:12] for o in outs] == [b"HTTP/1.1 502"] * 5


def test_the_502_that_replaces_an_http_10_stream_says_the_connection_closes(tmp_path):
    up = RawUpstream(dies_after_head)
    project, gw = gateway_for(tmp_path, up.url)
    try:
        with in_process(gw) as url:
            s = post(url, {"model": "m", "messages": [], "stream": True}, version=b"HTTP/1.0",
                     extra=b"Connection: keep-alive\r\n")
            time.sleep(0.5)
            first = s.recv(65536)
            assert first.startswith(b"HTTP/1.1 502 ")
            s.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            second = read_all(s, 2)
    finally:
        up.stop()
    # either it says Connection: close, or it keeps its promise of keep-alive
    assert b"Connection: close" in first or second.startswith(b"HTTP/1.1 200"), (first, second)


def test_a_client_that_hangs_up_while_the_end_is_awaited_crashes_nothing(tmp_path, caplog):
    async def lingers(r, w):
        await read_request(r)
        ev = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
              b'"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n')
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n%b\r\n" % (len(ev), ev))
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"e\r\ndata: [DONE]\n\n\r\n")
        await w.drain()
        await asyncio.sleep(1.0)  # the end comes late: the gateway's grace (AFTER_FINAL_S) runs
    up = RawUpstream(lingers)
    project, gw = gateway_for(tmp_path, up.url)
    caplog.set_level(logging.ERROR, logger="asyncio")
    try:
        with in_process(gw) as url:
            for _ in range(4):
                s = post(url, {"model": "m", "messages": [], "stream": True})
                s.recv(65536)  # the head and the first event; then the client is done and hangs up
                time.sleep(0.1)
                s.close()
                time.sleep(0.4)
    finally:
        up.stop()
    crashed = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert not crashed, crashed[0].getMessage() + str(crashed[0].exc_info)  # asyncio's loop raised OSError 107 in linger()


def test_a_second_answer_in_the_same_bytes_is_neither_relayed_nor_pooled(tmp_path):
    async def two_answers(r, w):
        while True:
            try:
                await read_request(r)
            except Exception:  # noqa: BLE001
                return
            body = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
                    b'"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
                    + body + b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\ndata: smuggled\n\n")
            await w.drain()
    up = RawUpstream(two_answers)
    project, gw = gateway_for(tmp_path, up.url)
    try:
        with in_process(gw) as url:
            out = read_all(post(url, {"model": "m", "messages": [], "stream": True}, extra=b"Connection: close\r\n"))
    finally:
        up.stop()
    assert b"smuggled" not in out, out[-200:]


@pytest.mark.parametrize("route,event", [
    ("/v1/messages", b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'),
    ("/v1/chat/completions", b'data: {"error":{"message":"context length exceeded (8192)","type":"invalid_request_error"}}\n\n'),
])
def test_an_error_event_the_upstream_streamed_reaches_the_client_and_the_record(tmp_path, monkeypatch, route, event):
    """An upstream's error event and then its clean end: the event was queued for the loop's next turn, the record
    appended inline (no turn in between), and the stream taken back for a generic 502 ('closed the stream before its
    final event', which an SDK retries): the upstream's own error never reached the client. Body bytes queued now
    make the answer begun; the record keeps the error as `upstream_error`."""
    from reef_cli.serve import commit
    monkeypatch.setattr(commit, "INLINE_BELOW_NS", 10**12)  # a disk whose appends take < 1 ms (bench VM, NVMe)

    async def error_then_end(r, w):
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n%b\r\n0\r\n\r\n" % (len(event), event))
        await w.drain()
        await asyncio.sleep(0.3)
    up = RawUpstream(error_then_end)
    project, gw = gateway_for(tmp_path, up.url)
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "stream": True}
    try:
        with in_process(gw) as url:
            host, port = url.split("//")[1].split(":")
            s = socket.create_connection((host, int(port)), timeout=5)
            data = json.dumps(body).encode()
            s.sendall(b"POST " + route.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
            out = read_all(s)
    finally:
        up.stop()
    needle = b"overloaded_error" if b"overloaded" in event else b"context length exceeded"
    assert needle in out and out.startswith(b"HTTP/1.1 200 ") and out.endswith(b"0\r\n\r\n"), out
    [rec] = [r.payload for r in Ledger(project / ".reef/scenarios/default/ledger.jsonl", "default").iter_records()
             if r.kind == "inference"]
    assert rec["outcome"] == "upstream_error" and needle.decode() in rec["error"], rec


def test_an_error_event_before_the_stream_broke_is_not_taken_back(tmp_path):
    """The upstream streamed an error event, then its connection broke (it had promised more bytes): the event was
    queued for the client, so the stream has begun; it must not be dropped for a generic 502 in its place."""
    event = b'data: {"error":{"message":"the model crashed","type":"server_error"}}\n\n'

    async def error_then_break(r, w):
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000\r\n\r\n" + event)
        await w.drain()
    up = RawUpstream(error_then_break)
    project, gw = gateway_for(tmp_path, up.url)
    try:
        with in_process(gw) as url:
            out = read_all(post(url, {"model": "m", "messages": [], "stream": True}))
    finally:
        up.stop()
    assert out.startswith(b"HTTP/1.1 200 ") and b"the model crashed" in out and not out.endswith(b"0\r\n\r\n"), out
    [rec] = [r.payload for r in Ledger(project / ".reef/scenarios/default/ledger.jsonl", "default").iter_records()
             if r.kind == "inference"]
    assert (rec["outcome"], rec["status"]) == ("upstream_died", 502), rec


@pytest.mark.parametrize("tail,conns", [(b"0\r\n\r\n", 1), (b"9\r\ndata: x\n\n\r\n0\r\n\r\n", 2)])
def test_an_upstream_slow_to_end_a_stream_keeps_its_connection_for_the_next_call(tmp_path, tail, conns):
    """The receipt goes AFTER_FINAL_S after the final event; the upstream's end came later still. Its connection
    was closed, so every call to such an upstream paid a new connect (and TLS handshake); it now waits for that end
    (ENDING_S) and is pooled again. Bytes other than the end close it instead."""
    async def ends_late(r, w):
        while True:
            try:
                await read_request(r)
            except Exception:  # noqa: BLE001 - the gateway closed the connection
                return
            ev = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
                  b'"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + b"%x\r\n%b\r\n" % (len(ev), ev))
            await w.drain()
            await asyncio.sleep(0.9)  # past AFTER_FINAL_S (0.2 s): the receipt has gone
            w.write(tail)
            await w.drain()
    up = RawUpstream(ends_late)
    project, gw = gateway_for(tmp_path, up.url)
    try:
        with in_process(gw) as url:
            for _ in range(2):
                started = time.monotonic()
                out = read_all(post(url, {"model": "m", "messages": [], "stream": True},
                                    extra=b"Connection: close\r\n"))
                assert b'"reef"' in out and out.endswith(b"0\r\n\r\n") and time.monotonic() - started < 0.75, out
                time.sleep(1.0)  # the upstream's end is in: its connection is back in the pool
    finally:
        up.stop()
    assert up.conns == conns
    recs = [r.payload for r in Ledger(project / ".reef/scenarios/default/ledger.jsonl", "default").iter_records()
            if r.kind == "inference"]
    assert [r["outcome"] for r in recs] == ["ok"] * 2
