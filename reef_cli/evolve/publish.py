"""The one door through which evolve, promote and demote publish: a release and the working tree move together.

`publish_gated` checks that a gated publish is for exactly the bytes the gate judged, writes the working tree
under compare-and-swap (worktree.py), then publishes with the head as compare-and-swap; a refusal or failure
before the release exists puts the working tree back as it was.
"""

from __future__ import annotations

from ..errors import PolicyError
from .worktree import expected_bytes, restore, write_tree


def check_verdict_bytes(store, files: dict, verdict: dict | None) -> None:
    """A release that rests on a verdict carries exactly the bytes the gate judged."""
    if not verdict or "candidate_content_id" not in verdict:
        return
    cid = store.git.write_tree(dict(files))
    if cid != verdict["candidate_content_id"]:
        raise PolicyError(f"the gate judged content {verdict['candidate_content_id'][:12]}, not {cid[:12]}; "
                          "nothing was published")


def publish_gated(store, *, head, base: dict, files: dict, expected: dict, reason: str, operation: str,
                  evidence: tuple[str, ...] = (), meta: dict | None = None, verdict: dict | None = None,
                  before_write=None):
    """Publish `files` over `head` and bring the working tree to them; returns the PublishResult.

    `expected` maps every path whose bytes change to the sha256 the working tree held when the plan was made (None:
    absent). The working tree is written first, each file compare-and-swapped against `expected` right before it
    is replaced (a user's edit since then stops everything with exit 3, nothing written); then the release is
    published with the head as compare-and-swap. If the publish is refused, the files written are put back. A
    crash between the two leaves a journal in phase `writing`, which the next evolve finishes the same way.
    `before_write` runs after every check and before the first byte is replaced (the journal's `writing` save).
    """
    check_verdict_bytes(store, files, verdict)
    written = write_tree(store.project.root, base, files, expected, before_write=before_write)
    try:
        return store.publish(reason=reason, operation=operation, files=files, expected_head=head.release_id,
                             evidence=tuple(evidence), meta=dict(meta or {}))
    except BaseException:
        if not _landed(store, head, files):  # interrupted after the commit point: the release stands, so do its files
            restore(store.project.root, written)
        raise


def _landed(store, head, files: dict) -> bool:
    """Whether the release of `files` over `head` exists after all (an interrupt after the log line was written)."""
    try:
        now = store.head()
        return (now is not None and now.parent_release_id == head.release_id
                and now.content_id == store.git.write_tree(dict(files)))
    except Exception:  # noqa: BLE001 — unknowable: keep the files; the journal's resume sorts it out
        return True


__all__ = ["publish_gated", "check_verdict_bytes", "expected_bytes"]
