"""What every evolve step shares: options and outcome, pattern memory in and out of a files dict, negative
evidence, the scenario's evolve lock and the audit records of a reflect."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..curate import SIGN, Op, Surfaces, reearn_needed
from ..errors import ConflictError, InvalidInput
from ..gitstore import Entry
from ..patterns import PatternMemory
from ..durable import STATE_FILE_MODE, make_dirs
from ..project import write_atomic
from ..releases import canonical


def fault(point: str) -> None:
    """Test-only crash points (`REEF_FAULT=evolve:POINT`): SIGKILL, so nothing gets to clean up."""
    if os.environ.get("REEF_FAULT") == f"evolve:{point}":
        os.kill(os.getpid(), signal.SIGKILL)


def sha(data: bytes | str) -> str:
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
    warn: Callable[[str], None] | None = None  # one-line notices (a skipped malformed model answer)
    attribute: int = 3  # leave-one-out attribution for at most this many new bullets (0: off)
    workers: int | None = None
    branch: str | None = None  # write the candidate as a commit on this branch of the user's repo (proposal_branch)
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
    admission: dict | None = None
    branch: dict | None = None

    def to_json(self) -> dict:
        return {"status": self.status, "release": self.release, "ops": self.ops, "pending": self.pending,
                "contradictions": self.contradictions, "blocked": self.blocked, "verdict": self.verdict,
                "warnings": self.warnings, "reflect": self.reflect, "evidence": self.evidence, "diff": self.diff,
                "negatives": self.negatives, "gated": self.gated, "resumed": self.resumed,
                "expired": self.expired, "evolve_id": self.evolve_id, "admission": self.admission,
                "branch": self.branch}


# --------------------------------------------------------------------------------------------- memory


def evolve_dir(store) -> Path:
    d = store.dir / "evolve"
    make_dirs(d)  # reef's state: owner-only whatever the umask
    return d


def memory_path(config) -> str:
    return config.surfaces["memory"]


def check_memory_size(path: Path) -> None:
    """Refuse a working-tree memory file past MEMORY_LIMIT before anything reads it whole (InvalidInput, exit 4)."""
    from ..patterns import MEMORY_LIMIT, too_large

    try:
        size = os.lstat(path).st_size
    except OSError:
        return
    if size > MEMORY_LIMIT:
        raise too_large(path, size)


def load_memory(store, config, base_files: dict) -> PatternMemory:
    """Pattern memory to fold into; refuses up front when harness.yaml points `surfaces.memory` at a path the zone
    guard does not let reef write (every later write of it would be refused, or worse, clobber a human's file)."""
    from ..zones import check_write

    path = memory_path(config)
    check_write(store.project.root, config.zone_map(), path)
    wt = store.project.root / path
    if wt.is_file() and not wt.is_symlink():
        check_memory_size(wt)
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
    from ..llm_reflector import resolve

    mode = "show" if opts.show_prompt else "estimate" if opts.dry_run else "send"
    return resolve(config.reflector, backend=opts.backend, base_url=opts.model_url, model=opts.model,
                   environ=opts.environ, mode=mode)


def head_ids(store) -> tuple[str | None, str | None]:
    head = store.head()
    return (head.release_id, head.content_id) if head else (None, None)


def zone_of(store, config, path: str) -> str:
    from ..zones import decide

    return decide(store.project.root, config.zone_map(), path).zone


def evidence_of(memory: PatternMemory, keys: set[str]) -> list[str]:
    out: set[str] = set()
    for k in keys:
        p = memory.patterns.get(k)
        if p is not None:
            out.update(p.evidence)
    return sorted(out)


def reason_of(ops: list[Op], extra: str = "") -> str:
    """A release reason after its verb: one `+ID PATH` per bullet operation."""
    text = "; ".join(f"{SIGN[o.op]}{o.bullet_id} {o.path}" for o in ops) or "pattern memory only"
    return f"{text} ({extra})" if extra else text


def dirty_conflict(store, paths: set[str]) -> None:
    """Refuse up front when a path reef is about to write holds a user's unpublished edit."""
    try:
        dirty = set(store.dirty_paths())
    except InvalidInput:
        return
    clash = sorted(dirty & paths)
    if clash:
        raise ConflictError(f"{', '.join(clash[:5])} has unpublished edits in the working tree; publish or revert "
                            f"them before reef writes there (nothing was changed)")


def lock(directory: Path):
    """The evolve lock (one evolve/promote/demote per scenario at a time); never waits."""
    from filelock import FileLock, Timeout

    lk = FileLock(str(directory / "lock"), mode=STATE_FILE_MODE)
    try:
        lk.acquire(timeout=0)
    except Timeout:
        raise ConflictError(f"another evolve/promote is running on this scenario (lock {directory / 'lock'})") from None
    return lk


# --------------------------------------------------------------------------------------------- negative evidence


def negative_payload(key: str, text: str, polarity: str, origin: str, reason: str, needed: int, **extra) -> dict:
    """A `negative` record's payload. The reason is often a human's `-m` (demote, reject) and is folded into pattern
    memory, which every release publishes: it is redacted here, before the ledger or memory holds it."""
    from ..redact import redact_text

    return {"key": key, "text": redact_text(text), "polarity": polarity, "origin": origin,
            "reason": redact_text(reason), "needed": needed, **{k: v for k, v in extra.items() if v is not None}}


def write_negatives(store, ledger, items: list[tuple[str, dict]]) -> list[dict]:
    """Append `negative` records with deterministic ids (a resend is a no-op)."""
    from ..ledger import NewRecord

    if not items:
        return []
    rid, cid = head_ids(store)
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
                rid = f"neg-rb-{rb.release_id}-{sha(op['key'])[:16]}"
                items.append((rid, negative_payload(
                    op["key"], op.get("text", ""), "", "rollback",
                    f"release step {r.step} ({r.release_id}) was rolled back by step {rb.step}", needed,
                    release_id=r.release_id, rollback_release_id=rb.release_id, bullet_id=op.get("bullet_id"))))
    seen = set()
    unique = [(rid, p) for rid, p in items if not (rid in seen or seen.add(rid))]
    out = write_negatives(store, ledger, unique)
    if fresh:
        write_atomic(state_path, canonical(sorted(done | set(fresh))) + b"\n", STATE_FILE_MODE)
    return out


# --------------------------------------------------------------------------------------------- reflect


def reflect_into(store, ledger, config, memory: PatternMemory, opts: Options, files: dict | None = None):
    """Fold the ledger's new records into `memory` with the configured backend."""
    from ..reflect import reflect

    backend = make_backend(config, opts)
    bullets = []
    if files is not None and backend != "builtin":
        surfaces = Surfaces(files, config)
        bullets = sorted({w.text for ws in surfaces.by_id.values() for w in ws})
    return reflect(ledger, store.scenario, memory, threshold=config.reflector.similarity, backend=backend,
                   progress=opts.progress, bullets=bullets, warn=opts.warn)


def reflect_records(store, ledger, result, memory: PatternMemory, config) -> None:
    """Audit records of one reflect: its rejections and a summary, with ids derived from their content."""
    from ..ledger import NewRecord

    rid, cid = head_ids(store)
    items = []
    for rej in result.rejected:
        body = rej.to_json()
        items.append(NewRecord("rejection", body, rid, cid, f"rej-{sha(canonical(body))[:24]}"))
    summary = {k: v for k, v in result.to_json().items() if k != "rejected"}
    summary["patterns_touched"] = summary["patterns_touched"][:100]
    summary["patterns_created"] = summary["patterns_created"][:100]
    summary["rejected"] = len(result.rejected)
    summary["memory_path"] = memory_path(config)
    summary["memory_sha256"] = sha(memory.dumps())
    items.append(NewRecord("reflect", summary, rid, cid,
                           f"reflect-{result.from_seq}-{result.through_seq}-{summary['memory_sha256'][:16]}"))
    ledger.append_many(items)
