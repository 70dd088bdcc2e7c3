"""What refusing to append onto a chain broken in the middle costs, against the alternative of walking the chain.

A writer's first look at a ledger (a new `reef report`/`reef run` process, a restarted gateway) asks whether the
last acknowledged record is still where it was acknowledged (`acked.moved`, one read of one line); only a yes walks
the chain. Printed: the full verify of an N-record ledger (the O(n) alternative), the check itself, and a fresh
writer's first look at the file (open, load the tail) with the check against the same with it switched off (the
baseline, measured in the same run, interleaved), as a ratio.

    .venv/bin/python bench/ledger_first_look.py [--records 300000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reef_cli.ledger import Ledger, acked  # noqa: E402
from reef_cli.ledger.writer import Writer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        path = Path(tmp) / "ledger.jsonl"
        ledger = Ledger(path, "default")
        left = args.records
        while left:
            n = min(left, 10_000)
            ledger.append_many([{"kind": "run", "payload": {"text": "x" * 400, "i": i}, "release_id": None,
                                 "content_id": None} for i in range(n)])
            left -= n
        ledger.close()
        print(f"ledger: {args.records} records, {path.stat().st_size / 2**20:.0f} MiB")

        t0 = time.perf_counter()
        assert Ledger(path, "default").verify().ok
        print(f"full verify (the O(n) alternative per append): {1000 * (time.perf_counter() - t0):.0f} ms")

        mark = acked.read(str(path) + ".sync")
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        end = acked.records_end(fd, size)
        samples = []
        for _ in range(2000):
            t = time.perf_counter_ns()
            acked.moved(mark, fd, os.fstat(fd).st_ino, size, end)
            acked.at_mark(fd, mark)
            samples.append(time.perf_counter_ns() - t)
        os.close(fd)
        print(f"the check (acked.moved + acked.at_mark): median {statistics.median(samples) / 1000:.1f} us")

        real = Writer._refuse_edited
        timings: dict[str, list[float]] = {"check": [], "baseline": []}
        for i in range(2 * args.rounds):
            which = "check" if i % 2 == 0 else "baseline"
            Writer._refuse_edited = real if which == "check" else (lambda self, *a: None)
            with Ledger(path, "default") as fresh:  # a first look every time, as a new process has
                fresh._ensure_open()
                t = time.perf_counter_ns()
                fresh._refresh()  # open the file and load its tail: where the check runs (no append, no sync)
                timings[which].append(time.perf_counter_ns() - t)
        Writer._refuse_edited = real
        check, base = (statistics.median(timings[k]) / 1000 for k in ("check", "baseline"))
        print(f"first look of a fresh writer (open + tail): with the check {check:.0f} us, baseline {base:.0f} us, "
              f"ratio {check / base:.3f}")


if __name__ == "__main__":
    main()
