"""Server-sent events as the gateway relays them: split into whole events, watch for usage and the terminal event,
and put reef's receipt in-band once the record is durable.

Events are forwarded as soon as they are complete (never re-encoded), except the one terminal event of each
protocol, which is held back until the record is durable and then sent with the receipt:
- OpenAI Chat Completions: a final chunk with empty `choices` and a `reef` object, then the upstream's `[DONE]`;
- OpenAI Responses: `response.completed` (or `.failed` / `.incomplete`) with a top-level `reef` field;
- Anthropic Messages: `message_stop` with a top-level `reef` field.
Only events that can carry usage, the model or provenance are parsed as JSON; the rest are scanned as bytes.
"""

from __future__ import annotations

import json

RESPONSES_TERMINAL = (b"response.completed", b"response.failed", b"response.incomplete")


class EventSplitter:
    """Bytes in, whole events out (each with its blank-line terminator, exactly as received)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data if self._buf else data
        out = []
        start = 0
        while True:
            lf = buf.find(b"\n\n", start)
            crlf = buf.find(b"\r\n\r\n", start)
            if lf < 0 and crlf < 0:
                break
            if crlf >= 0 and (lf < 0 or crlf < lf):
                end = crlf + 4
            else:
                end = lf + 2
            out.append(buf[start:end])
            start = end
        self._buf = buf[start:]
        return out

    @property
    def rest(self) -> bytes:
        """Bytes of an event that never completed (the upstream stopped mid-event)."""
        return self._buf


def fields(event: bytes) -> tuple[bytes, bytes]:
    """(event name, data) of one raw event; multi-line data joined with newlines, as the SSE spec says."""
    name = b""
    data: list[bytes] = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line.startswith(b"event:"):
            name = line[6:].strip()
    return name, b"\n".join(data)


def _json(data: bytes):
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def tokens_of(usage) -> tuple[int | None, int | None]:
    """(input, output) tokens from either protocol's usage object."""
    if not isinstance(usage, dict):
        return None, None
    inp = usage.get("prompt_tokens", usage.get("input_tokens"))
    out = usage.get("completion_tokens", usage.get("output_tokens"))
    return (inp if isinstance(inp, int) else None), (out if isinstance(out, int) else None)


class StreamWatch:
    """Per stream: what the record needs (model, usage, first-token time, the upstream's last meta) and the
    terminal event to hold back. `api` is one of openai.chat, openai.responses, anthropic.messages."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.model: str | None = None
        self.usage: dict | None = None
        self.first_token = False
        self.error: str | None = None
        self.last_chunk: dict | None = None  # chat: the last parsed chunk (id, created, model for ours)
        self.final: dict | None = None  # the terminal event's JSON (responses, anthropic) or the usage chunk (chat)

    def is_token(self, event: bytes) -> bool:
        """Whether this event carries generated content (time to first token is measured to the first one)."""
        if self.api == "openai.chat":
            return (b'"content":"' in event and b'"content":""' not in event) or b'"tool_calls"' in event \
                or b'"reasoning_content":"' in event
        if self.api == "anthropic.messages":
            return b"content_block_delta" in event
        return b".delta" in event

    def observe(self, event: bytes) -> bool:
        """Note what the event says; True when it is the terminal event (to be held back)."""
        if not self.first_token and self.is_token(event):
            self.first_token = True
        name, data = fields(event)
        api = self.api
        if api == "openai.chat":
            if data == b"[DONE]":
                return True
            if self.model is None or b'"usage"' in data:
                obj = _json(data)
                if obj is not None:
                    self.last_chunk = obj
                    self.model = self.model or _text(obj.get("model"))
                    if isinstance(obj.get("usage"), dict):
                        self.usage = obj["usage"]
                        self.final = obj
            if b'"error"' in data and data.startswith(b"{\"error\""):
                obj = _json(data)
                if obj is not None:
                    self.error = str(obj.get("error"))[:300]
            return False
        if api == "anthropic.messages":
            if name == b"message_stop" or (not name and b'"message_stop"' in data):
                self.final = _json(data) or {"type": "message_stop"}
                return True
            if name in (b"message_start", b"message_delta") or (not name and b'"usage"' in data):
                obj = _json(data)
                if obj is not None:
                    msg = obj.get("message") if isinstance(obj.get("message"), dict) else {}
                    self.model = self.model or _text(msg.get("model"))
                    usage = msg.get("usage") if msg else obj.get("usage")
                    if isinstance(usage, dict):
                        self.usage = {**(self.usage or {}), **usage}
            elif name == b"error":
                obj = _json(data) or {}
                self.error = str(obj.get("error") or data[:300].decode("utf-8", "replace"))[:300]
            return False
        # openai.responses
        kind = name or _type_of(data)
        if kind in RESPONSES_TERMINAL:
            obj = _json(data) or {}
            self.final = obj
            resp = obj.get("response") if isinstance(obj.get("response"), dict) else {}
            self.model = _text(resp.get("model")) or self.model
            if isinstance(resp.get("usage"), dict):
                self.usage = resp["usage"]
            if kind != b"response.completed":
                self.error = f"upstream ended the response as {kind.decode()}"
            return True
        if kind == b"response.created" and self.model is None:
            obj = _json(data) or {}
            resp = obj.get("response") if isinstance(obj.get("response"), dict) else {}
            self.model = _text(resp.get("model"))
        elif kind == b"error":
            self.error = data[:300].decode("utf-8", "replace")
        return False

    def receipt(self, terminal: bytes, reef: dict) -> bytes:
        """What goes to the client in place of the held-back terminal event, once the record is durable."""
        if self.api == "openai.chat":
            last = self.last_chunk or {}
            chunk = {"id": last.get("id", ""), "object": "chat.completion.chunk", "created": last.get("created", 0),
                     "model": last.get("model", self.model or ""), "choices": [], "reef": reef}
            return b"data: " + _dumps(chunk) + b"\n\n" + terminal
        name, data = fields(terminal)
        obj = _json(data)
        if obj is None:
            return terminal
        obj["reef"] = reef
        head = b"event: " + name + b"\n" if name else b""
        return head + b"data: " + _dumps(obj) + b"\n\n"


def _type_of(data: bytes) -> bytes:
    i = data.find(b'"type":"')
    if i < 0:
        return b""
    j = data.find(b'"', i + 8)
    return data[i + 8:j] if j > 0 else b""


def _text(value) -> str | None:
    """A model name as the record keeps it: a string, or nothing (an upstream's odd value is not stored)."""
    return value if isinstance(value, str) else None


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
