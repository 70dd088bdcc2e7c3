"""The ledger: one append-only, hash-chained JSONL file per scenario recording every run and its feedback.

One module per concept, with `Ledger` as the facade over them (import from here; the modules are its insides):
`record` (the line format and its hash), `chain` (validating and assembling new lines), `writer` (the durable
writer and its named fast paths), `group_commit` (the sync leader), `index` (the id index), `reading`, `verify`
(the chain), `anchors` (what releases vouch for), `acked` (what writers acknowledged: a torn tail from a crash
versus an acknowledged record cut off), `repairs` (torn tails said out loud), `compaction`, `export`.

Why it is built this way:

* **Chain.** Each line is the canonical JSON of a `Record`; `hash` is SHA-256 over the record without `hash`, and
  `prev_hash` is the previous record's `hash` (64 zeros for the first), so an edited, deleted, inserted or reordered
  line shows up in `verify()`; a cut end, a deleted file or one put back in its place shows up against what writers
  acknowledged (`acked`, any file at the path) and the releases' anchors (`anchors`). `compact()` is the only path
  that removes records: it removes a prefix and appends a `compaction` record naming the last removed hash, which is
  what the first kept record chains to.
* **Durability and group commit.** `append` returns only after an fdatasync that began after its line was
  written. Writers write under the writer lock and sync after releasing it (threads sharing an instance too, outside
  its mutex), so concurrent syncs overlap. How they are shared depends on how long syncs take (a moving average):
  - fast syncs (under 1 ms, e.g. NVMe or a VM's virtio disk): each writer issues its own and the filesystem folds
    overlapping ones into shared journal commits. Waking sleepers costs more CPU than such a sync, so user-space
    coordination only slowed this case down (measured: 1.0x the raw rate with 8 writers against ~1.5x).
  - slow syncs (a disk or cloud volume taking milliseconds to flush): one writer leads a sync for everyone
    (`group_commit.SyncLeader`: a shared durable-up-to page and generation locks). ext4 alone splits such writers
    into two groups that take turns, about half per commit; a leader with a short commit delay gathers nearly all
    of them (8 writers: 3.1x -> ~4.9x the raw rate).
  Only a durable size published after a real sync is trusted; cutting a torn line takes back any size beyond it,
  and a new or swapped-in file resets the page.
* **Cheap opens.** Opening never reads the whole file: the writer re-reads only the last line (for `seq` and
  `prev_hash`) and only when the file grew since it last looked. A crash's torn last line is truncated there,
  with a warning and a note in `<ledger>.repairs`. A file replaced under a writer (compaction renames a copy over
  it) is noticed by its descriptor's link count dropping to zero.
* **Id index.** `<ledger>.idx` holds "record_id offset" lines under a header naming the ledger's inode. It is a
  cache, never synced, and written only when a lookup needs it (`get()`, or an append with a client-supplied id,
  i.e. an idempotent resend): it is caught up from its last entry, or rebuilt when torn, stale or wrong. Generated
  ids are fresh ULIDs and need no lookup, so the common append never touches it.
* **Locks.** The writer lock is `flock(2)` on a kept-open descriptor, the primitive `filelock.FileLock` uses on
  the same path (a `FileLock("<ledger>.lock")` excludes ledger writers), but taken blocking: `FileLock` polls
  with sleeps and costs ~130 µs per acquire. POSIX only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from ..durable import open_state, refuse_misplaced
from ..errors import ReefError, StoreError
from . import acked as _acked
from .compaction import REMOVED_LIST_LIMIT, Compaction
from .index import IdIndex
from .reading import Reader
from .repairs import read_repairs
from .record import ZERO_HASH, NewRecord, Record, canonical_json, new_record_id
from .writer import Writer

if TYPE_CHECKING:
    from . import since as _since
    from .anchors import Anchor
    from .verify import VerifyResult

# `anchors`, `since`, `verify` and `export` load on first use: `reef run` and `reef report` append and check the
# acknowledged mark, and need none of them (tests/test_imports.py pins it).
_LAZY = {"Anchor": "anchors", "anchors_of": "anchors", "VerifyResult": "verify", "to_langfuse_score": "export"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

SINCE_ABOVE_BYTES = 64 * 2**20
"""Over this size `verify_since` checks only what was appended since its start (under it, ~1 s, the whole chain)."""
CUT_KIND = _acked.CUT_KIND

__all__ = [
    "Anchor", "Ledger", "NewRecord", "Record", "VerifyResult", "ZERO_HASH", "REMOVED_LIST_LIMIT", "anchors_of",
    "canonical_json", "new_record_id", "to_langfuse_score",
]


class Ledger(Writer, Reader, IdIndex, Compaction):
    """One scenario's ledger file. Cheap to construct; files are opened on first write and kept open.

    One instance may be shared by threads (its operations are serialised); processes coordinate through the lock
    files. Use it as a context manager, or call `close()`, to release descriptors promptly.
    """

    def verify(self, anchors: Iterable[Anchor] = ()) -> VerifyResult:
        """Check every record's hash and every link of the chain, streaming; names the first break and its kind:
        "corrupt" (not a record), "edited", "deleted", "inserted", "reordered" or "foreign" (another scenario).
        With release `anchors`, an intact chain must also reach each of them ("short": records cut off the end,
        or the file gone). Torn tails cut off earlier come back in `repairs`."""
        from . import anchors as _anchors
        from .verify import _Verifier

        result = _Verifier(self.path, self.scenario).run()
        repairs = read_repairs(self.path)
        anchors = list(anchors)
        if result.ok and anchors:
            found = _anchors.problems(self, anchors, every=True)
            if found:
                anchor, why = found[0]
                return replace(result, ok=False, first_bad_seq=anchor.seq, problem="short",
                               message=_anchors.message(self, anchor, why), repairs=repairs,
                               anchors_checked=len(anchors))
            result = replace(result, anchors_checked=len(anchors))
        if result.ok:
            cut = self.acknowledged_cut(thorough=True)
            if cut:
                mark, message = cut
                result = replace(result, ok=False, first_bad_seq=mark.seq, problem="cut", message=message)
            elif result.count and _acked.read(self.sync_path) is None:
                warning = _acked.unmarked(self.path, result.count)
                result = replace(result, mark_missing=True, message=f"{result.message}; {warning}",
                                 warnings=(*result.warnings, warning))
        return replace(result, repairs=repairs) if repairs else result

    def position(self) -> _since.Position | None:
        """Where the chain ends now, for a later `verify_since`."""
        from . import since as _since

        return _since.position(self.path)

    def verify_since(self, start: _since.Position | None, last: Record | None = None) -> VerifyResult:
        """`verify()`, bounded for a big file that was at `start` when this process began appending: only the
        records after `start` are checked, each chained onto it (`since`); `since_seq` says so. Whatever is not
        plain appends (a replaced or shorter file, a compaction, a broken or torn line, acknowledged records cut
        off) gets the full verify, which names it. `last`, the newest record this process appended, must still be
        in the file either way: a ledger replaced by an older copy, or deleted, verifies as a chain but lost it."""
        from . import since as _since
        from .verify import VerifyResult

        if start is not None:
            try:
                big = os.stat(self.path).st_size > SINCE_ABOVE_BYTES
            except OSError:
                big = False
            mine = (last.seq, last.hash) if last is not None else None
            count = _since.appended_since(self.path, self.scenario, start, mine) if big else None
            if count is not None and self.acknowledged_cut(thorough=True) is None:
                return VerifyResult(True, count, message=f"{self.path}: the {count} records after record "
                                    f"{start.seq} chain onto it", since_seq=start.seq, repairs=read_repairs(self.path))
        result = self.verify()
        if result.ok and (last is not None or start is not None):
            lost = self._lost_since(start, last)
            if lost:
                return replace(result, ok=False, problem="lost", message=lost)
        return result

    def _lost_since(self, start: _since.Position | None, last: Record | None) -> str | None:
        try:
            tail = self.tail(1)
        except StoreError:
            return None  # the chain verified: a last line the tail cannot read is the verify's to report
        newest = tail[0].seq if tail else 0
        if last is not None:
            kept = newest >= last.seq
            if kept and newest - last.seq < 1000:  # usually the newest or nearly: read backwards, no index built
                kept = self.tail(newest - last.seq + 1)[0].hash == last.hash
            elif kept:
                try:
                    kept = self.get(last.record_id).hash == last.hash
                except ReefError:
                    kept = False
            if not kept:
                return (f"{self.path}: record {last.record_id} (seq {last.seq}), the newest this process appended, "
                        f"is not in the file any more (it ends at seq {newest}): the ledger was replaced, cut or "
                        "deleted meanwhile; restore it from a backup")
        elif start is not None and newest < start.seq:
            return (f"{self.path}: it ends at seq {newest}, before seq {start.seq} where it ended when this process "
                    "began: the ledger was replaced, cut or deleted meanwhile; restore it from a backup")
        return None

    def acknowledged_cut(self, thorough: bool = False) -> tuple[_acked.Mark, str] | None:
        """The acknowledged mark and the line saying so when the file at the ledger's path lost records writers
        acknowledged (`acked`: cut off the end, the file gone or replaced by a shorter one, another record at the
        mark's seq); None when nothing says so. Without `thorough` (`reef run` asks before every session) a file of
        the mark's inode whose line ending at the mark's end is the mark's record is taken as it is (one read); one
        whose records before the mark's moved is walked once (`acked.moved`), and a break there is refused too
        (`acked.edited`); `verify` looks at the record and walks the chain itself."""
        mark = _acked.read(self.sync_path)
        if mark is None or not mark.seq:
            return None
        try:
            fd = open_state(self.path, os.O_RDONLY)  # a symlink or a directory in its place: its one line, exit 4
        except FileNotFoundError:
            return mark, _acked.Loss(mark, "gone").message(self.path)
        try:
            st = os.fstat(fd)
            if not thorough and st.st_ino == mark.ino and st.st_size >= mark.end and _acked.at_mark(fd, mark):
                return None  # it still holds what was acknowledged, where it was
            end = _acked.records_end(fd, st.st_size)
            loss = _acked.judge(mark, fd, st.st_ino, st.st_size, end) if end is not None else None
            if loss is None and not thorough and end is not None and _acked.moved(mark, fd, st.st_ino, st.st_size, end):
                # bytes before the mark's record changed length: walk the chain (only now) to tell a break from a
                # reformat; a `thorough` caller (verify, repair) walks it anyway and names the break itself
                from .verify import _Verifier

                result = _Verifier(self.path, self.scenario).run()
                if not result.ok:
                    return mark, _acked.edited(self.path, mark, result.message)
        except StoreError:
            return None  # a corrupt last record: the chain's to report
        finally:
            os.close(fd)
        return (mark, loss.message(self.path)) if loss is not None else None

    def check_files(self) -> None:
        """Raise MisplacedState (exit 4, the line `open_state` gives) when the ledger, its lock or its sync page is a
        directory or a symlink: an append would meet it only after `reef run` had run the whole session."""
        for path in (self.path, self.lock_path, self.sync_path):
            refuse_misplaced(path)

    def accept_cut(self) -> Record | None:
        """Record that acknowledged records are gone (cut off the end, the file gone or replaced: `acked.Loss`): the
        bytes after the last complete record are kept aside (`Writer.set_aside_cut`) and a `ledger_cut` record in the
        chain says what was lost and where the kept bytes are; its append moves the mark. None when no acknowledged
        record is missing."""
        found = self.set_aside_cut()
        if found is None:
            return None
        loss, payload = found
        self._accepting = loss.mark  # this append, and only for this mark, goes over the loss it records
        try:
            return self.append(CUT_KIND, payload, release_id=None, content_id=None)
        finally:
            self._accepting = None

    def anchor(self) -> dict:
        """{"seq", "hash"} of the last record, for a release to keep as its anchor (`Release.ledger_anchor`)."""
        from . import anchors as _anchors

        return _anchors.head_anchor(self)

    def check_anchors(self, anchors: Iterable[Anchor]) -> None:
        """Raise DamagedState (exit 4, one line naming this ledger and the anchor) when the ledger falls short of
        the highest or the newest release anchor: the cheap check reflect and evolve make before reading."""
        from . import anchors as _anchors

        _anchors.check(self, list(anchors))

    def accept_loss(self, anchors: Iterable[Anchor], found: list | None = None) -> Record | None:
        """Record, in the chain, that the records behind every anchor this ledger falls short of are lost (an
        `anchor_loss` record naming each anchor and why); those anchors are not held against it again. Returns
        the record, or None when the ledger holds every anchor."""
        from . import anchors as _anchors

        return _anchors.accept_loss(self, list(anchors), found)
