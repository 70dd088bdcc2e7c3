"""The `sequential` gate policy's engine: which episodes to run next, and when to stop (reef_cli.gate calls it).

Pure like the rest of the gate's engine: it asks the gate's episode book for scores in batches. The statistics it
runs are in reef_cli.sequential; why they control the false-accept rate is told there and in bench/RESULTS.md.

The plan, for T canary tasks and k repeats:

1. Passes over every task, one (candidate, current) pair per task per pass, the screen's tasks (sentinels first)
   at the head, each pass cut in LOOKS_PER_PASS chunks; after each chunk a look of the group-sequential sign-flip
   test on all pass pairs so far. The schedule depends on the seed only, which is what keeps the test exact.
2. At a look that crosses the bound, the candidate is better on average; at one below the futility bar it is
   rejected (non-binding: rejecting never adds false accepts); otherwise the next chunk runs.
3. Probes: extra pairs, beyond the k pass pairs and up to `max_repeats` (default 3k) per task, only on tasks whose
   mean difference is below -tolerance * PROBE_AT (before the mean test has decided: below -tolerance). They feed
   the task's drop e-process, which vetoes the candidate once it reaches T / drop_alpha while the task's mean drop
   is past the tolerance. Probes never enter the mean test.
4. Before publishing: the tasks where a drop could hide behind ties get CONFIRM pairs, the probes run again, and a
   task whose mean is still past the tolerance at its cap blocks the publish.
"""

from __future__ import annotations

from typing import Any, Sequence

# reef_cli.gate's names, repeated so this module does not import the gate that imports it (tests pin them equal)
CANDIDATE, CURRENT, PUBLISH, REJECT = "candidate", "current", "publish", "reject"
SENTINEL_PASS = 0.5

SPEND_SHAPE = 2.0  # alpha spent by information fraction f: alpha * f^2, so most of it is kept for the late looks
LOOKS_PER_PASS = 3  # looks per pass over the tasks (a fixed schedule: 9 looks at k = 3)
# (up to information fraction, z): at a look before the last, reject when the self-normalised sum z is <= z. A
# non-binding futility rule: it only ever rejects, so it cannot raise the false-accept rate; it costs false rejects,
# which bench/gate_sim.py measures (tuned there: 12 tasks, k = 3).
FUTILITY = ((0.12, -0.75), (0.23, -0.5), (0.34, -0.25), (0.5, 0.25), (0.67, 0.5), (1.0, 0.75))
PROBE_AT = 0.4  # probe a task while its mean difference is below -tolerance * PROBE_AT
CONFIRM = 4  # before publishing, pairs on each task where a break could hide behind ties (see _Sequential.run)
RELIABLE_AT = 0.5  # ... the tasks the current harness passes at least this often


def _pair_reqs(tasks: Sequence[Any], repeat: int) -> list[tuple]:
    return [(t.id, side, repeat) for t in tasks for side in (CANDIDATE, CURRENT)]


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def _futility(fraction: float) -> float:
    for upto, z in FUTILITY:
        if fraction <= upto + 1e-9:
            return z
    return FUTILITY[-1][1]


class Sequential:
    """The `sequential` policy: passes over every task (one pair each), a group-sequential sign-flip test after
    each pass (reef_cli.sequential), and extra pairs ("probes") only on tasks whose evidence of a drop is rising.

    The mean test sees only the pass pairs, whose schedule does not depend on the scores, so its alpha holds; the
    probes feed the per-task drop e-processes, which stay valid whatever decides where the next pair goes."""

    def __init__(self, settings: Any, tasks: Sequence[Any], book: Any, screen: Sequence[Any]) -> None:
        """`settings`: a gate.GateSettings; `tasks`: its TaskSpecs; `book`: the gate's episode book; `screen`: the
        tasks gate.screen_tasks puts first (sentinels and a seeded sample)."""
        self.s = settings
        self.screen = list(screen)
        self.tasks = list(tasks)
        self.book = book
        self.k = settings.repeats
        self.cap = max(self.k, settings.max_repeats or 3 * self.k)
        self.veto_at = len(self.tasks) / settings.drop_alpha
        self.looks: list = []
        self.why: dict[str, str] = {}  # task id -> why its sampling stopped, where a rule stopped it
        self.probed: set[str] = set()
        self.confirmed: set[str] = set()

    # ---- per task

    def _drop(self, tid: str) -> tuple[float, float, int]:
        from .sequential import drop_evidence

        d = self.book.pairs(tid)
        return drop_evidence(d), (sum(d) / len(d) if d else 0.0), len(d)

    def _vetoed(self) -> tuple[str, str] | None:
        for t in self.tasks:
            e, mean, n = self._drop(t.id)
            if e >= self.veto_at and mean < -self.s.tolerance - 1e-9:
                self.why[t.id] = f"vetoed: drop evidence {e:.3g} >= {self.veto_at:.3g} and mean {mean:+.2f}"
                return REJECT, (f"task '{t.id}' regressed: mean paired difference {mean:+.2f} over {n} pairs, past "
                                f"the tolerance {self.s.tolerance:g}, with drop evidence {e:.3g} >= "
                                f"{self.veto_at:.3g} (error budget {self.s.drop_alpha:g})")
        return None

    def _suspects(self, strong: bool = False) -> list[Any]:
        """Tasks that may still take pairs whose mean difference is below -tolerance * PROBE_AT (`strong`: past the
        tolerance itself, what is worth probing before the mean test has decided)."""
        out = []
        at = 1.0 if strong else PROBE_AT
        for t in self.tasks:
            e, mean, n = self._drop(t.id)
            if not n or n >= self.cap:
                continue
            if mean < -self.s.tolerance * at - 1e-9:
                out.append(t)
        return out

    def _probe(self, reserve: int, strong: bool = False) -> tuple[str, str] | None:
        """Extra pairs on the suspects, one each per round, until none is left, one is vetoed, or the budget (less
        `reserve` episodes kept for the passes still to come) runs out."""
        book = self.book
        while True:
            veto = self._sentinel(final=False) or self._vetoed()
            if veto is not None:
                return veto
            todo = self._suspects(strong)
            if not todo:
                return None
            if book.budget is not None and book.spent + 2 * len(todo) > book.budget - reserve:
                todo = todo[: max(0, (book.budget - reserve - book.spent) // 2)]
                if not todo:
                    return None
            self.probed.update(t.id for t in todo)
            book.run([q for t in todo for q in _pair_reqs([t], self._next(t.id, max(self.k, len(book.pairs(t.id)))))])

    def _reliable(self, tid: str) -> bool:
        """The current harness passes this task at least RELIABLE_AT of the time (or has run it once only): a drop
        past the tolerance is possible there, and can hide behind ties in a few pairs."""
        cur = self.book.side(tid, CURRENT)
        return len(cur) < 2 or sum(cur) / len(cur) >= RELIABLE_AT  # one episode tells too little to rule it out

    def _unresolved(self) -> list[str]:
        out = []
        for t in self.tasks:
            _e, mean, n = self._drop(t.id)
            if n and mean < -self.s.tolerance - 1e-9:
                out.append(f"'{t.id}' ({mean:+.2f} over {n} pairs)")
        return out

    def _sentinel(self, final: bool) -> tuple[str, str] | None:
        for t in self.tasks:
            if not t.sentinel:
                continue
            c = self.book.side(t.id, CANDIDATE)  # pass pairs and probes
            best = sum(c) / len(c) if c and (final or len(c) >= self.k) else (sum(c) + self.k - len(c)) / self.k
            if c and best < SENTINEL_PASS:
                return REJECT, f"sentinel task '{t.id}' failed (candidate mean score below {SENTINEL_PASS})"
        return None

    def _next(self, tid: str, start: int) -> int:
        r = start
        while (tid, CANDIDATE, r) in self.book.scores:
            r += 1
        return r

    def _confirm(self) -> tuple[str, str] | None:
        """Before publishing, tasks the current harness passes at least RELIABLE_AT of the time and on which the
        candidate has not won a pair by the tolerance or more get CONFIRM pairs: a break there hides behind ties
        (both sides passing) far more often in three pairs than in four."""
        book = self.book
        while True:
            short = [t for t in self.tasks if self._reliable(t.id) and len(book.pairs(t.id)) < CONFIRM
                     and not any(d >= self.s.tolerance for d in book.pairs(t.id))]
            if not short:
                return None
            self.confirmed.update(t.id for t in short)
            book.run([q for t in short for q in _pair_reqs([t], self._next(t.id, len(book.pairs(t.id))))])
            if book.exhausted:
                return REJECT, (f"the budget of {book.budget} episodes ran out while confirming the tasks a drop could "
                                "hide on; not published"), "budget"

    # ---- the run

    def _schedule(self) -> list[tuple[int, list[Any]]]:
        """The fixed order of the mean test's pairs, one (repeat, tasks) chunk per look: each pass over every task,
        cut in LOOKS_PER_PASS chunks, the screen's tasks (sentinels first) at the head of every pass. It depends on
        the seed only, never on a score: that is what keeps the sign-flip test exact."""
        screen = sorted(self.screen, key=lambda t: not t.sentinel)  # stable: sentinels first
        ids = {t.id for t in screen}
        order = screen + [t for t in self.tasks if t.id not in ids]
        n = len(order)
        cuts = sorted({round(n * (i + 1) / LOOKS_PER_PASS) for i in range(LOOKS_PER_PASS)} - {0})
        chunks, start = [], 0
        for c in cuts:
            chunks.append(order[start:c])
            start = c
        return [(r, chunk) for r in range(self.k) for chunk in chunks]

    def _look(self, done: list[tuple[int, list[Any]]]):
        from .sequential import group_sequential

        total = len(self.tasks) * self.k
        batches, fractions, seen = [], [], 0
        for r, chunk in done:
            batches.append([self.book.pairs(t.id, r + 1)[r] for t in chunk])
            seen += len(chunk)
            fractions.append(seen / total)
        self.looks = group_sequential(batches, fractions, 1 - self.s.confidence, SPEND_SHAPE)
        return self.looks[-1]

    def run(self) -> tuple[str, str, str]:
        book, k = self.book, self.k
        level = f"{1 - self.s.confidence:.0%}"
        schedule = self._schedule()
        for i, (r, chunk) in enumerate(schedule):
            last = i == len(schedule) - 1
            stage = f"pass {r + 1}"
            book.run(_pair_reqs(chunk, r))
            if book.exhausted:
                return REJECT, f"the budget of {book.budget} episodes ran out before the decision was certain", "budget"
            done = self._sentinel(final=False)
            if done:
                return done[0], done[1], stage
            look = self._look(schedule[: i + 1])
            if not look.crossed:
                if last:
                    need = "no sum" if look.needed is None else f"{look.needed / look.pairs:+.3f}"
                    return REJECT, (f"not better: mean paired improvement {look.mean:+.3f} over {look.pairs} pairs; "
                                    f"the last look needed {need} (overall false-accept budget {level})"), "complete"
                bar = _futility(look.fraction)
                if look.z <= bar:
                    return REJECT, (f"not better: after {look.pairs} of {len(self.tasks) * k} pairs the mean paired "
                                    f"improvement is {look.mean:+.3f} (z {look.z:+.2f} <= {bar:+g}); stopped early"), \
                        stage
                left = sum(len(c) for _r, c in schedule[i + 1:])
                done = self._probe(2 * left, strong=True)
                if done:
                    return done[0], done[1], stage
                continue
            done = self._probe(0)
            if done:
                return done[0], done[1], stage
            done = self._confirm() or self._probe(0)
            if done:
                return done[0], done[1], stage
            blocked = self._unresolved()
            if blocked:
                return REJECT, (f"better on average, but task {blocked[0]} dropped past the tolerance "
                                f"{self.s.tolerance:g} and the probe cap ({self.cap} pairs) or the budget "
                                "left it unresolved"), stage
            done = self._sentinel(final=True)
            if done:
                return done[0], done[1], stage
            return PUBLISH, (f"mean paired improvement {look.mean:+.3f} over {look.pairs} pairs reached "
                             f"{look.needed / look.pairs:+.3f}, the bound of look {look.index} of {len(schedule)} "
                             f"(overall false-accept budget {level})"), "complete" if last else "early-stop"
        raise AssertionError("the last look always decides")  # pragma: no cover

    def trace(self) -> dict:
        """What `reef eval --explain` prints: every look of the mean test, and per task its paired differences,
        its running drop evidence against the veto bar, and why its sampling stopped."""
        last = self.looks[-1].index if self.looks else 0
        tasks = {}
        for t in self.tasks:
            e, mean, n = self._drop(t.id)
            passes = len(self.book.pairs(t.id, self.k))
            why = self.why.get(t.id)
            if why is None:
                if n == 0:
                    why = f"not run: the decision came at look {last}, before its turn"
                elif t.id in self.probed and n >= self.cap:
                    why = f"probe cap reached ({n} pairs), mean {mean:+.2f}"
                elif t.id in self.probed:
                    why = f"probed until its mean ({mean:+.2f}) was no longer below {-self.s.tolerance * PROBE_AT:+.2f}"
                elif t.id in self.confirmed:
                    why = f"confirmed with {n} pairs before publishing (a drop could hide behind ties there)"
                else:
                    why = f"{passes} pass pair(s); the run stopped at look {last}"
            tasks[t.id] = {"diffs": [_r(x) for x in self.book.pairs(t.id)], "pass_pairs": passes,
                           "mean": _r(mean) if n else None, "drop_evidence": _r(e), "why": why}
        return {"looks": [lk.to_json() for lk in self.looks], "tasks": tasks, "alpha": _r(1 - self.s.confidence),
                "drop_alpha": self.s.drop_alpha, "veto_at": _r(self.veto_at), "cap": self.cap,
                "tolerance": self.s.tolerance}


def explain(trace: dict) -> list[str]:
    """`reef eval --explain`: the looks of the mean test, then per task its paired differences (candidate minus
    current, one per pair, pass pairs first), its mean, its drop evidence and why its sampling stopped."""
    lines = []
    looks = trace.get("looks") or []
    if looks:
        lines.append(f"mean test: sign-flip, alpha {trace['alpha']:g} spent over {len(looks)} look(s) so far; "
                     "publish when the mean reaches the look's bound")
        lines.append(f"  {'look':>4} {'pairs':>5} {'mean':>7} {'bound':>7} {'z':>6} {'alpha':>7}")
        for lk in looks:
            bound = "-" if lk["needed_mean"] is None else f"{lk['needed_mean']:+.3f}"
            mark = "  crossed" if lk["crossed"] else ""
            lines.append(f"  {lk['look']:>4} {lk['pairs']:>5} {lk['mean']:>+7.3f} {bound:>7} {lk['z']:>+6.2f} "
                         f"{lk['alpha']:>7.4f}{mark}")
    if "veto_at" in trace:
        lines.append(f"drop veto: drop evidence >= {trace['veto_at']:g} (error budget {trace['drop_alpha']:g}) with "
                     f"the mean past -{trace['tolerance']:g}; probes up to {trace['cap']} pairs per task")
    for tid, t in (trace.get("tasks") or {}).items():
        diffs = " ".join(f"{d:+g}" if d else "0" for d in t["diffs"]) or "-"
        mean = "-" if t.get("mean") is None else f"{t['mean']:+.2f}"
        ev = f"  drop evidence {t['drop_evidence']:g}" if "drop_evidence" in t else ""
        lines.append(f"task {tid}: [{diffs}] mean {mean}{ev} - {t['why']}")
    return lines
