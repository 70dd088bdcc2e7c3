"""Who may use the gateway: bearer tokens from a token file, kept only as SHA-256 digests and compared in constant
time. Several tokens may be valid at once (rotation: add the new one, move clients, remove the old one).

Token file: one token per line; blank lines and `#` comments are skipped; a line `sha256:<64 hex>` is a digest
already, so the file need not hold the secret itself. Clients send `Authorization: Bearer TOKEN`, or `x-api-key:
TOKEN` as Anthropic clients do, or `x-reef-token: TOKEN` (needed with --pass-client-key, where the first two carry
the client's own upstream key).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import socket
from pathlib import Path

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
