"""Provider tokens wrapped over lines (a terminal or formatter breaking them at a column, a shell continuation):
found whole, their line breaks with them."""

from __future__ import annotations

import re

from .shapes import _Lazy, _TOKEN_SHAPES, _token_re


# A token wrapped over lines (a terminal or a formatter breaking it at a column, a shell command continued with a
# backslash): its line ends inside a run of token characters and the next line, after indentation, runs on.
_RUN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+/=:~-")
_RUN = _Lazy(r"[A-Za-z0-9_.+/=:~-]*")
_WRAP = _Lazy(r"\\?\r?\n[ \t]*(?=[A-Za-z0-9_.+/=-])")
_WRAP_LINES = 32  # a 2,500-character token at 80 columns
_WRAP_COLUMN = 40  # a line this long may have been broken at a column
_LINE_REST = _Lazy(r"[\"',;)\]}> \t\r]*(?:\n|$)")


def _wrapped_spans(text: str, triggers: list[str], pattern: re.Pattern[str]) -> list[tuple[int, int, str]]:
    """(start, end, token) of each `pattern` token split over lines in `text`, in order, not overlapping."""
    spans: list[tuple[int, int, str]] = []
    for trigger in triggers:
        at = text.find(trigger)
        while at >= 0:
            span = _wrapped_at(text, at, trigger, pattern)
            if span is not None:
                spans.append(span)
            at = text.find(trigger, span[1] if span is not None else at + 1)
    spans.sort(key=lambda span: (span[0], -span[1]))
    return [span for i, span in enumerate(spans) if not i or span[0] >= spans[i - 1][1]]


def _wrapped_at(text: str, at: int, trigger: str, pattern: re.Pattern[str]) -> tuple[int, int, str] | None:
    """(start, end, the token joined) in `text` of a `pattern` token that starts in the run holding `text[at]` and
    runs on past the run's line break; None when there is none. The next line joins when the token is not complete
    without it, or when the break is a backslash-newline; a token that is already complete at the break takes the
    next line only when that line holds nothing but a random-looking run and the first line is long enough to have
    been wrapped."""
    end = _RUN.match(text, at).end()
    if end - at < len(trigger) + 4:
        return None  # `grep ghp_` + newline: a prefix alone is not a wrapped token
    brk = _WRAP.match(text, end)
    if brk is None:
        return None
    start = at
    while start and text[start - 1] in _RUN_CHARS:
        start -= 1
    pieces = [(start, end)]
    joined = text[start:end]
    first = len(joined)
    while brk is not None and len(pieces) < _WRAP_LINES:
        nxt = brk.end()
        nend = _RUN.match(text, nxt).end()
        piece = text[nxt:nend]
        if trigger in piece:
            break  # the next token, not this one's rest
        if text[end] != "\\" and any(m.end() == len(joined) for m in pattern.finditer(joined)):
            line = text.rfind("\n", 0, end) + 1
            if (end - line < _WRAP_COLUMN or not _LINE_REST.match(text, nend) or len(piece) < 8
                    or not (any(c.isdigit() for c in piece) or piece[1:] != piece[1:].lower())):
                break
            # A complete token takes the next line only when the whole line is its rest: a line the pattern stops
            # inside (`8460733279:AA...`, `SG.x.y`, `https://...`) holds something else, often another secret,
            # which the join would cut in two and leave half in clear.
            if not any(m.start() < len(joined) and not (joined + piece)[m.end():].strip(".:")
                       for m in pattern.finditer(joined + piece)) or _starts_a_token(piece):
                break
        pieces.append((nxt, nend))
        joined += piece
        end = nend
        brk = _WRAP.match(text, end)
    if len(pieces) == 1:
        return None
    for m in pattern.finditer(joined):
        if m.start() < first < m.end():
            offset = m.end()
            for piece_start, piece_end in pieces:
                if offset <= piece_end - piece_start:
                    return start + m.start(), piece_start + offset, m.group(0)
                offset -= piece_end - piece_start
    return None


def _starts_a_token(piece: str) -> bool:
    """Does this line start with a provider token of its own (`key-<hex>` after an OpenAI key that would run on)?"""
    return any(any(t in piece for t in triggers) and _token_re(shape).match(piece)
               for _, triggers, shape in _TOKEN_SHAPES)
