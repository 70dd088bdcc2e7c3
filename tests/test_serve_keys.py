"""The gateway's own upstream key never reaches a client or the ledger, even from an upstream that echoes it.

An echo server, or a proxy whose error quotes the key it was sent, would otherwise hand the operator's provider key
to every client holding a reef token (and, under --store-content, store it: a key of no known shape is not caught
by redaction)."""

from __future__ import annotations

import http.server as httpd
import json
import threading
import time
from contextlib import contextmanager

import pytest

from gateway import Gateway, exchanges, init_project
from reef_cli.serve.relay import HIDDEN_MARK, KeyScreen

KEY = "k9-operator-4bd1f07c2e55a913e6"  # no known secret shape: only the screen can catch it


@contextmanager
def echo_upstream():
    """Answers with what it was sent: the Authorization header in a response header and in the body, as JSON or
    as SSE events written in small pieces (the key split across TCP segments)."""

    class Echo(httpd.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            seen = self.headers.get("Authorization", "")
            if not body.get("stream"):
                out = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "usage": {
                    "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, "choices": [{
                        "index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"you sent {seen}"}}]}).encode()
                self.send_response(401 if body.get("fail") else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.send_header("X-Echo", seen)
                self.end_headers()
                self.wfile.write(out)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = lambda delta, finish="null": ('{"id":"c","object":"chat.completion.chunk","model":"m",'  # noqa
                                                  f'"choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}')
            events = "".join(f"data: {e}\n\n" for e in (
                chunk(json.dumps({"role": "assistant", "content": f"you sent {seen}"})),
                chunk("{}", '"stop"'), "[DONE]")).encode()
            for i in range(0, len(events), 7):  # 7 bytes a chunk, each on its own
                piece = events[i:i + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.001)
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args):
            pass

    server = httpd.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def post(url: str, body: dict, headers: dict | None = None):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_an_echoed_upstream_key_is_screened_from_answers_and_records(tmp_path):
    project = init_project(tmp_path / "proj")
    with echo_upstream() as url, Gateway(project, url, "--store-content",
                                         env={"REEF_UPSTREAM_API_KEY": KEY}) as gw:
        chat = gw.url + "/v1/chat/completions"
        status, headers, body = post(chat, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and KEY not in body.decode() and KEY not in json.dumps(headers)
        assert json.loads(body)["choices"][0]["message"]["content"] == "you sent Bearer [REDACTED:upstream_key]"
        assert headers["X-Echo"] == "Bearer [REDACTED:upstream_key]"
        status, _, body = post(chat, {"model": "m", "fail": True, "messages": []})  # an error quoting the key
        assert status == 401 and KEY not in body.decode() and "[REDACTED:upstream_key]" in body.decode()
        status, _, body = post(chat, {"model": "m", "stream": True, "messages": []})
        assert status == 200 and KEY not in body.decode()
        assert "you sent Bearer [REDACTED:upstream_key]" in body.decode() and '"reef"' in body.decode()
        assert body.decode().endswith("data: [DONE]\n\n")
        assert gw.stop() == 0
    records = exchanges(project)
    assert [r.payload["outcome"] for r in records] == ["ok", "upstream_error", "ok"]
    ledger = (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()
    assert KEY not in ledger and KEY not in gw.log()


def test_a_clients_own_key_is_its_own_to_see(tmp_path):
    """With --pass-client-key the key the upstream echoes is the client's: nothing is screened."""
    project = init_project(tmp_path / "proj")
    with echo_upstream() as url, Gateway(project, url, "--pass-client-key",
                                         env={"REEF_UPSTREAM_API_KEY": KEY}) as gw:
        own = "k9-client-own-77e0c0ffee11aa22"
        _, _, body = post(gw.url + "/v1/chat/completions", {"model": "m", "messages": []},
                          {"Authorization": f"Bearer {own}"})
        assert json.loads(body)["choices"][0]["message"]["content"] == f"you sent Bearer {own}"
        assert gw.stop() == 0


@pytest.mark.parametrize("cut", range(0, 40))
def test_the_screen_catches_a_key_split_anywhere(cut):
    keys = (b"sk-aaaa-0123456789abcdef", b"second-key-000000000000")
    text = b"data: {\"a\": \"x sk-aaaa-0123456789abcdef y\"}\n\n"
    screen = KeyScreen(keys)
    out = screen.feed(text[:cut]) + screen.feed(text[cut:]) + screen.end()
    assert out == text.replace(keys[0], HIDDEN_MARK)


def test_the_screen_holds_only_what_may_start_a_key_and_gives_it_back():
    screen = KeyScreen((b"sk-aaaa-0123456789abcdef",))
    assert screen.feed(b"data: x\n\n") == b"data: x\n\n"  # an event's end starts no key: nothing held
    assert screen.feed(b"ask sk-aa") == b"ask "  # may begin the key: held
    assert screen.feed(b"rdvark") == b"sk-aardvark"  # it did not
    assert screen.feed(b"then sk") == b"then "
    assert screen.end() == b"sk"  # the answer ended: what was held goes out
