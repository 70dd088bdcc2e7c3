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

* **Does any task drop?** Per task, the e-process prod(1 - lam * d) (`drop_evidence`). When the task's true mean
  difference is >= 0 each factor has expectation <= 1, so the product is a non-negative supermartingale and by
  Ville's inequality it ever reaches 1/a with probability at most a, whatever the number of pairs and whenever
  we stop looking. Splitting the budget over the tasks (threshold n_tasks / alpha) bounds the chance that a
  candidate which drops no task is vetoed for a drop by alpha, even though the gate spends extra pairs on exactly
  the tasks that look worst.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

GRID = 20  # differences are rounded to multiples of 1/GRID for the exact sign-flip distribution
DROP_BET = 0.9  # lam in prod(1 - lam * d): how hard each pair bets on a drop


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
    z: float  # total / sqrt(sum of squares): the self-normalised sum, for the futility rule and the display

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
    sq = 0.0
    n = 0
    out: list[Look] = []
    for j, (batch, frac) in enumerate(zip(units, fractions)):
        for u in batch:
            a = abs(u) // g
            n += 1
            total_units += u // g
            sq += (u / GRID) ** 2
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
        z = total / math.sqrt(sq) if sq > 0 else 0.0
        out.append(Look(j + 1, frac, n, total, needed, budget, tail, z))
    return out


def drop_evidence(diffs: Sequence[float], lam: float = DROP_BET) -> float:
    """E-value against "this task does not drop" (its mean difference >= 0): prod(1 - lam * d)."""
    e = 1.0
    for d in diffs:
        e *= 1.0 - lam * d
    return e
