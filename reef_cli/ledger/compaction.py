"""Compaction: the only path that removes records. It removes a prefix and appends a `compaction` record naming
the last removed hash, which is what the first kept record chains to."""

from __future__ import annotations

import fcntl
import hashlib
import os
from datetime import datetime
from typing import Any

from ..durable import fsync_dir, open_state, refuse_misplaced, write_all
from ..errors import InvalidInput, StoreError
from ..times import format_time
from .chain import _Draft
from .reading import _scan, _strict
from .record import Record, _encode

REMOVED_LIST_LIMIT = 1000
"""A compaction record lists removed ids and hashes up to this many; beyond it, only the span hash and ends."""


class Compaction:
    """The compaction half of `Ledger` (a mixin over the writer: it swaps the file under the writer lock)."""

    def compact(self, before: datetime | None = None, keep: int | None = None) -> Record | None:
        """Remove the oldest records (those created before `before`, and/or all but the last `keep`; with both,
        only records meeting both) and append a `compaction` record that lets `verify()` explain the new first
        record. Returns it, or None when nothing qualifies. Refuses (StoreError) a ledger that does not verify,
        so compaction never launders tampering."""
        if before is None and keep is None:
            raise InvalidInput("compact needs 'before' and/or 'keep'")
        if keep is not None and (type(keep) is not int or keep < 0):
            raise InvalidInput(f"keep must be an integer >= 0, not {keep!r}")
        before_text = format_time(before) if before is not None else None
        refuse_misplaced(self.index_path)  # met only after the swap: the compaction done, then "nothing changed"
        with self._mutex:
            self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                self._refresh()
                result = self.verify()
                if not result.ok:
                    raise StoreError(f"refusing to compact: {result.message}")
                cut = result.count
                if keep is not None:
                    cut = min(cut, max(0, result.count - keep))
                if before_text is not None:
                    older = 0
                    for line in _scan(self.path):
                        if older >= cut or line.record is None or line.record.created_at >= before_text:
                            break
                        older += 1
                    cut = older
                if cut == 0:
                    return None
                return self._rewrite_without(cut, before_text, keep)
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _rewrite_without(self, cut: int, before_text: str | None, keep: int | None) -> Record:
        """Copy all but the first `cut` records to a temp file, add the compaction record, sync, swap it in."""
        temp = self.path.with_name(f".{self.path.name}.compact-{os.getpid()}")
        span = hashlib.sha256()
        removed: list[list[str]] = []
        first: Record | None = None
        last: Record | None = None
        fd = open_state(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            size = 0
            buffer: list[bytes] = []
            for count, line in enumerate(_scan(self.path), start=1):
                record = _strict(self.path, line)
                if count <= cut:
                    first = first or record
                    last = record
                    span.update(record.hash.encode("ascii") + b"\n")
                    if cut <= REMOVED_LIST_LIMIT:
                        removed.append([record.record_id, record.hash])
                    continue
                buffer.append(line.raw + b"\n")
                if len(buffer) >= 4096:
                    size += write_all(fd, b"".join(buffer))
                    buffer.clear()
            if buffer:
                size += write_all(fd, b"".join(buffer))
            if first is None or last is None:
                raise StoreError(f"{self.path} changed during compaction")
            payload: dict[str, Any] = {
                "removed_count": cut,
                "first_removed_seq": first.seq,
                "last_removed_seq": last.seq,
                "first_kept_seq": last.seq + 1,
                "first_removed_id": first.record_id,
                "last_removed_id": last.record_id,
                "last_removed_hash": last.hash,
                "removed_span_hash": span.hexdigest(),
                "before": before_text,
                "keep": keep,
            }
            if cut <= REMOVED_LIST_LIMIT:
                payload["removed"] = removed
            created_at, (record_id,) = self._stamp([None])
            draft = _Draft("compaction", _encode(payload), None, None, None)
            fields = (draft, record_id, self._seq + 1, self._hash, created_at)
            digest, line = self._line(*fields)
            record = self._record(*fields, digest)
            size += write_all(fd, line)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            temp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(temp, self.path)
        fsync_dir(self.path.parent)
        self._retire(self._fd)
        self._fd = open_state(self.path, os.O_RDWR | os.O_APPEND)
        self._ino = os.fstat(self._fd).st_ino
        ino = self._ino  # the copy was synced whole before the swap: durable to its end, whatever the page said
        self._leader.correct(lambda current: True, lambda current: (ino, size))
        self._size, self._seq, self._hash = size, record.seq, record.hash
        if self._marks is not None:  # acknowledged now (the copy is synced), and the old file's mark is moot
            self._marks.reset(ino, size, record.seq, record.hash)
        if self._idx_fd >= 0 or self.index_path.exists():
            self._catch_up_index()  # the header names the old inode, so this rebuilds
        return record
