"""Corrections and acceptances in what a user says after an agent's turn, and the lesson a correction states.

Deterministic and offline (regular expressions over the user's words, with quoted text and code removed first so
"add the message 'you forgot your password'" is not a correction). `classify(text, previous_prompt)` says whether a
follow-up corrects the agent's previous turn ("no, …", "don't …", "you forgot …", "that's wrong, use …", "revert
that", a re-ask of the same prompt), accepts it ("thanks", "perfect", "looks good"), or neither. A correction wins
over an acceptance ("thanks, but you forgot the docs"). Precision and recall are measured on
tests/corpus/corrections.jsonl and tests/corpus/followups.jsonl (tests/test_corrections.py, bench/corrections_bench.py).

`imperative(sentence)` turns a descriptive correction into the instruction it implies, when the wording allows it
without guessing: "You forgot to run the tests before saying you were done" → "Run the tests before saying you are
done"; "no, use pnpm" → "Use pnpm"; "why did you delete the migration?" → "Do not delete the migration". It
returns None for anything else; reef never invents a lesson the user's words do not carry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_QUOTED = re.compile(r"```.*?```|`[^`\n]*`|\"[^\"\n]*\"|“[^”\n]*”|(?<![A-Za-z])'[^'\n]{2,}'(?![A-Za-z])", re.S)
_APOS = str.maketrans({"’": "'", "‘": "'"})
# A line (or the rest of one) the user pasted: a tool's output, not words addressed to the agent.
_OUTPUT_WORD = (r"(?:got|get|getting|error|errors|exception|output|log|logs|traceback|stack\s*trace|trace|says|said|"
                r"prints|printed|returns|returned|shows|showed|reads|message|complains|stderr|stdout|result|results|"
                r"fails\s+with|failed\s+with)")
_PASTE_INTRO = re.compile(r"\b" + _OUTPUT_WORD + r"(?:\s+(?:is|was|this|these|here))?\s*:", re.I)
_PASTED_LINE = re.compile(r"^\s*(?:[$#>]\s|\w*(?:Error|Exception|ERR!?|FATAL|Fatal|fatal|error|WARN(?:ING)?|warning|"
                          r"panic|FAILED|FAIL)\b\s*[:!]|Traceback\b|File\s\"|at\s+\S+\s*\(|E\s{2,})")

# Each (cue name, pattern); searched in the follow-up with quotes removed, case-insensitively.
_CORRECTION = [
    ("no", re.compile(r"^(?:no+|nope|nah|wrong|incorrect)\b(?![-/])(?!\s+(?:problem|worries|rush|need\s+to\s+worry|"
                      r"thanks|thank|big\s+deal|doubt)\b)(?=\s*[,.!:;—–-]|\s+(?:that|this|it|you|use|do|don't|"
                      r"not|we|the|i|please|instead|need)\b)|^wrong\s+\w+\s*[,.:;—–-]", re.I)),
    # "stop"/"quit" only as an order to the agent ("stop.", "stop adding…", "stop it"), not "Stop words should…";
    # "never mind", "don't know", "don't worry" are not corrections
    ("dont", re.compile(r"^(?:please\s+|and\s+|but\s+|also\s+)?(?:(?:don't|do\s+not|dont)(?!\s+(?:worry|know|mind|"
                        r"care)\b)|never(?!\s+mind\b)|(?:stop|quit)(?=\s*(?:[,.!;:—–]|$)|\s+(?:it|that|this|there|"
                        r"now|right|\w+ing)\b))(?![-/])\b", re.I)),
    ("forgot", re.compile(r"\byou\s+(?:forgot|forget|missed|skipped|ignored|overlooked|left\s+out|dropped|"
                          r"omitted|neglected)\b", re.I)),
    ("didnt", re.compile(r"\byou\s+(?:didn't|did\s+not|haven't|have\s+not|never|still\s+(?:haven't|didn't|did\s+not|"
                         r"have\s+not))\s+(?!know\b|need\b|have\s+to\b)", re.I)),
    ("broke", re.compile(r"\byou(?:'ve|\s+have)?\s+(?:broke|broken|deleted|removed|overwrote|overwritten|"
                         r"reverted|changed)\b", re.I)),
    ("wrong", re.compile(r"\b(?:that's|that\s+is|this\s+is|it's|it\s+is|that\s+was|this\s+was|you're|you\s+are|"
                         r"that's\s+still|it's\s+still|still)\s+(?:wrong|incorrect|broken|not\s+(?:right|correct|"
                         r"what\s+i|it|working|how)|the\s+wrong)\b", re.I)),
    ("should", re.compile(r"\byou\s+(?:should\s+have|shouldn't\s+have|should\s+not\s+have|were\s+supposed\s+to|"
                          r"need(?:ed)?\s+to|have\s+to|must)\b", re.I)),
    ("told", re.compile(r"(?<!what )\bi\s+(?:said|told\s+you|asked\s+(?:you\s+)?(?:to|for|not)|meant|"
                        r"wanted(?!\s+to\s+(?:ask|know|check|see|say|understand)\b))\b", re.I)),
    ("why", re.compile(r"^why\s+(?:did|would|are|do)\s+you\b(?!\s+(?:think|suppose|reckon)\b)", re.I)),
    # an order to undo the agent's work ("revert that", "undo the changes", "roll back the schema change"), not a
    # feature named so ("Undo/redo support", "Revert button should…", "Rollback support is next")
    ("revert", re.compile(r"^(?:please\s+)?(?:revert|undo|roll\s*back|put\s+back)(?![-/])\b(?=\s*(?:[.!,;]|$)|\s+"
                          r"(?:that|this|it|your|those|these|the|my|all|everything|what|back|to|last|changes?|"
                          r"commits?)\b)|^(?:please\s+)?restore\s+(?:that|this|it|my|what|the\s+(?:old|original|"
                          r"previous|deleted|file|files))\b|\b(?:revert|undo|roll\s+back)\s+(?:that|this|it|your|"
                          r"those|these|the\s+last)\b", re.I)),
    ("instead", re.compile(r"^(?:actually|instead)\b[,\s]+(?!(?:it|that|this)\s+(?:works|worked|looks|is\s+(?:fine|"
                           r"good|great)))|\binstead\s+of\b|\bnot\s+\w+\s*,\s*(?:but\s+)?(?:use|with)\b", re.I)),
    ("again", re.compile(r"^(?:try|do\s+it|run\s+it)\s+again\b|\bstill\s+(?:fails|failing|broken|wrong|doesn't|"
                         r"does\s+not|not\s+working|errors?)\b", re.I)),
]
_ACCEPT = re.compile(r"^(?:thanks|thank\s+you|thx|ty|perfect|great|excellent|awesome|nice|exactly|lgtm|"
                     r"looks\s+(?:good|great|right)|that\s+(?:works|worked|did\s+it)|works(?:\s+now)?|"
                     r"that's\s+(?:it|right|correct|perfect|great)|correct|yes,?\s+(?:that's|exactly|perfect)|"
                     r"good\s+job|well\s+done|brilliant|cool)\b", re.I)
_WORDS = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Verdict:
    kind: str | None  # "correction", "acceptance" or None
    cue: str = ""

    @property
    def score(self) -> float | None:
        return {"correction": 0.0, "acceptance": 1.0}.get(self.kind or "")


def unquoted(text: str) -> str:
    """The user's own words: quoted strings, code and pasted output replaced by a placeholder."""
    return _QUOTED.sub(" QUOTED ", _unpasted(text.translate(_APOS)))


def _unpasted(text: str) -> str:
    """`text` without what the user pasted rather than said: the lines after one that introduces output ("Here is
    the CI log:"), lines shaped like output ("error: …", "$ make", a traceback), and the rest of a line after
    "got:"/"error:"/"says:". "I got: Error: you must specify a region" is a report of a tool's words, not the agent
    being told it must."""
    out: list[str] = []
    pasting = False
    for line in text.split("\n"):
        if pasting and line.strip():
            out.append(" PASTED ")
            continue
        pasting = False
        if _PASTED_LINE.match(line):
            out.append(" PASTED ")
            continue
        m = _PASTE_INTRO.search(line)
        if m:
            rest = line[m.end():]
            out.append(line[:m.end()] + (" PASTED " if rest.strip() else ""))
            pasting = not rest.strip()
            continue
        out.append(line)
    return "\n".join(out)


def _similar(a: str, b: str) -> float:
    wa, wb = set(_WORDS.findall(a.lower())), set(_WORDS.findall(b.lower()))
    if len(wa) < 3 or len(wb) < 3:
        return 0.0
    return len(wa & wb) / len(wa | wb)


def classify(text: str, previous_prompt: str | None = None) -> Verdict:
    """Whether `text`, said right after an agent's turn (answering `previous_prompt`), corrects or accepts it."""
    plain = unquoted(text).strip().lstrip("\"'>*-# ").strip()
    if not plain:
        return Verdict(None)
    head = plain[:600]
    for cue, rx in _CORRECTION:
        if rx.search(head):
            return Verdict("correction", cue)
    if previous_prompt and _similar(text, previous_prompt) >= 0.8:
        return Verdict("correction", "re-ask")
    if _ACCEPT.search(head):
        return Verdict("acceptance", "thanks")
    return Verdict(None)


# -------------------------------------------------------------------------------------------------- lessons

_LEAD = re.compile(r"^(?:(?:no+|nope|nah|wrong|incorrect|actually|instead|hmm|ugh|sorry|again|ok(?:ay)?|well|"
                   r"but|and|also|so|please)\b[\s,.!:;—–-]*)+", re.I)
_LEAD_CLAUSE = re.compile(r"^(?:that's|that\s+is|this\s+is|it's|it\s+is)\s+(?:wrong|incorrect|not\s+right|not\s+"
                          r"correct|not\s+what\s+i\s+(?:asked|wanted|meant))\b[\s,.!:;—–-]*", re.I)
_TENSE = [(re.compile(r"\byou\s+were\b", re.I), "you are"), (re.compile(r"\byou\s+had\b", re.I), "you have"),
          (re.compile(r"\byou\s+did\b", re.I), "you do"), (re.compile(r"\byou\s+was\b", re.I), "you are"),
          (re.compile(r"\bwere\s+done\b", re.I), "are done"), (re.compile(r"\bagain\b\s*", re.I), "")]
_PARTICIPLE = {"run": "run", "ran": "run", "written": "write", "wrote": "write", "done": "do", "made": "make",
               "built": "build", "read": "read", "kept": "keep", "set": "set", "put": "put", "left": "leave",
               "taken": "take", "given": "give", "gone": "go", "used": "use", "added": "add", "checked": "check",
               "tested": "test", "updated": "update", "asked": "ask", "committed": "commit", "pushed": "push",
               "deleted": "delete", "removed": "remove", "changed": "change", "included": "include",
               "installed": "install", "created": "create", "followed": "follow", "mentioned": "mention",
               "documented": "document", "formatted": "format", "linted": "lint", "verified": "verify",
               "fixed": "fix", "waited": "wait", "stopped": "stop", "pinned": "pin", "rebased": "rebase",
               "merged": "merge", "named": "name", "described": "describe", "explained": "explain"}
_FORGOT_TO = re.compile(r"^(?:you\s+)?(?:forgot|forget|neglected|failed|omitted)\s+to\s+(?P<rest>.+)$", re.I)
_FORGOT = re.compile(r"^(?:you\s+)?(?:forgot|forget|missed|skipped|ignored|overlooked|left\s+out|dropped|omitted)\s+"
                     r"(?:about\s+)?(?P<rest>.+)$", re.I)
_DIDNT = re.compile(r"^you\s+(?:didn't|did\s+not|never|still\s+(?:didn't|did\s+not))\s+(?P<rest>.+)$", re.I)
_HAVENT = re.compile(r"^you\s+(?:haven't|have\s+not|still\s+haven't|still\s+have\s+not)\s+(?P<rest>.+)$", re.I)
_SHOULD_HAVE = re.compile(r"^you\s+(?:should\s+have|were\s+supposed\s+to\s+have|needed\s+to\s+have)\s+"
                          r"(?P<rest>.+)$", re.I)
_SHOULDNT_HAVE = re.compile(r"^you\s+(?:shouldn't\s+have|should\s+not\s+have)\s+(?P<rest>.+)$", re.I)
_SUPPOSED = re.compile(r"^you\s+(?:were\s+supposed\s+to|needed\s+to|need\s+to|have\s+to|had\s+to|must)\s+"
                       r"(?P<rest>.+)$", re.I)
_TOLD = re.compile(r"^i\s+(?:said|told\s+you|asked\s+you|asked)\s+(?:to\s+|you\s+to\s+)?(?P<rest>.+)$", re.I)
_TOLD_NOT = re.compile(r"^i\s+(?:said|told\s+you|asked\s+you|asked)\s+not\s+to\s+(?P<rest>.+)$", re.I)
_WHY = re.compile(r"^why\s+did\s+you\s+(?P<rest>.+?)\??$", re.I)
_BROKE = re.compile(r"^you(?:'ve|\s+have)?\s+(?P<verb>broke|broken|deleted|removed|overwrote|overwritten)\s+"
                    r"(?P<rest>.+)$", re.I)
_VERB_BASE = {"broke": "break", "broken": "break", "deleted": "delete", "removed": "remove", "overwrote": "overwrite",
              "overwritten": "overwrite"}


def _tidy(rest: str) -> str:
    rest = rest.strip().rstrip(".!?,;: ").strip()
    for rx, repl in _TENSE:
        rest = rx.sub(repl, rest)
    return " ".join(rest.split())


def _base(rest: str) -> str:
    first, _, tail = rest.partition(" ")
    base = _PARTICIPLE.get(first.lower())
    if base is None:
        return ""
    return f"{base} {tail}".strip()


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def imperative(sentence: str) -> tuple[str, str] | None:
    """(lesson, polarity) a correction sentence states, or None when its wording does not state one."""
    s = " ".join(sentence.translate(_APOS).split()).strip()
    s = _LEAD.sub("", s)
    s = _LEAD_CLAUSE.sub("", s).strip()
    if len(s) < 6:
        return None
    if "?" in s[:-1]:
        return None
    for rx, polarity, transform in (
        (_TOLD_NOT, "dont", lambda r: r),
        (_FORGOT_TO, "do", lambda r: r),
        (_SHOULDNT_HAVE, "dont", _base),
        (_SHOULD_HAVE, "do", _base),
        (_SUPPOSED, "do", lambda r: r),
        (_DIDNT, "do", lambda r: r),
        (_HAVENT, "do", _base),
        (_TOLD, "do", lambda r: r),
        (_WHY, "dont", lambda r: r),
        (_FORGOT, "do", lambda r: "include " + r),
    ):
        m = rx.match(s)
        if m:
            core = _tidy(m.group("rest"))
            rest = transform(core) if core else ""
            if not rest or len(rest.split()) < 2:
                return None
            if polarity == "dont":
                return (f"Do not {rest[:1].lower() + rest[1:]}", "dont")
            return (_cap(rest), "do")
    m = _BROKE.match(s)
    if m:
        return (f"Do not {_VERB_BASE[m.group('verb').lower()]} {_tidy(m.group('rest'))}", "dont")
    return None


def lead_stripped(sentence: str) -> str:
    """A correction with its lead-in ("no,", "that's wrong,", "actually") removed: "no, use pnpm" → "use pnpm"."""
    s = " ".join(sentence.translate(_APOS).split()).strip()
    return _LEAD_CLAUSE.sub("", _LEAD.sub("", s)).strip()
