"""CPU cost of `Ledger.append`'s flat path, syncs left out: what the ledger adds on top of the write itself.

`ledger_bench.py` measures durable appends against raw fsyncs, which a shared disk swamps; this one measures CPU
time (user + sys, `time.process_time`) per append with the sync stubbed out, against a baseline in the same run:
flock + os.write + unlock of a ready-made line of the same size (the no-work floor of an append). Usage:

    .venv/bin/python bench/ledger_cpu_bench.py [--appends 5000] [--trials 5] [--root DIR]

`--root` runs another checkout's reef_cli (e.g. one exported with `git archive`) to compare versions side by side.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

PAYLOAD = {"argv": ["sh", "-c", "make test"], "exit_code": 0, "duration_s": 0.5, "pad": "x" * 200}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=5000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    ledger_pkg = importlib.import_module("reef_cli.ledger")
    writer = importlib.import_module("reef_cli.ledger.writer") if hasattr(ledger_pkg, "__path__") else ledger_pkg
    writer._fdatasync = lambda fd: None  # the sync is the disk's cost, measured by ledger_bench.py
    ledger_times, floor_times = [], []
    for _ in range(args.trials):
        with tempfile.TemporaryDirectory() as scratch:
            with ledger_pkg.Ledger(Path(scratch) / "ledger.jsonl", "bench") as ledger:
                line = ledger.append("interaction", PAYLOAD, release_id="rel_1", content_id="c_1").to_line()
                started = time.process_time()
                for _ in range(args.appends):
                    ledger.append("interaction", PAYLOAD, release_id="rel_1", content_id="c_1")
                ledger_times.append((time.process_time() - started) / args.appends * 1e6)
            fd = os.open(Path(scratch) / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            lock = os.open(Path(scratch) / "floor.lock", os.O_RDWR | os.O_CREAT, 0o600)
            started = time.process_time()
            for _ in range(args.appends):
                fcntl.flock(lock, fcntl.LOCK_EX)
                os.write(fd, line)
                fcntl.flock(lock, fcntl.LOCK_UN)
            floor_times.append((time.process_time() - started) / args.appends * 1e6)
            os.close(fd)
            os.close(lock)
    ledger_us, floor_us = statistics.median(ledger_times), statistics.median(floor_times)
    print(f"reef_cli from {args.root}; {args.trials} trials x {args.appends} appends, {len(line)}-byte lines")
    print(f"Ledger.append without sync: median {ledger_us:.1f} us CPU (best {min(ledger_times):.1f})")
    print(f"floor flock+write+unlock:   median {floor_us:.1f} us CPU (best {min(floor_times):.1f})")
    print(f"ratio ledger/floor: {ledger_us / floor_us:.2f}x")


if __name__ == "__main__":
    main()
