"""Per-bullet admission: every new bullet earns its place on its own measured utility, not on its neighbours'.

The gate judges the whole candidate and, for each new bullet, the candidate without that bullet's group
(leave-one-out: `gate_candidate(attribute=…)`). A new bullet is admitted when its utility (candidate mean score
minus the ablated one's, over the canary set) is above zero and its pairs are not mixed: either removing it made no
pair better (it helps somewhere and hurts nowhere), or the gate's `bullet_test` (the exact sign-flip test at the
gate's false-accept budget) says the net gain is real. A bullet that moves answers both ways for a small net gain —
what greedy decoding does to a real model when any line of its prompt changes — is noise, not a lesson
(bench/efficacy_real.py saw an unfollowable "start with OK:" rule earn +0.06 as 3 prompts up, 1 down). Requiring the
test alone would also drop bullets that reliably fix one or two canary tasks (too few pairs to cross it; `reef demo`
lost two of its three helpful bullets that way), and the admitted set is gated again as a whole anyway. Verdicts
without the test (older records) fall back to the sign of the utility. When some are admitted and some not, the admitted
subset is a different candidate, so it is gated again on its own bytes, and that verdict decides the release (the
published bytes are always bytes a gate judged). Decisions where the issue is silent:

* Bullets beyond `--attribute N` are *deferred*: not published this time, no negative evidence; they stay in memory
  at their tier and come back next evolve. `--attribute 0` turns per-bullet admission off (the old joint judgement,
  with a warning).
* A bullet whose group cannot be ablated (the candidate would not apply without it) is dropped as unmeasurable.
* When no single bullet shows a positive utility — redundant bullets (each one alone carries the joint gain) or a
  helpful bullet whose gain a harmful neighbour masks (with both, the task still fails) — the highest-utility
  non-negative one is admitted and gated alone; that verdict decides.
* A dropped bullet is negative evidence (origin `gate`), like a bullet of a rejected candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..curate import Op, Surfaces, apply_ops


def new_adds(ops, base: dict, config) -> list[Op]:
    """The add operations whose bullet the base harness does not hold anywhere: the bullets to attribute."""
    existing = set(Surfaces(base, config).by_id)
    return [o for o in ops if o.op == "add" and o.bullet_id not in existing]


def without_groups(ops, groups: set[str]) -> list[Op]:
    return [o for o in ops if o.group not in groups]


def ablations(base_with_memory: dict, ops, adds: list[Op], *, config, memory, root, limit: int) -> dict:
    """{bullet id: candidate files without that bullet's group} for the first `limit` new bullets."""
    out = {}
    for o in adds[:limit]:
        try:
            files, _ = apply_ops(base_with_memory, without_groups(ops, {o.group}), config=config, memory=memory,
                                 root=root)
        except Exception:  # noqa: BLE001 — a group the candidate cannot do without is reported as unmeasurable
            continue
        out[o.bullet_id] = files
    return out


@dataclass(frozen=True)
class Admission:
    admitted: tuple[str, ...]
    dropped: tuple[dict, ...] = ()  # {bullet_id, key, text, utility, reason}
    deferred: tuple[str, ...] = ()
    utility: dict = field(default_factory=dict)

    @property
    def drops_groups(self) -> bool:
        return bool(self.dropped or self.deferred)

    def to_json(self) -> dict:
        return {"admitted": list(self.admitted), "dropped": [dict(d) for d in self.dropped],
                "deferred": list(self.deferred), "utility": dict(self.utility)}


def admit(adds: list[Op], verdict: dict, *, limit: int) -> Admission:
    """Which new bullets pay their way, from the joint verdict's `bullet_utility`."""
    utility = dict((verdict or {}).get("bullet_utility") or {})
    tests = dict(((verdict or {}).get("trace") or {}).get("bullets") or {})
    measured = adds[:limit]
    deferred = tuple(o.bullet_id for o in adds[limit:])
    admitted, dropped = [], []
    for o in measured:
        u = utility.get(o.bullet_id)
        if u is None:
            dropped.append({"bullet_id": o.bullet_id, "key": o.key, "text": o.text, "utility": None,
                            "reason": "its utility could not be measured (the candidate needs it to apply)"})
        elif u > 0 and _pays(tests.get(o.bullet_id)):
            admitted.append(o.bullet_id)
        elif u > 0:
            t = tests[o.bullet_id]
            need = t.get("needed_mean")
            dropped.append({"bullet_id": o.bullet_id, "key": o.key, "text": o.text, "utility": u,
                            "reason": f"its leave-one-out utility {u:+.3f} on the canary set is not distinguishable "
                                      f"from noise over {t.get('pairs')} pairs ({t.get('up')} up, {t.get('down')} down)"
                                      + (f" (the gate's sign-flip test needed {need:+.3f})" if need is not None else "")})
        else:
            dropped.append({"bullet_id": o.bullet_id, "key": o.key, "text": o.text, "utility": u,
                            "reason": f"it did not pay its way: leave-one-out utility {u:+.3f} on the canary set "
                                      f"(the candidate without it scored as well)"})
    if not admitted:
        best = sorted((d for d in dropped if d["utility"] is not None and d["utility"] >= 0),
                      key=lambda d: -d["utility"])
        if best:  # redundant bullets, or a gain masked by a harmful neighbour: the best one is gated alone next
            admitted.append(best[0]["bullet_id"])
            dropped = [d for d in dropped if d["bullet_id"] != best[0]["bullet_id"]]
    return Admission(tuple(admitted), tuple(dropped), deferred, utility)


def _pays(test: dict | None) -> bool:
    """Positive utility is enough when no pair went the other way; mixed pairs need the sign-flip test to cross."""
    if not test:
        return True
    return bool(test.get("admitted")) or test.get("down", 1) == 0
