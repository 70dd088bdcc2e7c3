"""Orchestration of Loops 1 and 2: reflect → propose → guard → gate → publish, plus review, promote, reject, demote.

One `evolve` publishes at most one release. Its `evidence` lists the observation record ids behind the bullets it
changes (plus the gate's verdict record); its `reason` lists the bullet operations; its `meta` carries the
operations (`bullets`), the pattern keys, the gate verdict or the "not gated" warning, and `evolve_id`.

Decisions (where the issue is silent):

* **Which config governs** an evolve: the head release's harness.yaml, never the working tree's, so an unpublished
  edit of the zone map cannot loosen the guard for an automatic write.
* **Where memory comes from**: the working tree's memory file when it exists (a standalone `reef harness reflect`
  wrote it), else the head release's. After a rollback the working tree holds the old memory, so the fold simply
  re-reads the records after its mark.
* **Gating.** With canary tasks, every bullet change (Learned or Evolvable) is gated as one candidate; a publish
  verdict publishes it all, a reject publishes only pattern memory (bookkeeping no agent reads) and records
  negative evidence for the keys whose bullets were new to the harness. A candidate that only moves bullets up
  the ladder or removes them (expiry, budget) is neutral by intent: it publishes when no canary task got worse
  (every per-task status "same" or "improved"), since requiring an improvement would refuse every promotion.
  Memory-only changes are never gated. Without canary tasks,
  Learned-zone groups publish after guard, schema and budget checks with a "not gated" warning, and Evolvable
  groups and contradictions wait in a pending proposal for `reef harness promote`.
* **Contradictions** go to the gate as "take the new bullet" (the old one removed); when the gate publishes, the
  loser's key gets negative evidence, when it rejects, the newcomer's. Without a gate they wait for a human.
* **Human verbs.** `promote` is a human decision: it re-applies the proposal's bullet operations on the *current*
  head (budgets, schema and the zone guard run again; the gate does not — the human is the judge), publishes with
  operation `promote`, and writes a `promotion` record that lifts negative evidence on those keys. `promote KEY`
  with nothing pending promotes that pattern one surface up, whatever its count. `reject` writes negative evidence
  for every key of the proposal. `demote` removes the pattern's bullets everywhere, resets its count and writes
  negative evidence (a `negative` record with `reset`).
* **Rollback** of a release that added bullets (evolve or promote) is negative evidence for those keys; it is
  found by reading rollback releases from the release log at the start of every reflect/evolve, and written once
  (deterministic record ids, plus `evolve/rollbacks.json`).
* **Crash safety.** A journal (`.reef/scenarios/<s>/evolve/journal.json`, atomic writes) holds the base release,
  the memory bytes and the final bullet operations before anything irreversible; the candidate is recomputed from
  them byte for byte, the gate resumes from its own journal, and the release carries `meta.evolve_id`. A re-run
  finds the journal: if the release exists it finishes the bookkeeping, if the head is still the base it resumes,
  otherwise the stale journal is dropped. Ledger records written by evolve have deterministic ids, so a resend is a
  no-op, and a bullet is addressed by its stable id, so nothing is ever duplicated. Test-only fault points:
  `REEF_FAULT=evolve:planned|gated|published` SIGKILLs the process there.
* **Clock**: `now` is injected (the CLI reads `REEF_NOW`, ISO 8601, for tests and replays).

Files under `.reef/scenarios/<s>/evolve/` (canonical JSON, written atomically):

* `journal.json` — the evolve in flight: `{evolve_id, base_release_id, phase: planned|gated|published, memory
  (the pattern-memory bytes), ops [bullet operations], contradictions, gated, verdict, warnings, …}`.
* `proposals/prop_<12 hex>.json` — a proposal waiting for a human (`--review`, or Evolvable edits and
  contradictions without a gate): `{version, proposal_id, status: pending|promoted|rejected|superseded, mode:
  review|needs-human, created_at, base_release_id, ops, contradictions, blocked, keys, evidence, diff [per-bullet
  lines], memory, record_id}`. The id hashes the base release, the operations and the memory, so the same
  proposal is written once; a newer pending proposal over the same keys supersedes an older one.
* `rollbacks.json` — rollback releases already turned into negative evidence.
* `<evolve_id>/gate/` — the gate's episode journal for that evolve.

A bullet operation (`curate.Op`): `{op: add|update|remove|merge, surface: notes|block|skill, path, bullet_id, key,
text, old_text, reason, zone, tier, group}`; one group (a pattern's move, a merge, a contradiction's resolution) is
applied or refused as a whole. Ledger records written here: `reflect`, `rejection`, `proposal`, `negative`
(`{key, text, polarity, origin: gate|human|rollback|guard|contradiction, reason, needed, path?, reset?}`) and
`promotion` (`{key, human: true, proposal_id, release_id}`).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .curate import (RANK, SIGN, Blocked, Contradiction, Op, Surfaces, apply_ops, diff_lines,
                     plan as curate_plan, reearn_needed, skill_path, tier_of)
from .errors import ConflictError, InvalidInput, NotFound, PolicyError
from .gitstore import Entry
from .patterns import PatternMemory
from .times import format_time, utc_now
from .project import write_atomic
from .releases import canonical

JOURNAL = "journal.json"


def _fault(point: str) -> None:
    if os.environ.get("REEF_FAULT") == f"evolve:{point}":
        os.kill(os.getpid(), signal.SIGKILL)


def _sha(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


@dataclass
class Options:
    dry_run: bool = False
    review: bool = False
    backend: str | None = None
    model_url: str | None = None
    model: str | None = None
    now: datetime | None = None
    environ: dict = field(default_factory=lambda: dict(os.environ))
    progress: Callable[[dict], None] | None = None
    attribute: int = 3  # leave-one-out attribution for at most this many new bullets (0: off)
    workers: int | None = None
    show_prompt: bool = False  # a model backend builds its requests and sends none (llm_reflector.py)

    def clock(self) -> datetime:
        return self.now or datetime.now(timezone.utc)


@dataclass
class Outcome:
    status: str  # published | nothing | review | dry-run | rejected | pending
    release: dict | None = None
    ops: list[dict] = field(default_factory=list)
    pending: dict | None = None
    contradictions: list[dict] = field(default_factory=list)
    blocked: list[dict] = field(default_factory=list)
    verdict: dict | None = None
    warnings: list[str] = field(default_factory=list)
    reflect: dict | None = None
    evidence: list[str] = field(default_factory=list)
    diff: list[str] = field(default_factory=list)
    negatives: list[dict] = field(default_factory=list)
    gated: bool = False
    resumed: bool = False
    expired: list[str] = field(default_factory=list)
    evolve_id: str | None = None

    def to_json(self) -> dict:
        return {"status": self.status, "release": self.release, "ops": self.ops, "pending": self.pending,
                "contradictions": self.contradictions, "blocked": self.blocked, "verdict": self.verdict,
                "warnings": self.warnings, "reflect": self.reflect, "evidence": self.evidence, "diff": self.diff,
                "negatives": self.negatives, "gated": self.gated, "resumed": self.resumed,
                "expired": self.expired, "evolve_id": self.evolve_id}


# --------------------------------------------------------------------------------------------- shared pieces


def evolve_dir(store) -> Path:
    d = store.dir / "evolve"
    d.mkdir(parents=True, exist_ok=True)
    return d


def memory_path(config) -> str:
    return config.surfaces["memory"]


def load_memory(store, config, base_files: dict) -> PatternMemory:
    """Pattern memory to fold into; refuses up front when harness.yaml points `surfaces.memory` at a path the zone
    guard does not let reef write (every later write of it would be refused, or worse, clobber a human's file)."""
    from .zones import check_write

    path = memory_path(config)
    check_write(store.project.root, config.zone_map(), path)
    wt = store.project.root / path
    if wt.is_file() and not wt.is_symlink():
        return PatternMemory.loads(wt.read_bytes(), str(wt))
    entry = base_files.get(path)
    return PatternMemory.loads(entry.data if entry else None, f"{path} (head release)")


def with_memory(files: dict, config, memory: PatternMemory) -> dict:
    """`files` with `memory` at its path; bytes that already hold the same memory (another layout) are kept."""
    out = dict(files)
    path = memory_path(config)
    data = memory.dumps()
    old = out.get(path)
    if old is not None:
        if old.data == data:
            return out
        try:
            if PatternMemory.loads(old.data, path).dumps() == data:
                return out
        except InvalidInput:
            pass
    out[path] = Entry(data, old.mode if old is not None else 0o100644)
    return out


def make_backend(config, opts: Options):
    """The Reflector's backend, resolved in llm_reflector.resolve (flags, REEF_REFLECTOR_* env, harness.yaml)."""
    from .llm_reflector import resolve

    mode = "show" if opts.show_prompt else "estimate" if opts.dry_run else "send"
    return resolve(config.reflector, backend=opts.backend, base_url=opts.model_url, model=opts.model,
                   environ=opts.environ, mode=mode)


def _head_ids(store) -> tuple[str | None, str | None]:
    head = store.head()
    return (head.release_id, head.content_id) if head else (None, None)


def _negative_payload(key: str, text: str, polarity: str, origin: str, reason: str, needed: int, **extra) -> dict:
    return {"key": key, "text": text, "polarity": polarity, "origin": origin, "reason": reason, "needed": needed,
            **{k: v for k, v in extra.items() if v is not None}}


def write_negatives(store, ledger, items: list[tuple[str, dict]]) -> list[dict]:
    """Append `negative` records with deterministic ids (a resend is a no-op)."""
    from .ledger import NewRecord

    if not items:
        return []
    rid, cid = _head_ids(store)
    recs = ledger.append_many([NewRecord("negative", payload, rid, cid, record_id) for record_id, payload in items])
    return [{"record_id": r.record_id, **r.payload} for r in recs]


def record_rollback_negatives(store, ledger, config) -> list[dict]:
    """Negative evidence for every pattern whose bullets a rollback undid (once per rollback release)."""
    state_path = evolve_dir(store) / "rollbacks.json"
    try:
        done = set(json.loads(state_path.read_text()))
    except (FileNotFoundError, ValueError):
        done = set()
    releases = store.releases()
    by_id = {r.release_id: r for r in releases}
    items: list[tuple[str, dict]] = []
    fresh = []
    for rb in releases:
        if rb.operation != "rollback" or rb.release_id in done:
            continue
        fresh.append(rb.release_id)
        target = by_id.get(rb.meta.get("rollback_target_release_id"))
        undone_head = by_id.get(rb.meta.get("rolled_back_release_id"))
        if target is None or undone_head is None:
            continue
        for r in releases:
            if not (target.step < r.step <= undone_head.step):
                continue
            for op in r.meta.get("bullets") or ():
                if op.get("op") not in ("add", "update") or not op.get("key"):
                    continue
                needed = reearn_needed(config, op.get("surface"))
                rid = f"neg-rb-{rb.release_id}-{_sha(op['key'])[:16]}"
                items.append((rid, _negative_payload(
                    op["key"], op.get("text", ""), "", "rollback",
                    f"release step {r.step} ({r.release_id}) was rolled back by step {rb.step}", needed,
                    release_id=r.release_id, rollback_release_id=rb.release_id, bullet_id=op.get("bullet_id"))))
    seen = set()
    unique = [(rid, p) for rid, p in items if not (rid in seen or seen.add(rid))]
    out = write_negatives(store, ledger, unique)
    if fresh:
        write_atomic(state_path, canonical(sorted(done | set(fresh))) + b"\n")
    return out


def _reflect(store, ledger, config, memory: PatternMemory, opts: Options, files: dict | None = None):
    from .reflect import reflect

    backend = make_backend(config, opts)
    bullets = []
    if files is not None and backend != "builtin":
        surfaces = Surfaces(files, config)
        bullets = sorted({w.text for ws in surfaces.by_id.values() for w in ws})
    return reflect(ledger, store.scenario, memory, threshold=config.reflector.similarity, backend=backend,
                   progress=opts.progress, bullets=bullets)


def _reflect_records(store, ledger, result, memory: PatternMemory, config) -> None:
    """Audit records of one reflect: its rejections and a summary, with ids derived from their content."""
    from .ledger import NewRecord

    rid, cid = _head_ids(store)
    items = []
    for rej in result.rejected:
        body = rej.to_json()
        items.append(NewRecord("rejection", body, rid, cid, f"rej-{_sha(canonical(body))[:24]}"))
    summary = {k: v for k, v in result.to_json().items() if k != "rejected"}
    summary["patterns_touched"] = summary["patterns_touched"][:100]
    summary["patterns_created"] = summary["patterns_created"][:100]
    summary["rejected"] = len(result.rejected)
    summary["memory_path"] = memory_path(config)
    summary["memory_sha256"] = _sha(memory.dumps())
    items.append(NewRecord("reflect", summary, rid, cid,
                           f"reflect-{result.from_seq}-{result.through_seq}-{summary['memory_sha256'][:16]}"))
    ledger.append_many(items)


# --------------------------------------------------------------------------------------------- reflect


@dataclass
class ReflectOutcome:
    result: object
    written: bool
    path: str
    negatives: list[dict]

    def to_json(self) -> dict:
        return {**self.result.to_json(), "written": self.written, "memory_path": self.path,
                "rollback_negatives": len(self.negatives)}


def run_reflect(store, opts: Options) -> ReflectOutcome:
    """`reef harness reflect`: fold new records into the working tree's pattern memory (Learned zone)."""
    from .zones import check_write

    head = store.require_head()
    config = store.config_of(head)
    ledger = store.ledger()
    with ledger:
        negatives = [] if opts.dry_run else record_rollback_negatives(store, ledger, config)
        files = store.files_of(head)
        memory = load_memory(store, config, files)
        before = memory.dumps()
        result = _reflect(store, ledger, config, memory, opts, files)
        after = memory.dumps()
        path = memory_path(config)
        written = False
        if after != before and not opts.dry_run:
            check_write(store.project.root, config.zone_map(), path)
            target = store.project.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, after)
            written = True
        if result.changed and not opts.dry_run:
            _reflect_records(store, ledger, result, memory, config)
    return ReflectOutcome(result, written, path, negatives)


# --------------------------------------------------------------------------------------------- evolve


def _canary_tasks(files: dict, config) -> bool:
    try:
        from .tasks import load_suite
    except ImportError:
        return False
    return bool(load_suite(files, config.gate.tasks).canary)


def _gate():
    try:
        from .gate import gate_candidate
    except ImportError:  # the gate is optional at import time (a partial install); no gate means "not gated"
        return None
    return gate_candidate


def _zone_of_group(ops: list[Op]) -> str:
    zones = {o.zone for o in ops}
    return "evolvable" if "evolvable" in zones else "learned"


def _evidence(memory: PatternMemory, keys: set[str]) -> list[str]:
    out: set[str] = set()
    for k in keys:
        p = memory.patterns.get(k)
        if p is not None:
            out.update(p.evidence)
    return sorted(out)


def _reason(ops: list[Op], extra: str = "") -> str:
    """A release reason after its verb: one `+ID PATH` per bullet operation."""
    text = "; ".join(f"{SIGN[o.op]}{o.bullet_id} {o.path}" for o in ops) or "pattern memory only"
    return f"{text} ({extra})" if extra else text


def _dirty_conflict(store, paths: set[str]) -> None:
    try:
        dirty = set(store.dirty_paths())
    except InvalidInput:
        return
    clash = sorted(dirty & paths)
    if clash:
        raise ConflictError(f"{', '.join(clash[:5])} has unpublished edits in the working tree; publish or revert "
                            f"them before reef writes there (nothing was changed)")


class Journal:
    def __init__(self, directory: Path):
        self.path = directory / JOURNAL

    def load(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):  # a torn journal was never the commit point of anything: start over
            return None

    def save(self, data: dict) -> None:
        write_atomic(self.path, canonical(data) + b"\n")

    def clear(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _lock(directory: Path):
    from filelock import FileLock, Timeout

    lock = FileLock(str(directory / "lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ConflictError(f"another evolve/promote is running on this scenario (lock {directory / 'lock'})") from None
    return lock


def evolve(store, opts: Options) -> Outcome:
    """One evolve step. A scenario bound to a recipe whose `publish` is `review` (recipes/harness-review.yaml) always
    proposes: nothing publishes until a human runs `reef harness promote`."""
    from dataclasses import replace

    from .recipes import load as load_recipe

    if not opts.review and not opts.dry_run and load_recipe(store.info().recipe).publish == "review":
        opts = replace(opts, review=True)
    directory = evolve_dir(store)
    lock = _lock(directory) if not opts.dry_run else None
    try:
        ledger = store.ledger()
        with ledger:
            if not opts.dry_run:
                journal = Journal(directory)
                state = journal.load()
                if state is not None:
                    resumed = _resume(store, ledger, journal, state, opts)
                    if resumed is not None:
                        return resumed
            return _evolve(store, ledger, opts)
    finally:
        if lock is not None:
            lock.release()


def _evolve(store, ledger, opts: Options) -> Outcome:
    head = store.require_head()
    config = store.config_of(head)
    base = store.files_of(head)
    negatives = [] if opts.dry_run else record_rollback_negatives(store, ledger, config)
    memory = load_memory(store, config, base)
    refl = _reflect(store, ledger, config, memory, opts, base)
    root = store.project.root
    p = curate_plan(memory, with_memory(base, config, memory), config, now=opts.clock(), root=root)
    memory = p.memory
    out = Outcome("nothing", reflect=refl.to_json(), expired=list(p.expired))
    out.negatives = negatives
    groups = p.groups()
    learned = {g: ops for g, ops in groups.items() if _zone_of_group(ops) != "evolvable"}
    evolvable = {g: ops for g, ops in groups.items() if _zone_of_group(ops) == "evolvable"}
    has_gate = _canary_tasks(base, config) and _gate() is not None
    mem_changed = with_memory(base, config, memory) != base
    out.blocked = [b.to_json() for b in p.blocked]
    out.diff = diff_lines(p.ops, p.contradictions, p.blocked)
    out.contradictions = [c.to_json() for c in p.contradictions]
    evolve_id = "evo_" + _sha(canonical({"base": head.release_id, "memory": _sha(memory.dumps()),
                                         "plan": p.to_json()}))[:20]
    out.evolve_id = evolve_id
    blocked_neg = [(f"neg-{evolve_id}-{_sha(b.key + b.path)[:16]}",
                    _negative_payload(b.key, b.text, b.polarity, "guard", f"{b.kind}: {b.reason}",
                                      reearn_needed(config, tier_of(config, b.tier or 0)[1] if b.tier else None),
                                      path=b.path, evolve_id=evolve_id))
                   for b in p.blocked if b.negative]
    if opts.dry_run:
        out.status = "dry-run"
        out.ops = [o.to_json() for o in p.ops]
        out.gated = has_gate
        return out
    if not opts.review:  # before anything is written: a user's unpublished edit of a target stops the evolve
        _dirty_conflict(store, {o.path for o in p.ops} | {c.path for c in p.contradictions})
    if refl.changed:
        _reflect_records(store, ledger, refl, memory, config)
    out.negatives += write_negatives(store, ledger, blocked_neg)
    if opts.review:
        if not (p.ops or p.contradictions or mem_changed):
            return out
        prop = write_proposal(store, head, memory, p.ops, p.contradictions, p.blocked, mode="review",
                              evidence=_evidence(memory, {o.key for o in p.ops if o.key} |
                                                 {c.key for c in p.contradictions}))
        out.status, out.pending, out.ops = "review", prop, [o.to_json() for o in p.ops]
        return out
    if has_gate:
        cand_ops = [o for g in sorted(groups) for o in groups[g]]
        chosen = list(p.contradictions)
        pending_ops, pending_contra = [], []
    else:
        cand_ops = [o for g in sorted(learned) for o in learned[g]]
        chosen = []
        pending_ops = [o for g in sorted(evolvable) for o in evolvable[g]]
        pending_contra = list(p.contradictions)
        if cand_ops:
            out.warnings.append("not gated: this project has no canary tasks; Learned-zone edits were published "
                                "after guard, schema and budget checks only")
    kept = []
    for c in chosen:  # a contradiction whose resolution cannot fit (budget, guard) is reported, not gated
        trial = cand_ops + c.resolution(_zone(store, config, c.path))
        try:
            apply_ops(with_memory(base, config, memory), trial, config=config, memory=memory, root=root)
        except (InvalidInput, PolicyError) as exc:
            out.blocked.append(Blocked(c.key, c.path, "budget" if "budget" in str(exc) else "frozen", str(exc),
                                       False, c.tier, c.text).to_json())
            continue
        cand_ops, kept = trial, kept + [c]
    chosen = kept
    if pending_ops or pending_contra:
        prop = write_proposal(store, head, memory, pending_ops, pending_contra, [], mode="needs-human",
                              evidence=_evidence(memory, {o.key for o in pending_ops if o.key} |
                                                 {c.key for c in pending_contra}))
        out.pending = prop
    if not cand_ops and not mem_changed:
        if out.pending:
            out.status = "pending"
        return out
    # final candidate: budgets may evict again when contradiction resolutions join; apply_ops reports what it did
    cand_files, applied = apply_ops(with_memory(base, config, memory), cand_ops, config=config, memory=memory,
                                    root=root)
    state = {"evolve_id": evolve_id, "base_release_id": head.release_id, "phase": "planned",
             "memory": memory.dumps().decode("utf-8"), "ops": [o.to_json() for o in applied],
             "contradictions": [c.to_json() for c in chosen], "gated": bool(has_gate and applied),
             "warnings": out.warnings, "pending": out.pending, "reflect": out.reflect, "expired": out.expired,
             "blocked": out.blocked, "diff": out.diff, "verdict": None}
    journal = Journal(evolve_dir(store))
    journal.save(state)
    _fault("planned")
    return _continue(store, ledger, journal, state, opts, out)


def _zone(store, config, path: str) -> str:
    from .zones import decide

    return decide(store.project.root, config.zone_map(), path).zone


def _proposal_record(store, ledger, state: dict) -> None:
    rid, cid = _head_ids(store)
    ledger.append("proposal", {"evolve_id": state["evolve_id"], "base_release_id": state["base_release_id"],
                               "ops": state["ops"], "contradictions": state["contradictions"],
                               "blocked": state["blocked"], "gated": state["gated"],
                               "memory_sha256": _sha(state["memory"])},
                  release_id=rid, content_id=cid, record_id=f"prop-{state['evolve_id']}")


def _candidate(store, state: dict):
    head = store.find(state["base_release_id"])
    config = store.config_of(head)
    memory = PatternMemory.loads(state["memory"], "evolve journal")
    ops = [Op.from_json(o) for o in state["ops"]]
    base = store.files_of(head)
    files, _ = apply_ops(with_memory(base, config, memory), ops, config=config, memory=memory,
                         root=store.project.root)
    return head, config, base, memory, ops, files


def _continue(store, ledger, journal: Journal, state: dict, opts: Options, out: Outcome) -> Outcome:
    head, config, base, memory, ops, files = _candidate(store, state)
    _proposal_record(store, ledger, state)  # idempotent: a resume resends the same record id
    contradictions = [Contradiction.from_json(c) for c in state["contradictions"]]
    verdict = state.get("verdict")
    if state["gated"] and verdict is None:
        gate = _gate()
        attribute = _attribution(files, ops, opts.attribute)
        v = gate(store, files, ledger=ledger, baseline=head, workers=opts.workers, attribute=attribute or None,
                 progress=opts.progress, journal_dir=evolve_dir(store) / state["evolve_id"] / "gate",
                 environ=opts.environ)
        verdict = v.to_json() if v is not None else {"decision": "publish", "reason": "no canary tasks"}
        state["verdict"] = verdict
        state["phase"] = "gated"
        journal.save(state)
        _fault("gated")
    out.verdict = verdict
    out.gated = bool(state["gated"])
    negatives: list[tuple[str, dict]] = []
    existing = set(Surfaces(base, config).by_id)
    new_adds = [o for o in ops if o.op == "add" and o.bullet_id not in existing]
    if verdict is not None and verdict.get("decision") != "publish" and not new_adds and not contradictions \
            and _non_regressing(verdict):
        # Only moves and removals of bullets the harness already holds: neutral by intent, so "no task got worse"
        # is the bar — requiring an improvement would refuse every promotion up the ladder.
        verdict = {**verdict, "accepted_as": "non-regressing move"}
        out.verdict = verdict
        gate_notes = ["the gate saw no improvement, but this release only moves or removes existing bullets and no "
                      "canary task got worse"]
    else:
        gate_notes = []
    if verdict is not None and verdict.get("decision") != "publish" and "accepted_as" not in verdict:
        for o in (new_adds or [o for o in ops if o.op == "add"]):
            if o.key:
                p = memory.patterns.get(o.key)
                negatives.append((f"neg-{state['evolve_id']}-{_sha(o.key)[:16]}", _negative_payload(
                    o.key, o.text, p.polarity if p else "", "gate", f"the canary gate rejected it: "
                    f"{verdict.get('reason', '')}", reearn_needed(config, o.surface), bullet_id=o.bullet_id,
                    evolve_id=state["evolve_id"], gate_record_id=verdict.get("record_id"))))
        publish_ops: list[Op] = []
        files = with_memory(base, config, memory)
        out.status = "rejected"
    else:
        publish_ops = ops
        for c in contradictions:
            if c.existing_key:
                negatives.append((f"neg-{state['evolve_id']}-{_sha(c.existing_key)[:16]}", _negative_payload(
                    c.existing_key, c.existing_text, "", "contradiction",
                    f"lost to contradicting reef:{c.bullet_id} {c.text!r}", reearn_needed(config, c.surface),
                    bullet_id=c.existing_id, evolve_id=state["evolve_id"])))
    release = None
    if files != base:
        evidence = _evidence(memory, {o.key for o in publish_ops if o.key})
        if verdict is not None and verdict.get("record_id"):
            evidence.append(verdict["record_id"])
        meta = {"evolve_id": state["evolve_id"], "bullets": [o.to_json() for o in publish_ops],
                "patterns": sorted({o.key for o in publish_ops if o.key}), "gated": out.gated}
        if verdict is not None and "policy" in verdict:
            meta["gate"] = {k: verdict.get(k) for k in ("decision", "policy", "record_id", "interval",
                                                        "episodes_spent", "reason", "accepted_as") if k in verdict}
        if state["warnings"]:
            meta["warning"] = state["warnings"][0]
        extra = "gate rejected the bullets" if out.status == "rejected" else (
            "not gated" if publish_ops and not out.gated else (verdict or {}).get("accepted_as", ""))
        accepted = verdict and (verdict.get("decision") == "publish" or verdict.get("accepted_as"))
        if out.gated and accepted and "candidate_content_id" in verdict:
            cid = store.git.write_tree(dict(files))
            if cid != verdict["candidate_content_id"]:
                raise PolicyError(f"the gate judged content {verdict['candidate_content_id'][:12]}, not "
                                  f"{cid[:12]}; nothing was published")
        res = store.publish(reason="evolve: " + _reason(publish_ops, extra), operation="evolve", files=files,
                            expected_head=head.release_id, evidence=tuple(evidence), meta=meta)
        release = res.release
        state["phase"] = "published"
        state["release_id"] = release.release_id
        _fault("published")
    _finish(store, ledger, journal, state, base, files, negatives)
    out.negatives += [{"record_id": rid, **p} for rid, p in negatives]
    out.ops = [o.to_json() for o in publish_ops]
    out.warnings = (list(state["warnings"]) if publish_ops and not out.gated else []) + gate_notes
    if release is not None:
        out.release = release.to_json()
        out.evidence = list(release.evidence)
        if out.status != "rejected":
            out.status = "published"
    elif out.status != "rejected":
        out.status = "pending" if out.pending else "nothing"
    return out


def _non_regressing(verdict: dict) -> bool:
    tasks = verdict.get("per_task") or []
    return bool(tasks) and all(t.get("status") in ("same", "improved") for t in tasks)


def _finish(store, ledger, journal: Journal, state: dict, base: dict, files: dict,
            negatives: list[tuple[str, dict]]) -> None:
    """Bookkeeping after the commit point; every step is idempotent, so a resume may repeat it."""
    write_negatives(store, ledger, negatives)
    if files != base:
        _sync(store, base, files)
    journal.clear()


def _sync(store, base: dict, files: dict) -> None:
    """Bring the working tree to the published files, touching only the paths this release changed (their
    unpublished edits were refused before publishing, except pattern memory, which the fold already includes)."""
    store.sync_worktree(base, files)


def _attribution(files: dict, ops: list[Op], limit: int) -> dict:
    """{bullet id: candidate files without that new bullet}, for the gate's leave-one-out utility."""
    from .blocks import parse

    if limit <= 0:
        return {}
    adds = [o for o in ops if o.op == "add" and o.surface in ("notes", "block")][:limit]
    out = {}
    for o in adds:
        text = files[o.path].data.decode("utf-8")
        block = parse(text, source=o.path)
        if block is None or not block.remove(o.bullet_id):
            continue
        ablated = dict(files)
        ablated[o.path] = Entry(block.render().encode("utf-8"), files[o.path].mode)
        out[o.bullet_id] = ablated
    return out


def _resume(store, ledger, journal: Journal, state: dict, opts: Options) -> Outcome | None:
    releases = store.releases()
    done = next((r for r in reversed(releases) if r.meta.get("evolve_id") == state.get("evolve_id")), None)
    out = Outcome("published", resumed=True, evolve_id=state.get("evolve_id"), reflect=state.get("reflect"),
                  pending=state.get("pending"), blocked=state.get("blocked") or [], diff=state.get("diff") or [])
    if done is not None:
        base = store.files_of(store.find(state["base_release_id"]))
        verdict = state.get("verdict") or {}
        if verdict.get("decision") not in (None, "publish"):
            out.status = "rejected"
        _finish(store, ledger, journal, state, base, store.files_of(done), [])
        out.release, out.evidence = done.to_json(), list(done.evidence)
        out.ops = list(done.meta.get("bullets") or [])
        out.verdict = state.get("verdict")
        return out
    head = store.head()
    if head is None or head.release_id != state.get("base_release_id"):
        journal.clear()  # the head moved: the plan is stale, start over
        return None
    return _continue(store, ledger, journal, state, opts, out)


# --------------------------------------------------------------------------------------------- proposals


def proposals_dir(store) -> Path:
    d = evolve_dir(store) / "proposals"
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_proposal(store, head, memory: PatternMemory, ops: list[Op], contradictions: list[Contradiction],
                   blocked: list[Blocked], *, mode: str, evidence: list[str]) -> dict:
    body = {"base_release_id": head.release_id, "ops": [o.to_json() for o in ops],
            "contradictions": [c.to_json() for c in contradictions], "memory_sha256": _sha(memory.dumps())}
    pid = "prop_" + _sha(canonical(body))[:12]
    path = proposals_dir(store) / f"{pid}.json"
    if path.exists():
        existing = json.loads(path.read_text())
        if existing.get("status") == "pending":
            return _proposal_summary(existing)
    keys = {o.key for o in ops if o.key} | {c.key for c in contradictions}
    for other in list_proposals(store):
        if other["status"] == "pending" and keys & set(other["keys"]):
            other["status"] = "superseded"
            other["superseded_by"] = pid
            _save_proposal(store, other)
    prop = {"version": 1, "proposal_id": pid, "status": "pending", "mode": mode,
            "created_at": format_time(utc_now()), **body, "memory": memory.dumps().decode("utf-8"),
            "blocked": [b.to_json() for b in blocked], "evidence": evidence, "keys": sorted(keys),
            "diff": diff_lines(ops, contradictions, blocked)}
    ledger = store.ledger()
    with ledger:
        rec = ledger.append("proposal", {k: v for k, v in prop.items() if k != "memory"},
                            release_id=head.release_id, content_id=head.content_id, record_id=f"prop-{pid}")
    prop["record_id"] = rec.record_id
    _save_proposal(store, prop)
    return _proposal_summary(prop)


def _save_proposal(store, prop: dict) -> None:
    write_atomic(proposals_dir(store) / f"{prop['proposal_id']}.json", canonical(prop) + b"\n")


def _proposal_summary(prop: dict) -> dict:
    return {k: v for k, v in prop.items() if k != "memory"}


def list_proposals(store, status: str | None = None) -> list[dict]:
    out = []
    for path in sorted(proposals_dir(store).glob("prop_*.json")):
        try:
            prop = json.loads(path.read_text())
        except ValueError:
            continue
        if status is None or prop.get("status") == status:
            out.append(prop)
    return sorted(out, key=lambda p: (p.get("created_at", ""), p["proposal_id"]))


def find_proposal(store, ref: str) -> dict | None:
    props = list_proposals(store)
    exact = [p for p in props if p["proposal_id"] == ref]
    if exact:
        return exact[0]
    hits = [p for p in props if p["proposal_id"].startswith(ref) or p["proposal_id"].startswith("prop_" + ref)]
    if len(hits) > 1:
        raise NotFound(f"proposal id prefix '{ref}' is ambiguous ({len(hits)} proposals match)")
    return hits[0] if hits and len(ref) >= 4 else None


def _current_memory(store, config, base: dict, prop: dict | None) -> PatternMemory:
    current = load_memory(store, config, base)
    if prop and prop.get("memory"):
        theirs = PatternMemory.loads(prop["memory"], f"proposal {prop['proposal_id']}")
        if theirs.through_seq >= current.through_seq:
            return theirs
    return current


def promote(store, ref: str, opts: Options) -> Outcome:
    """A human publishes a pending proposal (or one key of it, or one pattern one surface up)."""
    directory = evolve_dir(store)
    lock = _lock(directory)
    try:
        return _promote(store, ref, opts)
    finally:
        lock.release()


def _promote(store, ref: str, opts: Options) -> Outcome:
    head = store.require_head()
    config = store.config_of(head)
    base = store.files_of(head)
    prop = find_proposal(store, ref)
    by_key = False  # REF names one key of a pending proposal, not the proposal
    if prop is not None:
        if prop["status"] != "pending":
            raise ConflictError(f"proposal {prop['proposal_id']} is {prop['status']}, not pending")
    else:
        pending = [p for p in list_proposals(store, "pending") if ref in p["keys"] or
                   any(o["bullet_id"] == ref.removeprefix("reef:") for o in p["ops"]) or
                   any(c["bullet_id"] == ref.removeprefix("reef:") for c in p["contradictions"])]
        if pending:
            prop, by_key = pending[-1], True
    memory = _current_memory(store, config, base, prop)
    only_keys: set[str] | None = None
    if by_key:
        pat = memory.resolve(ref)
        only_keys = {pat.key if pat else ref}
    if prop is not None:
        ops = [Op.from_json(o) for o in prop["ops"]]
        contradictions = [Contradiction.from_json(c) for c in prop["contradictions"]]
        if only_keys is not None:
            groups = {o.group for o in ops if o.key in only_keys}
            ops = [o for o in ops if o.group in groups]
            contradictions = [c for c in contradictions if c.key in only_keys]
        for c in contradictions:
            ops += c.resolution(_zone(store, config, c.path))
        source = prop["proposal_id"]
    else:
        pat = memory.resolve(ref)
        if pat is None:
            raise NotFound(f"'{ref}' is neither a pending proposal nor a pattern key or bullet id in pattern memory")
        ops, contradictions = _human_promotion(store, config, base, memory, pat), []
        source = f"pattern {pat.key}"
    keys = {o.key for o in ops if o.key}
    for k in keys:
        memory.lift(k)
    files, applied = apply_ops(with_memory(base, config, memory), ops, config=config, memory=memory,
                               root=store.project.root)
    _dirty_conflict(store, {o.path for o in applied})
    out = Outcome("nothing", ops=[o.to_json() for o in applied], evidence=_evidence(memory, keys))
    ledger = store.ledger()
    with ledger:
        release = None
        if files != base:
            res = store.publish(reason=f"promote {source}: " + _reason(applied),
                                operation="promote", files=files, expected_head=head.release_id,
                                evidence=tuple(out.evidence),
                                meta={"bullets": [o.to_json() for o in applied], "patterns": sorted(keys),
                                      "by": "human", "gated": False, "proposal_id": prop["proposal_id"] if prop else None})
            release = res.release
            _sync(store, base, files)
        rid, cid = (release.release_id, release.content_id) if release else (head.release_id, head.content_id)
        from .ledger import NewRecord

        ledger.append_many([NewRecord("promotion", {"key": k, "human": True, "proposal_id": prop["proposal_id"]
                                                    if prop else None, "release_id": rid}, rid, cid,
                                      f"promo-{rid}-{_sha(k)[:16]}") for k in sorted(keys)])
        negatives = []
        for c in contradictions:
            if c.existing_key:
                negatives.append((f"neg-promo-{_sha(c.existing_key + (prop or {}).get('proposal_id', ''))[:20]}",
                                  _negative_payload(c.existing_key, c.existing_text, "", "human",
                                                    f"a human chose contradicting reef:{c.bullet_id}",
                                                    reearn_needed(config, c.surface), bullet_id=c.existing_id)))
        out.negatives = write_negatives(store, ledger, negatives)
    if prop is not None:
        remaining_keys = set(prop["keys"]) - keys
        prop["status"] = "promoted" if not remaining_keys or only_keys is None else "pending"
        prop.setdefault("promoted", []).append({"keys": sorted(keys), "release_id": release.release_id if release
                                                else None, "at": format_time(utc_now())})
        if only_keys is not None and remaining_keys:
            prop["ops"] = [o for o in prop["ops"] if o.get("key") not in keys and
                           not any(o.get("group") == a.group for a in applied)]
            prop["contradictions"] = [c for c in prop["contradictions"] if c["key"] not in keys]
            prop["keys"] = sorted(remaining_keys)
        _save_proposal(store, prop)
        out.pending = _proposal_summary(prop)
    if release is not None:
        out.status, out.release = "published", release.to_json()
    out.diff = diff_lines(applied)
    return out


def _human_promotion(store, config, base, memory: PatternMemory, pat) -> list[Op]:
    """Ops that move `pat` one surface above where it lives now (a human overrides the count)."""
    surfaces = Surfaces(with_memory(base, config, memory), config)
    home = surfaces.home(pat.id)
    current = home.surface if home else "memory"
    ladder = [s for _, s in config.tiers if RANK[s] > RANK[current]]
    if not ladder:
        raise InvalidInput(f"pattern {pat.key} is already on the highest surface ({current})")
    target = ladder[0]
    text = home.text if home else pat.text
    path = skill_path(config, pat, text) if target == "skill" else config.surfaces[target]
    zone = _zone(store, config, path)
    ops = [Op("add", target, path, pat.id, pat.key, text, f"promoted by a human (count {pat.count})", zone,
              dict((s, t) for t, s in config.tiers).get(target), None, pat.key)]
    for w in surfaces.by_id.get(pat.id, []):
        if RANK[w.surface] < RANK[target]:
            ops.append(Op("remove", w.surface, w.path, pat.id, pat.key, w.text, f"promoted to {target}",
                          _zone(store, config, w.path), None, None, pat.key))
    return ops


def reject(store, ref: str, reason: str = "") -> Outcome:
    prop = find_proposal(store, ref)
    if prop is None:
        raise NotFound(f"no proposal '{ref}' (see 'reef harness proposals')")
    if prop["status"] != "pending":
        raise ConflictError(f"proposal {prop['proposal_id']} is {prop['status']}, not pending")
    head = store.require_head()
    config = store.config_of(head)
    items = []
    for o in prop["ops"]:
        if o["op"] == "add" and o.get("key"):
            items.append((f"neg-rej-{prop['proposal_id']}-{_sha(o['key'])[:16]}", _negative_payload(
                o["key"], o["text"], "", "human", reason or f"proposal {prop['proposal_id']} rejected by a human",
                reearn_needed(config, o["surface"]), bullet_id=o["bullet_id"], proposal_id=prop["proposal_id"])))
    for c in prop["contradictions"]:
        items.append((f"neg-rej-{prop['proposal_id']}-{_sha(c['key'])[:16]}", _negative_payload(
            c["key"], c["text"], "", "human", reason or f"contradiction in {prop['proposal_id']} rejected by a human",
            reearn_needed(config, c["surface"]), bullet_id=c["bullet_id"], proposal_id=prop["proposal_id"])))
    ledger = store.ledger()
    with ledger:
        negatives = write_negatives(store, ledger, items)
    prop["status"] = "rejected"
    prop["rejected_at"] = format_time(utc_now())
    prop["reason"] = reason
    _save_proposal(store, prop)
    return Outcome("rejected", pending=_proposal_summary(prop), negatives=negatives)


def demote(store, ref: str, reason: str, opts: Options) -> Outcome:
    directory = evolve_dir(store)
    lock = _lock(directory)
    try:
        return _demote(store, ref, reason, opts)
    finally:
        lock.release()


def _demote(store, ref: str, reason: str, opts: Options) -> Outcome:
    head = store.require_head()
    config = store.config_of(head)
    base = store.files_of(head)
    memory = load_memory(store, config, base)
    pat = memory.resolve(ref)
    bid = pat.id if pat else ref.removeprefix("reef:")
    surfaces = Surfaces(with_memory(base, config, memory), config)
    where = surfaces.by_id.get(bid, [])
    if pat is None and not where:
        raise NotFound(f"'{ref}' is neither a pattern key nor a bullet id reef knows (see 'reef harness patterns')")
    key = pat.key if pat else None
    if pat is not None and not where and pat.count == 0 and pat.suppressed is not None:
        return Outcome("nothing")  # already demoted: nothing to remove, and its suppression already holds
    ops = [Op("remove", w.surface, w.path, bid, key, w.text, "demoted by a human", _zone(store, config, w.path),
              None, None, key or bid) for w in where]
    top = max((w.surface for w in where), key=lambda s: RANK[s], default=None)
    ledger = store.ledger()
    with ledger:
        negatives = []
        if key is not None:
            surface = top or tier_of(config, pat.count)[1]
            negatives = write_negatives(store, ledger, [(f"neg-demote-{head.release_id}-{_sha(key)[:16]}",
                                                         _negative_payload(key, pat.text, pat.polarity, "human",
                                                                           reason or "demoted by a human",
                                                                           reearn_needed(config, surface),
                                                                           bullet_id=bid, reset=True))])
            result = _reflect(store, ledger, config, memory, Options(backend="builtin", environ=opts.environ))
            if result.changed:
                _reflect_records(store, ledger, result, memory, config)
        files, applied = apply_ops(with_memory(base, config, memory), ops, config=config, memory=memory,
                                   root=store.project.root)
        _dirty_conflict(store, {o.path for o in applied})
        out = Outcome("nothing", ops=[o.to_json() for o in applied], negatives=negatives, diff=diff_lines(applied))
        if files != base:
            res = store.publish(reason=f"demote {key or bid}: " + _reason(applied),
                                operation="evolve", files=files, expected_head=head.release_id,
                                evidence=tuple(n["record_id"] for n in negatives),
                                meta={"action": "demote", "by": "human", "bullets": [o.to_json() for o in applied],
                                      "patterns": [key] if key else []})
            _sync(store, base, files)
            out.status, out.release = "published", res.release.to_json()
    return out
