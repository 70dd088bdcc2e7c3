"""A secret in a mapping's key, not its value: a gateway tag is named by the client (`x-reef-tag-NAME: VALUE`), and
a NAME that is a token was stored in the record's tags in clear, since redact_obj kept keys as they came."""

from __future__ import annotations

import socket

from conftest import run_reef
from fakes import FakeLLM
from gateway import Gateway, exchanges, init_project
from reef_cli.redact import redact_obj

GH = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
PROJ = "sk-proj-Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0nOp3rSt6vWx9z"


def test_a_key_holding_a_secret_is_redacted_and_no_value_is_dropped() -> None:
    obj = {GH: "a", GH.lower(): "b", "team": "x", "nested": [{PROJ: 1}], "password": "hunter22"}
    out, count = redact_obj(obj)
    assert out == {"[REDACTED:github_token]": "a", "[REDACTED:github_token]#2": "b", "team": "x",
                   "nested": [{"[REDACTED:openai_key]": 1}], "password": "[REDACTED:password]"}
    assert count == 4
    assert redact_obj(out) == (out, 0)  # a redacted key names no secret: a second pass changes nothing
    plain = {"role": "user", "content": "hi", "max_tokens": 5}
    assert redact_obj(plain) == (plain, 0)


def _tags_recorded(tmp_path, tag_lines: bytes):
    """One call through a real gateway with these `x-reef-tag-...` header lines: (its record's tags, the ledger's
    text), once `reef ledger verify` passed."""
    project = init_project(tmp_path / "proj")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
    with FakeLLM() as llm, Gateway(project, llm.url) as gw:
        port = int(gw.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + tag_lines +
                      b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                      + body)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 "), answer
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    ledger = (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()
    return exchanges(project)[-1].payload["tags"], ledger


def test_a_gateway_tag_named_by_a_token_is_stored_redacted(tmp_path) -> None:
    tags, ledger = _tags_recorded(tmp_path, b"x-reef-tag-" + GH.encode() + b": v1\r\nx-reef-tag-" + PROJ.encode()
                                  + b": v2\r\nx-reef-tag-team: t\r\n")
    assert tags == {"[REDACTED:github_token]": "v1", "[REDACTED:openai_key]": "v2", "team": "t"}, tags
    assert GH[4:20].lower() not in ledger.lower() and PROJ[8:24].lower() not in ledger.lower()


def test_a_gateway_tag_named_by_a_token_with_capitals_is_stored_redacted(tmp_path) -> None:
    """`AKIA...` lowercased is no longer an AWS key's shape: the name must be redacted as the client sent it."""
    tags, ledger = _tags_recorded(tmp_path, b"x-reef-tag-AKIAIOSFODNN7EXAMPLQ: v\r\nx-reef-tag-Team: t\r\n")
    assert tags == {"[REDACTED:aws_access_key]": "v", "team": "t"}, tags
    assert "AKIAIOSFODNN7EXAMPLQ" not in ledger
