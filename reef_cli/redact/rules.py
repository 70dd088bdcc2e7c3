"""The rules: for each pattern's match, what is the secret, its kind, and what around it is kept (`Hit`)."""

from __future__ import annotations

import re

from .keys import (
    _CODE_REF, _PLACEHOLDER, _is_auth_switch, _is_literal_secret, _looks_random, _secret_kind, is_secret_key
)
from .shapes import (
    _ASSIGNMENT_LINE, _BLOCK_INDICATOR, _CONNINFO, _IDENTIFIER, _KEY_BODY, _KEY_MATERIAL, _Lazy,
    _MAPPING_LINE, _NEXT_INDENT, _NUMBERS, _WRAPPED_PIECE
)


Hit = tuple[str, str, str, str] | None  # (kept before, the secret, its kind, kept after), or None: leave it


def _private_key(match: re.Match[str]) -> Hit:
    body = match.group("body")
    # A whole BEGIN...END block is a key whatever its lines' length (a short test key, a key re-wrapped at 29
    # columns); an open header needs a body line of key length, or code that only names the header would go too.
    whole = "-----END " in body and _KEY_BODY.search(body.split("-----END ", 1)[0])
    return ("", match.group(0), "private_key", "") if whole or _KEY_MATERIAL.search(body) else None


def _url_password(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    if secret.startswith("[REDACTED:") or _PLACEHOLDER.fullmatch(secret):
        return None
    return match.group("head"), secret, "url_password", ""


def _auth_header(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    if secret.startswith(("[REDACTED:", "{", "$", "<", "%")):
        return None
    if match.group("scheme") is None and not _looks_random(secret):
        return None  # "Authorization: required" in prose
    kind = "bearer_token" if (match.group("scheme") or "").lower() == "bearer" else "authorization"
    return match.group("head"), secret, kind, ""


def _digest(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    return None if "[REDACTED:" in secret else (match.group("head"), secret, "authorization", "")


def _pgpass(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    if not _is_literal_secret(secret, literal=True) or _NUMBERS.fullmatch(secret):
        return None  # `12:30:45:123:456`
    return match.group("head"), secret, "password", ""


def _ppk(match: re.Match[str]) -> Hit:
    body = match.group("secret")
    if not _KEY_MATERIAL.search(body):
        return None
    kept = body.rstrip("\r\n")
    return match.group("head"), kept, "private_key", body[len(kept) :]


def _conn_password(match: re.Match[str]) -> Hit:
    head, secret = (match.group("head"), match.group("secret")) if match.group("head") is not None else (
        match.group("head2"), match.group("secret2"))
    quote = secret[0] if secret.startswith("{") else ""
    value = secret[1:-1] if quote else secret
    if not _is_literal_secret(value, literal=True):
        return None
    return head + quote, value, "password", "}" if quote else ""


def _bearer(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    if secret.startswith("[REDACTED:") or not _looks_random(secret):
        return None
    return match.group("head"), secret, "bearer_token", ""


def _unquote(value: str) -> tuple[str, str]:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1], value[0]
    return value, ""


# The shell ends an unquoted word at a control or redirection operator: in `mysql -pX; ls` the password is `X`.
_SHELL_OPERATOR = _Lazy(r"[;&|<>`)]")


def _shell_word(value: str, quote: str) -> tuple[str, str]:
    """An unquoted flag value cut where the shell cuts it, and the rest of the command line after it."""
    cut = None if quote else _SHELL_OPERATOR.search(value)
    return (value, "") if cut is None else (value[: cut.start()], value[cut.start() :])


def _flag(match: re.Match[str]) -> Hit:
    key = match.group("key")
    if not is_secret_key(key):
        return None
    value, quote = _unquote(match.group("secret"))
    value, rest = _shell_word(value, quote)
    if not _is_literal_secret(value, literal=bool(quote)):
        return None
    return match.group("head") + quote, value, _secret_kind(key), quote + rest


def _loose_value(match: re.Match[str], *, shell: bool = False) -> Hit:
    """A value whose place says it is a password (`-p`, `-u user:`, netrc's `password`): taken unless it is a
    placeholder or one plain word (`mysql -u root -p app` prompts, and `app` is the database). `shell`: a command
    line's word, which ends at a shell operator."""
    value, quote = _unquote(match.group("secret"))
    value, rest = _shell_word(value, quote) if shell else (value, "")
    if not _is_literal_secret(value, literal=False) or _NUMBERS.fullmatch(value):
        return None  # `docker run -u 1000:1000 -p 8080:80`: ids and ports
    return match.group("head") + quote, value, "password", quote + rest


def _curl_user(match: re.Match[str]) -> Hit:
    return _loose_value(match, shell=True)


def _short_p(match: re.Match[str]) -> Hit:
    """`-p` beside a user or in a password-taking client. Quoted, it is data; attached (`-pX`) to a MySQL client's
    `-p`, or after sshpass's, it can be nothing but the password, so even one plain word or digits (`-psecret`,
    `-p123456`) go; otherwise as `_loose_value` (`-u root -p app` prompts, `-u 1000 -p 8080` is a port)."""
    value, quote = _unquote(match.group("secret"))
    value, rest = _shell_word(value, quote)
    certain = any(match.group(name) is not None for name in ("mysql", "sshpass", "redis", "mongo"))
    attached = match.group("head")[-1:] == "p"
    if not _is_literal_secret(value, literal=bool(quote) or certain or attached):
        return None
    if not (quote or certain) and _NUMBERS.fullmatch(value):
        return None  # `ps -u root -p1234`, `docker run -u 1000:1000 -p 8080:80`: ids and ports
    return match.group("head") + quote, value, "password", quote + rest


def _tool_value(match: re.Match[str]) -> Hit:
    key = match.groupdict().get("key")
    if key is not None and not is_secret_key(key):
        return None  # `setx PATH ...`, `git config user.name ...`
    value, quote = _unquote(match.group("secret"))
    value, rest = _shell_word(value, quote)
    if not _is_literal_secret(value, literal=True) or value.startswith(("env:", "file:", "fd:")):
        return None
    kind = "password" if key is None else _secret_kind(key)
    return match.group("head") + quote, value, kind, quote + rest


def _code_secret(match: re.Match[str]) -> Hit:
    key = match.groupdict().get("key")
    if key is not None and not is_secret_key(key):
        return None
    value, quote = _unquote(match.group("secret"))
    if not _is_literal_secret(value, literal=True):
        return None
    return match.group("head") + quote, value, "password" if key is None else _secret_kind(key), quote


def _bare_basic(match: re.Match[str]) -> Hit:
    """Only a base64 that decodes to `user:password`: `Basic QWxhZGRpbg` is a word, not a credential."""
    import base64
    import binascii

    secret = match.group("secret")
    try:
        decoded = base64.b64decode(secret + "=" * (-len(secret) % 4), validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not (user and colon and password and decoded.isprintable()):
        return None
    return match.group("head"), secret, "authorization", ""


def _sql_password(match: re.Match[str]) -> Hit:
    value, quote = _unquote(match.group("secret"))
    if not _is_literal_secret(value, literal=True):
        return None  # `IDENTIFIED BY '<password>'`, `PASSWORD '***'`
    return match.group("head") + quote, value, "password", quote


def _next_line_value(match: re.Match[str]) -> Hit:
    """A secret key's value on the following lines: a block scalar's lines are data whatever they hold; a plain
    value must be one line, one word (or quoted), and not a nested mapping, a list or a comment."""
    key = match.group("key")
    if not is_secret_key(key):
        return None
    column = match.start("q") - match.start()  # past a list item's `- `
    lines = match.group("body").splitlines(keepends=True)
    taken = 0
    for line in lines:
        stripped = line.strip()
        if stripped and len(line) - len(line.lstrip(" \t")) <= column:
            break
        taken += 1
    while taken and not lines[taken - 1].strip():
        taken -= 1  # trailing blank lines are not the value's
    values = [line.strip() for line in lines[:taken] if line.strip()]
    if not values or any("[REDACTED:" in value for value in values):
        return None
    first = next(line for line in lines if line.strip())
    lead = first[: len(first) - len(first.lstrip(" \t"))]
    last = lines[taken - 1]
    ending = last[len(last.rstrip("\r\n")) :]
    tail = ending + "".join(lines[taken:])
    kind = _secret_kind(key)
    if match.group("block"):
        value = "\n".join(values)
        if not _is_literal_secret(value, literal=True):
            return None
        return match.group("head") + lead, value, kind, tail
    if len(values) > 1:
        # a plain scalar folded over lines: a base64 body wrapped at 64 or 76 columns under `private_key:`
        value = "".join(values)
        if not all(_WRAPPED_PIECE.fullmatch(v) for v in values) or not _looks_random(value):
            return None  # a mapping, a list, prose, or lines that do not read as one random value
        return match.group("head") + lead, "\n".join(values), kind, tail
    after = _NEXT_INDENT.match(match.string, match.end())
    if _MAPPING_LINE.match(values[0]) or (after and len(after.group(1)) > column):
        return None  # a mapping, a list, a comment, or a value running on over more lines
    value, quote = _unquote(values[0])
    if not quote and (re.search(r"\s", value) or not _is_literal_secret(value, literal=False)):
        return None  # prose under a heading (`Password:` + `  then press enter`), a variable, a command
    if quote and not _is_literal_secret(value, literal=True):
        return None
    return match.group("head") + lead + quote, value, kind, quote + tail


def _session_value(value: str) -> bool:
    """A session cookie's value, however short: six characters or more with letters and digits (`Xk3J9a`,
    `a1b2c3d4e5`), eight with both cases, or sixteen of anything. A counter (`sid=1`, `session_count=3`), one
    lowercase word (`deleted`, `expired`, `true`) or a placeholder is not one."""
    if value.startswith("[REDACTED:") or not _is_literal_secret(value, literal=True) or value.lower() == "deleted":
        return False
    letters = any(c.isalpha() for c in value)
    if len(value) >= 6 and letters and any(c.isdigit() for c in value):
        return True
    return (len(value) >= 8 and any(c.isupper() for c in value) and any(c.islower() for c in value)
            ) or (len(value) >= 16 and (letters or value.isdigit()))


def _cookie(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    return (match.group("head"), secret, "cookie", "") if _session_value(secret) else None


def _session(match: re.Match[str]) -> Hit:
    """Outside a header the value also needs a digit and must not read as code (`session=session2`)."""
    secret = match.group("secret")
    if (not any(c.isdigit() for c in secret) or _IDENTIFIER.fullmatch(secret) or _CODE_REF.fullmatch(secret)
            or not _session_value(secret)):
        return None
    return match.group("head"), secret, "cookie", ""


def _sas_signature(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    return (match.group("head"), secret, "signature", "") if not secret.startswith("[REDACTED:") else None


_DOCKER_AUTH_KEYS = {"auth", "_auth"}
_RANDOM_WORD = _Lazy(r"[A-Za-z0-9+/=_]{16,}")
_TRAILING_OPERATORS = _Lazy(r"[;&|]+$")
_BASE64ISH = _Lazy(r"[A-Za-z0-9+/_-]{12,}={0,2}")


def _wrapped_value(match: re.Match[str]) -> Hit:
    """A secret key's value wrapped over lines with no prefix to follow: a quoted string whose closing quote is on
    a later line, every line between one unbroken run (`"client_secret": "abc` + newline + `def"`), or a YAML/INI
    value whose continuation lines sit deeper than the key's line (`private_key: <base64>` + indented base64
    lines: a plain scalar folded over lines). Taken whole when it reads as random, not as words."""
    key = match.group("key")
    raw = match.group("wrapped") or match.group("wrapbare")
    if not is_secret_key(key):
        return None
    quote = match.group("wq") or ""
    body = raw[len(quote) : len(raw) - len(quote)]
    pieces = [piece.strip() for piece in body.split("\n")]
    if not quote:
        line = match.string.rfind("\n", 0, match.start()) + 1
        indent = len(match.string[line : match.start()]) - len(match.string[line : match.start()].lstrip(" \t"))
        for piece in body.split("\n")[1:]:
            if len(piece) - len(piece.lstrip(" \t")) <= indent:
                return None  # the next key of the same mapping, not this value's rest
        if any(not (len(piece) >= 16 or _RANDOMISH.search(piece)) for piece in pieces[1:]):
            return None  # a word on the next line is not a wrapped random value
    if not _looks_random("".join(pieces)):
        return None
    return match.group("head") + quote, body, _secret_kind(key), quote


_RANDOMISH = _Lazy(r"[0-9A-Z+/=]")


def _assignment(match: re.Match[str]) -> Hit:
    # _ASSIGNMENT's match, not _ASSIGNMENT_LINE's, told by its groups (both compile on first use, behind a proxy)
    if "wrapped" in match.re.groupindex and (match.group("wrapped") is not None or match.group("wrapbare") is not None):
        hit = _wrapped_value(match)
        if hit is not None:
            return hit
        line = _ASSIGNMENT_LINE.match(match.string, match.start())
        hit = _assignment(line) if line is not None else None
        if hit is None:
            return None
        return hit[:3] + (hit[3] + match.string[line.end() : match.end()],)
    key = match.group("key")
    quoted = match.group("quoted") or match.group("paren")
    if key == "KEY" and match.group("sep") == "=":
        # A bare KEY names a loop variable or a cache key as often as a secret: taken when its value looks random.
        value = quoted[1:-1] if quoted and len(quoted) >= 2 else match.group("bare") or ""
        if not _RANDOM_WORD.fullmatch(value) or not _looks_random(value):
            return None
        quote = quoted[0] if quoted else ""
        return match.group("head") + (match.group("open") or "") + quote, value, "api_key", quote
    if not is_secret_key(key):
        # docker config and .npmrc keep base64 `user:password` under a bare `auth` / `_auth`
        value = quoted[1:-1] if quoted and len(quoted) >= 2 else match.group("bare") or ""
        if key.lower() not in _DOCKER_AUTH_KEYS or not _BASE64ISH.fullmatch(value) or not _looks_random(value):
            return None
        if quoted:
            return match.group("head") + (match.group("open") or "") + quoted[0], value, "auth", quoted[0]
        return match.group("head"), value, "auth", ""
    if quoted:
        parts = re.findall(r""""((?:[^"\\\n]|\\.)*)"|'([^'\n]*)'""", quoted)
        value = "".join(dq or sq for dq, sq in parts)
        if not _is_literal_secret(value, literal=True) or _is_auth_switch(key, value):
            return None
        quote = quoted[0]
        return match.group("head") + (match.group("open") or "") + quote, value, _secret_kind(key), quote
    value = match.group("bare")
    if _BLOCK_INDICATOR.fullmatch(value) or value in ("!!binary", "!!str"):
        return None  # `password: |`, `password: !!binary`: the value is on the next lines (`_next_line_value`)
    rest = ""
    env_line = bool(match.group("export")) or (
        match.group("sep") == "=" and re.fullmatch(r"[A-Z][A-Z0-9_]*", key) is not None
    )
    # A long flag's value (`--password=secret`) is data like an env-file line's, even when it is one plain word.
    flag_value = match.group("flag") == "--" and match.group("sep") == "="
    if not flag_value and match.group("sep") == "=" and key.lower() in ("password", "passwd", "pwd"):
        # the conninfo string around it: the same line, at most 200 characters either side
        start = max(match.string.rfind("\n", 0, match.start()) + 1, match.start() - 200)
        end = match.string.find("\n", match.end(), match.end() + 200)
        flag_value = bool(_CONNINFO.search(match.string, start, end if end >= 0 else match.end() + 200))
    if not env_line:
        # Outside an env file a bare value ends at punctuation, and inside a query string at the next parameter.
        in_query = match.string[match.start() - 1 : match.start()] in ("?", "&")
        value = re.match(r"[^,;}\]&]*" if in_query else r"[^,;}\]]*", value).group(0)
        rest = match.group("bare")[len(value) :]
    else:
        # `PGPASSWORD=x; psql`, `export X=y&& z`: the shell operator that ends the line's command is kept (inside
        # the value, `a;b` stays whole: an env file takes it literally).
        operators = _TRAILING_OPERATORS.search(value)
        if operators and operators.start():
            value, rest = value[: operators.start()], value[operators.start() :]
    literal = env_line or flag_value or bool(match.group("tag"))  # `password: !!binary X`: YAML data, tagged
    if not _is_literal_secret(value, literal=literal) or _is_auth_switch(key, value):
        return None
    return match.group("head"), value, _secret_kind(key), rest
