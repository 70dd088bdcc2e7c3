"""Secret-shaped strings out of what reef stores: transcripts, feedback and excerpts pass through here first.

Best effort, tuned to miss as few real secrets as possible without mangling ordinary code and prose: provider
tokens are matched by their documented shapes; `KEY=value`-style assignments only when the key names a secret
and the value looks like a literal rather than code (`token = get_token()` stays). Every replacement reads
`[REDACTED:<kind>]`, and text that is already redacted passes through unchanged (and uncounted).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from .errors import InvalidInput

EXCERPT_CHARS = 200
_WINDOW = 4096  # how far past the excerpt a secret that starts inside it may run and still be found whole


def _mark(kind: str) -> str:
    return f"[REDACTED:{kind}]"


_START = r"(?<![A-Za-z0-9_-])"  # a token starts at a word boundary that is not inside another token
_END = r"(?![A-Za-z0-9_-])"

# (kind, pattern): the whole match is the secret.
_TOKENS: list[tuple[str, re.Pattern[str]]] = [
    ("anthropic_key", re.compile(_START + r"sk-ant-[A-Za-z0-9_-]{20,}")),
    ("openrouter_key", re.compile(_START + r"sk-or-v\d+-[A-Za-z0-9]{32,}" + _END)),
    ("openai_key", re.compile(_START + r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}")),
    ("openai_key", re.compile(_START + r"sk-[A-Za-z0-9]{20,}" + _END)),
    ("stripe_key", re.compile(_START + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}" + _END)),
    ("stripe_key", re.compile(_START + r"whsec_[A-Za-z0-9]{24,}" + _END)),
    ("aws_access_key", re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")),
    ("github_token", re.compile(_START + r"gh[pousr]_[A-Za-z0-9]{36,}" + _END)),
    ("github_token", re.compile(_START + r"github_pat_[A-Za-z0-9_]{22,}" + _END)),
    ("slack_token", re.compile(_START + r"xox[abprs]-[A-Za-z0-9-]{10,}" + _END)),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9_/-]{20,}")),
    ("google_api_key", re.compile(_START + r"AIza[0-9A-Za-z_-]{35}" + _END)),
    ("huggingface_token", re.compile(_START + r"hf_[A-Za-z0-9]{30,}" + _END)),
    ("gitlab_token", re.compile(_START + r"glpat-[A-Za-z0-9_-]{20,}" + _END)),
    ("npm_token", re.compile(_START + r"npm_[A-Za-z0-9]{36,}" + _END)),
    ("jwt", re.compile(_START + r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}" + _END)),
]

_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK)?-----"
    r"(?P<body>.*?-----END \1PRIVATE KEY\2-----|(?:\\n|\s)*[A-Za-z0-9+/=][A-Za-z0-9+/=\s\\]*)",
    re.DOTALL,
)
_KEY_MATERIAL = re.compile(r"[A-Za-z0-9+/=]{40,}")  # a PEM body line; code that only names the header has none
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s/:@'\"<>\[\]]+:)(?P<secret>[^\s/@'\"<>]+)(?=@)"
)
_AUTH_HEADER = re.compile(
    r"(?P<head>\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?P<scheme>bearer|basic|token|bot|digest)\s+)?)"
    r"(?P<secret>[^\s\"',;]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<head>\bbearer\s+)(?P<secret>[A-Za-z0-9._~+/=-]{16,})", re.IGNORECASE)
_ASSIGNMENT = re.compile(
    r"""
    (?P<head>
      (?<![A-Za-z0-9_.$-])
      (?P<export>export\s+)?
      (?P<flag>--?)?
      (?P<q>["']?)
      (?=[A-Za-z0-9_.-]*?(?i:key|token|secret|passw|passphrase|credential))
      (?P<key>[A-Za-z_][A-Za-z0-9_.-]*)
      (?P=q)
      (?P<sep>[ \t]*(?::=|=>|=|:)(?!=)[ \t]*)
    )
    (?:
      "(?P<dq>(?:[^"\\\n]|\\.)*)"
    | '(?P<sq>[^'\n]*)'
    | (?P<bare>[^\s"']+)
    )
    """,
    re.VERBOSE,
)

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SECRET_WORDS = {
    "token", "secret", "password", "passwd", "passphrase", "apikey", "credential", "credentials", "privatekey",
    "secretkey", "accesskey", "authtoken",
}
_NOT_SECRET_LAST = {
    "count", "counts", "type", "types", "limit", "limits", "len", "length", "size", "url", "uri", "endpoint", "file",
    "files", "path", "paths", "dir", "name", "names", "id", "ids", "env", "var", "field", "header", "prefix", "suffix",
    "format", "kind", "mode", "policy", "ttl", "expiry", "expires", "expiration", "at", "hint", "label", "pattern",
    "regex", "used", "usage", "budget", "min", "max", "total", "index", "idx", "algorithm", "alg", "version",
    "location", "ref", "refs", "required", "enabled", "source", "provider", "store", "manager", "storage",
    "rotation", "lifetime", "timeout", "method", "scope", "scopes", "description",
}
_NOT_SECRET_KEY_QUALIFIERS = {
    "sort", "primary", "foreign", "cache", "partition", "hash", "lookup", "dict", "map", "idempotency", "group",
    "routing", "shard", "unique", "public", "pub", "row", "column", "composite", "natural", "surrogate", "object",
    "registry", "translation", "i18n", "config", "legend", "hot", "short", "index", "tree", "dedup", "join", "order",
    "search", "s3", "bucket", "react", "list", "dedupe", "entry", "sorting",
}
_PLACEHOLDER = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\{\{.*\}\}|\{\{.*\}\}|\{[A-Za-z_][A-Za-z0-9_.]*\}|<[^<>]*>|%\([^)]*\)s|"
    r"\*+|x{3,}|X{3,}|\.\.\.|…|-+",
    re.DOTALL,
)
_CODE_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_PATH = re.compile(r"(?:~|\.{1,2})?/[^\s]*")
_NOT_SECRET_VALUES = {"none", "null", "nil", "true", "false", "undefined", "yes", "no", "on", "off", "required",
                      "optional", "str", "string", "bytes", "int", "bool"}


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _key_words(key: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(key)]


def is_secret_key(key: str) -> bool:
    """Does this field or variable name say its value is a secret (`OPENAI_API_KEY`, `clientSecret`,
    `db.password`), as opposed to a name that merely mentions one (`max_tokens`, `sort_key`, `token_type`)?"""
    words = _key_words(key)
    if not words or words[-1] in _NOT_SECRET_LAST:
        return False
    if any(word in _SECRET_WORDS for word in words):
        return True
    if "key" in words:
        at = len(words) - 1 - words[::-1].index("key")
        return at > 0 and words[at - 1] not in _NOT_SECRET_KEY_QUALIFIERS
    return False


def _secret_kind(key: str) -> str:
    words = _key_words(key)
    if {"password", "passwd", "passphrase"} & set(words):
        return "password"
    if {"token", "authtoken"} & set(words):
        return "token"
    if "key" in words or "apikey" in words:
        return "api_key"
    return "secret"


def _is_literal_secret(value: str, *, literal: bool) -> bool:
    """Is this assigned value a secret rather than a placeholder, a reference or code? `literal`: it was quoted
    or sits in an env-file line, so it is data whatever it looks like."""
    text = value.strip()
    if not text or text.startswith("[REDACTED:"):
        return False
    if text.lower() in _NOT_SECRET_VALUES or _PLACEHOLDER.fullmatch(text) or _PATH.fullmatch(text):
        return False
    if literal:
        return True
    if re.search(r"[()\[\]{}]", text) or _CODE_REF.fullmatch(text):
        return False  # a call, an index or an attribute: code
    if re.fullmatch(r"[a-z_]+|[A-Z][a-z]+", text):
        return False  # one plain word: a variable name, or prose ("the token: expired")
    return True


def _looks_random(text: str) -> bool:
    return len(text) >= 16 and any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def redact(text: str) -> tuple[str, int]:
    """Replace secret-shaped substrings with `[REDACTED:<kind>]`; returns the new text and how many were replaced."""
    if not isinstance(text, str):
        raise InvalidInput(f"redact takes text, not {type(text).__name__}")
    count = 0

    def sub(pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str | None], source: str) -> str:
        def one(match: re.Match[str]) -> str:
            nonlocal count
            replaced = replace(match)
            if replaced is None:
                return match.group(0)
            count += 1
            return replaced

        return pattern.sub(one, source)

    text = sub(_PRIVATE_KEY, _private_key, text)
    text = sub(_URL_PASSWORD, _url_password, text)
    for kind, pattern in _TOKENS:
        text = sub(pattern, lambda m, kind=kind: _mark(kind), text)
    text = sub(_AUTH_HEADER, _auth_header, text)
    text = sub(_BEARER, _bearer, text)
    text = sub(_ASSIGNMENT, _assignment, text)
    return text, count


def _private_key(match: re.Match[str]) -> str | None:
    return _mark("private_key") if _KEY_MATERIAL.search(match.group("body")) else None


def _url_password(match: re.Match[str]) -> str | None:
    secret = match.group("secret")
    if secret.startswith("[REDACTED:") or _PLACEHOLDER.fullmatch(secret):
        return None
    return match.group("head") + _mark("url_password")


def _auth_header(match: re.Match[str]) -> str | None:
    secret = match.group("secret")
    if secret.startswith(("[REDACTED:", "{", "$", "<", "%")):
        return None
    if match.group("scheme") is None and not _looks_random(secret):
        return None  # "Authorization: required" in prose
    kind = "bearer_token" if (match.group("scheme") or "").lower() == "bearer" else "authorization"
    return match.group("head") + _mark(kind)


def _bearer(match: re.Match[str]) -> str | None:
    secret = match.group("secret")
    if secret.startswith("[REDACTED:") or not _looks_random(secret):
        return None
    return match.group("head") + _mark("bearer_token")


def _assignment(match: re.Match[str]) -> str | None:
    key = match.group("key")
    if not is_secret_key(key):
        return None
    quote = '"' if match.group("dq") is not None else "'" if match.group("sq") is not None else ""
    value = match.group("dq") if quote == '"' else match.group("sq") if quote == "'" else match.group("bare")
    rest = ""
    env_line = bool(match.group("export")) or (
        match.group("sep") == "=" and re.fullmatch(r"[A-Z][A-Z0-9_]*", key) is not None
    )
    if not quote and not env_line:
        # Outside an env file a bare value ends at punctuation, and inside a query string at the next parameter.
        in_query = match.string[match.start() - 1 : match.start()] in ("?", "&")
        value = re.match(r"[^,;}\]&]*" if in_query else r"[^,;}\]]*", value).group(0)
        rest = match.group("bare")[len(value) :]
    if not _is_literal_secret(value, literal=bool(quote) or env_line):
        return None
    return match.group("head") + quote + _mark(_secret_kind(key)) + quote + rest


def redact_obj(obj: Any) -> tuple[Any, int]:
    """`redact` over every string in nested dicts, lists and tuples (keys kept), plus any string or number stored
    under a key that names a secret (`{"password": "hunter2"}`), which no pattern inside the value would catch.
    Returns a new object and the number of replacements."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        out: dict = {}
        total = 0
        for key, value in obj.items():
            secret_key = isinstance(key, str) and is_secret_key(key)
            if secret_key and isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key], total = _mark(_secret_kind(key)), total + 1
                continue
            new, count = redact_obj(value)
            if secret_key and count == 0 and isinstance(value, str) and _is_literal_secret(value, literal=True):
                new, count = _mark(_secret_kind(key)), 1
            out[key] = new
            total += count
        return out, total
    if isinstance(obj, (list, tuple)):
        items = []
        total = 0
        for value in obj:
            new, count = redact_obj(value)
            items.append(new)
            total += count
        return (items if isinstance(obj, list) else tuple(items)), total
    return obj, 0


def content_fields(text: str | bytes, store_content: bool) -> dict:
    """What a record keeps of some content: always its digest (of the original bytes), length in bytes and a
    redacted excerpt; the redacted text too when the scenario stores content. The excerpt is cut after
    redacting, so a secret that straddles the cut is still caught and no marker is cut in half."""
    if isinstance(text, bytes):
        raw = text
        decoded = text.decode("utf-8", errors="replace")
    elif isinstance(text, str):
        raw = text.encode("utf-8", errors="surrogatepass")
        decoded = _LONE_SURROGATE.sub("\ufffd", text)  # so the redacted text can be encoded and stored
    else:
        raise InvalidInput(f"content must be text or bytes, not {type(text).__name__}")
    fields: dict[str, Any] = {"digest": "sha256:" + hashlib.sha256(raw).hexdigest(), "length": len(raw)}
    if store_content:
        redacted, _ = redact(decoded)
        fields["excerpt"] = _excerpt(redacted)
        fields["text"] = redacted
    else:
        fields["excerpt"] = _excerpt(redact(decoded[: EXCERPT_CHARS + _WINDOW])[0])
    return fields


def _excerpt(text: str) -> str:
    if len(text) <= EXCERPT_CHARS:
        return text
    cut = EXCERPT_CHARS
    opened = text.rfind("[REDACTED:", 0, cut)
    if opened >= 0:
        closed = text.find("]", opened)
        if closed >= cut:
            cut = closed + 1
    return text[:cut]
