"""Sortable unique ids for records and releases: `<prefix>_` + a 26-character ULID (48-bit ms time + 80 random
bits, Crockford base32 in ASCII order so ids sort by time), strictly increasing within a process."""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone

_B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [first + second for first in _B32 for second in _B32]  # 10 bits -> 2 characters
_POOL_IDS = 64
_id_lock = threading.Lock()
_id_last = [0, 0, ""]  # last ms, last 80-bit randomness, and the ms encoded (10 characters), in this process
_pool = [b"", 0]  # random bytes from os.urandom, drawn 10 at a time (one system call per 64 ids), and the offset


def _reset_after_fork() -> None:
    _id_last[:] = [0, 0, ""]
    _pool[:] = [b"", 0]  # never hand the child the parent's unused randomness


os.register_at_fork(after_in_child=_reset_after_fork)


def new_id(prefix: str, moment: datetime | None = None) -> str:
    """Within one millisecond (or if the clock steps back) the randomness is incremented, as ULID's monotonic mode
    does; a forked child resets that state, so parent and child never continue the same sequence."""
    return new_id_at(prefix, int((moment or datetime.now(timezone.utc)).timestamp() * 1000))


def new_id_at(prefix: str, ms: int) -> str:
    """`new_id` for a time given as milliseconds since the epoch (what `time.time_ns() // 10**6` gives)."""
    with _id_lock:
        last_ms, last_rand, head = _id_last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
            if rand >> 80:
                ms, rand = ms + 1, _random80()
        else:
            rand = _random80()
        if ms != last_ms or not head:
            head = "".join([_PAIRS[(ms >> shift) & 0x3FF] for shift in (40, 30, 20, 10, 0)])  # 48 bits as 50
        _id_last[0], _id_last[1], _id_last[2] = ms, rand, head
    p = _PAIRS  # 80 random bits as 16 characters, 10 bits at a time (spelt out: this runs on every append)
    return (
        f"{prefix}_{head}{p[rand >> 70]}{p[rand >> 60 & 0x3FF]}{p[rand >> 50 & 0x3FF]}{p[rand >> 40 & 0x3FF]}"
        f"{p[rand >> 30 & 0x3FF]}{p[rand >> 20 & 0x3FF]}{p[rand >> 10 & 0x3FF]}{p[rand & 0x3FF]}"
    )


def _random80() -> int:
    """80 bits from the OS's CSPRNG; called under `_id_lock`."""
    data, at = _pool
    if at >= len(data):
        data, at = os.urandom(10 * _POOL_IDS), 0
    _pool[0], _pool[1] = data, at + 10
    return int.from_bytes(data[at : at + 10], "big")
