"""One pass of every rule over a text (`_scan`), and the helpers that limit each rule to the lines it can match;
base64 blobs are decoded and read again here."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from .plain import _PLAIN, _plain_matches, _plain_secret
from .rules import (
    Hit, _assignment, _auth_header, _bare_basic, _bearer, _code_secret, _conn_password, _cookie, _curl_user, _digest,
    _flag, _loose_value, _next_line_value, _pgpass, _ppk, _private_key, _sas_signature, _session, _short_p,
    _sql_password, _tool_value, _url_password
)
from .shapes import (
    _ASSIGNMENT, _AUTH_HEADER, _B64_BLOCK, _B64_LINE, _B64_RUN, _BARE_BASIC, _BEARER, _CODE_SHAPES, _CONN_PASSWORD,
    _CONTROL, _COOKIE, _COOKIE_DICT, _COOKIE_LINE, _COOKIE_PAIR, _CURL_COOKIE, _CURL_USER, _DIGEST, _FLAG, _NETRC,
    _NEXT_LINE, _NEXT_LINE_END, _PGPASS, _PGPASS_PORT, _PPK, _PRIVATE_KEY, _RCLONE, _RCLONE_PAIR, _SAS_SIGNATURE,
    _SESSION, _SET_COOKIE_CALL, _SHORT_P, _SQL_PASSWORD, _TOKEN_SHAPES, _TOOL_SHAPES, _URL_PASSWORD, _USER_PASSWORD,
    _mark, _token_re, _tool_re
)
from .wrapped import _wrapped_spans


def _scan(text: str, found: list[tuple[str, str]], in_context: list[tuple[str, str, str, int]] | None = None,
          depth: int = 0, *, decode: bool = True) -> tuple[str, int]:
    """One pass of every rule over `text`; appends (secret, kind) for each replacement to `found`, and to
    `in_context` (a JSON-decoded reading, `depth` times) the secret with what its rule read before it. `decode`:
    base64 blobs are decoded and read too (not inside a decoded blob: one level is enough)."""
    count = 0

    def sub(pattern: re.Pattern[str], rule: Callable[[re.Match[str]], tuple[str, str, str, str] | None],
            source: str, matches: Iterable[re.Match[str]] | None = None) -> str:
        def one(match: re.Match[str]) -> str:
            nonlocal count
            hit = rule(match)
            if hit is None:
                return match.group(0)
            head, secret, kind, tail = hit
            count += 1
            found.append((secret, kind))
            if in_context is not None and head.strip():
                in_context.append((head, secret, kind, depth))
            return head + _mark(kind) + tail

        if matches is None:
            return pattern.sub(one, source)
        out, done = [], 0
        for match in matches:  # in order, not overlapping
            out += [source[done : match.start()], one(match)]
            done = match.end()
        return "".join(out) + source[done:]

    def unwrap(pattern: re.Pattern[str], triggers: list[str], kind: str, source: str) -> str:
        nonlocal count
        out, done = [], 0
        for start, end, secret in _wrapped_spans(source, triggers, pattern):
            out += [source[done:start], _mark(kind)]
            done, count = end, count + 1
            found.append((secret, kind))
        return "".join(out) + source[done:] if out else source

    def base64_runs(source: str) -> str:
        """Each base64 run that decodes to a secret, and each blob wrapped at 64 or 76 columns (`base64`'s own
        output, a PEM-style body) read as one: a secret that straddles two of its lines is whole only joined."""
        nonlocal count
        out, done = [], 0
        for run in _B64_RUN.finditer(source):
            if run.start() < done:
                continue
            start, end, blob = run.start(), run.end(), run.group("secret")
            if blob[0] in "nrt" and source[start - 1 : start] == "\\":
                start, blob = start + 1, blob[1:]  # after a JSON string's `\n`, the run starts past its `n`
            if len(blob) not in (64, 76):
                if blob.islower() or blob.isupper():  # a digest, a path, a constant: one case, not base64 of text
                    continue
            else:  # a wrapped blob's first line when alone on its line (indentation: at most 80 characters back)
                window = source[max(0, start - 80) : start]
                escaped = window.rfind("\\n")
                lead = window[max(window.rfind("\n") + 1, escaped + 2 if escaped >= 0 else 0) :]
                lines = [blob] if not lead.strip(" \t") else []
                while lines:
                    nxt = _B64_LINE.match(source, end)
                    if nxt is None or nxt.group("lead") != lead or len(nxt.group("run")) > len(blob):
                        break
                    lines.append(nxt.group("run"))
                    end = nxt.end()
                    if len(nxt.group("run")) < len(blob):
                        break  # the last line
                if len(lines) > 1:
                    blob = "".join(lines)
            kind = _decoded_secret(blob)
            if kind is None and end != run.end():
                blob, end = source[start : run.end()], run.end()
                kind = _decoded_secret(blob)
            if kind is not None:
                out += [source[done:start], _mark(kind)]
                done, count = end, count + 1
                found.append((blob, kind))
        return "".join(out) + source[done:] if out else source

    # A rule whose pattern cannot match without some substring is skipped where the text lacks it: most texts reef
    # redacts are short (a run's paths, record keys) and a skipped pattern is never compiled (`shapes._Lazy`).
    if "PRIVATE KEY" in text:
        text = sub(_PRIVATE_KEY, _private_key, text)
    if "://" in text:
        text = sub(_URL_PASSWORD, _url_password, text)
    lines = "\n" in text
    for kind, triggers, shape in _TOKEN_SHAPES:
        present = [t for t in triggers if t in text]
        if present:
            if lines:  # before the one-line match, which would take a wrapped token's first line alone
                text = unwrap(_token_re(shape), present, kind, text)
            text = sub(_token_re(shape), lambda m, kind=kind: ("", m.group(0), kind, ""), text)
    if _may_name_authorization(text) and (not text.isascii() or "digest" in text.lower()):  # any case: DiGEST
        text = sub(_DIGEST, _digest, text)
    if _may_name_authorization(text):
        text = sub(_AUTH_HEADER, _auth_header, text)
    if not text.isascii() or "bearer" in text.lower():  # ignoring case, which only ASCII text lowers exactly
        text = sub(_BEARER, _bearer, text)
    if "asic" in text or '"auth"' in text:
        text = sub(_BARE_BASIC, _bare_basic, text, _line_matches(_BARE_BASIC, text, ("Basic", "basic", '"auth"')))
    if ";" in text and (not text.isascii() or "password" in text.lower() or "pwd" in text.lower()):  # PaSsWoRd
        text = sub(_CONN_PASSWORD, _conn_password, text,
                   _line_matches(_CONN_PASSWORD, text, ("password", "pwd"), also=";", fold=True))
    if (":" in text or "=" in text) and _names_a_secret(text):
        text = sub(_ASSIGNMENT, _assignment, text)
    if "-" in text:
        if " " in text or "\t" in text:
            text = sub(_FLAG, _flag, text)
        if "-p" in text or "redis-cli" in text:  # `-p` also covers redis-cli's `--pass`
            text = sub(_SHORT_P, _short_p, text, _line_matches(_SHORT_P, text, ("-p", "-a")))
        if "-u" in text:
            text = sub(_CURL_USER, _curl_user, text, _line_matches(_CURL_USER, text, ("-u",)))
    for needles, shape in _TOOL_SHAPES:
        if any(needle in text for needle in needles):
            pattern = _tool_re(shape)
            for _ in range(3):  # a second password in the same command (`ssh-keygen -P old -N new`)
                before = count
                text = sub(pattern, _tool_value, text, _line_matches(pattern, text, needles))
                if count == before:
                    break
    for needles, pattern in _CODE_SHAPES:
        if any(needle in text for needle in needles):
            text = sub(pattern, _code_secret, text, _line_matches(pattern, text, needles))
    text = sub(_PLAIN, _plain_secret, text, _plain_matches(text))  # "my password is X": after the key=value rules
    if "rclone" in text:
        text = sub(_RCLONE_PAIR, _tool_value, text, _rclone_matches(text))
    if "assword" in text or "ASSWORD" in text or "dentified" in text or "DENTIFIED" in text:
        text = sub(_SQL_PASSWORD, _sql_password, text)
    if "password" in text:
        text = sub(_NETRC, _loose_value, text)
    if ":" in text:
        text = sub(_PGPASS, _pgpass, text, _pgpass_matches(text))
    if "Private-Lines:" in text:
        text = sub(_PPK, _ppk, text)
    if "\n" in text:
        text = sub(_NEXT_LINE, _next_line_value, text, _next_line_matches(text))
    if "ookie" in text or "OOKIE" in text:
        text = _COOKIE_LINE.sub(lambda m: m.group("head") + sub(_COOKIE, _cookie, m.group("value")), text)
    if "-b" in text or "--cookie" in text:  # curl's cookie flag: its value is a cookie line
        parts, done = [], 0
        for match in _line_matches(_CURL_COOKIE, text, ("-b", "--cookie")):
            parts += [text[done : match.start("value")], sub(_COOKIE, _cookie, match.group("value"))]
            done = match.end()
        text = "".join(parts) + text[done:] if parts else text
    text = sub(_SESSION, _session, text,
               _line_matches(_SESSION, text, ("sess", "Sess", "SESS", "sid=", "Sid=", "SID=")))
    if "ookie" in text:
        parts, done = [], 0
        for match in _line_matches(_COOKIE_DICT, text, ("ookies",)):
            parts += [text[done : match.start("body")], sub(_COOKIE_PAIR, _cookie, match.group("body"))]
            done = match.end("body")
        text = "".join(parts) + text[done:] if parts else text
        text = sub(_SET_COOKIE_CALL, _cookie, text, _line_matches(_SET_COOKIE_CALL, text, ("ookie(", "ookies.set(")))
    if "sig=" in text:
        text = sub(_SAS_SIGNATURE, _sas_signature, text)
    if decode:  # last: a blob the rules above took (`password: <base64>`) keeps the kind they gave it
        if "!!binary" in text:
            text = sub(_B64_BLOCK, _b64_secret, text)
        text = base64_runs(text)
    return text, count


# The words _ASSIGNMENT's key must hold, ignoring case ("pass" covers "passphrase"). Its key is ASCII, so the word is
# too, and lower() keeps an ASCII word whole wherever it stands: a text without one in its lowered form has no match.
_SECRET_KEY_WORDS = ("key", "token", "secret", "credential", "pwd", "pass", "auth", "pat")


def _may_name_authorization(text: str) -> bool:
    """`authorization` and a `:` or `=`, as _AUTH_HEADER and _DIGEST need them: ignoring case, which lower() does
    exactly only for ASCII text (`ı` matches `i` there), so any other text may hold it."""
    return (":" in text or "=" in text) and (not text.isascii() or "authorization" in text.lower())


def _names_a_secret(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _SECRET_KEY_WORDS)


def _rclone_matches(text: str) -> Iterator[re.Match[str]]:
    for command in _RCLONE.finditer(text):
        yield from _RCLONE_PAIR.finditer(text, command.start(), command.end())


def _pgpass_matches(text: str) -> Iterator[re.Match[str]]:
    done = 0
    for port in _PGPASS_PORT.finditer(text):
        low = max(0, port.start() - 256)  # a host name is at most 253 characters: the scan back stays short
        start = max(text.rfind(c, low, port.start()) for c in " \t\n'\"") + 1
        if start == 0 and low:
            continue
        if start >= done:
            match = _PGPASS.match(text, start)
            if match is not None:
                yield match
                done = match.end()


def _decoded_secret(blob: str) -> str | None:
    """The kind of secret base64 `blob` decodes to (text holding a secret, or `user:password`), or None."""
    import binascii

    data = "".join(blob.split()).rstrip("=")
    if len(data) % 4 == 1 or data.islower() or data.isupper():
        return None
    try:
        text = binascii.a2b_base64(data + "=" * (-len(data) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    if len(text) < 8 or _CONTROL.search(text):
        return None
    if _USER_PASSWORD.fullmatch(text.strip()):
        return "password"
    found: list[tuple[str, str]] = []
    _scan(text, found, decode=False)
    return found[0][1] if found else None


def _b64_secret(match: re.Match[str]) -> Hit:
    kind = _decoded_secret(match.group("secret"))
    return None if kind is None else (match.group("head") if "head" in match.re.groupindex else "",
                                      match.group("secret"), kind, "")


def _line_matches(pattern: re.Pattern[str], text: str, needles: tuple[str, ...],
                  also: str = "", fold: bool = False) -> Iterator[re.Match[str]]:
    """`pattern`'s matches, in order, searched only on the lines that hold one of `needles`: for a pattern that
    never crosses a line break and cannot match without a needle, the same matches as `pattern.finditer(text)`,
    without trying the pattern at every position of every other line (a lookbehind still sees the line before).
    `also`: a string the pattern needs on the same line too. `fold`: lowercase needles found in any case (only
    ASCII text lowers in place; any other text is searched whole)."""
    hay = text
    if fold:
        if not text.isascii():
            yield from pattern.finditer(text)
            return
        hay = text.lower()
    lines = set()
    for needle in needles:
        at = hay.find(needle)
        while at >= 0:
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            start = text.rfind("\n", 0, at) + 1
            if not also or hay.find(also, start, end) >= 0:
                lines.add((start, end))
            at = hay.find(needle, end)
    for start, end in sorted(lines):
        yield from pattern.finditer(text, start, end)


def _next_line_matches(text: str) -> Iterator[re.Match[str]]:
    """The `_NEXT_LINE` matches whose value is a secret. One the rule declines does not hide the lines under it:
    `auth:` + `  api_key:` + `    X` is a mapping under `auth` and a value under `api_key`."""
    done = 0
    for end in _NEXT_LINE_END.finditer(text):
        line = text.rfind("\n", 0, end.start()) + 1
        if line >= done:
            match = _NEXT_LINE.match(text, line)
            if match is None:  # a JSON string's first line, decoded: the key starts after the string's quote
                quote = text.rfind('"', line, end.start())
                match = _NEXT_LINE.match(text, quote + 1) if quote >= 0 else None
            if match is not None and _next_line_value(match) is not None:
                yield match
                done = match.end()
