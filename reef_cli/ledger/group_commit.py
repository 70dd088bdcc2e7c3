"""Group commit led from user space, for ledgers on disks whose syncs take milliseconds.

Where a sync takes ~150 µs (NVMe, a VM's virtio disk) each ledger writer issues its own and the filesystem folds
overlapping ones into shared journal commits: waking sleepers would cost more CPU than the syncs it saves. Where a
sync takes milliseconds (a disk or cloud volume flushing its cache), ext4 alone splits concurrent writers into two
groups that take turns, about half of them per commit; a leader gathers nearly all of them. This module is that
leader; `Ledger` decides when to use it (`COORDINATE_ABOVE_NS`).

Shared state, next to the ledger: `<ledger>.sync` is a page (`SyncPage`, read and written with pread/pwrite)
saying how far the file is durable and which sync is in flight, and flock on that file is the leader lock;
`<ledger>.sync.0` and `.sync.1` are generation locks. A leader holds its generation's lock exclusively while it
syncs and its waiters queue on it shared, so they all wake together when it is done; the next leader takes the
other generation's lock, so it can never take the lock the waiters are queued on before they have it (flock hands
nothing over). Only a durable size published after a real sync is trusted; the locks only decide who sleeps.
"""

from __future__ import annotations

import fcntl
import functools
import operator
import os
import struct
import threading
import time
from collections.abc import Callable

from ..durable import open_state

COORDINATE_ABOVE_NS = 1_000_000
"""Syncs slower than this on average are led; faster ones are left to each writer and the kernel."""
MAX_COMMIT_DELAY_NS = 1_000_000
_LEADER_RETRY_S = 20e-6
_AVERAGE_FRESH_NS = 1_000_000
"""How old the leaders' average a writer decides by may be (`SyncLeader.shared_average`)."""
_FOLLOW_EVERY_NS = 100_000_000
"""How often a writer checks that its page is still the file at the path (`SyncLeader.follow`)."""

def clamped(took_ns: int) -> int:
    """A sync's duration as the moving averages take it: at most twice `COORDINATE_ABOVE_NS`. One stalled sync
    (a neighbour's I/O on a shared disk) then moves an average by at most a quarter of the threshold, so a fast
    disk is not taken for a slow one for the next few syncs; syncs that stay slow still cross it within four."""
    return min(took_ns, 2 * COORDINATE_ABOVE_NS)


State = tuple[int, int, int, int, int, int]
"""(ledger inode, durable up to offset, generation of the latest sync, whether it is in flight, moving average of
sync times in ns, bytes the last sync covered)."""


class SyncPage:
    """The page in `<ledger>.sync`, read and written with pread/pwrite on a descriptor of its own. Only a leader
    (holding the flock on the file) writes the leader's fields, all in one pwrite; a reader takes one copy too, and a
    torn one fails the check word and reads as None ("nothing known"), as does a page cut short.

    It was a shared mapping, and a user's `: > ledger.jsonl.sync` (emptying it: the mapped page then lies past the
    end of the file) turned the next load or store through it into SIGBUS, which killed the writer outright: a
    gateway with requests in flight, a `reef run` after its agent's session. A size check before each access could
    not prevent that: the file can shrink between the fstat and the access, and nothing stops a user shrinking it.
    pread past the end returns fewer bytes and pwrite extends the file, so no size the file is given can hurt a
    writer: the leader's next publication and the next acknowledged mark (`acked.MarkPage`) write their words back.
    The cost is one system call where a load or store was (bench/RESULTS.md); the page is still never synced, so a
    pwrite is a copy into the page cache."""

    SIZE = 4096
    _LAYOUT = struct.Struct("<QQQQQQQ")
    _MAGIC = 0x7265_6566_7379_6E63  # "reefsync" (the page an earlier version kept here had another layout)

    def __init__(self, fd: int):
        """Use the file open at `fd` (the caller keeps and closes its own descriptor: this takes a duplicate, as the
        mapping did)."""
        self._grow(fd)
        self.fd = os.dup(fd)

    def adopt(self, fd: int) -> None:
        """Use the file open at `fd` from now on, under the same descriptor number (so whoever holds `self.fd`,
        `acked.MarkPage` say, follows; dup2 swaps it in one step, a pread racing it reads one file or the other)."""
        self._grow(fd)
        os.dup2(fd, self.fd, inheritable=False)

    def _grow(self, fd: int) -> None:
        if os.fstat(fd).st_size < self.SIZE:
            os.ftruncate(fd, self.SIZE)  # the 4 KiB page a reef that maps it expects; growing only

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except (AttributeError, OSError, TypeError):  # never opened, or interpreter shutdown
            pass

    def read(self) -> State | None:
        data = os.pread(self.fd, self._LAYOUT.size, 0)
        if len(data) < self._LAYOUT.size:
            return None  # cut short: nothing known
        *fields, check = self._LAYOUT.unpack(data)
        if check != functools.reduce(operator.xor, fields, self._MAGIC):
            return None
        return tuple(fields)  # type: ignore[return-value]

    def write(self, ino: int, synced: int, gen: int, syncing: int, average: int, batch: int) -> None:
        fields = (ino, synced, gen, syncing, average, batch)
        os.pwrite(self.fd, self._LAYOUT.pack(*fields, functools.reduce(operator.xor, fields, self._MAGIC)), 0)


class SyncLeader:
    """The group-commit side of one `Ledger` instance. Every lock is taken through a descriptor of its own, so
    threads of one process exclude each other as processes do (two flocks on one descriptor would not)."""

    def __init__(self, path: str):
        self.path = path  # "<ledger>.sync"
        self._page: SyncPage | None = None
        self._opening = threading.Lock()
        self._average = self._average_at = 0  # the leaders' average as last read, and when (see shared_average)
        self._followed_at = 0

    def page(self) -> SyncPage:
        """The page, opened on first use."""
        with self._opening:
            if self._page is None:
                fd = open_state(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    self._page = SyncPage(fd)
                finally:
                    os.close(fd)  # the page keeps its own descriptor
            return self._page

    def shared_average(self) -> int:
        """The moving average of sync times that leaders keep in the page; 0 when nothing is known here. Read at
        most once per `_AVERAGE_FRESH_NS` (a read is a system call, and every append asks): on a disk whose syncs
        are slow that is still every append; on a fast one, a writer joins leaders that began meanwhile at most
        that much later (both ways of syncing are durable: this only chooses who syncs)."""
        page = self._page
        if page is None:
            return 0
        now = time.monotonic_ns()
        if now - self._average_at >= _AVERAGE_FRESH_NS:
            if now - self._followed_at >= _FOLLOW_EVERY_NS:
                self._followed_at = now
                self.follow()
            state = page.read()
            self._average, self._average_at = (state[4] if state is not None else 0), now
        return self._average

    def follow(self) -> None:
        """Once the page's file is no longer at the path (`rm ledger.jsonl.sync`, or another file renamed over it),
        use the one there now, created if need be. Otherwise this writer's acknowledged marks went on into the
        removed file, which nothing else reads, while `verify` and other writers read the path: no mark, or an
        older one, for as long as the writer ran. One fstat, at most every `_FOLLOW_EVERY_NS`. The page is
        evidence: a file that cannot be opened there (`open_state` refuses a planted directory or symlink) leaves
        the page as it was, and the writer goes on."""
        from ..errors import ReefError

        page = self._page
        try:
            if page is None or os.fstat(page.fd).st_nlink:
                return
            fd = open_state(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except (OSError, ReefError):
            return
        try:
            page.adopt(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def make_durable(self, fd: int, ino: int, end: int, own: int, sync: Callable[[int], None],
                     note: Callable[[int], None]) -> None:
        """Return once the ledger (inode `ino`, descriptor `fd`) is durable up to `end` (`own` bytes of it ours):
        at once if a published sync covered it; else after the sync in flight, if that covers it; else after
        leading one. `sync` is the fdatasync to use and `note(ns)` is told how long each sync led here took."""
        page = self.page()
        waited = None
        while True:
            current = page.read()
            if current is not None and current[0] == ino and current[1] >= end:
                return
            if current is not None and current[0] == ino and current[3] and current[2] != waited:
                self._wait_for(current[2])
                waited = current[2]  # still "in flight" after its lock came free: its leader died; lead instead
                continue
            # created if removed meanwhile: without it, `rm ledger.jsonl.sync` failed the sync ("cannot sync ...: No
            # such file or directory") and the writer refused every append after it
            lead = open_state(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                try:
                    fcntl.flock(lead, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    time.sleep(_LEADER_RETRY_S)  # another writer is taking the lead; it publishes in a moment
                    continue
                current = page.read() or (0, 0, 0, 0, 0, 0)
                if current[0] == ino and current[1] >= end:
                    return
                self._lead(page, fd, ino, own, current, sync, note)
                return
            finally:
                os.close(lead)  # closing drops the flock

    def _lead(self, page: SyncPage, fd: int, ino: int, own: int, current: State, sync: Callable[[int], None],
              note: Callable[[int], None]) -> None:
        """Publish the sync, wait a moment for the writers the previous sync just released (only with company),
        note the file's size, sync, publish the new durable size."""
        _, synced, gen, _, average, batch = current
        synced = synced if current[0] == ino else 0
        gen += 1
        generation = open_state(self._generation_path(gen), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(generation, fcntl.LOCK_EX)  # free: its last waiters left two syncs ago
            page.write(ino, synced, gen, 1, average, batch)
            if batch > 2 * own:
                # The last sync carried other writers, who are appending again now: give them a moment to be in
                # this one too (a commit delay, as databases use; a small part of a sync).
                time.sleep(min(average // 16, MAX_COMMIT_DELAY_NS) / 1e9)
            size = os.fstat(fd).st_size
            started = time.monotonic_ns()
            sync(fd)
            took = time.monotonic_ns() - started
            note(took)
            took = clamped(took)
            average = took if not average else (7 * average + took) // 8
            page.write(ino, size, gen, 0, average, size - synced)
        except BaseException:
            page.write(ino, synced, gen, 0, average, batch)  # nothing more is durable: waiters look again
            raise
        finally:
            os.close(generation)

    def _wait_for(self, gen: int) -> None:
        waiter = open_state(self._generation_path(gen), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(waiter, fcntl.LOCK_SH)  # granted when that sync's leader is done (or has died)
        finally:
            os.close(waiter)

    def _generation_path(self, gen: int) -> str:
        return f"{self.path}.{gen % 2}"

    def correct(self, wrong: Callable[[State], bool], right: Callable[[State], tuple[int, int]]) -> None:
        """Rewrite the page's (inode, durable size) as `right` says where `wrong` says so (an unreadable page
        always is), under the leader lock so no sync in flight publishes over it. The ledger calls this under its
        writer lock; leaders never wait for that lock, so this cannot deadlock. No page, no leaders: nothing."""
        try:
            lead = open_state(self.path, os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(lead, fcntl.LOCK_EX)
            page = self.page()
            read = page.read()
            current = read or (0, 0, 0, 0, 0, 0)
            if read is None or wrong(current):
                page.write(*right(current), current[2], 0, current[4], 0)
        finally:
            os.close(lead)
