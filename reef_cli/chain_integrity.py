"""The release chain's integrity against the store's commits, and its rebuild from them.

The log is authoritative and each Git commit on `refs/reef/scenarios/<name>` carries its release (`releases.TRAILER`),
so each can vouch for the other: a log emptied, deleted or cut while the ref has releases past it, or a store that
lost the log head's commit, is refused (DamagedState, exit 4) instead of history restarting at step 1; the log is
rebuilt from the commits by `reef repair releases`. The functions take a `HarnessStore`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .durable import STATE_FILE_MODE, make_dirs, write_atomic
from .errors import DamagedState, NotFound, StoreError
from .releases import Release, ReleaseLog, canonical, releases_from_commits
from .times import format_time


@dataclass(frozen=True)
class RebuildResult:
    """What `reef repair releases` did: the chain now in the log, whether it was written, where the old log went."""

    releases: tuple[Release, ...]
    rebuilt: bool
    kept: Path | None
    tip: str

    def to_json(self) -> dict:
        head = self.releases[-1] if self.releases else None
        return {"rebuilt": self.rebuilt, "releases": len(self.releases), "kept": str(self.kept) if self.kept else None,
                "commit": self.tip, "head": head.to_json() if head else None}



def check_log_not_lost(store) -> None:
    """An empty or missing release log is a new scenario only if the store holds no releases for it; otherwise
    history would restart at step 1 over the old one."""
    if not (store.project.git_dir / "HEAD").exists():
        return
    tip = store.git.get_ref(store.ref)
    if tip is not None:
        state = "empty" if store.log.path.exists() else "gone"
        raise DamagedState(
            f"{store.log.path} is {state} but {store.ref} in {store.project.git_dir} holds the releases of "
            f"scenario '{store.scenario}'; nothing was changed — run 'reef repair releases' to rebuild the log "
            f"from those commits"
        )


def check(store, head: Release | None = None) -> None:
    """Refuse (DamagedState, exit 4) a release chain that lost something: the log emptied while the store has
    commits, the store missing the head's commit (`.reef/git` gone or damaged), or the log missing releases the
    ref has (its last lines cut). A ref one release behind the log (a crash before the ref moved) is fine."""
    head = head or store.log.head()
    if head is None:
        check_log_not_lost(store)
        return
    git = store.git
    if not git.has_commit(head.commit_id):
        raise DamagedState(
            f"{store.project.git_dir} lacks commit {head.commit_id[:12]} of release {head.release_id} (step "
            f"{head.step}), the head in {store.log.path}; nothing was changed — restore .reef/git from a backup"
        )
    tip = git.get_ref(store.ref)
    if tip is not None and tip != head.commit_id and git.has_commit(tip):
        chain = [commit for commit, _ in git.first_parent_chain(tip)]
        if head.commit_id in chain:
            raise DamagedState(
                f"{store.log.path} ends at step {head.step} but {store.ref} has {chain.index(head.commit_id)} "
                f"release(s) after it: the log lost its last lines; nothing was changed — run 'reef repair "
                f"releases' to rebuild it from the store's commits"
            )


def rebuild(store) -> RebuildResult:
    """Rebuild the release log from the store's commits (each carries its release, `releases.TRAILER`): from
    the ref, or from the log's head commit when the log is ahead of it (a crash before the ref moved). A log
    that already matches is left alone; any other is kept beside the new one as `releases.jsonl.lost-<time>`."""
    make_dirs(store.dir)
    with store.lock():
        store.log.repair()
        try:
            old = store.log.read()
            unreadable = None
        except StoreError as exc:
            old, unreadable = [], str(exc)
        git = store.git
        tip = git.get_ref(store.ref)
        if old and git.has_commit(old[-1].commit_id) and (
                tip is None or tip in {c for c, _ in git.first_parent_chain(old[-1].commit_id)}):
            tip = old[-1].commit_id  # the log is at or ahead of the ref: it is the authority
        if tip is None:
            raise NotFound(f"{store.ref} does not exist in {store.project.git_dir}: no releases to rebuild from")
        rebuilt = releases_from_commits(list(reversed(git.first_parent_chain(tip))))
        if not unreadable and [r.to_json() for r in old] == [r.to_json() for r in rebuilt]:
            if git.get_ref(store.ref) != tip:
                git.set_ref(store.ref, tip)
            return RebuildResult(tuple(rebuilt), False, None, tip)
        kept = None
        if store.log.path.exists() and store.log.path.stat().st_size:  # kept first: a crash leaves both copies
            kept = store.log.path.with_name(f"{store.log.path.name}.lost-{format_time(store.now()).replace(':', '')}")
            write_atomic(kept, store.log.path.read_bytes(), STATE_FILE_MODE)
        data = b"".join(canonical(r.to_json()) + b"\n" for r in rebuilt)
        write_atomic(store.log.path, data, STATE_FILE_MODE)
        store.log = ReleaseLog(store.log.path)  # drop the old file's cached view
        if git.get_ref(store.ref) != tip:
            git.set_ref(store.ref, tip)
        return RebuildResult(tuple(rebuilt), True, kept, tip)
