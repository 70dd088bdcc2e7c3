"""Sequential tests for the canary gate: pure statistics, no I/O (the gate's `sequential` policy runs them).

Two tests, each with its own error budget:

* **Is the candidate better on average?** A group-sequential sign-flip test on the paired differences
  d = candidate score - current score. Under the sharp null "the candidate makes no difference" the two scores of a
  pair are exchangeable, so each d is as likely to be +|d| as -|d|, independently of the other pairs and of the
  score distribution (binary, partial credit, heavy-tailed) and of how strongly the two sides of a pair are
  correlated. `group_sequential` computes that sign-flip distribution exactly (a convolution over the pairs, the
  differences rounded to 1/GRID) and, at each look, the smallest sum whose chance of being reached at this look
  without having been reached at an earlier one is within this look's share of alpha (`spent`). The shares add up
  to alpha, the events of the looks are disjoint, so the chance of a false accept over all looks together is at
  most alpha however many looks are taken and wherever the run stops: stopping early to reject never adds to it.

* **Does any task drop?** `DropWealth`: one e-process over every pair of every task, wealth *= 1 - lam * d, the
  stake lam chosen from earlier pairs only and kept in a separate account per task. When no task drops (every
  task's mean difference >= 0) each factor has expectation <= 1 given the past, so the wealth is a non-negative
  supermartingale and by Ville's inequality it ever reaches 1/alpha with probability at most alpha, whatever the
  number of pairs, whichever tasks the gate chose to probe and whenever it stops. One process for all tasks (not a
  Bonferroni bar of n_tasks/alpha per task) is what lets a real break reach the bar in a handful of pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

GRID = 20  # differences are rounded to multiples of 1/GRID for the exact sign-flip distribution


def spent(alpha: float, fraction: float, shape: float) -> float:
    """Cumulative alpha spent by information fraction `fraction` (power family alpha * f^shape: the larger the
    shape, the more of alpha is kept for the last look)."""
    return alpha * min(1.0, max(0.0, fraction)) ** shape


def _units(diffs: Sequence[float]) -> list[int]:
    """Signed differences on the grid: sign(d) * round(|d| * GRID). The rounding keeps every sign symmetric, so the
    test on the rounded values is exact."""
    return [int(math.copysign(round(abs(d) * GRID), d)) if d else 0 for d in diffs]


@dataclass(frozen=True)
class Look:
    """One look of the group-sequential test, all sums in score units (a sum of paired differences)."""

    index: int  # 1-based
    fraction: float  # share of the planned information
    pairs: int  # pairs seen so far
    total: float  # observed sum of the differences
    needed: float | None  # the sum this look needed to accept (None: no sum could, with this look's alpha)
    alpha: float  # the alpha this look could spend (its share plus what earlier looks left unspent)
    used: float  # the chance, under the null, of accepting at this look
    z: float  # (wins - losses) / sqrt(wins + losses) over the pairs: the futility rule's statistic (signs only, so one
    #           heavy-tailed pair cannot decide a stop, and binary and partial-credit scores stop alike)

    @property
    def crossed(self) -> bool:
        return self.needed is not None and self.total >= self.needed - 1e-9

    @property
    def mean(self) -> float:
        return self.total / self.pairs if self.pairs else 0.0

    def to_json(self) -> dict:
        return {"look": self.index, "fraction": round(self.fraction, 6), "pairs": self.pairs,
                "mean": round(self.mean, 6), "needed_mean": None if self.needed is None else
                round(self.needed / self.pairs, 6), "alpha": round(self.alpha, 6), "z": round(self.z, 6),
                "crossed": self.crossed}


def group_sequential(batches: Sequence[Sequence[float]], fractions: Sequence[float], alpha: float,
                     shape: float) -> list[Look]:
    """The looks after each batch of paired differences (batch j holds the pairs added since look j - 1).

    `fractions[j]` is look j's planned information fraction (fixed before the data: the pass number over the
    number of passes), so the alpha a look may spend never depends on what was seen."""
    if len(batches) != len(fractions):
        raise ValueError("one information fraction per batch")
    units = [_units(b) for b in batches]
    mags = [abs(u) for b in units for u in b if u]
    g = math.gcd(*mags) if mags else 1
    dist = [1.0]  # probability of each sum (in units of g), index offset `half`
    half = 0
    used_total = 0.0
    total_units = 0
    wins = losses = 0
    n = 0
    out: list[Look] = []
    for j, (batch, frac) in enumerate(zip(units, fractions)):
        for u in batch:
            a = abs(u) // g
            n += 1
            total_units += u // g
            wins += u > 0
            losses += u < 0
            if a == 0:
                continue
            new = [0.0] * (len(dist) + 2 * a)
            for i, p in enumerate(dist):
                if p:
                    new[i] += p / 2
                    new[i + 2 * a] += p / 2
            dist, half = new, half + a
        budget = max(0.0, spent(alpha, frac, shape) - used_total)
        # smallest c with P(sum >= c, not accepted before) <= budget
        tail, cut = 0.0, None
        for i in range(len(dist) - 1, -1, -1):
            if tail + dist[i] > budget + 1e-15:
                break
            tail += dist[i]
            if dist[i] > 0 or cut is not None:
                cut = i
        while cut is not None and cut < len(dist) and dist[cut] == 0:
            cut += 1  # the lowest sum that can occur: what the display shows as "needed"
        needed = None
        if cut is not None and cut < len(dist):
            needed = (cut - half) * g / GRID
            for i in range(cut, len(dist)):
                dist[i] = 0.0  # accepted here: those paths are not at the later looks
        used_total += tail
        total = total_units * g / GRID
        z = (wins - losses) / math.sqrt(wins + losses) if wins + losses else 0.0
        out.append(Look(j + 1, frac, n, total, needed, budget, tail, z))
    return out


BET_MAX = 0.95  # the most of its wealth the drop test stakes on one pair
BET_PRIOR_VAR = 0.25  # the plug-in bet's prior variance (one pseudo-pair): small samples bet cautiously


def drop_bet(diffs: Sequence[float], lam_max: float = BET_MAX) -> float:
    """The stake on a task's next pair, from its earlier pairs only (predictable): the plug-in Kelly fraction
    -mean/variance of the differences so far, both shrunk by one pseudo-pair of mean 0 and variance BET_PRIOR_VAR,
    0 while the task is not behind, at most `lam_max`."""
    n = len(diffs)
    mu = sum(diffs) / (n + 1)
    if n == 0 or mu >= 0:
        return 0.0
    var = (sum(d * d for d in diffs) + BET_PRIOR_VAR) / (n + 1)
    return min(lam_max, -mu / var)


SHARE = 0.7  # the share of its uncommitted wealth the drop test commits to a task when it first bets on it


class DropWealth:
    """One e-process against "no task drops" (every task's mean paired difference >= 0), over all pairs of all tasks
    in the order they arrive. The wealth starts at 1, uncommitted. When the stake on a task's next pair first turns
    positive (`drop_bet`, from its earlier pairs only; 0 where the caller says a drop past the tolerance is not
    possible), SHARE of the uncommitted wealth is committed to that task; from then on the task's account is
    multiplied by 1 - lam * d on each of its pairs. Under the null each factor has expectation <= 1 given the past and
    moving wealth between accounts keeps the total, so the total wealth is a non-negative supermartingale and, by
    Ville's inequality, ever reaches 1/alpha with probability at most alpha: whichever tasks the gate probes and
    whenever it stops. Separate accounts keep a task that looked bad by chance and then recovered from eating the
    evidence of another that really drops."""

    def __init__(self) -> None:
        self.cash = 1.0
        self.accounts: dict[str, float] = {}
        self.committed: dict[str, float] = {}
        self.seen: dict[str, list[float]] = {}
        self.keys: set = set()

    def add(self, tid: str, key: Any, d: float, bet: bool) -> None:
        if key in self.keys:
            return
        self.keys.add(key)
        past = self.seen.setdefault(tid, [])
        lam = drop_bet(past, BET_MAX) if bet else 0.0
        if lam > 0 and tid not in self.accounts:
            self.committed[tid] = self.accounts[tid] = SHARE * self.cash
            self.cash -= self.accounts[tid]
        if tid in self.accounts:
            self.accounts[tid] *= 1.0 - lam * d
        past.append(d)

    @property
    def wealth(self) -> float:
        return self.cash + sum(self.accounts.values())

    def growth(self, tid: str) -> float:
        """How much the task's account has grown since it was opened (1: never bet on)."""
        return self.accounts[tid] / self.committed[tid] if tid in self.accounts and self.committed[tid] else 1.0

    def leader(self) -> str | None:
        return max(self.accounts, key=self.accounts.get) if self.accounts else None
