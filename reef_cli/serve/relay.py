"""The upstream side: where a route goes, which headers travel, whose credentials are used.

Headers are relayed as they are, minus hop-by-hop headers, reef's own `x-reef-*` headers and credentials. The
upstream's credentials come from the environment (REEF_UPSTREAM_API_KEY, else OPENAI_API_KEY for OpenAI routes
and ANTHROPIC_API_KEY for Anthropic routes), or with --pass-client-key from the client's own Authorization /
x-api-key; they are never logged, recorded or echoed. Bodies are asked for uncompressed, so the bytes the client
gets are the bytes the upstream sent and the gateway can read usage from them, with one exception (`KeyScreen`):
an upstream that echoes the gateway's own key (an echo server, a proxy's verbose error) has it replaced before the
answer is relayed or recorded, since any client holding a reef token would otherwise read the operator's key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ..errors import InvalidInput
from .answers import Response

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
})
CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"})
RESPONSE_DROP = HOP_BY_HOP | frozenset({"authorization", "x-api-key", "api-key", "www-authenticate"})

ROUTE_API = {
    "/v1/chat/completions": "openai.chat",
    "/v1/responses": "openai.responses",
    "/v1/models": "openai.models",
    "/v1/messages": "anthropic.messages",
    "/v1/messages/count_tokens": "anthropic.count_tokens",
}
RECORDED = frozenset({"openai.chat", "openai.responses", "anthropic.messages"})


@dataclass(frozen=True)
class Upstream:
    base: str  # scheme://host[:port][/prefix], no trailing slash, no userinfo
    strip_v1: bool  # the base already ends in /v1: the client's /v1 is not repeated
    api: str  # openai | anthropic | auto
    env_keys: dict  # protocol -> key (never printed)
    query: str = ""  # the upstream URL's own query (Azure's ?api-version=...), sent on every call, never printed

    @classmethod
    def parse(cls, url: str, api: str, environ: dict) -> "Upstream":
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - urlsplit checks the port only when asked
        except ValueError as exc:  # not echoed: the URL may hold a key; the reason names what is wrong
            raise InvalidInput(f"--upstream: not a valid URL ({exc}); expected one such as "
                               "https://api.openai.com/v1") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"--upstream {shown(url)}: expected an http(s) URL such as https://api.openai.com/v1")
        if api not in ("openai", "anthropic", "auto"):
            raise InvalidInput(f"--upstream-api {api}: expected openai, anthropic, auto or sglang")
        netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        if parts.port:
            netloc += f":{parts.port}"
        path = parts.path.rstrip("/")
        base = urlunsplit((parts.scheme, netloc, path, "", ""))
        shared = environ.get("REEF_UPSTREAM_API_KEY")
        keys = {"openai": shared or environ.get("OPENAI_API_KEY"),
                "anthropic": shared or environ.get("ANTHROPIC_API_KEY")}
        if parts.username or parts.password:
            raise InvalidInput(f"--upstream {shown(url)}: put credentials in REEF_UPSTREAM_API_KEY, not in the URL")
        for protocol, key in keys.items():
            if api in ("auto", protocol) and key and ("\n" in key or "\r" in key):
                name = "REEF_UPSTREAM_API_KEY" if shared else f"{protocol.upper()}_API_KEY"
                raise InvalidInput(f"{name} holds a line break: it cannot be sent as a header (a pasted key?)")
        return cls(base, path.endswith("/v1"), api, keys, parts.query)

    def speaks(self, route_api: str) -> bool:
        return self.api == "auto" or route_api.startswith(self.api + ".") or route_api == "openai.models"

    def target_for(self, path: str, query: str) -> str:
        """The request target on the upstream: its base path, the route (its /v1 not repeated), the query."""
        rest = path[3:] if self.strip_v1 and path.startswith("/v1/") else path
        query = "&".join(q for q in (self.query, query) if q)
        return (urlsplit(self.base).path + rest or "/") + (f"?{query}" if query else "")

    def shown(self) -> str:
        return self.base

    def request_headers(self, incoming, route_api: str, pass_client_key: bool) -> dict:
        out = {}
        named = _connection_named(incoming)
        for name, value in incoming.items():
            low = name.lower()
            if low in HOP_BY_HOP or low.startswith("x-reef-") or low == "accept-encoding" or low in named:
                continue
            if low in CREDENTIALS and not (pass_client_key and low in ("authorization", "x-api-key")):
                continue
            out[name] = value
        out["Accept-Encoding"] = "identity"
        if not pass_client_key:
            protocol = "anthropic" if route_api.startswith("anthropic.") else "openai"
            key = self.env_keys.get(protocol)
            if key:
                if protocol == "anthropic":
                    out["x-api-key"] = key
                else:
                    out["Authorization"] = f"Bearer {key}"
        return out

    def hidden(self, pass_client_key: bool) -> tuple[bytes, ...]:
        """The keys no answer may carry back: the gateway's own (a client's own key, with --pass-client-key, is
        its own to see). A key under 16 bytes is a local server's placeholder (`EMPTY`, `password`), not a provider's
        credential, and screening it would rewrite ordinary answers: it is not screened."""
        if pass_client_key:
            return ()
        return tuple(sorted({k.encode() for k in self.env_keys.values() if k and len(k) >= 16}))


HIDDEN_MARK = b"[REDACTED:upstream_key]"


class KeyScreen:
    """Replaces the gateway's own upstream keys in an answer's bytes, as they arrive. A chunk that ends with the
    start of a key keeps those bytes back until the next one says whether the key follows (held only then: a
    stream's events end in a blank line, which starts no key, so an SSE stream is never delayed)."""

    def __init__(self, keys: tuple[bytes, ...]):
        self.keys = keys
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        if not self.keys:
            return data
        data = screen(self.held + data if self.held else data, self.keys)
        cut = len(data)
        for key in self.keys:
            i = data.find(key[:1], max(0, len(data) - len(key) + 1))
            while i != -1 and i < cut:
                if key.startswith(data[i:]):
                    cut = i
                    break
                i = data.find(key[:1], i + 1)
        self.held = data[cut:]
        return data[:cut]

    def end(self) -> bytes:
        """What was held back, once the answer is over (the start of a key that never came whole)."""
        held, self.held = self.held, b""
        return held


def screen(data: bytes, keys: tuple[bytes, ...]) -> bytes:
    for key in keys:
        if key in data:
            data = data.replace(key, HIDDEN_MARK)
    return data


def response_headers(upstream_headers, hidden: tuple[bytes, ...] = ()) -> list[tuple[str, str]]:
    named = _connection_named(upstream_headers)
    kept = [(k, v) for k, v in upstream_headers.items() if k.lower() not in RESPONSE_DROP and k.lower() not in named]
    if hidden:
        keys = [key.decode() for key in hidden]
        mark = HIDDEN_MARK.decode()
        for i, (name, value) in enumerate(kept):
            for key in keys:
                if key in value:
                    value = value.replace(key, mark)
            kept[i] = (name, value)
    return kept


def _connection_named(headers) -> frozenset:
    """Headers the sender named in its Connection header: hop-by-hop for this one connection (RFC 9110 7.6.1), so
    a proxy drops them rather than pass them on."""
    value = headers.get("Connection")
    if not value:
        return frozenset()
    return frozenset(part.strip().lower() for part in value.split(",") if part.strip())


def shown(url: str) -> str:
    """A URL as it may be printed: no user name or password."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<invalid URL>"
    host = parts.hostname or ""
    if port:
        host += f":{port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def error_body(route_api: str, status: int, message: str, kind: str) -> dict:
    """An error in the shape the route's clients parse (their SDKs raise with this message)."""
    if route_api.startswith("anthropic."):
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def json_response(obj, status: int = 200, headers=None):
    """One of the gateway's own JSON answers (errors included)."""
    try:
        body = json.dumps(obj, ensure_ascii=False, sort_keys=True).encode()
    except UnicodeEncodeError:  # a header's non-UTF-8 bytes echoed in a message (surrogates): as JSON \u escapes
        body = json.dumps(obj, sort_keys=True).encode()
    return Response(body, status, headers, content_type="application/json")


def failure_response(api: str, status: int, message: str, headers=None):
    """The answer for a call the upstream failed (timeout, unreachable, a stream that broke before it began): the
    client's protocol's error shape, with the gateway's receipt headers."""
    return json_response(error_body(api, status, message, "api_error"), status, headers=headers)
