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

Backends: `builtin` (offline, deterministic: the rules above) and a model (`ReflectorBackend` in llm_reflector.py:
OpenAI-compatible chat completions or Anthropic Messages). A model backend keeps the builtin's structured lessons
(they are the user's own words) and asks the model for lessons from free text, corrections, failures and routing in
batches; a record contributes at most once per pattern whichever backend found it. Observe-only records are never
sent. A queued record's lessons are folded only once its batch is answered, so when the budget stops the run
(`BudgetExhausted`) the mark stays before the first unanswered record and the next reflect takes it up.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import InvalidInput, NotFound, ReefError
from .printable import plain
from .redact import redact_text
from .patterns import Observation, PatternMemory, dont_text, polarity_of, sentence, terms_of
from .lessons import Lesson, record_text

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
    usage: dict | None = None  # a model backend's calls, tokens and cost (estimated under --dry-run)
    budget_stopped: bool = False
    prompts: list = field(default_factory=list)  # --show-prompt: the request bodies a model backend would be sent
    skipped: list[dict] = field(default_factory=list)  # batches whose model answer was malformed: records, reason

    @property
    def changed(self) -> bool:
        spent = bool(self.usage and self.usage.get("calls") and not self.usage.get("estimated"))
        return bool(self.observations or self.suppressed or self.lifted or self.utilities or self.rejected or spent)

    def to_json(self) -> dict:
        return {
            "backend": self.backend, "from_seq": self.from_seq, "through_seq": self.through_seq,
            "records_read": self.records_read, "observations": self.observations, "lessons": self.lessons,
            "rejected": [r.to_json() for r in self.rejected], "patterns_touched": sorted(self.touched),
            "patterns_created": sorted(self.created), "suppressed": sorted(self.suppressed),
            "lifted": sorted(self.lifted), "utilities": self.utilities, "changed": self.changed,
            "ledger_restarted": self.restarted, "patterns": len(self.memory.patterns),
            "usage": self.usage, "budget_stopped": self.budget_stopped, "skipped_batches": self.skipped,
        }


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


def correction_lesson(sent: str) -> tuple[str, str] | None:
    """The instruction a descriptive correction states ("You forgot to run the tests" → "Run the tests";
    "no, use pnpm" → "Use pnpm"), or None: see corrections.imperative. The quoted span stays the user's sentence,
    so the verifier checks it against the record as for any other lesson."""
    from .corrections import imperative, lead_stripped

    found = imperative(sent)
    if found is not None:
        return found
    rest = lead_stripped(sent)
    if rest != " ".join(sent.split()) and rest.split() and rest.split()[0].lower().strip(",:") in _IMPERATIVE:
        return rest, polarity_of(rest)
    return None


def free_text_lessons(text: str) -> list[tuple[str, str, str, str]]:
    """(sentence, lesson text, polarity, origin) for each sentence of free-text feedback that states a lesson:
    a directive sentence as written (origin "feedback"), or a correction rewritten as the instruction it implies
    (origin "correction"). A sentence that only describes ("the output was wrong") yields nothing."""
    out = []
    for part in _SENTENCE_END.split(text):
        s = part.strip().rstrip(";").strip()
        if len(s) < 6:
            continue
        words = _LEAD_IN.sub("", s).split(maxsplit=1)
        first = words[0].lower().strip(",:") if words else ""
        rewritten = correction_lesson(s) if first not in _IMPERATIVE else None
        if rewritten is not None:
            out.append((s, rewritten[0], rewritten[1], "correction"))
        elif _DIRECTIVE.search(s) or first in _IMPERATIVE:
            out.append((s, _LEAD_IN.sub("", s), polarity_of(s), "feedback"))
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
        for sent, lesson, polarity, origin in free_text_lessons(text):
            out.append(_shown(lesson, polarity, sent, origin))
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
                v = bool(rec.payload.get("observe_only")) if rec.kind in ("interaction", "session") else False
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


class _BudgetStop(Exception):
    def __init__(self, mark: tuple[int, str] | None):
        super().__init__("budget")
        self.mark = mark


class Reflector:
    """One reflect pass. `backend` is "builtin" or a `ReflectorBackend` (llm_reflector.py)."""

    def __init__(self, ledger, scenario: str, memory: PatternMemory, *, threshold: float, backend=None,
                 progress: Callable[[dict], None] | None = None, bullets: list[str] | None = None,
                 warn: Callable[[str], None] | None = None):
        self.ledger = ledger
        self.warn = warn
        self._answered = 0  # batches the model answered readably
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
        self._held: list[tuple[Any, list[Lesson]]] = []  # queued records' own lessons, folded with their answer
        self._prev: tuple[int, str] | None = None  # the last record read before the current one
        self._batch_mark: tuple[int, str] | None = None  # the record read just before the batch's first

    # -- observations
    def _observe(self, lesson: Lesson, rec_seq: dict[str, tuple], seen: set) -> None:
        res = self.result
        # no secret, and no terminal escape or bidi override, becomes a term, a key or a bullet
        memo = (plain(redact_text(lesson.text)), lesson.polarity)
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
        elif kind == "session":  # an ingested turn: implicit reports name it as their receipt
            self.receipts.note(rec.record_id, bool(p.get("observe_only")))
            return
        else:
            self._fold_other(rec)
            return
        if self.llm is not None:
            # The model reads every record with a signal; the builtin keeps only the user's structured lessons.
            if oo:
                pass  # observe-only: never sent to a model; the builtin's lessons stand (counted as observe-only)
            else:
                lessons = [ls for ls in lessons if ls.origin in ("lesson", "do", "dont")]
                if lessons or kind != "report" or p.get("feedback"):
                    self._queue(rec, oo, lessons)
                    return
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

    def _queue(self, rec, oo: bool, own: list[Lesson]) -> None:
        if not self._batch:
            self._batch_mark = self._prev
        self._seqs[rec.record_id] = self._meta(rec, oo)
        self._batch.append(rec)
        self._held.append((rec, own))
        if len(self._batch) >= self.llm.batch_size:
            self._flush()

    def _flush(self) -> None:
        if not self._batch:
            return
        from .llm_reflector import BudgetExhausted, LLMError, MalformedAnswer

        try:
            lessons, malformed = self.llm.lessons(self._batch, bullets=self._bullets())
        except BudgetExhausted:
            raise _BudgetStop(self._batch_mark) from None
        except MalformedAnswer as exc:
            # One unreadable answer costs its batch, not the run: the batch's records are read past (sending them
            # again would pay again for the same answer), the failure is a `rejection` record naming them, and the
            # user's own structured lessons in them still count.
            rid = self._record_failure(exc)
            self.result.skipped.append({"records": [r.record_id for r in self._batch], "reason": str(exc),
                                        "rejection": rid})
            if self.warn is not None:
                self.warn(f"warning: skipped a malformed answer of the reflector model for {len(self._batch)} "
                          f"record(s): {exc}" + (f" (recorded as {rid})" if rid else ""))
            lessons, malformed = [], []
        except LLMError as exc:
            self._record_failure(exc)
            raise
        else:
            self._answered += 1
        batch, self._batch = self._batch, []
        held, self._held = self._held, []
        for rec, own in held:  # the user's structured lessons of the answered records
            if own:
                seen: set = set()
                for lesson in self._accept(own, [rec], "builtin"):
                    self._observe(lesson, {rec.record_id: self._seqs[rec.record_id]}, seen)
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

    def _record_failure(self, exc: Exception) -> str | None:
        """An unusable answer is refused, never folded, and recorded: one `rejection` record naming the batch (its
        id derives from the batch and the reason, so a retry that fails the same way adds nothing). Returns its id."""
        if getattr(self.llm, "mode", "send") != "send":
            return None
        import hashlib

        ids = [r.record_id for r in self._batch]
        reason = f"unusable model answer: {exc}"[:500]
        body = {"lesson": Lesson("", "do", tuple(ids)).to_json(), "reason": reason, "backend": "llm",
                "records": len(ids)}
        rid = "rej-llm-" + hashlib.sha256(json.dumps([ids, reason]).encode()).hexdigest()[:24]
        try:
            self.ledger.append("rejection", body, release_id=None, content_id=None, record_id=rid)
        except ReefError:
            pass  # the failure itself is reported to the caller either way
        return rid

    def _bullets(self) -> list[str]:
        """What the model sees as already learned: the harness's current bullets, then the most-seen patterns."""
        pats = sorted(self.memory.patterns.values(), key=lambda p: (-p.count, p.key))[:40]
        return list(dict.fromkeys(self.current_bullets + [p.text for p in pats]))[:60]

    def run(self) -> ReflectResult:
        mem = self.memory
        start, start_hash = mem.through_seq, mem.through_hash
        try:
            try:
                last = self._pass(start, start_hash)
            except _Restart:
                # The ledger does not hold the record memory was reflected through: it was replaced. Keep the
                # patterns (they were real observations) and read this ledger from its beginning.
                self.result = ReflectResult(mem, self.result.backend, 0, 0, restarted=True)
                last = self._pass(0, None)
            self._flush()
        except _BudgetStop as stop:
            # Stop cleanly: what was answered is folded; the mark stays before the first unanswered record.
            last = stop.mark if stop.mark is not None and stop.mark[0] > start else None
            self.result.budget_stopped = True
        res = self.result
        if res.skipped and not self._answered:
            from .llm_reflector import LLMError

            n = sum(len(s["records"]) for s in res.skipped)
            raise LLMError(f"every answer of the reflector model was malformed ({len(res.skipped)} batch(es), {n} "
                           f"record(s); the last: {res.skipped[-1]['reason']}); each is recorded as a rejection; "
                           "nothing was reflected (the high-water mark did not move)")
        if self.llm is not None:
            res.usage = self.llm.usage.to_json()
            res.prompts = list(self.llm.usage.prompts)
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
            self._prev = (seq, rec.hash)
            if self.progress is not None and n % 10000 == 0:
                self.progress({"event": "reflect", "records": n, "seq": seq})
        if start and (last is None or last.seq < start):
            raise _Restart()
        self.result.records_read = n
        return (last.seq, last.hash) if last is not None and last.seq > start else None


def reflect(ledger, scenario: str, memory: PatternMemory, *, threshold: float, backend=None,
            progress: Callable[[dict], None] | None = None, bullets: list[str] | None = None,
            warn: Callable[[str], None] | None = None) -> ReflectResult:
    """Fold the ledger's records after `memory.through_seq` into `memory` (mutated) and return what happened.
    `bullets` (the harness's current learned bullets) are shown to the llm backend so it does not repeat them;
    `warn` hears one line per batch skipped for a malformed model answer."""
    return Reflector(ledger, scenario, memory, threshold=threshold, backend=backend, progress=progress,
                     bullets=bullets, warn=warn).run()


# --------------------------------------------------------------------------------------------- model backends


def __getattr__(name: str):
    """The model backends live in llm_reflector.py (it imports this module: loaded on first use)."""
    if name in ("LLMBackend", "LLMError", "parse_answer", "lesson_from_json", "SYSTEM_PROMPT", "ReflectorBackend",
                "OpenAIChat", "AnthropicMessages", "BudgetExhausted", "MalformedAnswer"):
        from . import llm_reflector

        return getattr(llm_reflector, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
