"""What the Reflector and its model backends share: a lesson as it comes out of a record, and a record's text as
it goes in. Its own room so that llm_reflector.py (which the Reflector loads on first use) need not import reflect.py
back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Lesson:
    text: str
    polarity: str
    cites: tuple[str, ...]
    quotes: tuple[tuple[str, str], ...] = ()
    origin: str = "feedback"
    surface_hint: str | None = None

    def to_json(self) -> dict:
        return {"text": self.text, "polarity": self.polarity, "cites": list(self.cites),
                "quotes": [{"record_id": r, "text": t} for r, t in self.quotes], "origin": self.origin,
                "surface_hint": self.surface_hint}


def _strings(obj: Any, out: list[str]) -> None:
    t = type(obj)
    if t is str:
        out.append(obj)
    elif t is dict:
        for k in sorted(obj):
            _strings(obj[k], out)
    elif t is list or t is tuple:
        for v in obj:
            _strings(v, out)


def record_text(record) -> str:
    """A record's stored text: every string in its payload, in key order, one per line."""
    out: list[str] = []
    _strings(record.payload, out)
    return "\n".join(out)
