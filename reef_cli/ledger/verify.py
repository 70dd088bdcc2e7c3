"""Verification: one streaming pass over the chain that names the first break and its kind."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .reading import _Line, _scan, open_for_reading
from .record import _BLOCK, ZERO_HASH, Record


@dataclass(frozen=True)
class VerifyResult:
    """`first_bad_seq` is the chain position where the file first departs from a valid chain, `line` the file line
    there and `first_bad_record_id` the record found on it (for "deleted" that is the record after the gap).
    `head_hash` is the last record's hash: keep it elsewhere to detect a truncated tail, which no chain can."""

    ok: bool
    count: int
    first_bad_seq: int | None = None
    first_bad_record_id: str | None = None
    problem: str | None = None
    message: str = ""
    line: int | None = None
    head_hash: str | None = None
    torn_tail: bool = False
    anchors_checked: int = 0
    """Release anchors this verify held the ledger to (0: none given, or the chain broke first)."""
    repairs: tuple[dict, ...] = ()
    """Torn tails writers cut off before (`<ledger>.repairs`): said out loud, never silently forgotten."""
    since_seq: int | None = None
    """Set by `Ledger.verify_since` when only the `count` records after this seq were checked."""
    mark_missing: bool = False
    """The file holds records but `<ledger>.sync` holds no acknowledged mark (removed, emptied, or kept by a reef
    older than the mark): records cut off its end past the release anchors cannot be told from an intact end."""
    warnings: tuple[str, ...] = ()
    """What the user should hear though the ledger verifies (each also said in `message`)."""
    newline_missing: bool = False
    """The last record (counted in `count`) is whole and chains on, but its final newline is missing: a write torn
    at its last byte, completed by the next append or `reef repair ledger` (nothing is lost)."""

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "count": self.count,
            "first_bad_seq": self.first_bad_seq,
            "first_bad_record_id": self.first_bad_record_id,
            "problem": self.problem,
            "message": self.message,
            "line": self.line,
            "head_hash": self.head_hash,
            "torn_tail": self.torn_tail,
            "anchors_checked": self.anchors_checked,
            "repairs": [dict(r) for r in self.repairs],
            "newline_missing": self.newline_missing,
            "mark_missing": self.mark_missing,
            "warnings": list(self.warnings),
        }


class _Verifier:
    """One streaming pass with one line of lookahead; a second pass over the rest of the file only to classify a
    break (was the missing record moved later, is an early record duplicated later, is the head explained by a
    compaction record further on)."""

    def __init__(self, path: Path, scenario: str):
        self.path = path
        self.scenario = scenario
        self.count = 0  # records verified before the first break

    def run(self) -> VerifyResult:
        lines = _scan(self.path)
        current = next(lines, None)
        torn = self._torn_tail()
        if current is None:
            note = f"{self.path}: empty ledger" + self._torn_note(torn)
            return VerifyResult(True, 0, message=note, torn_tail=bool(torn))
        expected_seq = expected_prev = None
        previous: _Line | None = None
        head: _Line | None = None
        anchors: set[tuple[int, str]] = set()
        while current is not None:
            upcoming = next(lines, None)
            record = current.record
            if record is None:
                return self._fail(head, anchors, current, expected_seq or 1, None, "corrupt",
                                  f"line {current.number} is not a ledger record: {current.error}")
            if head is None:
                head = current
                if current.hash_ok:
                    expected_seq, expected_prev = record.seq, record.prev_hash
                    if upcoming is not None and self._is_genesis(upcoming) and not self._chains(current, upcoming):
                        return self._fail(None, anchors, current, 1, record.record_id, "inserted",
                                          f"line 1 (record {record.record_id}) was inserted before the first record")
                else:
                    expected_seq, expected_prev = record.seq, ZERO_HASH
            if not (current.hash_ok and record.seq == expected_seq and record.prev_hash == expected_prev):
                return self._classify(head, anchors, previous, current, upcoming, expected_seq, expected_prev)
            if record.scenario != self.scenario:
                return self._fail(head, anchors, current, record.seq, record.record_id, "foreign",
                                  f"record {record.record_id} (line {current.number}) belongs to scenario "
                                  f"'{record.scenario}', not '{self.scenario}'")
            if record.kind == "compaction":
                anchor = _anchor_of(record)
                if anchor:
                    anchors.add(anchor)
            self.count += 1
            expected_seq, expected_prev = record.seq + 1, record.hash
            previous, current = current, upcoming
        assert head is not None and head.record is not None and previous is not None and previous.record is not None
        problem = self._head_problem(head, anchors)
        if problem:
            return problem
        whole = self._whole_tail(torn) if torn else None
        if whole is not None:
            warning = (f"the last record (seq {whole[0]}) is whole but its final newline is missing (a write torn at "
                       f"its last byte): the next append or 'reef repair ledger' adds it, nothing is lost")
            return VerifyResult(True, self.count + 1, message=f"{self.path}: {self.count + 1} records, chain intact; "
                                f"{warning}", head_hash=whole[1], newline_missing=True, warnings=(warning,))
        return VerifyResult(
            True, self.count,
            message=f"{self.path}: {self.count} records, chain intact" + self._torn_note(torn),
            head_hash=previous.record.hash, torn_tail=bool(torn),
        )

    # -- helpers

    @staticmethod
    def _is_genesis(line: _Line) -> bool:
        return line.record is not None and line.hash_ok and line.record.seq == 1 and line.record.prev_hash == ZERO_HASH

    @staticmethod
    def _chains(first: _Line, second: _Line) -> bool:
        return (
            first.record is not None and second.record is not None
            and second.record.seq == first.record.seq + 1 and second.record.prev_hash == first.record.hash
        )

    def _classify(self, head, anchors, previous, current, upcoming, seq, prev) -> VerifyResult:
        record = current.record
        where = f"line {current.number} (record {record.record_id})"
        upcoming_fits = (
            upcoming is not None and upcoming.record is not None and upcoming.hash_ok
            and upcoming.record.seq == seq and upcoming.record.prev_hash == prev
        )
        if upcoming_fits:
            if current.hash_ok and record.seq > seq and not self._hash_later(current):
                return self._fail(head, anchors, current, seq, record.record_id, "reordered",
                                  f"{where} is seq {record.seq} but appears where seq {seq} belongs")
            return self._fail(head, anchors, current, seq, record.record_id, "inserted",
                              f"{where} was inserted: the next line continues the chain without it")
        if not current.hash_ok:
            return self._fail(head, anchors, current, seq, record.record_id, "edited",
                              f"{where} does not match its hash: it was edited")
        if record.seq > seq:
            if self._seq_later(current, seq, prev):
                return self._fail(head, anchors, current, seq, record.record_id, "reordered",
                                  f"{where} is seq {record.seq}; seq {seq} appears later in the file")
            missing = f"seq {seq}" if record.seq == seq + 1 else f"seq {seq}..{record.seq - 1}"
            return self._fail(head, anchors, current, seq, record.record_id, "deleted",
                              f"{missing} deleted before {where}")
        if record.seq < seq:
            return self._fail(head, anchors, current, seq, record.record_id, "inserted",
                              f"{where} repeats seq {record.seq} where seq {seq} belongs: it was inserted")
        if previous is not None and previous.record is not None:
            return self._fail(head, anchors, previous, seq - 1, previous.record.record_id, "edited",
                              f"line {previous.number} (record {previous.record.record_id}) was rewritten: its "
                              f"hash is not the prev_hash that seq {seq} recorded for it")
        return self._fail(head, anchors, current, seq, record.record_id, "edited", f"{where} breaks the chain")

    def _fail(self, head, anchors, line, seq, record_id, problem, message) -> VerifyResult:
        if head is not None and head is not line:
            explained = self._head_problem(head, anchors | self._anchors_after(line))
            if explained:
                return explained
        return VerifyResult(False, self.count, seq, record_id, problem, f"{self.path}: {message}", line.number)

    def _head_problem(self, head: _Line, anchors: set[tuple[int, str]]) -> VerifyResult | None:
        record = head.record
        if (record.seq, record.prev_hash) == (1, ZERO_HASH) or (record.seq, record.prev_hash) in anchors:
            return None
        boundary = max((kept for kept, _ in anchors if kept < record.seq), default=1)
        missing = f"seq {boundary}" if boundary == record.seq - 1 else f"seq {boundary}..{record.seq - 1}"
        return VerifyResult(
            False, self.count, boundary, record.record_id, "deleted",
            f"{self.path}: {missing} deleted before line 1 (record {record.record_id}); no compaction record "
            f"explains where the file starts",
            head.number,
        )

    def _rest(self, line: _Line) -> Iterator[_Line]:
        return _scan(self.path, line.offset + len(line.raw) + 1, line.number + 1)

    def _anchors_after(self, line: _Line) -> set[tuple[int, str]]:
        """Head explanations offered by compaction records from `line` on, even damaged ones: this only decides
        which of two breaks to report (an edited compaction record is the better answer than the head it no
        longer explains), never whether the ledger is intact."""
        anchors = set()
        for later in itertools.chain([line], self._rest(line)):
            if later.record is not None and later.record.kind == "compaction":
                anchor = _anchor_of(later.record)
                if anchor:
                    anchors.add(anchor)
        return anchors

    def _seq_later(self, line: _Line, seq: int, prev: str) -> bool:
        return any(
            later.record is not None and later.record.seq == seq and later.record.prev_hash == prev
            for later in self._rest(line)
        )

    def _hash_later(self, line: _Line) -> bool:
        return any(later.record is not None and later.record.hash == line.record.hash for later in self._rest(line))

    def _torn_tail(self) -> int:
        handle = open_for_reading(self.path)
        if handle is None:
            return 0
        with handle:
            end = handle.seek(0, os.SEEK_END)
            if end == 0:
                return 0
            handle.seek(max(0, end - _BLOCK))
            data = handle.read()
        if not data.endswith(b"\n"):
            return len(data) - data.rfind(b"\n") - 1
        last = data[data.rfind(b"\n", 0, len(data) - 1) + 1 : -1]
        try:
            json.loads(last)
        except (ValueError, UnicodeDecodeError):
            return len(last) + 1
        return 0

    def _whole_tail(self, torn: int) -> tuple[int, str] | None:
        """(seq, hash) of a torn last line that is a whole record chaining on (`acked.whole_tail`), or None."""
        from .acked import whole_tail

        handle = open_for_reading(self.path)
        if handle is None:
            return None
        with handle:
            size = os.fstat(handle.fileno()).st_size
            return whole_tail(handle.fileno(), size - torn, size)

    @staticmethod
    def _torn_note(torn: int) -> str:
        return f"; a torn last line ({torn} bytes) left by a crash will be truncated by the next append" if torn else ""


def _anchor_of(record: Record) -> tuple[int, str] | None:
    kept, last = record.payload.get("first_kept_seq"), record.payload.get("last_removed_hash")
    if type(kept) is int and isinstance(last, str):
        return kept, last
    return None


# --- export -----------------------------------------------------------------------------------------------------
