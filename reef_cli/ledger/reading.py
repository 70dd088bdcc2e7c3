"""Reading the file without the writer lock: streaming lines (a torn or in-flight last line is skipped), and the
readers' side of `Ledger` (`iter_records`, `tail`, `get`)."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..durable import last_lines, open_state
from ..errors import DamagedState, InvalidInput, NotFound, StoreError
from ..times import format_time
from .record import _BLOCK, _ID_RE, Record, _BadJSON, _decode

@dataclass(slots=True)
class _Line:
    number: int
    offset: int
    raw: bytes  # without the newline
    record: Record | None
    hash_ok: bool
    error: str | None


def open_for_reading(path: Path):
    """The ledger at `path` opened for reading (a binary file object), or None when there is none. Never through a
    symlink, and never a directory or a FIFO: readers refuse what writers refuse (`durable.open_state`: one line,
    MisplacedState, exit 4), so `verify` or `tail` cannot vouch for a file that no append would touch, nor read an
    attacker's choice of file. A symlinked directory above it (`.reef` kept on another disk) is followed as ever."""
    try:
        return open(open_state(path, os.O_RDONLY), "rb")
    except FileNotFoundError:
        return None


def _lines(path: Path, start: int = 0, first_number: int = 1) -> Iterator[tuple[int, int, bytes, bool]]:
    """Stream (line number, offset, bytes without newline, complete?) without loading the file."""
    handle = open_for_reading(path)
    if handle is None:
        return
    with handle:
        handle.seek(start)
        offset, number = start, first_number
        for raw in handle:
            complete = raw.endswith(b"\n")
            yield number, offset, raw[:-1] if complete else raw, complete
            offset += len(raw)
            number += 1


def _scan(path: Path, start: int = 0, first_number: int = 1) -> Iterator[_Line]:
    """Decoded lines; a last line that is incomplete or not JSON is a torn write in progress or left by a crash,
    so it is left out (the next writer truncates it). Other bad lines come back with `error` set."""
    pending: _Line | None = None
    for number, offset, raw, complete in _lines(path, start, first_number):
        if pending is not None:
            yield pending
            pending = None
        if not complete:
            return
        try:
            record, ok = _decode(raw)
            line = _Line(number, offset, raw, record, ok, None)
        except _BadJSON as exc:
            line = _Line(number, offset, raw, None, False, str(exc))
            pending = line
            continue
        except ValueError as exc:
            line = _Line(number, offset, raw, None, False, str(exc))
        yield line
    # A pending line is the final one and not JSON: torn.


def _strict(path: Path, line: _Line) -> Record:
    if line.record is None:
        raise StoreError(
            f"{path}: line {line.number} is corrupt: {line.error}; fix or restore the file (nothing was changed)"
        )
    if not line.hash_ok:
        raise StoreError(
            f"{path}: line {line.number} (record {line.record.record_id}) does not match its hash: the record was "
            f"edited; run verify and restore the file (nothing was changed)"
        )
    return line.record


def _line_number(path: Path, offset: int) -> int:
    count = 1
    handle = open_for_reading(path)
    if handle is None:
        return count
    with handle:
        left = offset
        while left > 0:
            block = handle.read(min(_BLOCK, left))
            if not block:
                break
            count += block.count(b"\n")
            left -= len(block)
    return count


def _read_line_at(fd: int, offset: int) -> bytes:
    """The line starting at `offset` (without newline); b"" if the offset is past the end."""
    chunks: list[bytes] = []
    while True:
        block = os.pread(fd, 4096, offset)
        if not block:
            return b"".join(chunks)  # no newline before the end: a torn line, which will not decode
        cut = block.find(b"\n")
        if cut >= 0:
            chunks.append(block[:cut])
            return b"".join(chunks)
        chunks.append(block)
        offset += len(block)


def seq_offset(handle, seq: int) -> int:
    """Offset of the first complete line whose record has seq >= `seq` (or the end) in the ledger open as `handle`
    (binary), by bisecting it: seq grows with the offset."""
    size = os.fstat(handle.fileno()).st_size

    def line_at(pos: int) -> tuple[int, int | None]:
        """The first line starting at or after `pos`: (its offset, its seq or None past the end)."""
        if pos > 0:
            handle.seek(pos - 1)
            handle.readline()  # finish the line that `pos` falls in (a no-op when pos starts a line)
        else:
            handle.seek(0)
        start = handle.tell()
        raw = handle.readline()
        if not raw.endswith(b"\n"):
            return start, None
        try:
            return start, int(json.loads(raw)["seq"])
        except (ValueError, KeyError, TypeError):
            return start, None

    lo, hi = 0, size
    while lo < hi:
        mid = (lo + hi) // 2
        start, found = line_at(mid)
        if found is not None and found < seq:
            handle.seek(start)
            lo = start + len(handle.readline())
        else:
            hi = mid
    start, _ = line_at(lo)
    return start


class Reader:
    """The reading half of `Ledger` (a mixin: it uses the writer's lock and the id index only in `get`)."""

    def iter_records(
        self,
        kind: str | None = None,
        since: datetime | None = None,
        release_id: str | None = None,
        from_seq: int | None = None,
    ) -> Iterator[Record]:
        """Stream records oldest first, line by line, filtered by kind, creation time (>= since, to the
        millisecond) and release; every line is hash-checked, and a corrupt one raises StoreError.
        `from_seq` starts at the first record whose seq is >= it, found by bisecting the file (seq grows with
        the offset), so a reader that resumes from a high-water mark reads only what is new."""
        since_text = format_time(since) if since is not None else None
        start, first_number = (0, 1) if not from_seq or from_seq <= 1 else self._offset_of_seq(from_seq)
        for line in _scan(self.path, start, first_number):
            record = _strict(self.path, line)
            if kind is not None and record.kind != kind:
                continue
            if since_text is not None and record.created_at < since_text:
                continue
            if release_id is not None and record.release_id != release_id:
                continue
            yield record

    def _offset_of_seq(self, seq: int) -> tuple[int, int]:
        """(offset, line number) of the first complete line whose record has seq >= `seq` (or the end)."""
        start = self._seq_offset(seq)
        return (start, _line_number(self.path, start)) if start else (0, 1)

    def _seq_offset(self, seq: int) -> int:
        """Offset of the first complete line whose record has seq >= `seq` (or the end), by bisecting the file."""
        handle = open_for_reading(self.path)
        if handle is None:
            return 0
        with handle:
            return seq_offset(handle, seq)

    def tail(self, n: int) -> list[Record]:
        """The last `n` records, oldest first, read backwards from the end in blocks."""
        if type(n) is not int or n < 0:
            raise InvalidInput(f"tail needs a count >= 0, not {n!r}")
        if n == 0:
            return []
        handle = open_for_reading(self.path)
        if handle is None:
            return []
        with handle:
            found = last_lines(handle, n + 1, _BLOCK)  # one spare: the last may be a torn write, which is skipped
        records: list[Record] = []
        for index, (offset, raw) in enumerate(found):
            if len(records) == n:
                break
            try:
                record, ok = _decode(raw)
            except _BadJSON as exc:
                if index == 0:
                    continue  # a last line that is not JSON is a torn write
                raise StoreError(f"{self.path}: line {_line_number(self.path, offset)} is corrupt: {exc}") from None
            except ValueError as exc:
                raise StoreError(f"{self.path}: line {_line_number(self.path, offset)} is corrupt: {exc}") from None
            if not ok:
                raise StoreError(
                    f"{self.path}: line {_line_number(self.path, offset)} (record {record.record_id}) does not match "
                    f"its hash; run verify (nothing was changed)"
                )
            records.append(record)
        records.reverse()
        return records

    def get(self, record_id: str) -> Record:
        """One record by id through the index (caught up first, so this takes the writer lock briefly)."""
        if type(record_id) is not str or not _ID_RE.fullmatch(record_id):
            raise NotFound(f"no record {record_id!r} in {self.path} (not a valid record id)")
        if not os.path.lexists(self.path):  # a symlink is refused by the open below, not taken for none
            cut = self.acknowledged_cut()
            if cut is not None:  # it held acknowledged records: the loss, not "no such record"
                raise DamagedState(cut[1])
            raise NotFound(f"no record '{record_id}' in {self.path} (the ledger does not exist yet)")
        with self._mutex:
            self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                self._refresh()
                found = self._lookup({record_id})
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        if record_id not in found:
            raise NotFound(f"no record '{record_id}' in {self.path}")
        return found[record_id]
