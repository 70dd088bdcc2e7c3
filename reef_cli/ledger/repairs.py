"""Repairs said out loud. A writer that finds a torn last line (a crashed writer's unacknowledged write) cuts it
off, as it must to append; it also warns on stderr and notes the cut in `<ledger>.repairs`, one JSON line each, so
`reef ledger verify` reports every repair ever made instead of a ledger that silently lost bytes."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from ..durable import append_durable


def repairs_path(ledger_path: Path) -> Path:
    return ledger_path.with_name(ledger_path.name + ".repairs")


def note_repair(ledger_path: Path, offset: int, size: int, torn: bytes, after_seq: int) -> dict:
    """Record that `size` bytes (`torn`, or their first MiB) were cut at `offset`, after record `after_seq`."""
    return _said(ledger_path, {"offset": offset, "bytes": size, "sha256": hashlib.sha256(torn).hexdigest(),
                               "after_seq": after_seq},
                 f"cut a torn last line ({size} bytes after seq {after_seq}) left by a writer that crashed; it was "
                 "never acknowledged, so no record is lost")


def note_newline(ledger_path: Path, offset: int, seq: int) -> dict:
    """Record that the newline a whole last record (`seq`) lacked was added at `offset` (`Writer._add_newline`)."""
    return _said(ledger_path, {"offset": offset, "bytes": 0, "added_newline": True, "after_seq": seq},
                 f"record seq {seq} was whole but its final newline was missing (a write torn at its last byte); "
                 "added the newline, no record is lost")


def note_unmarked(ledger_path: Path, offset: int, seq: int) -> dict:
    """Record that a writer found records up to `seq` (ending at `offset`) with no acknowledged mark and starts one
    with its append: a cut end before then could not be detected (`acked.unmarked`)."""
    return _said(ledger_path, {"offset": offset, "bytes": 0, "mark_started": True, "after_seq": seq},
                 f"its {seq} record(s) had no acknowledged mark ({ledger_path.name}.sync missing, empty or from an "
                 "older reef), so a cut end before now cannot be ruled out; a new mark starts with this append")


def _said(ledger_path: Path, fields: dict, what: str) -> dict:
    """The note, appended durably to `<ledger>.repairs` and said on stderr (with where it went)."""
    note = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields}
    try:
        append_durable(repairs_path(ledger_path), json.dumps(note, sort_keys=True).encode() + b"\n")
        where = f"noted in {repairs_path(ledger_path)}"
    except OSError as exc:
        where = f"could not note it in {repairs_path(ledger_path)}: {exc.strerror}"
    sys.stderr.write(f"reef: warning: ledger {ledger_path}: {what} ({where})\n")
    return note


def read_repairs(ledger_path: Path) -> tuple[dict, ...]:
    """Every repair noted for this ledger, oldest first (a line that does not parse is skipped: a note, not state)."""
    try:
        data = repairs_path(ledger_path).read_bytes()
    except FileNotFoundError:
        return ()
    out = []
    for line in data.splitlines():
        try:
            note = json.loads(line)
        except ValueError:
            continue
        if isinstance(note, dict):
            out.append(note)
    return tuple(out)


def _last_line_before(fd: int, end: int) -> bytes:
    """The complete line that ends at offset `end` (without its newline); b"" when there is none in 64 KiB."""
    start = max(0, end - 65536)
    data = os.pread(fd, end - start, start)
    if not data.endswith(b"\n"):
        return b""
    cut = data.rfind(b"\n", 0, len(data) - 1)
    if cut < 0 and start > 0:
        return b""
    return data[cut + 1 : -1]
