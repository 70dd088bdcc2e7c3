"""The gateway's own upstream key never reaches a client or the ledger, even from an upstream that echoes it.

An echo server, or a proxy whose error quotes the key it was sent, would otherwise hand the operator's provider key
to every client holding a reef token (and, under --store-content, store it: a key of no known shape is not caught
by redaction)."""

from __future__ import annotations

import gzip
import http.server as httpd
import json
import threading
import time
from contextlib import contextmanager

import pytest

from gateway import Gateway, exchanges, init_project
from reef_cli.serve.keys import HIDDEN_MARK, KeyScreen, hidden_keys, screen

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
            encode = body.get("encode")
            if not body.get("stream"):
                out = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "usage": {
                    "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, "choices": [{
                        "index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"you sent {seen}"}}]}).encode()
                if encode:  # sent compressed although the gateway asked for identity
                    out = gzip.compress(out) if encode in ("gzip", "identity, gzip") else b"\x0b\x02\x80hello\x03"
                self.send_response(401 if body.get("fail") else 200)
                self.send_header("Content-Type", "application/json")
                for coding in (encode or "").split(", ") if encode else ():  # one header per layer
                    self.send_header("Content-Encoding", coding)
                if body.get("name"):  # the key in a header's name
                    self.send_header(f"X-{seen.split()[-1]}", "1")
                self.send_header("Content-Length", str(len(out)))
                self.send_header("X-Echo", seen)
                self.end_headers()
                self.wfile.write(out)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            if encode:
                self.send_header("Content-Encoding", encode)
            self.end_headers()
            chunk = lambda delta, finish="null": ('{"id":"c","object":"chat.completion.chunk","model":"m",'  # noqa
                                                  f'"choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}')
            events = "".join(f"data: {e}\n\n" for e in (
                chunk(json.dumps({"role": "assistant", "content": f"you sent {seen}"})),
                chunk("{}", '"stop"'), "[DONE]")).encode()
            if encode == "gzip":
                events = gzip.compress(events)
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


def test_a_compressed_echo_is_decompressed_and_screened_or_refused(tmp_path):
    """An upstream compressing although identity was asked for: gzip is read and screened (and relayed plain, the
    client never asked for it); an encoding the gateway cannot read is refused, not passed on unread."""
    project = init_project(tmp_path / "proj")
    with echo_upstream() as url, Gateway(project, url, "--store-content",
                                         env={"REEF_UPSTREAM_API_KEY": KEY}) as gw:
        chat = gw.url + "/v1/chat/completions"
        for capture in ("true", "false"):
            status, headers, body = post(chat, {"model": "m", "encode": "gzip", "messages": []},
                                         {"x-reef-capture": capture})
            assert status == 200 and "Content-Encoding" not in headers
            assert json.loads(body)["choices"][0]["message"]["content"] == "you sent Bearer [REDACTED:upstream_key]"
            status, headers, body = post(chat, {"model": "m", "encode": "gzip", "stream": True, "messages": []},
                                         {"x-reef-capture": capture})
            assert status == 200 and "Content-Encoding" not in headers and KEY not in body.decode()
            assert "you sent Bearer [REDACTED:upstream_key]" in body.decode()
            assert body.decode().endswith("data: [DONE]\n\n")
        status, _, body = post(chat, {"model": "m", "encode": "br", "messages": []})
        assert status == 502 and "compressed its answer (br) although asked not to" in body.decode()
        assert gw.stop() == 0
    outcomes = [r.payload["outcome"] for r in exchanges(project)]
    assert outcomes == ["ok", "ok", "upstream_undecodable"]
    ledger = (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()
    assert KEY not in ledger and "DONE" in ledger
    ledger = (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()
    assert KEY not in ledger and KEY not in gw.log()


def test_a_clients_own_key_is_its_own_to_see_but_not_stored(tmp_path):
    """With --pass-client-key the key the upstream echoes is the client's: relayed as it came. A stored record
    must not keep it though: a key of no known shape (Mistral's, Together's) escapes pattern redaction."""
    project = init_project(tmp_path / "proj")
    with echo_upstream() as url, Gateway(project, url, "--pass-client-key", "--store-content",
                                         env={"REEF_UPSTREAM_API_KEY": KEY}) as gw:
        own = "k9-client-own-77e0c0ffee11aa22"
        for extra in ({}, {"fail": True}, {"stream": True}):
            _, _, body = post(gw.url + "/v1/chat/completions", {"model": "m", "messages": [], **extra},
                              {"Authorization": f"Bearer {own}"})
            assert f"you sent Bearer {own}" in body.decode()
        assert gw.stop() == 0
    ledger = (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()
    assert own not in ledger and ledger.count("you sent Bearer [REDACTED:upstream_key]") == 3


def test_a_key_pasted_with_spaces_is_sent_and_screened_bare(tmp_path):
    """The provider reads the header without a pasted key's outer spaces (HTTP trims a field's value), so its echo
    is the bare key: screening the key as pasted let it through to the client and the ledger."""
    project = init_project(tmp_path / "proj")
    with echo_upstream() as url, Gateway(project, url, "--store-content",
                                         env={"REEF_UPSTREAM_API_KEY": f" {KEY} \n"}) as gw:
        status, headers, body = post(gw.url + "/v1/chat/completions", {"model": "m", "messages": []})
        assert status == 200 and KEY not in body.decode() and KEY not in json.dumps(headers)
        assert headers["X-Echo"] == "Bearer [REDACTED:upstream_key]"
        assert gw.stop() == 0
    assert KEY not in (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()


def test_a_key_in_a_header_name_or_under_a_second_encoding_never_leaves(tmp_path):
    """A header named after the key is dropped (a name cannot hold the mark); `Content-Encoding: identity` then
    `Content-Encoding: gzip` is a gzip answer (a client applies both headers), so it is decoded and screened."""
    project = init_project(tmp_path / "proj")
    with echo_upstream() as url, Gateway(project, url, env={"REEF_UPSTREAM_API_KEY": KEY}) as gw:
        chat = gw.url + "/v1/chat/completions"
        status, headers, body = post(chat, {"model": "m", "name": True, "messages": []})
        assert status == 200 and KEY not in json.dumps(headers) and headers["X-Echo"].endswith("upstream_key]")
        status, headers, body = post(chat, {"model": "m", "encode": "identity, gzip", "messages": []})
        assert status == 200 and "Content-Encoding" not in headers
        assert json.loads(body)["choices"][0]["message"]["content"] == "you sent Bearer [REDACTED:upstream_key]"
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


def test_a_key_that_begins_another_never_leaves_the_longer_ones_tail():
    keys = hidden_keys(["sk-shared-0123456789", "sk-shared-0123456789-ANTHROPIC-TAIL", "short"], False)
    assert keys == (b"sk-shared-0123456789-ANTHROPIC-TAIL", b"sk-shared-0123456789")  # longest first; short: never
    assert screen(b"a sk-shared-0123456789-ANTHROPIC-TAIL b sk-shared-0123456789", keys) == \
        b"a " + HIDDEN_MARK + b" b " + HIDDEN_MARK
    assert hidden_keys(["sk-shared-0123456789"], True) == ()
