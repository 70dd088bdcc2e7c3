"""The canary gate: publish a candidate harness only if it beats the current one on held-out tasks.

Policies (harness.yaml `gate.policy`, `reef eval --policy`):

* ``paired``. Per canary task, the paired improvement d_t = mean over k repeats of (candidate - current)
  score, both sides run with the same episode seed. Publish only if all three hold:
  1. the lower bound of a one-sided confidence interval for the mean of d_t over tasks is above 0: a seeded
     percentile bootstrap over tasks (`gate.resamples`, default 2000 resamples; `gate.confidence`, default 0.90,
     so the lower bound is the 10th percentile of the resampled means);
  2. no task regresses by more than `gate.tolerance` (d_t >= -tolerance; default 0.4, i.e. with k = 3 the
     candidate may not lose two more of a task's three episodes than the current harness);
  3. every `sentinel` task passes: the candidate's mean score on it is at least 0.5.
  To spend less it runs in stages, as GEPA does: a cheap screen (sentinels first, then a seeded sample:
  `gate.screen` of the set, at least `gate.screen_min` tasks, one repeat), then pass 1 over every task, then
  passes 2..k. Futility checks reject early when the candidate is behind on the screen, or leads by fewer than
  MIN_LEAD (2) episodes after a pass. They only ever reject, so they cannot raise the false-accept rate above
  that of the final test; they cost false rejects, which `bench/gate_sim.py` measures. After every stage the
  run also stops as soon as the decision can no longer change whatever the missing episodes score: every
  criterion is monotone in each score (the bootstrap's resample indices are fixed by the seed), so filling the
  missing episodes with the worst and with the best case bounds the decision exactly.
* ``sequential`` (default): adaptive and sequential (reef_cli.adaptive, statistics in reef_cli.sequential). With
  the current harness's history on this suite (`current_history`), each pass starts on the tasks it fails most.
  Passes over every task with `gate.looks_per_pass` looks per pass; at each look an exact group-sequential sign-flip test on
  the paired differences, its alpha (1 - `gate.confidence`) spent by information fraction (`gate.spend_shape`), so
  stopping at any look keeps the false-accept rate within alpha under "no difference"; futility looks reject early.
  An undecided candidate gets `gate.extra_passes` (default 2) more passes on its discordant tasks only. A drop test
  (one e-process over all tasks, probes up to `gate.max_repeats`, default 6k pairs per task) vetoes a candidate
  once its wealth reaches 1 / `gate.drop_alpha`: at most that chance of vetoing a candidate that drops no task.
  Before a publish every task the current harness passes reliably must show the candidate holds it (a
  non-inferiority bound); a task still past `gate.tolerance` at its cap blocks the publish. Sentinels as above.
  `reef eval --explain` prints its looks and per-task evidence (`Verdict.trace`); the verdict's interval is the
  bootstrap of the per-task mean differences over the pairs run, descriptive only. The default since issue 16:
  in bench/gate_sim.py it publishes about twice as many helpful candidates as paired and lets through a quarter as
  many "improves here, breaks there" ones.
* ``tally`` (reef 0.1.3's rule): every task x repeat pairing is a win, loss or tie; publish iff
  wins - losses > `gate.margin` (default 0). No statistics; runs everything.
* ``floor``: the candidate alone; publish iff every task's mean score is at least `gate.floor` (default 1.0).
* ``always``: publish without running anything (for comparison only).

The engine is pure: it asks a sampler for episode scores in batches, so the same code runs real episodes
(`gate_candidate`) and simulated ones (`bench/gate_sim.py`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .config import GateConfig
from .errors import InvalidInput, PolicyError

POLICIES = ("paired", "sequential", "tally", "floor", "always")
CANDIDATE = "candidate"
CURRENT = "current"
PUBLISH = "publish"
REJECT = "reject"
SENTINEL_PASS = 0.5
MIN_LEAD = 2  # after each pass the candidate must lead by this many episodes: one lucky episode is not a lead

Sampler = Callable[[list], Mapping]
Progress = Callable[[dict], None]


# ------------------------------------------------------------------------------------------------ settings


_DEFAULTS = GateConfig()  # one source for the defaults: harness.yaml's gate section


@dataclass(frozen=True)
class GateSettings:
    """GateConfig's scalar settings plus what one run may override (`--max-episodes`), validated."""

    policy: str = _DEFAULTS.policy
    repeats: int = _DEFAULTS.repeats
    confidence: float = _DEFAULTS.confidence
    tolerance: float = _DEFAULTS.tolerance
    seed: int = _DEFAULTS.seed
    margin: int = _DEFAULTS.margin
    floor: float = _DEFAULTS.floor
    screen: float = _DEFAULTS.screen
    screen_min: int = _DEFAULTS.screen_min
    resamples: int = _DEFAULTS.resamples
    max_repeats: int = _DEFAULTS.max_repeats
    drop_alpha: float = _DEFAULTS.drop_alpha
    extra_passes: int = _DEFAULTS.extra_passes
    looks_per_pass: int = _DEFAULTS.looks_per_pass
    spend_shape: float = _DEFAULTS.spend_shape
    max_episodes: int | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InvalidInput(f"gate policy '{self.policy}' is unknown; expected one of {', '.join(POLICIES)}")
        if self.repeats < 1:
            raise InvalidInput(f"gate repeats must be at least 1, got {self.repeats}")
        if not 0.5 < self.confidence < 1:
            raise InvalidInput(f"gate confidence must be in (0.5, 1), got {self.confidence}")
        if not 0 < self.drop_alpha < 1:
            raise InvalidInput(f"gate drop_alpha must be in (0, 1), got {self.drop_alpha}")
        if self.max_repeats < 0:
            raise InvalidInput(f"gate max_repeats must be 0 (the default cap) or more, got {self.max_repeats}")
        if self.extra_passes < 0:
            raise InvalidInput(f"gate extra_passes must be 0 or more, got {self.extra_passes}")
        if self.looks_per_pass < 1:
            raise InvalidInput(f"gate looks_per_pass must be at least 1, got {self.looks_per_pass}")
        if not 0 < self.spend_shape <= 10:
            raise InvalidInput(f"gate spend_shape must be in (0, 10], got {self.spend_shape}")
        if self.max_episodes is not None and self.max_episodes < 0:
            raise InvalidInput(f"--max-episodes must be 0 or more, got {self.max_episodes}")

    @classmethod
    def from_config(cls, gate: Any, **overrides) -> "GateSettings":
        """From harness.yaml's GateConfig; `overrides` with value None are ignored."""
        base = {name: getattr(gate, name) for name in cls.__dataclass_fields__ if hasattr(gate, name)}
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass(frozen=True)
class TaskSpec:
    id: str
    sentinel: bool = False


def full_tally_cost(n_tasks: int, repeats: int) -> int:
    """Episodes the anchor's full paired tally spends: both sides, every task, every repeat."""
    return 2 * n_tasks * repeats


def screen_tasks(tasks: Sequence[TaskSpec], settings: GateSettings) -> list[TaskSpec]:
    """The screen: every sentinel, then a seeded sample, `screen` of the set and at least `screen_min` tasks (all of
    them in a suite that small)."""
    n = len(tasks)
    size = min(n, max(settings.screen_min, math.ceil(settings.screen * n)))
    sentinels = [t for t in tasks if t.sentinel]
    others = [t for t in tasks if not t.sentinel]
    rng = random.Random(f"reef-screen:{settings.seed}")
    picked = sentinels + rng.sample(others, max(0, min(len(others), size - len(sentinels))))
    order = {t.id: i for i, t in enumerate(tasks)}
    return sorted(picked, key=lambda t: order[t.id])


def estimate(settings: GateSettings, tasks: Sequence[TaskSpec]) -> dict:
    """What a run may spend, for the line printed before it starts."""
    n, k = len(tasks), settings.repeats
    full = full_tally_cost(n, k)
    if settings.policy == "always":
        most, least = 0, 0
    elif settings.policy == "floor":
        most, least = n * k, 1 if n else 0
    elif settings.policy == "tally":
        most = least = full
    elif settings.policy == "sequential":
        from .adaptive import CAP_FACTOR

        cap = max(k + settings.extra_passes, settings.max_repeats or CAP_FACTOR * k)
        most, least = 2 * n * cap, 2 * max(1, round(n / settings.looks_per_pass)) if n else 0  # up to the first look
    else:
        most, least = full, 2 * len(screen_tasks(tasks, settings)) if n else 0
    if settings.max_episodes is not None:
        most = min(most, settings.max_episodes)
        least = min(least, most)
    return {"policy": settings.policy, "tasks": n, "repeats": k, "max": most, "min": least, "full_tally": full,
            "budget": settings.max_episodes}


# ------------------------------------------------------------------------------------------------ statistics


@lru_cache(maxsize=64)
def _draws(n: int, resamples: int, seed: int) -> tuple[tuple[int, ...], ...]:
    rng = random.Random(f"reef-bootstrap:{seed}:{n}")
    return tuple(tuple(rng.randrange(n) for _ in range(n)) for _ in range(resamples))


def bootstrap_interval(values: Sequence[float], confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap of the mean over `values`: (lower, upper) one-sided bounds at `confidence` each.

    The resample indices depend only on (n, resamples, seed), so the bounds are monotone in every value: raising
    one value never lowers either bound. The early stop relies on that.
    """
    n = len(values)
    if n == 0:
        return (0.0, 0.0)
    vals = list(values)
    get = vals.__getitem__
    means = sorted(sum(map(get, idx)) / n for idx in _draws(n, resamples, seed))
    k = int(math.floor((1 - confidence) * resamples))
    return means[k], means[resamples - 1 - k]


# ------------------------------------------------------------------------------------------------ outcomes


@dataclass(frozen=True)
class TaskScore:
    task_id: str
    sentinel: bool
    candidate: float | None
    current: float | None
    delta: float | None
    pairs: int
    status: str  # improved | same | worse | regressed | sentinel-failed | passed | failed | not-run

    def to_json(self) -> dict:
        return {"task_id": self.task_id, "sentinel": self.sentinel, "candidate": _r(self.candidate),
                "current": _r(self.current), "delta": _r(self.delta), "pairs": self.pairs, "status": self.status}

    @classmethod
    def from_json(cls, d: Mapping) -> "TaskScore":
        return cls(d["task_id"], bool(d.get("sentinel")), d.get("candidate"), d.get("current"), d.get("delta"),
                   int(d.get("pairs", 0)), d.get("status", ""))


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


@dataclass(frozen=True)
class Outcome:
    decision: str
    reason: str
    policy: str
    per_task: tuple[TaskScore, ...]
    interval: tuple[float, float, float] | None
    episodes_spent: int
    stage: str  # screen | pass N (futility) | early-stop | complete | budget | skipped
    tally: dict = field(default_factory=dict)
    trace: dict = field(default_factory=dict)  # policy sequential: its looks and per-task evidence (`--explain`)


class _Book:
    """The scores collected so far and the episode budget."""

    def __init__(self, settings: GateSettings, sample: Sampler) -> None:
        self.k = settings.repeats
        self.top = settings.repeats  # one past the highest repeat index run so far (probes go past k)
        self.sample = sample
        self.budget = settings.max_episodes
        self.scores: dict[tuple, float] = {}
        self.spent = 0
        self.exhausted = False

    def run(self, reqs: list[tuple], unit: int = 2) -> None:
        """Run what is missing of `reqs`, cut to the budget in whole units (pairs for paired policies)."""
        todo = [r for r in dict.fromkeys(reqs) if r not in self.scores]
        if self.budget is not None:
            room = max(0, self.budget - self.spent)
            if len(todo) > room:
                todo = todo[: room - room % unit]
                self.exhausted = True
        if not todo:
            return
        got = self.sample(todo)
        for r in todo:
            if r not in got:
                raise RuntimeError(f"the sampler returned no score for episode {r}")
            self.scores[r] = float(got[r])
            self.top = max(self.top, r[2] + 1)
        self.spent += len(todo)

    def side(self, tid: str, side: str) -> list[float]:
        return [self.scores[(tid, side, r)] for r in range(self.top) if (tid, side, r) in self.scores]

    def pairs(self, tid: str, upto: int | None = None) -> list[float]:
        out = []
        for r in range(self.top if upto is None else upto):
            c, u = self.scores.get((tid, CANDIDATE, r)), self.scores.get((tid, CURRENT, r))
            if c is not None and u is not None:
                out.append(c - u)
        return out


def _pair_reqs(tasks: Iterable[TaskSpec], repeat: int) -> list[tuple]:
    """Candidate and current interleaved per task, so drift on the machine hits both sides alike."""
    out = []
    for t in tasks:
        out += [(t.id, CANDIDATE, repeat), (t.id, CURRENT, repeat)]
    return out


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


class _Paired:
    def __init__(self, settings: GateSettings, tasks: Sequence[TaskSpec], book: _Book) -> None:
        self.s = settings
        self.tasks = list(tasks)
        self.book = book

    def _filled(self, fill: str) -> tuple[list[float], dict[str, float]]:
        """Per-task d_t and sentinel means with every missing episode set to the worst or the best case."""
        k = self.book.k
        lo_c, lo_u = (0.0, 1.0) if fill == "worst" else (1.0, 0.0)
        scores = self.book.scores
        d, sent = [], {}
        for t in self.tasks:
            total_d = total_c = 0.0
            for r in range(k):
                c = scores.get((t.id, CANDIDATE, r), lo_c)
                total_d += c - scores.get((t.id, CURRENT, r), lo_u)
                total_c += c
            d.append(total_d / k)
            if t.sentinel:
                sent[t.id] = total_c / k
        return d, sent

    def judge(self, d: list[float], sent: Mapping[str, float]) -> tuple[str, str]:
        failed = [tid for tid, m in sent.items() if m < SENTINEL_PASS]
        if failed:
            names = ", ".join(repr(x) for x in failed)
            return REJECT, f"sentinel task {names} failed (candidate mean score below {SENTINEL_PASS})"
        worst = min(range(len(d)), key=lambda i: d[i])
        if d[worst] < -self.s.tolerance - 1e-9:
            return REJECT, f"task '{self.tasks[worst].id}' regressed by {-d[worst]:.2f} (tolerance {self.s.tolerance:g})"
        lo, _hi = bootstrap_interval(d, self.s.confidence, self.s.resamples, self.s.seed)
        level = f"{self.s.confidence:.0%}"
        if lo > 1e-12:
            return PUBLISH, f"mean paired improvement {_mean(d):+.3f}, {level} lower bound {lo:+.3f} > 0"
        return REJECT, f"not better: the {level} lower bound of the mean paired improvement is {lo:+.3f} (needs > 0)"

    def certain(self) -> tuple[str, str] | None:
        """The decision if no missing episode can change it (each criterion is monotone in every score)."""
        worst = self.judge(*self._filled("worst"))
        if worst[0] == PUBLISH:
            return worst
        best = self.judge(*self._filled("best"))
        if best[0] == REJECT:
            return best
        return None

    def observed_interval(self) -> tuple[float, float, float] | None:
        d = [_mean(self.book.pairs(t.id)) for t in self.tasks]
        d = [x for x in d if x is not None]
        if not d:
            return None
        lo, hi = bootstrap_interval(d, self.s.confidence, self.s.resamples, self.s.seed)
        return (lo, hi, self.s.confidence)

    def _lead(self, tasks: Iterable[TaskSpec]) -> float:
        return sum(sum(self.book.pairs(t.id)) for t in tasks)

    def run(self) -> tuple[str, str, str]:
        book, k = self.book, self.book.k
        screen = screen_tasks(self.tasks, self.s)
        stages: list[tuple[str, list[tuple]]] = [("screen", _pair_reqs(screen, 0)), ("pass 1", _pair_reqs(self.tasks, 0))]
        stages += [(f"pass {r + 1}", _pair_reqs(self.tasks, r)) for r in range(1, k)]
        for name, reqs in stages:
            book.run(reqs)
            done = self.certain()
            if done is not None:
                complete = all(len(book.pairs(t.id)) == k for t in self.tasks)
                return done[0], done[1], "complete" if complete else "early-stop"
            if book.exhausted:
                return REJECT, f"the budget of {book.budget} episodes ran out before the decision was certain", "budget"
            if name == "screen" and len(screen) < len(self.tasks):
                lead = self._lead(screen)
                if lead < 0:
                    return REJECT, (f"screen: the candidate is behind on the {len(screen)} screen task(s) "
                                    f"({lead:+g} episodes); the rest of the canary set was not run"), "screen"
            if name.startswith("pass"):
                lead, need = self._lead(self.tasks), min(MIN_LEAD, len(self.tasks))
                if lead < need:
                    return REJECT, (f"not better: after {name} of {k} over all {len(self.tasks)} tasks the candidate "
                                    f"leads by {lead:+g} episodes (needs {need}); stopped early"), name
        raise AssertionError("the last pass always decides")  # pragma: no cover


def evaluate(settings: GateSettings, tasks: Sequence[TaskSpec], sample: Sampler,
             history: Mapping[str, Sequence[float]] | None = None) -> Outcome:
    """Run `settings.policy` over `tasks`, asking `sample(requests) -> {request: score}` for episodes. `history`: the
    current harness's scores per task in earlier gate runs (`current_history`); policy `sequential` orders its passes
    and judges which tasks are reliable by it, the others ignore it."""
    tasks = list(tasks)
    book = _Book(settings, sample)
    policy = settings.policy
    interval = None
    tally: dict = {}
    trace: dict = {}
    if not tasks:
        return Outcome(REJECT, "no canary tasks", policy, (), None, 0, "skipped")
    if policy == "always":
        decision, reason, stage = PUBLISH, "policy 'always' publishes every candidate (no episodes run)", "skipped"
    elif policy == "tally":
        for r in range(settings.repeats):
            book.run(_pair_reqs(tasks, r))
        wins = losses = ties = 0
        for t in tasks:
            for d in book.pairs(t.id):
                wins += d > 0
                losses += d < 0
                ties += d == 0
        tally = {"wins": wins, "losses": losses, "ties": ties, "margin": settings.margin}
        ok = wins - losses > settings.margin
        decision = PUBLISH if ok else REJECT
        reason = f"wins - losses = {wins} - {losses} = {wins - losses} {'>' if ok else '<='} margin {settings.margin}"
        stage = "budget" if book.exhausted else "complete"
    elif policy == "floor":
        decision, reason, stage = PUBLISH, "", "complete"
        for r in range(settings.repeats):
            book.run([(t.id, CANDIDATE, r) for t in tasks], unit=1)
            below = [t.id for t in tasks
                     if (sum(book.side(t.id, CANDIDATE)) + (settings.repeats - len(book.side(t.id, CANDIDATE))))
                     / settings.repeats < settings.floor - 1e-9]
            if below:
                decision, stage = REJECT, ("complete" if r == settings.repeats - 1 else "early-stop")
                reason = f"task '{below[0]}' cannot reach the floor {settings.floor:g}"
                break
            if book.exhausted:
                decision, stage = REJECT, "budget"
                reason = f"the budget of {book.budget} episodes ran out before every task was scored"
                break
        else:
            reason = f"every task scored at least the floor {settings.floor:g}"
    elif policy == "sequential":
        from .adaptive import Sequential

        seq = Sequential(settings, tasks, book, screen_tasks(tasks, settings), history)
        decision, reason, stage = seq.run()
        trace = seq.trace()
        # what `reef eval` shows and the efficacy bench reads: the bootstrap interval of the per-task mean differences
        # over the pairs run. Descriptive here (the sign-flip test decided, on its own pairs), so it is the same
        # number whichever policy ran.
        interval = _Paired(settings, tasks, book).observed_interval()
    else:
        engine = _Paired(settings, tasks, book)
        decision, reason, stage = engine.run()
        interval = engine.observed_interval()
    if not trace and policy in ("paired", "tally"):
        trace = {"tasks": {t.id: {"diffs": [_r(x) for x in book.pairs(t.id)], "mean": _r(_mean(book.pairs(t.id))),
                                  "why": f"{len(book.pairs(t.id))} pair(s); the run stopped at stage {stage}"}
                           for t in tasks}}
    return Outcome(decision, reason, policy, _per_task(settings, tasks, book), interval, book.spent, stage, tally,
                   trace)


def _per_task(settings: GateSettings, tasks: Sequence[TaskSpec], book: _Book) -> tuple[TaskScore, ...]:
    out = []
    for t in tasks:
        c, u, d = _mean(book.side(t.id, CANDIDATE)), _mean(book.side(t.id, CURRENT)), _mean(book.pairs(t.id))
        if c is None:
            status = "not-run"
        elif settings.policy == "floor":
            status = "passed" if c >= settings.floor - 1e-9 else "failed"
        elif t.sentinel and c < SENTINEL_PASS:
            status = "sentinel-failed"
        elif d is None:
            status = "not-run"
        elif d < -settings.tolerance - 1e-9:
            status = "regressed"
        else:
            status = "improved" if d > 0 else ("worse" if d < 0 else "same")
        out.append(TaskScore(t.id, t.sentinel, c, u, d, len(book.pairs(t.id)), status))
    return tuple(out)


# ------------------------------------------------------------------------------------------------ verdict


@dataclass(frozen=True)
class Verdict:
    decision: str
    reason: str
    policy: str
    per_task: tuple[TaskScore, ...]
    interval: tuple[float, float, float] | None
    episodes_spent: int
    episodes_budget: int
    bullet_utility: dict = field(default_factory=dict)
    record_id: str | None = None
    stage: str = ""
    repeats: int = 0
    run: str = ""
    baseline_release_id: str | None = None
    baseline_content_id: str = ""
    candidate_content_id: str = ""
    suite_digest: str = ""
    attribution_episodes: int = 0
    errors: tuple[str, ...] = ()
    tally: dict = field(default_factory=dict)
    trace: dict = field(default_factory=dict)

    @classmethod
    def of(cls, outcome: Outcome, **run: Any) -> "Verdict":
        """The engine's outcome, field for field, plus what only a real run knows (`run`: budget, ids, utilities)."""
        return cls(**{f.name: getattr(outcome, f.name) for f in fields(Outcome)}, **run)

    @property
    def published(self) -> bool:
        return self.decision == PUBLISH

    def to_json(self) -> dict:
        return {
            "decision": self.decision, "reason": self.reason, "policy": self.policy, "stage": self.stage,
            "per_task": [t.to_json() for t in self.per_task],
            "interval": None if self.interval is None else
            {"lo": _r(self.interval[0]), "hi": _r(self.interval[1]), "level": self.interval[2]},
            "episodes_spent": self.episodes_spent, "episodes_budget": self.episodes_budget,
            "attribution_episodes": self.attribution_episodes, "repeats": self.repeats,
            "bullet_utility": {k: _r(v) for k, v in self.bullet_utility.items()},
            "record_id": self.record_id, "run": self.run, "baseline_release_id": self.baseline_release_id,
            "baseline_content_id": self.baseline_content_id, "candidate_content_id": self.candidate_content_id,
            "suite_digest": self.suite_digest, "errors": list(self.errors), "tally": dict(self.tally),
            **({"trace": self.trace} if self.trace else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping) -> "Verdict":
        iv = d.get("interval")
        return cls(
            decision=d["decision"], reason=d.get("reason", ""), policy=d["policy"],
            per_task=tuple(TaskScore.from_json(t) for t in d.get("per_task") or ()),
            interval=None if not iv else (iv["lo"], iv["hi"], iv["level"]),
            episodes_spent=int(d.get("episodes_spent", 0)), episodes_budget=int(d.get("episodes_budget", 0)),
            bullet_utility=dict(d.get("bullet_utility") or {}), record_id=d.get("record_id"),
            stage=d.get("stage", ""), repeats=int(d.get("repeats", 0)), run=d.get("run", ""),
            baseline_release_id=d.get("baseline_release_id"), baseline_content_id=d.get("baseline_content_id", ""),
            candidate_content_id=d.get("candidate_content_id", ""), suite_digest=d.get("suite_digest", ""),
            attribution_episodes=int(d.get("attribution_episodes", 0)), errors=tuple(d.get("errors") or ()),
            tally=dict(d.get("tally") or {}), trace=dict(d.get("trace") or {}),
        )

    def release_meta(self) -> dict:
        """The compact form a release carries in `meta["gate"]` (the full verdict is the ledger record)."""
        return {
            "decision": self.decision, "policy": self.policy, "record_id": self.record_id,
            "interval": self.to_json()["interval"], "episodes_spent": self.episodes_spent,
            "tasks": {t.task_id: _r(t.delta) for t in self.per_task}, "run": self.run,
        }


# ------------------------------------------------------------------------------------------------ harness diffs

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


# ------------------------------------------------------------------------------------------------ running it


def _content_id(store, files: Mapping) -> str:
    return store.git.write_tree(dict(files))


def _run_key(parts: dict) -> str:
    return "gate_" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def _ledger_append(ledger, kind: str, payload: dict, *, release_id, content_id, record_id=None) -> str | None:
    if ledger is None:
        return None
    rec = ledger.append(kind, payload, release_id=release_id, content_id=content_id, record_id=record_id)
    return getattr(rec, "record_id", None)


def _interactions(ledger) -> Iterable[Any]:
    if ledger is None:
        return ()
    return ledger.iter_records(kind="interaction")


def gate_candidate(
    store,
    candidate_files: Mapping,
    *,
    ledger,
    baseline=None,
    workers: int | None = None,
    policy: str | None = None,
    max_episodes: int | None = None,
    attribute: Mapping[str, Mapping] | None = None,
    progress: Progress | None = None,
    journal_dir: Path | None = None,
    repeats: int | None = None,
    environ: Mapping[str, str] | None = None,
    executor=None,
) -> Verdict | None:
    """Run the canary gate of `candidate_files` against `baseline` (default: the head release).

    `baseline` is a Release, a files dict, or None. Tasks, evaluators, the agent command and the gate settings all
    come from the baseline's harness.yaml, so a candidate cannot change how it is judged. Returns None when the
    baseline has no canary tasks. Every episode is recorded in `ledger` as kind "episode" and the verdict as kind
    "gate" (whose record id the Verdict carries). `attribute` maps new-bullet ids to candidate files without that
    bullet; each bullet's utility (candidate mean score minus the ablated one's, over the canary set) lands in
    `Verdict.bullet_utility`. Publishing is the caller's move (`publish_gated`).
    """
    from .config import CONFIG_NAME, parse_config
    from .durable import make_dirs
    from .episodes import EpisodeRequest, EpisodeRunner, Journal, materialise_readonly, rmtree
    from .executors import ExecutorSpec
    from .tasks import check_held_out, load_suite

    if baseline is None:
        baseline = store.require_head()
    if isinstance(baseline, Mapping):
        base_files, base_release = dict(baseline), None
    else:
        base_files, base_release = store.files_of(baseline), baseline
    if CONFIG_NAME not in base_files:
        raise InvalidInput(f"the baseline harness has no {CONFIG_NAME}")
    config = parse_config(base_files[CONFIG_NAME].data, source=f"{CONFIG_NAME} (baseline)")
    suite = load_suite(base_files, config.gate.tasks)
    canary = suite.canary
    if not canary:
        return None
    check_held_out(canary, _interactions(ledger))
    settings = GateSettings.from_config(config.gate, policy=policy, max_episodes=max_episodes, repeats=repeats)
    if settings.policy != "always" and not config.agent:
        raise InvalidInput(f"{CONFIG_NAME} has no 'agent' to run the canary tasks with; "
                           "set e.g. agent: [reef-claude, -p, \"{prompt}\"]")
    cand_files = dict(candidate_files)
    base_cid = base_release.content_id if base_release is not None else _content_id(store, base_files)
    cand_cid = _content_id(store, cand_files)
    # The baseline's release is part of the run: its episodes are recorded under it, so the same content judged as a
    # release and as a plain tree (`reef ci --base DIR`) must not share a journal whose record ids then collide.
    run = _run_key({"v": 1, "baseline": base_cid, "candidate": cand_cid, "suite": suite.digest,
                    "agent": list(config.agent), "seed": settings.seed,
                    "baseline_release": base_release.release_id if base_release is not None else None})
    run_dir = Path(journal_dir) if journal_dir is not None else store.dir / "gate" / run
    make_dirs(run_dir)  # reef's state: owner-only whatever the umask
    journal = Journal(run_dir / "journal.jsonl")
    trees = run_dir / "trees"
    make_dirs(trees)
    dirs = {CURRENT: materialise_readonly(trees / base_cid, base_files),
            CANDIDATE: materialise_readonly(trees / cand_cid, cand_files)}
    cids = {CURRENT: base_cid, CANDIDATE: cand_cid}
    runner = EpisodeRunner(config.agent, suite_dir=dirs[CURRENT], seed=settings.seed, workers=workers,
                           environ=environ, store_content=config.store_content,
                           executor=executor or ExecutorSpec.of(environ=environ, config=config.gate))
    by_id = {t.id: t for t in canary}
    specs = [TaskSpec(t.id, t.sentinel) for t in canary]
    base_rid = base_release.release_id if base_release is not None else None
    errors: list[str] = []
    counter = {"done": 0}
    emit = progress or (lambda _e: None)

    def on_result(res, resumed: bool) -> None:
        counter["done"] += 1
        if res.error and len(errors) < 20:
            errors.append(f"{res.task_id} [{res.side} #{res.repeat + 1}]: {res.error}")
        # The record id was journaled with the episode, so the resend after a resume is idempotent.
        rec_id = res.record_id or f"ep.{run[5:]}.{hashlib.sha256(res.key.encode()).hexdigest()[:20]}"
        _ledger_append(ledger, "episode", {"key": res.key, **res.ledger_payload(run)},
                       release_id=base_rid if res.side == CURRENT else None, content_id=res.content_id,
                       record_id=rec_id)
        emit({"event": "episode", "task_id": res.task_id, "side": res.side, "repeat": res.repeat,
              "score": res.score, "resumed": resumed, "done": counter["done"], "error": res.error})

    def sample(reqs: list) -> dict:
        eps = [EpisodeRequest(by_id[tid], side, r, dirs[side], cids[side]) for tid, side, r in reqs]
        got = runner.run_many(eps, journal=journal, on_result=on_result)
        return {(ep.task.id, ep.side, ep.repeat): got[ep.key].score for ep in eps}

    est = estimate(settings, specs)
    emit({"event": "plan", **est, "run": run, "resumable": len(journal)})
    history = (current_history(ledger, base_cid, suite.digest, {t.id for t in specs}, exclude_run=run)
               if settings.policy == "sequential" else None)
    outcome = evaluate(settings, specs, sample, history)
    utilities: dict[str, float | None] = {}
    tests: dict[str, dict] = {}
    attribution_spent = 0
    if attribute:
        emit({"event": "stage", "stage": "attribution", "bullets": len(attribute)})
        before = counter["done"]
        utilities, tests = _attribute(settings, canary, attribute, store, trees, dirs, cids, runner, journal, on_result)
        outcome = replace(outcome, trace={**outcome.trace, "bullets": tests})
        attribution_spent = counter["done"] - before
    verdict = Verdict.of(
        outcome,
        episodes_budget=settings.max_episodes if settings.max_episodes is not None else
        full_tally_cost(len(specs), settings.repeats),
        bullet_utility=utilities, repeats=settings.repeats, run=run,
        baseline_release_id=base_rid, baseline_content_id=base_cid, candidate_content_id=cand_cid,
        suite_digest=suite.digest, attribution_episodes=attribution_spent, errors=tuple(errors),
    )
    payload = verdict.to_json()
    payload.pop("record_id")
    payload["new_bullets"] = [{"id": b.id, "path": b.path, "text": b.text} for b in new_bullets(base_files, cand_files)]
    record_id = _ledger_append(ledger, "gate", payload, release_id=base_rid, content_id=cand_cid)
    verdict = replace(verdict, record_id=record_id)
    rmtree(trees)
    emit({"event": "done", "decision": verdict.decision, "episodes_spent": verdict.episodes_spent})
    return verdict


def current_history(ledger, content_id: str, suite_digest: str, task_ids: set[str], *,
                    exclude_run: str | None = None) -> dict[str, list[float]]:
    """The scores the harness with `content_id` got on each task in earlier finished gate runs of the same canary
    suite (as either side: a published candidate is the next run's current harness), oldest first.

    Only runs whose gate verdict was recorded count (an interrupted run's episodes may be resent), and only on a
    suite with the same digest (a task edited since then is another task). The sequential policy uses it to order its
    passes and to know which tasks the current harness passes reliably, never in a test's sums."""
    if ledger is None or not content_id:
        return {}
    def text(payload: Mapping, key: str) -> str | None:  # a record from an older or foreign writer may hold anything
        value = payload.get(key)
        return value if isinstance(value, str) else None

    # One pass over the ledger (every line is parsed and hash-checked): a run's gate record follows its episodes,
    # so the episodes are kept with their run and filtered once the finished runs are known.
    runs: set[str | None] = set()
    episodes: list[tuple[str, str, float]] = []
    for r in ledger.iter_records():
        p = r.payload
        if r.kind == "gate":
            if text(p, "suite_digest") == suite_digest:
                runs.add(text(p, "run"))
        elif r.kind == "episode":
            score, tid, run = p.get("score"), text(p, "task_id"), text(p, "run")
            if (run is not None and run != exclude_run and text(p, "content_id") == content_id and tid in task_ids
                    and isinstance(score, (int, float)) and not isinstance(score, bool) and 0.0 <= score <= 1.0):
                episodes.append((run, tid, float(score)))
    out: dict[str, list[float]] = {}
    for run, tid, score in episodes:
        if run in runs:
            out.setdefault(tid, []).append(score)
    return out


def bullet_test(diffs: Sequence[float], settings: GateSettings) -> dict:
    """A bullet's marginal effect tested like a candidate's: the exact sign-flip test of reef_cli.sequential at the
    gate's false-accept budget (1 - confidence), one look over the leave-one-out pairs (candidate minus the candidate
    without that bullet). `admitted`: the bullet's own contribution is positive at that level."""
    from .sequential import group_sequential

    diffs = list(diffs)
    if not diffs:
        return {"utility": None, "pairs": 0, "needed_mean": None, "admitted": False, "up": 0, "down": 0}
    look = group_sequential([diffs], [1.0], 1 - settings.confidence, 1.0)[0]
    return {"utility": _r(look.mean), "pairs": look.pairs, "admitted": look.crossed,
            "up": sum(1 for d in diffs if d > 0), "down": sum(1 for d in diffs if d < 0),
            "needed_mean": None if look.needed is None else _r(look.needed / look.pairs)}


def _attribute(settings, canary, attribute, store, trees, dirs, cids, runner, journal, on_result) -> tuple[dict, dict]:
    """Leave-one-out: utility(b) = mean over tasks and repeats of candidate score minus ablated score, and its
    `bullet_test` (returned as the verdict's trace["bullets"])."""
    from .episodes import EpisodeRequest, materialise_readonly

    out: dict[str, float | None] = {}
    tests: dict[str, dict] = {}
    cand_reqs = [EpisodeRequest(t, CANDIDATE, r, dirs[CANDIDATE], cids[CANDIDATE])
                 for r in range(settings.repeats) for t in canary]
    for bid, files in attribute.items():
        side = f"ablate:{bid}"
        cid = _content_id(store, files)
        tree = materialise_readonly(trees / cid, files)
        abl_reqs = [EpisodeRequest(q.task, side, q.repeat, tree, cid) for q in cand_reqs]
        pairs = [q for pair in zip(cand_reqs, abl_reqs) for q in pair]  # interleaved, as the gate runs its sides
        got = runner.run_many(pairs, journal=journal, on_result=on_result)
        cand = [got[q.key].score for q in cand_reqs]
        abl = [got[q.key].score for q in abl_reqs]
        out[bid] = (sum(cand) - sum(abl)) / len(cand) if cand else None
        tests[bid] = bullet_test([c - a for c, a in zip(cand, abl)], settings)
    return out, tests


def publish_gated(store, files: Mapping, verdict: Verdict, *, reason: str, operation: str = "evolve",
                  meta: Mapping | None = None):
    """Publish `files` on the strength of `verdict`: only a publish verdict for exactly these bytes, and only
    while the head is still the release it was judged against (compare-and-swap)."""
    if verdict.decision != PUBLISH:
        raise PolicyError(f"the canary gate rejected this candidate ({verdict.reason}); nothing was published")
    cid = _content_id(store, files)
    if cid != verdict.candidate_content_id:
        raise PolicyError(f"the verdict {verdict.record_id or verdict.run} was for content "
                          f"{verdict.candidate_content_id[:12]}, not {cid[:12]}; run the gate on these files")
    return store.publish(
        reason=reason, operation=operation, files=dict(files), expected_head=verdict.baseline_release_id,
        evidence=tuple(x for x in (verdict.record_id,) if x), meta={**dict(meta or {}), "gate": verdict.release_meta()},
    )
