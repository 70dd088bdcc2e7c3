"""Rule hygiene: a lesson the agent already reads is not added again, and `reef harness bullets` shows what reef
learned with its evidence.

`human_rules(files)` collects every rule line outside reef's blocks in the harness's Markdown (CLAUDE.md,
AGENTS.md, CLAUDE.local.md, .claude/rules/**, any other .md the harness holds): list items and prose sentences,
not headings, code or comments. `covering_rule(pattern, rules, threshold)` says which of them already states a
lesson: the same polarity and either similar term sets (Jaccard ≥ the reflector's similarity, as for merging) or
at least 80% of the lesson's words (two or more) within the rule's. The Curator then does not add the bullet and reports the
pattern as evidence for that rule (curate.plan, kind "covered"); measured on tests/corpus/rule_dupes.jsonl.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .patterns import polarity_of, similarity, terms_of

_MARKER = re.compile(r"^\s*<!--\s*reef:(begin|end)\b")
_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.*\S)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SKIP = re.compile(r"^\s*(#|<!--|\||>|$)")
CONTAINED = 0.8


@dataclass(frozen=True)
class Rule:
    path: str
    line: int
    text: str
    terms: frozenset
    polarity: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def rule_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line, text) of the human's rule lines in one Markdown file."""
    out = []
    inside = fenced = False
    for n, raw in enumerate(text.split("\n"), 1):
        if _MARKER.match(raw):
            inside = not inside
            continue
        if _FENCE.match(raw):
            fenced = not fenced
            continue
        if inside or fenced or _SKIP.match(raw):
            continue
        m = _LIST.match(raw)
        line = (m.group(1) if m else raw).strip()
        if len(line) >= 8:
            out.append((n, line))
    return out


def human_rules(files: dict) -> list[Rule]:
    out = []
    for path in sorted(files):
        if not path.endswith(".md"):
            continue
        entry = files[path]
        data = getattr(entry, "data", entry)
        # a byte that is not UTF-8 (a Latin-1 "café") must not hide every rule of the file: it reads as U+FFFD
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        for n, line in rule_lines(text):
            terms = terms_of(line)
            if len(terms) >= 2:
                out.append(Rule(path, n, line, terms, polarity_of(line)))
    return out


def covers(rule_terms: frozenset, rule_polarity: str, terms: frozenset, polarity: str, threshold: float) -> bool:
    if rule_polarity != polarity or not terms:
        return False
    if similarity(rule_terms, terms) >= threshold:
        return True
    words = {t for t in terms if " " not in t}  # the rule may say more: the lesson's words are (nearly) all in it
    return len(words) >= 2 and len(words & rule_terms) >= CONTAINED * len(words)


def covering_rule(pattern, rules: list[Rule], threshold: float) -> Rule | None:
    terms = pattern.terms or terms_of(pattern.text)
    return next((r for r in rules if covers(r.terms, r.polarity, terms, pattern.polarity, threshold)), None)
