"""Bare pass-through proxies that record nothing: the floor under reef serve's added latency, per HTTP stack.

Each relays a request to the upstream and its answer back (hop-by-hop headers dropped, bodies as they are, SSE
streamed), on uvloop like the gateway, and does nothing else: no auth, no record, no log. bench/serve_bench.py
--floor starts one process per kind and measures them beside reef, against the same upstream, in the same run.

    aiohttp-app   aiohttp web.Application (router, middleware-free) + one pooled ClientSession: reef's stack
    aiohttp-low   aiohttp's low-level server (web.Server, no application or router) + the same ClientSession
    protocol      an asyncio.Protocol per client connection holding one keep-alive upstream connection, both sides
                  parsed by httptools (llhttp): the cheapest hop Python can make on this loop, a reference, not a
                  product (no TLS, no timeouts, no pipelining)
    low+reef      the two halves crossed, to see which one costs: aiohttp's low-level server with upstream calls
    raw+client    on reef's httptools client (reef_cli/serve/upstream_http.py) / the Protocol server with upstream
                  calls through ClientSession
    uvicorn+reef  uvicorn (httptools protocol, uvloop) with a bare ASGI app, upstream calls on reef's client:
                  a maintained server stack on the cheap parser

    KIND+ledger   any of the above with one durable ledger append (reef's Ledger, fdatasync) per call, written
                  after the answer is in and before its end goes to the client, as reef does with its receipts:
                  the best a recording gateway on that stack can do

    python bench/serve_floor.py KIND PORT UPSTREAM_URL [LEDGER_PATH]
"""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import urlsplit

HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                 "trailers", "transfer-encoding", "upgrade", "host", "content-length"})
HOP_B = frozenset(h.encode() for h in HOP)
RECORD = None  # set by main() for the +ledger kinds: one durable append per call


def record() -> None:
    if RECORD is not None:
        RECORD()


def aiohttp_handler(upstream: str):
    import aiohttp

    state = {}

    async def handler(request):
        session = state.get("session")
        if session is None:
            session = state["session"] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"))
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with session.request(request.method, upstream + request.path_qs, headers=headers, data=body or None,
                                   allow_redirects=False) as resp:
            return await _answer(request, resp, resp.content.iter_any())

    return handler


async def _answer(request, resp, chunks):
    """The upstream's answer back to an aiohttp client: streamed when SSE (recorded before its end goes out), else
    whole. `resp` is aiohttp's or reef's client response (status, headers, read()); `chunks` its body as it comes."""
    from aiohttp import web

    out_headers = [(k, v) for k, v in resp.headers.items() if k.lower() not in HOP]
    if "text/event-stream" in resp.headers.get("Content-Type", ""):
        out = web.StreamResponse(status=resp.status, headers=out_headers)
        await out.prepare(request)
        async for chunk in chunks:
            await out.write(chunk)
        record()
        await out.write_eof()
        return out
    data = await resp.read()
    record()
    return web.Response(body=data, status=resp.status, headers=out_headers)


def _reef_client(upstream: str):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    from reef_cli.serve.upstream_http import UpstreamClient

    return UpstreamClient(upstream, connect_timeout=30, read_timeout=300)


def low_reef_handler(upstream: str):
    client = _reef_client(upstream)

    async def handler(request):
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        resp = await client.start(request.method, request.raw_path, headers, body)
        try:
            return await _answer(request, resp, resp.iter_any())
        finally:
            resp.release()

    return handler


class _ClientViaSession(asyncio.Protocol):
    """raw+client: the Protocol server's request side; the upstream call goes through a ClientSession."""

    session = None

    def __init__(self, upstream: str):
        import httptools

        self.upstream = upstream
        self.parser = httptools.HttpRequestParser(self)

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.parser.feed_data(data)

    def on_message_begin(self):
        self.url, self.headers, self.body = b"", {}, []

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        if name.lower() not in HOP_B:
            self.headers[name.decode("latin-1")] = value.decode("latin-1")

    def on_body(self, body):
        self.body.append(body)

    def on_message_complete(self):
        asyncio.ensure_future(self._relay(self.parser.get_method().decode(), self.url.decode(), self.headers,
                                          b"".join(self.body)))

    async def _relay(self, method, url, headers, body):
        import aiohttp

        if _ClientViaSession.session is None:
            _ClientViaSession.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"))
        async with self.session.request(method, self.upstream + url, headers=headers, data=body or None,
                                        allow_redirects=False) as resp:
            head = [b"HTTP/1.1 %d %s\r\n" % (resp.status, (resp.reason or "").encode())]
            head += [f"{k}: {v}\r\n".encode("latin-1") for k, v in resp.headers.items() if k.lower() not in HOP]
            if "text/event-stream" in resp.headers.get("Content-Type", ""):
                self.transport.write(b"".join(head) + b"Transfer-Encoding: chunked\r\n\r\n")
                async for chunk in resp.content.iter_any():
                    self.transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                record()
                self.transport.write(b"0\r\n\r\n")
            else:
                data = await resp.read()
                record()
                self.transport.write(b"".join(head) + b"Content-Length: %d\r\n\r\n" % len(data) + data)


async def serve_aiohttp(kind: str, port: int, upstream: str) -> None:
    from aiohttp import web

    handler = low_reef_handler(upstream) if kind == "low+reef" else aiohttp_handler(upstream)
    if kind == "aiohttp-app":
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, backlog=2048).start()
    else:
        server = web.Server(handler, access_log=None)
        await asyncio.get_running_loop().create_server(server, "127.0.0.1", port, backlog=2048)
    await asyncio.Event().wait()


class _Upstream(asyncio.Protocol):
    """One keep-alive connection to the upstream, owned by one client connection; answers go straight back."""

    def __init__(self, client: "_Client"):
        import httptools

        self.client = client
        self.parser = httptools.HttpResponseParser(self)
        self.transport = None
        self.reason = b""

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.parser.feed_data(data)

    def connection_lost(self, exc):
        self.client.upstream = None

    def on_message_begin(self):
        self.headers = []
        self.reason = b""
        self.chunked = False
        self.held = []

    def on_status(self, status):
        self.reason += status

    def on_header(self, name, value):
        low = name.lower()
        if low == b"transfer-encoding" and b"chunked" in value.lower():
            self.chunked = True
        if low not in HOP_B or low == b"content-length":
            self.headers.append(b"%s: %s\r\n" % (name, value))

    def on_headers_complete(self):
        head = [b"HTTP/1.1 %d %s\r\n" % (self.parser.get_status_code(), self.reason)] + self.headers
        if self.chunked:
            head.append(b"Transfer-Encoding: chunked\r\n")
        head.append(b"\r\n")
        self.client.transport.write(b"".join(head))

    def on_body(self, body):
        if self.chunked:
            self.client.transport.write(b"%x\r\n%s\r\n" % (len(body), body))
        elif RECORD is not None:  # the end waits for the record: hold a sized body until it is all in
            self.held.append(body)
        else:
            self.client.transport.write(body)

    def on_message_complete(self):
        record()
        if self.chunked:
            self.client.transport.write(b"0\r\n\r\n")
        elif self.held:
            self.client.transport.write(b"".join(self.held))


class _Client(asyncio.Protocol):
    def __init__(self, host: str, port: int):
        import httptools

        self.host, self.port = host, port
        self.host_header = b"Host: %s:%d\r\n" % (host.encode(), port)
        self.parser = httptools.HttpRequestParser(self)
        self.upstream: _Upstream | None = None
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.parser.feed_data(data)

    def connection_lost(self, exc):
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def on_message_begin(self):
        self.url = b""
        self.headers = []
        self.body = []

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        if name.lower() not in HOP_B:
            self.headers.append(b"%s: %s\r\n" % (name, value))

    def on_body(self, body):
        self.body.append(body)

    def on_message_complete(self):
        body = b"".join(self.body)
        msg = b"".join([b"%s %s HTTP/1.1\r\n" % (self.parser.get_method(), self.url), self.host_header,
                        *self.headers, b"Content-Length: %d\r\n\r\n" % len(body), body])
        if self.upstream is not None:
            self.upstream.transport.write(msg)
        else:
            asyncio.ensure_future(self._connect_and_send(msg))

    async def _connect_and_send(self, msg: bytes) -> None:
        loop = asyncio.get_running_loop()
        _t, self.upstream = await loop.create_connection(lambda: _Upstream(self), self.host, self.port)
        self.upstream.transport.write(msg)


async def serve_protocol(port: int, upstream: str) -> None:
    parts = urlsplit(upstream)
    loop = asyncio.get_running_loop()
    await loop.create_server(lambda: _Client(parts.hostname, parts.port), "127.0.0.1", port, backlog=2048)
    await asyncio.Event().wait()


async def serve_raw_client(port: int, upstream: str) -> None:
    await asyncio.get_running_loop().create_server(lambda: _ClientViaSession(upstream), "127.0.0.1", port,
                                                   backlog=2048)
    await asyncio.Event().wait()


def serve_uvicorn(port: int, upstream: str) -> None:
    import uvicorn

    client = _reef_client(upstream)

    async def app(scope, receive, send):
        body, more = b"", True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
                   if k.decode("latin-1") not in HOP}
        target = scope["raw_path"].decode() + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        resp = await client.start(scope["method"], target, headers, body)
        out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers.items() if k.lower() not in HOP]
        if "text/event-stream" in resp.headers.get("Content-Type", ""):
            await send({"type": "http.response.start", "status": resp.status, "headers": out})
            async for chunk in resp.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            record()
            await send({"type": "http.response.body", "body": b""})
        else:
            data = await resp.read()
            record()
            out.append((b"content-length", str(len(data)).encode()))
            await send({"type": "http.response.start", "status": resp.status, "headers": out})
            await send({"type": "http.response.body", "body": data})
        resp.release()

    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                                  access_log=False, lifespan="off", log_level="warning", backlog=2048)).run()


def main(argv: list[str]) -> int:
    global RECORD
    kind, port, upstream = argv[0].removesuffix("+ledger"), int(argv[1]), argv[2].rstrip("/")
    if argv[0].endswith("+ledger"):
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
        from reef_cli.ledger import Ledger

        ledger = Ledger(__import__("pathlib").Path(argv[3]), "default")
        payload = {"source": "serve-floor", "status": 200, "outcome": "ok",
                   "response": {"digest": "sha256:" + "0" * 64, "length": 300}}
        RECORD = lambda: ledger.append("inference", payload, release_id=None, content_id=None)  # noqa: E731
    if kind == "uvicorn+reef":
        serve_uvicorn(port, upstream)
        return 0
    import uvloop

    coro = (serve_protocol(port, upstream) if kind == "protocol" else serve_raw_client(port, upstream)
            if kind == "raw+client" else serve_aiohttp(kind, port, upstream))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
