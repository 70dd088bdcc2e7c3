"""Text from outside (feedback, paths, argv) as a terminal or a log shows it: control characters escaped, so a
stored `ESC[2J` is printed as `\\x1b[2J` and never clears anyone's screen or forges a line."""

from __future__ import annotations

import re

# A whole terminal sequence (CSI `ESC[31m`, OSC `ESC]0;title BEL`, a two-byte `ESC c`), so removing it leaves no
# `[31m` behind; then any other control or bidirectional-formatting character (U+202E turns text around for a reader
# but not for the agent: "Trojan source").
_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)


def printable_lines(text: str) -> str:
    """Multi-line text for a terminal (a diff): as `printable` line by line, with tabs and line ends kept (a CR only
    as part of a CRLF ending), so a harness file's stored escapes are shown, never obeyed."""
    if text.isprintable():
        return text
    out = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n") if line.endswith("\n") else line
        end = line[len(body):]
        if not body.isprintable():
            body = "".join(c if c.isprintable() or c == "\t" else printable(c) for c in body)
        out.append(body + (end if end in ("\n", "\r\n", "") else printable(end[:-1]) + "\n"))
    return "".join(out)


def plain(text: str) -> str:
    """`text` with terminal sequences and other control/bidi characters removed (tab and newline kept): how a lesson
    is stored and written into an instruction file an agent reads and a human may `cat`."""
    if text.isprintable():
        return text
    return _INVISIBLE.sub("", _SEQUENCE.sub("", text))
