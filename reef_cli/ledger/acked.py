"""The acknowledged mark: how far the ledger was durable when a writer last acknowledged an append.

A torn last line is of two kinds that look the same on disk. One is a crashed writer's unfinished write: it was
never acknowledged, and cutting it off loses nothing. The other is an acknowledged record cut afterwards (a
`truncate`, a bad restore, a filesystem fault): cutting that off deletes a durable record. Only the writer knew
which bytes it acknowledged, so after each sync it notes `(inode, end, seq, hash)` of what it acknowledged in the
`<ledger>.sync` page, beside the group-commit leader's fields (`group_commit.SyncPage`): one pwrite of 40 bytes
into the page cache, shared by every process, which outlives a writer killed with SIGKILL. (It was a store into a
shared mapping, no system call at all, until emptying the file was found to kill every writer mapping it with
SIGBUS: `group_commit.SyncPage`.)

The mark is never synced. It is written only after the sync it describes, so whatever of it reaches the disk never
claims more than was durable: after a power cut it may be older (less is known, and a cut beyond it looks like a
crash's torn line, as before), never ahead. Writers store it without a lock: two stores racing may leave the lower
end, and a read racing a store may copy a torn one, which the check word turns into "nothing known"; both only lose
evidence, never invent it.

A page emptied (or cut short) under a running writer holds no mark until that writer's next acknowledgement writes
it back. Its own appends are what the mark would vouch for, so writing it back over a file that has not changed
since the writer last looked loses nothing; a writer that finds the file changed and the mark gone (`MarkPage.gone`)
notes it in `<ledger>.repairs` as a writer starting over an unmarked file does, since a cut end meanwhile could not
be detected.

The mark speaks for whatever file sits at the ledger's path, whatever its inode: it is this machine's durable
statement of what reef acknowledged to callers (the receipts it handed out). A ledger there whose records end before
the mark's record (`short`: cut in place, an older copy put back by a rename, `git checkout` of an older file, a copy
cut at a line boundary), that has no file at all (`gone`), or that holds another record at the mark's seq
(`replaced`) lost acknowledged records, and that is said (`Loss.message`), never read as intact. Keyed by inode (as
it was), a `cp -a` copy cut afterwards and any file put back by a rename were taken for new files and passed as
intact; the release anchors only cover records up to the last publish, so the receipts since went unreported.

What does not count as a loss: no mark, or a mark of seq 0 (a new ledger). But a ledger with records and no mark
(its `.sync` removed or emptied, or kept by a reef older than the mark) cannot rule out a cut end either: `verify`
says so (`unmarked`, a warning), and the writer that starts a mark over such a file notes it in `<ledger>.repairs`,
so a removed mark is not erased by the next append. Nor: a file at or past the mark's record with
that record in place (a `cp -a` copy, a compaction's copy: `compact` moves the mark, and a crash before it moves
leaves a file that still holds, or compacted away, the mark's record); and a file whose last record is the
`ledger_cut` record naming this very mark (`reef repair ledger --accept-loss` recorded the loss; the append of that
record moves the mark, and a crash before it does leaves that record last).

A ledger that lost acknowledged records is refused by writers (an append over it would bury the loss, and its next
mark would erase the evidence) and by `reef run` before it runs anything; `verify` fails, all with one line naming the
file, how many acknowledged records are missing and how to recover (`Loss.message`), until the file is restored or
the loss recorded (`reef repair ledger --accept-loss`, which keeps a cut line's bytes aside).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

OFFSET = 2048
"""Where the mark lives in the 4 KiB `<ledger>.sync` page (the leader's fields start at 0)."""
_LAYOUT = struct.Struct("<QQQQQ")  # inode, end, seq, the hash's first 8 bytes, check word
_MAGIC = 0x7265_6566_6163_6B64  # "reefackd"
_pack, _pwrite = _LAYOUT.pack, os.pwrite


@dataclass(frozen=True)
class Mark:
    """The ledger with inode `ino` held acknowledged records up to offset `end`; the last one is `seq`, whose hash
    begins with `hash` (16 hex digits: enough to name it)."""

    ino: int
    end: int
    seq: int
    hash: str


def unpack(data: bytes) -> Mark | None:
    """The mark in `data` (the layout's bytes), or None when there is none or it is torn."""
    if len(data) < _LAYOUT.size:
        return None
    ino, end, seq, prefix, check = _LAYOUT.unpack(data[: _LAYOUT.size])
    if not ino or check != _MAGIC ^ ino ^ end ^ seq ^ prefix:
        return None
    return Mark(ino, end, seq, f"{prefix:016x}")


def read(sync_path: str | os.PathLike[str]) -> Mark | None:
    """The mark kept in a `<ledger>.sync` file, for readers that do not map it (verify)."""
    import stat

    try:  # never blocked by a FIFO planted there (an open for reading waits for a writer), never through a symlink
        fd = os.open(sync_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):  # a directory, a FIFO...: the OSError the CLI and doctor name it by, exit 4
            import errno

            code = errno.EISDIR if stat.S_ISDIR(kind) else errno.ENXIO
            raise OSError(code, os.strerror(code), os.fspath(sync_path))
        return unpack(os.pread(fd, _LAYOUT.size, OFFSET))
    finally:
        os.close(fd)


class MarkPage:
    """The mark in a writer's `<ledger>.sync` (`page`: a `group_commit.SyncPage`, whose descriptor it uses)."""

    def __init__(self, page) -> None:
        self.page = page  # keeps the descriptor open
        self.fd = page.fd

    def read(self) -> Mark | None:
        return unpack(os.pread(self.fd, _LAYOUT.size, OFFSET))

    def gone(self) -> bool:
        """Is there no mark at all: the page emptied or cut short, or the mark forgotten (inode 0)? A torn copy (a
        read racing a store) is not gone: it is read again until whole, a few times at most."""
        for _ in range(3):
            data = os.pread(self.fd, _LAYOUT.size, OFFSET)
            if len(data) < _LAYOUT.size or not _LAYOUT.unpack(data)[0]:
                return True
            if unpack(data) is not None:
                return False
        return False

    def note(self, ino: int, end: int, seq: int, digest: str) -> None:
        """Set the mark to what was acknowledged just now: one pwrite of five words, no read first (measured: reading
        to keep the mark monotonic cost more than the append's own Python). A writer racing another may leave the
        lower of the two ends; the next append raises it again. Written back after the page was emptied."""
        prefix = int(digest[:16], 16)
        _pwrite(self.fd, _pack(ino, end, seq, prefix, _MAGIC ^ ino ^ end ^ seq ^ prefix), OFFSET)

    reset = note
    """Set the mark outright (a new file, a compaction's copy, a recorded loss), under the writer lock."""


CUT_KIND = "ledger_cut"
"""The record `reef repair ledger --accept-loss` appends for acknowledged records gone from the ledger."""

_REMEDY = "restore the ledger from a backup, or record the loss with 'reef repair ledger --accept-loss'"


@dataclass(frozen=True)
class Loss:
    """Acknowledged records missing from the file at the ledger's path: `why` is "gone" (no file), "short" (its
    complete records end at `records_end`, with record `last_seq`, before the mark's record; `torn` bytes of a cut
    line follow) or "replaced" (another record, hash `found_hash`, where the mark's record belongs)."""

    mark: Mark
    why: str
    records_end: int = 0
    last_seq: int = 0
    torn: int = 0
    found_hash: str = ""

    def message(self, path: Path) -> str:
        """The one line naming the ledger, what is missing and how to recover."""
        mark = self.mark
        said = f"record seq {mark.seq} (hash {mark.hash[:16]}) was acknowledged ending at offset {mark.end}"
        kept = "it keeps the cut bytes aside; " if self.torn else ""
        if self.why == "gone":
            where = f"but the file is gone, so every record up to seq {mark.seq} is missing"
        elif self.why == "replaced":
            where = (f"but seq {mark.seq} there is another record (hash {self.found_hash[:16]}): the file was replaced "
                     f"or rewritten, so acknowledged record seq {mark.seq} is missing")
        else:
            tail = f", followed by {self.torn} bytes of a cut line" if self.torn else ""
            count = mark.seq - self.last_seq
            which = f"seq {mark.seq}" if count == 1 else f"seq {self.last_seq + 1}..{mark.seq}"
            where = (f"but the file's complete records end at offset {self.records_end} (seq {self.last_seq}){tail}, "
                     f"so {count} acknowledged record{'s' if count > 1 else ''} ({which}) "
                     f"{'are' if count > 1 else 'is'} missing")
        return f"ledger {path} lost acknowledged records: {said}, {where}; {_REMEDY} ({kept}nothing was changed)"

    def to_json(self) -> dict:
        """What the `ledger_cut` record keeps of it (`acknowledged` is how a later check knows this mark's loss was
        recorded: `recorded`)."""
        return {"acknowledged": {"seq": self.mark.seq, "hash": self.mark.hash, "end": self.mark.end},
                "why": self.why, "records_end": self.records_end, "last_seq": self.last_seq}


def judge(mark: Mark | None, fd: int | None, ino: int, size: int, records_end: int,
          last: tuple[int, str] | None = None, *, thorough: bool = True) -> Loss | None:
    """What the file open at `fd` (inode `ino`, `size` bytes, complete records up to `records_end`; None when there is
    no file at the ledger's path) lost of what `mark` says was acknowledged, or None. `last` is the (seq, hash) of
    the record ending at `records_end` when the caller knows it. A file that got past the mark's record is checked
    for that record only when `thorough` (one read where the mark's inode is the file's, a bisection otherwise);
    a writer asks for it when it first looks at a file, not on every catch-up with other writers' appends."""
    if mark is None or not mark.seq:
        return None
    if fd is None:
        return Loss(mark, "gone")
    if last is None:
        last = _seq_hash(line_ending_at(fd, records_end)) if records_end else (0, "")
        if last is None:
            return None  # a last record that is not one: the chain's to report
    if size > records_end and (whole := whole_tail(fd, records_end, size, last)) is not None:
        last, records_end = whole, size  # a whole record that lost only its newline is not missing
    seq, digest = last
    if seq < mark.seq:
        loss = Loss(mark, "short", records_end, seq, size - records_end)
    elif seq == mark.seq:
        if digest.startswith(mark.hash):
            return None
        loss = Loss(mark, "replaced", records_end, seq, size - records_end, digest)
    else:
        found = _record_at(fd, ino, size, mark) if thorough else None
        if found is None or found.startswith(mark.hash):
            return None  # in place, or compacted away (the chain's compaction record explains the start)
        loss = Loss(mark, "replaced", records_end, seq, size - records_end, found)
    return None if records_end and recorded(line_ending_at(fd, records_end), mark) else loss


def at_mark(fd: int, mark: Mark) -> bool:
    """Does the line ending at the mark's `end` hold the mark's record? One read of the last line before it."""
    found = _seq_hash(line_ending_at(fd, mark.end))
    return found is not None and found[0] == mark.seq and found[1].startswith(mark.hash)


def moved(mark: Mark, fd: int, ino: int, size: int, records_end: int, last: tuple[int, str] | None = None) -> bool:
    """Is the mark's record, which `judge` found in place, no longer where it was acknowledged: the last record
    (`last`, ending at `records_end`) is the mark's record but ends elsewhere, or the file of the mark's own inode
    grew past it but the line ending at the mark's `end` is not it. Bytes before it then changed length in place:
    a record deleted, inserted or edited, or the lines reformatted (which keeps every record's hash). Cheap (at
    most one read of one line), so a writer's first look and `reef run`'s check can ask; only a yes costs a walk of
    the chain (`verify`), to tell a reformat from a break. A compaction writes a new file (another inode) whose
    last record is its own, so it never reads as moved; an edit that keeps every length is left to `verify`."""
    if last is None:
        last = _seq_hash(line_ending_at(fd, records_end)) if records_end else None
        if last is None:
            return False
    if last[0] == mark.seq:
        return records_end != mark.end and last[1].startswith(mark.hash)
    return last[0] > mark.seq and ino == mark.ino and not (size >= mark.end and at_mark(fd, mark))


def edited(path: Path, mark: Mark, broken: str) -> str:
    """The line for a ledger whose chain broke before its last acknowledged record (`broken`: verify's message)."""
    return (f"{broken}; the ledger was changed before record seq {mark.seq}, acknowledged ending at offset "
            f"{mark.end}, so nothing is appended to it: restore it from a backup ('reef ledger verify' names the "
            f"break; nothing was changed)")


def unmarked(path: Path, records: int) -> str:
    """What a ledger with `records` records and no mark cannot tell (`VerifyResult.mark_missing`)."""
    return (f"ledger {path} holds {records} record(s) but no acknowledged mark ({path.name}.sync is missing, empty or "
            f"was kept by a reef older than the mark), so records cut off its end past the release anchors cannot be "
            f"detected; the next append starts a new mark")


def whole_tail(fd: int, records_end: int, size: int, last: tuple[int, str] | None = None) -> tuple[int, str] | None:
    """(seq, hash) of the bytes after `records_end` (up to `size`) when they are a whole record that lacks only its
    final newline: valid JSON, its hash checks, and it chains onto the record ending at `records_end` (`last`, its
    seq and hash, read when not given). That is a write torn at its very last byte (or a file saved without the
    trailing newline): the record is intact, so adding the newline loses nothing where cutting it as a torn line
    would delete a record, acknowledged or not. None for anything else."""
    from .record import ZERO_HASH, _decode

    if not records_end < size <= records_end + (1 << 20):
        return None
    raw = os.pread(fd, size - records_end, records_end)
    if b"\n" in raw or not raw.endswith(b"}"):
        return None
    try:
        record, ok = _decode(raw)
    except ValueError:
        return None
    if not ok:
        return None
    if records_end:
        if last is None:
            last = _seq_hash(line_ending_at(fd, records_end))
        if last is None or (record.seq, record.prev_hash) != (last[0] + 1, last[1]):
            return None
    elif (record.seq, record.prev_hash) != (1, ZERO_HASH):
        return None
    return record.seq, record.hash


def recorded(raw: bytes, mark: Mark) -> bool:
    """Is `raw` (a ledger line) the `ledger_cut` record of this mark's loss?"""
    from .record import _decode

    if CUT_KIND.encode() not in raw:
        return False
    try:
        record, ok = _decode(raw)
    except ValueError:
        return False
    acknowledged = record.payload.get("acknowledged")
    return ok and record.kind == CUT_KIND and acknowledged == {"seq": mark.seq, "hash": mark.hash, "end": mark.end}


def _seq_hash(raw: bytes) -> tuple[int, str] | None:
    from .record import _decode, _quick_tail

    found = _quick_tail(raw)
    if found is not None:
        return found
    try:
        record, ok = _decode(raw)
    except ValueError:
        return None
    return (record.seq, record.hash) if ok else None


def _record_at(fd: int, ino: int, size: int, mark: Mark) -> str | None:
    """The hash of the record with the mark's seq in the file, or None when it has none (compacted away)."""
    from .reading import _read_line_at, seq_offset

    if ino == mark.ino and size >= mark.end:  # appended to since: the record ends where the mark says
        found = _seq_hash(line_ending_at(fd, mark.end))
        if found is not None and found[0] == mark.seq:
            return found[1]
    with open(os.dup(fd), "rb") as handle:
        offset = seq_offset(handle, mark.seq)
    found = _seq_hash(_read_line_at(fd, offset)) if offset < size else None
    return found[1] if found is not None and found[0] == mark.seq else None


def line_ending_at(fd: int, end: int) -> bytes:
    """The complete line that ends at offset `end` (its newline at `end - 1`), without the newline; b"" when the
    byte there is not a newline or `end` is 0. Reads backwards in blocks: a line of any length."""
    if end <= 0 or os.pread(fd, 1, end - 1) != b"\n":
        return b""
    chunks: list[bytes] = []
    position = end - 1
    while position > 0:
        start = max(0, position - 4096)
        block = os.pread(fd, position - start, start)
        cut = block.rfind(b"\n")
        if cut >= 0:
            chunks.append(block[cut + 1 :])
            break
        chunks.append(block)
        position = start
    return b"".join(reversed(chunks))


def records_end(fd: int, size: int) -> int | None:
    """Where the last complete record ends: past the last newline, before a last line that is not JSON (a torn
    write, e.g. zero-filled). None when the last MiB holds no newline (a corrupt file, not a torn line)."""
    from .record import _BadJSON, _decode

    start = max(0, size - (1 << 20))
    data = os.pread(fd, size - start, start)
    end = data.rfind(b"\n") + 1
    if end == 0:
        return None if start else 0
    line_start = data.rfind(b"\n", 0, end - 1) + 1
    try:
        _decode(data[line_start : end - 1])
    except _BadJSON:
        return start + line_start
    except ValueError:
        pass  # JSON, but not a valid record: verify names it; it is not a torn write
    return start + end
