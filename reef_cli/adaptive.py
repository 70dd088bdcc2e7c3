"""The `sequential` gate policy's engine: which episodes to run next, and when to stop (reef_cli.gate_policies calls
it).

Pure like the rest of the gate's engine: it asks the gate's episode book for scores in batches. The statistics it
runs are in reef_cli.sequential; why they control the false-accept rate is told there and in bench/RESULTS.md.

The plan, for T canary tasks and k repeats (constants below; `gate.*` settings where a user would tune them):

1. Passes over every task, one (candidate, current) pair per task per pass, sentinels first; then, where the current
   harness has a history on this canary suite (its scores in earlier gate runs, `history`), the tasks it fails most
   (a change can only raise a task where the current harness has room, so a helpful candidate shows its wins in the
   first looks), else the screen's seeded sample and the rest. The order is fixed before any pair is run. Each pass
   is cut in `gate.looks_per_pass` chunks; after each chunk a look of the group-sequential sign-flip test on all
   mean-test pairs so far, alpha spent as alpha * f ** `gate.spend_shape` by the share f of the planned
   T x (k + `gate.extra_passes`) pairs (the last look spends what is left).
2. At a look that crosses the bound, the candidate is better on average; at one below the futility bar it is
   rejected (non-binding: rejecting never adds false accepts); otherwise the next chunk runs.
3. After k passes an undecided candidate gets `gate.extra_passes` more, on the tasks with a discordant mean-test pair
   only (|d| > 0): chosen from the magnitudes, never the signs, so the sign-flip test stays exact.
4. The drop test (reef_cli.sequential.DropWealth): one e-process over all pairs of all tasks, betting on a task only
   where the current harness scores at least max(tolerance, BET_RELIABLE) (history included) and the task is behind;
   it vetoes once the wealth reaches 1 / `gate.drop_alpha`. Probes (pairs past the mean test's, up to
   `gate.max_repeats`, default 6k pairs per task) go to tasks whose mean is below -tolerance * PROBE_AT (while
   undecided: below -tolerance).
5. Before publishing, the burden of proof turns around on the tasks the current harness passes reliably (a break
   there hides behind ties and lucky pairs): each gets pairs until its mean difference, less NI_Z standard errors,
   is above -tolerance (`_noninferior`), the drop test vetoes, or the cap is reached; a task whose mean is still
   past the tolerance at its cap blocks the publish. Confirmation pairs never enter the mean test.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

# reef_cli.gate_policies's names, repeated so this module does not import the engine that imports it (tests pin them equal)
CANDIDATE, CURRENT, PUBLISH, REJECT = "candidate", "current", "publish", "reject"
SENTINEL_PASS = 0.5

# (up to information fraction, z): at a look before the last, reject when the sign statistic z (wins - losses over
# sqrt(wins + losses), reef_cli.sequential.Look) is <= z. A non-binding futility rule: it only ever rejects, so it
# cannot raise the false-accept rate; it costs false rejects, which bench/gate_sim.py measures. Tuned there with
# 12 tasks, k = 3, two extra passes (the looks at f = 0.067, 0.133, 0.2 in pass 1; the end of pass k at f = 0.6, of
# the extra passes at 0.8 and 1.0), on seeds 1-5 and checked on 6-9.
# With a history the passes start on the tasks the current harness fails most, so the second look (8 of them) stops
# a candidate that has not won more of them than it lost: most of the budget the policy saves is there.
FUTILITY = ((0.07, -0.5), (0.14, 0.0), (0.23, -0.25), (0.34, 0.0), (0.5, 0.375), (0.6, 0.625), (0.8, 0.75), (1.0, 1.0))
# A bar above EARLY_BAR needs FUTILITY_MIN_PAIRS pairs: on a small suite the information fraction of the second look
# is reached after two or three tasks, too few to call a candidate useless.
FUTILITY_MIN_PAIRS = 8
EARLY_BAR = -0.5
# Without one (a first gate run on a suite) the order is the screen's seeded sample, which says nothing about where a
# change helps: gentler early bars.
FUTILITY_BLIND = ((0.12, -0.5), (0.23, -0.25), (0.34, 0.0), (0.5, 0.25), (0.6, 0.75), (0.8, 1.0), (1.0, 1.0))
PROBE_AT = 0.4  # probe a task while its mean difference is below -tolerance * PROBE_AT
RELIABLE_AT = 0.5  # before publishing, the tasks the current harness passes at least this often must show ...
NI_Z = 1.64  # ... a mean paired difference whose lower bound, mean - NI_Z standard errors, is above -tolerance
NI_VAR = 0.6  # ... the standard error from the pairs' spread plus one pseudo-pair of this variance: ties alone are
#                   not proof (a broken task ties when the candidate gets lucky), so four tied pairs are needed
CAP_FACTOR = 6  # gate.max_repeats 0: pairs per task, probes included, up to CAP_FACTOR x k
HISTORY_KEEP = 12  # the current harness's most recent earlier scores per task that the order and reliability use
BET_RELIABLE = 0.6  # the drop test bets on a task only where the current harness scores at least this (and tolerance)


def _pair_reqs(tasks: Sequence[Any], repeat: int) -> list[tuple]:
    return [(t.id, side, repeat) for t in tasks for side in (CANDIDATE, CURRENT)]


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def _futility(fraction: float, informed: bool = True) -> float:
    bars = FUTILITY if informed else FUTILITY_BLIND
    for upto, z in bars:
        if fraction <= upto + 1e-9:
            return z
    return bars[-1][1]


class Sequential:
    """The `sequential` policy: passes over every task (one pair each), a group-sequential sign-flip test after
    each chunk (reef_cli.sequential), an extra pass on the discordant tasks for an undecided candidate, and extra
    pairs ("probes") only on tasks where a drop is suspected or could hide.

    The mean test sees only the pass pairs, whose schedule depends on the seed and the magnitudes |d| only, so its
    alpha holds; the probes feed the drop test's e-process, which stays valid whatever decides where the next pair
    goes."""

    def __init__(self, settings: Any, tasks: Sequence[Any], book: Any, screen: Sequence[Any],
                 history: Mapping[str, Sequence[float]] | None = None) -> None:
        """`settings`: a gate.GateSettings; `tasks`: its TaskSpecs; `book`: the gate's episode book; `screen`: the
        tasks gate.screen_tasks puts first (sentinels and a seeded sample); `history`: the current harness's scores
        per task in earlier gate runs of this suite (gate.current_history), oldest first. History only orders the
        passes and says which tasks the current harness passes reliably; it never enters a test's sums, so a stale or
        drifted history costs power, never the error budgets."""
        self.s = settings
        self.history = {tid: [float(x) for x in xs][-HISTORY_KEEP:] for tid, xs in (history or {}).items() if xs}
        self.screen = list(screen)
        self.tasks = list(tasks)
        self.book = book
        self.k = settings.repeats
        self.extra = settings.extra_passes
        self.cap = max(self.k + self.extra, settings.max_repeats or CAP_FACTOR * self.k)
        self.veto_at = 1 / settings.drop_alpha
        from .sequential import DropWealth

        self.wealth = DropWealth()
        self.looks: list = []
        self.why: dict[str, str] = {}  # task id -> why its sampling stopped, where a rule stopped it
        self.probed: set[str] = set()
        self.confirmed: set[str] = set()

    # ---- per task

    def _run(self, reqs: list[tuple]) -> None:
        """Run episodes, then feed every newly completed pair to the drop test, in repeat order per task; its stake
        on a pair comes from the pairs it saw before, so the test stays a supermartingale."""
        self.book.run(reqs)
        book = self.book
        for t in self.tasks:
            for r in range(book.top):
                c, u = book.scores.get((t.id, CANDIDATE, r)), book.scores.get((t.id, CURRENT, r))
                if c is None or u is None or (t.id, r) in self.wealth.keys:
                    continue
                self.wealth.add(t.id, (t.id, r), c - u, self._may_drop(t.id))
            
    def _may_drop(self, tid: str) -> bool:
        """A drop past the tolerance is possible only where the current harness scores at least the tolerance: bet
        only there (judged from its history and the pairs the drop test has seen, never the one it bets on)."""
        cur = self.history.get(tid, []) + [self.book.scores[(tid, CURRENT, r)] for _t, r in self.wealth.keys
                                           if _t == tid]
        return not cur or sum(cur) / len(cur) >= max(self.s.tolerance, BET_RELIABLE) - 1e-9

    def _drop(self, tid: str) -> tuple[float, float, int]:
        """The task's drop-test account growth, its mean paired difference and its number of pairs."""
        d = self.book.pairs(tid)
        return self.wealth.growth(tid), (sum(d) / len(d) if d else 0.0), len(d)

    def _vetoed(self) -> tuple[str, str] | None:
        w = self.wealth.wealth
        tid = self.wealth.leader()
        if w < self.veto_at or tid is None:
            return None
        _e, mean, n = self._drop(tid)
        if mean >= 0:
            return None
        self.why[tid] = f"vetoed: drop evidence {w:.3g} >= {self.veto_at:.3g} and mean {mean:+.2f}"
        return REJECT, (f"task '{tid}' regressed: mean paired difference {mean:+.2f} over {n} pairs, past "
                        f"the tolerance {self.s.tolerance:g}, with drop evidence {w:.3g} >= "
                        f"{self.veto_at:.3g} (error budget {self.s.drop_alpha:g})")

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
            self._run([q for t in todo for q in _pair_reqs([t], self._next(t.id, max(self.k + self.extra, len(book.pairs(t.id)))))])

    def _reliable(self, tid: str) -> bool:
        """The current harness passes this task at least RELIABLE_AT of the time, its history included (or has run
        it once only): a drop past the tolerance is possible there, and can hide behind ties in a few pairs."""
        cur = self.history.get(tid, []) + self.book.side(tid, CURRENT)
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

    def _noninferior(self, tid: str) -> bool:
        """The task's mean paired difference less NI_Z standard errors is above -tolerance: evidence that the
        candidate does not drop this task past the tolerance. The spread is the pairs' own plus one pseudo-pair of
        variance NI_VAR, so tied pairs prove it only in numbers (four at the defaults): a broken task ties whenever
        the candidate gets lucky."""
        d = self.book.pairs(tid)
        n = len(d)
        if not n:
            return False
        mean = sum(d) / n
        var = (sum((x - mean) ** 2 for x in d) + NI_VAR) / n
        return mean - NI_Z * math.sqrt(var / n) > -self.s.tolerance + 1e-9

    def _at_risk(self, t: Any) -> bool:
        """A task where a break could still hide: the current harness passes it reliably, it has room under the cap,
        and its pairs do not yet show the candidate holding it (`_noninferior`)."""
        if len(self.book.pairs(t.id)) >= self.cap or not self._reliable(t.id):
            return False
        return not self._noninferior(t.id)

    def _confirm(self) -> tuple[str, str] | None:
        """Before publishing, the tasks where a break could hide (`_at_risk`) get more pairs, one each per round, until
        none is left or the drop test vetoes: a break on a reliable task hides behind ties (both sides passing) and
        lucky pairs in a few pairs, and the drop test needs several losses to reach its bar."""
        book = self.book
        while True:
            veto = self._vetoed()
            if veto is not None:
                return veto
            short = [t for t in self.tasks if self._at_risk(t)]
            if not short:
                return None
            self.confirmed.update(t.id for t in short)
            self._run([q for t in short for q in _pair_reqs([t], self._next(t.id, len(book.pairs(t.id))))])
            if book.exhausted:
                return REJECT, (f"the budget of {book.budget} episodes ran out while confirming the tasks a drop could "
                                "hide on; not published"), "budget"

    # ---- the run

    def _informed(self) -> bool:
        """The passes are ordered by a history covering at least half the tasks (FUTILITY, else FUTILITY_BLIND)."""
        return 2 * sum(1 for t in self.tasks if t.id in self.history) >= len(self.tasks)

    def _order(self) -> list[Any]:
        """The order of a pass, fixed before any pair runs: sentinels first; then, with a history, the tasks the
        current harness fails most (a task without one counts as half passed); else the screen's seeded sample and
        the rest. Neither depends on this run's scores, so the tests stay exact."""
        screen = sorted(self.screen, key=lambda t: not t.sentinel)  # stable: sentinels first
        ids = {t.id for t in screen}
        order = screen + [t for t in self.tasks if t.id not in ids]
        if not self._informed():
            return order
        level = {t.id: (sum(h) / len(h) if (h := self.history.get(t.id)) else 0.5) for t in order}
        return sorted(order, key=lambda t: (not t.sentinel, level[t.id]))

    def _chunks(self, order: list[Any]) -> list[list[Any]]:
        n = len(order)
        cuts = sorted({round(n * (i + 1) / self.s.looks_per_pass) for i in range(self.s.looks_per_pass)} - {0})
        chunks, start = [], 0
        for c in cuts:
            chunks.append(order[start:c])
            start = c
        return [c for c in chunks if c]

    def _extra(self, order: list[Any], done: list[tuple[int, list[Any]]]) -> list[Any]:
        """An extra pass's tasks: those with a discordant mean-test pair so far (|d| > 0). Chosen from the
        magnitudes |d| only, never their signs: under "no difference" the signs stay fair coins given every
        magnitude, so the sign-flip test stays exact (concordant tasks carry no evidence either way)."""
        hit = {t.id for r, chunk in done for t in chunk if self._mean_pair(t.id, r)}
        return [t for t in order if t.id in hit]

    def _mean_pair(self, tid: str, r: int) -> float:
        return self.book.scores[(tid, CANDIDATE, r)] - self.book.scores[(tid, CURRENT, r)]

    def _look(self, done: list[tuple[int, list[Any]]], last: bool):
        from .sequential import group_sequential

        total = len(self.tasks) * (self.k + self.extra)
        batches, fractions, seen = [], [], 0
        for r, chunk in done:
            batches.append([self._mean_pair(t.id, r) for t in chunk])
            seen += len(chunk)
            fractions.append(seen / total)
        if last:
            fractions[-1] = 1.0  # the last look spends what is left
        self.looks = group_sequential(batches, fractions, 1 - self.s.confidence, self.s.spend_shape)
        return self.looks[-1]

    def run(self) -> tuple[str, str, str]:
        book, k = self.book, self.k
        level = f"{1 - self.s.confidence:.0%}"
        order = self._order()
        done_chunks: list[tuple[int, list[Any]]] = []
        plan = [(r, c) for r in range(k) for c in self._chunks(order)]
        i = 0
        while i < len(plan):
            r, chunk = plan[i]
            stage = f"pass {r + 1}"
            self._run(_pair_reqs(chunk, r))
            if book.exhausted:
                return REJECT, f"the budget of {book.budget} episodes ran out before the decision was certain", "budget"
            done_chunks.append((r, chunk))
            done = self._sentinel(final=False)
            if done:
                return done[0], done[1], stage
            if i == len(plan) - 1 and r + 1 < k + self.extra:  # a pass ended: plan the next, extra, pass
                plan += [(r + 1, c) for c in self._chunks(self._extra(order, done_chunks))]
            last = i == len(plan) - 1
            i += 1
            schedule = plan
            look = self._look(done_chunks, last)
            if not look.crossed:
                if last:
                    need = "no sum" if look.needed is None else f"{look.needed / look.pairs:+.3f}"
                    return REJECT, (f"not better: mean paired improvement {look.mean:+.3f} over {look.pairs} pairs; "
                                    f"the last look needed {need} (overall false-accept budget {level})"), "complete"
                bar = _futility(look.fraction, self._informed())
                if look.pairs < FUTILITY_MIN_PAIRS:
                    bar = min(bar, EARLY_BAR)
                if look.z <= bar:
                    return REJECT, (f"not better: after {look.pairs} of {len(self.tasks) * k} pairs the mean paired "
                                    f"improvement is {look.mean:+.3f} (z {look.z:+.2f} <= {bar:+g}); stopped early"), \
                        stage
                left = sum(len(c) for _r, c in plan[i:])
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
                    why = (f"confirmed with {n} pairs before publishing (a drop could hide behind ties there): "
                           + ("held" if self._noninferior(t.id) else "not shown held at the cap"))
                else:
                    why = f"{passes} pass pair(s); the run stopped at look {last}"
            hist = self.history.get(t.id)
            tasks[t.id] = {"diffs": [_r(x) for x in self.book.pairs(t.id)], "pass_pairs": passes,
                           "mean": _r(mean) if n else None,
                           "history": {"mean": _r(sum(hist) / len(hist)), "episodes": len(hist)} if hist else None,
                           "drop_evidence": _r(self.wealth.growth(t.id)), "why": why}
        return {"looks": [lk.to_json() for lk in self.looks], "tasks": tasks, "alpha": _r(1 - self.s.confidence),
                "drop_alpha": self.s.drop_alpha, "veto_at": _r(self.veto_at), "drop_wealth": _r(self.wealth.wealth), "cap": self.cap,
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
        wealth = f"{trace['drop_wealth']:.3g} " if "drop_wealth" in trace else ""
        lines.append(f"drop veto: wealth {wealth}of {trace['veto_at']:g} needed (error budget {trace['drop_alpha']:g}, "
                     f"one e-process over all tasks; a task's 'drop evidence' is its own account's growth); a task "
                     f"still past -{trace['tolerance']:g} at {trace['cap']} pairs blocks the publish")
    for tid, t in (trace.get("tasks") or {}).items():
        diffs = " ".join(f"{d:+g}" if d else "0" for d in t["diffs"]) or "-"
        mean = "-" if t.get("mean") is None else f"{t['mean']:+.2f}"
        ev = f"  drop evidence {t['drop_evidence']:g}" if "drop_evidence" in t else ""
        h = t.get("history")
        hist = f"  current's history {h['mean']:.2f} over {h['episodes']}" if h else ""
        lines.append(f"task {tid}: [{diffs}] mean {mean}{ev}{hist} - {t['why']}")
    return lines
