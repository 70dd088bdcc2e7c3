"""Loop 1, the Reflector: stream the ledger from pattern memory's high-water mark and fold observations into patterns.

`reflect()` is a fold: memory' = fold(memory, records with seq > memory.through_seq). It streams (`iter_records`),
never holds the ledger in memory, and is replayable, so reflecting twice over the same ledger changes nothing and a
rollback of the memory file simply re-folds the same records (negative evidence then keeps what was rolled back
suppressed; see patterns.py).

What is folded, by record kind:

* `report` with structured feedback (`lesson`, `do`, `dont`: a string or a list of strings) → one lesson each,
  polarity from the key (`lesson` from its wording); free text (a string, or `text`/`comment`/`feedback`/`why` in
  the object) → one lesson per *directive* sentence (one that says always, never, don't, must, should, avoid, make
  sure, remember, prefer, ensure, need to, instead, next time, please) or starts with an imperative verb from a
  fixed list (run, use, add, check, write …). A sentence that only describes ("the output was wrong") is not turned
  into a rule: reef will not invent the lesson the user did not state.
* `interaction` that failed (exit code not 0, not killed by a signal) → one lesson quoting the last error-looking
  line of its stderr (else stdout) excerpt; its routing decisions → one `dont` lesson each.
* `routing` whose `outcome` is failure/failed/error/rolled-back/rejected → one `dont` lesson.
* `negative` → suppression of its key (patterns.py); `promotion` by a human → the suppression lifts;
  `gate` with `bullet_utility` → the measured utility of those bullets' patterns (used by budget eviction).

Observe-only: an interaction with `observe_only: true`, and a report whose every receipt is such an interaction,
yield observe-only observations (counted, never a pattern's only origin). Receipts are looked up in a bounded map of
recent interactions (200k), then in the ledger's index.

Anti-fabrication, for every backend: a lesson is accepted only if it cites at least one record, every cited record
exists in this scenario's ledger, and every quoted span (whitespace-collapsed, case-sensitive) appears in its cited
record's stored text (`record_text`: every string in the payload). Rejections are returned (and written to the
ledger as `rejection` records by the caller), never folded.

Backends: `builtin` (offline, deterministic: the rules above) and `llm` (any OpenAI-compatible chat endpoint; see
`LLMBackend`). The llm backend keeps the builtin's structured lessons (they are the user's own words) and asks the
model for lessons from free text, failures and routing in batches; a record contributes at most once per pattern
whichever backend found it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import InvalidInput, NotFound, ReefError
from .redact import WINDOW, redact, redact_text
from .patterns import Observation, PatternMemory, dont_text, polarity_of, sentence, terms_of

RECENT_INTERACTIONS = 200_000
_FAIL_KINDS = {"failure", "failed", "fail", "error", "rolled-back", "rolled_back", "rejected", "regressed"}
_DIRECTIVE = re.compile(
    r"\b(?:always|never|don['’]?t|do\s+not|must|mustn['’]?t|should|shouldn['’]?t|avoid|make\s+sure|remember|"
    r"prefer|ensure|need\s+to|needs\s+to|instead|next\s+time|please|stop)\b",
    re.IGNORECASE,
)
# A sentence that starts with one of these verbs is an instruction ("Run the tests before finishing.").
_IMPERATIVE = frozenset("""add answer ask avoid build call check clean close commit confirm create delete describe
    document double-check explain fix follow format handle include install keep lint list log mention merge name note
    open pin prefer print push put read rebase remove rename replace report return review run say separate show
    sort split start stick summarise summarize tell test try update use validate verify wait wrap write""".split())
# A sentence ends at . ! ? or ; followed by white space (so "#!/bin/sh", "v1.2" and "a.py" stay whole), or a newline.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_ERRORISH = re.compile(r"error|fail|exception|fatal|traceback|denied|not found|cannot|refused", re.IGNORECASE)
_LEAD_IN = re.compile(r"^(?:please|also|and|but|so|next time|in future|going forward)[,:]?\s+", re.IGNORECASE)


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


@dataclass(frozen=True)
class Rejection:
    lesson: Lesson
    reason: str
    backend: str

    def to_json(self) -> dict:
        return {"lesson": self.lesson.to_json(), "reason": self.reason, "backend": self.backend}


@dataclass
class ReflectResult:
    memory: PatternMemory
    backend: str
    from_seq: int
    through_seq: int
    records_read: int = 0
    observations: int = 0
    lessons: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)
    created: set[str] = field(default_factory=set)
    suppressed: set[str] = field(default_factory=set)
    lifted: set[str] = field(default_factory=set)
    utilities: int = 0
    restarted: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.observations or self.suppressed or self.lifted or self.utilities or self.rejected)

    def to_json(self) -> dict:
        return {
            "backend": self.backend, "from_seq": self.from_seq, "through_seq": self.through_seq,
            "records_read": self.records_read, "observations": self.observations, "lessons": self.lessons,
            "rejected": [r.to_json() for r in self.rejected], "patterns_touched": sorted(self.touched),
            "patterns_created": sorted(self.created), "suppressed": sorted(self.suppressed),
            "lifted": sorted(self.lifted), "utilities": self.utilities, "changed": self.changed,
            "ledger_restarted": self.restarted, "patterns": len(self.memory.patterns),
        }


# --------------------------------------------------------------------------------------------- record text


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


def _squash(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------- builtin lessons


def _as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def _shown(text: str, polarity: str, quote: str, origin: str) -> tuple[str, str, str, str] | None:
    text = text.strip()
    if not text or not terms_of(text):
        return None
    shown = dont_text(text) if polarity == "dont" else sentence(text)
    return (shown, polarity, quote.strip(), origin)


def directive_sentences(text: str) -> list[str]:
    out = []
    for part in _SENTENCE_END.split(text):
        s = part.strip().rstrip(";").strip()
        if len(s) < 6:
            continue
        first = _LEAD_IN.sub("", s).split(maxsplit=1)[0].lower().strip(",:") if s.split() else ""
        if _DIRECTIVE.search(s) or first in _IMPERATIVE:
            out.append(s)
    return out


_FEEDBACK_CACHE: dict = {}


def feedback_lessons(fb) -> tuple[tuple[str, str, str, str], ...]:
    """(text, polarity, quoted span, origin) for each lesson in one feedback value; memoised, since the same
    feedback is often given many times."""
    # A str is its own key; structured feedback keys as a tuple, so '{"do": "x"}' typed as text never hits {"do": "x"}.
    memo = fb if isinstance(fb, str) else ("json", json.dumps(fb, sort_keys=True, default=str))
    hit = _FEEDBACK_CACHE.get(memo)
    if hit is not None:
        return hit
    out = []
    free: list[str] = []
    if isinstance(fb, Mapping):
        for item in _as_list(fb.get("lesson")):
            out.append(_shown(item, polarity_of(item), item, "lesson"))
        for item in _as_list(fb.get("do")):
            out.append(_shown(item, "do", item, "do"))
        for item in _as_list(fb.get("dont")) + _as_list(fb.get("don't")):
            out.append(_shown(item, "dont", item, "dont"))
        for k in ("text", "comment", "feedback", "why"):
            free += _as_list(fb.get(k))
    elif isinstance(fb, str):
        free.append(fb)
    for text in free:
        for sent in directive_sentences(text):
            out.append(_shown(_LEAD_IN.sub("", sent), polarity_of(sent), sent, "feedback"))
    result = tuple(x for x in out if x is not None)
    if len(_FEEDBACK_CACHE) > 20_000:
        _FEEDBACK_CACHE.clear()
    _FEEDBACK_CACHE[memo] = result
    return result


def report_lessons(record) -> list[Lesson]:
    fb = record.payload.get("feedback")
    if not fb:
        return []
    rid = record.record_id
    return [Lesson(text, pol, (rid,), ((rid, quote),), origin) for text, pol, quote, origin in feedback_lessons(fb)]


def _stream_text(field_value) -> str:
    if isinstance(field_value, Mapping):
        for k in ("text", "excerpt", "tail"):
            v = field_value.get(k)
            if isinstance(v, str) and v.strip():
                return v
    elif isinstance(field_value, str):
        return field_value
    return ""


def failure_line(payload: Mapping) -> str | None:
    for name in ("stderr", "stdout"):
        lines = [ln.strip() for ln in _stream_text(payload.get(name)).splitlines() if ln.strip()]
        for ln in reversed(lines):
            if _ERRORISH.search(ln):
                return ln[:200]
        if lines and name == "stderr":
            return lines[-1][:200]
    return None


def _command_name(payload: Mapping) -> str:
    argv = payload.get("argv")
    if isinstance(argv, list) and argv and isinstance(argv[0], str):
        return argv[0].rsplit("/", 1)[-1]
    return "the agent"


def _routing_summary(decision: Mapping) -> str | None:
    parts = []
    for k in sorted(decision):
        v = decision[k]
        if k in ("outcome", "ts", "time", "timestamp", "id", "record_id", "seq", "digest", "line", "invalid"):
            continue
        if isinstance(v, str) and 0 < len(v) <= 80:
            parts.append(f"{k} {v}")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            parts.append(f"{k} {v}")
    return ", ".join(parts[:6]) or None


def interaction_lessons(record) -> list[Lesson]:
    p = record.payload
    code = p.get("exit_code")
    if code in (0, None) or p.get("signal") or code in (130, 143):
        return []
    rid = record.record_id
    out: list[Lesson] = []
    line = failure_line(p)
    if line:
        out.append(Lesson(sentence(f'Runs of {_command_name(p)} failed with "{line}"; check for this before '
                                   f'finishing'), "do", (rid,), ((rid, line),), "failure"))
    for decision in p.get("routing") or ():
        if isinstance(decision, Mapping) and not decision.get("invalid"):
            summary = _routing_summary(decision)
            if summary:
                out.append(Lesson(sentence(f"Avoid the routing choice {summary}: runs with it failed"), "dont",
                                  (rid,), (), "routing"))
    return out


def routing_lessons(record) -> list[Lesson]:
    p = record.payload
    outcome = str(p.get("outcome", "")).lower()
    if outcome not in _FAIL_KINDS:
        return []
    summary = _routing_summary(p)
    if not summary:
        return []
    return [Lesson(sentence(f"Avoid the routing choice {summary}: it ended {outcome}"), "dont",
                   (record.record_id,), (), "routing")]


# --------------------------------------------------------------------------------------------- anti-fabrication


class Verifier:
    """Checks cited ids and quoted spans against the ledger; records handed to `know` are checked without I/O."""

    def __init__(self, ledger, scenario: str):
        self.ledger = ledger
        self.scenario = scenario
        self._known: dict[str, Any] = {}
        self._text: dict[str, str] = {}

    def know(self, records: Iterable) -> None:
        self._known = {r.record_id: r for r in records}
        self._text = {}

    def record(self, rid: str):
        rec = self._known.get(rid)
        if rec is None:
            try:
                rec = self.ledger.get(rid)
            except (NotFound, InvalidInput):
                return None
        if rec.scenario != self.scenario:
            return None
        return rec

    def text(self, rec) -> str:
        t = self._text.get(rec.record_id)
        if t is None:
            t = _squash(record_text(rec))
            self._text[rec.record_id] = t
        return t

    def check(self, lesson: Lesson) -> str | None:
        """None when the lesson is grounded, else why it is refused."""
        if not lesson.cites:
            return "cites no record"
        for rid in lesson.cites:
            if not isinstance(rid, str) or self.record(rid) is None:
                return f"cites record {rid!r}, which is not in scenario '{self.scenario}''s ledger"
        for rid, span in lesson.quotes:
            if rid not in lesson.cites:
                return f"quotes record {rid!r} without citing it"
            span = _squash(span or "")
            if not span:
                return f"quotes an empty span of record {rid}"
            if span not in self.text(self.record(rid)):
                return f"quotes {span[:80]!r}, which does not appear in record {rid}"
        return None


# --------------------------------------------------------------------------------------------- the fold


class _Receipts:
    """Whether receipts were observe-only runs: recent interactions in two bounded generations (O(1) per record,
    at most RECENT_INTERACTIONS kept), older ones from the ledger's index."""

    def __init__(self, ledger):
        self.ledger = ledger
        self.current: dict[str, bool] = {}
        self.previous: dict[str, bool] = {}

    def note(self, rid: str, observe_only: bool) -> None:
        self.current[rid] = observe_only
        if len(self.current) >= RECENT_INTERACTIONS // 2:
            self.previous, self.current = self.current, {}

    def observe_only(self, rid: str) -> bool:
        v = self.current.get(rid)
        if v is None:
            v = self.previous.get(rid)
        if v is None:
            try:
                rec = self.ledger.get(rid)
                v = bool(rec.payload.get("observe_only")) if rec.kind == "interaction" else False
            except (NotFound, InvalidInput):
                v = False
            self.note(rid, v)
        return v


def evidence_units(rec) -> tuple[str, ...]:
    """The runs one record is evidence about, so a pattern counts each run once however often it is reported: a
    report stands for its receipts, a record naming a session for that session, anything else for itself."""
    p = rec.payload
    if rec.kind == "report":
        receipts = sorted({r for r in p.get("receipts") or () if isinstance(r, str) and r})
        if receipts:
            return tuple(receipts)
    sid = p.get("session_id")
    if isinstance(sid, str) and sid:
        return (f"session:{sid}",)
    return (rec.record_id,)


class _Restart(Exception):
    pass


class Reflector:
    """One reflect pass. `backend` is "builtin" or an `LLMBackend`."""

    def __init__(self, ledger, scenario: str, memory: PatternMemory, *, threshold: float, backend=None,
                 progress: Callable[[dict], None] | None = None, bullets: list[str] | None = None):
        self.ledger = ledger
        self.scenario = scenario
        self.memory = memory
        self.threshold = threshold
        self.llm = backend if backend is not None and not isinstance(backend, str) else None
        self.progress = progress
        self.current_bullets = list(bullets or [])
        self.verifier = Verifier(ledger, scenario)
        self.receipts = _Receipts(ledger)
        self._cache: dict[tuple[str, str], frozenset] = {}
        self._batch: list = []
        self.result = ReflectResult(memory, "llm" if self.llm else "builtin", memory.through_seq, memory.through_seq)
        self._seqs: dict[str, tuple[int, str, bool]] = {}

    # -- observations
    def _observe(self, lesson: Lesson, rec_seq: dict[str, tuple], seen: set) -> None:
        res = self.result
        memo = (redact_text(lesson.text), lesson.polarity)  # no secret becomes a term, a key or a bullet
        terms = self._cache.get(memo)
        if terms is None:
            terms = terms_of(memo[0])
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache[memo] = terms
        text, polarity = memo
        if not terms:
            return
        res.lessons += 1
        for rid in lesson.cites:
            seq, created, oo, units = rec_seq[rid]
            obs = Observation(text, polarity, terms, rid, seq, created, lesson.origin, oo, lesson.surface_hint, units)
            pat = self.memory.match(polarity, terms, self.threshold)
            if pat is not None and (rid, pat.key) in seen:
                continue  # one record counts at most once for one pattern
            before = len(self.memory.patterns)
            p = self.memory.add(obs, pat)
            seen.add((rid, p.key))
            if len(self.memory.patterns) > before:
                res.created.add(p.key)
            res.touched.add(p.key)
            res.observations += 1

    def _accept(self, lessons: list[Lesson], known: list, backend: str) -> list[Lesson]:
        self.verifier.know(known)
        ok = []
        for lesson in lessons:
            why = self.verifier.check(lesson)
            if why is None:
                ok.append(lesson)
            else:
                self.result.rejected.append(Rejection(lesson, why, backend))
        return ok

    def _meta(self, rec, observe_only: bool) -> tuple[int, str, bool, tuple[str, ...]]:
        return (rec.seq, rec.created_at, observe_only, evidence_units(rec))

    # -- the record loop
    def _fold(self, rec) -> None:
        kind = rec.kind
        p = rec.payload
        if kind == "interaction":
            oo = bool(p.get("observe_only"))
            self.receipts.note(rec.record_id, oo)
            if p.get("exit_code") in (0, None):
                return  # most runs succeed: skip the lesson extraction
            lessons = interaction_lessons(rec)
        elif kind == "report":
            receipts = [r for r in p.get("receipts") or () if isinstance(r, str)]
            oo = bool(receipts) and all(self.receipts.observe_only(r) for r in receipts)
            lessons = report_lessons(rec)
        elif kind == "routing":
            oo = bool(p.get("observe_only"))
            lessons = routing_lessons(rec)
        else:
            self._fold_other(rec)
            return
        if self.llm is not None:
            # The model reads every record with a signal; the builtin keeps only the user's structured lessons.
            if lessons or (kind == "report" and p.get("feedback")):
                self._queue(rec, oo)
            lessons = [ls for ls in lessons if ls.origin in ("lesson", "do", "dont")]
        if not lessons:
            return
        lessons = self._accept(lessons, [rec], "builtin")
        meta = {rec.record_id: self._meta(rec, oo)}
        seen: set = set()
        for lesson in lessons:
            self._observe(lesson, meta, seen)

    def _fold_other(self, rec) -> None:
        """Records that carry no lesson but change memory: negative evidence, a human's promotion, the gate's
        measured utility."""
        kind = rec.kind
        pl = rec.payload
        mem = self.memory
        if kind == "negative":
            self._negative(rec)
        elif kind == "promotion":
            if pl.get("human") and isinstance(pl.get("key"), str) and mem.lift(pl["key"]):
                self.result.lifted.add(pl["key"])
        elif kind == "gate":
            util = pl.get("bullet_utility")
            if isinstance(util, Mapping):
                for bid, value in sorted(util.items()):
                    pat = mem.by_id(str(bid))
                    if pat is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
                        pat.utility = round(float(value), 6)
                        self.result.utilities += 1
                        self.result.touched.add(pat.key)

    def _negative(self, rec) -> None:
        pl = rec.payload
        key = pl.get("key")
        if not isinstance(key, str) or not key:
            return
        try:
            needed = int(pl.get("needed") or 1)
        except (TypeError, ValueError):
            needed = 1
        self.memory.suppress(key=key, text=str(pl.get("text") or ""), polarity=str(pl.get("polarity") or ""),
                             record_id=rec.record_id, origin=str(pl.get("origin") or ""), since_seq=rec.seq,
                             needed=needed, reason=str(pl.get("reason") or ""), reset=bool(pl.get("reset")))
        self.result.suppressed.add(key)
        self.result.touched.add(key)

    def _queue(self, rec, oo: bool) -> None:
        self._seqs[rec.record_id] = self._meta(rec, oo)
        self._batch.append(rec)
        if len(self._batch) >= self.llm.batch_size:
            self._flush()

    def _flush(self) -> None:
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        lessons, malformed = self.llm.lessons(batch, bullets=self._bullets())
        self.result.rejected.extend(Rejection(lesson, why, "llm") for lesson, why in malformed)
        lessons = self._accept(lessons, batch, "llm")
        meta = dict(self._seqs)
        for lesson in lessons:
            for rid in lesson.cites:
                if rid not in meta:
                    rec = self.verifier.record(rid)
                    meta[rid] = self._meta(rec, False)
        seen: set = set()
        for lesson in lessons:
            self._observe(lesson, meta, seen)
        self._seqs.clear()

    def _bullets(self) -> list[str]:
        """What the model sees as already learned: the harness's current bullets, then the most-seen patterns."""
        pats = sorted(self.memory.patterns.values(), key=lambda p: (-p.count, p.key))[:40]
        return list(dict.fromkeys(self.current_bullets + [p.text for p in pats]))[:60]

    def run(self) -> ReflectResult:
        mem = self.memory
        start, start_hash = mem.through_seq, mem.through_hash
        try:
            last = self._pass(start, start_hash)
        except _Restart:
            # The ledger does not hold the record memory was reflected through: it was replaced. Keep the patterns
            # (they were real observations) and read this ledger from its beginning.
            self.result = ReflectResult(mem, self.result.backend, 0, 0, restarted=True)
            last = self._pass(0, None)
        self._flush()
        res = self.result
        # The mark moves only with a change: records that change nothing (our own reflect/proposal records, gate
        # episodes) are re-read next time instead, so reflecting twice over the same ledger changes nothing.
        if last is not None and (res.changed or res.restarted):
            res.through_seq = last[0]
            mem.through_seq, mem.through_hash = last
        else:
            res.through_seq = res.from_seq
        return res

    def _pass(self, start: int, start_hash: str | None) -> tuple[int, str] | None:
        last = None
        n = 0
        for rec in self.ledger.iter_records(from_seq=start or None):  # bisects to the mark: reads only what is new
            seq = rec.seq
            last = rec
            if seq <= start:
                if seq == start and start_hash and rec.hash != start_hash:
                    raise _Restart()
                continue
            n += 1
            self._fold(rec)
            if self.progress is not None and n % 10000 == 0:
                self.progress({"event": "reflect", "records": n, "seq": seq})
        if start and (last is None or last.seq < start):
            raise _Restart()
        self.result.records_read = n
        return (last.seq, last.hash) if last is not None and last.seq > start else None


def reflect(ledger, scenario: str, memory: PatternMemory, *, threshold: float, backend=None,
            progress: Callable[[dict], None] | None = None, bullets: list[str] | None = None) -> ReflectResult:
    """Fold the ledger's records after `memory.through_seq` into `memory` (mutated) and return what happened.
    `bullets` (the harness's current learned bullets) are shown to the llm backend so it does not repeat them."""
    return Reflector(ledger, scenario, memory, threshold=threshold, backend=backend, progress=progress,
                     bullets=bullets).run()


# --------------------------------------------------------------------------------------------- llm backend

SYSTEM_PROMPT = """You are the Reflector of reef, a tool that improves a coding agent's instructions from feedback.
You get records from the agent's sessions (user feedback reports, failed runs, routing decisions) and the lessons
already learned. Extract short, general, actionable lessons for the agent's instruction file: one imperative
sentence each, under 200 characters. Only state what the records support.

Answer with one JSON object and nothing else:
{"lessons": [{"text": "Always run the tests before finishing.", "polarity": "do" or "dont",
  "evidence": ["<record_id>", ...],
  "quotes": [{"record_id": "<record_id>", "text": "<a span copied verbatim from that record>"}],
  "surface": null}]}
Cite only record ids you were given. Quote spans exactly as they appear. If nothing is worth learning, answer
{"lessons": []}."""


class LLMError(ReefError):
    """The model endpoint failed or answered something reef cannot use; nothing was reflected."""


def _strip_fence(text: str) -> str:
    text = text.strip()
    m = re.match(r"^```(?:json)?\s*(.*?)\s*```$", text, re.S)
    return m.group(1) if m else text


def parse_answer(body: bytes, source: str) -> list[dict]:
    """The lessons list of an OpenAI chat completion whose content is our JSON object; LLMError otherwise."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise LLMError(f"{source}: the answer is not valid JSON ({len(body)} bytes: {body[:80]!r})") from None
    try:
        content = doc["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LLMError(f"{source}: the answer has no choices[0].message.content") from None
    if not isinstance(content, str):
        raise LLMError(f"{source}: choices[0].message.content is not text")
    try:
        obj = json.loads(_strip_fence(content))
    except ValueError:
        raise LLMError(f"{source}: the model's message is not a JSON object ({content[:80]!r})") from None
    if isinstance(obj, Mapping):
        lessons = obj.get("lessons", obj.get("patterns"))
    else:
        lessons = obj
    if not isinstance(lessons, list):
        raise LLMError(f"{source}: the model's JSON has no 'lessons' list")
    return lessons


def lesson_from_json(d: Any) -> tuple[Lesson | None, str | None]:
    """A Lesson from the model's JSON, or (a stand-in lesson, why it is malformed)."""
    if not isinstance(d, Mapping):
        return Lesson(str(d)[:200], "do", ()), "a lesson is not a JSON object"
    text = d.get("text") or d.get("lesson")
    cites = d.get("evidence", d.get("cites", d.get("record_ids", [])))
    if isinstance(cites, str):
        cites = [cites]
    cites = tuple(c for c in cites if isinstance(c, str)) if isinstance(cites, list) else ()
    quotes_raw = d.get("quotes") or []
    quotes = []
    if isinstance(quotes_raw, list):
        for q in quotes_raw:
            if isinstance(q, Mapping) and isinstance(q.get("record_id"), str):
                quotes.append((q["record_id"], str(q.get("text") or "")))
    if not isinstance(text, str) or not text.strip():
        return Lesson("", "do", cites, tuple(quotes), "llm"), "a lesson has no text"
    polarity = d.get("polarity")
    if polarity not in ("do", "dont"):
        polarity = polarity_of(text)
    hint = d.get("surface") if d.get("surface") in ("memory", "notes", "block", "skill") else None
    shown = dont_text(text) if polarity == "dont" else sentence(text)
    return Lesson(shown[:300], polarity, cites, tuple(quotes), "llm", hint), None


class LLMBackend:
    """An OpenAI-compatible chat endpoint (`POST {model_url}/chat/completions`), through urllib only.

    Each batch of up to `batch_size` signal records is sent with the current lessons; the answer must be a JSON
    object `{"lessons": [...]}` (a ```json fence is tolerated). An unusable answer (HTTP error, not JSON, cut off,
    wrong shape) is retried `retries` times, then LLMError: the caller changes nothing, so the high-water mark
    does not move and the next reflect asks again. A single malformed lesson inside a good answer is rejected
    (and recorded) on its own.
    """

    name = "llm"

    def __init__(self, model_url: str, model: str, *, api_key: str | None = None, batch_size: int = 20,
                 timeout: float = 60.0, retries: int = 1, excerpt_chars: int = 1500):
        if not model_url:
            raise InvalidInput("the llm reflector needs a model URL: set reflector.model_url in harness.yaml or pass --model-url")
        if not model:
            raise InvalidInput("the llm reflector needs a model name: set reflector.model in harness.yaml or pass --model")
        from .model_url import check_model_url

        check_model_url(model_url)
        self.url = model_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.batch_size = batch_size
        self.timeout = timeout
        self.retries = retries
        self.excerpt_chars = excerpt_chars
        self.calls = 0

    def request_body(self, records: list, bullets: list[str]) -> dict:
        items = [{"record_id": r.record_id, "kind": r.kind, "created_at": r.created_at,
                  "text": redact(record_text(r)[: self.excerpt_chars + WINDOW])[0][: self.excerpt_chars]}
                 for r in records]  # redacted past the cut, so a secret straddling it goes whole
        user = json.dumps({"records": items, "current_lessons": bullets}, ensure_ascii=False, indent=1)
        return {"model": self.model, "temperature": 0, "stream": False,
                "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]}

    def _post(self, body: dict) -> bytes:
        import http.client
        import urllib.error
        import urllib.request

        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace") if exc.fp else ""
            raise LLMError(f"{self.url}: HTTP {exc.code} {detail.strip()}") from None
        except http.client.IncompleteRead as exc:
            raise LLMError(f"{self.url}: the answer was cut off after {len(exc.partial)} bytes") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise LLMError(f"{self.url}: {reason}") from None

    def lessons(self, records: list, *, bullets: list[str]) -> tuple[list[Lesson], list[tuple[Lesson, str]]]:
        """(lessons to verify, malformed lessons with why)."""
        body = self.request_body(records, bullets)
        last: LLMError | None = None
        for _ in range(self.retries + 1):
            self.calls += 1
            try:
                raw = self._post(body)
                items = parse_answer(raw, self.url)
                break
            except LLMError as exc:
                last = exc
        else:
            assert last is not None
            raise LLMError(f"reflector model failed: {last}; nothing was reflected (the high-water mark did not move)")
        out, bad = [], []
        for item in items:
            lesson, why = lesson_from_json(item)
            if why is None:
                out.append(lesson)
            else:
                bad.append((lesson, why))
        return out, bad
