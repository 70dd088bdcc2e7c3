"""reef serve's upstream client (reef_cli/serve/upstream_http.py): TLS upstreams through the gateway with the real
openai SDK, and the client's own edges against small real servers on 127.0.0.1 that misbehave on purpose (an idle
connection closed under it, a body cut off, an answer that stops, a body that ends with the connection)."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
from pathlib import Path

import openai
import pytest

from conftest import run_reef
from fakes import FakeLLM, Reply
from gateway import Gateway, exchanges, in_process, init_project
from reef_cli.serve.upstream_http import AnswerTooLarge, BrokenOff, Unreachable, UpstreamClient

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost / 127.0.0.1 (the openssl CLI, as an operator would make one)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "key.pem"),
                    "-out", str(d / "cert.pem"), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


def test_tls_upstream_is_verified_and_relayed(tmp_path, cert):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*cert)
    project = init_project(tmp_path / "proj")
    with FakeLLM(tls=ctx) as llm:
        url = f"https://localhost:{llm.port}"
        # the operator's CA bundle trusts the certificate: calls go through, streaming and not, each recorded
        with Gateway(project, url, env={"SSL_CERT_FILE": str(cert[0]), "OPENAI_API_KEY": "sk-up"}) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-client", max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "over tls"}])
            assert raw.parse().choices[0].message.content and raw.headers["x-reef-agent-record-id"]
            chunks = list(client.chat.completions.create(model="m", stream=True,
                                                         messages=[{"role": "user", "content": "x"}]))
            assert chunks[-1].model_extra["reef"]["agent_record_id"]
            assert gw.stop() == 0
        assert llm.calls[-1].headers["authorization"] == "Bearer sk-up"
        assert llm.calls[-1].headers["host"] == f"localhost:{llm.port}"
        # without it the certificate is refused: a 502 naming why, recorded as unreachable, nothing sent
        calls = len(llm.calls)
        with Gateway(project, url) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-client", max_retries=0)
            with pytest.raises(openai.APIStatusError) as refused:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            assert refused.value.status_code == 502 and "SSLCertVerificationError" in str(refused.value)
            assert gw.stop() == 0
        assert len(llm.calls) == calls
    got = [(r.payload["outcome"], r.payload["status"], r.payload["stream"]) for r in exchanges(project)]
    assert got == [("ok", 200, False), ("ok", 200, True), ("unreachable", 502, False)]


def test_a_key_with_a_line_break_is_refused_at_start(tmp_path):
    project = init_project(tmp_path / "proj")
    r = run_reef("serve", "--upstream", "http://127.0.0.1:9", "--port", "0", cwd=project,
                 env={"OPENAI_API_KEY": "sk-abc\r\nX-Injected: 1"})
    assert r.returncode == 4
    assert "OPENAI_API_KEY holds a line break: it cannot be sent as a header" in r.stderr


# -- the client against servers that misbehave ------------------------------------------------------------------------
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"


class _Server:
    """A raw HTTP server: `answer(n, request_bytes, writer)` decides what the n-th request on a connection gets."""

    def __init__(self, answer):
        self.answer = answer
        self.requests: list[bytes] = []
        self.connections = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _conn(self, reader, writer):
        self.connections += 1
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                if await self.answer(n, request, writer) is False:
                    break
                n += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_keep_alive_and_a_pooled_connection_closed_by_the_upstream_is_replaced_once():
    seen = []

    async def answer(n, request, writer):
        seen.append(n)
        if len(seen) == 2:  # the upstream closed the idle connection just as the gateway reused it: no answer at all
            return False
        writer.write(OK)
        await writer.drain()

    async def main():
        async with _Server(answer) as server:
            client = UpstreamClient(server.url, connect_timeout=5, read_timeout=5)
            for i in range(3):
                resp = await client.start("POST", "/v1/chat/completions", {"X-N": str(i)}, b"{}")
                assert resp.status == 200 and await resp.read() == b'{"ok":true}'
                resp.release()
            client.close()
            return server

    server = _run(main())
    # call 1 on connection 1; call 2 went out on it, got nothing, and went again on connection 2 (its first request),
    # where call 3 followed on the same connection
    assert server.connections == 2
    assert [r.split(b"X-N: ")[1][:1] for r in server.requests] == [b"0", b"1", b"1", b"2"]
    assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Content-Length: 2\r\n\r\n{}" in server.requests[0]


def test_an_answer_cut_off_is_not_sent_again():
    async def answer(n, _request, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"partial")
        await writer.drain()
        return False

    async def main():
        async with _Server(answer) as server:
            client = UpstreamClient(server.url, connect_timeout=5, read_timeout=5)
            resp = await client.start("POST", "/x", {}, b"{}")
            with pytest.raises(BrokenOff, match="closed the connection mid-answer"):
                await resp.read()
            resp.release()
            assert client.idle == []
            return server

    assert len(_run(main()).requests) == 1


def test_an_answer_with_endless_headers_is_cut_off():
    """A broken or hostile upstream that sends header after header does not grow the gateway's memory: past 64 KiB
    the answer fails and its connection is dropped."""
    async def answer(n, _request, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n")
        try:
            for i in range(100_000):
                writer.write(b"X-H%d: %s\r\n" % (i, b"v" * 1000))
                await writer.drain()
        except ConnectionError:
            pass
        return False

    async def main():
        async with _Server(answer) as server:
            client = UpstreamClient(server.url, connect_timeout=5, read_timeout=5)
            with pytest.raises(BrokenOff, match="its answer's headers are over 64 KiB"):
                await client.start("POST", "/x", {}, b"{}")
            assert client.idle == []

    _run(main())


def test_a_body_that_ends_with_the_connection_and_a_chunked_one():
    async def answer(n, request, writer):
        if b"/eof" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
            await writer.drain()
            return False
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
                     b"6\r\ndata: \r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"3\r\nA\n\n\r\n0\r\n\r\n")
        await writer.drain()

    async def main():
        async with _Server(answer) as server:
            client = UpstreamClient(server.url, connect_timeout=5, read_timeout=5)
            resp = await client.start("GET", "/eof", {}, b"")
            assert await resp.read() == b"until the end"
            resp.release()
            assert client.idle == []  # the connection ended with the body
            resp = await client.start("GET", "/sse", {}, b"")
            assert resp.headers["content-type"] == "text/event-stream"
            parts = [part async for part in resp.iter_any()]
            resp.release()
            assert b"".join(parts) == b"data: A\n\n" and len(parts) == 2
            assert len(client.idle) == 1
            client.close()
            return server

    server = _run(main())
    assert b"Content-Length" not in server.requests[0]  # a GET without a body sends none


def test_the_answer_to_a_head_has_no_body_whatever_its_content_length():
    async def answer(n, request, writer):
        writer.write(OK.split(b"\r\n\r\n")[0] + b"\r\n\r\n" if request.startswith(b"HEAD") else OK)
        await writer.drain()

    async def main():
        async with _Server(answer) as server:
            client = UpstreamClient(server.url, connect_timeout=5, read_timeout=2)
            resp = await client.start("HEAD", "/v1/models", {}, b"")
            assert resp.status == 200 and resp.headers["Content-Length"] == "11" and await resp.read() == b""
            resp.release()
            resp = await client.start("GET", "/v1/models", {}, b"")
            assert await resp.read() == b'{"ok":true}'
            resp.release()
            client.close()

    _run(main())


def test_read_timeout_restarts_with_each_arrival_and_fires_when_the_upstream_stops():
    async def answer(n, _request, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(4):  # 4 x 0.2 s: longer than the timeout in all, never silent for as long
            await asyncio.sleep(0.2)
            writer.write(b"1\r\n.\r\n")
            await writer.drain()
        await asyncio.sleep(3)  # then silent

    async def main():
        async with _Server(answer) as server:
            client = UpstreamClient(server.url, connect_timeout=5, read_timeout=0.5)
            resp = await client.start("POST", "/x", {}, b"")
            got = b""
            with pytest.raises(asyncio.TimeoutError):
                async for part in resp.iter_any():
                    got += part
            resp.close()
            return got

    assert _run(main()) == b"...."


def test_unreachable_names_the_reason():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        client = UpstreamClient(f"http://127.0.0.1:{port}", connect_timeout=5, read_timeout=5)
        with pytest.raises(Unreachable, match="ConnectionRefusedError"):
            await client.start("POST", "/x", {}, b"")

    _run(main())


def test_headers_relay_repeated_names_and_an_interim_answer_is_skipped():
    async def answer(n, _request, writer):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
                     b"Content-Length: 2\r\n\r\n{}")
        await writer.drain()

    async def main():
        async with _Server(answer) as server:
            client = UpstreamClient(server.url, connect_timeout=5, read_timeout=5)
            resp = await client.start("POST", "/x", {}, b"")
            assert resp.status == 201 and resp.headers.getall("Set-Cookie") == ["a=1", "b=2"]
            assert await resp.read() == b"{}"
            resp.release()
            client.close()

    _run(main())


def test_json_body_is_relayed_byte_for_byte_through_the_gateway(tmp_path):
    """Odd bytes and spacing survive the relay both ways (the client builds the request from the raw bytes)."""
    project = init_project(tmp_path / "proj")
    with FakeLLM() as llm, Gateway(project, llm.url) as gw:
        body = b'{"model":  "m",\n "messages": [{"role": "user", "content": "caf\\u00e9 \xe2\x9c\x93"}]}'
        import urllib.request

        req = urllib.request.Request(gw.url + "/v1/chat/completions?x=a%20b", data=body,
                                     headers={"Content-Type": "application/json", "X-Custom": "kept"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert json.loads(resp.read())["choices"]
        assert llm.calls[-1].body == body
        assert llm.calls[-1].path.endswith("/v1/chat/completions?x=a%20b")
        assert llm.calls[-1].headers["x-custom"] == "kept"
        assert gw.stop() == 0


def test_a_non_streamed_answer_over_the_limit_is_refused_and_its_connection_dropped():
    """The gateway holds a non-streamed answer whole; an upstream that sends without end must not take its memory."""
    async def answer(n, _request, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")
        try:
            for _ in range(1000):
                writer.write(b"x" * 100_000)
                await writer.drain()
        except ConnectionError:
            pass
        return False

    async def main():
        async with _Server(answer) as server:
            client = UpstreamClient(server.url, connect_timeout=5, read_timeout=5)
            resp = await client.start("POST", "/x", {}, b"{}")
            with pytest.raises(AnswerTooLarge, match="its answer is over 300000 bytes"):
                await resp.read(300_000)
            resp.release()
            assert client.idle == []

    _run(main())


def test_the_gateway_answers_502_for_an_answer_over_its_cap_and_records_it(tmp_path, monkeypatch):
    from reef_cli.project import Project
    from reef_cli.serve import app
    from reef_cli.serve.app import Gateway as InProcess, ServeConfig

    monkeypatch.setattr(app, "MAX_ANSWER", 2**20)
    project = init_project(tmp_path / "proj")
    with FakeLLM() as llm:
        llm.reply(Reply(raw=b'{"pad": "' + b"x" * (2 * 2**20) + b'"}'))
        gw = InProcess(ServeConfig(project=Project(project), scenario="default", upstream=llm.url, port=0), {},
                       log=open(tmp_path / "log", "w"), out=open(tmp_path / "out", "w"))
        with in_process(gw) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.APIStatusError) as big:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert big.value.status_code == 502 and "over 1 MiB, the most the gateway holds whole" in str(big.value)
    [rec] = exchanges(project)
    assert (rec.payload["outcome"], rec.payload["status"]) == ("upstream_too_large", 502)


def test_the_upstream_urls_own_query_goes_on_every_call_and_is_never_shown(tmp_path):
    """Azure OpenAI's base URL carries ?api-version=...; it was dropped. It is sent on every call (before the
    client's own query) and, since a query may hold a key, never printed."""
    project = init_project(tmp_path / "proj")
    with FakeLLM() as llm, Gateway(project, llm.url + "/openai/v1?api-version=2024-10-21&key=sk-in-query-123") as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        client.models.list(extra_query={"limit": "5"})
        status = json.loads(urllib_get(gw.url + "/reef/status"))
        assert gw.stop() == 0
    paths = [r.path for r in llm.requests]
    assert "/openai/v1/chat/completions?api-version=2024-10-21&key=sk-in-query-123" in paths
    assert "/openai/v1/models?api-version=2024-10-21&key=sk-in-query-123&limit=5" in paths
    assert "sk-in-query" not in gw.log() and "sk-in-query" not in json.dumps(status)
    assert "sk-in-query" not in (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()


def urllib_get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read()
