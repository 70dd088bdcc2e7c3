"""The acknowledged mark: how far the ledger was durable when a writer last acknowledged an append.

A torn last line is of two kinds that look the same on disk. One is a crashed writer's unfinished write: it was
never acknowledged, and cutting it off loses nothing. The other is an acknowledged record cut afterwards (a
`truncate`, a bad restore, a filesystem fault): cutting that off deletes a durable record. Only the writer knew
which bytes it acknowledged, so after each sync it notes `(inode, end, seq, hash)` of what it acknowledged in the
mapped `<ledger>.sync` page, beside the group-commit leader's fields (`group_commit.SyncPage`). A store into a
mapped page is no system call, so the append's fast path gains none; the page is in the page cache, shared by
every process, and outlives a writer killed with SIGKILL.

The mark is never synced. It is written only after the sync it describes, so whatever of it reaches the disk never
claims more than was durable: after a power cut it may be older (less is known, and a cut beyond it looks like a
crash's torn line, as before), never ahead. Writers store it without a lock: two stores racing may leave the lower
end or a torn copy, which the check word turns into "nothing known"; both only lose evidence, never invent it.

A mark speaks for the file of its inode, and also, against cutting a torn last line, for whatever file sits at the
ledger's path (`applies`). A project copied with `cp -a` (or moved to another filesystem) has the same records
under new inode numbers, and its `.sync` page, copied with it, still says what was acknowledged; keyed by inode
alone, a copy cut afterwards had the cut taken for a crash's torn line and trimmed without a word, the bytes of an
acknowledged record with it. A file of another inode that ends in whole records (an older copy put back by a
rename) loses no bytes to a trim: what it lacks is the release anchors' to report, as before.

A ledger whose last complete record comes before the mark's lost acknowledged records off its end
(one shortened in the middle still ends in it: an edit the chain reports). The writer refuses to append over it,
and to cut its last line as a torn write, and `verify` fails, both naming the file, the offset and the record (`cut_message`), until the record is restored
or the loss is recorded (`reef repair ledger --accept-loss`, which keeps the cut bytes aside).
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
_pack_into = _LAYOUT.pack_into


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

    try:  # never blocked by a FIFO planted there (an open for reading waits for a writer)
        fd = os.open(sync_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
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
    """The mark in a writer's mapping of `<ledger>.sync`."""

    def __init__(self, mapping) -> None:
        self.map = mapping

    def read(self) -> Mark | None:
        return unpack(self.map[OFFSET : OFFSET + _LAYOUT.size])

    def note(self, ino: int, end: int, seq: int, digest: str) -> None:
        """Set the mark to what was acknowledged just now: one store of five words into the page, no system call
        and no read first (measured: reading to keep the mark monotonic cost more than the append's own Python).
        A writer racing another may leave the lower of the two ends; the next append raises it again."""
        prefix = int(digest[:16], 16)
        _pack_into(self.map, OFFSET, ino, end, seq, prefix, _MAGIC ^ ino ^ end ^ seq ^ prefix)

    reset = note
    """Set the mark outright (a new file, a compaction's copy, a recorded loss), under the writer lock."""


def applies(mark: Mark, ino: int, torn: int) -> bool:
    """Does `mark` speak for the ledger file of inode `ino`, which ends in `torn` bytes of an unfinished line? Its
    own file's always; another inode's (a copy) only when a torn line would be cut: the one case where taking the
    cut for a crash's unacknowledged write destroys an acknowledged record's bytes."""
    return mark.ino == ino or torn > 0


def cut_message(path: Path, mark: Mark, records_end: int, torn: int) -> str:
    """The one line naming the ledger, where its records end, and the acknowledged record that is missing."""
    tail = f", followed by {torn} bytes of a cut line" if torn else ""
    return (
        f"ledger {path} lost acknowledged records: record seq {mark.seq} (hash {mark.hash[:16]}) was acknowledged "
        f"ending at offset {mark.end}, but the file's complete records end at offset {records_end}{tail}; restore "
        f"the ledger from a backup, or record the loss with 'reef repair ledger --accept-loss' (it keeps the cut "
        f"bytes aside; nothing was changed)"
    )
