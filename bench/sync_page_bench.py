"""The `.sync` page work each append does, old against new in one process (alternating trials, CPU time):

- old: what reef did until 2026-12-02: the leaders' average read from a shared mapping of the page and the
  acknowledged mark stored into it (no system call; SIGBUS once the file was emptied);
- new: `SyncLeader.shared_average` (re-read at most once per ms) and `acked.MarkPage.note` (one pwrite).

Usage: .venv/bin/python bench/sync_page_bench.py [--trials 15] [--appends 20000]
"""

from __future__ import annotations

import argparse
import functools
import mmap
import operator
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reef_cli.ledger import acked, group_commit  # noqa: E402

_PAGE = struct.Struct("<QQQQQQQ")
_MARK = struct.Struct("<QQQQQ")
_SYNC_MAGIC, _MARK_MAGIC = 0x7265_6566_7379_6E63, 0x7265_6566_6163_6B64
DIGEST = "733281ba2579a9e5"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--appends", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reef-sync-page-") as scratch:
        leader = group_commit.SyncLeader(os.path.join(scratch, "new.sync"))
        marks = acked.MarkPage(leader.page())
        fd = os.open(os.path.join(scratch, "old.sync"), os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, 4096)
        mapped = mmap.mmap(fd, 4096)
        os.close(fd)
        pack_into = _MARK.pack_into

        def old(i: int) -> None:  # the mapped page: SyncLeader.shared_average, then MarkPage.note
            *fields, check = _PAGE.unpack(mapped[: _PAGE.size])
            _ = fields[4] if check == functools.reduce(operator.xor, fields, _SYNC_MAGIC) else 0
            prefix = int(DIGEST, 16)
            pack_into(mapped, acked.OFFSET, 5, i, i, prefix, _MARK_MAGIC ^ 5 ^ i ^ i ^ prefix)

        def new(i: int) -> None:
            leader.shared_average()
            marks.note(5, i, i, DIGEST)

        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.trials):
            for name, step in (("old", old), ("new", new)):
                started = time.process_time_ns()
                for i in range(args.appends):
                    step(i)
                times[name].append((time.process_time_ns() - started) / args.appends / 1000)
        mapped.close()
    for name, spent in times.items():
        print(f"{name}: median {statistics.median(spent):.2f} us CPU per append, best {min(spent):.2f}")
    old_us, new_us = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"new - old: {new_us - old_us:+.2f} us per append (new/old {new_us / old_us:.2f}x)")


if __name__ == "__main__":
    main()
