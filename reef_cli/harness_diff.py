"""What a candidate harness changes, as the canary gate reads it: the Markdown bullets it adds (each one's id, and
the candidate without it, for leave-one-out attribution) and the changes no gate may vouch for (Frozen paths, text
outside reef's markers in Managed files).

Its own module because `reef ci`, `reef eval` and the edit guard read these diffs without running a gate.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import InvalidInput

_BULLET = re.compile(r"^\s*[-*]\s+(?P<text>\S.*?)\s*$")
_REEF_ID = re.compile(r"\s*<!--\s*reef:(?P<id>[0-9a-f]{6,16})\s*-->\s*$")


@dataclass(frozen=True)
class Bullet:
    id: str
    path: str
    text: str


def new_bullets(base: Mapping, cand: Mapping) -> list[Bullet]:
    """Markdown bullet lines the candidate adds (per file). The id is the bullet's reef id (`<!-- reef:ID -->`, so
    the Reflector can credit the measured utility to its pattern), else a stable hash of its text."""
    out = []
    for path in sorted(cand):
        if not path.endswith(".md"):
            continue
        new_lines = _text(cand[path]).splitlines()
        old = set(_text(base[path]).splitlines()) if path in base else set()
        for line in new_lines:
            m = _BULLET.match(line)
            if m and line not in old:
                text = _shown(m.group("text"))
                rid = _REEF_ID.search(text)
                if rid:
                    bid, text = rid.group("id"), text[: rid.start()].strip()
                else:
                    bid = "b_" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
                out.append(Bullet(bid, path, text))
    return out


def ablations(base: Mapping, cand: Mapping) -> dict[str, dict]:
    """{bullet id: candidate files with that one new bullet line removed}, for leave-one-out attribution."""
    from .gitstore import Entry

    out: dict[str, dict] = {}
    for b in new_bullets(base, cand):
        entry = cand[b.path]
        lines = _text(entry).splitlines(keepends=True)
        old_lines = set(_text(base[b.path]).splitlines()) if b.path in base else set()
        kept, dropped = [], False
        for line in lines:
            m = _BULLET.match(line.rstrip("\r\n"))
            text = _shown(_REEF_ID.sub("", m.group("text")).strip()) if m else None
            if not dropped and m and text == b.text and line.rstrip("\r\n") not in old_lines:
                dropped = True
                continue
            kept.append(line)
        files = dict(cand)
        files[b.path] = Entry("".join(kept).encode("utf-8", "surrogateescape"), entry.mode)
        out[b.id] = files
    return out


def _text(entry: Any) -> str:
    """A file's text, lossless: bytes that are not UTF-8 (a Latin-1 "café" in the human's CLAUDE.md) decode to
    lone surrogates, so two different such bytes stay different when compared (outside_unchanged) and encode back
    to the same bytes (ablations). U+FFFD here once let a candidate change them and pass as "outside unchanged"."""
    data = getattr(entry, "data", entry)
    return data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else str(data)


def _shown(text: str) -> str:
    """Text for a report or a ledger record (which must be valid UTF-8): a byte that is not UTF-8 shows as U+FFFD,
    as it always did, so bullet ids hashed from it are unchanged."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@dataclass(frozen=True)
class Violation:
    path: str
    change: str
    zone: str
    reason: str

    def to_json(self) -> dict:
        return {"path": self.path, "change": self.change, "zone": self.zone, "reason": self.reason}


def frozen_changes(root: Path, config: Any, base: Mapping, cand: Mapping) -> list[Violation]:
    """Changes from `base` to `cand` that no gate may vouch for: Frozen paths (canary tasks, evaluators, the zone
    map, the human's rules) and text outside reef's markers in Managed files. Zones come from `config` (the
    baseline's), never from the candidate."""
    from .blocks import outside_unchanged
    from .zones import FROZEN, MANAGED, classify_many

    changed = []
    for rel in sorted(set(base) | set(cand)):
        a, b = base.get(rel), cand.get(rel)
        if a == b:
            continue
        changed.append((rel, "deleted" if b is None else "added" if a is None else "modified"))
    decisions = classify_many(root, config.zone_map(), [rel for rel, _ in changed])
    out = []
    for (rel, change), dec in zip(changed, decisions):
        if dec.zone == FROZEN:
            out.append(Violation(rel, change, dec.zone, dec.reason))
        elif dec.zone == MANAGED:
            before = _text(base[rel]) if rel in base else ""
            after = _text(cand[rel]) if rel in cand else ""
            try:  # the managed-zone contract the Curator writes under, checked by the same function
                kept = outside_unchanged(before, after, source=rel)
            except InvalidInput:  # reef's markers damaged: nothing outside them can be vouched for
                kept = False
            if not kept:
                out.append(Violation(rel, change, dec.zone, "text outside reef's managed block changed"))
    return out
