"""`reef merge`: join a diverged remote chain into one candidate, gated like any candidate.

Per path, a three-way choice against the merge base: a side that left a path unchanged takes the other's version.
Where both changed a file, its learned block is the union by bullet id, starting from the remote's block (which is
also the gate's baseline): bullets only we added join it unless they would break the block's budget or contradict
a bullet already there (same id with other words, or opposite polarity over similar terms) — those are held for a
human and listed, never dropped silently. A bullet either side removed since the base (expiry, demotion, a gate's
rollback) stays removed: the union is of additions, so a retired rule is not resurrected. Pattern memory is the
union by pattern key (the better-evidenced copy wins; the high-water mark is ours, since ledgers stay local). Any
other both-sided change — the human's own text outside a block, harness.yaml, a skill's body — stops the merge
(exit 3) naming the paths. The merged release's commit has two parents: the remote head first (its chain is the
line everyone shares) and our head second, so after `reef push` the other clone fast-forwards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .errors import ConflictError, NotFound

PUBLISH = "publish"


@dataclass
class MergeOutcome:
    scenario: str
    remote: str
    decision: str  # published | rejected | held
    release_id: str | None = None
    added: list[str] = field(default_factory=list)  # "path reef:id"
    held: list[str] = field(default_factory=list)
    verdict: dict | None = None
    exit_code: int = 0

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "remote": self.remote, "decision": self.decision,
                "release_id": self.release_id, "added": self.added, "held": self.held, "verdict": self.verdict}

    def lines(self) -> list[str]:
        out = [f"merge {self.remote} into scenario {self.scenario}: {self.decision}"
               + (f" as {self.release_id}" if self.release_id else "")]
        out += [f"  + {a}" for a in self.added]
        out += [f"  held for a human: {h}" for h in self.held]
        if self.verdict:
            v = self.verdict
            out.append(f"  gate: {v.get('decision')} — {v.get('reason', '')}")
        return out


def _text(entry) -> str | None:
    if entry is None:
        return None
    try:
        return entry.data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def merge_files(base: dict, ours: dict, theirs: dict, config) -> tuple[dict, list[str], list[str], list[str]]:
    """(merged files, bullets added "path reef:id", held "reason", conflicting paths)."""
    from .blocks import BudgetExceeded, parse
    from .gitstore import Entry
    from .patterns import polarity_of, similarity, terms_of

    memory_path = config.surfaces.get("memory")
    out: dict = {}
    added: list[str] = []
    held: list[str] = []
    conflicts: list[str] = []
    for rel in sorted(set(base) | set(ours) | set(theirs)):
        b, o, t = base.get(rel), ours.get(rel), theirs.get(rel)
        if o == t or o == b:
            pick = t
        elif t == b:
            pick = o
        elif rel == memory_path and o is not None and t is not None:
            pick = Entry(_merge_memory(b, o, t), t.mode)
        else:
            bt, ot, tt = _text(b), _text(o), _text(t)
            ob = parse(ot, source=rel) if ot is not None else None
            tb = parse(tt, source=rel) if tt is not None else None
            if ob is None or tb is None or ob._prefix != tb._prefix or ob._suffix != tb._suffix:
                conflicts.append(rel)
                continue
            bb = parse(bt, source=rel) if bt is not None else None
            base_ids = {x.id for x in bb.bullets} if bb is not None else set()
            theirs_ids = {x.id: x for x in tb.bullets}
            for bullet in ob.bullets:
                if bullet.id in theirs_ids:
                    if theirs_ids[bullet.id].text != bullet.text:
                        held.append(f"{rel} reef:{bullet.id}: reworded on both sides (kept the remote's wording; "
                                    f"ours was {bullet.text!r})")
                    continue
                if bullet.id in base_ids:
                    continue  # the remote removed it since the base: stays removed
                pol, terms = polarity_of(bullet.text), terms_of(bullet.text)
                clash = next((x for x in tb.bullets if polarity_of(x.text) != pol
                              and similarity(terms, terms_of(x.text)) >= config.reflector.similarity), None)
                if clash is not None:
                    held.append(f"{rel} reef:{bullet.id} {bullet.text!r} contradicts reef:{clash.id} "
                                f"{clash.text!r}")
                    continue
                try:
                    tb.add(bullet.id, bullet.text, max_bullets=config.max_bullets, max_chars=config.max_chars)
                except BudgetExceeded:
                    held.append(f"{rel} reef:{bullet.id} {bullet.text!r}: the block's budget "
                                f"({config.max_bullets} bullets, {config.max_chars} characters) is full")
                    continue
                added.append(f"{rel} reef:{bullet.id}")
            # bullets we removed since the base leave the union too
            for bullet in list(tb.bullets):
                if bullet.id in base_ids and ob.get(bullet.id) is None:
                    tb.remove(bullet.id)
            pick = Entry(tb.render().encode("utf-8"), t.mode)
        if pick is not None:
            out[rel] = pick
    return out, added, held, conflicts


def _merge_memory(b, o, t) -> bytes:
    from .patterns import PatternMemory

    ours = PatternMemory.loads(o.data, "memory (ours)")
    theirs = PatternMemory.loads(t.data, "memory (remote)")
    merged = PatternMemory.loads(t.data, "memory (remote)")
    merged.through_seq, merged.through_hash = ours.through_seq, ours.through_hash
    merged.extra = {**ours.extra, **theirs.extra}  # a key only ours has (a user's note) is not lost either
    for key, p in ours.patterns.items():
        other = theirs.patterns.get(key)
        if other is None or (p.count, p.last_seen or "") > (other.count, other.last_seen or ""):
            if other is not None:  # the remote's own keys on it (a teammate's note) stay, ours win a clash
                p.extra = {**other.extra, **p.extra}
            merged._index(p)
    return merged.dumps()


def merge_remote(store, remote: str, *, url: str | None = None, workers: int | None = None,
                 note=None) -> MergeOutcome:
    """Merge the remote's chain of this scenario; with `url`, fetched first, so "nothing to merge" and its advice
    are about the remote as it is now, not as the last pull or push saw it.

    The merge itself needs only the chain already fetched (the tracking ref a pull, push or earlier merge left):
    when the fetch fails (offline, the remote down or moved), that chain is merged and `note` says so — a stale
    one costs at most a refused `reef push` and another merge, never a release. Without `url`, nothing is fetched.
    Only when no chain was ever fetched does the merge need the remote, and the error says that in one line."""
    from .config import CONFIG_NAME, parse_config
    from .errors import StoreError
    from .gate import gate_candidate
    from .remote import _follow, chain_between, fetch, tracking_ref

    git = store.git
    ours_rel = store.require_head()
    unreachable = None
    if url is not None:
        try:
            fetch(store.project, remote, url)
        except StoreError as exc:
            unreachable = str(exc)
    theirs_commit = git.get_ref(tracking_ref(remote, store.scenario))
    if theirs_commit is None and unreachable is not None:
        raise StoreError(f"reef merge needs remote '{remote}': it cannot be reached ({unreachable}) and no chain of "
                         f"scenario '{store.scenario}' was fetched from it before; nothing was merged — retry when "
                         "it is reachable")
    if theirs_commit is None:
        raise NotFound(f"no chain of scenario '{store.scenario}' fetched from remote '{remote}'; run 'reef pull {remote}'")
    if unreachable is not None and note is not None:
        note(f"remote '{remote}' cannot be reached ({unreachable}); merging its chain as last fetched")
    if git.is_ancestor(theirs_commit, ours_rel.commit_id):
        raise ConflictError(f"nothing to merge: scenario '{store.scenario}' already holds remote '{remote}''s "
                            f"releases; run 'reef push {remote}'")
    if git.is_ancestor(ours_rel.commit_id, theirs_commit):
        raise ConflictError(f"nothing to merge: remote '{remote}' is ahead; run 'reef pull {remote}' to fast-forward")
    chain = chain_between(git, theirs_commit, None)
    theirs_rel = chain[-1]
    from .admission import check_incoming, own_bound

    known = {r.release_id for r in store.releases()}
    check_incoming(store, [r for r in chain if r.release_id not in known],
                   local=own_bound(store.files_of(ours_rel), f"your head release (step {ours_rel.step})"),
                   origin=f"from remote '{remote}'", done="nothing was merged")
    base_commit = git.merge_base(ours_rel.commit_id, theirs_commit)
    base = git.read_tree(git.commit_info(base_commit)[1]) if base_commit else {}
    ours, theirs = store.files_of(ours_rel), git.read_tree(theirs_rel.content_id)
    config = parse_config(theirs[CONFIG_NAME].data, source=f"{CONFIG_NAME} (remote)", validate=False)
    files, added, held, conflicts = merge_files(base, ours, theirs, config)
    if conflicts:
        # `reef pull` cannot help (the chains diverged): the merge goes through once our copy equals theirs
        ref = tracking_ref(remote, store.scenario)
        raise ConflictError(
            f"both sides changed {', '.join(conflicts[:5])} outside reef's learned blocks; reef will not choose — "
            f"take the remote's version of each (git --git-dir .reef/git show {ref}:{conflicts[0]} > {conflicts[0]}), "
            f"publish it, run 'reef merge {remote}' again, then re-apply your edit and publish"
        )
    out = MergeOutcome(store.scenario, remote, "held", added=added, held=held)
    verdict = gate_candidate(store, files, ledger=store.ledger(), baseline=theirs, workers=workers)
    gate_meta: dict = {"gated": False}
    if verdict is not None:
        out.verdict = {"decision": verdict.decision, "reason": verdict.reason, "record_id": verdict.record_id}
        if verdict.decision != PUBLISH:
            out.decision, out.exit_code = "rejected", 1
            return out
        gate_meta = verdict.release_meta()
    # The remote chain becomes ours (its line is shared); our releases live on as the merge's second parent and in
    # the set-aside log, never deleted.
    with store.lock():
        aside = store.dir / f"releases.premerge-{ours_rel.step}-{int(time.time())}.jsonl"
        store.log.path.rename(aside)
        from .durable import append_durable

        append_durable(store.dir / "pulled-releases", "".join(f"{r.release_id}\n" for r in chain).encode())
        for release in chain:
            store.log.append(release)
        git.set_ref(store.ref, theirs_commit)
    reason = f"merge remote '{remote}' (step {theirs_rel.step}) with local step {ours_rel.step}"
    if held:
        reason += f"; {len(held)} held for a human"
    res = store.publish(reason=reason, operation="merge", files=files, expected_head=theirs_rel.release_id,
                        evidence=tuple(x for x in (verdict.record_id if verdict else None,) if x),
                        meta={"merged_release_id": ours_rel.release_id, "merged_commit_id": ours_rel.commit_id,
                              "premerge_log": aside.name, "held": held, "gate": gate_meta},
                        extra_parents=(ours_rel.commit_id,), allow_empty=True)
    _follow(store, ours)
    out.decision, out.release_id = "published", res.release.release_id
    return out
