"""Secrets said in plain words: "my password is Hunter5Secret", "pw=Hunter5Secret", "the api key: Zx8kP2mQ9vL4",
"credentials are admin/Hunter5Secret", "비밀번호는 Hunter5Secret" — a value after a keyword that names a secret,
in feedback, a chat turn or a note, where no key=value syntax or provider prefix gives it away.

The rule, as a demanding user would have it: the keyword alone proves nothing ("the password is required",
"password reset link", "token is expired", "the secret is to test early"), so the value after it is taken only
when it reads as a credential, not as a word, code or a placeholder:

- the keyword: password, passwd, passphrase, passcode, pass, pwd, pw, token, api key, access key, secret key,
  client secret, secret, credentials, creds (any case; whole words, so `passwords`, `token_type`, `bypass` are
  not); in Korean 비밀번호, 비번, 암호, 패스워드, 토큰, 시크릿, with or without a particle (는/은/이/가/을/를/도);
- then `is`/`are`/`was` (optionally `now`, `still`, `set to`, `changed to`), `set to`/`changed to`, `=`, `:`,
  ` - `, `->`, or, after password/passwd/passphrase/passcode, the api/access/secret keys and the Korean words, just
  a space ("passwd Hunter5Secret"; not after `token` or 토큰: a log names a token by its id, "revoked token 3f9a12bc");
  optionally "for X"/"of X" between ("the password for root is X");
- then the value: one run of printable ASCII (a Korean ending such as 입니다 ends it), optionally quoted or in
  backticks or `**`, trailing sentence punctuation (`.,;:` and closing brackets) not included.

The value is a credential when it is 6 to 200 characters and
- has letters and digits ("hunter2x", "abc123def456", "Hunter5Secret"), or
- has no digits but an upper-case letter after a lower-case one, 8 characters or more ("CorrectHorse"), or
- has letters and, inside it (not first or last), a symbol a password uses (`!@#$%^&*+=?~|`): "P@ssword",
  "Pa$$word" (not `anonymous@`, `hello!`, `cache\\.$`), or
- is 16 or more letters of one case (a passphrase run together: "correcthorsebattery"), or
- after a password keyword only, is 6 or more digits ("123456");

and it is none of: a placeholder or mask (`<...>`, `***`, `xxx`, `${X}`, `%s`, `{x}`), a value that says none
(`None`, `null`, `true`, `required`...), code (brackets or parentheses: `getpass()`, `os.environ["PW"]`,
`request.form['pw']`; a lower-case dotted name `request.form`, `db01.example.com`; a snake_case or CONSTANT_CASE
name `new_password`, `DB_PASSWORD`), a shell or template reference (`$PW`, `%(pw)s`, a backtick command), a path
or URL, an e-mail address, a version, date, time or port (`v1.2.3`, `2026-12-01`, `12:30`), a file name
(`token.json`), a unit or a hash algorithm's name (`3600ms`, `sha256`, `base64`, `aes256`), lower-case words joined
with hyphens or slashes (`sha256-hashed`, `read/write`), or text already redacted.

"credentials are user/pass" keeps the user: `admin/Hunter5Secret` loses `Hunter5Secret`; a default account's
pair (`admin/admin`, `root/toor`, `pi/raspberry`) goes too, though its password alone would read as a word.

Known misses, by choice: a password that is one plain word ("my password is sunshine"), a lower-case passphrase
shorter than 16 letters, and plural keywords ("passwords are hunter2 and ..."): each reads the same as prose.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .keys import _CODE_REF, _NOT_SECRET_VALUES, _PATH, _PLACEHOLDER
from .shapes import _Lazy


_EN_KEY = (r"(?i:passwd|password|passphrase|passcode|pass|pwd|pw|token|api[ _-]?key|access[ _-]?key"
           r"|secret[ _-]?key|client[ _-]?secret|secret|credentials|creds)")
_KO_KEY = r"비밀번호|비번|암호|패스워드|토큰|시크릿"
# keywords after which a plain space is enough to separate the value ("passwd Hunter5Secret"); not `token`: logs
# name a token by its id or prefix ("revoked token 3f9a12bc", "token ghp_kNta... (truncated)")
_SPACE_OK = {"passwd", "password", "passphrase", "passcode", "apikey", "accesskey", "secretkey", "비밀번호", "비번", "암호",
             "패스워드", "시크릿"}
_PLAIN = _Lazy(
    r"(?P<head>(?:(?<![\w$.@-])(?P<key>" + _EN_KEY + r")(?![\w-])|(?P<ko>" + _KO_KEY + r"))"
    r"(?:[ \t]+(?i:for|of)[ \t]+(?:(?i:the|my|our|your)[ \t]+)?[^\s:=\"'`]{1,40}?)?"  # the password for root
    r"(?P<sep>"
    r"[ \t]*(?::=|=>|->|→|=|:)(?![=:/])[ \t]*"
    r"|[ \t]+(?i:(?:is|are|was|were)(?:[ \t]+(?:now|still|just))?(?:[ \t]+(?:set|changed)[ \t]+to)?"
    r"|(?:set|changed|reset|updated)[ \t]+to)[ \t]+"
    r"|[ \t]+[-–—][ \t]+"
    r"|(?(ko)[은는이가을를도][ \t]*(?:[:=][ \t]*)?|(?!))"
    r"|(?P<space>[ \t]+)"
    r")"
    r"(?P<open>\*\*|[\"'`“‘])?)"
    r"(?P<secret>[!-~]+)"
)
# Where a keyword can start: each needle, and how far before it the keywords holding it start (`ass` is 1 into
# `password`; `key` is 3, 4, 6 or 7 into `apikey`, `api key`, `accesskey`, `access key`/`secret key`). Finding
# the needles (a substring search) and trying the pattern only there costs a fraction of searching with it.
_NEEDLES: dict[str, tuple[int, ...]] = {
    "ass": (1,), "ASS": (1,), "pw": (0,), "PW": (0,), "Pw": (0,), "oken": (1,), "OKEN": (1,),
    "ecret": (8, 7, 1), "ECRET": (8, 7, 1), "redential": (1,), "REDENTIAL": (1,), "reds": (1,), "REDS": (1,),
    "key": (7, 6, 4, 3), "Key": (7, 6, 4, 3), "KEY": (7, 6, 4, 3),
    "비밀번호": (0,), "비번": (0,), "암호": (0,), "패스워드": (0,), "토큰": (0,), "시크릿": (0,),
}

_CLOSE = {"**": "**", '"': '"', "'": "'", "`": "`", "“": "”", "‘": "’"}
_TRAILING = ".,;:)]}>\"'`*"
# Where a value ends before its text does: an HTML entity or tag (`correct.&quot;`, `X</p>`), or a JSON escape
# (`X\n`, `X\"`, `X\\"` in a string escaped twice): markup around the value, not the value's; the JSON-decoded
# reading sees what the escape stands for.
_CUT = _Lazy(r"&(?:quot|apos|lt|gt|amp|nbsp|#\d+|#x[0-9a-fA-F]+);|</?[A-Za-z]|\\+(?:[nrt\"']|u[0-9a-fA-F]{4})")
_SYMBOL = _Lazy(r"[!@#$%^&*+=?~|]")
_CODE = _Lazy(r"[()\[\]{}<>]|://|^[$%`\\]|^!!")  # also an escape (`\n...`) or a YAML tag (`!!binary`)
_IDENT = _Lazy(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_EMAIL = _Lazy(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_VERSION = _Lazy(r"[vV]?\d+(?:\.\d+)+(?:[-+.][\w.]*)?|[0-9.:/-]+")
_FILE = _Lazy(r"\w\.(?i:py|js|ts|md|txt|json|ya?ml|toml|sh|go|rs|java|c|h|cc|cpp|rb|env|pem|key|crt|log|cfg"
                   r"|ini|conf|html|css|csv|xml|lock|gz|zip)\b|::")  # a file name anywhere in it, a code scope
_UNIT_OR_ALGORITHM = _Lazy(
    r"\d+(?:ms|us|ns|s|m|h|d|x|k|kb|mb|gb|px|st|nd|rd|th|bit|bits|byte|bytes|chars?)"
    r"|(?:sha|sha-|md|hs|rs|es|ps|aes|aes-|rsa|rsa-|ed|x|utf-?|base|ipv|http|oauth|pbkdf|argon|p|tls|ssl|v)\d{1,5}"
    r"(?:id|[a-z])?", re.IGNORECASE)
_JOINED = _Lazy(r"[a-z0-9]+(?:[-/'][a-z0-9]+)+")

_DEFAULT_ACCOUNTS = {"admin", "administrator", "root", "guest", "test", "demo", "postgres", "sa", "pi", "ubuntu",
                     "oracle", "elastic", "user1", "admin1"}
_NOT_PASSWORDS = _NOT_SECRET_VALUES | {"pass", "password", "passwd", "pwd", "secret", "token", "changeme"}


def _words_joined(value: str) -> bool:
    """Lower-case words, numbers and algorithm names joined by hyphens or slashes: `sha256-hashed`, `read/write`,
    `don't` (not `hunter2-secret`: `hunter2` is none of those)."""
    return bool(_JOINED.fullmatch(value)) and all(
        part.isalpha() or part.isdigit() or _UNIT_OR_ALGORITHM.fullmatch(part) for part in re.split(r"[-/']", value))


def _compact(key: str) -> str:
    return key.lower().replace(" ", "").replace("_", "").replace("-", "")


def _kind(compact: str) -> str:
    if compact in ("token", "토큰"):
        return "token"
    if compact.endswith("key"):
        return "api_key"
    if compact in ("secret", "clientsecret", "시크릿"):
        return "secret"
    return "password"


def _credential(value: str, *, password: bool) -> bool:
    """Does this value read as a credential rather than a word, code, a placeholder or a number? (The module's
    docstring has the rule.) Its shape first, with string methods: most values after a keyword are one word."""
    if not 6 <= len(value) <= 200:
        return False
    if value.isdigit():
        return password
    letters = any(c.isalpha() for c in value)
    if not letters:
        return False
    if value.isalpha():
        if value.islower() or value.isupper():
            if len(value) < 16:
                return False  # a word; 16 letters or more, a passphrase run together
        elif not (len(value) >= 8 and any(c.isupper() and value[i - 1].islower() for i, c in enumerate(value) if i)):
            return False  # `Required`, not `CorrectHorse`
    elif not (any(c.isdigit() for c in value) or _SYMBOL.search(value, 1, len(value) - 1)):
        return False  # letters and punctuation only: `e.g.`, `re-used`; a symbol at an edge: `anonymous@`
    if (value.lower() in _NOT_PASSWORDS or _PLACEHOLDER.fullmatch(value) or _CODE.search(value)
            or _PATH.fullmatch(value) or _IDENT.fullmatch(value) or _EMAIL.fullmatch(value)
            or _VERSION.fullmatch(value) or _FILE.search(value) or _UNIT_OR_ALGORITHM.fullmatch(value)
            or _words_joined(value) or "xxx" in value.lower()):
        return False
    if _CODE_REF.fullmatch(value) and (value.islower() or not any(c.isdigit() for c in value)):
        return False  # `request.form`, `db01.example.com`, `config.Password`
    return True


def _plain_secret(match: re.Match[str]) -> tuple[str, str, str, str] | None:
    key = match.group("key") or match.group("ko")
    compact = _compact(key)
    if match.group("space") is not None and compact not in _SPACE_OK:
        return None  # `pass 2 of 3`, `pw hash`, `secret sauce`: a space alone after these says nothing
    whole = match.group("secret")
    cut = _CUT.search(whole)
    raw = whole[: cut.start()] if cut else whole
    rest = whole[len(raw) :]
    opened = match.group("open") or ""
    value, tail = raw, ""
    if opened:
        closing = _CLOSE[opened]
        end = raw.find(closing)
        if end <= 0:
            return None  # an open quote with no close on the value: prose quoting something
        value, tail = raw[:end], raw[end:]
    else:
        stripped = value.rstrip(_TRAILING)
        value, tail = stripped, raw[len(stripped) :]
    password = _kind(compact) == "password" and compact not in ("credentials", "creds")
    if compact in ("credentials", "creds"):
        user, sep, secret = value.partition("/") if "/" in value else value.partition(":")
        if sep and user and secret:
            if _credential(secret, password=True) or (
                    user.lower() in _DEFAULT_ACCOUNTS and len(secret) >= 4 and secret.lower() not in _NOT_PASSWORDS
                    and not _CODE.search(secret)):
                return match.group("head") + user + sep, secret, "password", tail + rest
            return None
    if not _credential(value, password=password):
        return None
    return match.group("head"), value, _kind(compact), tail + rest


def _plain_matches(text: str) -> Iterator[re.Match[str]]:
    """`_PLAIN`'s matches that `_plain_secret` takes, in order, not overlapping: tried only where a keyword can
    start (`_NEEDLES`), the leftmost first (`client secret` before `secret`)."""
    starts = set()
    for needle, offsets in _NEEDLES.items():
        at = text.find(needle)
        while at >= 0:
            starts.update(at - offset for offset in offsets if at >= offset)
            at = text.find(needle, at + 1)
    done = 0
    for start in sorted(starts):
        if start < done:
            continue
        match = _PLAIN.match(text, start)
        if match is not None and _plain_secret(match) is not None:
            yield match
            done = match.end()
