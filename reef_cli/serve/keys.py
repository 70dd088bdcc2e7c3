"""Keeping the gateway's own upstream key out of what it relays and records.

The gateway sends its operator's key (REEF_UPSTREAM_API_KEY, OPENAI_API_KEY, ANTHROPIC_API_KEY) upstream on every
call. An upstream that echoes it (an echo server, a proxy whose error quotes the key it got) would hand it to every
client holding a reef token, and under --store-content the ledger would keep it: a key of no known shape escapes
pattern redaction. So answers are screened for the key's bytes, in headers, bodies and streams, before they are
relayed or recorded; a compressed answer (sent although identity was asked for) is decompressed first, and one in
an encoding the gateway cannot read is refused rather than passed on unread.

What this cannot see: the key transformed by the upstream (JSON-escaped differently, `\\u006b...`; base64; split
across two stream events). Echoes are copies, so this covers them; an upstream that encodes the key it was sent is
not one a gateway can make safe.
"""

from __future__ import annotations

import zlib

from .upstream_http import UpstreamError

HIDDEN_MARK = b"[REDACTED:upstream_key]"
MIN_KEY = 16
"""Keys shorter than this are a local server's placeholder (`EMPTY`, `password`), not a provider's credential, and
screening them would rewrite ordinary answers: they are not screened."""
_PIECE = 1 << 20  # what one decompression step may produce: a small compressed bomb stays small in memory


def hidden_keys(env_keys, pass_client_key: bool) -> tuple[bytes, ...]:
    """The keys no answer may carry back, longest first (a key that is another's prefix must not be replaced
    inside it, leaving the longer key's tail). With --pass-client-key a client's own key is its own to see."""
    if pass_client_key:
        return ()
    return _ordered(env_keys)


def client_keys(headers) -> tuple[bytes, ...]:
    """With --pass-client-key, the upstream key a client sent (Authorization: Bearer, x-api-key). The client may
    see it echoed, but a stored record must not keep it: a key of no known shape (Mistral's 32 letters, Together's
    64 hex digits) escapes pattern redaction."""
    found = []
    for name in ("authorization", "x-api-key", "api-key"):
        for value in headers.getall(name):
            scheme, _, rest = value.strip().partition(" ")
            found.append(rest if name == "authorization" and scheme.lower() == "bearer" else value)
    return _ordered(found)


def _ordered(keys) -> tuple[bytes, ...]:
    out = {k.strip().encode("utf-8", "surrogateescape") for k in keys if k and len(k.strip()) >= MIN_KEY}
    return tuple(sorted(out, key=lambda k: (-len(k), k)))


def screen(data: bytes, keys: tuple[bytes, ...]) -> bytes:
    """`data` with every key replaced by the mark (a plain search per key: memchr-fast, nothing copied when absent)."""
    for key in keys:
        if key in data:
            data = data.replace(key, HIDDEN_MARK)
    return data


def screen_text(value: str, keys: tuple[bytes, ...]) -> str:
    """A header value, screened as the bytes it goes out as."""
    raw = value.encode("utf-8", "surrogateescape")
    done = screen(raw, keys)
    return value if done is raw else done.decode("utf-8", "surrogateescape")


class KeyScreen:
    """Screens an answer as it arrives. A chunk that ends with the start of a key keeps those bytes back until the
    next one says whether the key follows (held only then: a stream's events end in a blank line, which starts no
    key, so an SSE stream is never delayed)."""

    def __init__(self, keys: tuple[bytes, ...]):
        self.keys = keys
        self.held = b""

    def feed(self, data: bytes) -> bytes:
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


class Undecodable(UpstreamError):
    """An answer compressed in a way the gateway cannot read, or corrupt: it cannot be screened, so not relayed
    (mid-stream, the stream breaks off as any other upstream failure does)."""


class Decoder:
    """Decompresses a gzip or zlib ("deflate") answer as it arrives, in bounded pieces."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self._z = zlib.decompressobj(47)  # 32 + 15: a gzip or a zlib header, whichever came

    def feed(self, data: bytes):
        try:
            piece = self._z.decompress(data, _PIECE)
            while piece:
                yield piece
                piece = self._z.decompress(self._z.unconsumed_tail, _PIECE) if self._z.unconsumed_tail else b""
        except zlib.error as exc:
            raise Undecodable(f"the upstream's {self.encoding} answer does not decompress ({exc})") from None

    def whole(self, data: bytes, limit: int) -> bytes:
        out, size = [], 0
        for piece in self.feed(data):
            size += len(piece)
            if size > limit:
                raise Undecodable(f"the upstream's {self.encoding} answer is over {limit // 2**20} MiB decompressed")
            out.append(piece)
        if not self._z.eof:
            raise Undecodable(f"the upstream's {self.encoding} answer ends before its compressed data does")
        return b"".join(out)


def decoder_for(headers) -> Decoder | None:
    """The decoder an answer needs before it can be screened (None: it is not compressed). Raises Undecodable for
    an encoding the gateway cannot read (br, zstd, several layers). Every Content-Encoding header counts: a client
    applies them all, so `identity` first and `gzip` second is a gzip answer."""
    codings = [c.strip().lower() for value in headers.getall("Content-Encoding") for c in value.split(",")]
    codings = [c for c in codings if c not in ("", "identity")]
    if not codings:
        return None
    encoding = ", ".join(codings)
    if encoding in ("gzip", "x-gzip", "deflate"):
        return Decoder(encoding)
    raise Undecodable(f"the upstream compressed its answer ({encoding}) although asked not to, in an encoding the "
                      "gateway cannot read to keep its own key out of it")
