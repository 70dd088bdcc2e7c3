"""Bare pass-through proxies that record nothing: the floor under reef serve's added latency, per HTTP stack.

Each relays a request to the upstream and its answer back (hop-by-hop headers dropped, bodies as they are, SSE
streamed), on uvloop like the gateway, and does nothing else: no auth, no record, no log. bench/serve_bench.py
--floor starts one process per kind and measures them beside reef, against the same upstream, in the same run.

    aiohttp-app   aiohttp web.Application (router, middleware-free) + one pooled ClientSession: reef's stack
    aiohttp-low   aiohttp's low-level server (web.Server, no application or router) + the same ClientSession
    protocol      an asyncio.Protocol per client connection holding one keep-alive upstream connection, both sides
                  parsed by httptools (llhttp): the cheapest hop Python can make on this loop, a reference, not a
                  product (no TLS, no timeouts, no pipelining)
    low+raw       the two halves crossed, to see which one costs: aiohttp's low-level server, upstream calls on
    raw+client    httptools connections (a small pool) / the Protocol server, upstream calls through ClientSession

    python bench/serve_floor.py KIND PORT UPSTREAM_URL
"""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import urlsplit

HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                 "trailers", "transfer-encoding", "upgrade", "host", "content-length"})
HOP_B = frozenset(h.encode() for h in HOP)


def aiohttp_handler(upstream: str):
    import aiohttp
    from aiohttp import web

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
            out_headers = [(k, v) for k, v in resp.headers.items() if k.lower() not in HOP]
            if "text/event-stream" in resp.headers.get("Content-Type", ""):
                out = web.StreamResponse(status=resp.status, headers=out_headers)
                await out.prepare(request)
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out
            return web.Response(body=await resp.read(), status=resp.status, headers=out_headers)

    return handler


class _RawConn(asyncio.Protocol):
    """One pooled upstream connection for low+raw: the answer's head resolves a future, body parts go to a queue."""

    def __init__(self):
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.parser.feed_data(data)

    def start(self, msg: bytes):
        loop = asyncio.get_running_loop()
        self.head, self.parts = loop.create_future(), asyncio.Queue()
        self.transport.write(msg)

    def on_message_begin(self):
        self.headers = []

    def on_header(self, name, value):
        if name.lower() not in HOP_B:
            self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self):
        self.head.set_result((self.parser.get_status_code(), self.headers))

    def on_body(self, body):
        self.parts.put_nowait(body)

    def on_message_complete(self):
        self.parts.put_nowait(None)


def low_raw_handler(upstream: str):
    from aiohttp import web

    parts = urlsplit(upstream)
    pool: list[_RawConn] = []
    host_header = f"Host: {parts.hostname}:{parts.port}\r\n".encode()

    async def handler(request):
        body = await request.read()
        head = [f"{request.method} {request.path_qs} HTTP/1.1\r\n".encode(), host_header]
        head += [f"{k}: {v}\r\n".encode("latin-1") for k, v in request.headers.items() if k.lower() not in HOP]
        head.append(b"Content-Length: %d\r\n\r\n" % len(body))
        conn = pool.pop() if pool else None
        if conn is None:
            _t, conn = await asyncio.get_running_loop().create_connection(_RawConn, parts.hostname, parts.port)
        conn.start(b"".join(head) + body)
        status, headers = await conn.head
        if any(k.lower() == "content-type" and "text/event-stream" in v for k, v in headers):
            out = web.StreamResponse(status=status, headers=headers)
            await out.prepare(request)
            while (chunk := await conn.parts.get()) is not None:
                await out.write(chunk)
            await out.write_eof()
            pool.append(conn)
            return out
        data = []
        while (chunk := await conn.parts.get()) is not None:
            data.append(chunk)
        pool.append(conn)
        return web.Response(body=b"".join(data), status=status,
                            headers=[(k, v) for k, v in headers if k.lower() != "content-length"])

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
                self.transport.write(b"0\r\n\r\n")
            else:
                data = await resp.read()
                self.transport.write(b"".join(head) + b"Content-Length: %d\r\n\r\n" % len(data) + data)


async def serve_aiohttp(kind: str, port: int, upstream: str) -> None:
    from aiohttp import web

    handler = low_raw_handler(upstream) if kind == "low+raw" else aiohttp_handler(upstream)
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
        else:
            self.client.transport.write(body)

    def on_message_complete(self):
        if self.chunked:
            self.client.transport.write(b"0\r\n\r\n")


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


def main(argv: list[str]) -> int:
    kind, port, upstream = argv[0], int(argv[1]), argv[2].rstrip("/")
    import uvloop

    coro = (serve_protocol(port, upstream) if kind == "protocol" else serve_raw_client(port, upstream)
            if kind == "raw+client" else serve_aiohttp(kind, port, upstream))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
