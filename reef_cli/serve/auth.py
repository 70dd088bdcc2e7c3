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
import stat
import time
from pathlib import Path
from typing import Callable

from ..errors import InvalidInput, PolicyError

MAX_TOKEN_FILE = 256 * 1024
_DIGEST_LINE = re.compile(r"sha256:([0-9a-f]{64})")
_COMMENT = re.compile(r"(?:^|\s)#")


class TokenSet:
    def __init__(self, digests: list[bytes]):
        self._digests = tuple(digests)

    def __len__(self) -> int:
        return len(self._digests)

    @classmethod
    def parse(cls, path: Path, data: bytes) -> "TokenSet":
        """Tokens from the file's bytes. A `#` at the start of a line or after a space starts a comment (`tok  #
        laptop`); a token holds no space, so anything else after one on its line is refused rather than read as
        part of it. A leading BOM (a Windows editor's UTF-8) is not part of the first token."""
        try:
            text = data.decode("utf-8").removeprefix("\ufeff")
        except UnicodeDecodeError:
            raise InvalidInput(f"--token-file {path}: not UTF-8 text (one token per line)") from None
        digests = []
        for number, line in enumerate(text.splitlines(), 1):
            token = _COMMENT.split(line, 1)[0].strip()
            if not token:
                continue
            if any(ch.isspace() for ch in token):
                raise InvalidInput(f"--token-file {path}: line {number} holds a space inside a token (one token per "
                                   "line; '#' starts a comment)")
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


def read_token_file(path: Path) -> bytes:
    """The file's bytes: opened non-blocking (a FIFO must not hang the gateway), a regular file only, bounded."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidInput(f"--token-file {path}: no such file") from None
    except OSError as exc:
        raise InvalidInput(f"--token-file {path}: cannot read it ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInput(f"--token-file {path}: not a regular file (one token per line)")
        if st.st_size > MAX_TOKEN_FILE:  # read on the event loop: a stray big file must not stall it
            raise InvalidInput(f"--token-file {path}: over {MAX_TOKEN_FILE // 1024} KiB, not a token file")
        return os.read(fd, MAX_TOKEN_FILE + 1)
    except OSError as exc:
        raise InvalidInput(f"--token-file {path}: cannot read it ({exc.strerror})") from None
    finally:
        os.close(fd)


class TokenFile:
    """The token file as a running gateway sees it: looked at (one stat) at most once a second, on a request, and
    reread once a change has settled (last written or renamed a second ago or more, so an editor's save caught
    half-written is never loaded). Rotation needs no restart: a token added is accepted and one removed is refused
    within about two seconds.

    The gateway accepts exactly the tokens the file holds: emptied, deleted or made unreadable (a directory, a
    FIFO, no permission), it holds none and every client is refused, with one log line. Failing open would keep a
    leaked token working after its operator removed it."""

    CHECK_EVERY_S = 1.0
    SETTLE_S = 1.0

    def __init__(self, path: Path, note: Callable[[str], None] = lambda _line: None):
        self.path = Path(path)
        self._seen = _signature(self.path)
        data = read_token_file(self.path)
        self.tokens = TokenSet.parse(self.path, data)
        self._loaded = hashlib.sha256(data).digest()  # the bytes the tokens came from: the same again is no reload
        self._pending: tuple[bytes, float] | None = None  # (digest, first seen) of bytes read before they settled
        self.note = note
        self._next = time.monotonic() + self.CHECK_EVERY_S

    def current(self) -> TokenSet:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.CHECK_EVERY_S
            self.refresh()
        return self.tokens

    def refresh(self) -> None:
        seen = _signature(self.path)
        if seen == self._seen:
            return
        data = None
        if seen is not None:
            age = time.time() - max(seen[2], seen[3]) / 1e9
            if 0 <= age < self.SETTLE_S:  # still being written, perhaps: looked at again once it has settled
                # A file rewritten more often than that (a sidecar re-rendering it every half second) never settles
                # by its times; the same bytes read a second apart count as settled, or a token removed from it
                # would be accepted for as long as the rewrites go on.
                now = time.monotonic()
                try:
                    data = read_token_file(self.path)
                except InvalidInput:
                    data = None
                digest = hashlib.sha256(data).digest() if data is not None else None
                if self._pending is None or self._pending[0] != digest:
                    self._pending = (digest, now)
                if digest is None or now - self._pending[1] < self.SETTLE_S:
                    self._next = min(self._next, now + self.SETTLE_S - age)
                    return
        self._seen = seen
        self._pending = None
        try:
            if data is None:
                data = read_token_file(self.path)
            digest = hashlib.sha256(data).digest()
            if digest == self._loaded and len(self.tokens):
                return  # touched or rewritten with the same tokens: nothing to say
            tokens = TokenSet.parse(self.path, data)
        except InvalidInput as exc:
            self.tokens = TokenSet([])
            self._loaded = None
            self.note(f"{exc}; no client is accepted until it holds a token again")
            return
        self.tokens = tokens
        self._loaded = digest
        self.note(f"--token-file {self.path}: reloaded, {len(tokens)} token(s) accepted")


def _signature(path: Path) -> tuple | None:
    try:
        st = os.stat(path)  # followed: a mounted secret is a symlink swapped to a new directory
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
