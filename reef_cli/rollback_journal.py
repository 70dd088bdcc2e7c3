"""The one-line journal of a `reef rollback` in flight, so a rollback killed between its publish and its working-tree
write is finished, never mistaken for the user's edits.

Written (durably) before the rollback publishes and removed once the working tree holds the new head. Left behind,
it is read against the head: still the release the rollback started from → it never published (stale, dropped);
a rollback release of exactly that step → the publish happened and the working tree may still hold the old files
(`pending`); anything else → a later publish superseded it (stale, dropped). `reef status` and `reef doctor` name a
pending one, `reef publish` of the working tree refuses (it would silently undo the rollback), and the next
`reef rollback` finishes it where the files still hold the old release's bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

NAME = "rollback.json"


@dataclass(frozen=True)
class Pending:
    base: object  # Release the rollback rolled back from
    target: object  # the Release whose content it republished
    head: object  # the rollback's own release (the head)

    def sentence(self) -> str:
        return (f"rollback to step {self.target.step} (published as step {self.head.step}, {self.head.release_id}) "
                f"was interrupted before it wrote the working tree, which may still hold step {self.base.step}'s "
                f"files; run 'reef rollback {self.target.step}' to finish it (publishing the working tree now would "
                f"undo the rollback)")

    def to_json(self) -> dict:
        """As `reef status --json` shows it: the releases involved, the sentence, and the command that finishes it."""
        return {"rolled_back_from": {"release_id": self.base.release_id, "step": self.base.step},
                "target": {"release_id": self.target.release_id, "step": self.target.step},
                "published_as": {"release_id": self.head.release_id, "step": self.head.step},
                "message": f"a {self.sentence()}", "fix": f"reef rollback {self.target.step}"}


def begin(store, base, target) -> None:
    from .durable import STATE_FILE_MODE, write_atomic

    data = json.dumps({"from": base.release_id, "to": target.release_id}, sort_keys=True).encode() + b"\n"
    write_atomic(store.dir / NAME, data, STATE_FILE_MODE)


def done(store) -> None:
    try:
        (store.dir / NAME).unlink()
    except FileNotFoundError:
        pass


def pending(store) -> Pending | None:
    """The interrupted rollback whose working-tree write is still owed, or None (a stale journal is dropped). Read
    as state is (`durable.read_state`): a FIFO, a symlink or a huge file there is its one line, exit 4, where a plain
    read hung `reef status` and `reef doctor` on a FIFO."""
    from .durable import SMALL_STATE_LIMIT, read_state

    raw = read_state(store.dir / NAME, SMALL_STATE_LIMIT)
    if raw is None:
        return None
    try:
        j = json.loads(raw)
        base_id, target_id = j["from"], j["to"]
    except (ValueError, KeyError, TypeError):
        return None  # torn before its rename could not happen (write_atomic); a hand-mangled one names nothing
    head = store.head()
    meta = head.meta if head is not None else {}
    if (head is not None and head.operation == "rollback" and meta.get("rolled_back_release_id") == base_id
            and meta.get("rollback_target_release_id") == target_id):
        return Pending(store.find(base_id), store.find(target_id), head)
    done(store)  # the head is still where it started (never published), or a later release superseded it
    return None


def finish(store, found: Pending) -> None:
    """Write the rollback's files over the old release's, where the working tree still holds those; an edit saved
    since is kept and named (ConflictError, exit 3)."""
    try:
        store.sync_worktree(store.files_of(found.base), store.files_of(found.head), guard=True)
    finally:
        done(store)  # written, or all but the user's kept edits, which the ConflictError names
