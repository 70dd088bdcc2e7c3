"""The upstream side: where a route goes, which headers travel, whose credentials are used.

Headers are relayed as they are, minus hop-by-hop headers, reef's own `x-reef-*` headers and credentials. The
upstream's credentials come from the environment (REEF_UPSTREAM_API_KEY, else OPENAI_API_KEY for OpenAI routes
and ANTHROPIC_API_KEY for Anthropic routes), or with --pass-client-key from the client's own Authorization /
x-api-key; they are never logged, recorded or echoed. Bodies are asked for uncompressed, so the bytes the client
gets are the bytes the upstream sent and the gateway can read usage from them, with one exception (keys.py): an
upstream that echoes the gateway's own key (an echo server, a proxy's verbose error) has it replaced before the
answer is relayed or recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ..errors import InvalidInput
from .answers import Response
from .keys import hidden_keys, screen_text

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
        # A key pasted with a space or a newline at an end: the provider reads the header without them (HTTP
        # trims a field's value), so an echo carries the bare key, which is what must be screened and sent.
        shared = (environ.get("REEF_UPSTREAM_API_KEY") or "").strip()
        keys = {"openai": shared or (environ.get("OPENAI_API_KEY") or "").strip() or None,
                "anthropic": shared or (environ.get("ANTHROPIC_API_KEY") or "").strip() or None}
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
        """The keys no answer may carry back (keys.py)."""
        return hidden_keys(self.env_keys.values(), pass_client_key)


def response_headers(upstream_headers, hidden: tuple[bytes, ...] = (),
                     decoded: bool = False) -> list[tuple[str, str]]:
    """The upstream's headers as relayed: hop-by-hop ones and credentials dropped, the gateway's own keys screened
    out (keys.py), and Content-Encoding dropped for an answer the gateway decompressed to screen it."""
    named = _connection_named(upstream_headers)
    drop = RESPONSE_DROP | {"content-encoding"} if decoded else RESPONSE_DROP
    kept = [(k, v) for k, v in upstream_headers.items() if k.lower() not in drop and k.lower() not in named]
    if hidden:  # a header whose name carries a key is dropped: a name cannot hold the mark
        kept = [(k, screen_text(v, hidden)) for k, v in kept if screen_text(k, hidden) is k]
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
