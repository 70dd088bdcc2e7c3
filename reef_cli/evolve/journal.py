"""The evolve in flight, as one typed value on disk: what a killed evolve needs to finish without re-deciding.

Phases, in order (each saved atomically before the step it guards):

* `planned` — the plan is fixed: base release, memory bytes, the bullet operations, and the bytes the working
  tree held at every path the evolve may write (`expected`, sha256 or None for "absent").
* `gated` — the canary gate's verdict (and the per-bullet admission taken from it) is known.
* `writing` — the working-tree write has begun; a resume finishes it under the same compare-and-swap.
* `published` — the release exists (`release_id`); only bookkeeping is left.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..curate import Contradiction, Op
from ..durable import STATE_FILE_MODE
from ..project import write_atomic
from ..releases import canonical

JOURNAL = "journal.json"
PHASES = ("planned", "gated", "writing", "published")


@dataclass(frozen=True)
class EvolveJournal:
    evolve_id: str
    base_release_id: str
    memory: str  # the pattern-memory bytes the candidate was built with (UTF-8 JSON)
    ops: tuple[Op, ...]
    contradictions: tuple[Contradiction, ...] = ()
    gated: bool = False
    phase: str = "planned"
    verdict: dict | None = None
    admission: dict | None = None  # per-bullet admission: {"admitted": [...], "dropped": [{bullet_id, reason}]}
    expected: dict = field(default_factory=dict)  # {path: sha256 of the working tree's bytes at plan time | None}
    release_id: str | None = None
    warnings: tuple[str, ...] = ()
    pending: dict | None = None
    reflect: dict | None = None
    expired: tuple[str, ...] = ()
    blocked: tuple[dict, ...] = ()
    diff: tuple[str, ...] = ()
    branch: str | None = None  # `--branch`: the candidate goes to this branch of the user's repo, never the chain

    def advance(self, phase: str, **changes) -> "EvolveJournal":
        if PHASES.index(phase) < PHASES.index(self.phase):
            raise ValueError(f"evolve journal cannot go from {self.phase} back to {phase}")
        return replace(self, phase=phase, **changes)

    def to_json(self) -> dict:
        return {"version": 2, "evolve_id": self.evolve_id, "base_release_id": self.base_release_id,
                "memory": self.memory, "ops": [o.to_json() for o in self.ops],
                "contradictions": [c.to_json() for c in self.contradictions], "gated": self.gated,
                "phase": self.phase, "verdict": self.verdict, "admission": self.admission,
                "expected": dict(sorted(self.expected.items())), "release_id": self.release_id,
                "warnings": list(self.warnings), "pending": self.pending, "reflect": self.reflect,
                "expired": list(self.expired), "blocked": list(self.blocked), "diff": list(self.diff),
                "branch": self.branch}

    @classmethod
    def from_json(cls, d: dict) -> "EvolveJournal":
        phase = d.get("phase", "planned")
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        return cls(evolve_id=str(d["evolve_id"]), base_release_id=str(d["base_release_id"]), memory=d["memory"],
                   ops=tuple(Op.from_json(o) for o in d.get("ops") or ()),
                   contradictions=tuple(Contradiction.from_json(c) for c in d.get("contradictions") or ()),
                   gated=bool(d.get("gated")), phase=phase, verdict=d.get("verdict"), admission=d.get("admission"),
                   expected=dict(d.get("expected") or {}), release_id=d.get("release_id"),
                   warnings=tuple(d.get("warnings") or ()), pending=d.get("pending"), reflect=d.get("reflect"),
                   expired=tuple(d.get("expired") or ()), blocked=tuple(d.get("blocked") or ()),
                   diff=tuple(d.get("diff") or ()), branch=d.get("branch"))


class JournalFile:
    """`.reef/scenarios/<s>/evolve/journal.json`: canonical JSON, replaced atomically."""

    def __init__(self, directory: Path):
        self.path = directory / JOURNAL

    def load(self) -> EvolveJournal | None:
        """The journal, or None when there is none (or it is torn). Read as state (`durable.read_state`): a FIFO or a
        symlink there is its one line, exit 4; a plain read hung `reef status` (and evolve) on a FIFO."""
        from ..durable import read_state

        try:
            raw = read_state(self.path)
            return None if raw is None else EvolveJournal.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError):
            return None  # a torn or foreign journal was never the commit point of anything: start over

    def save(self, journal: EvolveJournal) -> EvolveJournal:
        write_atomic(self.path, canonical(journal.to_json()) + b"\n", STATE_FILE_MODE)
        return journal

    def clear(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
