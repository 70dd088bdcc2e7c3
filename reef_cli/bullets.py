"""`reef harness bullets`: each learned bullet with its evidence, utility and expiry, beside the lessons a human
rule already states. Its own room because it reads both the Curator's surfaces and rule hygiene, which the Curator
itself consults (hygiene importing curate back made a cycle)."""

from __future__ import annotations

from datetime import datetime

from .curate import Surfaces, expires_on
from .hygiene import covering_rule, human_rules


def learned_bullets(memory, files: dict, config, *, now: datetime) -> dict:
    """Each learned bullet in the harness (block, notes, skills) with its pattern's evidence count, last seen,
    measured utility and expiry; and the patterns that human rules already state (evidence for those rules)."""
    surfaces = Surfaces(files, config)
    rules = human_rules(files)
    threshold = config.reflector.similarity
    bullets = []
    for bid in sorted(surfaces.by_id):
        p = memory.by_id(bid)
        for w in surfaces.by_id[bid]:
            expires = expires_on(p.last_seen, config.expiry_days) if p is not None and p.last_seen else None
            bullets.append({"id": bid, "text": w.text, "surface": w.surface, "path": w.path,
                            "pattern": p.key if p else None, "evidence": p.count if p else None,
                            "records": len(p.evidence) if p else 0, "last_seen": p.last_seen if p else None,
                            "utility": p.utility if p else None, "expires": expires,
                            "suppressed": bool(p and p.suppressed)})
    covered = []
    in_harness = set(surfaces.by_id)
    for key in sorted(memory.patterns):
        p = memory.patterns[key]
        if p.id in in_harness or not p.count:
            continue
        rule = covering_rule(p, rules, threshold)
        if rule is not None:
            covered.append({"pattern": key, "text": p.text, "evidence": p.count, "last_seen": p.last_seen,
                            "rule": rule.where, "rule_text": rule.text})
    return {"bullets": bullets, "covered": covered, "now": now.strftime("%Y-%m-%d")}
