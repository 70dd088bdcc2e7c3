"""`reef harness reflect` and `reef harness evolve`: reflect → plan → guard → decide (gate, admission) → publish →
record, each step a function of the typed journal (journal.py) so a killed evolve resumes where it stopped."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..curate import Blocked, Op, apply_ops, diff_lines, plan as curate_plan, reearn_needed, tier_of
from ..errors import ConflictError, InvalidInput, PolicyError
from ..patterns import PatternMemory
from ..project import write_atomic
from ..releases import canonical
from . import admission as adm
from .common import (Options, Outcome, check_memory_size, dirty_conflict, evidence_of, evolve_dir, fault, load_memory,
                     lock, memory_path, negative_payload, reason_of, record_rollback_negatives, reflect_into,
                     reflect_records, sha, with_memory, write_negatives, zone_of)
from .journal import EvolveJournal, JournalFile
from .proposals import write_proposal
from .publish import publish_gated
from .worktree import expected_bytes, made_read_only

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
    from ..zones import check_write

    head = store.require_head()
    config = store.config_of(head)
    ledger = store.checked_ledger()
    with ledger:
        path = memory_path(config)
        target = store.project.root / path
        check_write(store.project.root, config.zone_map(), path)  # the zone guard names a symlink out of the harness
        check_memory_size(target)  # before the compare-and-swap read below hashes all of it
        seen = _file_state(target)  # read before load_memory: an edit in between is a (safe) conflict, not a loss
        if seen is not None and seen.startswith(_REFUSED):
            # a symlink, a FIFO, a directory: load_memory would fold into the head release's copy and the write
            # replace what is there (evolve refuses it the same way, before anything is paid for or recorded)
            raise InvalidInput(f"{seen[len(_REFUSED):]}; nothing was reflected — put the pattern memory back as a "
                               f"regular file (or move it away) and run 'reef harness reflect' again")
        if seen is not None and not opts.dry_run and made_read_only(target):
            raise InvalidInput(f"{target} is read-only; reef does not write through a file a user made read-only — "
                               f"make it writable (chmod u+w {path}) and run 'reef harness reflect' again (nothing "
                               f"was reflected)")
        negatives = [] if opts.dry_run else record_rollback_negatives(store, ledger, config)
        files = store.files_of(head)
        memory = load_memory(store, config, files)
        before = memory.dumps()
        result = reflect_into(store, ledger, config, memory, opts, files)  # a model backend: seconds, or minutes
        after = memory.dumps()
        written = False
        if after != before and not opts.dry_run:
            check_write(store.project.root, config.zone_map(), path)
            if _file_state(target) != seen:  # the compare-and-swap evolve does (worktree.write_tree), for one file
                raise ConflictError(
                    f"{path} changed while reef was reflecting into it (it no longer holds the bytes reflect read); "
                    f"reef left your edit as it is and recorded nothing, so the same records are still to reflect "
                    f"- run 'reef harness reflect' again to fold them into the file as it is now")
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, after)
            written = True
        if result.changed and not opts.dry_run:
            reflect_records(store, ledger, result, memory, config)
    return ReflectOutcome(result, written, path, negatives)


_REFUSED = "refused: "


def _file_state(path) -> str | None:
    """What reflect compares before replacing the memory file: sha256 of its bytes, None when absent, or the line
    read_nofollow refuses it with (a symlink, a directory: load_memory reads the head release's copy then)."""
    from ..durable import read_nofollow

    try:
        data = read_nofollow(path)
    except InvalidInput as exc:
        return f"{_REFUSED}{exc}"
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    return None if data is None else sha(data)


# --------------------------------------------------------------------------------------------- evolve


def _canary_tasks(files: dict, config) -> bool:
    try:
        from ..tasks import load_suite
    except ImportError:
        return False
    return bool(load_suite(files, config.gate.tasks).canary)


def _gate():
    try:
        from ..gate import gate_candidate
    except ImportError:  # the gate is optional at import time (a partial install); no gate means "not gated"
        return None
    return gate_candidate


def _zone_of_group(ops: list[Op]) -> str:
    zones = {o.zone for o in ops}
    return "evolvable" if "evolvable" in zones else "learned"


def evolve(store, opts: Options) -> Outcome:
    """One evolve step. A scenario bound to a recipe whose `publish` is `review` (recipes/harness-review.yaml) always
    proposes: nothing publishes until a human runs `reef harness promote`."""
    from ..recipes import load as load_recipe

    if not opts.review and not opts.dry_run and load_recipe(store.info().recipe).publish == "review":
        opts = replace(opts, review=True)
    directory = evolve_dir(store)
    held = lock(directory) if not opts.dry_run else None
    try:
        ledger = store.checked_ledger()
        with ledger:
            if not opts.dry_run:
                jf = JournalFile(directory)
                journal = jf.load()
                if journal is not None:
                    resumed = _resume(store, ledger, jf, journal, opts)
                    if resumed is not None:
                        return resumed
            if opts.branch and not opts.dry_run:
                from ..proposal_branch import refuse_existing_branch

                refuse_existing_branch(store, opts.branch)  # before the reflect and the gate are paid for
            return _plan(store, ledger, opts)
    finally:
        if held is not None:
            held.release()


def _plan(store, ledger, opts: Options) -> Outcome:
    """Reflect and plan; writes the `planned` journal and goes on (or stops at dry-run, review, nothing to do)."""
    head = store.require_head()
    config = store.config_of(head)
    base = store.files_of(head)
    negatives = [] if opts.dry_run else record_rollback_negatives(store, ledger, config)
    memory = load_memory(store, config, base)
    refl = reflect_into(store, ledger, config, memory, opts, base)
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
    evolve_id = "evo_" + sha(canonical({"base": head.release_id, "memory": sha(memory.dumps()),
                                        "plan": p.to_json()}))[:20]
    out.evolve_id = evolve_id
    blocked_neg = [(f"neg-{evolve_id}-{sha(b.key + b.path)[:16]}",
                    negative_payload(b.key, b.text, b.polarity, "guard", f"{b.kind}: {b.reason}",
                                     reearn_needed(config, tier_of(config, b.tier or 0)[1] if b.tier else None),
                                     path=b.path, evolve_id=evolve_id))
                   for b in p.blocked if b.negative]
    if opts.dry_run:
        out.status = "dry-run"
        out.ops = [o.to_json() for o in p.ops]
        out.gated = has_gate
        return out
    if not opts.review:  # before anything is written: a user's unpublished edit of a target stops the evolve
        dirty_conflict(store, {o.path for o in p.ops} | {c.path for c in p.contradictions})
    if refl.changed:
        reflect_records(store, ledger, refl, memory, config)
    out.negatives += write_negatives(store, ledger, blocked_neg)
    if opts.review:
        if not (p.ops or p.contradictions or mem_changed):
            return out
        prop = write_proposal(store, head, memory, p.ops, p.contradictions, p.blocked, mode="review",
                              evidence=evidence_of(memory, {o.key for o in p.ops if o.key} |
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
        trial = cand_ops + c.resolution(zone_of(store, config, c.path))
        try:
            apply_ops(with_memory(base, config, memory), trial, config=config, memory=memory, root=root)
        except (InvalidInput, PolicyError) as exc:
            out.blocked.append(Blocked(c.key, c.path, "budget" if "budget" in str(exc) else "frozen", str(exc),
                                       False, c.tier, c.text).to_json())
            continue
        cand_ops, kept = trial, kept + [c]
    if pending_ops or pending_contra:
        out.pending = write_proposal(store, head, memory, pending_ops, pending_contra, [], mode="needs-human",
                                     evidence=evidence_of(memory, {o.key for o in pending_ops if o.key} |
                                                          {c.key for c in pending_contra}))
    if not cand_ops and not mem_changed:
        if out.pending:
            out.status = "pending"
        return out
    # final candidate: budgets may evict again when contradiction resolutions join; apply_ops reports what it did
    cand_files, applied = apply_ops(with_memory(base, config, memory), cand_ops, config=config, memory=memory,
                                    root=root)
    targets = {rel for rel in set(base) | set(cand_files) if base.get(rel) != cand_files.get(rel)}
    journal = EvolveJournal(
        evolve_id=evolve_id, base_release_id=head.release_id, memory=memory.dumps().decode("utf-8"),
        ops=tuple(applied), contradictions=tuple(kept), gated=bool(has_gate and applied),
        expected=expected_bytes(root, targets | {memory_path(config)}), warnings=tuple(out.warnings),
        pending=out.pending, reflect=out.reflect, expired=tuple(out.expired), blocked=tuple(out.blocked),
        diff=tuple(out.diff), branch=None if opts.branch is None else opts.branch or f"reef/evolve-{evolve_id[-8:]}")
    jf = JournalFile(evolve_dir(store))
    jf.save(journal)
    fault("planned")
    return _continue(store, ledger, jf, journal, opts, out)


# --------------------------------------------------------------------------------------------- the candidate


@dataclass(frozen=True)
class Candidate:
    """Everything a journal's decision is computed from, rebuilt byte for byte from the journal."""

    head: object
    config: object
    base: dict
    memory: PatternMemory

    @classmethod
    def of(cls, store, journal: EvolveJournal) -> "Candidate":
        head = store.find(journal.base_release_id)
        return cls(head, store.config_of(head), store.files_of(head),
                   PatternMemory.loads(journal.memory, "evolve journal"))

    def files(self, store, ops) -> dict:
        files, _ = apply_ops(with_memory(self.base, self.config, self.memory), list(ops), config=self.config,
                             memory=self.memory, root=store.project.root)
        return files


def _published_ops(journal: EvolveJournal) -> list[Op]:
    """The operations the decision lets through: all, none (a rejection), or the admitted bullets' groups."""
    verdict = journal.verdict
    if verdict is not None and verdict.get("decision") != "publish" and "accepted_as" not in verdict:
        return []
    dropped = _dropped_groups(journal)
    return [o for o in journal.ops if o.group not in dropped]


def _dropped_groups(journal: EvolveJournal) -> set[str]:
    a = journal.admission or {}
    gone = {d["bullet_id"] for d in a.get("dropped") or ()} | set(a.get("deferred") or ())
    return {o.group for o in journal.ops if o.op == "add" and o.bullet_id in gone}


def _non_regressing(verdict: dict) -> bool:
    tasks = verdict.get("per_task") or []
    return bool(tasks) and all(t.get("status") in ("same", "improved") for t in tasks)


# --------------------------------------------------------------------------------------------- decide


def _proposal_record(store, ledger, journal: EvolveJournal) -> None:
    """The plan, on the base release it was made over (so a resume after the publish resends the same record)."""
    base = store.find(journal.base_release_id)
    rid, cid = base.release_id, base.content_id
    ledger.append("proposal", {"evolve_id": journal.evolve_id, "base_release_id": journal.base_release_id,
                               "ops": [o.to_json() for o in journal.ops],
                               "contradictions": [c.to_json() for c in journal.contradictions],
                               "blocked": list(journal.blocked), "gated": journal.gated,
                               "memory_sha256": sha(journal.memory)},
                  release_id=rid, content_id=cid, record_id=f"prop-{journal.evolve_id}")


def decide(store, ledger, jf: JournalFile, journal: EvolveJournal, opts: Options) -> EvolveJournal:
    """The gate's verdict on the candidate, each new bullet's admission, and (when admission dropped some) the
    verdict on the admitted subset; saved as phase `gated`. Ungated candidates pass through unchanged."""
    if not journal.gated or journal.verdict is not None:
        return journal
    cand = Candidate.of(store, journal)
    files = cand.files(store, journal.ops)
    gate = _gate()
    adds = adm.new_adds(journal.ops, cand.base, cand.config)
    limit = max(0, opts.attribute)
    attribute = adm.ablations(with_memory(cand.base, cand.config, cand.memory), list(journal.ops), adds,
                              config=cand.config, memory=cand.memory, root=store.project.root, limit=limit)
    gate_dir = evolve_dir(store) / journal.evolve_id
    v = gate(store, files, ledger=ledger, baseline=cand.head, workers=opts.workers, attribute=attribute or None,
             progress=opts.progress, journal_dir=gate_dir / "gate", environ=opts.environ)
    verdict = v.to_json() if v is not None else {"decision": "publish", "reason": "no canary tasks"}
    admission = None
    if adds and limit > 0 and v is not None:
        a = adm.admit(adds, verdict, limit=limit)
        admission = {**a.to_json(), "joint": {k: verdict.get(k) for k in ("decision", "reason", "record_id")}}
        if a.drops_groups:
            kept = adm.without_groups(journal.ops, _dropped_groups(replace(journal, admission=admission)))
            if kept:
                subset = cand.files(store, kept)
                v2 = gate(store, subset, ledger=ledger, baseline=cand.head, workers=opts.workers, attribute=None,
                          progress=opts.progress, journal_dir=gate_dir / "gate-admitted", environ=opts.environ)
                if v2 is not None:
                    verdict = v2.to_json()
            else:
                verdict = {**verdict, "decision": "reject",
                           "reason": "no new bullet paid its way: " + verdict.get("reason", "")}
    journal = jf.save(journal.advance("gated", admission=admission,
                                      verdict=_accepted(journal, verdict, admission, cand.base, cand.config)))
    fault("gated")
    return journal


def _accepted(journal: EvolveJournal, verdict: dict, admission: dict | None, base: dict, config) -> dict:
    """A candidate that only moves or removes bullets the harness already holds is neutral by intent: "no canary
    task got worse" is its bar — requiring an improvement would refuse every promotion up the ladder."""
    if verdict.get("decision") == "publish":
        return verdict
    dropped = _dropped_groups(replace(journal, admission=admission))
    new = [o for o in adm.new_adds(journal.ops, base, config) if o.group not in dropped]
    if new or not _non_regressing(verdict):
        return verdict
    return {**verdict, "accepted_as": "non-regressing move"}


# --------------------------------------------------------------------------------------------- publish / record


def publish(store, jf: JournalFile, journal: EvolveJournal) -> tuple[EvolveJournal, object | None]:
    """Write the working tree and publish the release the decision allows (phases `writing` → `published`)."""
    cand = Candidate.of(store, journal)
    ops = _published_ops(journal)
    files = cand.files(store, ops)
    if files == cand.base:
        return journal, None
    verdict = journal.verdict
    rejected = verdict is not None and verdict.get("decision") != "publish" and "accepted_as" not in verdict
    evidence = evidence_of(cand.memory, {o.key for o in ops if o.key})
    for rid in ((journal.admission or {}).get("joint") or {}).get("record_id"), (verdict or {}).get("record_id"):
        if rid and rid not in evidence:
            evidence.append(rid)
    meta = {"evolve_id": journal.evolve_id, "bullets": [o.to_json() for o in ops],
            "patterns": sorted({o.key for o in ops if o.key}), "gated": journal.gated}
    if verdict is not None and "policy" in verdict:
        meta["gate"] = {k: verdict.get(k) for k in ("decision", "policy", "record_id", "interval", "episodes_spent",
                                                    "reason", "accepted_as") if k in verdict}
    if journal.admission:
        meta["admission"] = {k: journal.admission[k] for k in ("admitted", "dropped", "deferred")}
    if journal.warnings:
        meta["warning"] = journal.warnings[0]
    extra = "gate rejected the bullets" if rejected else (
        "not gated" if ops and not journal.gated else (verdict or {}).get("accepted_as", ""))
    res = publish_gated(store, head=cand.head, base=cand.base, files=files, expected=journal.expected,
                        reason="evolve: " + reason_of(ops, extra), operation="evolve", evidence=tuple(evidence),
                        meta=meta, verdict=verdict if journal.gated and not rejected else None,
                        before_write=lambda: jf.save(journal.advance("writing")))
    journal = jf.save(journal.advance("published", release_id=res.release.release_id))
    fault("published")
    return journal, res.release


def _negatives(journal: EvolveJournal, config, memory: PatternMemory, base: dict) -> list[tuple[str, dict]]:
    """Negative evidence the decision implies: every new bullet of a rejected candidate, every bullet admission
    dropped, every contradiction loser. Deterministic ids, so a resume resends the same records."""
    verdict = journal.verdict
    out: list[tuple[str, dict]] = []

    def neg(o: Op, reason: str) -> None:
        p = memory.patterns.get(o.key)
        out.append((f"neg-{journal.evolve_id}-{sha(o.key)[:16]}", negative_payload(
            o.key, o.text, p.polarity if p else "", "gate", reason, reearn_needed(config, o.surface),
            bullet_id=o.bullet_id, evolve_id=journal.evolve_id,
            gate_record_id=((journal.admission or {}).get("joint") or verdict or {}).get("record_id"))))

    published = _published_ops(journal)
    kept = {o.bullet_id for o in published}
    a = journal.admission or {}
    dropped = {d["bullet_id"]: d for d in a.get("dropped") or ()}
    deferred = set(a.get("deferred") or ())
    rejected = verdict is not None and verdict.get("decision") != "publish" and "accepted_as" not in verdict
    adds = adm.new_adds(journal.ops, base, config)
    if rejected and not adds:
        adds = [o for o in journal.ops if o.op == "add"]
    for o in adds:
        if not o.key or o.bullet_id in kept or o.bullet_id in deferred:
            continue
        if o.bullet_id in dropped:
            neg(o, dropped[o.bullet_id]["reason"])
        elif rejected:
            neg(o, f"the canary gate rejected it: {verdict.get('reason', '')}")
    for c in journal.contradictions:
        if c.existing_key and c.bullet_id in kept:
            out.append((f"neg-{journal.evolve_id}-{sha(c.existing_key)[:16]}", negative_payload(
                c.existing_key, c.existing_text, "", "contradiction",
                f"lost to contradicting reef:{c.bullet_id} {c.text!r}", reearn_needed(config, c.surface),
                bullet_id=c.existing_id, evolve_id=journal.evolve_id)))
    return out


def record(store, ledger, jf: JournalFile, journal: EvolveJournal) -> list[dict]:
    """Bookkeeping after the commit point; idempotent, so a resume may repeat it."""
    cand = Candidate.of(store, journal)
    items = _negatives(journal, cand.config, cand.memory, cand.base)
    write_negatives(store, ledger, items)
    jf.clear()
    return [{"record_id": rid, **p} for rid, p in items]


def _continue(store, ledger, jf: JournalFile, journal: EvolveJournal, opts: Options, out: Outcome) -> Outcome:
    _proposal_record(store, ledger, journal)  # idempotent: a resume resends the same record id
    journal = decide(store, ledger, jf, journal, opts)
    if journal.branch is not None and journal.phase in ("planned", "gated"):
        return _to_branch(store, ledger, jf, journal, out)  # the final step writes a branch, not the tree
    if journal.phase in ("planned", "gated", "writing"):
        journal, release = publish(store, jf, journal)
    else:
        release = store.find(journal.release_id)
    out.negatives += record(store, ledger, jf, journal)
    return _outcome(journal, release, out)


def _to_branch(store, ledger, jf: JournalFile, journal: EvolveJournal, out: Outcome) -> Outcome:
    """`--branch`: the allowed candidate as a commit on a branch of the user's repository (proposal_branch.py);
    the working tree and the release chain stay as they are until the merged branch is published from Git."""
    from ..proposal_branch import describe, write_branch

    cand = Candidate.of(store, journal)
    ops = _published_ops(journal)
    files = cand.files(store, ops)
    res = None
    verdict = journal.verdict
    rejected = verdict is not None and verdict.get("decision") != "publish" and "accepted_as" not in verdict
    if files != cand.base and not rejected:
        # The branch first, then the bookkeeping that clears the journal: a branch that cannot be written (or a
        # kill before it is) leaves the journal, and the resume writes it (write_branch knows its own commit).
        title, body = describe([o.to_json() for o in ops], cand.memory, journal.verdict, ledger,
                               evolve_id=journal.evolve_id, scenario=store.scenario,
                               base_release=journal.base_release_id, gated=journal.gated)
        res = write_branch(store, cand.base, files, branch=journal.branch, title=title, body=body,
                           evolve_id=journal.evolve_id, base_release=journal.base_release_id)
        fault("branched")
    out.negatives += record(store, ledger, jf, journal)
    out = _outcome(journal, None, out)
    if res is not None:
        out.status, out.branch = "branch", {**res.to_json(), "title": title, "body": body}
    return out


def _outcome(journal: EvolveJournal, release, out: Outcome) -> Outcome:
    verdict = journal.verdict
    ops = _published_ops(journal)
    rejected = verdict is not None and verdict.get("decision") != "publish" and "accepted_as" not in verdict
    out.verdict, out.gated, out.evolve_id = verdict, journal.gated, journal.evolve_id
    out.admission = journal.admission
    out.ops = [o.to_json() for o in ops]
    out.warnings = list(journal.warnings) if ops and not journal.gated else []
    if verdict is not None and verdict.get("accepted_as"):
        out.warnings.append("the gate saw no improvement, but this release only moves or removes existing bullets "
                            "and no canary task got worse")
    dropped = (journal.admission or {}).get("dropped") or ()
    for d in dropped:
        out.warnings.append(f"reef:{d['bullet_id']} was not published: {d['reason']}")
    deferred = (journal.admission or {}).get("deferred") or ()
    if deferred:
        out.warnings.append(f"{len(deferred)} new bullet(s) beyond --attribute wait for the next evolve: "
                            + ", ".join(f"reef:{b}" for b in deferred))
    if release is not None:
        out.release = release.to_json()
        out.evidence = list(release.evidence)
        out.status = "rejected" if rejected else "published"
    else:
        out.status = "rejected" if rejected else ("pending" if out.pending else "nothing")
    return out


def in_flight(store) -> str | None:
    """One sentence about an interrupted evolve, for `reef status` to show before it advises a publish (in phase
    `writing` the working tree already holds part of the evolve's files; `reef harness evolve` finishes it)."""
    journal = JournalFile(store.dir / "evolve").load()
    if journal is None:
        return None
    return (f"evolve {journal.evolve_id} was interrupted in phase {journal.phase}; run 'reef harness evolve' to "
            "finish it" + (" (the working tree already holds some of its files)" if journal.phase == "writing"
                           else ""))


def _resume(store, ledger, jf: JournalFile, journal: EvolveJournal, opts: Options) -> Outcome | None:
    out = Outcome("published", resumed=True, evolve_id=journal.evolve_id, reflect=journal.reflect,
                  pending=journal.pending, blocked=list(journal.blocked), diff=list(journal.diff))
    done = next((r for r in reversed(store.releases()) if r.meta.get("evolve_id") == journal.evolve_id), None)
    if done is not None:
        if journal.phase != "published":
            journal = journal.advance("published", release_id=done.release_id)
        return _continue(store, ledger, jf, journal, opts, out)
    head = store.head()
    if head is None or head.release_id != journal.base_release_id:
        jf.clear()  # the head moved: the plan is stale, start over
        return None
    _check_mode(journal, opts)
    return _continue(store, ledger, jf, journal, opts, out)


def _check_mode(journal: EvolveJournal, opts: Options) -> None:
    """A resume finishes the interrupted evolve the way it was started: one begun with `--branch` goes to its
    branch even when resumed without the flag (never to the release chain), and a resume that asks for what the
    interrupted run was not doing is refused, so no flag silently turns a branch proposal into a release or back."""
    where = f"an interrupted evolve ({journal.evolve_id}, phase '{journal.phase}')"
    if journal.branch is None and opts.branch is not None:
        raise ConflictError(f"{where} was publishing to the release chain, not to a branch; finish it with "
                            "'reef harness evolve' (without --branch), then run --branch again")
    if journal.branch is not None and opts.branch and opts.branch != journal.branch:
        raise ConflictError(f"{where} was proposing on branch '{journal.branch}', not '{opts.branch}'; resume it "
                            f"with 'reef harness evolve --branch {journal.branch}' (or without --branch), then "
                            f"run --branch {opts.branch} again")


__all__ = ["ReflectOutcome", "run_reflect", "evolve", "in_flight", "decide", "publish", "record", "Candidate"]
