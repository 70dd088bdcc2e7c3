"""Sortable unique ids for records and releases: `<prefix>_` + a 26-character ULID (48-bit ms time + 80 random
bits, Crockford base32 in ASCII order so ids sort by time), strictly increasing within a process."""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone

_B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [first + second for first in _B32 for second in _B32]  # 10 bits -> 2 characters
_id_lock = threading.Lock()
_id_last = [0, 0, ""]  # last ms, last 80-bit randomness, and the ms encoded (10 characters), in this process


def _reset_after_fork() -> None:
    _id_last[:] = [0, 0, ""]


os.register_at_fork(after_in_child=_reset_after_fork)


def new_id(prefix: str, moment: datetime | None = None) -> str:
    """Within one millisecond (or if the clock steps back) the randomness is incremented, as ULID's monotonic mode
    does; a forked child resets that state, so parent and child never continue the same sequence."""
    ms = int((moment or datetime.now(timezone.utc)).timestamp() * 1000)
    with _id_lock:
        last_ms, last_rand, head = _id_last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
            if rand >> 80:
                ms, rand = ms + 1, int.from_bytes(os.urandom(10), "big")
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        if ms != last_ms or not head:
            head = "".join([_PAIRS[(ms >> shift) & 0x3FF] for shift in (40, 30, 20, 10, 0)])  # 48 bits as 50
        _id_last[:] = [ms, rand, head]
    return f"{prefix}_{head}" + "".join([_PAIRS[(rand >> shift) & 0x3FF] for shift in (70, 60, 50, 40, 30, 20, 10, 0)])
