"""The release chain: an append-only JSONL log per scenario whose fsync'd line is the commit point.

Git commits on `refs/reef/scenarios/<name>` mirror the log; the log is authoritative and the ref is repaired from it.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .durable import append_durable, last_lines, open_state
from .errors import NotFound, StoreError

def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Release:
    release_id: str
    scenario: str
    content_id: str
    commit_id: str
    parent_release_id: str | None
    step: int
    operation: str
    reason: str
    evidence: tuple[str, ...] = ()
    created_at: str = ""
    runtime_load_id: str | None = None
    meta: dict = field(default_factory=dict)
    ledger_anchor: dict | None = None
    """The scenario's ledger at publish: {"seq": N, "hash": "<64 hex>"} of its last record ({"seq": 0, "hash":
    64 zeros} when empty). A ledger that later has fewer records, another hash at that seq, or no file at all has
    lost records this release vouches for (`ledger.anchors`). None on releases published before anchors existed."""

    def to_json(self) -> dict:
        return {
            "release_id": self.release_id,
            "scenario": self.scenario,
            "content_id": self.content_id,
            "commit_id": self.commit_id,
            "parent_release_id": self.parent_release_id,
            "step": self.step,
            "operation": self.operation,
            "reason": self.reason,
            "evidence": list(self.evidence),
            "created_at": self.created_at,
            "runtime_load_id": self.runtime_load_id,
            "meta": copy.deepcopy(self.meta) if self.meta else {},  # a copy, as asdict made: callers may edit it
            "ledger_anchor": dict(self.ledger_anchor) if self.ledger_anchor else None,
        }

    @classmethod
    def from_json(cls, d: dict) -> "Release":
        return cls(
            release_id=d["release_id"],
            scenario=d["scenario"],
            content_id=d["content_id"],
            commit_id=d["commit_id"],
            parent_release_id=d.get("parent_release_id"),
            step=int(d["step"]),
            operation=d["operation"],
            reason=d.get("reason", ""),
            evidence=tuple(d.get("evidence") or ()),
            created_at=d.get("created_at", ""),
            runtime_load_id=d.get("runtime_load_id"),
            meta=dict(d.get("meta") or {}),
            ledger_anchor=_anchor_field(d.get("ledger_anchor")),
        )


def _anchor_field(value) -> dict | None:
    if value is None:
        return None
    if (not isinstance(value, dict) or type(value.get("seq")) is not int or value["seq"] < 0
            or not isinstance(value.get("hash"), str) or len(value["hash"]) != 64):
        raise ValueError("ledger_anchor must be {seq, hash}")
    return {"seq": value["seq"], "hash": value["hash"]}


TRAILER = "reef-release: "
"""The line of a release's Git commit message that carries the release (all of it but `commit_id`, which is the
commit's own id): what lets the log be rebuilt from the store (`releases_from_commits`)."""


def releases_from_commits(commits: list[tuple[str, str]]) -> list[Release]:
    """The release chain recorded in `commits` ((commit id, message), oldest first), checked the way `read()`
    checks the log. Raises StoreError naming the first commit that carries no release or breaks the chain."""
    out: list[Release] = []
    for commit_id, message in commits:
        body = None
        for line in message.splitlines():
            if line.startswith(TRAILER):
                body = line[len(TRAILER):]
        try:
            if body is None:
                raise ValueError("no reef-release line")
            release = Release.from_json({**json.loads(body), "commit_id": commit_id})
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"commit {commit_id[:12]} carries no readable release ({exc}); cannot rebuild past it") from None
        if release.step != len(out) + 1 or (out and release.parent_release_id != out[-1].release_id):
            raise StoreError(f"commit {commit_id[:12]} breaks the chain (step {release.step} after {len(out)})")
        out.append(release)
    return out


class ReleaseLog:
    """Reads tolerate a torn last line (a crash mid-append); `repair()` truncates it under the writer's lock."""

    def __init__(self, path: Path):
        self.path = path
        self._valid: tuple[int, int, bytes, list[Release]] | None = None  # (inode, size, last line, releases)

    def _open(self, flags: int = os.O_RDONLY):
        """The log as a binary file, opened as every state file is (`open_state`): a FIFO there hung every read (an
        open for reading waits for a writer), a symlink was read and repaired through; now their one line, exit 4.
        FileNotFoundError when there is none."""
        return open(open_state(self.path, flags), "rb+" if flags & os.O_RDWR else "rb")

    def read(self) -> list[Release]:
        """Every release, validated. Within a process only the lines appended since the last read are parsed,
        provided the file is the same one and the previously validated last line is still where it was."""
        try:
            with self._open() as f:
                st = os.fstat(f.fileno())
                start, out = 0, []
                if self._valid is not None and self._valid[0] == st.st_ino and self._valid[1] <= st.st_size:
                    _, size, last, cached = self._valid
                    f.seek(max(0, size - len(last)))
                    if not last or f.read(len(last)) == last:
                        start, out = size, list(cached)
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return []
        parts = data.split(b"\n")
        complete = parts[:-1]
        first = len(out) + 1
        for n, line in enumerate(complete, first):
            try:
                rel = Release.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreError(
                    f"{self.path}: line {n} is corrupt ({type(exc).__name__}); nothing was changed — "
                    "restore the file from a backup or inspect it by hand"
                ) from None
            if rel.step != len(out) + 1 or (out and rel.parent_release_id != out[-1].release_id):
                raise StoreError(f"{self.path}: line {n} breaks the chain (step {rel.step} after {len(out)})")
            out.append(rel)
        # a torn tail (parts[-1]) is ignored here and truncated by repair()
        end = start + sum(len(p) + 1 for p in complete)
        last = (complete[-1] + b"\n") if complete else (self._valid[2] if start and self._valid else b"")
        self._valid = (st.st_ino, end, last, list(out))
        return out

    def head(self) -> Release | None:
        """The last complete line, read from the end of the file (cheap on long logs)."""
        try:
            with self._open() as f:
                found = last_lines(f, 1)
        except FileNotFoundError:
            return None
        if not found:
            return None
        line = found[0][1]
        try:
            return Release.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            raise StoreError(f"{self.path}: the last complete line is corrupt; nothing was changed") from None

    def repair(self) -> bool:
        """Truncate a torn last line; call with the scenario lock held. Returns True if it truncated."""
        try:
            with self._open(os.O_RDWR) as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    return False
                f.seek(size - 1)
                if f.read(1) == b"\n":
                    return False
                found = last_lines(f, 1)
                keep = found[0][0] + len(found[0][1]) + 1 if found else 0
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
                return True
        except FileNotFoundError:
            return False

    def append(self, release: Release) -> None:
        append_durable(self.path, canonical(release.to_json()) + b"\n")

    def find(self, ref: str) -> Release:
        """By full id, unique id prefix, step number, or HEAD / HEAD~N (N releases before the head)."""
        releases = self.read()
        ref = ref.strip()
        if ref.upper() == "HEAD" or ref.upper().startswith("HEAD~"):
            back = ref[5:] or "0"
            if not back.isdigit():
                raise NotFound(f"release '{ref}': expected HEAD or HEAD~N")
            if int(back) >= len(releases):
                raise NotFound(f"release '{ref}' does not exist (the chain has {len(releases)} release(s))")
            return releases[-1 - int(back)]
        if ref.isdigit():
            step = int(ref)
            for r in releases:
                if r.step == step:
                    return r
            raise NotFound(f"release step {step} does not exist (head is step {len(releases)})")
        exact = [r for r in releases if r.release_id == ref]
        if exact:
            return exact[0]
        want = ref.upper()
        matches = [r for r in releases if r.release_id.upper().startswith(want) or r.release_id.upper().startswith("REL_" + want)]
        if len(matches) == 1 and len(ref) >= 4:
            return matches[0]
        if len(matches) > 1:
            raise NotFound(f"release id prefix '{ref}' is ambiguous ({len(matches)} releases match)")
        raise NotFound(f"release '{ref}' does not exist in this scenario")
