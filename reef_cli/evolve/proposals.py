"""Proposals waiting for a human, and the human verbs: promote, reject, demote.

A proposal (`evolve/proposals/prop_<12 hex>.json`) is written by `--review`, or for Evolvable edits and
contradictions without a gate. `promote` re-applies its operations on the *current* head (budgets, schema and the
zone guard run again; the gate does not — the human is the judge); `reject` and `demote` are negative evidence.
All publishing goes through `publish.publish_gated`, so the working tree and the release move together.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..curate import (RANK, Blocked, Contradiction, Op, Surfaces, apply_ops, diff_lines, reearn_needed, skill_path,
                      tier_of)
from ..errors import ConflictError, InvalidInput, NotFound
from ..patterns import PatternMemory
from ..durable import STATE_FILE_MODE, make_dirs
from ..project import write_atomic
from ..releases import canonical
from ..times import format_time, utc_now
from .common import (Options, Outcome, dirty_conflict, evidence_of, evolve_dir, load_memory, lock, memory_path,
                     negative_payload, reason_of, reflect_into, reflect_records, sha, with_memory, write_negatives,
                     zone_of)
from .publish import publish_gated
from .worktree import expected_bytes


def _expected(store, config, base: dict, files: dict) -> dict:
    """What the working tree holds now at every path this publish changes (the dirty check just passed)."""
    targets = {rel for rel in set(base) | set(files) if base.get(rel) != files.get(rel)}
    return expected_bytes(store.project.root, targets | {memory_path(config)})




def proposals_dir(store) -> Path:
    d = evolve_dir(store) / "proposals"
    make_dirs(d)
    return d


def write_proposal(store, head, memory: PatternMemory, ops: list[Op], contradictions: list[Contradiction],
                   blocked: list[Blocked], *, mode: str, evidence: list[str]) -> dict:
    body = {"base_release_id": head.release_id, "ops": [o.to_json() for o in ops],
            "contradictions": [c.to_json() for c in contradictions], "memory_sha256": sha(memory.dumps())}
    pid = "prop_" + sha(canonical(body))[:12]
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
    write_atomic(proposals_dir(store) / f"{prop['proposal_id']}.json", canonical(prop) + b"\n", STATE_FILE_MODE)


def _proposal_summary(prop: dict) -> dict:
    return {k: v for k, v in prop.items() if k != "memory"}


_PROPOSAL_DEFAULTS = {"created_at": "", "keys": [], "ops": [], "contradictions": [], "diff": []}


def _well_formed(prop) -> dict | None:
    """The proposal as the listing and the verbs read it (absent lists filled in), or None for a file reef could
    not have written: not an object, no string proposal_id/status, a field of another type. Such a hand-edited or
    torn file is left out like one that is not JSON, instead of crashing every listing and the page."""
    if not isinstance(prop, dict) or not isinstance(prop.get("proposal_id"), str) or \
            not isinstance(prop.get("status"), str):
        return None
    prop = {**{k: type(v)() for k, v in _PROPOSAL_DEFAULTS.items()}, **prop}
    if not isinstance(prop["created_at"], str) or not isinstance(prop.get("mode", ""), str):
        return None
    if not all(isinstance(prop[k], list) for k in ("keys", "ops", "contradictions", "diff")):
        return None
    if not all(isinstance(x, str) for x in prop["keys"] + prop["diff"]):
        return None
    return prop if all(isinstance(x, dict) for x in prop["ops"] + prop["contradictions"]) else None


def list_proposals(store, status: str | None = None) -> list[dict]:
    out = []
    for path in sorted(proposals_dir(store).glob("prop_*.json")):
        try:
            prop = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
        prop = _well_formed(prop)
        if prop is None:
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
    held = lock(evolve_dir(store))
    try:
        return _promote(store, ref, opts)
    finally:
        held.release()


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
            ops += c.resolution(zone_of(store, config, c.path))
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
    dirty_conflict(store, {o.path for o in applied})
    expected = _expected(store, config, base, files)
    out = Outcome("nothing", ops=[o.to_json() for o in applied], evidence=evidence_of(memory, keys))
    ledger = store.ledger()
    with ledger:
        release = None
        if files != base:
            res = publish_gated(store, head=head, base=base, files=files, expected=expected,
                                reason=f"promote {source}: " + reason_of(applied), operation="promote",
                                evidence=tuple(out.evidence),
                                meta={"bullets": [o.to_json() for o in applied], "patterns": sorted(keys),
                                      "by": "human", "gated": False, "proposal_id": prop["proposal_id"] if prop else None})
            release = res.release
        rid, cid = (release.release_id, release.content_id) if release else (head.release_id, head.content_id)
        from ..ledger import NewRecord

        ledger.append_many([NewRecord("promotion", {"key": k, "human": True, "proposal_id": prop["proposal_id"]
                                                    if prop else None, "release_id": rid}, rid, cid,
                                      f"promo-{rid}-{sha(k)[:16]}") for k in sorted(keys)])
        negatives = []
        for c in contradictions:
            if c.existing_key:
                negatives.append((f"neg-promo-{sha(c.existing_key + (prop or {}).get('proposal_id', ''))[:20]}",
                                  negative_payload(c.existing_key, c.existing_text, "", "human",
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
    zone = zone_of(store, config, path)
    ops = [Op("add", target, path, pat.id, pat.key, text, f"promoted by a human (count {pat.count})", zone,
              dict((s, t) for t, s in config.tiers).get(target), None, pat.key)]
    for w in surfaces.by_id.get(pat.id, []):
        if RANK[w.surface] < RANK[target]:
            ops.append(Op("remove", w.surface, w.path, pat.id, pat.key, w.text, f"promoted to {target}",
                          zone_of(store, config, w.path), None, None, pat.key))
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
            items.append((f"neg-rej-{prop['proposal_id']}-{sha(o['key'])[:16]}", negative_payload(
                o["key"], o["text"], "", "human", reason or f"proposal {prop['proposal_id']} rejected by a human",
                reearn_needed(config, o["surface"]), bullet_id=o["bullet_id"], proposal_id=prop["proposal_id"])))
    for c in prop["contradictions"]:
        items.append((f"neg-rej-{prop['proposal_id']}-{sha(c['key'])[:16]}", negative_payload(
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
    held = lock(evolve_dir(store))
    try:
        return _demote(store, ref, reason, opts)
    finally:
        held.release()


def _demote(store, ref: str, reason: str, opts: Options) -> Outcome:
    head = store.require_head()
    config = store.config_of(head)
    base = store.files_of(head)
    memory = load_memory(store, config, base)
    pat = memory.resolve(ref)
    bid = pat.id if pat else ref.removeprefix("reef:")
    current = with_memory(base, config, memory)
    surfaces = Surfaces(current, config)
    where = surfaces.by_id.get(bid, [])
    for path, why in sorted(surfaces.damaged.items()):  # never report a demote done while a copy stays behind
        if re.search(rf"reef:\s*{re.escape(bid)}\b".encode(), current[path].data):
            raise InvalidInput(f"cannot demote reef:{bid}: it is in {path}, whose reef block reef cannot edit ({why}); "
                               f"nothing changed")
    if pat is None and not where:
        raise NotFound(f"'{ref}' is neither a pattern key nor a bullet id reef knows (see 'reef harness patterns')")
    key = pat.key if pat else None
    if pat is not None and not where and pat.count == 0 and pat.suppressed is not None:
        return Outcome("nothing")  # already demoted: nothing to remove, and its suppression already holds
    ops = [Op("remove", w.surface, w.path, bid, key, w.text, "demoted by a human", zone_of(store, config, w.path),
              None, None, key or bid) for w in where]
    top = max((w.surface for w in where), key=lambda s: RANK[s], default=None)
    ledger = store.ledger()
    with ledger:
        negatives = []
        if key is not None:
            surface = top or tier_of(config, pat.count)[1]
            negatives = write_negatives(store, ledger, [(f"neg-demote-{head.release_id}-{sha(key)[:16]}",
                                                         negative_payload(key, pat.text, pat.polarity, "human",
                                                                           reason or "demoted by a human",
                                                                           reearn_needed(config, surface),
                                                                           bullet_id=bid, reset=True))])
            result = reflect_into(store, ledger, config, memory, Options(backend="builtin", environ=opts.environ))
            if result.changed:
                reflect_records(store, ledger, result, memory, config)
        files, applied = apply_ops(with_memory(base, config, memory), ops, config=config, memory=memory,
                                   root=store.project.root)
        dirty_conflict(store, {o.path for o in applied})
        expected = _expected(store, config, base, files)
        out = Outcome("nothing", ops=[o.to_json() for o in applied], negatives=negatives, diff=diff_lines(applied))
        if files != base:
            res = publish_gated(store, head=head, base=base, files=files, expected=expected,
                                reason=f"demote {key or bid}: " + reason_of(applied), operation="evolve",
                                evidence=tuple(n["record_id"] for n in negatives),
                                meta={"action": "demote", "by": "human", "bullets": [o.to_json() for o in applied],
                                      "patterns": [key] if key else []})
            out.status, out.release = "published", res.release.to_json()
    return out
