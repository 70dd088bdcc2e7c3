"""Release anchors: what lets the ledger notice records that are gone.

A hash chain shows an edited, inserted or reordered line, but not a cut: a ledger truncated to its first lines, or
deleted, is still a valid chain. So each release records the ledger's last record at publish, `{"seq": N, "hash":
H}` (`Release.ledger_anchor`, also in the release's Git commit), and a ledger that later has fewer records, another
record at that seq, or no file at all while anchors exist has lost records a release vouches for.

A user with no backup records the loss instead (`reef repair ledger --accept-loss`): an `anchor_loss` record in the
chain itself names each anchor given up and why, and those anchors are not held against the ledger again. The loss
is thereby said once, durably, and stays visible to anyone reading the ledger.

Checking one anchor costs a bisection of the file (`Reader._seq_offset`) and one line, not a pass over it.
`check_anchors` runs the cheap check (the highest anchor and the newest one) before reflect and evolve read the
ledger; `verify` checks every distinct anchor. An anchor whose record a compaction removed is satisfied by the
ledger still reaching its seq (the compaction record is verify's to check).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..durable import open_state
from ..errors import DamagedState, StoreError
from .reading import _read_line_at
from .record import ZERO_HASH, _decode

if TYPE_CHECKING:
    from . import Ledger


@dataclass(frozen=True)
class Anchor:
    """One release's record of the ledger: its last record's `seq` and `hash` when the release was published."""

    seq: int
    hash: str
    release_id: str
    step: int

    def describe(self) -> str:
        return f"release {self.release_id} (step {self.step}) anchors seq {self.seq} hash {self.hash[:16]}"


def anchors_of(releases: Iterable) -> list[Anchor]:
    """The anchors of `releases` (objects with `ledger_anchor`, `release_id` and `step`), oldest first."""
    out = []
    for release in releases:
        anchor = release.ledger_anchor
        if anchor:
            out.append(Anchor(anchor["seq"], anchor["hash"], release.release_id, release.step))
    return out


def head_anchor(ledger: Ledger) -> dict:
    """{"seq", "hash"} of the ledger's last record (seq 0 and 64 zeros when it has none), for a release to keep.
    A torn last line is skipped, as readers skip it; a last record that is corrupt raises StoreError."""
    last = ledger.tail(1)
    if not last:
        return {"seq": 0, "hash": ZERO_HASH}
    return {"seq": last[0].seq, "hash": last[0].hash}


def shortfall(ledger: Ledger, anchor: Anchor) -> str | None:
    """Why the ledger falls short of `anchor`, or None when it holds it."""
    if anchor.seq == 0:
        return None
    try:
        fd = open_state(ledger.path, os.O_RDONLY)  # never through a symlink (reading.open_for_reading)
    except FileNotFoundError:
        return "the ledger file is gone"
    try:
        offset = ledger._seq_offset(anchor.seq)
        raw = _read_line_at(fd, offset)
        record = None
        if raw:
            try:
                record, _ = _decode(raw)
            except ValueError:
                record = None  # a torn last line: nothing at or after the seq
    finally:
        os.close(fd)
    if record is None:
        last = ledger.tail(1)
        if not last:
            return "the ledger has no records"
        return f"the ledger ends at seq {last[0].seq}"
    if record.seq == anchor.seq:
        if record.hash != anchor.hash:
            return f"seq {anchor.seq} there is another record ({record.record_id}, hash {record.hash[:16]})"
        return None
    if offset == 0 and record.kind != "compaction" and _compacted_past(ledger, anchor.seq):
        return None
    return f"seq {anchor.seq} is missing (the next record is seq {record.seq})"


def _compacted_past(ledger: Ledger, seq: int) -> bool:
    """Whether a compaction record in the ledger says it removed `seq` (the first record's seq is past it)."""
    for record in ledger.iter_records(kind="compaction"):
        if record.payload.get("first_kept_seq", 0) > seq:
            return True
    return False


LOSS_KIND = "anchor_loss"


def _waived(ledger: Ledger) -> set[tuple[int, str]]:
    """Anchors given up by `anchor_loss` records (read only when some anchor fails: it is a pass over the file)."""
    out = set()
    try:
        for record in ledger.iter_records(kind=LOSS_KIND):
            for item in record.payload.get("anchors") or ():
                if isinstance(item, dict) and type(item.get("seq")) is int and isinstance(item.get("hash"), str):
                    out.add((item["seq"], item["hash"]))
    except StoreError:
        return set()  # a damaged ledger waives nothing
    return out


def problems(ledger: Ledger, anchors: list[Anchor], *, every: bool) -> list[tuple[Anchor, str]]:
    """The anchors the ledger falls short of, with why (anchors an `anchor_loss` record gave up are not). Not
    `every`: only the highest anchor and the newest."""
    if not anchors:
        return []
    if every:
        chosen: dict[tuple[int, str], Anchor] = {}
        for anchor in anchors:
            chosen.setdefault((anchor.seq, anchor.hash), anchor)
        candidates = sorted(chosen.values(), key=lambda a: -a.seq)
    else:
        highest = max(anchors, key=lambda a: a.seq)
        candidates = [highest] if anchors[-1] == highest else [highest, anchors[-1]]
    found = []
    for anchor in candidates:
        try:
            why = shortfall(ledger, anchor)
        except StoreError as exc:
            why = str(exc)
        if why:
            found.append((anchor, why))
    if found:
        waived = _waived(ledger)
        found = [(anchor, why) for anchor, why in found if (anchor.seq, anchor.hash) not in waived]
    return found


def accept_loss(ledger: Ledger, anchors: list[Anchor], found: list[tuple[Anchor, str]] | None = None):
    """Append an `anchor_loss` record giving up every anchor the ledger falls short of (`found`, when the caller
    judged them before changing the ledger); None when it holds all."""
    if found is None:
        found = problems(ledger, anchors, every=True)
    if not found:
        return None
    given_up = [{"release_id": a.release_id, "step": a.step, "seq": a.seq, "hash": a.hash, "why": why}
                for a, why in found]
    return ledger.append(LOSS_KIND, {"anchors": given_up, "ledger_end": head_anchor(ledger)},
                         release_id=found[-1][0].release_id, content_id=None)


def message(ledger: Ledger, anchor: Anchor, why: str) -> str:
    """The one line that names the ledger, the anchor and what is wrong."""
    return (
        f"ledger {ledger.path} falls short of its anchor: {anchor.describe()}, but {why}; records are missing — "
        f"restore the ledger from a backup, or record the loss with 'reef repair ledger --accept-loss' (nothing was "
        f"changed)"
    )


def check(ledger: Ledger, anchors: list[Anchor], *, every: bool = False) -> None:
    """Raise DamagedState (exit 4) naming the ledger and the first anchor it falls short of."""
    found = problems(ledger, anchors, every=every)
    if found:
        raise DamagedState(message(ledger, *found[0]))
