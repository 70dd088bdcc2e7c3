"""SkillClaw: evolve the harness's skill pool from scored, explained runs — in-process, on CPU, through the gate.

A skill is `<skill surface>` (harness.yaml `surfaces.skill`, e.g. `reef/skills/{slug}/SKILL.md`). Reports that carry
a lesson are grouped by the skill they are about (`feedback.skill`, or a pool skill whose name the text mentions;
otherwise the group is the lesson's first words). Each group gets one decision:
  create  — no skill of that name yet and at least `min_evidence` lessons: a new SKILL.md with them;
  improve — the skill exists and `min_evidence` lessons are not in it yet: they are appended;
  merge   — two pool skills whose lessons mostly overlap: the smaller folds into the larger;
  skip    — anything else (too little evidence, or nothing new).
The candidate pool is judged by the canary gate against the head like every harness change; without canary tasks it
publishes "not gated" only when every touched path is in a Learned zone (Evolvable paths need the gate). The ledger's high-water mark
rides on the release (`meta.skillclaw.through_seq`), so a report teaches once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import ConflictError, PolicyError

_WORD = re.compile(r"[a-z0-9]+")
_SLUG = re.compile(r"[^a-z0-9]+")
LESSONS_HEADING = "## Lessons"


@dataclass(frozen=True)
class Decision:
    group: str
    action: str  # create | improve | merge | skip
    path: str | None
    evidence: tuple[str, ...]
    why: str

    def to_json(self) -> dict:
        return {"group": self.group, "action": self.action, "path": self.path, "evidence": list(self.evidence),
                "why": self.why}


@dataclass
class SkillClawResult:
    decisions: list[Decision]
    through_seq: int
    ok: bool = True
    published: object | None = None
    gate: dict | None = None
    dry_run: bool = False
    message: str = ""
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"recipe": "skillclaw", "dry_run": self.dry_run, "ok": self.ok, "message": self.message,
                "through_seq": self.through_seq, "decisions": [d.to_json() for d in self.decisions],
                "release_id": self.published.release_id if self.published else None, "gate": self.gate,
                "warnings": list(self.warnings)}

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for d in self.decisions:
            counts[d.action] = counts.get(d.action, 0) + 1
        made = ", ".join(f"{n} {a}" for a, n in sorted(counts.items())) or "no skill groups"
        return f"skillclaw: {made}; {self.message}"


def _slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-")[:48] or "skill"


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _lesson_of(payload: dict) -> tuple[str | None, str | None]:
    """(lesson text, named skill) of a report, or (None, None) when it teaches nothing."""
    fb = payload.get("feedback")
    if isinstance(fb, dict):
        text = next((fb[k] for k in ("lesson", "do", "dont", "text") if isinstance(fb.get(k), str) and fb[k].strip()), None)
        if isinstance(fb.get("dont"), str) and text == fb.get("dont"):
            text = f"Don't: {text}"
        skill = fb.get("skill") if isinstance(fb.get("skill"), str) else None
        return (" ".join(text.split()) if text else None), skill
    if isinstance(fb, str) and fb.strip():
        return " ".join(fb.split()), None
    return None, None


def _pool(files: dict, pattern: str) -> dict[str, str]:
    """slug -> SKILL.md path, for every skill the release holds."""
    head, _, tail = pattern.partition("{slug}")
    out = {}
    for path in files:
        if path.startswith(head) and path.endswith(tail) and "/" not in path[len(head):len(path) - len(tail)]:
            out[path[len(head):len(path) - len(tail)]] = path
    return out


def _bullets(text: str) -> list[str]:
    return [ln[2:].strip() for ln in text.splitlines() if ln.startswith("- ")]


def _skill_text(slug: str, lessons: list[str]) -> str:
    body = "\n".join(f"- {x}" for x in lessons)
    return (f"---\nname: {slug}\ndescription: Lessons reef learned about {slug.replace('-', ' ')} from scored runs.\n"
            f"---\n\n# {slug}\n\n{LESSONS_HEADING}\n\n{body}\n")


def plan(files: dict, pattern: str, lessons: list[tuple[str, str, str | None]], *, min_evidence: int,
         max_skills: int) -> tuple[dict, list[Decision]]:
    """The candidate files and one decision per skill group; `lessons` are (record id, text, named skill)."""
    from .gitstore import Entry

    pool = _pool(files, pattern)
    texts = {slug: files[path].data.decode("utf-8", "replace") for slug, path in pool.items()}
    groups: dict[str, list[tuple[str, str]]] = {}
    for rid, text, skill in lessons:
        key = _slug(skill) if skill else next((s for s in pool if s.replace("-", " ") in text.lower()), None)
        key = key or _slug(" ".join(text.split()[:3]))
        groups.setdefault(key, []).append((rid, text))
    out = dict(files)
    decisions: list[Decision] = []
    for key in sorted(groups):
        items = groups[key]
        path = pool.get(key) or pattern.replace("{slug}", key)
        known = {b.lower() for b in _bullets(texts.get(key, ""))}
        fresh, seen = [], set()
        for rid, text in items:
            if text.lower() not in known and text.lower() not in seen:
                seen.add(text.lower())
                fresh.append((rid, text))
        ids = tuple(rid for rid, _ in items)
        if len(fresh) < min_evidence:
            decisions.append(Decision(key, "skip", None, ids, f"{len(fresh)} new lesson(s), {min_evidence} needed"))
        elif key not in pool:
            if len(pool) >= max_skills:
                decisions.append(Decision(key, "skip", None, ids, f"the pool is full ({max_skills} skills)"))
                continue
            out[path] = Entry(_skill_text(key, [t for _, t in fresh]).encode())
            pool[key], texts[key] = path, out[path].data.decode()
            decisions.append(Decision(key, "create", path, ids, f"{len(fresh)} lesson(s) about a skill not in the pool"))
        else:
            text = texts[key].rstrip("\n")
            if LESSONS_HEADING not in text:
                text += f"\n\n{LESSONS_HEADING}\n"
            text += "\n" + "\n".join(f"- {t}" for _, t in fresh) + "\n"
            out[path], texts[key] = Entry(text.encode()), text
            decisions.append(Decision(key, "improve", path, ids, f"{len(fresh)} new lesson(s)"))
    decisions += _merges(out, pool, texts)
    return out, decisions


def _merges(out: dict, pool: dict[str, str], texts: dict[str, str]) -> list[Decision]:
    """Fold a skill into another when most of its lessons' words are already there (Jaccard >= 0.6)."""
    from .gitstore import Entry

    decisions = []
    gone: set[str] = set()
    slugs = sorted(pool, key=lambda s: (-len(_bullets(texts.get(s, ""))), s))
    for i, big in enumerate(slugs):
        for small in slugs[i + 1:]:
            if big in gone or small in gone:
                continue
            a = _words(" ".join(_bullets(texts.get(big, ""))))
            b = _words(" ".join(_bullets(texts.get(small, ""))))
            if not a or not b or len(a & b) / len(a | b) < 0.6:
                continue
            extra = [x for x in _bullets(texts[small]) if x.lower() not in {y.lower() for y in _bullets(texts[big])}]
            merged = texts[big].rstrip("\n") + ("\n" + "\n".join(f"- {x}" for x in extra) if extra else "") + "\n"
            out[pool[big]], texts[big] = Entry(merged.encode()), merged
            out.pop(pool[small], None)
            gone.add(small)
            decisions.append(Decision(small, "merge", pool[big], (), f"its lessons overlap '{big}'; folded into it"))
    return decisions


def evolve_skills(store, recipe, *, dry_run: bool = False, environ=None) -> SkillClawResult:
    """One skillclaw step on the scenario's head: plan, gate, publish (compare-and-swap on the head)."""
    from .config import CONFIG_NAME, parse_config
    from .gate import gate_candidate, publish_gated

    head = store.require_head()
    files = store.files_of(head)
    config = parse_config(files[CONFIG_NAME].data, source=f"{CONFIG_NAME} (release step {head.step})", validate=False)
    settings = recipe.skillclaw
    pattern = (f"{settings['skills_dir'].rstrip('/')}/{{slug}}/SKILL.md" if settings.get("skills_dir")
               else config.surfaces.get("skill", "reef/skills/{slug}/SKILL.md"))
    mark = 0
    for rel in reversed(store.releases()):
        if isinstance(rel.meta.get("skillclaw"), dict):
            mark = int(rel.meta["skillclaw"].get("through_seq", 0))
            break
    ledger = store.ledger()
    lessons, through = [], mark
    for rec in ledger.iter_records(from_seq=mark + 1 if mark else None):
        if rec.seq <= mark:
            continue
        through = rec.seq
        if rec.kind == "report":
            text, skill = _lesson_of(rec.payload)
            if text:
                lessons.append((rec.record_id, text, skill))
    cand, decisions = plan(files, pattern, lessons, min_evidence=int(settings.get("min_evidence", 2)),
                           max_skills=int(settings.get("max_skills", 32)))
    result = SkillClawResult(decisions, through, dry_run=dry_run)
    changed = sorted(p for p in set(cand) | set(files) if cand.get(p) != files.get(p))
    if not changed:
        result.message = f"nothing to change ({len(lessons)} lesson(s) since seq {mark})"
        return result
    if dry_run:
        result.message = f"would change {len(changed)} file(s): {', '.join(changed)}"
        return result
    from .zones import EVOLVABLE, LEARNED, classify_many

    dirty = set(store.dirty_paths()) & set(changed)
    if dirty:
        raise ConflictError(f"skillclaw would change {', '.join(sorted(dirty))}, which the working tree has "
                            "unpublished edits to; publish or revert them first — nothing was changed")
    zones = dict(zip(changed, (z.zone for z in classify_many(store.project.root, config.zone_map(), changed))))
    outside = [p for p in changed if zones[p] not in (LEARNED, EVOLVABLE)]
    if outside:
        raise PolicyError(f"skillclaw would change {', '.join(outside)}, outside the Learned and Evolvable zones; "
                          "check harness.yaml's skill surface — nothing was published")
    meta = {"skillclaw": {"through_seq": through, "decisions": [d.to_json() for d in decisions if d.action != "skip"]}}
    reason = "skillclaw: " + "; ".join(f"{d.action} {d.group}" for d in decisions if d.action != "skip")
    evidence = tuple(dict.fromkeys(r for d in decisions if d.action != "skip" for r in d.evidence))
    verdict = gate_candidate(store, cand, ledger=ledger, baseline=head, environ=environ)
    if verdict is None:
        evolvable = [p for p in changed if zones[p] == EVOLVABLE]
        if evolvable:
            raise PolicyError(f"skillclaw would change {', '.join(evolvable)} (Evolvable: only through the canary "
                              "gate) and this harness has no canary tasks; nothing was published")
        result.warnings.append("not gated: this harness has no canary tasks")
        res = store.publish(reason=reason, operation="skillclaw", files=cand, expected_head=head.release_id,
                            evidence=evidence, meta={**meta, "gate": {"decision": "not gated"}})
        store.sync_worktree(files, cand, guard=True)  # an edit saved during the gate is kept (exit 3)
        result.published, result.gate = res.release, {"decision": "not gated"}
        result.message = f"published {res.release.release_id} (step {res.release.step}), not gated"
        return result
    result.gate = verdict.release_meta()
    if not verdict.published:
        result.ok = False
        result.message = f"the canary gate rejected the candidate pool ({verdict.reason}); nothing was published"
        return result
    res = publish_gated(store, cand, verdict, reason=reason, operation="skillclaw", meta=meta)
    store.sync_worktree(files, cand, guard=True)  # an edit saved during the gate is kept (exit 3)
    result.published = res.release
    result.message = f"published {res.release.release_id} (step {res.release.step}) through the gate"
    return result
