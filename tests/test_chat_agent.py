"""The example chat agent (reef_cli/chat_agent.py) against a fake OpenAI-compatible model on 127.0.0.1: the compiled
harness as its system prompt, its calls recorded by a real `reef serve`, its sessions read by `reef ingest`, and the
canary gate publishing a rule the (fake) model follows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_reef
from fakes.llm_server import FakeLLM, text
from gateway import Gateway

from reef_cli.ledger import Ledger

SPANISH_RULE = "Answer in Spanish."


def agent(prompt: str, *, url: str, cwd: Path, harness: Path | None = None, session: Path | None = None,
          env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "reef_cli.chat_agent", "-p", prompt] + (["--session", str(session)] if session else [])
    full = {**os.environ, "REEF_CHAT_URL": url, **(env or {})}
    if harness is not None:
        full["REEF_HARNESS_DIR"] = str(harness)
    return subprocess.run(argv, cwd=cwd, env=full, capture_output=True, text=True, timeout=60)


def minimal_project(root: Path, *bullets: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    r = run_reef("init", "--template", "minimal", cwd=root)
    assert r.returncode == 0, r.stderr
    if bullets:
        path = root / "AGENTS.md"
        body = path.read_text().replace("<!-- reef:begin learned -->\n",
                                        "<!-- reef:begin learned -->\n" + "".join(f"- {b}\n" for b in bullets))
        path.write_text(body)
    return root


def obeying(req) -> object:
    """A fake model that follows one rule: it answers in Spanish when its system prompt says so."""
    messages = req.json["messages"]
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    return text("La capital es Lima." if SPANISH_RULE in system else "The capital is Lima.")


def test_sends_compiled_harness_as_system_prompt_and_writes_the_answer(tmp_path, fake_llm):
    root = minimal_project(tmp_path / "proj", SPANISH_RULE)
    (root / "reef").mkdir(exist_ok=True)
    (root / "reef" / "notes.md").write_text("- Keep it short.\n")
    fake_llm.reply(text("  La capital es Lima.  "))
    work = tmp_path / "work"
    work.mkdir()
    r = agent("What is the capital of Peru?", url=fake_llm.base_url, cwd=work, harness=root,
              env={"REEF_TASK_ID": "t1", "REEF_CHAT_MAX_TOKENS": "48"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "La capital es Lima.\n"
    assert (work / "answer.txt").read_text() == "La capital es Lima.\n"
    req = fake_llm.wait_for(1)[-1]
    system, user = req.json["messages"]
    assert system["role"] == "system" and user == {"role": "user", "content": "What is the capital of Peru?"}
    # the release's instructions as reef serve --inject system compiles them (notes appended), without reef's markers
    assert "# Agent instructions" in system["content"] and f"- {SPANISH_RULE}" in system["content"]
    assert "- Keep it short." in system["content"] and "<!--" not in system["content"]
    assert req.json["max_tokens"] == 48 and req.json["temperature"] == 0 and isinstance(req.json["seed"], int)
    assert req.headers.get("x-reef-tag-task") == "t1"


def test_held_out_tasks_never_reach_the_model(tmp_path, fake_llm):
    root = minimal_project(tmp_path / "proj")
    (root / "canary").mkdir()
    (root / "canary" / "t.yaml").write_text("version: 1\ntasks:\n  - id: secret-canary-prompt\n    prompt: x\n"
                                            "    check: 'true'\n")
    r = agent("hi", url=fake_llm.base_url, cwd=tmp_path, harness=root)
    assert r.returncode == 0, r.stderr
    assert not fake_llm.saw("secret-canary-prompt")


def test_unreachable_endpoint_is_one_line_exit_1(tmp_path):
    r = agent("hi", url="http://127.0.0.1:9/v1", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("chat-agent: http://127.0.0.1:9/v1: cannot reach the model endpoint")
    assert "reef model serve-local" in r.stderr and r.stderr.count("\n") == 1


def test_http_error_names_status_and_body(tmp_path, fake_llm):
    from fakes.llm_server import error

    fake_llm.reply(error(503, "model is loading"))
    r = agent("hi", url=fake_llm.base_url, cwd=tmp_path)
    assert r.returncode == 1 and "HTTP 503" in r.stderr and "model is loading" in r.stderr


def _raw_server(answer: bytes):
    """A socket on 127.0.0.1 that answers one request with `answer` as is (not HTTP, cut short, HTML, oversized)."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            # the whole request, body included: closing with some of it unread resets the connection, and the
            # reset can throw away the answer before the agent has read it (a flaky "Connection reset" under load)
            data = b""
            while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length and (chunk := conn.recv(65536)):
                body += chunk
            try:
                conn.sendall(answer)
            except OSError:
                pass  # the agent stopped reading: what an oversized answer should make it do
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/v1"


def test_an_answer_that_is_not_http_or_cut_short_is_one_line_exit_1(tmp_path):
    from reef_cli.chat_agent import MAX_BODY

    for answer, says in (
        (b"\x00\xffthis is not http at all\r\n\r\n", "not a valid HTTP answer (BadStatusLine)"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"choi",  # cut short: it said "not JSON"
         "the answer was cut off after 6 of 1000 bytes (the connection closed early)"),
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>hello</html>", "the answer is not JSON"),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b" " * (MAX_BODY + 2), "the answer is larger than 16 MiB"),
    ):
        url = _raw_server(answer)
        r = agent("hi", url=url, cwd=tmp_path)
        assert r.returncode == 1, r.stderr
        assert r.stderr == f"chat-agent: {url}: {says}" + ("; not a chat completion" if "larger" in says else "") + "\n"


def test_a_session_path_that_cannot_be_a_session_is_one_line_before_the_call(tmp_path):
    """Before: a directory was taken for a new session and failed with a traceback after the model had answered
    (the answer lost), a non-UTF-8 file or a JSON line that is not an object was a traceback."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe not text\n")
    for path, says in ((tmp_path, "is a directory, not a session file"),
                       (bad, "cannot be read as a session file (not UTF-8 text)")):
        r = agent("hi", url="http://127.0.0.1:9/v1", cwd=tmp_path, session=path)
        assert r.returncode == 1 and r.stderr == f"chat-agent: --session {path}: {says}\n"
    odd = tmp_path / "odd.jsonl"
    odd.write_text('[1, 2]\n"text"\n{"type": "session", "id": "s1"}\n')
    from reef_cli.chat_agent import read_session

    assert read_session(odd) == ("s1", [], None)


def test_session_is_read_by_reef_ingest_and_a_correction_becomes_a_report(tmp_path):
    root = minimal_project(tmp_path / "proj")
    session = tmp_path / "sessions" / "s1.jsonl"
    with FakeLLM(default=obeying) as llm:
        for prompt in ("What is the capital of Peru?", "You forgot to answer in Spanish."):
            r = agent(prompt, url=llm.base_url, cwd=tmp_path, harness=root, session=session)
            assert r.returncode == 0, r.stderr
        second = llm.wait_for(2)[-1].json["messages"]
    # the second call carries the conversation so far
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == "The capital is Lima."
    r = run_reef("ingest", str(session.parent), "--json", cwd=root)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["turns"] == 2 and got["corrections"] == 1
    reports = [x for x in Ledger(root / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default").iter_records()
               if x.kind == "report"]
    assert [x.payload["score"] for x in reports] == [0.0]
    assert "answer in Spanish" in json.dumps(reports[0].payload)
    again = run_reef("ingest", str(session.parent), "--json", cwd=root)
    assert json.loads(again.stdout)["corrections"] == 0  # each turn once


def test_calls_through_reef_serve_are_recorded(tmp_path):
    root = minimal_project(tmp_path / "proj", SPANISH_RULE)
    with FakeLLM(default=obeying) as llm, Gateway(root, llm.base_url) as gw:
        r = agent("What is the capital of Peru?", url=gw.url + "/v1", cwd=tmp_path, harness=root,
                  env={"REEF_SERVE_SESSION": "sess-42"})
        assert r.returncode == 0, r.stderr
        assert r.stdout == "La capital es Lima.\n"
        gw.stop()
    records = [x for x in Ledger(root / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default").iter_records()
               if x.kind == "inference"]
    assert len(records) == 1 and records[0].payload.get("session") == "sess-42"


def test_gate_publishes_a_rule_the_model_follows(tmp_path):
    """`reef eval` runs the chat agent on every canary task for both sides; the Spanish rule wins every task."""
    root = minimal_project(tmp_path / "proj")
    tasks = "".join(f"  - id: q{i}\n    prompt: 'Question {i}?'\n    check: grep -q 'La capital' answer.txt\n"
                    for i in range(1, 5))
    (root / "canary").mkdir()
    (root / "canary" / "es.yaml").write_text("version: 1\ntasks:\n" + tasks)
    cfg = root / "harness.yaml"
    cfg.write_text(cfg.read_text() + "gate:\n  tasks: [canary/*.yaml]\n  repeats: 1\n"
                   'agent: ["{python}", "-m", "reef_cli.chat_agent", "-p", "{prompt}"]\n')
    assert run_reef("publish", "-m", "suite", cwd=root).returncode == 0
    path = root / "AGENTS.md"
    path.write_text(path.read_text().replace("<!-- reef:begin learned -->\n",
                                             f"<!-- reef:begin learned -->\n- {SPANISH_RULE}\n"))
    with FakeLLM(default=obeying) as llm:
        r = run_reef("eval", "--working-tree", "--json", cwd=root, env={"REEF_CHAT_URL": llm.base_url}, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    verdict = json.loads(r.stdout)
    assert verdict["decision"] == "publish" and verdict["interval"]["lo"] > 0
