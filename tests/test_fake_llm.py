"""The fake LLM speaks both wire protocols, scripts replies in order, and records what clients sent."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from fakes import FakeLLM, error, raw, text, tool, truncated


def post(url: str, body: dict, timeout: float = 5) -> tuple[int, bytes, str]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(), resp.headers.get("content-type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("content-type", "")


def sse(data: bytes) -> list[tuple[str | None, object]]:
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        event, payload = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                payload = line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
        out.append((event, payload))
    return out


def test_openai_non_stream_scripted_json_then_default(fake_llm):
    fake_llm.reply(text('{"patterns": [1]}'))
    status, body, ctype = post(fake_llm.base_url + "/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    data = json.loads(body)
    assert status == 200 and ctype == "application/json"
    assert data["object"] == "chat.completion" and data["model"] == "m"
    assert json.loads(data["choices"][0]["message"]["content"]) == {"patterns": [1]}
    assert data["choices"][0]["finish_reason"] == "stop" and data["usage"]["total_tokens"] == 15
    _, body, _ = post(fake_llm.url + "/chat/completions", {"messages": []})
    assert json.loads(body)["choices"][0]["message"]["content"] == "DONE"
    reqs = fake_llm.wait_for(2)
    assert [r.route for r in reqs] == ["openai.chat", "openai.chat"]
    assert reqs[0].json["messages"][0]["content"] == "hi" and reqs[0].reply.text == '{"patterns": [1]}'


def test_openai_stream_with_tool_call_deltas_usage_and_done(fake_llm):
    fake_llm.reply(tool("read", {"path": "a.md"}, id="call_1"))
    status, body, ctype = post(fake_llm.base_url + "/chat/completions", {"stream": True, "messages": []})
    assert status == 200 and ctype == "text/event-stream"
    chunks = [p for _, p in sse(body)]
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["prompt_tokens"] == 12
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-2] if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["id"] == "call_1" and calls[0]["function"]["name"] == "read"
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"path": "a.md"}
    assert chunks[-3]["choices"][0]["finish_reason"] == "tool_calls"


def test_anthropic_stream_full_event_sequence_with_tool_use(fake_llm):
    fake_llm.reply(tool("Skill", {"skill": "demo"}, text="let me look"))
    status, body, _ = post(fake_llm.url + "/v1/messages?beta=true", {"model": "fake", "stream": True, "messages": []})
    events = sse(body)
    assert status == 200
    assert [e for e, _ in events] == [
        "message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    assert events[0][1]["message"]["model"] == "fake"
    assert events[5][1]["content_block"]["name"] == "Skill"
    partial = "".join(p["delta"]["partial_json"] for e, p in events if e == "content_block_delta" and p["index"] == 1)
    assert json.loads(partial) == {"skill": "demo"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert fake_llm.calls[0].route == "anthropic.messages" and fake_llm.calls[0].path.endswith("?beta=true")


def test_anthropic_json_count_tokens_models_and_head(fake_llm):
    _, body, _ = post(fake_llm.base_url + "/messages", {"model": "x", "messages": []})
    msg = json.loads(body)
    assert msg["type"] == "message" and msg["content"] == [{"type": "text", "text": "DONE"}]
    assert msg["stop_reason"] == "end_turn"
    _, body, _ = post(fake_llm.base_url + "/messages/count_tokens", {"messages": []})
    assert json.loads(body) == {"input_tokens": 42}
    with urllib.request.urlopen(fake_llm.base_url + "/models", timeout=5) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "fake-model"
    conn = http.client.HTTPConnection("127.0.0.1", fake_llm.port, timeout=5)
    conn.request("HEAD", "/")
    assert conn.getresponse().status == 200
    assert [r.route for r in fake_llm.requests] == ["anthropic.messages", "anthropic.count_tokens", "models", "head"]
    assert len(fake_llm.calls) == 1  # probes are recorded but are not model calls


def test_malformed_truncated_and_error_replies(fake_llm):
    fake_llm.reply(raw(b'{"choices": [{"mess'), truncated(b'{"id": "x", "cho', declared=400), error(429, "slow down"))
    status, body, _ = post(fake_llm.base_url + "/chat/completions", {})
    assert status == 200 and body == b'{"choices": [{"mess'
    with pytest.raises(http.client.IncompleteRead):
        post(fake_llm.base_url + "/chat/completions", {})
    status, body, _ = post(fake_llm.base_url + "/chat/completions", {})
    assert status == 429 and json.loads(body)["error"]["message"] == "slow down"
    fake_llm.reply(error(529, "busy"))
    status, body, _ = post(fake_llm.base_url + "/messages", {})
    assert status == 529 and json.loads(body)["error"] == {"type": "overloaded_error", "message": "busy"}


def test_match_skips_calls_that_do_not_fit_and_saw_searches_whole_body(fake_llm):
    fake_llm.reply(text("main turn", match="MARKER-9"))
    _, body, _ = post(fake_llm.base_url + "/chat/completions", {"messages": [{"role": "system", "content": "title"}]})
    assert json.loads(body)["choices"][0]["message"]["content"] == "DONE"
    _, body, _ = post(fake_llm.base_url + "/chat/completions", {"messages": [{"role": "user", "content": "MARKER-9"}]})
    assert json.loads(body)["choices"][0]["message"]["content"] == "main turn"
    assert fake_llm.pending == 0 and fake_llm.saw("MARKER-9") and not fake_llm.saw("MARKER-0")


def test_unknown_route_is_404_and_wait_for_times_out_naming_what_it_saw(fake_llm):
    status, _, _ = post(fake_llm.url + "/nope", {})
    assert status == 404
    with pytest.raises(TimeoutError, match="saw: POST /nope"):
        fake_llm.wait_for(1, timeout=0.2)


def test_serves_another_process_and_binds_loopback_only():
    with FakeLLM() as llm:
        assert llm._server.server_address[0] == "127.0.0.1"
        code = ("import json,urllib.request,sys;"
                "r=urllib.request.Request(sys.argv[1],b'{\"stream\":false}',{'content-type':'application/json'});"
                "print(json.loads(urllib.request.urlopen(r,timeout=5).read())['content'][0]['text'])")
        out = subprocess.run([sys.executable, "-c", code, llm.base_url + "/messages"], capture_output=True, text=True,
                             timeout=30)
        assert out.stdout.strip() == "DONE", out.stderr
        assert llm.wait_for(1)[0].headers["content-type"] == "application/json"
