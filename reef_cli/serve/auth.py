"""Who may use the gateway: bearer tokens from a token file, kept only as SHA-256 digests and compared in constant
time. Several tokens may be valid at once (rotation: add the new one, move clients, remove the old one).

Token file: one token per line; blank lines and `#` comments are skipped; a line `sha256:<64 hex>` is a digest
already, so the file need not hold the secret itself. Clients send `Authorization: Bearer TOKEN`, or `x-api-key:
TOKEN` as Anthropic clients do, or `x-reef-token: TOKEN` (needed with --pass-client-key, where the first two carry
the client's own upstream key).

The running gateway rereads the file when it changes (`TokenFile`), so rotating a token needs no restart and drops
no stream in flight.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import socket
import time
from pathlib import Path
from typing import Callable

from ..errors import InvalidInput, PolicyError

_DIGEST_LINE = re.compile(r"sha256:([0-9a-f]{64})")


class TokenSet:
    def __init__(self, digests: list[bytes]):
        self._digests = tuple(digests)

    def __len__(self) -> int:
        return len(self._digests)

    @classmethod
    def load(cls, path: Path) -> "TokenSet":
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InvalidInput(f"--token-file {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"--token-file {path}: cannot read it ({exc})") from None
        digests = []
        for line in text.splitlines():
            token = line.strip()
            if not token or token.startswith("#"):
                continue
            m = _DIGEST_LINE.fullmatch(token)
            digests.append(bytes.fromhex(m.group(1)) if m else hashlib.sha256(token.encode()).digest())
        del text
        if not digests:
            raise InvalidInput(f"--token-file {path}: holds no token (one per line; '#' starts a comment)")
        return cls(digests)

    def accepts(self, presented: str | None) -> bool:
        """Constant time in the token and in which of the tokens matched (every digest is compared)."""
        if not presented:
            return False
        digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
        ok = False
        for d in self._digests:
            ok |= hmac.compare_digest(digest, d)
        return ok


class TokenFile:
    """The token file as a running gateway sees it: looked at (one stat) at most once a second, on a request, and
    reread when its inode, size or times changed. A removed token is refused from the next check on; no restart.

    A file that cannot be read or holds no token keeps the tokens loaded before, with one log line: an editor's
    half-written save, or a file deleted by mistake, must neither lock every agent out nor open the gateway to
    anyone. To stop every client at once, stop the gateway."""

    CHECK_EVERY_S = 1.0

    def __init__(self, path: Path, note: Callable[[str], None] = lambda _line: None):
        self.path = Path(path)
        self._seen = _signature(self.path)
        self.tokens = TokenSet.load(self.path)
        self.note = note
        self._checked = time.monotonic()

    def current(self) -> TokenSet:
        now = time.monotonic()
        if now - self._checked >= self.CHECK_EVERY_S:
            self._checked = now
            self.refresh()
        return self.tokens

    def refresh(self) -> None:
        seen = _signature(self.path)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            tokens = TokenSet.load(self.path)
        except InvalidInput as exc:
            self.note(f"{exc}; still accepting the {len(self.tokens)} token(s) loaded before")
            return
        self.tokens = tokens
        self.note(f"--token-file {self.path}: reloaded, {len(tokens)} token(s) accepted")


def _signature(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def presented_token(headers, pass_client_key: bool) -> str | None:
    """The reef token a request carries. With --pass-client-key, Authorization and x-api-key belong to the
    upstream, so only x-reef-token counts."""
    token = headers.get("x-reef-token")
    if token or pass_client_key:
        return token
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            return value.strip()
        return None
    return headers.get("x-api-key")


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the gateway on this machine (names are resolved; every address must be)."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def check_bind(host: str, tokens: TokenSet | None) -> None:
    if tokens is None and not is_loopback(host):
        raise PolicyError(f"--host {host} is not a loopback address: anyone who can reach it could use your upstream "
                          "credentials; pass --token-file FILE (one token per line), or bind 127.0.0.1")
