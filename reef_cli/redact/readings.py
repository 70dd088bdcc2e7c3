"""The readings of one text: with invisible characters dropped and odd spaces made plain, without colour codes,
JSON-unescaped, percent-decoded; a secret found in any of them is removed from the text in every form it takes."""

from __future__ import annotations

import re
from collections.abc import Iterator

from .scan import _scan
from .shapes import _ANSI, _ECHO_MIN, _JSON_CHARS, _JSON_ESCAPE, _Lazy, _URL_ESCAPE, _mark


# Characters that render as nothing (zero-width space, non-joiner and joiner, word joiner, the invisible operators,
# a byte-order mark, a soft hyphen) and spaces other than the plain one (no-break U+00A0 and U+202F, the en/em/thin/
# hair spaces U+2000-U+200A, U+205F, the ideographic U+3000), raw or as a JSON `\uXXXX` escape, or one escaped again
# (`\\u200b`, JSON in a JSON string: the backslashes double with each level, and all of them go). Pasted
# from a chat, a web page or a PDF they sit inside a token (`ghp_abc<U+200B>def`) or beside a key (`password:<NBSP>x`)
# and hide it from every pattern, while a terminal, a YAML loader or `.strip()` gives the secret back whole.
_INVISIBLE = "\u200b-\u200d\u2060-\u2064\ufeff\u00ad"
_SPACES = "\u00a0\u202f\u2000-\u200a\u205f\u3000"  # no-break, en/em/thin/hair, figure, ideographic spaces
_HIDDEN = _Lazy(f"[{_INVISIBLE}{_SPACES}]|\\\\+u(?i:200[0-9a-d]|206[0-4]|feff|00ad|00a0|202f|205f|3000)")
_HIDDEN_SPACE = _Lazy(f"[{_SPACES}]|\\\\+u(?i:200[0-9a]|00a0|202f|205f|3000)")
_MARK_RE = _Lazy(r"\[REDACTED:[a-z_]+\]")


def _redact_hidden(text: str) -> tuple[str, int]:
    """The lines holding an invisible character or a no-break space (and the line before each, where a value's key
    may be; and, after a line that ends at its key or under one, the indented lines of its value) read with the
    invisible characters dropped and the no-break spaces made plain, as every other reading is (`_redact_views`);
    each secret found there is removed from the text from its first character to its last, the invisible
    characters inside it with it. A secret is what a terminal shows, so the whole token, invisible characters
    included, is the secret: no piece of it is left on either side of one."""
    spans: list[list[int]] = []
    for hit in _HIDDEN.finditer(text):
        if spans and hit.start() < spans[-1][1]:
            continue
        line = text.rfind("\n", 0, hit.start()) + 1
        start = text.rfind("\n", 0, line - 1) + 1 if line else 0
        end = text.find("\n", hit.start())
        end = len(text) if end < 0 else end
        if any(_AWAITS_VALUE.search(_HIDDEN.sub("", text[a:b]).rstrip()) for a, b in ((line, end), (start, line))):
            for _ in range(500):  # a block scalar's lines under `password:<NBSP>|`
                if text[end + 1 : end + 2] not in (" ", "\t"):
                    break
                end = text.find("\n", end + 1)
                end = len(text) if end < 0 else end
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    view = "".join(_HIDDEN.sub(_plain, text[start:end]) + "\n" for start, end in spans)
    out, count = _redact_views(view)
    if not count:
        return text, 0
    # where each of the view's characters starts and ends in the text
    starts: list[int] = []
    ends: list[int] = []
    for start, end in spans:
        at = start
        for hit in _HIDDEN.finditer(text, start, end):
            starts.extend(range(at, hit.start()))
            ends.extend(range(at + 1, hit.start() + 1))
            if _HIDDEN_SPACE.fullmatch(hit.group(0)):
                starts.append(hit.start())
                ends.append(hit.end())
            at = hit.end()
        starts.extend(range(at, end + 1))
        ends.extend(range(at + 1, end + 2))
    parts, done = [], 0
    for begin, finish, marks in _replaced(view, out):
        parts += [text[done : starts[begin]], marks]
        done = ends[finish - 1]
    return "".join(parts) + text[done:], count


def _plain(hit: re.Match[str]) -> str:
    return " " if _HIDDEN_SPACE.fullmatch(hit.group(0)) else ""


_AWAITS_VALUE = _Lazy(r"[:=|>][1-9+-]{0,2}$")  # a key whose value is on the lines after it


def _replaced(before: str, after: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, marks): the spans of `before` that `after` (the same text with secrets replaced by marks, and
    nothing else changed) replaced, in order. The text after the last mark is the end of both; the text after any
    other mark, up to the next, is found again in `before`: the secret ended where it starts. Marks side by side
    make one span."""
    i = j = 0
    marks = list(_MARK_RE.finditer(after))
    k = 0
    while k < len(marks):
        mark = marks[k]
        i += mark.start() - j
        if before.startswith(mark.group(0), i):  # a mark the text held already
            i, j, k = i + len(mark.group(0)), mark.end(), k + 1
            continue
        group = mark.group(0)
        while k + 1 < len(marks) and marks[k + 1].start() == marks[k].end():
            k += 1
            group += marks[k].group(0)
        j = marks[k].end()
        if k + 1 < len(marks):
            end = before.find(after[j : marks[k + 1].start()], i)
        else:  # the last: what follows it runs to the end of both
            end = len(before) - (len(after) - j)
        if end <= i:
            return  # not a plain replacement: leave the text to the readings after this one
        yield i, end, group
        i, k = end, k + 1


# A backslash ending a line continues a shell command on the next: a flag and its value can sit on two lines.
_CONTINUATION = _Lazy(r"[ \t]*\\\r?\n[ \t]*")


def _redact_colours(text: str) -> tuple[str, int]:
    if "\x1b" in text:
        plain = _ANSI.sub("", text)
        if plain != text:
            out, count = _redact_views(plain)
            # nothing in the text between the codes: the codes themselves may hold one (an OSC 8 hyperlink's URL)
            return (out, count) if count else _redact_views(text)
    return _redact_views(text)


def _redact_views(text: str) -> tuple[str, int]:
    found: list[tuple[str, str]] = []
    out, count = _scan(text, found)
    if "\\" in text:
        view = _lines_with(_JSON_ESCAPE, text)
        in_context: list[tuple[str, str, str, int]] = []
        for depth in range(1, 4):  # JSON in a JSON string in a JSON string
            if not view:
                break
            view = _JSON_ESCAPE.sub(_json_unescape, view)
            _scan(view, found, in_context, depth, decode=False)  # base64 reads the same raw
            view = _lines_with(_JSON_ESCAPE, view)
        if in_context:
            out, count = _echo_in_context(out, in_context, count)
    if "%" in text:
        view = _lines_with(_URL_ESCAPE, text)
        if view:
            from urllib.parse import unquote, unquote_plus

            view = unquote(view)
            _scan(view, found)
            if _URL_ESCAPE.search(view):  # a URL inside a query parameter
                _scan(unquote_plus(view), found)
    if found:
        out, count = _echo(out, found, count)
    return out, count


def _lines_with(pattern: re.Pattern[str], text: str) -> str:
    """Only the lines an encoding touches are decoded and scanned again: the rest was read plain already."""
    return "\n".join(line for line in text.split("\n") if pattern.search(line))


def _json_unescape(match: re.Match[str]) -> str:
    esc = match.group(0)[1:]
    if esc[0] == "u":
        return chr(int(esc[1:], 16))
    return _JSON_CHARS.get(esc, esc)


def _echo_in_context(text: str, in_context: list[tuple[str, str, str, int]], count: int) -> tuple[str, int]:
    """A secret found in a JSON-decoded reading, put back in the text with what its rule read before it (`-p"`,
    `"password": "`, `mysql -h db\\n... -p`), escaped as many times as it was decoded: a one-word password
    (`mysql -p\\"hunter\\"` in a tool call's JSON arguments) is too common a word to remove everywhere, but beside
    its flag or key it is the secret."""
    import json

    for head, value, kind, depth in sorted(set(in_context), key=lambda f: -len(f[0]) - len(f[1])):
        head_form, value_form = head, value
        for _ in range(depth):
            head_form, value_form = json.dumps(head_form)[1:-1], json.dumps(value_form)[1:-1]
        hits = text.count(head_form + value_form)
        if hits:
            text = text.replace(head_form + value_form, head_form + _mark(kind))
            count += hits
    return text, count


def _echo(text: str, found: list[tuple[str, str]], count: int) -> tuple[str, int]:
    """Remove each found secret wherever else it appears — raw, JSON-escaped or percent-encoded: a password printed
    once after `--password` and again on its own is the same secret."""
    import json
    from urllib.parse import quote, quote_plus

    seen = set()
    for value, kind in sorted(found, key=lambda f: -len(f[0])):
        if len(value) < _ECHO_MIN or value.isalpha() or value in seen or value.startswith("[REDACTED:"):
            continue
        seen.add(value)
        forms = {value, json.dumps(value)[1:-1], quote(value, safe=""), quote(value), quote_plus(value)}
        for form in sorted(forms, key=len, reverse=True):
            hits = text.count(form) if len(form) >= _ECHO_MIN else 0
            if hits:
                text = text.replace(form, _mark(kind))
                count += hits
    return text, count
