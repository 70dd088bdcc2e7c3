"""A fake LLM on 127.0.0.1 that speaks the Anthropic Messages and OpenAI Chat Completions protocols.

Tests run real agent CLIs and real SDK clients against it, so it speaks the wire formats, streaming included, and
records every request for assertions. Stdlib only; binds 127.0.0.1 only; port 0 picks a free port.

Routes (matched on the path *suffix*, so both `http://127.0.0.1:P` and `http://127.0.0.1:P/v1` work as a base URL,
and a query string such as Claude Code's `?beta=true` is ignored):

    POST .../messages                Anthropic; SSE when the body has "stream": true, else a JSON message
    POST .../messages/count_tokens   {"input_tokens": 42}
    POST .../chat/completions        OpenAI; SSE chunks (role, content, tool_calls deltas, finish, usage, [DONE])
                                     when "stream": true, else a JSON chat.completion
    POST .../responses               OpenAI Responses; SSE (response.created ... response.completed) when
                                     "stream": true, else a JSON response object
    GET  .../models                  one model, in a shape both SDKs accept
    HEAD *                           200 (Claude Code probes `HEAD /` first)

Scripted replies. Each model call (messages or chat/completions) takes the first queued reply that matches it, or
the default reply when none does; the same `Reply` renders in whichever protocol the call used:

    with FakeLLM() as llm:                        # or the `fake_llm` pytest fixture (tests/fakes/llm_plugin.py)
        llm.reply(text('{"patterns": []}'))       # scripted JSON text, e.g. for an LLM reflector
        llm.reply(raw(b'{"choices": [{"mess'))    # malformed: these exact bytes, status 200
        llm.reply(truncated(b'{"id": "x", "cho', declared=400))  # Content-Length 400, connection closed early
        llm.reply(error(429, "slow down"))        # a provider-shaped error body with that status
        llm.reply(tool("read", {"path": "a.md"}), text("done"))   # a tool call, then text on the next call
        llm.reply(text("for the main turn"), match="skills")     # only for a call whose body contains "skills"
        client_base_url = llm.base_url           # "http://127.0.0.1:PORT/v1"; llm.url has no /v1
        ...
        req = llm.wait_for(1)[-1]                 # blocks until one model call has arrived
        assert req.route == "openai.chat" and req.json["messages"][0]["role"] == "system"
        assert llm.saw("MARKER-1234")             # anywhere in any model call's body

`llm.requests` holds every request (model calls, probes, 404s) as `Request(method, path, headers, body, json,
route, reply)`; `llm.calls` only the model calls. From a shell, `python tests/fakes/llm_server.py [--port N]
[--log FILE]` prints its URL and appends each request as a JSON line to FILE.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

MODEL_ROUTES = ("anthropic.messages", "openai.chat", "openai.responses")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict
    id: str = ""


@dataclass(frozen=True)
class Reply:
    """One model answer. `raw` bypasses the protocol entirely: those bytes (with `status`) and nothing else."""

    text: str = "DONE"
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 200
    raw: bytes | None = None
    content_type: str = "application/json"
    declared_length: int | None = None  # with raw: a Content-Length larger than the bytes sent, then close
    delay: float = 0.0  # seconds to wait before answering (timeout tests)
    event_delay: float = 0.0  # streams: seconds between events (disconnect and drain tests)
    die_after: int | None = None  # streams: send this many events, then drop the connection (no final event)
    linger: float = 0.0  # streams: seconds the connection stays open after the final event before it ends
    match: str | Callable[["Request"], bool] | None = None  # queued replies only: which calls may take it
    input_tokens: int = 12
    output_tokens: int = 3

    def accepts(self, req: "Request") -> bool:
        if self.match is None:
            return True
        if callable(self.match):
            return bool(self.match(req))
        return self.match in req.text


def text(content: str, **kw) -> Reply:
    return Reply(text=content, **kw)


def tool(name: str, arguments: dict | None = None, *, text: str = "", id: str = "", **kw) -> Reply:
    """A reply that calls one tool (Anthropic tool_use block / OpenAI tool_calls), optionally after some text."""
    return Reply(text=text, tool_calls=(ToolCall(name, dict(arguments or {}), id),), **kw)


def raw(data: bytes | str, *, status: int = 200, content_type: str = "application/json", **kw) -> Reply:
    return Reply(raw=data.encode() if isinstance(data, str) else data, status=status, content_type=content_type, **kw)


def truncated(data: bytes | str, *, declared: int | None = None, **kw) -> Reply:
    """Send `data`, but promise more in Content-Length and close: the client sees a cut-off body."""
    body = data.encode() if isinstance(data, str) else data
    return raw(body, declared_length=declared if declared is not None else len(body) + 64, **kw)


def error(status: int, message: str = "fake error", **kw) -> Reply:
    """An HTTP error with the provider's error body shape (rendered per protocol)."""
    return Reply(text=message, status=status, **kw)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    route: str
    t: float = field(default_factory=time.time)
    reply: Reply | None = None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def contains(self, needle: str) -> bool:
        """Search the whole body: Claude Code puts CLAUDE.md in a user message, not in `system`."""
        return needle in self.text or (self.json is not None and needle in json.dumps(self.json, ensure_ascii=False))

    def to_json(self) -> dict:
        return {"t": self.t, "method": self.method, "path": self.path, "route": self.route,
                "headers": self.headers, "body": self.json if self.json is not None else self.text}


def route_of(method: str, path: str) -> str:
    p = path.split("?", 1)[0].rstrip("/")
    if method == "HEAD":
        return "head"
    if method == "POST" and p.endswith("/messages/count_tokens"):
        return "anthropic.count_tokens"
    if method == "POST" and p.endswith("/messages"):
        return "anthropic.messages"
    if method == "POST" and p.endswith("/chat/completions"):
        return "openai.chat"
    if method == "POST" and p.endswith("/responses"):
        return "openai.responses"
    if method == "GET" and p.endswith("/models"):
        return "models"
    if method == "GET" and p == "":
        return "root"
    return "unknown"


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # hundreds of concurrent clients connect at once in the gateway tests


class FakeLLM:
    """The server. Start it with `with FakeLLM() as llm:` or `start()`/`stop()`."""

    def __init__(self, *, default: Reply | Callable[[Request], Reply] = Reply(), model: str = "fake-model",
                 port: int = 0, log_path: str | None = None, tls=None):
        """`tls`: an ssl.SSLContext (server side) to speak HTTPS, as a real provider does."""
        self.default = default
        self.model = model
        self.requests: list[Request] = []
        self._queue: list[Reply] = []
        self._cond = threading.Condition()
        self._log_path = log_path
        self._server = _Server(("127.0.0.1", port), _make_handler(self))
        self._server.daemon_threads = True
        self.tls = tls is not None
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def start(self) -> "FakeLLM":
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-llm", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> "FakeLLM":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- scripting and assertions -------------------------------------------------------------------------------
    def reply(self, *replies: Reply) -> "FakeLLM":
        with self._cond:
            self._queue.extend(replies)
        return self

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def calls(self) -> list[Request]:
        """The model calls (messages and chat/completions), in arrival order."""
        with self._cond:
            return [r for r in self.requests if r.route in MODEL_ROUTES]

    def saw(self, needle: str) -> bool:
        return any(r.contains(needle) for r in self.calls)

    def clear(self) -> None:
        with self._cond:
            self.requests.clear()
            self._queue.clear()

    def wait_for(self, n: int, *, timeout: float = 10.0, route: str | None = None) -> list[Request]:
        """Block until `n` model calls (or `n` requests of `route`) have been answered; returns them all."""

        def picked() -> list[Request]:
            if route is None:
                return [r for r in self.requests if r.route in MODEL_ROUTES]
            return [r for r in self.requests if r.route == route]

        deadline = time.monotonic() + timeout
        with self._cond:
            while len(got := picked()) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = ", ".join(f"{r.method} {r.path}" for r in self.requests) or "nothing"
                    raise TimeoutError(f"fake LLM: wanted {n} {route or 'model call'}(s) in {timeout}s, saw: {seen}")
                self._cond.wait(left)
            return got

    # -- serving ------------------------------------------------------------------------------------------------
    def _take(self, req: Request) -> Reply:
        with self._cond:
            for i, r in enumerate(self._queue):
                if r.accepts(req):
                    return self._queue.pop(i)
        return self.default(req) if callable(self.default) else self.default

    def _record(self, req: Request) -> None:
        with self._cond:
            self.requests.append(req)
            self._cond.notify_all()
        if self._log_path:
            with open(self._log_path, "a") as f:
                f.write(json.dumps(req.to_json(), ensure_ascii=False) + "\n")


def _make_handler(llm: FakeLLM):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "reef-fake-llm/1"

        def log_message(self, *args) -> None:  # quiet: tests read .requests instead
            pass

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def _request(self) -> Request:
            body = self._body() if self.command in ("POST", "PUT", "PATCH") else b""
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            return Request(self.command, self.path, headers, body, parsed, route_of(self.command, self.path))

        def _send(self, status: int, body: bytes, content_type: str = "application/json",
                  declared: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(declared if declared is not None else len(body)))
            if declared is not None:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
                self.wfile.flush()

        def do_HEAD(self) -> None:
            llm._record(self._request())
            self._send(200, b"", "text/plain")

        def do_GET(self) -> None:
            req = self._request()
            llm._record(req)
            if req.route == "models":
                model = {"id": llm.model, "object": "model", "type": "model", "display_name": llm.model,
                         "created": 0, "created_at": "2025-01-01T00:00:00Z", "owned_by": "reef-fake"}
                self._send(200, _dumps({"object": "list", "data": [model], "has_more": False,
                                        "first_id": llm.model, "last_id": llm.model}))
            elif req.route == "root":
                self._send(200, b"ok\n", "text/plain")
            else:
                self._send(404, _dumps({"error": {"message": f"no route for GET {req.path}", "type": "not_found"}}))

        def do_POST(self) -> None:
            req = self._request()
            if req.route == "anthropic.count_tokens":
                llm._record(req)
                self._send(200, _dumps({"input_tokens": 42}))
                return
            if req.route not in MODEL_ROUTES:
                llm._record(req)
                self._send(404, _dumps({"error": {"message": f"no route for POST {req.path}", "type": "not_found"}}))
                return
            reply = llm._take(req)
            req.reply = reply
            if reply.delay:
                time.sleep(reply.delay)
            llm._record(req)  # before answering: a client that has its reply must find its request recorded
            self._answer(req, reply)

        def _answer(self, req: Request, reply: Reply) -> None:
            anthropic = req.route == "anthropic.messages"
            if reply.raw is not None:
                self._send(reply.status, reply.raw, reply.content_type, reply.declared_length)
                return
            if reply.status >= 400:
                body = (_anthropic_error(reply) if anthropic else
                        {"error": {"message": reply.text, "type": "fake_error", "param": None, "code": reply.status}})
                self._send(reply.status, _dumps(body))
                return
            model = (req.json or {}).get("model") or llm.model
            stream = bool((req.json or {}).get("stream"))
            responses = req.route == "openai.responses"
            if not stream:
                body = (_anthropic_message(reply, model) if anthropic else _response_object(reply, model) if responses
                        else _openai_completion(reply, model))
                self._send(200, _dumps(body))
                return
            events = (_anthropic_events(reply, model) if anthropic else _response_events(reply, model) if responses
                      else _openai_chunks(reply, model))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            try:
                for n, chunk in enumerate(events):
                    if reply.die_after is not None and n >= reply.die_after:
                        self.wfile.flush()
                        import socket

                        self.connection.shutdown(socket.SHUT_RDWR)  # the upstream dies mid-stream
                        return
                    self.wfile.write(chunk)
                    if reply.event_delay:
                        self.wfile.flush()
                        time.sleep(reply.event_delay)
                self.wfile.flush()
                if reply.linger:
                    time.sleep(reply.linger)  # the answer is whole; its end (the connection's) comes late
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _ids(reply: Reply, prefix: str) -> list[str]:
    return [c.id or f"{prefix}{uuid.uuid4().hex[:20]}" for c in reply.tool_calls]


def _anthropic_error(reply: Reply) -> dict:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
             413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
    return {"type": "error", "error": {"type": kinds.get(reply.status, "api_error"), "message": reply.text}}


def _anthropic_content(reply: Reply) -> list[dict]:
    blocks: list[dict] = []
    if reply.text or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text})
    for call, cid in zip(reply.tool_calls, _ids(reply, "toolu_")):
        blocks.append({"type": "tool_use", "id": cid, "name": call.name, "input": call.arguments})
    return blocks


def _anthropic_message(reply: Reply, model: str) -> dict:
    return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": model,
            "content": _anthropic_content(reply), "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}}


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _anthropic_events(reply: Reply, model: str) -> list[bytes]:
    msg = _anthropic_message(reply, model)
    start = {**msg, "content": [], "stop_reason": None,
             "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1}}
    out = [_sse("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            out.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                    "content_block": {"type": "text", "text": ""}}))
            if i == 0:
                out.append(_sse("ping", {"type": "ping"}))
            if block["text"]:
                out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                        "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            out.append(_sse("content_block_start", {"type": "content_block_start", "index": i, "content_block":
                                                    {"type": "tool_use", "id": block["id"], "name": block["name"],
                                                     "input": {}}}))
            args = json.dumps(block["input"])
            for part in (args[: len(args) // 2], args[len(args) // 2:]):  # split, as real servers do
                out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                        "delta": {"type": "input_json_delta", "partial_json": part}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(_sse("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                                      "usage": {"output_tokens": reply.output_tokens}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def _openai_usage(reply: Reply) -> dict:
    return {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens}


def _openai_tool_calls(reply: Reply) -> list[dict]:
    return [{"id": cid, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c, cid in zip(reply.tool_calls, _ids(reply, "call_"))]


def _openai_completion(reply: Reply, model: str) -> dict:
    message: dict = {"role": "assistant", "content": reply.text if (reply.text or not reply.tool_calls) else None}
    if reply.tool_calls:
        message["tool_calls"] = _openai_tool_calls(reply)
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": _openai_usage(reply)}


def _openai_chunks(reply: Reply, model: str) -> list[bytes]:
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())

    def chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None) -> bytes:
        body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": None,
                "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None,
                                                      "finish_reason": finish}]}
        if usage is not None:
            body["usage"] = usage
        return b"data: " + _dumps(body) + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.text:
        out.append(chunk({"content": reply.text}))
    for i, call in enumerate(_openai_tool_calls(reply)):
        fn = call["function"]
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": fn["name"], "arguments": ""}}]}))
        args = fn["arguments"]
        for part in (args[: len(args) // 2], args[len(args) // 2:]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    out.append(chunk(None, usage=_openai_usage(reply)))
    out.append(b"data: [DONE]\n\n")
    return out


def _response_object(reply: Reply, model: str, status: str = "completed") -> dict:
    output: list[dict] = []
    if reply.text or not reply.tool_calls:
        output.append({"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "status": "completed",
                       "role": "assistant",
                       "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
    for call, cid in zip(reply.tool_calls, _ids(reply, "call_")):
        output.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:20]}", "call_id": cid,
                       "name": call.name, "arguments": json.dumps(call.arguments), "status": "completed"})
    return {"id": f"resp_{uuid.uuid4().hex[:24]}", "object": "response", "created_at": int(time.time()),
            "status": status, "model": model, "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "error": None, "incomplete_details": None, "instructions": None, "metadata": {},
            "temperature": 1.0, "top_p": 1.0,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                      "total_tokens": reply.input_tokens + reply.output_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def _response_events(reply: Reply, model: str) -> list[bytes]:
    final = _response_object(reply, model)
    start = {**final, "status": "in_progress", "output": [], "usage": None}
    out = [_sse("response.created", {"type": "response.created", "sequence_number": 0, "response": start})]
    seq = 1
    if reply.text:
        item = final["output"][0]
        out.append(_sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": seq,
                                                       "output_index": 0, "item": {**item, "status": "in_progress",
                                                                                   "content": []}}))
        out.append(_sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": seq + 1,
                                                       "item_id": item["id"], "output_index": 0, "content_index": 0,
                                                       "delta": reply.text, "logprobs": []}))
        out.append(_sse("response.output_item.done", {"type": "response.output_item.done", "sequence_number": seq + 2,
                                                      "output_index": 0, "item": item}))
        seq += 3
    out.append(_sse("response.completed", {"type": "response.completed", "sequence_number": seq, "response": final}))
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Fake Anthropic/OpenAI LLM on 127.0.0.1 (answers 'DONE').")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", help="append each request as a JSON line to this file")
    ap.add_argument("--text", default="DONE", help="the default reply text")
    args = ap.parse_args(argv)
    llm = FakeLLM(default=Reply(text=args.text), port=args.port, log_path=args.log)
    print(llm.url, flush=True)
    try:
        llm._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        llm._server.server_close()


if __name__ == "__main__":
    main()
