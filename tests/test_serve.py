"""`reef serve` with the real openai and anthropic SDKs, real HTTP on 127.0.0.1, against the fake upstream.

Each test asserts on the ledger itself: one record per exchange, the receipt the client got names a durable record,
and `reef ledger verify` passes. Gateways run as real `reef serve` subprocesses (tests/gateway.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import run_reef
from fakes import FakeLLM, Reply, error, text
from gateway import Gateway, exchanges, in_process, init_project
from reef_cli.ledger import Ledger

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")


def ledger_of(project: Path) -> Ledger:
    return Ledger(project / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")


def verify(project: Path) -> None:
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr


def head(project: Path) -> str:
    r = run_reef("log", "--json", cwd=project)
    return json.loads(r.stdout)[0]["release_id"] if r.stdout.strip().startswith("[") else r.stdout


def http(url: str, body: dict | bytes | None = None, headers: dict | None = None, method: str | None = None):
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **(headers or {})},
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture(scope="module")
def upstream():
    with FakeLLM() as llm:
        yield llm


@pytest.fixture(scope="module")
def served(tmp_path_factory, upstream):
    """One project and one gateway for the protocol tests (each starts from the ledger's current length)."""
    project = init_project(tmp_path_factory.mktemp("served") / "proj")
    gw = Gateway(project, upstream.url)
    yield gw
    code = gw.stop()
    assert code == 0, gw.log()
    assert "verified" in gw.log()


def oai(gw: Gateway, **kw):
    return openai.OpenAI(**{"base_url": gw.url + "/v1", "api_key": "sk-client-not-for-upstream", "max_retries": 0, **kw})


def ant(gw: Gateway, **kw):
    return anthropic.Anthropic(**{"base_url": gw.url, "api_key": "sk-ant-client", "max_retries": 0, **kw})


# -- the protocols, through the real SDKs ---------------------------------------------------------------------------
def test_openai_chat_receipt_from_headers(served, upstream):
    raw = oai(served).chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-reef-tag-ticket": "T-42", "x-reef-session": "sess-1"})
    completion = raw.parse()
    assert completion.choices[0].message.content == "DONE"
    rid, rel = raw.headers["x-reef-agent-record-id"], raw.headers["x-reef-release-id"]
    rec = ledger_of(served.project).get(rid)
    p = rec.payload
    assert rec.release_id == rel and rec.kind == "inference"
    assert (p["api"], p["model"], p["status"], p["outcome"], p["stream"]) == ("openai.chat", "fake-model", 200, "ok", False)
    assert p["usage"] == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    assert p["tokens"] == {"input": 12, "output": 3}
    assert p["tags"] == {"ticket": "T-42"} and p["session"] == "sess-1"
    assert p["latency_ms"] > 0 and set(p["request"]) == {"digest", "length"}  # digests only by default
    sent = upstream.calls[-1]
    assert "authorization" not in sent.headers and "x-reef-session" not in sent.headers  # no client key upstream
    assert "sk-client-not-for-upstream" not in (served.project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()


def test_openai_chat_stream_receipt_in_band(served):
    stream = oai(served).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text_out = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text_out == "DONE"
    last = chunks[-1]
    assert last.choices == [] and last.model_extra["reef"]["agent_record_id"].startswith("rec_")
    rid = last.model_extra["reef"]["agent_record_id"]
    p = ledger_of(served.project).get(rid).payload
    assert p["stream"] and p["outcome"] == "ok" and p["tokens"] == {"input": 12, "output": 3}
    assert p["ttft_ms"] is not None and p["ttft_ms"] <= p["latency_ms"]


def test_openai_responses_stream_and_not(served):
    client = oai(served)
    raw = client.responses.with_raw_response.create(model="fake-model", input="hi")
    assert raw.parse().output_text == "DONE"
    rid = raw.headers["x-reef-agent-record-id"]
    assert ledger_of(served.project).get(rid).payload["tokens"] == {"input": 12, "output": 3}
    events = list(client.responses.create(model="fake-model", input="hi", stream=True))
    done = events[-1]
    assert done.type == "response.completed" and done.response.output_text == "DONE"
    p = ledger_of(served.project).get(done.model_extra["reef"]["agent_record_id"]).payload
    assert p["api"] == "openai.responses" and p["stream"] and p["outcome"] == "ok" and p["tokens"]["output"] == 3


def test_anthropic_messages_stream_and_not(served, upstream):
    client = ant(served)
    raw = client.messages.with_raw_response.create(model="fake-model", max_tokens=10,
                                                   messages=[{"role": "user", "content": "hi"}])
    assert raw.parse().content[0].text == "DONE"
    rid = raw.headers["x-reef-agent-record-id"]
    p = ledger_of(served.project).get(rid).payload
    assert p["api"] == "anthropic.messages" and p["usage"] == {"input_tokens": 12, "output_tokens": 3}
    assert "x-api-key" not in upstream.calls[-1].headers
    with client.messages.stream(model="fake-model", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
        assert s.get_final_message().content[0].text == "DONE"  # the SDK's stream helper accepts the receipt
    events = list(client.messages.create(model="fake-model", max_tokens=10, stream=True,
                                         messages=[{"role": "user", "content": "hi"}]))
    stop = events[-1]
    assert stop.type == "message_stop"
    rid = stop.model_extra["reef"]["agent_record_id"]
    p = ledger_of(served.project).get(rid).payload
    assert p["stream"] and p["tokens"] == {"input": 12, "output": 3} and p["model"] == "fake-model"


def test_count_tokens_and_models_are_relayed_not_recorded(served):
    before = len(exchanges(served.project))
    client = ant(served)
    assert client.messages.count_tokens(model="fake-model", messages=[{"role": "user", "content": "x"}]).input_tokens == 42
    assert [m.id for m in oai(served).models.list()] == ["fake-model"]
    assert len(exchanges(served.project)) == before


def test_capture_false_and_unknown_scenario(served):
    before = len(exchanges(served.project))
    raw = oai(served).chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], extra_headers={"x-reef-capture": "false"})
    assert "x-reef-agent-record-id" not in raw.headers and raw.headers["x-reef-release-id"].startswith("rel_")
    chunks = list(oai(served).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                      stream=True, extra_headers={"x-reef-capture": "false"}))
    assert all("reef" not in (c.model_extra or {}) for c in chunks) and chunks[-1].usage.total_tokens == 15
    assert len(exchanges(served.project)) == before
    with pytest.raises(openai.NotFoundError, match="scenario 'nope' does not exist"):
        oai(served).chat.completions.create(model="m", messages=[], extra_headers={"x-reef-scenario": "nope"})


def test_report_over_http_same_rules_as_reef_report(served):
    rid = oai(served).chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}]).headers["x-reef-agent-record-id"]
    body = {"score": 0, "feedback": "it forgot the tests; token sk-ant-api03-" + "x" * 40, "receipts": [rid],
            "id": "rep-1"}
    status, _, out = http(served.url + "/reef/report", body)
    assert status == 200, out
    rec = json.loads(out)
    assert rec["kind"] == "report" and rec["payload"]["receipts"] == [rid] and "sk-ant-api03" not in out.decode()
    again = http(served.url + "/reef/report", body)
    assert again[0] == 200 and json.loads(again[2])["record_id"] == rec["record_id"]  # idempotent resend
    conflict = http(served.url + "/reef/report", {**body, "score": 1})
    assert conflict[0] == 409
    for bad, msg in (({"score": "NaN", "receipts": [rid]}, "finite number"),
                     ({"score": 1, "receipts": ["rec_nope"]}, "unknown receipt rec_nope"),
                     ({"score": 1}, "needs 'receipts'"), ({"score": 1, "receipts": [rid], "x": 1}, "unknown report field")):
        status, _, out = http(served.url + "/reef/report", bad)
        assert status == 400 and msg in json.loads(out)["error"]["message"], out
    assert json.loads(http(served.url + "/reef/releases")[2])["head"].startswith("rel_")
    status = json.loads(http(served.url + "/reef/status")[2])
    assert status["loop"] == ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
    assert status["recorded"] >= 1 and status["scenarios"]["default"]["step"] == 1
    assert http(served.url + "/healthz")[0] == 200
    verify(served.project)


def test_release_is_frozen_when_the_request_arrives(served, upstream):
    project = served.project
    before = json.loads(http(served.url + "/reef/releases")[2])["head"]
    upstream.reply(text("slow", delay=1.5))
    got = {}

    def call():
        got["raw"] = oai(served).chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}])

    import threading

    t = threading.Thread(target=call)
    t.start()
    upstream.wait_for(len(upstream.calls) + 0, timeout=5)
    time.sleep(0.3)
    md = project / "CLAUDE.md"
    md.write_text(md.read_text() + "\nA human edit published mid-request.\n")
    assert run_reef("publish", "-m", "mid-request", cwd=project).returncode == 0
    t.join(10)
    after = json.loads(http(served.url + "/reef/releases")[2])["head"]
    assert after != before
    rid = got["raw"].headers["x-reef-agent-record-id"]
    assert got["raw"].headers["x-reef-release-id"] == before
    assert ledger_of(project).get(rid).release_id == before
    raw = oai(served).chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert raw.headers["x-reef-release-id"] == after  # the next request sees the new head


# -- auth -----------------------------------------------------------------------------------------------------------
def test_tokens_rotation_and_refusals(tmp_path, upstream):
    project = init_project(tmp_path / "proj")
    tokens = tmp_path / "tokens"
    import hashlib

    tokens.write_text("# reef gateway tokens\nold-token-1\nsha256:" + hashlib.sha256(b"new-token-2").hexdigest() + "\n")
    with Gateway(project, upstream.url, "--token-file", str(tokens),
                 env={"REEF_UPSTREAM_API_KEY": "sk-upstream-secret-9"}) as gw:
        for key in ("old-token-1", "new-token-2"):
            assert oai(gw, api_key=key).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]).choices[0].message.content == "DONE"
        assert ant(gw, api_key="new-token-2").messages.create(  # x-api-key, as Anthropic clients send it
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]).content[0].text == "DONE"
        assert upstream.calls[-1].headers["x-api-key"] == "sk-upstream-secret-9"  # the upstream's key, not ours
        assert upstream.calls[-2].headers["authorization"] == "Bearer sk-upstream-secret-9"
        with pytest.raises(openai.AuthenticationError, match="not valid for this gateway"):
            oai(gw, api_key="wrong").chat.completions.create(model="m", messages=[])
        status, _, out = http(gw.url + "/v1/chat/completions", {"model": "m", "messages": []})
        assert status == 401 and "no reef token" in json.loads(out)["error"]["message"]
        assert http(gw.url + "/reef/status")[0] == 401
        assert http(gw.url + "/healthz")[0] == 200
        assert len(exchanges(project)) == 3
        assert gw.stop() == 0
    # one line per request, written once its response went out: method, path, status, time, the receipt
    lines = [line for line in gw.log().splitlines() if line.startswith("reef: ") and "ms" in line]
    ok = [line.split() for line in lines if " 200 " in line and "/v1/" in line]
    assert sorted(parts[1:3] for parts in ok) == [["POST", "/v1/chat/completions"]] * 2 + [["POST", "/v1/messages"]]
    assert sorted(parts[-1] for parts in ok) == sorted(r.record_id for r in exchanges(project))
    assert sum(" 401 " in line for line in lines) == 3 and any(line.startswith("reef: GET /healthz 200") for line in lines)
    # timed by a fine clock (uvloop's loop clock, which aiohttp hands the access logger, counts whole ms)
    assert any(not line.split()[4].endswith(".0ms") for line in lines), lines
    assert "old-token-1" not in gw.log() and "new-token-2" not in gw.log() and "sk-upstream-secret-9" not in gw.log()
    assert "sk-upstream-secret-9" not in (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()


def test_token_file_is_reread_when_it_changes(tmp_path, upstream):
    """Rotation without a restart: once a change has settled, a token added is accepted and a removed one refused;
    the gateway accepts exactly what the file holds, so emptied, deleted or replaced by a FIFO it accepts nobody
    (failing open would keep a leaked token working) without ever blocking; a token added back works again."""
    import os

    project = init_project(tmp_path / "proj")
    tokens = tmp_path / "tokens"
    tokens.write_text("old-token-1\n")

    def status(token: str) -> int:
        return http(gw.url + "/reef/status", headers={"Authorization": f"Bearer {token}"})[0]

    def settles(token: str, code: int) -> bool:
        deadline = time.monotonic() + 6
        while status(token) != code:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    with Gateway(project, upstream.url, "--token-file", str(tokens)) as gw:
        assert status("old-token-1") == 200 and status("new-token-2") == 401
        tokens.write_text("old-token-1\nnew-token-2\n")  # in place: add the new one
        assert settles("new-token-2", 200) and status("old-token-1") == 200
        swap = tmp_path / "tokens.new"
        swap.write_text("new-token-2\n")
        swap.replace(tokens)  # an editor's save by rename: remove the old one
        assert settles("old-token-1", 401) and status("new-token-2") == 200
        tokens.write_text("# nobody\n")
        assert settles("new-token-2", 401) and http(gw.url + "/healthz")[0] == 200
        tokens.write_text("new-token-2\n")
        assert settles("new-token-2", 200)
        tokens.unlink()
        assert settles("new-token-2", 401)
        os.mkfifo(tokens)  # nobody writes it: opened without blocking, refused
        time.sleep(2.5)
        assert status("new-token-2") == 401 and http(gw.url + "/healthz")[0] == 200
        assert gw.stop(timeout=15) == 0
    log = gw.log()
    assert log.count("token(s) accepted") == 3, log
    assert f"--token-file {tokens}: holds no token (one per line; '#' starts a comment); no client is accepted " \
           "until it holds a token again" in log
    assert f"--token-file {tokens}: no such file; no client is accepted until it holds a token again" in log
    assert f"--token-file {tokens}: not a regular file (one token per line); no client is accepted" in log
    assert "old-token-1" not in log and "new-token-2" not in log


def test_a_token_file_is_read_whole_or_not_at_all(tmp_path):
    """A half-written save is never loaded: a change is read once the file was last written a second ago."""
    from reef_cli.serve.auth import TokenFile

    path = tmp_path / "tokens"
    path.write_text("old-token-1\n")
    notes: list = []
    tf = TokenFile(path, notes.append)
    path.write_text("new-t")  # caught half-way through writing "new-token-2\n"
    tf.refresh()
    assert tf.tokens.accepts("old-token-1") and not tf.tokens.accepts("new-t") and notes == []
    path.write_text("new-token-2\n")
    tf.refresh()
    assert tf.tokens.accepts("old-token-1") and notes == []
    time.sleep(1.1)
    tf.refresh()  # settled
    assert tf.tokens.accepts("new-token-2") and not tf.tokens.accepts("old-token-1")
    assert notes == [f"--token-file {path}: reloaded, 1 token(s) accepted"]


def test_a_token_file_rewritten_often_still_reloads(tmp_path):
    """A sidecar re-rendering the file every tenth of SETTLE_S never lets it settle by its times; the same bytes
    read SETTLE_S apart count as settled, or a removed token would keep working for as long as the rewrites go on.
    Rewrites of the same bytes afterwards reload nothing and say nothing."""
    from reef_cli.serve.auth import TokenFile

    path = tmp_path / "tokens"
    path.write_text("tok-old-1\n")
    notes: list = []
    tf = TokenFile(path, notes.append)
    tf.SETTLE_S = 0.3
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not tf.tokens.accepts("tok-new-2"):
        path.write_text("tok-new-2\n")
        tf.refresh()
        time.sleep(0.03)
    assert tf.tokens.accepts("tok-new-2") and not tf.tokens.accepts("tok-old-1")
    for _ in range(15):
        path.write_text("tok-new-2\n")
        tf.refresh()
        time.sleep(0.03)
    assert notes == [f"--token-file {path}: reloaded, 1 token(s) accepted"]


def test_a_token_files_bom_and_trailing_comments_are_not_part_of_a_token(tmp_path):
    """A Windows editor's BOM is not part of the first token (its holder got 401 while the log said 1 token
    accepted, and a BOM'd first `#` line was a token); `tok  # laptop` is a token and a comment; a `#` inside a
    token stays; a space inside one is refused rather than read as part of it."""
    from reef_cli.errors import InvalidInput
    from reef_cli.serve.auth import TokenFile

    path = tmp_path / "tokens"
    path.write_bytes("\ufefftok-first-1\n# a comment\ntok-second-2   # laptop\nabc#def\n".encode())
    tokens = TokenFile(path).tokens
    assert all(tokens.accepts(t) for t in ("tok-first-1", "tok-second-2", "abc#def")) and len(tokens) == 3
    path.write_bytes("\ufeff# only a comment\n".encode())
    with pytest.raises(InvalidInput, match="holds no token"):
        TokenFile(path)
    path.write_text("tok-one\ntok two\n")
    with pytest.raises(InvalidInput, match=r"tokens: line 2 holds a space inside a token \(one token per line; "):
        TokenFile(path)


@contextmanager
def plain_upstream(extra=lambda calls: [], watch: str = ""):
    """A threaded http.server upstream (not FakeLLM): a chat completion for POST with the response headers
    `extra(calls)` adds, a HEAD answered with Content-Length 69; yields (port, values of request header `watch`)."""
    import http.server as httpd
    import threading

    seen: list = []

    class Upstream(httpd.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.headers.get(watch))
            body = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "choices": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra(len(seen)):
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_HEAD(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "69")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = httpd.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # shutdown() waits a poll
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()


def test_upstream_cookies_reach_their_client_only_and_json_logs(tmp_path):
    """A Set-Cookie from the upstream is relayed to the client that got it, never kept by the gateway's shared
    upstream session and sent on another client's call (a session cookie would leak between agents)."""
    project = init_project(tmp_path / "proj")
    cookie = lambda calls: [("Set-Cookie", f"upstream-session=for-call-{calls}; Path=/")]  # noqa: E731
    with plain_upstream(cookie, watch="Cookie") as (port, seen):
        # a host name, not an address: aiohttp's default cookie jar ignores cookies from IP addresses
        with Gateway(project, f"http://localhost:{port}", "--json", "--loop", "asyncio") as gw:
            first = http(gw.url + "/v1/chat/completions", {"model": "m", "messages": []})
            second = http(gw.url + "/v1/chat/completions", {"model": "m", "messages": []})
            assert json.loads(http(gw.url + "/reef/status")[2])["loop"] == "asyncio"  # the fallback serves too
            assert gw.stop() == 0
    assert first[1]["Set-Cookie"].startswith("upstream-session=for-call-1")
    assert second[1]["Set-Cookie"].startswith("upstream-session=for-call-2")
    assert seen == [None, None]
    logged = [json.loads(line) for line in gw.log().splitlines() if '"method": "POST"' in line]
    assert [(e["method"], e["path"], e["status"], e["record_id"]) for e in logged] == [
        ("POST", "/v1/chat/completions", 200, h["x-reef-agent-record-id"]) for h in (first[1], second[1])]
    assert all(e["ms"] >= 0 and e["release_id"] == first[1]["x-reef-release-id"] for e in logged)


def test_non_loopback_bind_needs_a_token_file(tmp_path):
    project = init_project(tmp_path / "proj")
    r = run_reef("serve", "--upstream", "http://127.0.0.1:9", "--host", "0.0.0.0", "--port", "0", cwd=project)
    assert r.returncode == 4 and "is not a loopback address" in r.stderr and "--token-file" in r.stderr
    r = run_reef("serve", "--upstream", "ftp://x", "--port", "0", cwd=project)
    assert r.returncode == 4 and "--upstream ftp://x: expected an http(s) URL" in r.stderr
    for url, why in (("http://127.0.0.1:99999", "Port out of range 0-65535"), ("http://[::1", "Invalid IPv6 URL"),
                     ("http://sk-proj-AbCdEfGhIjKlMnOpQrSt:x@127.0.0.1:abc", "Port could not be cast to integer")):
        r = run_reef("serve", "--upstream", url, "--port", "0", cwd=project)
        assert r.returncode == 4 and f"reef: error: --upstream: not a valid URL ({why}" in r.stderr, r.stderr
        assert "AbCdEfGhIjKlMnOp" not in r.stderr


@pytest.mark.parametrize("flag,value,message", [
    ("--port", "99999", "--port 99999: expected 0-65535 (0 picks a free port)"),
    ("--port", "-1", "--port -1: expected 0-65535 (0 picks a free port)"),
    ("--max-body", "-5", "--max-body -5: expected a positive number of bytes"),
    ("--timeout", "-1", "--timeout -1.0: expected a positive number of seconds"),
    ("--drain-timeout", "-1", "--drain-timeout -1.0: expected zero or more seconds"),
    ("--loop", "fast", "--loop fast: expected auto, uvloop or asyncio"),
])
def test_out_of_range_flags_fail_in_one_line_before_binding(tmp_path, flag, value, message):
    """--port 99999 ended in 'unexpected error: OverflowError' (and an aiohttp 'Unclosed client session' warning);
    a negative --max-body or --timeout started a gateway that would refuse or time out every call."""
    project = init_project(tmp_path / "proj")
    args = ["serve", "--upstream", "http://127.0.0.1:9", flag, value] + (["--port", "0"] if flag != "--port" else [])
    r = run_reef(*args, cwd=project, timeout=20)
    assert r.returncode == 4 and r.stderr.strip() == f"reef: error: {message}", r.stderr


# -- injection and content ----------------------------------------------------------------------------------------
def test_inject_system_and_store_content(tmp_path, upstream):
    project = init_project(tmp_path / "proj")
    md = project / "CLAUDE.md"
    md.write_text(md.read_text().replace("<!-- reef:begin learned -->\n",
                                         "<!-- reef:begin learned -->\n- INJECT-BULLET-5150 run the tests first\n"))
    assert run_reef("publish", "-m", "bullet", cwd=project).returncode == 0
    with Gateway(project, upstream.url, "--inject", "system", "--store-content", "--pass-client-key") as gw:
        secret = "sk-ant-api03-" + "Q" * 40
        raw = oai(gw).chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": f"my key is {secret}"}])
        assert upstream.calls[-1].headers["authorization"] == "Bearer sk-client-not-for-upstream"  # --pass-client-key
        sent = upstream.calls[-1].json
        assert sent["messages"][0]["role"] == "system" and "INJECT-BULLET-5150" in sent["messages"][0]["content"]
        assert sent["messages"][0]["content"].endswith("be brief")
        ant(gw).messages.create(model="m", max_tokens=5, system="sys", messages=[{"role": "user", "content": "x"}])
        assert "INJECT-BULLET-5150" in upstream.calls[-1].json["system"]
        p = ledger_of(project).get(raw.headers["x-reef-agent-record-id"]).payload
        assert p["injected"]["release_id"] == raw.headers["x-reef-release-id"] and p["injected"]["chars"] > 0
        assert "INJECT-BULLET-5150" in p["request"]["text"] and secret not in p["request"]["text"]
        assert "DONE" in p["response"]["text"]
        assert gw.stop() == 0
    stored = (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()
    assert secret not in stored and "sk-client-not-for-upstream" not in stored


# -- faults ---------------------------------------------------------------------------------------------------------
def test_faults_each_recorded_as_failed(tmp_path, upstream):
    project = init_project(tmp_path / "proj")
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    with Gateway(project, upstream.url, "--timeout", "1", "--max-body", "4096") as gw, \
            Gateway(project, f"http://127.0.0.1:{dead_port}", "--upstream-api", "anthropic") as nowhere:
        with pytest.raises(openai.NotFoundError, match="upstream speaks anthropic only"):
            oai(nowhere).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        # slow upstream: 504, one failed record
        upstream.reply(text("late", delay=2.5))
        with pytest.raises(openai.APIStatusError) as slow:
            oai(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert slow.value.status_code == 504 and "did not answer within 1 s" in str(slow.value)
        # unreachable upstream: 502
        with pytest.raises(anthropic.APIStatusError) as gone:
            ant(nowhere).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        assert gone.value.status_code == 502 and "unreachable" in str(gone.value)
        # oversized body: 413, nothing relayed, nothing recorded
        with pytest.raises(openai.APIStatusError) as big:
            oai(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 5000}])
        assert big.value.status_code == 413 and "over the gateway's cap of 4096 bytes" in str(big.value)
        assert not upstream.saw("x" * 5000)  # not a count: the module's shared upstream may still hear a late call
        # upstream dies mid-stream: the client sees a broken stream, no receipt
        upstream.reply(Reply(text="cut", die_after=2))
        with pytest.raises(Exception):
            list(ant(gw).messages.create(model="m", max_tokens=5, stream=True,
                                         messages=[{"role": "user", "content": "x"}]))
        # upstream error status: relayed as is and recorded with it
        upstream.reply(error(429, "slow down"))
        with pytest.raises(openai.RateLimitError):
            oai(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        # client hangs up mid-stream
        upstream.reply(Reply(text="slowly", event_delay=0.3))
        s = socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1])))
        body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert s.recv(10)
        s.close()
        deadline = time.monotonic() + 10
        while len(exchanges(project)) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gw.stop() == 0 and nowhere.stop() == 0
    recs = exchanges(project)
    got = sorted((r.payload["outcome"], r.payload["status"]) for r in recs)
    assert got == [("client_disconnected", 200), ("timeout", 504), ("unreachable", 502),
                   ("upstream_died", 502), ("upstream_error", 429)], got
    verify(project)


def test_a_ledger_cut_while_serving_gets_503_and_serve_refuses_to_start_on_it(tmp_path, upstream):
    """An acknowledged record cut off the ledger's end (reef_cli/ledger/acked.py): no record can be kept over it, so
    each call is a 503 naming the ledger (never an answer without a durable receipt), and a new `reef serve` says so
    at start, exit 4, instead of failing every call."""
    project = init_project(tmp_path / "proj")
    ledger = project / ".reef" / "scenarios" / "default" / "ledger.jsonl"
    with Gateway(project, upstream.url) as gw:
        assert oai(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        with open(ledger, "r+b") as handle:
            handle.truncate(ledger.stat().st_size - 20)
        status, headers, body = http(gw.url + "/v1/chat/completions", {"model": "m", "messages": []})
        assert status == 503 and "x-reef-agent-record-id" not in {k.lower() for k in headers}
        assert "lost acknowledged records" in json.loads(body)["error"]["message"]
        gw.stop()
    started = run_reef("serve", "--upstream", upstream.url, "--port", "0", cwd=project)
    assert started.returncode == 4 and "lost acknowledged records" in started.stderr, started.stderr
    assert "accept-loss" in started.stderr and len(started.stderr.strip().splitlines()) == 1


def test_emptying_the_sync_page_while_serving_neither_kills_the_gateway_nor_loses_a_record(served):
    """`: > ledger.jsonl.sync` while the gateway had the page mapped: the next request's append died of SIGBUS, the
    gateway with it (no drain, no record, no answer). Now the call is answered with a durable receipt and the
    acknowledged mark is written back."""
    from reef_cli.ledger import acked

    sync = served.project / ".reef" / "scenarios" / "default" / "ledger.jsonl.sync"
    for _ in range(2):  # the page in use before it is emptied, then once more after it was written back
        assert oai(served).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        sync.write_bytes(b"")
        raw = oai(served).chat.completions.with_raw_response.create(model="m", messages=[{"role": "user",
                                                                                            "content": "y"}])
        assert raw.parse().choices[0].message.content == "DONE" and served.proc.poll() is None
        record = ledger_of(served.project).get(raw.headers["x-reef-agent-record-id"])
        assert acked.read(sync).seq == record.seq


def test_200_concurrent_streams_exact_records(tmp_path, upstream):
    aiohttp = pytest.importorskip("aiohttp")
    project = init_project(tmp_path / "proj")
    n = 200
    with Gateway(project, upstream.url) as gw:
        async def one(session, i):
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": f"n{i}"}]}
            async with session.post(gw.url + "/v1/chat/completions", json=body) as resp:
                data = await resp.read()
            assert data.endswith(b"data: [DONE]\n\n")
            last = json.loads(data.split(b"data: ")[-2])
            return resp.headers["x-reef-agent-record-id"], last["reef"]["agent_record_id"]

        async def main():
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                return await asyncio.gather(*(one(session, i) for i in range(n)))

        pairs = asyncio.run(main())
        appends = json.loads(http(gw.url + "/reef/status")[2])["appends"]
        assert gw.stop() == 0
    # concurrent records share writes and syncs (commit.py): far fewer batches than records
    assert appends["inline"] + appends["batches"] < n
    assert all(h == b for h, b in pairs) and len({h for h, _ in pairs}) == n
    recs = exchanges(project)
    assert len(recs) == n and {r.record_id for r in recs} == {h for h, _ in pairs}
    assert all(r.payload["outcome"] == "ok" for r in recs)
    verify(project)


def test_sigterm_drains_in_flight_then_verifies(tmp_path, upstream):
    project = init_project(tmp_path / "proj")
    gw = Gateway(project, upstream.url, "--drain-timeout", "5")
    upstream.reply(Reply(text="draining", event_delay=0.2))
    client = oai(gw)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
    first = next(iter(stream))
    gw.proc.send_signal(__import__("signal").SIGTERM)
    rest = list(stream)
    assert rest[-1].model_extra["reef"]["agent_record_id"]  # finished during the drain, with its receipt
    assert gw.proc.wait(timeout=15) == 0
    assert "draining 1 request(s)" in gw.log() and "verified (1 records)" in gw.log()
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=[])
    assert first is not None and len(exchanges(project)) == 1
    gw.stop()


def test_drain_is_bounded_and_cut_requests_are_recorded(tmp_path, upstream):
    project = init_project(tmp_path / "proj")
    gw = Gateway(project, upstream.url, "--drain-timeout", "0.5")
    upstream.reply(Reply(text="forever", event_delay=3))
    stream = oai(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
    next(iter(stream))
    started = time.monotonic()
    gw.proc.send_signal(__import__("signal").SIGTERM)
    assert gw.proc.wait(timeout=15) == 0 and time.monotonic() - started < 5
    recs = exchanges(project)
    assert [r.payload["outcome"] for r in recs] == ["interrupted"]
    verify(project)
    gw.stop()


def test_session_in_the_path_for_agents_without_headers(served):
    client = openai.OpenAI(base_url=served.url + "/session/run-77/v1", api_key="x", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "x"}])
    p = ledger_of(served.project).get(raw.headers["x-reef-agent-record-id"]).payload
    assert p["session"] == "run-77" and p["route"] == "/v1/chat/completions"


def test_a_key_in_the_path_never_reaches_the_log(served):
    """An agent that put its key where the /session/ID goes (or anywhere in a path) finds it redacted in the log line,
    and a percent-encoded escape in a path is written escaped, not as a terminal control sequence."""
    key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    client = openai.OpenAI(base_url=f"{served.url}/session/{key}/v1", api_key="x", max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert http(f"{served.url}/v1/chat/completions/{key}")[0] == 404
    assert http(served.url + "/v1/nothing/%1b[31mred%1b[0m")[0] == 404
    deadline = time.monotonic() + 10  # a line is written once its answer is out: just after the client has it
    while "/v1/nothing/\\x1b[31mred" not in (log := served.log()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert key not in log and "AbCdEfGhIjKlMnOp" not in log and "\x1b" not in log, log
    assert "/session/[REDACTED:openai_key]/v1/chat/completions 200" in log
    assert "/v1/nothing/\\x1b[31mred\\x1b[0m 404" in log


def test_unknown_paths_and_methods_get_the_route_table_answers(served):
    """The gateway's own route table: what aiohttp's router used to answer, as JSON."""
    status, headers, body = http(served.url + "/v1/nothing", {})
    assert status == 404 and json.loads(body)["error"]["message"] == "Not Found"
    status, headers, body = http(served.url + "/v1/chat/completions", method="GET")
    assert status == 405 and headers["Allow"] == "POST"
    status, headers, _ = http(served.url + "/reef/status", method="HEAD")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert http(served.url + "/session/s1/reef/status")[0] == 404  # only model routes take a session prefix
    assert http(served.url + "/session//v1/models")[0] == 404
    assert http(served.url + "/session/s1/v1/models")[0] == 200
    status, headers, body = http(served.url + "/v1/models", method="HEAD")
    assert status == 200 and body == b""


def test_expect_100_continue_is_answered_before_the_body(served):
    """curl sends `Expect: 100-continue` before a large body and waits for the invitation (up to a second)."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}).encode()
    port = int(served.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        s.settimeout(0.5)
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.settimeout(10)
        s.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 ") and b"x-reef-agent-record-id" in answer.lower()
    status, _, reply = http(served.url + "/v1/models", headers={"Expect": "something-else"})
    assert status == 417 and "unknown Expect: something-else" in json.loads(reply)["error"]["message"]


def _raw_exchange(gw: Gateway | str, request: bytes) -> bytes:
    """Bytes no HTTP client library would send; everything until the gateway (or the URL's server) ends the
    connection (the request says Connection: close, or the answer is cut)."""
    url = gw if isinstance(gw, str) else gw.url
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(request)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer


def test_a_header_that_is_not_utf8_gets_a_json_400(served):
    """A scenario header with bytes that are not UTF-8 is refused with the scenario rule, not a 500 (the message
    echoing it could not be encoded)."""
    answer = _raw_exchange(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                   b"Connection: close\r\nx-reef-scenario: \xffbad\r\n\r\n{}")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert "scenario name '\udcffbad' is invalid" in json.loads(body)["error"]["message"]


def test_a_malformed_header_holding_a_key_never_reaches_the_log(served):
    """The parser refuses a header with a control character or a folded line (400) and a line over 8 KiB (431): the
    client gets the gateway's JSON error, the log one line per refusal that never quotes the request's bytes."""
    key = b"sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    for header, status, message in (
            (b"Authorization: Bearer " + key + b"\x01", b"400 Bad Request", "bad request: Invalid header value char"),
            (b"x-api-key: " + key + b"\r\n folded", b"400 Bad Request", "bad request: Unexpected whitespace after"),
            (b"X-Key: " + key + b"a" * 9000, b"431 Request Header Fields Too Large", "a header line is over 8190 bytes")):
        answer = _raw_exchange(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                       b"Connection: close\r\n" + header + b"\r\n\r\n{}")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 " + status) and b"Connection: close" in head, answer
        assert json.loads(body)["error"]["message"].startswith(message) and b"AbCdEf" not in answer
    log = served.log()
    assert "AbCdEfGhIjKlMnOp" not in log and "Traceback" not in log, log
    assert "reef: refused a request from 127.0.0.1: 400 bad request: Invalid header value char" in log
    assert "reef: refused a request from 127.0.0.1: 431 a header line is over 8190 bytes" in log


def _answers(data: bytes) -> list[tuple[int, dict, bytes]]:
    """Split raw HTTP/1.1 answers (Content-Length or chunked bodies) into (status, headers, body)."""
    out = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size, _, data = data.partition(b"\r\n")
                n = int(size, 16)
                body, data = body + data[:n], data[n + 2:]
                if n == 0:
                    break
        else:
            n = int(headers.get("content-length", len(data)))
            body, data = data[:n], data[n:]
        out.append((int(lines[0].split()[1]), headers, body))
    return out


def test_pipelined_requests_are_answered_in_order_on_one_connection(served):
    before = len(exchanges(served.project))
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
    answer = _raw_exchange(served, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                                   b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                                   + str(len(chat)).encode() + b"\r\n\r\n" + chat +
                                   b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = _answers(answer)
    assert [status for status, _, _ in got] == [200, 200, 404], answer
    assert json.loads(got[0][2]) == {"ok": True} and got[1][1]["x-reef-agent-record-id"]
    assert got[2][1]["connection"] == "close"
    assert len(exchanges(served.project)) == before + 1


def test_chunked_request_bodies_and_http_1_0_clients(served):
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "chunked"}]}).encode()
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in (chat[:10], chat[10:])) + b"0\r\n\r\n"
    got = _answers(_raw_exchange(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                         b"Transfer-Encoding: chunked\r\n\r\n" + chunked))
    rid = got[0][1]["x-reef-agent-record-id"]
    assert got[0][0] == 200 and ledger_of(served.project).get(rid).payload["request"]["length"] == len(chat)
    # HTTP/1.0 without keep-alive: the answer says close and the connection ends after it (no chunked framing even
    # for a stream: its end is the connection's)
    stream = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}).encode()
    raw = _raw_exchange(served, b"POST /v1/chat/completions HTTP/1.0\r\nContent-Length: "
                                + str(len(stream)).encode() + b"\r\n\r\n" + stream)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Connection: close" in head and b"chunked" not in head
    assert body.endswith(b"data: [DONE]\n\n") and b'"reef"' in body


def test_a_body_over_the_cap_gets_its_413_not_a_reset(tmp_path, upstream):
    """Closing a socket with request bytes unread sends a reset, and a client may then never see the 413: the
    gateway sends its end and drops what still comes instead."""
    project = init_project(tmp_path / "proj")
    with Gateway(project, upstream.url, "--max-body", "1000") as gw:
        calls = len(upstream.calls)
        big = b"x" * 200_000
        for framing in (b"Content-Length: " + str(len(big)).encode(),
                        b"Transfer-Encoding: chunked"):
            body = big if framing.startswith(b"Content") else b"%x\r\n%b\r\n0\r\n\r\n" % (len(big), big)
            got = _answers(_raw_exchange(gw, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + framing
                                         + b"\r\n\r\n" + body))
            assert [status for status, _, _ in got] == [413]
            assert "over the gateway's cap of 1000 bytes" in json.loads(got[0][2])["error"]["message"]
        with socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1])), timeout=5) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      b"Content-Length: 5000 \r\n\r\n")  # OWS after the length: 413 at once, not an invitation
            assert s.recv(100).startswith(b"HTTP/1.1 413 ")
        assert len(upstream.calls) == calls and gw.stop() == 0
    assert exchanges(project) == []


def test_request_line_header_and_version_limits(served):
    for request, status in ((b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
                            (b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200))
                             + b"\r\n", 431),
                            (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505),
                            (b"NOT A REQUEST\r\n\r\n", 400)):
        got = _answers(_raw_exchange(served, request))
        assert [s for s, _, _ in got] == [status] and json.loads(got[0][2])["error"]["code"] == status, got


def test_text_that_is_not_utf8_in_a_session_or_tag_is_recorded_not_dropped(served):
    """Header bytes and %ff in a /session/ path were decoded with surrogates: the call reached the upstream, then
    the record could not be encoded, so the client got a 400 and the call had no record."""
    before = len(exchanges(served.project))
    chat = b'{"model": "m\\ud800", "messages": [{"role": "user", "content": "x"}]}'  # a lone surrogate, escaped
    for target, header in ((b"/v1/chat/completions", b"x-reef-session: s\xff1\r\nx-reef-tag-team: t\xfe\r\n"),
                           (b"/session/%ff%c3%28/v1/chat/completions", b"")):
        got = _answers(_raw_exchange(served, b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                     + header + b"Content-Length: " + str(len(chat)).encode() + b"\r\n\r\n" + chat))
        assert got[0][0] == 200, got
    recs = exchanges(served.project)[before:]
    assert len(recs) == 2 and all(r.payload["outcome"] == "ok" for r in recs)
    assert recs[0].payload["session"] == "s\ufffd1" and recs[0].payload["tags"] == {"team": "t\ufffd"}
    assert "\ufffd" in recs[1].payload["session"] and recs[0].payload["model"] == "m\ufffd"
    verify(served.project)


def test_pipelined_requests_before_a_malformed_one_are_all_answered_then_the_400(served):
    good = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    got = _answers(_raw_exchange(served, good * 3 + b"GET /healthz HTTP/1.1\r\nContent-Length: +1\r\n\r\n"))
    assert [status for status, _, _ in got] == [200, 200, 200, 400]
    # a request answered with Connection: close gets one answer, whatever follows it
    got = _answers(_raw_exchange(served, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\nGARBAGE\r\n\r\n"))
    assert [status for status, _, _ in got] == [200]


def test_a_client_that_half_closes_after_its_request_gets_the_answer(served):
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
    with socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                  + str(len(chat)).encode() + b"\r\n\r\n" + chat)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    [(status, headers, _)] = _answers(answer)
    assert status == 200 and ledger_of(served.project).get(headers["x-reef-agent-record-id"]).payload["outcome"] == "ok"


def test_odd_framings_are_refused_not_relayed(served):
    for request, status in (
            (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
            (b"POST /v1/chat/completions HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
             b"Content-Length: 2\r\n\r\n{}", 400)):
        got = _answers(_raw_exchange(served, request))
        assert [s for s, _, _ in got] == [status], got


def test_head_of_a_relayed_route_keeps_the_upstreams_length(tmp_path):
    """The gateway answered HEAD /v1/models with Content-Length: 0 (the relayed headers drop the upstream's)."""
    with plain_upstream() as (port, _):
        with Gateway(init_project(tmp_path / "proj"), f"http://127.0.0.1:{port}") as gw:
            status, headers, body = http(gw.url + "/v1/models", method="HEAD")
            assert gw.stop() == 0
    assert status == 200 and body == b"" and headers["Content-Length"] == "69"


def test_an_endless_header_is_refused_before_it_ends(served):
    """llhttp hands a header over only once it ends: one 64 MB header was swallowed whole before its 431."""
    with socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nX-Big: ")
        try:
            for _ in range(40):
                s.sendall(b"v" * 8192)
        except OSError:
            pass
        assert s.recv(65536).startswith(b"HTTP/1.1 431 ")


def _in_process_gateway(tmp_path, upstream):
    """A project and a gateway in front of `upstream`, to run with `in_process` (its log in tmp_path/"log")."""
    from reef_cli.project import Project
    from reef_cli.serve.app import Gateway as InProcess, ServeConfig

    project = init_project(tmp_path / "proj")
    gw = InProcess(ServeConfig(project=Project(project), scenario="default", upstream=upstream.url, port=0), {},
                   log=open(tmp_path / "log", "w"), out=open(tmp_path / "out", "w"))
    return project, gw


def test_provenance_hooks_see_the_answer_before_the_receipt(tmp_path, upstream):
    """The seam for engine provenance (e.g. which weights answered): a request hook edits the body that goes
    upstream, a response hook reads the upstream's answer before the record and may refuse it."""
    project, gw = _in_process_gateway(tmp_path, upstream)

    def ask_meta(ex, body):
        body["return_meta_info"] = True
        return True

    def check_weights(ex):
        meta = (ex.upstream_meta or {}).get("meta_info") or {}
        if meta.get("weight_version") != "v7":
            ex.refuse(f"answered by weights {meta.get('weight_version')!r}, expected 'v7'")
        else:
            ex.provenance["check"] = "weight version matches"
            ex.extra["weight_version"] = "v7"  # top level, where reef_cli.weights.records reads it

    gw.recorder.request_hooks.append(ask_meta)
    gw.recorder.response_hooks.append(check_weights)
    with in_process(gw) as url:
        _ask_and_check(url, upstream, project)
    verify(project)


def _ask_and_check(url, upstream, project):
    upstream.reply(Reply(raw=json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [],
                                         "meta_info": {"weight_version": "v7"}}).encode()))
    status, headers, _ = http(url + "/v1/chat/completions", {"model": "m", "messages": []})
    assert status == 200 and upstream.calls[-1].json["return_meta_info"] is True
    good = ledger_of(project).get(headers["x-reef-agent-record-id"]).payload
    assert good["provenance"] == {"check": "weight version matches"} and good["weight_version"] == "v7"
    assert good["request_hooks"] == ["ask_meta"]
    status, headers, out = http(url + "/v1/chat/completions", {"model": "m", "messages": []})  # default reply: no meta
    assert status == 409 and "expected 'v7'" in json.loads(out)["error"]["message"]
    bad = ledger_of(project).get(headers["x-reef-agent-record-id"]).payload
    assert bad["outcome"] == "refused"


def test_inject_of_a_harness_that_does_not_compile_says_why(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from reef_cli.project import Project
    from reef_cli.serve.recording import Recorder

    project = init_project(tmp_path / "proj")
    skill = project / ".claude" / "skills" / "broken"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("no frontmatter here\n")
    assert run_reef("publish", "-m", "broken skill", cwd=project).returncode == 0
    with ThreadPoolExecutor(1) as pool:
        recorder = Recorder(Project(project), "default", executor=pool)
        state = recorder.scenario(None)
        release = state.release()
        text, problem = asyncio.run(recorder.instructions(state, release.content_id, release))
    assert text is None and "cannot compile the harness for opencode" in problem and "broken" in problem


# -- the committer (commit.py): batched group commit, and inline appends for a lone request -------------------------
def _committer_ledger(tmp_path):
    from reef_cli.serve.commit import Committer

    return Committer(), Ledger(tmp_path / "ledger.jsonl", "default")


def _submit(committer, ledger, i, bad=False):
    from reef_cli.ledger import NewRecord

    def item():
        if bad:
            raise ValueError("payload could not be built")
        return NewRecord("inference", {"n": i}, None, None, None)

    return committer.submit(ledger, item, lambda: ledger.append("inference", {"n": i}, release_id=None,
                                                                 content_id=None))


def test_committer_batches_concurrent_records_and_isolates_a_bad_one(tmp_path):
    committer, ledger = _committer_ledger(tmp_path)

    async def main():
        futs = [_submit(committer, ledger, i, bad=(i == 7)) for i in range(50)]
        return await asyncio.gather(*futs, return_exceptions=True)

    results = asyncio.run(main())
    committer.close()
    assert isinstance(results[7], ValueError) and "could not be built" in str(results[7])
    good = [r for i, r in enumerate(results) if i != 7]
    assert [r.payload["n"] for r in good] == [i for i in range(50) if i != 7]
    assert [r.payload["n"] for r in ledger.iter_records()] == [i for i in range(50) if i != 7]
    assert ledger.verify().ok
    # 49 records queued at once share a handful of writes and syncs, not one each
    assert committer.batches <= 5 and committer.queued == 0 and committer.inline == 0


def test_committer_inlines_only_when_alone_and_fast(tmp_path):
    from reef_cli.serve.commit import INLINE_BELOW_NS

    committer, ledger = _committer_ledger(tmp_path)
    assert committer.may_inline()
    rec = committer.run_inline(lambda: ledger.append("inference", {"n": 0}, release_id=None, content_id=None))
    assert committer.inline == 1 and committer.average_ns > 0 and committer._thread is None

    async def queued_blocks_inline():
        fut = _submit(committer, ledger, 1)
        busy = committer.may_inline()  # a record is queued: an inline append would jump the queue
        await fut
        return busy

    assert asyncio.run(queued_blocks_inline()) is False and committer.queued == 0
    committer.average_ns = INLINE_BELOW_NS - 1
    assert committer.may_inline()
    committer.average_ns = INLINE_BELOW_NS  # appends turned slow: everything goes to the thread
    assert not committer.may_inline()
    committer.close()
    assert [r.record_id for r in ledger.iter_records()][0] == rec.record_id and ledger.verify().ok


def test_headers_named_in_connection_stay_on_their_hop(tmp_path):
    """A header named in Connection is for one connection only (RFC 9110 7.6.1): the client's did reach the
    upstream, and the upstream's the client."""
    hop = lambda calls: [("Connection", "X-Hop"), ("X-Hop", "upstream-only"), ("X-Kept", "yes")]  # noqa: E731
    with plain_upstream(hop, watch="X-Private") as (port, seen):
        with Gateway(init_project(tmp_path / "proj"), f"http://127.0.0.1:{port}") as gw:
            body = b'{"model": "m", "messages": []}'
            [(status, headers, _)] = _answers(_raw_exchange(
                gw, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close, X-Private\r\n"
                    b"X-Private: secret\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body))
            assert gw.stop() == 0
    assert status == 200 and seen == [None]
    assert headers.get("x-kept") == "yes" and "x-hop" not in headers


def test_one_stalled_append_does_not_send_the_next_calls_to_the_thread():
    """A lone request's record is appended on the loop while appends average under 1 ms. One 50 ms stall among
    0.3 ms appends used to lift the average to ~6.5 ms, and the next dozen calls paid the hand-off to the thread
    (two wake-ups each); appends that stay slow still send records to the thread."""
    from reef_cli.serve.commit import Committer

    committer = Committer()
    for _ in range(20):
        committer._note(300_000)
    committer._note(50_000_000)
    assert committer.may_inline()
    for _ in range(4):
        committer._note(5_000_000)
    assert not committer.may_inline()


def test_the_answer_leaves_the_moment_its_record_is_durable(tmp_path, upstream, monkeypatch):
    """The answer that carries a receipt is sent from inside the append, right after the sync, not once the
    gateway's code after the record has run: here that code is held up for 1.5 s, and the JSON answer and the
    stream's end still arrive at once (before, each waited for it). Both ways a record is appended are taken:
    on the loop, and by the committer thread."""
    from reef_cli.serve import recording

    real_finish = recording.Recorder.finish

    async def held_up(self, ex, alone=False, then=None):
        record = await real_finish(self, ex, alone, then)
        time.sleep(1.5)  # blocks the gateway's loop: nothing is sent after this point for 1.5 s
        return record

    monkeypatch.setattr(recording.Recorder, "finish", held_up)
    project, gw = _in_process_gateway(tmp_path, upstream)
    with in_process(gw) as url:
        for inline in (True, False):
            for body in ({"model": "m", "messages": []}, {"model": "m", "messages": [], "stream": True}):
                gw.recorder.committer.average_ns = 0 if inline else 10**12  # on the loop, or by the thread
                started = time.monotonic()
                status, headers, out = http(url + "/v1/chat/completions", body)
                took = time.monotonic() - started
                assert status == 200 and took < 1.0, (inline, body, took)
                record = ledger_of(project).get(headers["x-reef-agent-record-id"])  # durable when the answer came
                assert record.payload["outcome"] == "ok"
                if body.get("stream"):
                    assert b'"reef":{"agent_record_id":"' + record.record_id.encode() in out
                    assert out.endswith(b"data: [DONE]\n\n")
                time.sleep(1.6)  # the held-up handler ends before the next call
        assert gw.recorder.committer.inline == 2 and gw.recorder.committer.batches == 2
    verify(project)


def test_nan_in_the_upstreams_usage_is_recorded_as_null(served, upstream):
    """Python's JSON parser takes NaN and Infinity from an upstream; the ledger's canonical JSON does not. The
    billed call used to get no record at all, and a JSON client a 400 blaming its own request; a stream got a 400
    written inside its open body."""
    answer = ('{"id":"c","object":"chat.completion","model":"m","choices":[],'
              '"usage":{"prompt_tokens":NaN,"completion_tokens":Infinity,"total_tokens":3}}')
    upstream.reply(Reply(raw=answer.encode()))
    status, headers, out = http(served.url + "/v1/chat/completions", {"model": "m", "messages": []})
    assert status == 200 and out == answer.encode()
    record = ledger_of(served.project).get(headers["x-reef-agent-record-id"]).payload
    assert record["outcome"] == "ok" and record["usage"] == {"prompt_tokens": None, "completion_tokens": None,
                                                              "total_tokens": 3}
    events = ('data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":'
              '{"content":"hi"},"finish_reason":"stop"}]}\n\n'
              'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],'
              '"usage":{"prompt_tokens":NaN,"completion_tokens":1,"total_tokens":1}}\n\ndata: [DONE]\n\n')
    upstream.reply(Reply(raw=events.encode(), content_type="text/event-stream"))
    status, headers, out = http(served.url + "/v1/chat/completions", {"model": "m", "messages": [], "stream": True})
    assert status == 200 and b"HTTP/1.1" not in out and out.endswith(b"data: [DONE]\n\n")
    record = ledger_of(served.project).get(headers["x-reef-agent-record-id"]).payload
    assert record["outcome"] == "ok" and record["usage"]["prompt_tokens"] is None
    assert b'"reef":{"agent_record_id":"' + headers["x-reef-agent-record-id"].encode() in out


def test_a_sync_that_fails_is_one_503_not_a_second_append(tmp_path, upstream, monkeypatch):
    """A record whose sync fails gets no receipt. Its line may already be in the file, so appending it again as a
    gateway_error clashed with its own id: the client got a 409 naming the ledger's path. It is now one 503; and
    as the writer acknowledges nothing more after a failed sync, the calls after it are refused before they reach
    the upstream (billed, unrecorded), /healthz says so, and the gateway's exit is not 0."""
    import reef_cli.ledger.writer as writer_mod

    project, gw = _in_process_gateway(tmp_path, upstream)
    with in_process(gw, code=1) as url:
        http(url + "/v1/chat/completions", {"model": "m", "messages": []})  # the ledger's files exist
        calls = len(upstream.calls)

        def failing(fd):
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(writer_mod, "_fdatasync", failing)
        messages = []
        for stream in (False, True):
            for inline in (True, False):
                gw.recorder.committer.average_ns = 0 if inline else 10**12
                status, headers, out = http(url + "/v1/chat/completions",
                                            {"model": "m", "messages": [], "stream": stream})
                assert status == 503 and "x-reef-agent-record-id" not in {k.lower() for k in headers}, out
                messages.append(json.loads(out)["error"]["message"])
        monkeypatch.undo()
        assert "cannot sync" in messages[0] and all("cannot record this call: its ledger failed a sync "
                                                    "(Input/output error)" in m for m in messages[1:]), messages
        assert len(upstream.calls) == calls + 1  # only the call whose sync failed reached the upstream
        status, _, out = http(url + "/healthz")
        assert status == 503 and "failed a sync" in json.loads(out)["error"]
    assert [r.payload["outcome"] for r in exchanges(project)][1:] == ["ok"]  # its line, never acknowledged
    assert "failed a sync (Input/output error)" in (tmp_path / "log").read_text()

def test_a_ledger_changed_under_the_gateway_refuses_calls_before_the_upstream(tmp_path, upstream):
    """The ledger replaced by a copy missing its last record while the gateway runs: the next append finds it (no
    receipt, 503). The calls after it used to go upstream again (billed, tokens streamed) only to fail at their
    record; now they are refused first, /healthz says why, and the gateway's exit is not 0."""
    project, gw = _in_process_gateway(tmp_path, upstream)
    ledger = project / ".reef" / "scenarios" / "default" / "ledger.jsonl"
    with in_process(gw, code=1) as url:
        for _ in range(2):
            assert http(url + "/v1/chat/completions", {"model": "m", "messages": []})[0] == 200
        lines = ledger.read_bytes().splitlines(keepends=True)
        copy = ledger.with_name("copy")
        copy.write_bytes(b"".join(lines[:-1]))
        copy.replace(ledger)
        calls = len(upstream.calls)
        messages = []
        for stream in (False, False, True):
            status, headers, out = http(url + "/v1/chat/completions", {"model": "m", "messages": [], "stream": stream})
            assert status == 503 and "x-reef-agent-record-id" not in {k.lower() for k in headers}, out
            messages.append(json.loads(out)["error"]["message"])
        assert len(upstream.calls) == calls + 1, messages  # only the call that found the damage went upstream
        assert all("cannot record this call: its ledger changed under it (" in m and
                   "run reef ledger verify, then restart the gateway" in m for m in messages[1:]), messages
        status, _, out = http(url + "/healthz")
        assert status == 503 and "changed under it" in json.loads(out)["error"]


def test_an_error_after_the_early_send_does_not_answer_twice(tmp_path, upstream, monkeypatch):
    """The answer is sent from inside the append; if anything fails after it, a second answer (409, 500) on the
    same connection would be read as the answer to the client's next request. The connection ends instead."""
    from reef_cli.serve import http_server

    real = http_server.Response.send_now

    def send_then_fail(self, request):
        real(self, request)
        raise RuntimeError("after the send")

    monkeypatch.setattr(http_server.Response, "send_now", send_then_fail)
    project, gw = _in_process_gateway(tmp_path, upstream)
    with in_process(gw) as url:
        body = b'{"model": "m", "messages": []}'
        one = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
        for inline in (True, False):
            gw.recorder.committer.average_ns = 0 if inline else 10**12
            data = _raw_exchange(url, one + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # pipelined
            assert data.startswith(b"HTTP/1.1 200 OK") and data.count(b"HTTP/1.1 ") == 1, data
        monkeypatch.undo()
    assert len(exchanges(project)) == 2


def test_an_inline_append_is_timed_without_what_then_sends():
    """The committer's average decides whether lone calls append on the loop; the answer sent from `then` (a large
    one to a slow client) is not the append's time."""
    from reef_cli.serve.commit import INLINE_BELOW_NS, Committer

    committer = Committer()
    committer.run_inline(lambda then: then(), lambda: time.sleep(0.05))
    assert committer.average_ns < INLINE_BELOW_NS


def test_a_batch_whose_sync_fails_fails_whole_and_is_not_appended_again(tmp_path, monkeypatch):
    """Records batched into one write share its sync. When that sync failed, each was appended again on its own
    and synced again: a second fdatasync can succeed after an I/O error without the data on disk, and those
    clients got receipts. Now every record of the batch gets the sync's error."""
    import reef_cli.ledger.writer as writer_mod
    from reef_cli.ledger import NewRecord

    committer, ledger = _committer_ledger(tmp_path)
    ledger.append("inference", {"n": 0}, release_id=None, content_id=None)

    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(writer_mod, "_fdatasync", failing)

    async def main():
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(3)]
        entries = [(loop, fut, ledger, lambda i=i: NewRecord("inference", {"n": i}, None, None, None),
                    lambda i=i: ledger.append("inference", {"n": i}, release_id=None, content_id=None))
                   for i, fut in enumerate(futs, 1)]
        await loop.run_in_executor(None, committer._commit, entries)
        return await asyncio.gather(*futs, return_exceptions=True)

    results = asyncio.run(main())
    assert [type(r).__name__ for r in results] == ["StoreError"] * 3
    assert all("cannot sync" in str(r) for r in results), results


def test_an_unstorable_usage_nested_past_the_stack_still_gets_its_record(served, upstream):
    """NaN at the bottom of a usage nested 600 deep: the walk that makes a payload storable ran out of stack, the
    call got no record at all and the client a 500. The call is now recorded without the unstorable fields."""
    answer = ('{"id":"c","object":"chat.completion","model":"m","choices":[],"usage":'
              + '{"a":' * 600 + 'NaN' + '}' * 600 + '}')
    upstream.reply(Reply(raw=answer.encode()))
    status, headers, out = http(served.url + "/v1/chat/completions", {"model": "m", "messages": []})
    assert status == 200 and out == answer.encode()
    record = ledger_of(served.project).get(headers["x-reef-agent-record-id"]).payload
    assert record["outcome"] == "ok" and record["usage"] is None and record["status"] == 200
    assert record["unstorable"].startswith("the upstream's usage or a hook's fields could not be stored")


def test_a_stream_the_upstream_broke_reaches_an_http_10_client_as_a_reset(served, upstream):
    """On HTTP/1.0 a stream's body ends with the connection, so the plain close the gateway used for a broken
    stream read as a complete answer; it is now a reset (a chunked client sees the missing end, as before)."""
    upstream.reply(Reply(text="one two three four", die_after=2))
    body = b'{"model": "m", "messages": [], "stream": true}'
    with socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
        data = b""
        with pytest.raises(ConnectionResetError):
            while chunk := s.recv(65536):
                data += chunk
    assert data == b"" or data.startswith(b"HTTP/1.1 200 OK")


def test_a_stream_with_an_odd_model_is_recorded_and_the_last_resort_cannot_nest(served, upstream, tmp_path):
    """A stream chunk's `model` nested 600 deep with a NaN inside: the stream kept it unchecked, and the last-resort
    record kept it too, so it hit the stack again and the billed call got no record. Models are strings or
    nothing now, and the last resort forces each field to its type."""
    from reef_cli.serve.recording import _bare

    deep = "[" * 600 + "NaN" + "]" * 600
    events = ('data: {"id":"c","object":"chat.completion.chunk","model":' + deep + ',"choices":[{"index":0,'
              '"delta":{"content":"hi"}}]}\n\ndata: {"id":"c","object":"chat.completion.chunk","model":"m",'
              '"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}\n\ndata: [DONE]\n\n')
    upstream.reply(Reply(raw=events.encode(), content_type="text/event-stream"))
    status, headers, out = http(served.url + "/v1/chat/completions", {"model": "m", "messages": [], "stream": True})
    assert status == 200 and out.endswith(b"data: [DONE]\n\n")
    record = ledger_of(served.project).get(headers["x-reef-agent-record-id"]).payload
    assert record["outcome"] == "ok" and record["model"] == "m"
    nested: object = float("nan")
    for _ in range(3000):
        nested = [nested]
    bare = _bare({key: nested for key in ("model", "error", "session", "tags", "tokens", "request", "response",
                                         "status", "latency_ms", "usage", "provenance")})
    led = Ledger(tmp_path / "ledger.jsonl", "default")
    assert led.append("inference", bare, release_id=None, content_id=None).payload["usage"] is None


def test_the_log_line_of_a_stream_whose_record_failed_names_no_record(tmp_path, upstream, monkeypatch):
    """A stream whose events had gone out when its record's sync failed is cut; its log line gave the 200 and the
    record id from its head, for a record that does not exist."""
    import reef_cli.ledger.writer as writer_mod

    project, gw = _in_process_gateway(tmp_path, upstream)
    with in_process(gw, code=1) as url:
        http(url + "/v1/chat/completions", {"model": "m", "messages": []})  # the ledger's files exist
        upstream.reply(Reply(text="one two three four", event_delay=0.05))
        monkeypatch.setattr(writer_mod, "_fdatasync", lambda fd: (_ for _ in ()).throw(OSError(5, "I/O error")))
        body = b'{"model": "m", "messages": [], "stream": true}'
        out = _raw_exchange(url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        monkeypatch.undo()
        assert out.startswith(b"HTTP/1.1 200 OK") and b"x-reef-agent-record-id" in out.lower()
        assert not out.endswith(b"0\r\n\r\n")
    line = [ln for ln in (tmp_path / "log").read_text().splitlines() if "POST /v1/chat/completions 200" in ln][-1]
    assert line.endswith("(no record kept)") and "rec_" not in line, line



def test_a_body_nested_past_the_stack_is_relayed_and_recorded(served, upstream):
    """A request body nested 50,000 deep made the gateway's own parse fail with RecursionError: a 500 blaming the
    gateway. The body goes upstream as it came (the upstream judges it: this fake one drops the connection), and
    the call is recorded with what the upstream did."""
    body = b'{"model": "m", "messages": [], "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    status, headers, out = http(served.url + "/v1/chat/completions", body)
    assert status != 500 and b"RecursionError" not in out, out
    record = ledger_of(served.project).get(headers["x-reef-agent-record-id"]).payload
    assert record["request"]["length"] == len(body) and record["status"] == status


def test_an_upstream_slow_to_end_a_finished_stream_holds_back_no_receipt(served, upstream):
    """The upstream sent its final event and kept the stream open: the gateway waited for the stream's end until the
    read timeout, then recorded the whole answer as a timeout and cut the client's stream. Now the stream's end is
    due within AFTER_FINAL_S of the final event; past it the answer is recorded ok and its receipt sent."""
    upstream.reply(Reply(text="all here", linger=4))
    started = time.monotonic()
    chunks = list(oai(served).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                       stream=True, stream_options={"include_usage": True}))
    took = time.monotonic() - started
    receipt = chunks[-1].model_extra["reef"]
    assert took < 2.5, took  # the upstream ends the stream only 4 s after its [DONE]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "all here"
    rec = ledger_of(served.project).get(receipt["agent_record_id"]).payload
    assert (rec["outcome"], rec["status"], rec["usage"]["completion_tokens"]) == ("ok", 200, 3)


def test_a_stream_whose_framing_breaks_after_its_final_event_is_whole(served, upstream):
    """The upstream's connection broke after the stream's final event (it promised more bytes than it sent): the
    answer is complete, so it is recorded ok and the client gets it with its receipt, not a cut stream."""
    events = (b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
              b'"delta":{"role":"assistant","content":"whole"},"finish_reason":"stop"}]}\n\n'
              b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
              b'"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}\n\ndata: [DONE]\n\n')
    upstream.reply(Reply(raw=events, content_type="text/event-stream", declared_length=len(events) + 100))
    chunks = list(oai(served).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                       stream=True))
    receipt = chunks[-1].model_extra["reef"]
    assert chunks[0].choices[0].delta.content == "whole"
    rec = ledger_of(served.project).get(receipt["agent_record_id"]).payload
    assert (rec["outcome"], rec["status"], rec["usage"]["total_tokens"]) == ("ok", 200, 5)


@pytest.mark.parametrize("capture", ["true", "false"])
def test_a_stream_that_breaks_before_any_of_it_left_is_a_502_answer(tmp_path, upstream, monkeypatch, capture):
    """The upstream answered 200 for a stream and died before its first event: the client got that 200 head and a
    cut connection (an SDK reports a broken stream, not the upstream's failure). While the head is still held
    nothing has left, so a 502 with the reason takes its place, the status the record holds."""
    from reef_cli.serve import answers

    monkeypatch.setattr(answers, "HOLD_S", 5.0)  # the head held for sure until the upstream's end is in
    project, gw = _in_process_gateway(tmp_path, upstream)
    with in_process(gw) as url:
        # a 200 stream that promised 100 bytes and closed before any (with the connection as its end, an empty
        # body is a clean one: relayed as such)
        upstream.reply(Reply(raw=b"", content_type="text/event-stream", declared_length=100))
        status, headers, body = http(url + "/v1/chat/completions", {"model": "m", "messages": [], "stream": True},
                                     headers={"x-reef-capture": capture})
        assert status == 502, (status, body)
        assert "the upstream's stream broke off" in json.loads(body)["error"]["message"]
        if capture == "true":
            rec = ledger_of(project).get(headers["x-reef-agent-record-id"]).payload
            assert (rec["outcome"], rec["status"]) == ("upstream_died", 502)
        else:
            assert "x-reef-agent-record-id" not in {k.lower() for k in headers}
    verify(project)


def test_low_latency_holds_the_cpus_awake_while_serving_and_no_longer(tmp_path, upstream):
    """--low-latency asks the kernel that no CPU sleep deeper than polling (bench/RESULTS.md, session 11: on an idle
    VM the wake-ups were most of reef's added latency); the request is the open device file, so it ends with the
    gateway. Where the machine cannot grant it the gateway still serves and says why."""
    from reef_cli.serve import cpu_latency

    project = init_project(tmp_path / "proj")
    grantable = os.access(cpu_latency.DEVICE, os.W_OK)
    with Gateway(project, upstream.url, "--low-latency") as gw:
        status = json.loads(http(gw.url + "/reef/status")[2])
        assert http(gw.url + "/v1/chat/completions", {"model": "m", "messages": []})[0] == 200
        if grantable:
            assert status["low_latency"] == {"held": True, "us": 0}
            assert cpu_latency.current() == 0
        else:
            assert status["low_latency"]["held"] is False and cpu_latency.DEVICE in status["low_latency"]["why"]
        assert gw.stop() == 0
    if grantable:
        assert "idle CPUs kept polling (--low-latency)" in gw.banner
        assert cpu_latency.current() != 0  # released with the gateway (no other holder in this suite)
    else:
        assert "--low-latency not in effect" in gw.log()


def test_low_latency_asks_nothing_of_a_file_that_is_not_the_device(tmp_path):
    """A regular file where the device should be (a container's bind mount, a test) gets nothing written into it."""
    from reef_cli.serve import cpu_latency

    fake = tmp_path / "cpu_dma_latency"
    fake.write_bytes(b"keep")
    held = cpu_latency.hold(str(fake))
    assert not held.held and "is not a character device" in held.why and fake.read_bytes() == b"keep"
    missing = cpu_latency.hold(str(tmp_path / "absent"))
    assert not missing.held and "does not exist" in missing.why
    assert cpu_latency.current(str(fake)) is None
