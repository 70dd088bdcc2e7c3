"""The durable writer: the kept-open descriptors, the writer lock, the tail kept in memory, and appends that return
only after an fdatasync that began after their line was written (see the package docstring for group commit).

The measured fast paths live here, named: `Writer.append` (the flat append of a known kind with a generated id and
the system clock), `reserve_id` (an id that skips the idempotency lookup), and `_sync_outside` (syncs outside the
mutex, fast ones issued directly, slow ones led by `group_commit.SyncLeader`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from ..durable import fsync_dir, make_dirs, open_state, write_all, write_atomic
from ..errors import ConflictError, DamagedState, InvalidInput, StoreError
from ..ids import new_id_at
from ..times import format_ms, format_time
from . import acked, group_commit
from .chain import (
    _Draft, _draft, _draft_of, _finish_line, _json_str, _known_kinds, _known_refs, _line_head, _line_tail,
    _new_record, _quote,
)
from .group_commit import SyncLeader
from .reading import _line_number
from .repairs import _last_line_before, note_newline, note_repair, note_unmarked
from .record import _REF_RE, ZERO_HASH, NewRecord, Record, _BadJSON, _decode, _encode, _quick_tail, _utf8, new_record_id

_fdatasync = getattr(os, "fdatasync", os.fsync)
_this_pid = [os.getpid()]
"""This process's id, kept current by a fork hook: asking the kernel on every append costs a system call."""
os.register_at_fork(after_in_child=lambda: _this_pid.__setitem__(0, os.getpid()))


class Writer:
    """The writing half of `Ledger`: state, descriptors and appends. `Ledger` adds reading, the id index,
    verification and compaction over the same state."""

    def __init__(self, path: str | os.PathLike[str], scenario: str, *, now: Callable[[], datetime] | None = None):
        if type(scenario) is not str or not _REF_RE.fullmatch(scenario) or not _utf8(scenario):
            raise InvalidInput(f"scenario name {scenario!r} must be a non-empty string without control characters")
        self.path = Path(path)
        self.scenario = scenario
        self._scenario_json = _quote(scenario)
        self._clock = now  # None: the system clock, read as time_ns (see _stamp)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.index_path = self.path.with_name(self.path.name + ".idx")
        self.sync_path = self.path.with_name(self.path.name + ".sync")
        self._leader = SyncLeader(str(self.sync_path))
        self._marks: acked.MarkPage | None = None  # the acknowledged mark, from the first open (see `acked`)
        self._accepting: acked.Mark | None = None  # a loss being recorded (`set_aside_cut`): not refused for it
        self._mutex = threading.Lock()
        self._pid: int | None = None
        self._fd = self._lock_fd = self._idx_fd = -1
        self._syncing = 0  # appends between their write and the end of their sync (they sync without the mutex)
        self._sync_ns = 0  # moving average of this instance's syncs
        self._reserved: set[str] = set()  # ids from reserve_id(), not yet appended
        self._retired: list[int] = []
        self._sync_failed: str | None = None  # a sync failed: nothing more is acknowledged (see _refuse_after_failed_sync)
        self._in_sync: set[int] = set()  # syncs of this instance in flight (see _sync_outside)
        self._sync_ids = 0
        self._sync_done = threading.Condition()
        self._ino = 0
        self._size = -1  # ledger size when this process last held the writer lock; -1: unknown
        self._unmarked = 0  # the inode whose records had no acknowledged mark, once noted (see _loss)
        self._seq = 0
        self._hash = ZERO_HASH
        self.fsyncs = 0
        """Syncs this instance issued (one per append or batch; the kernel shares their commits)."""
        self.repairs: list[dict] = []
        """Torn tails this instance cut off (each also noted in `<ledger>.repairs` and on stderr)."""

    # -- lifecycle

    def close(self) -> None:
        with self._mutex:
            self._close_fds()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._close_fds()
        except Exception:  # noqa: BLE001 - at interpreter shutdown parts of os may already be gone
            pass

    def _close_fds(self) -> None:
        if self._pid == os.getpid():
            if self._fd >= 0:
                self._retire(self._fd)
            for fd in (self._lock_fd, self._idx_fd):
                if fd >= 0:
                    os.close(fd)
        else:  # a forked child: the parent's threads and their syncs did not come along
            self._syncing, self._retired = 0, []
        self._fd = self._lock_fd = self._idx_fd = -1
        self._pid = None
        self._ino = 0
        self._size = -1

    def _ensure_open(self) -> None:
        if self._pid == _this_pid[0]:
            return
        self._close_fds()  # after fork: inherited descriptors would share the parent's locks, so start over
        try:
            make_dirs(self.path.parent)
            self._lock_fd = open_state(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot open the ledger files next to {self.path}: {exc.strerror}") from None
        self._pid = _this_pid[0]

    def _open_ledger(self) -> None:
        """(Re)open the file at `path`, creating it durably if missing. Called under the writer lock."""
        if self._fd >= 0:
            self._retire(self._fd)
            self._fd = -1
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        created = False
        try:
            if self._marks is None:
                self._marks = acked.MarkPage(self._leader.page())
            if not os.path.lexists(self.path):
                mark = self._marks.read()
                if mark is not None and mark.seq and mark != self._accepting:
                    # acknowledged records were in a file here: a new one would bury the loss (`acked`)
                    raise DamagedState(acked.Loss(mark, "gone").message(self.path))
                if self._accepting is None:
                    # Forget a mark of no record before the new file exists: a crash between the create and the
                    # reset below leaves nothing that could hold the new file to an old end.
                    self._marks.reset(0, 0, 0, ZERO_HASH)
            try:
                self._fd = open_state(self.path, flags | os.O_CREAT | os.O_EXCL, 0o600)
                fsync_dir(self.path.parent)
                created = True
            except FileExistsError:
                self._fd = open_state(self.path, flags)
        except OSError as exc:
            raise StoreError(f"cannot open ledger {self.path}: {exc.strerror}") from None
        st = os.fstat(self._fd)
        if created and self._accepting is None:  # recording a gone file's loss: its mark stays until that is durable
            self._marks.reset(st.st_ino, 0, 0, ZERO_HASH)
        self._ino, self._size = st.st_ino, -1
        # A sync page left from a file that had this inode number before (deleted and recreated, say) must not
        # vouch for this one: nothing in it is known durable beyond what its size allows.
        self._leader.correct(lambda current: current[0] == st.st_ino and current[1] > st.st_size,
                             lambda current: (st.st_ino, st.st_size))

    def _sync_outside(self, fd: int, ino: int, end: int, own: int, seq: int, digest: str,
                      then: Callable[[], object] | None = None) -> None:
        """Make the ledger (inode `ino`, descriptor `fd`) durable up to offset `end` (`own` bytes of it ours; the
        record ending there is `seq`, `digest`) and note it as acknowledged (`acked`: a pwrite into the `.sync`
        page), without holding the mutex, so threads sharing this instance sync at the same time as processes do. The
        caller counted itself in `_syncing` under the mutex; while that is non-zero, replaced descriptors are kept
        open (`_retire`). Fast syncs are issued here and shared by the kernel; slow ones are led. `then` runs
        as soon as the sync returns (see `append`)."""
        took = 0
        try:
            # A writeback error is reported once per open file: of the threads syncing this instance's shared
            # descriptor at the same time, one is told EIO and the others 0. So a sync that returned 0 is trusted
            # only once every sync it overlapped has returned too, and none of them failed (_overlapped).
            token = self._syncs_begin()
            try:
                if max(self._sync_ns, self._leader.shared_average()) >= group_commit.COORDINATE_ABOVE_NS:
                    self._leader.make_durable(fd, ino, end, own, _fdatasync, self._noted)
                else:
                    started = time.monotonic_ns()
                    _fdatasync(fd)
                    took = time.monotonic_ns() - started
            except OSError as exc:
                self._sync_failed = exc.strerror or type(exc).__name__
                raise StoreError(f"cannot sync {self.path}: {exc.strerror}; the last records may not be "
                                 f"durable") from None
            finally:
                others = self._syncs_end(token)
            if others:
                self._overlapped(others)
            if self._sync_failed is not None:
                self._refuse_after_failed_sync(written=True)
            if self._marks is not None:
                self._marks.note(ino, end, seq, digest)
            if then is not None:
                then()
        finally:
            with self._mutex:
                if took:
                    self._note_sync(took)
                self._syncing -= 1
                if not self._syncing and self._retired:
                    for old in self._retired:
                        os.close(old)
                    self._retired.clear()

    def _syncs_begin(self) -> int:
        with self._sync_done:
            self._sync_ids += 1
            self._in_sync.add(self._sync_ids)
            return self._sync_ids

    def _syncs_end(self, token: int) -> set[int]:
        """This sync is over: the others still in flight, which it overlapped."""
        with self._sync_done:
            self._in_sync.discard(token)
            self._sync_done.notify_all()
            return set(self._in_sync)

    def _overlapped(self, others: set[int]) -> None:
        """Wait until the syncs this one overlapped have returned (a failed one sets `_sync_failed` first)."""
        with self._sync_done:
            self._sync_done.wait_for(lambda: not (others & self._in_sync))

    @property
    def sync_failure(self) -> str | None:
        """Why this instance acknowledges nothing more (a sync of it failed), or None."""
        return self._sync_failed

    def _refuse_after_failed_sync(self, written: bool = False) -> None:
        """After a failed fdatasync the kernel may have dropped the pages it could not write and report success for
        the next sync: records chained after them would be acknowledged over a hole. This instance acknowledges
        nothing more; a new one (a restarted gateway) reads the ledger as the disk holds it."""
        this = "this record was written but is not acknowledged" if written else "nothing was appended"
        raise StoreError(f"an earlier sync of {self.path} failed ({self._sync_failed}); records written since may not "
                         f"be on disk, so nothing more is appended by this process: check the disk, then restart "
                         f"it ({this})")

    def _note_sync(self, took: int) -> None:
        """Count a sync and fold its duration into this instance's moving average (under the mutex). A sample
        counts as at most twice the threshold, so one stalled sync does not turn the next few to the leader's
        path (see `group_commit.clamped`)."""
        self.fsyncs += 1
        took = group_commit.clamped(took)
        self._sync_ns = took if not self._sync_ns else (7 * self._sync_ns + took) // 8

    def _noted(self, took: int) -> None:
        with self._mutex:
            self._note_sync(took)

    def _retire(self, fd: int) -> None:
        """Close a replaced ledger descriptor, or keep it until the syncs in flight on it are done."""
        if self._syncing:
            self._retired.append(fd)
        else:
            os.close(fd)

    def _sync_now(self) -> None:
        try:
            _fdatasync(self._fd)
        except OSError as exc:
            self._sync_failed = exc.strerror or type(exc).__name__
            raise StoreError(f"cannot sync {self.path}: {exc.strerror}; the last records may not be durable") from None
        self.fsyncs += 1

    # -- the writer's view of the tail (under the writer lock)

    def _refresh(self) -> None:
        """Catch up with what other processes wrote since we last held the lock; repair a torn tail. A file
        replaced since (by compaction, under this lock, or from outside) has no links left: open the path again."""
        if self._fd < 0:
            self._open_ledger()
        st = os.fstat(self._fd)
        if st.st_nlink == 0:
            self._open_ledger()
            st = os.fstat(self._fd)
        if st.st_size != self._size:
            self._load_tail(st.st_size)

    def _load_tail(self, size: int, repaired: bool = False) -> None:
        if size == 0:
            self._refuse_cut(0, 0, (0, ZERO_HASH))
            self._size, self._seq, self._hash = 0, 0, ZERO_HASH
            return
        span = min(size, 4096)
        while True:
            start = size - span
            data = os.pread(self._fd, span, start)
            body_end = len(data) if data.endswith(b"\n") else data.rfind(b"\n") + 1
            cut = data.rfind(b"\n", 0, body_end - 1) if body_end else -1
            if start > 0 and (body_end == 0 or cut < 0):
                span = min(size, span * 4)  # the last line (or the torn part) is longer than this window
                continue
            break
        if body_end < len(data):
            if repaired:
                raise StoreError(f"{self.path}: the end of the file changed while a torn line was being removed")
            if acked.whole_tail(self._fd, start + body_end, size) is not None:
                self._add_newline(size)  # a whole record short of its newline: complete it, never cut it
                return self._load_tail(size + 1, repaired=True)
            self._refuse_cut(start + body_end, size)
            self._truncate(start + body_end)
            return self._load_tail(start + body_end, repaired=True)
        raw = data[cut + 1 : body_end - 1]
        offset = start + cut + 1
        quick = _quick_tail(raw)
        if quick is not None:
            self._refuse_cut(size, size, quick)
            self._size, (self._seq, self._hash) = size, quick
            return None
        try:
            record, ok = _decode(raw)
        except _BadJSON:
            if repaired:
                raise StoreError(
                    f"{self.path}: line {_line_number(self.path, offset)} is not valid JSON; the file is corrupt "
                    f"(nothing was changed)"
                ) from None
            self._refuse_cut(offset, size)
            self._truncate(offset)  # a complete last line that is not JSON is a torn write too (e.g. zero-filled)
            return self._load_tail(offset, repaired=True)
        except ValueError as exc:
            raise StoreError(f"{self.path}: line {_line_number(self.path, offset)} is corrupt: {exc}") from None
        if not ok:
            raise StoreError(
                f"{self.path}: line {_line_number(self.path, offset)} (record {record.record_id}) does not match "
                f"its hash; refusing to append (nothing was changed); run verify"
            )
        self._refuse_cut(size, size, (record.seq, record.hash))
        self._size, self._seq, self._hash = size, record.seq, record.hash
        return None

    def _loss(self, records_end: int, size: int, last: tuple[int, str] | None = None) -> acked.Loss | None:
        """What the file lost of the acknowledged records (`acked.judge`): its complete records end at `records_end`
        with `last` (seq, hash; read when not given). The mark speaks for any file at the path, of any inode. On a
        first look at a file (or one of another inode than the mark's) a file past the mark's record is checked
        for that record too; catching up with other writers' appends is not, so it costs nothing there."""
        marks = self._marks
        mark = marks.read() if marks is not None else None
        if mark is None:
            if records_end and self._unmarked != self._ino and (self._size < 0 or (marks is not None and marks.gone())):
                # a first look at records no mark speaks for, or a file changed since this writer looked with the
                # page emptied meanwhile: this writer's append starts a mark; said, and kept in `<ledger>.repairs`,
                # so a removed or emptied `.sync` is not erased by it (`acked.unmarked`)
                self._unmarked = self._ino
                self.repairs.append(note_unmarked(self.path, records_end, self._seq_before(records_end)))
            return None
        self._unmarked = 0  # marked again: a later removal is said again
        if mark == self._accepting:
            return None
        return acked.judge(mark, self._fd, self._ino, size, records_end, last,
                           thorough=self._size < 0 or self._ino != mark.ino)

    def _refuse_cut(self, records_end: int, size: int, last: tuple[int, str] | None = None) -> None:
        """Refuse to go on over a ledger that lost acknowledged records: cutting its last line as a crash's torn
        write, or appending in place of the missing records, would delete a durable record or bury the loss (and
        the append's mark would erase the evidence). Nothing is changed; the user restores it or records the loss."""
        loss = self._loss(records_end, size, last)
        if loss is not None:
            self._size = -1  # look again next time: the user may have restored the file meanwhile
            raise DamagedState(loss.message(self.path))
        if self._size < 0 or size < self._size:  # a first look, or a file that shrank (appends never shrink it)
            self._refuse_edited(records_end, size, last)

    def _refuse_edited(self, records_end: int, size: int, last: tuple[int, str] | None) -> None:
        """On a first look (a new process, a reopened file; never per append): refuse to append onto a chain broken
        before the last acknowledged record. Walking the chain on every open is O(n) (`reef report` starts in
        ~0.1 s, a 300k-record ledger takes seconds to verify), so it is walked only when the mark's record is not
        where it was acknowledged (`acked.moved`, one read): a deletion, insertion or length-changing edit before
        it. An edit that keeps every line's length is left to `reef ledger verify` (doctor runs it)."""
        mark = self._marks.read() if self._marks is not None else None
        if mark is None or not mark.seq or mark == self._accepting:
            return
        if not acked.moved(mark, self._fd, self._ino, size, records_end, last):
            return
        from .verify import _Verifier

        result = _Verifier(self.path, self.scenario).run()
        if not result.ok:
            raise DamagedState(acked.edited(self.path, mark, result.message))

    def set_aside_cut(self) -> tuple[acked.Loss, dict] | None:
        """Record-the-loss half of `Ledger.accept_cut` (`reef repair ledger --accept-loss`): when acknowledged records
        are missing, keep the bytes after the last complete record in `<ledger>.cut-<offset>-<hash>` (synced
        before the file is cut back to that record; a gone file is created empty). Returns the loss and the
        payload of the `ledger_cut` record the caller appends, or None when no acknowledged record is missing.
        The mark is left as it is: only that record's append moves it, so a crash at any point before leaves
        the loss reported, and one after leaves the record that names the mark (`acked.recorded`)."""
        with self._mutex:
            self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                if self._marks is None:
                    self._marks = acked.MarkPage(self._leader.page())
                self._accepting = self._marks.read()  # a gone file is created for the record, its mark kept
                gone = not os.path.lexists(self.path)
                try:
                    if self._fd < 0 or os.fstat(self._fd).st_nlink == 0:
                        self._open_ledger()
                finally:
                    self._accepting = None
                size = os.fstat(self._fd).st_size
                records_end = self._records_end(size)
                self._size = -1  # a first look: the mark's record is checked for, not only its seq
                loss = self._loss(records_end, size)
                if loss is None:
                    return None
                if gone:
                    loss = acked.Loss(loss.mark, "gone")
                cut = os.pread(self._fd, size - records_end, records_end)
                kept, digest = None, hashlib.sha256(cut).hexdigest()
                if cut:
                    kept = self.path.with_name(f"{self.path.name}.cut-{records_end}-{digest[:12]}")
                    write_atomic(kept, cut, 0o600)
                    os.ftruncate(self._fd, records_end)
                    self._sync_now()
                    self._forget_durable_beyond(records_end)
                else:  # cut back already by a repair killed before it recorded the loss: name what it kept
                    kept = next(iter(sorted(self.path.parent.glob(f"{self.path.name}.cut-{records_end}-*"))), None)
                    if kept is not None:
                        cut = kept.read_bytes()
                        digest = hashlib.sha256(cut).hexdigest()
                self._accepting = loss.mark
                try:
                    self._load_tail(records_end)
                finally:
                    self._accepting = None
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        mark = loss.mark
        return loss, {
            **loss.to_json(),
            "missing_bytes": max(0, mark.end - records_end),
            "kept_in": kept.name if kept else None,
            "kept_bytes": len(cut),
            "kept_sha256": digest,
        }

    def _records_end(self, size: int) -> int:
        """Where the last complete record ends: past the last newline, before a last line that is not JSON."""
        end = acked.records_end(self._fd, size)
        if end is None:
            raise StoreError(f"{self.path}: no complete line in the last MiB; the file is corrupt (nothing was "
                             f"changed)")
        return end

    def _truncate(self, size: int) -> None:
        """Drop a torn tail. It was never acknowledged (acks follow a complete write), so nothing is lost; but it is
        said out loud: a warning on stderr, and a line in `<ledger>.repairs` that `verify` reports."""
        end = os.fstat(self._fd).st_size
        torn = os.pread(self._fd, min(end - size, 1 << 20), size)
        os.ftruncate(self._fd, size)
        self._sync_now()
        self._forget_durable_beyond(size)
        self.repairs.append(note_repair(self.path, size, end - size, torn, self._seq_before(size)))

    def _add_newline(self, size: int) -> None:
        """Complete a last record that is whole but lacks its newline (`acked.whole_tail`), under the writer lock:
        the write was torn at its last byte. Cutting it as a torn line would delete a valid record (an acknowledged
        one, if the mark says so); adding the newline loses nothing. Said out loud like a cut (`repairs`)."""
        try:
            write_all(self._fd, b"\n")
        except OSError as exc:
            raise self._taken_back(self._fd, size, exc) from None
        self._sync_now()
        self.repairs.append(note_newline(self.path, size, self._seq_before(size + 1)))

    def complete_last_line(self) -> int | None:
        """`reef repair ledger`: add the newline a whole last record lacks (`_add_newline`) without appending
        anything; returns that record's seq, or None when the file does not end that way (or is not there). Looks
        first without the writer lock, which a check that finds nothing to do never needs."""
        try:
            fd = open_state(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            end = acked.records_end(fd, size)
            if end is None or acked.whole_tail(fd, end, size) is None:
                return None
        finally:
            os.close(fd)
        with self._mutex:
            self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                if not os.path.lexists(self.path):
                    return None
                if self._fd < 0 or os.fstat(self._fd).st_nlink == 0:
                    self._open_ledger()
                size = os.fstat(self._fd).st_size
                end = acked.records_end(self._fd, size)
                if end is None or acked.whole_tail(self._fd, end, size) is None:
                    return None
                self._add_newline(size)
                self._size = -1  # the next append looks at the tail afresh
                return self._seq_before(size + 1)
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _seq_before(self, size: int) -> int:
        """The seq of the last complete record before offset `size` (for the repair note; 0 if unknown)."""
        found = _quick_tail(_last_line_before(self._fd, size)) if size else None
        return found[0] if found else 0

    def _taken_back(self, fd: int, start: int, exc: OSError) -> StoreError:
        """After a failed append: cut the file back to `start`, so no partial line stays, and say what happened."""
        try:
            os.ftruncate(fd, start)
            self._forget_durable_beyond(start)
        except OSError:
            pass
        return StoreError(f"cannot append to {self.path}: {exc.strerror}; nothing was recorded")

    def _forget_durable_beyond(self, size: int) -> None:
        """The file shrank to `size` under the writer lock. A durable size published beyond it (a leader may have
        synced a torn or failed line) would vouch for whatever is appended there next: take it back."""
        self._leader.correct(lambda current: current[1] > size, lambda current: (current[0], size))

    # -- writing

    def append(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        release_id: str | None,
        content_id: str | None,
        record_id: str | None = None,
        then: Callable[[], object] | None = None,
    ) -> Record:
        """Append one record and return it once it is durable. With `record_id`, an identical resend returns the
        stored record and different content under that id raises ConflictError.

        `then` is called on this thread the moment the record is durable, before the bookkeeping that follows
        and before this returns: the gateway sends its receipt there, ~50 us sooner on a small VM than after the
        return path unwinds (bench/RESULTS.md). It runs only for a durable record; it must not raise (if it does,
        the record stays durable and the exception propagates)."""
        if (
            (record_id is not None and record_id not in self._reserved)
            or self._clock is not None
            or type(kind) is not str
            or kind not in _known_kinds
            or type(payload) is not dict
            or (release_id is not None and type(release_id) is not str)
            or (content_id is not None and type(content_id) is not str)
            or (release_json := _known_refs.get(release_id)) is None
            or (content_json := _known_refs.get(content_id)) is None
        ):
            return self._append([_draft(kind, payload, release_id, content_id, record_id)], then)[0]
        # The common case, written out flat (fields already seen valid, generated id, system clock): it runs after
        # every agent session next to a ~150 µs sync, and on a VM each µs of Python here costs two or three once
        # the CPU has idled through the previous sync (bench/RESULTS.md). Everything up to "prev_hash" is built
        # and hashed before taking the writer lock.
        try:
            payload_text = _encode(payload)
            ms = time.time_ns() // 1_000_000
            created_at, record_id = format_ms(ms), record_id or new_id_at("rec", ms)
            head = _line_head(content_json, created_at, kind, payload_text)
        except (TypeError, ValueError, RecursionError):  # not JSON, or a lone surrogate: say so as _draft does
            return self._append([_draft(kind, payload, release_id, content_id, None)], then)[0]
        hashed = hashlib.sha256(head[0])
        hashed.update(head[1])
        with self._mutex:
            if self._sync_failed is not None:
                self._refuse_after_failed_sync()
            if self._pid != _this_pid[0]:
                self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                fd = self._fd
                if fd < 0 or (st := os.fstat(fd)).st_nlink == 0 or st.st_size != self._size:
                    self._refresh()
                    fd = self._fd
                seq, prev = self._seq + 1, self._hash
                digest, line = _finish_line(hashed, head, _line_tail(prev, record_id, release_json,
                                                                     self._scenario_json, seq))
                self._append_bytes(fd, line)
                self._seq, self._hash = seq, digest
                self._reserved.discard(record_id)  # stored now: a second append of it is a resend
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            self._syncing += 1
            end, ino = self._size, self._ino
        self._sync_outside(fd, ino, end, len(line), seq, digest, then)
        return _new_record(record_id, kind, self.scenario, release_id, content_id, created_at, payload_text, seq,
                           prev, digest)

    def reserve_id(self) -> str:
        """A fresh record id for a record appended later through this instance (`reef run` hands it to the agent
        as its receipt before the run). It is new by construction, so appending it skips the idempotency lookup
        that a client-supplied id costs (a pass over the id index)."""
        record_id = new_record_id()
        self._reserved.add(record_id)
        return record_id

    def append_many(self, items: Iterable[NewRecord | Mapping[str, Any]]) -> list[Record]:
        """Append several records (NewRecord or mappings with the same fields) under one lock, one write and at
        most one sync; all or none are written."""
        drafts = [_draft_of(item) for item in items]
        return self._append(drafts) if drafts else []

    def _stamp(self, supplied: list[str | None]) -> tuple[str, list[str]]:
        """The time to record and an id for each draft (generated where none was supplied). With the system clock
        this reads `time_ns` and builds neither a datetime nor a second id clock reading."""
        if self._clock is None:
            ms = time.time_ns() // 1_000_000
            return format_ms(ms), [rid or new_id_at("rec", ms) for rid in supplied]
        now = self._clock()
        return format_time(now), [rid or new_record_id(now) for rid in supplied]

    def _append(self, drafts: list[_Draft], then: Callable[[], object] | None = None) -> list[Record]:
        # Everything that does not depend on the chain happens outside the writer lock, so it is held briefly.
        created_at, ids = self._stamp([d.record_id for d in drafts])
        with self._mutex:
            if self._sync_failed is not None:
                self._refuse_after_failed_sync()
            self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                self._refresh()
                start = self._size
                existing = self._resolve_ids(drafts)
                written, _ = self._write(drafts, ids, created_at, existing)
                self._reserved.difference_update(ids)  # stored now: a second append of any is a resend
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            fd, ino, end, seq, digest = self._fd, self._ino, self._size, self._seq, self._hash
            self._syncing += 1
        # A resend syncs too: it must not be acknowledged before the original is durable.
        self._sync_outside(fd, ino, end, end - start, seq, digest, then)
        return [item if isinstance(item, Record) else self._record(*item) for item in written]

    def _resolve_ids(self, drafts: list[_Draft]) -> dict[int, Record]:
        """Records already stored or earlier in the batch under a draft's client-supplied id, by draft position;
        ConflictError if the content differs."""
        supplied = {d.record_id for d in drafts if d.record_id is not None and d.record_id not in self._reserved}
        if not supplied:
            return {}
        stored = self._lookup(supplied)
        existing: dict[int, Record] = {}
        first: dict[str, _Draft] = {}
        for position, draft in enumerate(drafts):
            rid = draft.record_id
            if rid is None:
                continue
            if rid in stored:
                diffs = draft.differences(stored[rid])
                if diffs:
                    raise ConflictError(
                        f"record id '{rid}' already exists in {self.path} with a different {', '.join(diffs)}; "
                        f"use a new id for new content"
                    )
                existing[position] = stored[rid]
            elif rid in first and first[rid].key() != draft.key():
                raise ConflictError(f"record id '{rid}' appears twice in one batch with different content")
            else:
                first.setdefault(rid, draft)
        return existing

    def _write(
        self, drafts: list[_Draft], ids: list[str], created_at: str, existing: dict[int, Record]
    ) -> tuple[list, int]:
        """Chain the new records and write them in one write. Returns, per draft, the stored Record or the fields
        to build one from, and the file offset that must become durable (0 if everything was stored already)."""
        written: list = []
        lines: list[bytes] = []
        in_batch: dict[str, tuple] = {}
        seq, prev = self._seq, self._hash
        for position, draft in enumerate(drafts):
            if position in existing:
                written.append(existing[position])
                continue
            if draft.record_id is not None and draft.record_id in in_batch:
                written.append(in_batch[draft.record_id])
                continue
            seq += 1
            digest, line = self._line(draft, ids[position], seq, prev, created_at)
            fields = (draft, ids[position], seq, prev, created_at, digest)
            prev = digest
            written.append(fields)
            lines.append(line)
            if draft.record_id is not None:
                in_batch[draft.record_id] = fields
        if not lines:
            return written, 0
        data = lines[0] if len(lines) == 1 else b"".join(lines)
        self._append_bytes(self._fd, data)
        self._seq, self._hash = seq, prev
        return written, self._size

    def _line(self, draft: _Draft, record_id: str, seq: int, prev: str, created_at: str) -> tuple[str, bytes]:
        """The record's hash and its line."""
        head = _line_head(_json_str(draft.content_id), created_at, draft.kind, draft.payload_text)
        hashed = hashlib.sha256(head[0])
        hashed.update(head[1])
        return _finish_line(hashed, head, _line_tail(prev, record_id, _json_str(draft.release_id),
                                                      self._scenario_json, seq))

    def _record(self, draft: _Draft, record_id: str, seq: int, prev: str, created_at: str, digest: str) -> Record:
        return _new_record(record_id, draft.kind, self.scenario, draft.release_id, draft.content_id, created_at,
                           draft.payload_text, seq, prev, digest)

    def _append_bytes(self, fd: int, data: bytes) -> None:
        """Write `data` at the end under the writer lock; on failure cut the file back so no partial line stays."""
        try:
            written = os.write(fd, data)
            if written != len(data):
                write_all(fd, data[written:])
        except OSError as exc:
            raise self._taken_back(fd, self._size, exc) from None
        self._size += len(data)
