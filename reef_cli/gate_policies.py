"""The canary gate's policies: given a sampler of episode scores, decide whether a candidate beats the current
harness on held-out tasks (reef_cli.gate runs them on real episodes and records the verdict).

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
(`reef_cli.gate.gate_candidate`) and simulated ones (`bench/gate_sim.py`). Its own module for that reason: the
statistics are read, tested and benchmarked without the episode runner, the ledger or the harness diff.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Sequence

from .config import GateConfig
from .errors import InvalidInput

POLICIES = ("paired", "sequential", "tally", "floor", "always")
CANDIDATE = "candidate"
CURRENT = "current"
PUBLISH = "publish"
REJECT = "reject"
SENTINEL_PASS = 0.5
MIN_LEAD = 2  # after each pass the candidate must lead by this many episodes: one lucky episode is not a lead

Sampler = Callable[[list], Mapping]


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
        return {"task_id": self.task_id, "sentinel": self.sentinel, "candidate": rounded(self.candidate),
                "current": rounded(self.current), "delta": rounded(self.delta), "pairs": self.pairs,
                "status": self.status}

    @classmethod
    def from_json(cls, d: Mapping) -> "TaskScore":
        return cls(d["task_id"], bool(d.get("sentinel")), d.get("candidate"), d.get("current"), d.get("delta"),
                   int(d.get("pairs", 0)), d.get("status", ""))


def rounded(x: float | None) -> float | None:
    """Six decimals, as verdicts, traces and reports store a score (reef_cli.gate rounds its own the same way)."""
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
    current harness's scores per task in earlier gate runs (`reef_cli.gate.current_history`); policy `sequential` orders its passes
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
        trace = {"tasks": {t.id: {"diffs": [rounded(x) for x in book.pairs(t.id)],
                                  "mean": rounded(_mean(book.pairs(t.id))),
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
