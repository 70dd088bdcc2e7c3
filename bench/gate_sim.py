"""Gate simulation: how often each gate policy accepts a candidate it should reject (false accept), rejects one it
should accept (false reject), and how many episodes it spends, on simulated candidates with known true effects.

Model. A canary set of T tasks; the current harness passes task t with probability p_t (spread over easy and hard
tasks). A candidate shifts each task's pass probability by a known delta_t. An episode is a Bernoulli draw; the two
sides of a pair share their random draw with probability `--rho` (the seeded agent's common luck) and draw
independently otherwise. Candidate classes:

* null      - no effect on any task                              (should reject)
* harmful   - lowers 1/6, 1/3 or 1/2 of the tasks by 0.2-0.5      (should reject)
* breaks    - like helpful, but breaks the task the current
              harness passes most reliably (-0.7)                 (should reject: "improves here, breaks there")
* helpful   - raises the 1/6, 1/3 or 1/2 of the tasks that fail
              most often by 0.3-0.7                               (should accept; false rejects by true effect)

Scores (`--scores`): `binary` (above), or `heavy`: partial credit with heavy tails, score = clip(m + 0.15 * C, 0, 1)
with C a standard Cauchy draw (shared by the pair with probability rho) and m the side's level (the p above); the
true effects are the exact means of the clipped scores.

Policies:
* paired     - reef_cli.gate_policies 'paired' (the default before issue 16): screen, one pass, repeats, early stop,
               bootstrap lower bound > 0, tolerance, sentinels. Budget: the full paired tally's 2*T*k.
* sequential - reef_cli.gate_policies 'sequential' (the default): group-sequential sign-flip test with alpha spending,
               futility looks, two extra passes on the discordant tasks, one drop e-process over all tasks with
               probes, and before publishing a non-inferiority check on the tasks the current harness passes reliably
               (up to 6k pairs per task; no total budget, the table shows the most any candidate spent). It is given the
               current harness's history (`--history`, default 3 earlier scores per task: what its last gate run
               left in the ledger), drawn with luck of its own, and orders its passes by it.
* tally      - reef 0.1.3's rule (shipped as policy 'tally'): all 2*T*k episodes, wins - losses > 0.
* tally-k1   - the same rule with one repeat (2*T episodes): a tally at about our spend.
* gepa       - GEPA-style strict minibatch rule: 3 random tasks once per side, accept only a strictly higher sum,
               then the full set once per side, accept only a strictly higher mean.

Run:  .venv/bin/python bench/gate_sim.py [--per-class 300] [--tasks 12] [--repeats 3] [--rho 0.5] [--seed 1]
                                        [--seeds 1,2,3] [--scores binary|heavy] [--policies paired,sequential,...]
                                        [--history 3] [--why]   (why the helpful candidates were rejected, by true effect)
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reef_cli.gate_policies import (  # noqa: E402
    CANDIDATE, CURRENT, PUBLISH, GateSettings, TaskSpec, evaluate, full_tally_cost,
)

CLASSES = ("null", "harmful", "breaks", "helpful")
SHOULD_ACCEPT = {"helpful"}
BINS = ("<0.10", "0.10-0.20", ">=0.20")


def effect_bin(effect: float) -> str:
    return BINS[0] if effect < 0.1 else BINS[1] if effect < 0.2 else BINS[2]


@dataclass(frozen=True)
class Candidate:
    cls: str
    p_cur: tuple[float, ...]
    p_cand: tuple[float, ...]

    @property
    def true_effect(self) -> float:
        return sum(c - u for c, u in zip(self.p_cand, self.p_cur)) / len(self.p_cur)

    def effect(self, scores: str) -> float:
        if scores == "binary":
            return self.true_effect
        return sum(heavy_mean(c) - heavy_mean(u) for c, u in zip(self.p_cand, self.p_cur)) / len(self.p_cur)


HEAVY_SCALE = 0.15


def heavy_mean(m: float, s: float = HEAVY_SCALE) -> float:
    """E[clip(m + s*C, 0, 1)] for a standard Cauchy C: 1/2 - (s/pi) [G((1-m)/s) - G(-m/s)], G(x) = x atan x -
    log(1 + x^2) / 2 (the integral of P(m + s*C > y) over y in [0, 1])."""
    g = lambda x: x * math.atan(x) - 0.5 * math.log1p(x * x)  # noqa: E731
    return 0.5 - (s / math.pi) * (g((1 - m) / s) - g(-m / s))


def make_candidate(cls: str, n_tasks: int, rng: random.Random) -> Candidate:
    p_cur = [rng.choice((rng.uniform(0.75, 0.98), rng.uniform(0.3, 0.75), rng.uniform(0.02, 0.3))) for _ in range(n_tasks)]
    p_cand = list(p_cur)
    idx = list(range(n_tasks))
    rng.shuffle(idx)
    share = max(1, round(n_tasks * rng.choice((1 / 6, 1 / 3, 1 / 2))))
    if cls == "harmful":
        for i in idx[:share]:
            p_cand[i] = p_cur[i] - rng.uniform(0.2, 0.5)
    elif cls in ("helpful", "breaks"):
        for i in sorted(idx, key=lambda i: p_cur[i])[:share]:  # a useful rule fixes tasks that fail now
            p_cand[i] = p_cur[i] + rng.uniform(0.3, 0.7)
        if cls == "breaks":
            j = max(idx, key=lambda i: p_cur[i])
            p_cur[j] = max(p_cur[j], 0.9)
            p_cand[j] = p_cur[j] - 0.7
    clip = lambda x: min(1.0, max(0.0, x))  # noqa: E731
    return Candidate(cls, tuple(map(clip, p_cur)), tuple(map(clip, p_cand)))


class Episodes:
    """Noisy episodes of one candidate; the same (task, repeat) always draws the same luck."""

    def __init__(self, cand: Candidate, rho: float, seed: int, scores: str = "binary"):
        self.cand = cand
        self.rho = rho
        self.seed = seed
        self.heavy = scores == "heavy"

    def score(self, i: int, side: str, repeat: int) -> float:
        rng = random.Random(f"{self.seed}:{i}:{repeat}")
        shared, u_shared, u_cand, u_cur = rng.random() < self.rho, rng.random(), rng.random(), rng.random()
        p = self.cand.p_cand[i] if side == CANDIDATE else self.cand.p_cur[i]
        return self._draw(p, u_shared if shared else (u_cand if side == CANDIDATE else u_cur))

    def _draw(self, p: float, u: float) -> float:
        """A score of mean p from the uniform draw u: pass/fail, or p plus clipped Cauchy noise (`--scores heavy`)."""
        if self.heavy:
            return min(1.0, max(0.0, p + HEAVY_SCALE * math.tan(math.pi * (u - 0.5))))
        return 1.0 if u < p else 0.0

    def history(self, i: int, n: int) -> list[float]:
        """The current harness's scores on task i in n earlier gate runs: its own luck, shared with nothing here."""
        return [self._draw(self.cand.p_cur[i], random.Random(f"{self.seed}:history:{i}:{r}").random())
                for r in range(n)]

    def sampler(self, ids: dict[str, int]):
        def sample(reqs):
            return {r: self.score(ids[r[0]], r[1], r[2]) for r in reqs}
        return sample


def run_policy(name: str, eps: Episodes, tasks: list[TaskSpec], repeats: int, seed: int,
               history: int = 0) -> tuple[bool, int, str]:
    """(published, episodes spent, the gate's one-line reason). `history`: earlier scores of the current harness per
    task that the gate is given (policy sequential uses them)."""
    ids = {t.id: i for i, t in enumerate(tasks)}
    budget = full_tally_cost(len(tasks), repeats)
    if name == "gepa":
        rng = random.Random(f"gepa:{seed}")
        mini = rng.sample(range(len(tasks)), min(3, len(tasks)))
        spent = 2 * len(mini)
        if sum(eps.score(i, CANDIDATE, 0) - eps.score(i, CURRENT, 0) for i in mini) <= 0:
            return False, spent, "minibatch not strictly better"
        spent += 2 * len(tasks)
        diff = sum(eps.score(i, CANDIDATE, 1) - eps.score(i, CURRENT, 1) for i in range(len(tasks)))
        return diff > 0, spent, "full set"
    policy, k = ("tally", 1) if name == "tally-k1" else (name, repeats)
    settings = GateSettings(policy=policy, repeats=k, seed=seed, max_episodes=None if name == "sequential" else budget)
    hist = {t.id: eps.history(i, history) for i, t in enumerate(tasks)} if history else None
    out = evaluate(settings, tasks, eps.sampler(ids), hist)
    return out.decision == PUBLISH, out.episodes_spent, out.reason


WHY = ("futility, first look", "futility, later look", "not better at the last look", "drop veto",
       "tolerance block", "sentinel", "budget", "other")


def why_rejected(reason: str, first_look: int) -> str:
    """The kind of a reject, from the gate's reason line (policy sequential's wording; `paired`'s land in 'other' or
    'tolerance block'): where a helpful candidate's false reject came from (`--why`)."""
    if reason.startswith("screen:"):  # paired: behind on the screen's tasks, the rest not run
        return WHY[0]
    if "stopped early" in reason:  # sequential: "after N of M pairs"; paired: "after pass N of k"
        m = re.search(r"after (\d+) of \d+ pairs", reason)
        return WHY[0] if m and int(m.group(1)) <= first_look else WHY[1]
    for key, kind in (("not better", WHY[2]), ("drop evidence", WHY[3]), ("regressed by", WHY[4]),
                      ("past the tolerance", WHY[4]), ("sentinel", WHY[5]), ("budget", WHY[6])):
        if key in reason:
            return kind
    return WHY[7]


def targets(r: dict) -> list[tuple[str, bool]]:
    """Issue 16's targets: false accepts <= 5% (<= 2% for `breaks`), false rejects <= 15% at true effects >= 0.20 and
    <= 40% at 0.10-0.20, and at most 0.6x the full paired tally's episodes."""
    fr = r["false_reject_by_effect"]
    ok = lambda x, bound: x is not None and x <= bound + 1e-12  # noqa: E731
    return [("FA<=5%", ok(r["false_accept"], 0.05)), ("FA breaks<=2%", ok(r["fa_breaks"], 0.02)),
            ("FR>=0.20<=15%", ok(fr[">=0.20"], 0.15)), ("FR 0.10-0.20<=40%", ok(fr["0.10-0.20"], 0.40)),
            ("episodes<=0.6x", ok(r["vs_tally"], 0.6))]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-class", type=int, default=300)
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rho", type=float, default=0.5, help="chance that a pair shares its luck")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", default=None,
                    help="comma-separated seeds, pooled into one table (per-class candidates per seed): e.g. 1,2,3")
    ap.add_argument("--scores", choices=("binary", "heavy"), default="binary")
    ap.add_argument("--policies", default="paired,sequential,tally,tally-k1,gepa")
    ap.add_argument("--history", type=int, default=3,
                    help="earlier scores of the current harness per task the gate knows (its last gate run's k "
                         "episodes: 3); 0 for a first gate run with no history")
    ap.add_argument("--why", action="store_true",
                    help="also print why each policy rejected the helpful candidates, by true effect")
    args = ap.parse_args(argv)
    policies = args.policies.split(",")
    tasks = [TaskSpec(f"t{i:02d}") for i in range(args.tasks)]
    full = full_tally_cost(args.tasks, args.repeats)
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    cands, luck = [], []  # each seed draws its own candidates and luck, exactly as a single-seed run would
    for sd in seeds:
        rng = random.Random(sd)
        cands += [make_candidate(cls, args.tasks, rng) for cls in CLASSES for _ in range(args.per_class)]
        luck += [sd * 1_000_003 + n for n in range(len(CLASSES) * args.per_class)]
    stats = {p: {c: [0, 0, 0] for c in CLASSES} for p in policies}  # accepted, count, episodes
    most = {p: 0 for p in policies}
    bins = {p: {b: [0, 0] for b in BINS} for p in policies}  # helpful candidates: accepted, count by true effect
    whys = {p: {b: {w: 0 for w in WHY} for b in BINS} for p in policies}  # helpful candidates' rejects by kind
    first_look = round(args.tasks / GateSettings().looks_per_pass)
    t0 = time.perf_counter()
    for n, cand in enumerate(cands):
        eps = Episodes(cand, args.rho, seed=luck[n], scores=args.scores)
        for p in policies:
            acc, spent, reason = run_policy(p, eps, tasks, args.repeats, seed=n % (len(CLASSES) * args.per_class),
                                            history=args.history)
            s = stats[p][cand.cls]
            s[0] += acc
            s[1] += 1
            s[2] += spent
            most[p] = max(most[p], spent)
            if cand.cls in SHOULD_ACCEPT:
                b = bins[p][effect_bin(cand.effect(args.scores))]
                b[0] += acc
                b[1] += 1
                if not acc:
                    whys[p][effect_bin(cand.effect(args.scores))][why_rejected(reason, first_look)] += 1
    elapsed = time.perf_counter() - t0
    print(f"gate_sim: {len(cands)} candidates ({args.per_class} per class per seed), {args.tasks} tasks, "
          f"k={args.repeats}, rho={args.rho}, history={args.history}, seed{'s' if len(seeds) > 1 else ''}={','.join(map(str, seeds))}, scores={args.scores}; full paired tally {full} episodes; {elapsed:.1f}s")
    print()
    header = f"{'policy':10} {'false-accept':>12} {'FA null':>8} {'FA harm':>8} {'FA breaks':>9} {'false-reject':>12} " \
             f"{'episodes/cand':>13} {'vs tally':>8} {'most':>5}"
    print(header)
    print("-" * len(header))
    result = {}
    tally_mean = None
    if "tally" in stats:
        tally_mean = sum(s[2] for s in stats["tally"].values()) / len(cands)
    else:
        tally_mean = float(full)
    for p in policies:
        st = stats[p]
        bad = [c for c in CLASSES if c not in SHOULD_ACCEPT]
        fa = sum(st[c][0] for c in bad) / sum(st[c][1] for c in bad)
        fr = sum(st[c][1] - st[c][0] for c in SHOULD_ACCEPT) / sum(st[c][1] for c in SHOULD_ACCEPT)
        mean_eps = sum(s[2] for s in st.values()) / len(cands)
        ratio = mean_eps / tally_mean if tally_mean else float("nan")
        per = {c: st[c][0] / st[c][1] for c in bad}
        print(f"{p:10} {fa:12.1%} {per['null']:8.1%} {per['harmful']:8.1%} {per['breaks']:9.1%} {fr:12.1%} "
              f"{mean_eps:13.1f} {ratio:8.2f} {most[p]:5d}")
        result[p] = {"false_accept": fa, "false_reject": fr, "episodes": mean_eps, "vs_tally": ratio, "most": most[p],
                     **{f"fa_{c}": v for c, v in per.items()}}
    print()
    print("false-reject by true mean effect of the helpful candidates (count):")
    print(f"{'policy':10} " + " ".join(f"{b:>14}" for b in BINS))
    for p in policies:
        cells = []
        for b in BINS:
            acc, n = bins[p][b]
            cells.append(f"{(n - acc) / n:8.1%} ({n:3d})" if n else f"{'-':>14}")
        print(f"{p:10} " + " ".join(f"{c:>14}" for c in cells))
        result[p]["false_reject_by_effect"] = {b: (1 - a / n) if n else None for b, (a, n) in bins[p].items()}
    print()
    print("episodes per candidate by class:")
    print(f"{'policy':10} " + " ".join(f"{c:>8}" for c in CLASSES))
    for p in policies:
        print(f"{p:10} " + " ".join(f"{stats[p][c][2] / max(1, stats[p][c][1]):8.1f}" for c in CLASSES))
        result[p]["episodes_by_class"] = {c: stats[p][c][2] / max(1, stats[p][c][1]) for c in CLASSES}
    print()
    if args.why:
        print("false rejects of the helpful candidates by kind (share of the bin's candidates):")
        for p in policies:
            result[p]["why_rejected"] = whys[p]
            for b in BINS:
                n = bins[p][b][1]
                kinds = ", ".join(f"{w} {c / n:.1%}" for w, c in whys[p][b].items() if c) if n else "-"
                print(f"{p:10} {b:>9}: {kinds or 'none'}")
        print()
    for p in policies:
        if p in ("paired", "sequential"):
            verdicts = targets(result[p])
            print(f"targets ({p}): " + ", ".join(f"{name} {'met' if ok else 'NOT met'}" for name, ok in verdicts))
    return result


if __name__ == "__main__":
    main()
