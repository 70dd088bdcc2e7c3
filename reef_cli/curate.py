"""Loop 2, the Curator: turn counted patterns into small bullet edits on the surface of the tier they reached.

Given pattern memory, the base release's files, harness.yaml and a clock, `plan()` returns a `Plan`: the bullet
operations (add/update/remove/merge) grouped per pattern, the contradictions that need the gate or a human to
choose, and the proposals that were blocked (with whether they count as negative evidence). `apply_ops()` applies
operations to any files dict — so a proposal can be re-applied on a newer head — enforcing budgets on every write.

Decisions (where the issue is silent):

* **One home per pattern.** A pattern lives on the surface of the highest tier its count reached (harness.yaml
  `tiers`, default 1 memory · 3 notes · 5 block · 10 skill). Reaching a higher tier moves its bullet (add there,
  remove from the lower surfaces, as one group that is applied or refused together); a count never demotes it.
  Tier 1 is pattern memory itself, written by the Reflector.
* **Who may originate.** Only `eligible` patterns (not suppressed, not only observe-only) get new bullets.
  Suppressed patterns keep the bullets they already have.
* **Notes** (tier 3) are a managed block too (created with its file when the Learned-zone file is missing), so the
  same add/update/remove and budget rules hold there. A Managed file without markers is reported, never edited:
  adding markers would change text outside a block.
* **Skills** (tier 10): `surfaces.skill` with `{slug}` = up to five words of the lesson + its bullet id, e.g.
  `.claude/skills/run-tests-before-finish-b3f2a1/SKILL.md`; frontmatter `name` (= the slug, `^[a-z0-9]+(-[a-z0-9]+)*$`,
  at most 64) and `description` (1-1024 characters) are validated before it is proposed. A surface that is not a
  SKILL.md (a rule file) needs no frontmatter. The bullet inside the skill keeps its id, so demote/expiry find it.
* **Budgets** (`budgets.max_bullets`, `budgets.max_chars`) hold per block and are checked on every add/update; when
  full, the lowest-value bullet is evicted first: measured utility (from the gate's attribution; unmeasured = 0),
  then count, then last seen, then key. Bullets reef cannot name (no pattern in memory) count as lowest. A new
  bullet whose value is not above the lowest is refused instead of evicting a better one.
* **Expiry.** A pattern whose `last_seen` is more than `expiry_days` before `now` is dropped from memory and its
  bullets removed everywhere (patterns under negative evidence are kept, so the suppression survives).
* **Contradictions.** A new bullet contradicts another when their polarities differ and their term sets are
  similar (patterns.py; same threshold as merging): "Always use tabs" / "Never use tabs", "MUST run X" / "MUST NOT
  run X". Against a learned bullet it becomes a `Contradiction` carrying both (the gate or a human chooses; the
  loser gets negative evidence). Against a human's line (outside any block, in any Markdown file of the harness) it
  is blocked and recorded as negative evidence naming file and line: reef never edits the human's text.
* **Screen.** A lesson that reads as an instruction injection or a permission escalation (screen.py) is blocked
  before anything else looks at it — no gate, no proposal — and is negative evidence naming the rule it tripped.
* **Zone guard.** Every path goes through `zones.check_write`; a Frozen target blocks the group and is negative
  evidence naming the path. For Managed files `blocks.outside_unchanged` is re-checked after applying. A target
  that harness.yaml `include` does not match is reported too: it would not be part of the harness.
* **Merges.** Two learned bullets in one block that are near-duplicates (same polarity, similarity at or above the
  threshold) merge: the higher-value one stays, takes the wording of the more-observed pattern (an `update` if that
  changes it), and the other is removed; memory folds the absorbed pattern's counts into the survivor.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from .blocks import (BudgetExceeded, append_block, begin_marker, bullet_lines, end_marker, new_file, outside_unchanged,
                     parse as parse_block, render_bullet)
from .errors import InvalidInput, PolicyError
from .gitstore import Entry
from .hygiene import covering_rule, human_rules
from .times import format_time
from .screen import screen
from .patterns import DEFAULT_MAX_PATTERNS, EVIDENCE_CAP, Pattern, PatternMemory, polarity_of, similarity, terms_of

RANK = {"memory": 0, "notes": 1, "block": 2, "skill": 3}
SIGN = {"add": "+", "remove": "-", "update": "~", "merge": "-"}  # how an Op reads in a diff line or a reason
_SLUG_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


# --------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Op:
    op: str  # add | update | remove | merge
    surface: str  # notes | block | skill
    path: str
    bullet_id: str
    key: str | None
    text: str
    reason: str
    zone: str = ""
    tier: int | None = None
    old_text: str | None = None
    group: str = ""

    def to_json(self) -> dict:
        return {"op": self.op, "surface": self.surface, "path": self.path, "bullet_id": self.bullet_id,
                "key": self.key, "text": self.text, "old_text": self.old_text, "reason": self.reason,
                "zone": self.zone, "tier": self.tier, "group": self.group}

    @classmethod
    def from_json(cls, d: dict) -> "Op":
        return cls(op=d["op"], surface=d["surface"], path=d["path"], bullet_id=d["bullet_id"], key=d.get("key"),
                   text=d.get("text", ""), reason=d.get("reason", ""), zone=d.get("zone", ""), tier=d.get("tier"),
                   old_text=d.get("old_text"), group=d.get("group", ""))

    def line(self) -> str:
        sign = SIGN.get(self.op, "?")
        body = f"{self.old_text!r} -> {self.text!r}" if self.op == "update" else self.text
        return f"{sign} [{self.path}] reef:{self.bullet_id}  {body}  ({self.reason})"


@dataclass(frozen=True)
class Contradiction:
    key: str
    bullet_id: str
    text: str
    surface: str
    path: str
    tier: int | None
    existing_key: str | None
    existing_id: str
    existing_text: str
    existing_path: str

    def to_json(self) -> dict:
        return {"key": self.key, "bullet_id": self.bullet_id, "text": self.text, "surface": self.surface,
                "path": self.path, "tier": self.tier, "existing_key": self.existing_key,
                "existing_id": self.existing_id, "existing_text": self.existing_text,
                "existing_path": self.existing_path}

    @classmethod
    def from_json(cls, d: dict) -> "Contradiction":
        return cls(**{k: d.get(k) for k in ("key", "bullet_id", "text", "surface", "path", "tier", "existing_key",
                                            "existing_id", "existing_text", "existing_path")})

    def resolution(self, zone: str) -> list[Op]:
        """The ops that take the new bullet: the existing one goes, the new one comes (one group)."""
        g = f"contradiction:{self.key}"
        return [Op("remove", self.surface, self.existing_path, self.existing_id, self.existing_key,
                   self.existing_text, f"contradicted by reef:{self.bullet_id}", zone, None, None, g),
                Op("add", self.surface, self.path, self.bullet_id, self.key, self.text,
                   f"replaces contradicting reef:{self.existing_id}", zone, self.tier, None, g)]

    def line(self) -> str:
        return (f"! [{self.path}] reef:{self.bullet_id} {self.text!r} contradicts reef:{self.existing_id} "
                f"{self.existing_text!r}: needs the gate or a human to choose")


@dataclass(frozen=True)
class Blocked:
    key: str
    path: str
    kind: str  # frozen | contradiction | damaged | schema | budget | no-block | injection | escalation | covered
    reason: str
    negative: bool
    tier: int | None = None
    text: str = ""
    polarity: str = ""

    def to_json(self) -> dict:
        return {"key": self.key, "path": self.path, "kind": self.kind, "reason": self.reason,
                "negative": self.negative, "tier": self.tier, "text": self.text, "polarity": self.polarity}

    def line(self) -> str:
        return f"x [{self.path}] {self.key}: blocked ({self.kind}): {self.reason}"


@dataclass
class Plan:
    ops: list[Op]
    contradictions: list[Contradiction]
    blocked: list[Blocked]
    memory: PatternMemory
    expired: list[str] = field(default_factory=list)
    evicted_patterns: list[str] = field(default_factory=list)
    merged: list[tuple[str, str]] = field(default_factory=list)

    def groups(self) -> dict[str, list[Op]]:
        out: dict[str, list[Op]] = {}
        for op in self.ops:
            out.setdefault(op.group, []).append(op)
        return out

    def to_json(self) -> dict:
        return {"ops": [o.to_json() for o in self.ops], "contradictions": [c.to_json() for c in self.contradictions],
                "blocked": [b.to_json() for b in self.blocked], "expired": list(self.expired),
                "evicted_patterns": list(self.evicted_patterns), "merged": [list(m) for m in self.merged]}


# --------------------------------------------------------------------------------------------- surfaces


def slugify(text: str, words: int = 5) -> str:
    parts = re.findall(r"[a-z0-9]+", text.lower())
    parts = [p for p in parts if p not in ("the", "a", "an", "to", "of", "and", "or", "always", "never", "do", "not")]
    return "-".join(parts[:words]) or "lesson"


def skill_path(config, pattern: Pattern, text: str | None = None) -> str:
    slug = f"{slugify(text or pattern.text)}-{pattern.id}"[:64].strip("-")
    return config.surfaces["skill"].replace("{slug}", slug)


def _skill_regex(template: str) -> re.Pattern:
    parts = template.split("{slug}")
    return re.compile("^" + "(?P<slug>[^/]+)".join(re.escape(p) for p in parts) + "$")


def skill_file(slug: str, bullet_id: str, text: str, count: int) -> str:
    desc = text if len(text) <= 1024 else text[:1021] + "..."
    return (f"---\nname: {slug}\ndescription: {json.dumps(desc, ensure_ascii=False)}\n---\n\n"
            f"# {text}\n\nLearned by reef from {count} observations; reef may update or remove this file.\n\n"
            f"{begin_marker()}\n{render_bullet(bullet_id, text)}\n{end_marker()}\n")


def validate_skill(path: str, text: str) -> None:
    """Schema of an Evolvable skill file: SKILL.md needs frontmatter `name` and `description`."""
    if not path.endswith("SKILL.md"):
        return
    from .frontmatter import parse

    fm = parse(text)
    if fm.error or fm.meta is None:
        raise InvalidInput(f"{path}: {fm.error or 'no frontmatter'}; a SKILL.md needs name and description")
    name, desc = fm.meta.get("name"), fm.meta.get("description")
    if not isinstance(name, str) or not _SLUG_NAME.match(name) or len(name) > 64:
        raise InvalidInput(f"{path}: frontmatter 'name' must be lowercase words joined by '-', at most 64 characters")
    folder = path.rsplit("/", 2)[-2] if path.count("/") >= 1 else ""
    if folder and folder != name:
        raise InvalidInput(f"{path}: frontmatter 'name' {name!r} must equal its directory name {folder!r}")
    if not isinstance(desc, str) or not (1 <= len(desc.strip()) <= 1024):
        raise InvalidInput(f"{path}: frontmatter 'description' must be 1-1024 characters")


def _text(entry: Entry | None) -> str | None:
    """A file's text for editing its block; None when it is missing. Bytes that are not UTF-8 (a Latin-1 "café" in
    the human's part of CLAUDE.md) decode to lone surrogates and encode back to the same bytes (`_bytes`), so the
    block is still found and edited and every byte outside it stays identical; inside a block they are refused
    (blocks.parse)."""
    if entry is None:
        return None
    return entry.data.decode("utf-8", "surrogateescape")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _readable(entry: Entry) -> str:
    """A file's text for reading only (the human's rules, shown and compared): a byte that is not UTF-8 becomes
    U+FFFD rather than hiding the whole file's rules."""
    return entry.data.decode("utf-8", "replace")


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Where:
    surface: str
    path: str
    text: str


class Surfaces:
    """Where each bullet id lives in a files dict, and which files are damaged."""

    def __init__(self, files: dict, config):
        self.config = config
        self.by_id: dict[str, list[Where]] = {}
        self.damaged: dict[str, str] = {}
        self.paths = {"notes": config.surfaces["notes"], "block": config.surfaces["block"]}
        for surface in ("notes", "block"):
            path = self.paths[surface]
            self._scan(files, path, surface)
        rx = _skill_regex(config.surfaces["skill"])
        for path in sorted(files):
            if rx.match(path):
                self._scan(files, path, "skill")

    def _scan(self, files: dict, path: str, surface: str) -> None:
        text = _text(files.get(path))
        if text is None:
            return
        try:
            block = parse_block(text, source=path)
        except InvalidInput as exc:
            self.damaged[path] = str(exc)
            return
        if block is None:
            return
        for b in block.bullets:
            self.by_id.setdefault(b.id, []).append(Where(surface, path, b.text))

    def home(self, bullet_id: str) -> Where | None:
        found = self.by_id.get(bullet_id) or []
        return max(found, key=lambda w: RANK[w.surface]) if found else None


# --------------------------------------------------------------------------------------------- applying


def bullet_value(memory: PatternMemory, bullet_id: str) -> tuple:
    p = memory.by_id(bullet_id)
    return p.value() if p is not None else (float("-inf"), 0, "", "")


class BudgetRefused(InvalidInput):
    pass


def _load_block(files: dict, path: str, zone: str, *, create: bool):
    """The block of `path` to edit; None when the file is missing and `create` is false."""
    text = _text(files.get(path))
    if text is None:
        if not create:
            return None
        text = new_file("Notes learned by reef")
    block = parse_block(text, source=path)
    if block is None:
        if zone == "managed" or not create:
            raise PolicyError(f"{path} has no reef managed block; add '<!-- reef:begin learned -->' and "
                              f"'<!-- reef:end learned -->' where reef may write")
        if not _is_utf8(text):
            raise InvalidInput(f"{path}: not UTF-8 text and no reef block in it; reef will not add one")
        block = parse_block(append_block(text), source=path)
    return block


def apply_ops(files: dict, ops: list[Op], *, config, memory: PatternMemory, root: Path | None = None,
              zones=None) -> tuple[dict, list[Op]]:
    """Apply `ops` to a copy of `files`; returns (new files, ops actually applied incl. budget evictions).

    Raises PolicyError (Frozen path, text outside a block changed), BudgetRefused (a bullet that cannot fit),
    InvalidInput (damaged block, schema). Budgets are enforced on every add/update.
    """
    from .zones import MANAGED, check_write

    out = dict(files)
    applied: list[Op] = []
    touched_managed: dict[str, str] = {}
    zone_map = zones if zones is not None else config.zone_map()
    for op in ops:
        if root is not None:
            decision = check_write(root, zone_map, op.path)
            zone = decision.zone
        else:
            zone = op.zone
        if op.surface == "skill":
            if op.op == "remove":
                if op.path in out:
                    del out[op.path]
                    applied.append(op)
                continue
            if op.op in ("add", "update"):
                p = memory.by_id(op.bullet_id)
                slug = op.path.rsplit("/", 2)[-2] if op.path.endswith("SKILL.md") else op.path.rsplit("/", 1)[-1]
                body = skill_file(slug, op.bullet_id, op.text, p.count if p else 0)
                validate_skill(op.path, body)
                out[op.path] = Entry(body.encode("utf-8"))
                applied.append(op)
            continue
        old_text = _text(out.get(op.path))
        if root is not None and zone == MANAGED and op.path not in touched_managed:
            touched_managed[op.path] = old_text or ""
        block = _load_block(out, op.path, zone, create=op.op == "add")
        if block is None:
            continue
        if op.op in ("remove", "merge"):
            if block.remove(op.bullet_id):
                applied.append(op)
        elif op.op in ("add", "update"):
            while True:
                try:
                    if op.op == "add":
                        block.add(op.bullet_id, op.text, max_bullets=config.max_bullets, max_chars=config.max_chars)
                    else:
                        block.update(op.bullet_id, op.text, max_bullets=config.max_bullets, max_chars=config.max_chars)
                    applied.append(op)
                    break
                except BudgetExceeded as exc:
                    mine = bullet_value(memory, op.bullet_id)
                    others = [b for b in block.bullets if b.id != op.bullet_id]
                    if not others:
                        raise BudgetRefused(f"{exc}; reef:{op.bullet_id} alone does not fit") from None
                    victim = min(others, key=lambda b: bullet_value(memory, b.id))
                    if bullet_value(memory, victim.id) >= mine:
                        raise BudgetRefused(
                            f"{exc}; every bullet there is worth at least as much as reef:{op.bullet_id}"
                        ) from None
                    block.remove(victim.id)
                    vp = memory.by_id(victim.id)
                    applied.append(Op("remove", op.surface, op.path, victim.id, vp.key if vp else None, victim.text,
                                      f"budget: lowest value, evicted for reef:{op.bullet_id}", zone, None, None,
                                      op.group))
        out[op.path] = Entry(_bytes(block.render()), files[op.path].mode if op.path in files else 0o100644)
    for path, before in touched_managed.items():
        after = _text(out.get(path)) or ""
        if not outside_unchanged(before, after, source=path):
            raise PolicyError(f"{path}: an edit would change text outside reef's managed block; refused")
    return out, applied


# --------------------------------------------------------------------------------------------- planning


def expiry_cutoff(now: datetime, days: int) -> str:
    """The last_seen before which a pattern expires; "" (nothing expires) when `expiry_days` reaches past the
    calendar (harness.yaml only sets a minimum: 100000000 days means never, not a crash)."""
    try:
        return format_time(now - timedelta(days=days))
    except OverflowError:
        return ""


def expires_on(last_seen: str, days: int) -> str | None:
    """The day a pattern last seen at `last_seen` expires (YYYY-MM-DD); None when beyond the calendar."""
    seen = datetime.strptime(last_seen[:19], "%Y-%m-%dT%H:%M:%S")
    try:
        return (seen + timedelta(days=days)).strftime("%Y-%m-%d")
    except OverflowError:
        return None


def tier_of(config, count: int) -> tuple[int | None, str]:
    best: tuple[int | None, str] = (None, "memory")
    for threshold, surface in config.tiers:
        if count >= threshold:
            best = (threshold, surface)
    return best


def threshold_of(config, surface: str) -> int:
    for threshold, s in config.tiers:
        if s == surface:
            return threshold
    return 1


def reearn_needed(config, surface: str | None) -> int:
    if isinstance(config.reearn, int):
        return config.reearn
    return threshold_of(config, surface) if surface else 1


def _human_lines(files: dict) -> list[tuple[str, int, str, frozenset, str]]:
    """(path, line, text, terms, polarity) for Markdown list items outside reef's blocks."""
    out = []
    for path in sorted(files):
        if not path.endswith(".md"):
            continue
        for n, item in bullet_lines(_readable(files[path])):
            terms = terms_of(item)
            if terms:
                out.append((path, n, item, terms, polarity_of(item)))
    return out


def plan(memory: PatternMemory, files: dict, config, *, now: datetime, root: Path | None = None,
         only: set[str] | None = None) -> Plan:
    """What the Curator proposes for `files` given `memory` (which is copied, then expired/merged)."""
    from .zones import decide

    memory = memory.copy()
    zone_map = config.zone_map()
    threshold = config.reflector.similarity
    blocked: list[Blocked] = []
    ops: list[Op] = []
    contradictions: list[Contradiction] = []

    def zone(path: str) -> str:
        if root is None:
            return ""
        return decide(root, zone_map, path).zone

    def frozen_reason(path: str) -> str | None:
        if root is None:
            return None
        d = decide(root, zone_map, path)
        return None if d.allowed else d.reason

    surfaces = Surfaces(files, config)
    # expiry
    cutoff = expiry_cutoff(now, config.expiry_days)
    expired = []
    for key in sorted(memory.patterns):
        p = memory.patterns[key]
        if p.suppressed is None and p.last_seen and p.last_seen < cutoff:
            expired.append(key)
            for w in surfaces.by_id.get(p.id, []):
                if w.path in surfaces.damaged:
                    continue
                ops.append(Op("remove", w.surface, w.path, p.id, key, w.text,
                              f"expired: not seen since {p.last_seen[:10]} ({config.expiry_days} days)",
                              zone(w.path), None, None, key))
            memory.remove(key)
    evicted = memory.enforce_budget(DEFAULT_MAX_PATTERNS)
    # merges of near-duplicate learned bullets within one block
    merged: list[tuple[str, str]] = []
    for surface in ("notes", "block"):
        path = surfaces.paths[surface]
        if path in surfaces.damaged:
            continue
        here = [(bid, ws) for bid, ws in sorted(surfaces.by_id.items()) for w in ws if w.path == path]
        pats = [(memory.by_id(bid), bid) for bid, _ in here]
        pats = [(p, bid) for p, bid in pats if p is not None]
        gone: set[str] = set()
        for i, (a, aid) in enumerate(pats):
            for b, bid in pats[i + 1:]:
                if aid in gone or bid in gone or a.polarity != b.polarity:
                    continue
                if similarity(a.terms, b.terms) < threshold:
                    continue
                keep, drop = (a, b) if a.value() >= b.value() else (b, a)
                gone.add(drop.id)
                wording = keep.text if keep.count >= drop.count else drop.text
                g = f"merge:{keep.key}"
                ops.append(Op("merge", surface, path, drop.id, drop.key, drop.text,
                              f"merged into reef:{keep.id} (near-duplicate)", zone(path), None, None, g))
                current = next((w.text for w in surfaces.by_id[keep.id] if w.path == path), keep.text)
                if wording != current:
                    ops.append(Op("update", surface, path, keep.id, keep.key, wording,
                                  f"merged wording from reef:{drop.id}", zone(path), None, current, g))
                _absorb(memory, keep, drop, wording)
                merged.append((keep.key, drop.key))
    # tier moves
    human = None
    rules = None
    for key in sorted(memory.patterns):
        p = memory.patterns[key]
        if only is not None and key not in only:
            continue
        if not p.eligible:
            continue
        tier, target = tier_of(config, p.count)
        if target == "memory":
            continue
        home = surfaces.home(p.id)
        if home is not None and RANK[home.surface] >= RANK[target]:
            continue
        text = home.text if home is not None else p.text  # a human's rewording inside the block wins
        path = skill_path(config, p, text) if target == "skill" else surfaces.paths[target]
        finding = screen(text)
        if finding is not None:  # an attack on the agent never reaches a surface, whatever a gate would say
            blocked.append(Blocked(key, path, finding.kind, finding.reason(), True, tier, p.text, p.polarity))
            continue
        why = frozen_reason(path)
        if why is not None:
            blocked.append(Blocked(key, path, "frozen", why, True, tier, p.text, p.polarity))
            continue
        if path in surfaces.damaged:
            blocked.append(Blocked(key, path, "damaged", surfaces.damaged[path], False, tier, p.text, p.polarity))
            continue
        if not _included(config, path):
            blocked.append(Blocked(key, path, "not-included", f"{path} is not matched by harness.yaml 'include', so "
                                   f"it would not be part of the harness; add it there", False, tier, p.text,
                                   p.polarity))
            continue
        # contradictions: learned bullets first (a choice), then the human's lines (blocked)
        clash = _learned_clash(memory, surfaces, p)
        if clash is not None:
            other, where = clash
            contradictions.append(Contradiction(key, p.id, text, target, path, tier, other.key if other else None,
                                                where[0], where[2], where[1]))
            continue
        if human is None:
            human = _human_lines(files)
        hclash = next(((hp, hn, ht) for hp, hn, ht, hterms, hpol in human
                       if hpol != p.polarity and similarity(hterms, p.terms) >= threshold), None)
        if hclash is not None:
            hp, hn, ht = hclash
            blocked.append(Blocked(key, f"{hp}:{hn}", "contradiction",
                                   f"contradicts the human's line {hp}:{hn} {ht!r}; reef never edits it",
                                   True, tier, p.text, p.polarity))
            continue
        same = covering_rule(p, rules if rules is not None else (rules := human_rules(files)), threshold)
        if same is not None:  # rule hygiene: the agent already reads this lesson
            blocked.append(Blocked(key, same.where, "covered", f"already stated by {same.where} {same.text!r}: "
                                   f"counted as evidence for that rule ({p.count}), not added", False, tier, p.text,
                                   p.polarity))
            continue
        g = key
        reason = f"tier {tier}: count {p.count}"
        ops.append(Op("add", target, path, p.id, key, text, reason, zone(path), tier, None, g))
        for w in surfaces.by_id.get(p.id, []):
            if RANK[w.surface] < RANK[target] and w.path not in surfaces.damaged:
                ops.append(Op("remove", w.surface, w.path, p.id, key, w.text, f"promoted to {target}",
                              zone(w.path), None, None, g))
    result = Plan(ops, contradictions, blocked, memory, expired, evicted, merged)
    return _simulate(result, files, config, root)


def _included(config, path: str) -> bool:
    from .zones import glob_match

    return any(glob_match(g, path) for g in config.include) and not any(glob_match(g, path) for g in config.exclude)


def _absorb(memory: PatternMemory, keep: Pattern, drop: Pattern, wording: str) -> None:
    keep.count += drop.count
    keep.observe_only += drop.observe_only
    for rid in drop.evidence:
        if rid not in keep.evidence:
            keep.evidence.append(rid)
    keep.evidence[:] = sorted(keep.evidence)[-EVIDENCE_CAP:]
    for k, v in drop.origins.items():
        keep.origins[k] = keep.origins.get(k, 0) + v
    keep.first_seen = min(x for x in (keep.first_seen, drop.first_seen) if x) if (keep.first_seen or drop.first_seen) else ""
    keep.last_seen = max(keep.last_seen, drop.last_seen)
    keep.text = wording
    memory.remove(drop.key)


def _learned_clash(memory: PatternMemory, surfaces: Surfaces, p: Pattern):
    threshold = surfaces.config.reflector.similarity
    for bid in sorted(surfaces.by_id):
        if bid == p.id:
            continue
        other = memory.by_id(bid)
        for w in surfaces.by_id[bid]:
            if w.surface == "skill":
                continue
            terms = other.terms if other is not None else terms_of(w.text)
            pol = other.polarity if other is not None else polarity_of(w.text)
            if pol != p.polarity and similarity(terms, p.terms) >= threshold:
                return other, (bid, w.path, w.text)
    return None


def _simulate(result: Plan, files: dict, config, root: Path | None) -> Plan:
    """Apply each group on its own (in order) to find the ones a budget, schema or guard refuses."""
    current = dict(files)
    kept: list[Op] = []
    for group, group_ops in _ordered_groups(result):
        try:
            current, applied = apply_ops(current, group_ops, config=config, memory=result.memory, root=root)
        except (BudgetRefused, PolicyError, InvalidInput) as exc:
            add = next((o for o in group_ops if o.op == "add"), group_ops[0])
            if isinstance(exc, BudgetRefused):
                kind = "budget"
            elif isinstance(exc, PolicyError):
                kind = "no-block" if "no reef managed block" in str(exc) else "frozen"
            else:
                kind = "schema" if add.surface == "skill" else "damaged"
            result.blocked.append(Blocked(add.key or group, add.path, kind, str(exc), kind == "frozen", add.tier,
                                          add.text))
            continue
        kept.extend(applied)
    result.ops = kept
    return result


def _ordered_groups(result: Plan) -> list[tuple[str, list[Op]]]:
    """Removals (expiry, merges) first so they free budget, then additions from the highest value down, so a full
    block refuses the weakest newcomer instead of adding and evicting it in one release."""
    memory = result.memory

    def rank(item):
        g, gops = item
        if all(o.op in ("remove", "merge", "update") for o in gops):
            return (0, (), g)
        add = next(o for o in gops if o.op == "add")
        value = bullet_value(memory, add.bullet_id)
        return (1, tuple(-x if isinstance(x, (int, float)) else x for x in value[:2]), g)
    return sorted(result.groups().items(), key=rank)


def diff_lines(ops: list[Op], contradictions: list[Contradiction] = (), blocked: list[Blocked] = ()) -> list[str]:
    return [o.line() for o in ops] + [c.line() for c in contradictions] + [b.line() for b in blocked]
