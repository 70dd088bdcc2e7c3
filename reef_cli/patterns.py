"""Pattern memory: the Reflector's lessons, counted, kept in one JSON file inside the harness (Learned zone).

The file (harness.yaml `surfaces.memory`, default `reef/memory/patterns.json`) is versioned with every release, so a
rollback rolls it back too; it is bookkeeping the Curator reads, not text an agent loads.

    {"version": 1, "through_seq": 812, "through_hash": "…", "patterns": [
      {"key": "do:before+finish+run+test", "id": "b3f2a1", "text": "Always run the tests before finishing.",
       "polarity": "do", "surface_hint": null, "count": 5, "observe_only": 1,
       "first_seen": "2026-…Z", "last_seen": "2026-…Z", "evidence": ["rec_…", …],
       "origins": {"feedback": 3, "lesson": 2, "observe-only": 1}, "utility": null, "suppressed": null,
       "negatives": 0}, …]}

Decisions (where the issue is silent):

* **Terms.** A lesson's text is lowercased, split into words, stripped of stop words and of polarity words
  (always, never, must, not, don't, avoid …), and each word is reduced by a small suffix stemmer (tests→test,
  running→run, finished→finish). Its terms are those words plus every pair of neighbouring words ("run test"), so
  word order counts a little and one changed subject matters: "Run the tests before finishing" and "Run the linter
  before finishing" are 0.4 apart, not 0.6. Polarity is `dont` when the text negates (never, don't, do not, must
  not, avoid, stop …), else `do`.
* **Similarity.** Two lessons are near-duplicates when they have the same polarity and the Jaccard index of their
  term sets is at least harness.yaml `reflector.similarity` (default 0.6). A new lesson joins the most similar
  pattern at or above the threshold (ties: the older key), so the same lesson phrased twice counts twice for one
  key; below it, it starts a new pattern. A pattern's terms are those of its first phrasing, so the key never
  drifts. Opposite polarity over similar terms is not a duplicate: it is a contradiction, which the Curator handles.
* **Key.** `polarity:` + up to 8 of the sorted single-word terms joined by `+` (after MoAI's `+`-joined keys). Readable,
  deterministic, and stable for the life of the pattern.
* **Bullet id.** The first 6 hex digits of SHA-256(key) not already used by another pattern in this memory (then
  the next 6, …); assigned once and stored, so it never changes.
* **Counting.** One record adds at most one observation to one pattern, however many phrasings of it the record
  holds, and one run adds at most one: evidence counts distinct receipts/sessions (`sources`, the run ids a
  pattern has counted, from `reflect.evidence_units`: a report stands for its receipts), so a receipt reported six
  times is one observation. `sources` keeps the 64 most recent (a run older than that, reported again, would count
  again — long after the top tier). `evidence` keeps the 10 most recent record ids (the count keeps the total).
* **Observe-only.** Observations from observe-only sessions count (`count`, `observe_only`) but a pattern whose
  every observation is observe-only is never eligible for a proposal (`eligible`).
* **Negative evidence.** A `negative` ledger record sets `suppressed = {record_id, origin, since_seq, needed,
  earned}`; every later observation of the key (seq > since_seq) increments `earned`, and the suppression lifts when
  `earned >= needed`. Memory is a fold over the ledger in seq order, so the counter is exact and replayable.
* **Budget.** At most `DEFAULT_MAX_PATTERNS` (500) patterns; beyond it the lowest-value unsuppressed patterns go
  (order in `value`). Patterns not seen for `expiry_days` are dropped by the Curator (`expire`).
* **Fields reef does not know** (a user's note on a pattern, a newer reef's key, at the top or on a pattern) are
  kept as they were through every rewrite (reflect, curate, expire, merge): reef never loses a user's edit. They
  never override a field reef writes; a pattern reef drops (expired, evicted) takes its own with it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from .errors import InvalidInput

MEMORY_VERSION = 1
EVIDENCE_CAP = 10
SOURCES_CAP = 64
KEY_TERMS = 8
DEFAULT_MAX_PATTERNS = 500
MEMORY_LIMIT = 64 << 20
"""The most bytes reef reads as pattern memory. A full memory (500 patterns, each with its 64 sources and 10
evidence ids) is about 2 MB; a file far past that (a log pasted over it, a hostile one) would otherwise be read and
parsed whole by every reflect and evolve, gigabytes of it."""

STOPWORDS = frozenset(
    """a an the and or but if then than so to of in on at by for with from into onto about as is are was were be been
    being it its this that these those there here you your yours we our us i me my they them their he she his her
    also just only very really too any all each every some such own same other more most less least can could would
    will shall may might has have had having get gets got when while where which who whom what why how again once
    """.split()
)
POLARITY_WORDS = frozenset(
    """always never not no dont don't don’t do does did doing done must mustn't mustn’t mustnt should shouldn't
    shouldn’t shouldnt shall avoid avoiding stop please make sure ensure remember cannot can't can’t cant won't won’t
    wont isn't isnt doesn't doesnt didn't didnt refrain ever""".split()
)
_NEGATION = re.compile(
    r"\b(?:never|don['’]?t|do\s+not|does\s+not|did\s+not|must\s+not|mustn['’]?t|should\s+not|shouldn['’]?t|"
    r"shall\s+not|cannot|can['’]?t|won['’]?t|avoid|avoiding|stop|no\s+longer|refrain)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")


def stem(word: str) -> str:
    """A deliberately small suffix stemmer: enough to make 'tests'/'test' and 'running'/'run' one term."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if len(word) > 4 and word.endswith(("xes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix, minimum in (("ing", 6), ("ed", 5)):
        if len(word) >= minimum and word.endswith(suffix):
            word = word[: -len(suffix)]
            if len(word) > 2 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    return word


def terms_of(text: str) -> frozenset[str]:
    """Stemmed content words plus each pair of neighbouring content words ("run test"): the pairs keep "run the
    tests before finishing" and "run the linter before finishing" apart, which single words alone would not."""
    words = []
    for w in _WORD.findall(text.lower()):
        if w in STOPWORDS or w in POLARITY_WORDS or len(w) < 2:
            continue
        words.append(stem(w))
    out = set(words)
    out.update(f"{a} {b}" for a, b in zip(words, words[1:]) if a != b)
    return frozenset(out)


def polarity_of(text: str) -> str:
    return "dont" if _NEGATION.search(text) else "do"


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def key_for(polarity: str, terms: frozenset[str]) -> str:
    return f"{polarity}:" + "+".join(sorted(t for t in terms if " " not in t)[:KEY_TERMS])


def _terms_or_key(text: str, key: str) -> frozenset[str]:
    """A pattern's terms: those of its text, else (a text of only stop words) the words of its key."""
    return terms_of(text) or frozenset(key.split(":", 1)[-1].split("+"))


def sentence(text: str) -> str:
    """Capitalised, ending with punctuation: how a lesson reads as a bullet."""
    text = " ".join(text.split()).strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    if text[-1] not in ".!?…":
        text += "."
    return text


def dont_text(text: str) -> str:
    """A `dont` lesson given as the thing not to do ('force-push to main') reads 'Do not force-push to main.'"""
    text = " ".join(text.split()).strip()
    if not text or _NEGATION.search(text):
        return sentence(text)
    return sentence("Do not " + text[0].lower() + text[1:])


def too_large(source, size: int) -> InvalidInput:
    return InvalidInput(f"{source}: pattern memory is {size} bytes, more than reef reads as memory ({MEMORY_LIMIT} "
                        "bytes; a full one is about 2 MB); move it away or restore it with 'reef checkout' (nothing "
                        "was changed)")


@dataclass
class Pattern:
    key: str
    id: str
    text: str
    polarity: str
    count: int = 0
    first_seen: str = ""
    last_seen: str = ""
    evidence: list[str] = field(default_factory=list)
    origins: dict[str, int] = field(default_factory=dict)
    observe_only: int = 0
    surface_hint: str | None = None
    utility: float | None = None
    suppressed: dict | None = None
    negatives: int = 0
    sources: list[str] = field(default_factory=list)  # distinct runs/sessions counted (the SOURCES_CAP latest)
    terms: frozenset[str] = frozenset()
    extra: dict = field(default_factory=dict)  # keys this reef does not know, written back as they were read

    def __post_init__(self) -> None:
        from .redact import redact_obj, redact_text

        self.text = redact_text(self.text)  # a memory written before a redaction fix publishes no secret either
        # the memory is published with every release: a secret in a suppression's reason (a human's `-m`) or in a
        # field reef does not know (a user's note) is redacted like the text, never carried into a release
        if self.suppressed:
            self.suppressed = redact_obj(self.suppressed)[0]
        if self.extra:
            self.extra = redact_obj(self.extra)[0]

    @property
    def eligible(self) -> bool:
        """May originate a proposal: not suppressed, and not only observe-only observations."""
        return self.suppressed is None and self.count - self.observe_only > 0

    def value(self) -> tuple:
        """Lower is evicted first: measured utility (unmeasured counts as 0), then count, then last seen."""
        return (self.utility if self.utility is not None else 0.0, self.count, self.last_seen, self.key)

    def to_json(self) -> dict:
        return {
            **self.extra,
            "key": self.key,
            "id": self.id,
            "text": self.text,
            "polarity": self.polarity,
            "count": self.count,
            "observe_only": self.observe_only,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "evidence": list(self.evidence),
            "origins": dict(sorted(self.origins.items())),
            "surface_hint": self.surface_hint,
            "utility": self.utility,
            "suppressed": self.suppressed,
            "negatives": self.negatives,
            "sources": list(self.sources),
        }

    @classmethod
    def from_json(cls, d: dict, source: str) -> "Pattern":
        try:
            p = cls(
                key=str(d["key"]),
                id=str(d["id"]),
                text=str(d["text"]),
                polarity=str(d["polarity"]),
                count=int(d.get("count", 0)),
                first_seen=str(d.get("first_seen") or ""),
                last_seen=str(d.get("last_seen") or ""),
                evidence=[str(x) for x in d.get("evidence") or []],
                origins={str(k): int(v) for k, v in (d.get("origins") or {}).items()},
                observe_only=int(d.get("observe_only", 0)),
                surface_hint=d.get("surface_hint"),
                utility=None if d.get("utility") is None else float(d["utility"]),
                suppressed=dict(d["suppressed"]) if d.get("suppressed") else None,
                negatives=int(d.get("negatives", 0)),
                sources=[str(x) for x in d.get("sources") or []],
                extra={k: v for k, v in d.items() if k not in PATTERN_FIELDS},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"{source}: a pattern entry is malformed ({type(exc).__name__}: {exc})") from None
        if p.polarity not in ("do", "dont"):
            raise InvalidInput(f"{source}: pattern {p.key!r} has polarity {p.polarity!r}; expected do or dont")
        p.terms = _terms_or_key(p.text, p.key)
        return p


PATTERN_FIELDS = frozenset({"key", "id", "text", "polarity", "count", "observe_only", "first_seen", "last_seen",
                            "evidence", "origins", "surface_hint", "utility", "suppressed", "negatives", "sources"})
"""The keys a pattern entry has that this reef reads and writes; any other is the user's (Pattern.extra)."""


@dataclass(frozen=True)
class Observation:
    """One lesson seen in one record, as the Reflector hands it to the memory."""

    text: str
    polarity: str
    terms: frozenset[str]
    record_id: str
    seq: int
    created_at: str
    origin: str
    observe_only: bool = False
    surface_hint: str | None = None
    units: tuple[str, ...] = ()  # the runs/sessions this observation is about (reflect.evidence_units)


MEMORY_FIELDS = frozenset({"version", "through_seq", "through_hash", "patterns"})


class PatternMemory:
    def __init__(self, patterns: dict[str, Pattern] | None = None, through_seq: int = 0,
                 through_hash: str | None = None, extra: dict | None = None):
        self.patterns: dict[str, Pattern] = {}
        self.through_seq = through_seq
        self.through_hash = through_hash
        self.extra: dict = {}  # top-level keys this reef does not know, written back as they were (secrets redacted)
        if extra:
            from .redact import redact_obj

            self.extra = redact_obj(dict(extra))[0]
        self._by_terms: dict[tuple[str, frozenset], str] = {}
        self._by_term: dict[tuple[str, str], set[str]] = {}
        self._ids: dict[str, str] = {}
        self._matches: dict[tuple[str, frozenset, float], str | None] = {}  # valid until the set of patterns changes
        for p in (patterns or {}).values():
            self._index(p)

    # -- (de)serialisation
    @classmethod
    def loads(cls, data: bytes | str | None, source: str, *, validate: bool = True) -> "PatternMemory":
        """The memory in `data`; InvalidInput naming `source` and the field when it is not the shape reef writes
        (memory_shape.check). `validate=False` only for bytes this process just dumped (`copy`)."""
        if data is None:
            return cls()
        if len(data) > MEMORY_LIMIT:
            raise too_large(source, len(data))
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise InvalidInput(f"{source}: pattern memory is not valid JSON ({exc}); restore it with 'reef checkout'") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("patterns", []), list):
            raise InvalidInput(f"{source}: pattern memory must be an object with a 'patterns' list")
        if doc.get("version", MEMORY_VERSION) != MEMORY_VERSION:
            raise InvalidInput(f"{source}: pattern memory version {doc.get('version')!r} is not supported (expected 1)")
        if validate:
            from .memory_shape import check

            check(doc, source)
        mem = cls(through_seq=int(doc.get("through_seq") or 0), through_hash=doc.get("through_hash"),
                  extra={k: v for k, v in doc.items() if k not in MEMORY_FIELDS})
        for d in doc.get("patterns", []):
            if not isinstance(d, dict):
                raise InvalidInput(f"{source}: a pattern entry must be an object")
            mem._index(Pattern.from_json(d, source))
        return mem

    def dumps(self) -> bytes:
        doc = {
            **self.extra,
            "version": MEMORY_VERSION,
            "through_seq": self.through_seq,
            "through_hash": self.through_hash,
            "patterns": [self.patterns[k].to_json() for k in sorted(self.patterns)],
        }
        return (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")

    def copy(self) -> "PatternMemory":
        return PatternMemory.loads(self.dumps(), "memory", validate=False)

    # -- indexing
    def _index(self, p: Pattern) -> None:
        self._matches.clear()
        if p.key in self.patterns:
            self._unindex(self.patterns[p.key])
        self.patterns[p.key] = p
        self._by_terms.setdefault((p.polarity, p.terms), p.key)
        for t in p.terms:
            self._by_term.setdefault((p.polarity, t), set()).add(p.key)
        self._ids[p.id] = p.key

    def _unindex(self, p: Pattern) -> None:
        self._matches.clear()
        if self._by_terms.get((p.polarity, p.terms)) == p.key:
            del self._by_terms[(p.polarity, p.terms)]
        for t in p.terms:
            s = self._by_term.get((p.polarity, t))
            if s is not None:
                s.discard(p.key)
        self._ids.pop(p.id, None)

    def remove(self, key: str) -> Pattern | None:
        p = self.patterns.get(key)
        if p is not None:
            self._unindex(p)
            del self.patterns[key]
        return p

    def by_id(self, bullet_id: str) -> Pattern | None:
        key = self._ids.get(bullet_id)
        return self.patterns.get(key) if key else None

    def resolve(self, ref: str) -> Pattern | None:
        """A pattern by key, bullet id (with or without 'reef:'), or unique key prefix."""
        ref = ref.strip()
        if ref in self.patterns:
            return self.patterns[ref]
        p = self.by_id(ref.removeprefix("reef:"))
        if p is not None:
            return p
        hits = [k for k in self.patterns if k.startswith(ref)]
        return self.patterns[hits[0]] if len(hits) == 1 else None

    def new_id(self, key: str) -> str:
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        for start in range(0, len(digest) - 6, 6):
            cand = digest[start : start + 6]
            if cand not in self._ids:
                return cand
        return digest[:16]

    def match(self, polarity: str, terms: frozenset[str], threshold: float) -> Pattern | None:
        """The most similar pattern of this polarity at or above `threshold` (ties: the smaller key), or None."""
        key = self._by_terms.get((polarity, terms))
        if key is not None:
            return self.patterns[key]
        memo = (polarity, terms, threshold)
        if memo in self._matches:
            hit = self._matches[memo]
            return self.patterns[hit] if hit is not None else None
        best = self._search(polarity, terms, threshold)
        if len(self._matches) >= 100_000:
            self._matches.clear()
        self._matches[memo] = best.key if best is not None else None
        return best

    def _search(self, polarity: str, terms: frozenset[str], threshold: float) -> Pattern | None:
        candidates: set[str] = set()
        for t in terms:
            s = self._by_term.get((polarity, t))
            if s:
                candidates |= s
        best, best_sim = None, -1.0
        for k in sorted(candidates):
            p = self.patterns[k]
            sim = similarity(terms, p.terms)
            if sim >= threshold and sim > best_sim:
                best, best_sim = p, sim
        return best

    # -- folding
    def add(self, obs: Observation, p: Pattern | None) -> Pattern:
        """Count `obs` into `p` (the result of `match`), or into a new pattern when `p` is None. An observation about
        runs this pattern already counted (the same receipt reported again) adds nothing."""
        units = obs.units or (obs.record_id,)
        if p is not None and all(u in p.sources for u in units):
            return p
        if p is None:
            key = key_for(obs.polarity, obs.terms)
            p = self.patterns.get(key)  # same key, more terms beyond the first 8: the same pattern
            if p is None:
                p = Pattern(key=key, id=self.new_id(key), text=obs.text, polarity=obs.polarity, terms=obs.terms,
                            first_seen=obs.created_at)
                self._index(p)
        if all(u in p.sources for u in units):
            return p  # a new pattern under an existing key (more than KEY_TERMS terms): the same runs again
        p.count += 1
        for u in units:
            if u not in p.sources:
                p.sources.append(u)
        if len(p.sources) > SOURCES_CAP:
            del p.sources[:-SOURCES_CAP]
        if obs.created_at > p.last_seen:
            p.last_seen = obs.created_at
        if not p.first_seen or obs.created_at < p.first_seen:
            p.first_seen = obs.created_at
        ev = p.evidence
        if obs.record_id not in ev:
            ev.append(obs.record_id)
            if len(ev) > EVIDENCE_CAP:
                del ev[0]
        p.origins[obs.origin] = p.origins.get(obs.origin, 0) + 1
        if obs.observe_only:
            p.observe_only += 1
            p.origins["observe-only"] = p.origins.get("observe-only", 0) + 1
        if obs.surface_hint and not p.surface_hint:
            p.surface_hint = obs.surface_hint
        sup = p.suppressed
        if sup is not None and obs.seq > int(sup.get("since_seq", 0)):
            sup["earned"] = int(sup.get("earned", 0)) + 1
            if sup["earned"] >= int(sup.get("needed", 1)):
                p.suppressed = None
        return p

    def suppress(self, *, key: str, text: str, polarity: str, record_id: str, origin: str, since_seq: int,
                 needed: int, reason: str = "", reset: bool = False) -> Pattern:
        """Negative evidence: the key must earn `needed` new observations (after `since_seq`) before it is proposed
        again. A key this memory no longer holds gets a count-0 entry that carries the suppression."""
        p = self.patterns.get(key)
        if p is None:
            polarity = polarity if polarity in ("do", "dont") else polarity_of(text)
            p = Pattern(key=key, id=self.new_id(key), text=sentence(text) or key, polarity=polarity,
                        terms=_terms_or_key(text, key))
            self._index(p)
        if reset:  # a human demoted it: its past observations no longer count toward any tier
            p.count, p.observe_only, p.evidence, p.origins, p.utility = 0, 0, [], {}, None
        from .redact import redact_text

        p.suppressed = {"record_id": record_id, "origin": origin, "since_seq": since_seq, "needed": max(1, needed),
                        "earned": 0, "reason": redact_text(reason)}  # a ledger written before the reason was redacted
        p.negatives += 1
        return p

    def lift(self, key: str) -> bool:
        """A human promotion overrides negative evidence."""
        p = self.patterns.get(key)
        if p is None or p.suppressed is None:
            return False
        p.suppressed = None
        return True

    def enforce_budget(self, max_patterns: int) -> list[str]:
        """Drop the lowest-value unsuppressed patterns beyond `max_patterns`; returns the dropped keys."""
        over = len(self.patterns) - max_patterns
        if over <= 0:
            return []
        victims = sorted((p for p in self.patterns.values() if p.suppressed is None), key=Pattern.value)[:over]
        for p in victims:
            self.remove(p.key)
        return [p.key for p in victims]
