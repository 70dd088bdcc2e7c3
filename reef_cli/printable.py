"""Text from outside (feedback, paths, argv) as a terminal or a log shows it: control characters escaped, so a
stored `ESC[2J` is printed as `\\x1b[2J` and never clears anyone's screen or forges a line."""

from __future__ import annotations


def printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)
