"""Verifying what was appended since a known point: for a process that appends for hours and checks its work as it
exits (the gateway on SIGTERM), where streaming the whole chain would hold the exit for as long as the ledger is big
(~14 s per GB here, bench/RESULTS.md: a month of a team's traffic keeps a restart waiting past a service manager's stop
timeout). The records after the point must chain onto it, hash by hash, seq by seq; the records before it are
`reef ledger verify`'s to check. Anything unexpected (the file replaced or shorter, a compaction, a torn or broken
line) is not judged here: the caller runs the full verify, which names the problem."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..durable import last_lines
from ..errors import ReefError
from .acked import line_ending_at
from .reading import _scan, open_for_reading
from .record import _BLOCK, _decode


@dataclass(frozen=True)
class Position:
    """Where a ledger's chain ended when it was looked at: the file (`ino`), the byte after the last complete
    record's newline (`end`), and that record's `seq` and `hash`."""

    ino: int
    end: int
    seq: int
    hash: str


def position(path: Path) -> Position | None:
    """The chain's end now; None when there is no record yet or the last one does not check out (the full verify's
    to judge then)."""
    try:
        handle = open_for_reading(path)  # never through a symlink, never a FIFO
        if handle is None:
            return None
        with handle:
            ino = os.fstat(handle.fileno()).st_ino
            found = last_lines(handle, 1, _BLOCK)  # a torn last write never counts as a line
    except (OSError, ReefError):
        return None
    for offset, raw in found:
        try:
            record, ok = _decode(raw)
        except ValueError:
            return None
        if not ok:
            return None
        return Position(ino, offset + len(raw) + 1, record.seq, record.hash)
    return None


def appended_since(path: Path, scenario: str, start: Position, last: tuple[int, str] | None = None) -> int | None:
    """How many records follow `start`, when the start record is still there as it was, each record after it checks
    out and chains onto it, nothing else is in the file after it, and `last` (seq, hash: the newest record the
    caller appended) is among them; None when that cannot be said here."""
    try:
        handle = open_for_reading(path)
    except (OSError, ReefError):
        return None
    if handle is None:
        return None
    with handle:
        st = os.fstat(handle.fileno())
        if st.st_ino != start.ino or st.st_size < start.end:
            return None
        raw = line_ending_at(handle.fileno(), start.end)
    try:
        record, ok = _decode(raw) if raw else (None, False)
    except ValueError:
        return None
    if not ok or record is None or (record.seq, record.hash) != (start.seq, start.hash):
        return None  # the start record itself was edited or moved: the full verify names it
    seq, prev = start.seq + 1, start.hash
    count = 0
    end = start.end
    seen_last = last is None or last == (start.seq, start.hash)
    for line in _scan(path, start.end):
        record = line.record
        if record is None or not line.hash_ok or record.seq != seq or record.prev_hash != prev:
            return None
        if record.scenario != scenario or record.kind == "compaction":
            return None
        seen_last = seen_last or (record.seq, record.hash) == last
        count += 1
        seq, prev = seq + 1, record.hash
        end = line.offset + len(line.raw) + 1
    if end != st.st_size or not seen_last:  # a torn tail, bytes _scan left out, or our records gone: the full
        return None  # verify (and the caller's own check) say what happened
    return count
