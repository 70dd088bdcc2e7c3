"""Ledger durability cost and group commit, each measured against a raw write+fsync loop in the same run.

(1) single writer: median latency of `Ledger.append` (durable) vs `os.write` + `os.fsync` of a line of the same
    size, on the same disk; rounds alternate so drift hits both. Target: <= 1.3x.
(2) concurrent writers: records/s of W processes appending to one ledger vs the raw single-writer fsync rate.
    Target (W=8): >= 4x. Beside it, in the same trial, the floor of any design here: W processes doing nothing but
    flock + write + unlock + fdatasync of a ready-made line (no JSON, no hash, no Python between syscalls). Device
    flushes come from /sys/dev/block/<disk>/stat (machine-wide: other processes' flushes count too).

Usage: .venv/bin/python bench/ledger_bench.py [--dir bench/out] [--writers 8] [--per-writer 1000] [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import reef_cli.ledger.writer as ledger_module  # noqa: E402  (where the writer's fdatasync is looked up)
from reef_cli.ledger import Ledger, NewRecord  # noqa: E402


def payload(i: int, size: int) -> dict:
    return {
        "session": f"sess-{i:08d}",
        "agent": "claude-code",
        "outcome": "ok",
        "tokens": {"in": 1200 + i % 97, "out": 310},
        "note": "x" * max(0, size - 120),
    }


def raw_loop(path: Path, line: bytes, count: int, sync) -> list[float]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    latencies = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, line)
            sync(fd)
            latencies.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return latencies


def ledger_loop(path: Path, count: int, size: int) -> tuple[list[float], int]:
    latencies = []
    with Ledger(path, "bench") as ledger:
        ledger.append("interaction", payload(0, size), release_id="rel_bench", content_id="c_bench")  # open + create
        for i in range(count):
            body = payload(i, size)
            start = time.perf_counter()
            ledger.append("interaction", body, release_id="rel_bench", content_id="c_bench")
            latencies.append(time.perf_counter() - start)
        return latencies, ledger.fsyncs


def diagnose(scratch: Path, count: int, size: int, sync_us: float) -> None:
    """Where the single-writer overhead goes: each append's time outside its sync, with the sync (a) real,
    (b) replaced by a sleep and (c) by a busy-wait of about its length. In (c) the CPU stays hot, so that is the
    code's own cost; where a CPU loses its caches while the process sleeps, (a) and (b) show the code slower."""
    real = ledger_module._fdatasync

    def spin(fd: int) -> None:
        end = time.perf_counter() + sync_us / 1e6
        while time.perf_counter() < end:
            pass

    print()
    print(f"| diagnosis: {count} appends, the sync replaced by | median append µs | median µs outside the sync |")
    print("|---|---:|---:|")
    for name, sync in (
        ("nothing (no sync)", lambda fd: None),
        (f"a busy-wait of {sync_us:.0f} µs (CPU stays hot)", spin),
        (f"a sleep of {sync_us:.0f} µs", lambda fd: time.sleep(sync_us / 1e6)),
        ("(not replaced: the real fdatasync)", real),
    ):
        inside: list[float] = []

        def timed(fd: int, sync=sync) -> None:
            start = time.perf_counter()
            sync(fd)
            inside.append(time.perf_counter() - start)

        ledger_module._fdatasync = timed
        try:
            latencies, _ = ledger_loop(scratch / f"diagnose-{len(name)}.jsonl", count, size)
        finally:
            ledger_module._fdatasync = real
        outside = [total - spent for total, spent in zip(latencies, inside[-count:])]
        print(f"| {name} | {statistics.median(latencies) * 1e6:.0f} | {statistics.median(outside) * 1e6:.0f} |")


def scale(scratch: Path, count: int, size: int) -> None:
    """What a one-shot process (reef run / reef report) pays on a big ledger: opening never reads the file, a
    client-supplied id costs one pass over the id index, a recent id is found in its last block."""
    import resource

    path = scratch / "scale.jsonl"
    first = None
    with Ledger(path, "bench") as ledger:
        for start in range(0, count, 5000):
            batch = [NewRecord("interaction", payload(i, size), "rel_bench", "c_bench")
                     for i in range(start, min(count, start + 5000))]
            records = ledger.append_many(batch)
            first = first or records[0]
    last = records[-1]
    print()
    print(f"| {count:,} records ({path.stat().st_size / 1e6:.0f} MB), each step in a fresh Ledger | ms |")
    print("|---|---:|")

    def timed(name: str, step) -> None:
        began = time.perf_counter()
        step()
        print(f"| {name} | {(time.perf_counter() - began) * 1e3:.1f} |")

    timed("open + append (generated id)", lambda: Ledger(path, "bench").append(
        "interaction", {}, release_id="r", content_id="c"))
    timed("first get(): builds the id index", lambda: Ledger(path, "bench").get(last.record_id))
    timed("open + get(most recent id)", lambda: Ledger(path, "bench").get(last.record_id))
    timed("open + get(oldest id)", lambda: Ledger(path, "bench").get(first.record_id))
    timed("open + append with a new client id (one pass over the index)", lambda: Ledger(path, "bench").append(
        "report", {"s": 1}, release_id="r", content_id="c", record_id="client-1"))
    timed("open + identical resend of that id", lambda: Ledger(path, "bench").append(
        "report", {"s": 1}, release_id="r", content_id="c", record_id="client-1"))
    timed("tail(20)", lambda: Ledger(path, "bench").tail(20))
    timed("verify() (streams every line)", lambda: Ledger(path, "bench").verify())
    timed("iter_records(kind='report') (streams every line)", lambda: list(
        Ledger(path, "bench").iter_records(kind="report")))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| peak RSS of this process, MB | {rss:.0f} |")


def device_flushes(path: Path) -> int | None:
    """Flush requests the disk holding `path` has completed (Linux >= 5.5), or None where that is not known."""
    st = os.stat(path)
    try:
        fields = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat").read_text().split()
    except OSError:
        return None
    return int(fields[15]) if len(fields) >= 17 else None


def worker(mode: str, path: str, count: int, size: int) -> None:
    if mode == "ledger":
        ledger = Ledger(path, "bench")
        ledger.append("interaction", payload(0, size), release_id="rel_bench", content_id="c_bench")
        bodies = [payload(i, size) for i in range(count)]

        def run() -> int:
            before = ledger.fsyncs
            for body in bodies:
                ledger.append("interaction", body, release_id="rel_bench", content_id="c_bench")
            return ledger.fsyncs - before
    else:  # the floor: the same locking and syncing, with a ready-made line and nothing else
        import fcntl

        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        line = b"x" * (size - 1) + b"\n"

        def run() -> int:
            for _ in range(count):
                fcntl.flock(lock, fcntl.LOCK_EX)
                os.write(fd, line)
                fcntl.flock(lock, fcntl.LOCK_UN)
                os.fdatasync(fd)
            return count
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    import resource

    cpu_before, switches_before = os.times(), resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic_ns()
    syncs = run()
    end = time.monotonic_ns()
    cpu = [after - before for after, before in zip(os.times()[:2], cpu_before[:2])]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    switches = [usage.ru_nvcsw - switches_before.ru_nvcsw, usage.ru_nivcsw - switches_before.ru_nivcsw]
    sys.stdout.write(json.dumps({"start": start, "end": end, "fsyncs": syncs, "cpu": cpu, "switches": switches})
                     + "\n")
    sys.stdout.flush()


def shared_by_threads(path: Path, threads: int, count: int, size: int) -> float:
    """Records/s of `threads` threads appending through one shared Ledger (a gateway's request threads)."""
    import threading

    with Ledger(path, "bench") as ledger:
        ledger.append("interaction", payload(0, size), release_id="rel_bench", content_id="c_bench")
        bodies = [payload(i, size) for i in range(count)]

        def run() -> None:
            for body in bodies:
                ledger.append("interaction", body, release_id="rel_bench", content_id="c_bench")

        workers = [threading.Thread(target=run) for _ in range(threads)]
        start = time.perf_counter()
        for worker_thread in workers:
            worker_thread.start()
        for worker_thread in workers:
            worker_thread.join()
        seconds = time.perf_counter() - start
        result = ledger.verify()
    assert result.ok and result.count == threads * count + 1, result
    return threads * count / seconds


def concurrent(mode: str, path: Path, writers: int, count: int, size: int) -> dict:
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", mode, str(path), str(count), str(size)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for _ in range(writers)
    ]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    flushes_before = device_flushes(path.parent)
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports = []
    for proc in procs:
        reports.append(json.loads(proc.stdout.readline()))
        proc.wait()
    flushes_after = device_flushes(path.parent)
    seconds = (max(r["end"] for r in reports) - min(r["start"] for r in reports)) / 1e9
    total = writers * count
    if mode == "ledger":
        with Ledger(path, "bench") as ledger:
            result = ledger.verify()
        assert result.ok and result.count == total + writers, result
    flushes = None if flushes_before is None or flushes_after is None else flushes_after - flushes_before
    return {"records": total, "seconds": seconds, "rate": total / seconds, "fsyncs": sum(r["fsyncs"] for r in reports),
            "flushes": flushes, "user_us": sum(r["cpu"][0] for r in reports) / total * 1e6,
            "sys_us": sum(r["cpu"][1] for r in reports) / total * 1e6,
            "switches": [sum(r["switches"][i] for r in reports) / total for i in (0, 1)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=str(ROOT / "bench" / "out"), help="scratch dir on the disk under test")
    parser.add_argument("--single", type=int, default=1000, help="appends per single-writer round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating raw/ledger single-writer rounds")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--per-writer", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=3, help="concurrent trials, each with its own raw baseline")
    parser.add_argument("--payload-bytes", type=int, default=300)
    parser.add_argument("--diagnose", action="store_true",
                        help="also show the single-writer cost with the sync replaced by a sleep and a busy-wait")
    parser.add_argument("--scale", type=int, default=0, metavar="N",
                        help="also time one-shot operations on an N-record ledger (e.g. 300000)")
    parser.add_argument("--threads", action="store_true",
                        help="also time --writers threads sharing one Ledger in this process, per trial")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], int(args.worker[2]), int(args.worker[3]))
        return

    scratch = Path(args.dir) / f"ledger-bench-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    try:
        with Ledger(scratch / "probe.jsonl", "bench") as probe:
            line_size = len(probe.append("interaction", payload(0, args.payload_bytes), release_id="rel_bench",
                                         content_id="c_bench").to_line())
        line = b"x" * (line_size - 1) + b"\n"
        fdatasync = getattr(os, "fdatasync", os.fsync)

        # (1) single writer: alternate raw and ledger rounds so drift in the disk hits both
        raw_fsync: list[float] = []
        raw_fdatasync: list[float] = []
        appends: list[float] = []
        for round_ in range(args.rounds):
            raw_fsync += raw_loop(scratch / "raw.dat", line, args.single, os.fsync)
            raw_fdatasync += raw_loop(scratch / "raw.dat", line, args.single, fdatasync)
            appends += ledger_loop(scratch / f"single-{round_}.jsonl", args.single, args.payload_bytes)[0]

        # (2) concurrent writers: each trial against a raw single-writer fsync rate measured just before it
        trials = []
        for trial in range(args.trials):
            baseline = raw_loop(scratch / "raw.dat", line, args.single, os.fsync)
            raw_rate = len(baseline) / sum(baseline)
            multi = concurrent("ledger", scratch / f"multi-{trial}.jsonl", args.writers, args.per_writer,
                               args.payload_bytes)
            floor = concurrent("floor", scratch / f"floor-{trial}.dat", args.writers, args.per_writer, line_size)
            if args.threads:
                multi["threads_rate"] = shared_by_threads(scratch / f"threads-{trial}.jsonl", args.writers,
                                                          args.per_writer, args.payload_bytes)
            trials.append((raw_rate, multi, floor))
        load_after = os.getloadavg()[0]

        def stats(values: list[float]) -> tuple[float, float, float]:
            ordered = sorted(values)
            return statistics.median(values) * 1e6, ordered[int(len(ordered) * 0.9)] * 1e6, len(values) / sum(values)

        rows = [
            ("raw os.write + os.fsync, 1 writer", stats(raw_fsync)),
            ("raw os.write + os.fdatasync, 1 writer", stats(raw_fdatasync)),
            ("Ledger.append (durable), 1 writer", stats(appends)),
        ]
        print(f"scratch: {scratch} (same disk as the repo) | line {line_size} B | {os.cpu_count()} CPUs | "
              f"load avg {load_before:.1f} -> {load_after:.1f}")
        print()
        print("| single writer | median µs | p90 µs | records/s |")
        print("|---|---:|---:|---:|")
        for name, (median, p90, rate) in rows:
            print(f"| {name} | {median:.0f} | {p90:.0f} | {rate:,.0f} |")
        print()
        print(f"| {args.writers} writer processes x {args.per_writer} | raw fsync records/s (just before) | "
              f"ledger records/s | ratio | records per device flush | CPU µs per record (user+sys) | "
              f"floor records/s | floor ratio | floor CPU µs per record |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        ratios, floors = [], []
        for trial, (raw_rate, multi, floor) in enumerate(trials):
            ratios.append(multi["rate"] / raw_rate)
            floors.append(floor["rate"] / raw_rate)
            shared = f"{multi['records'] / multi['flushes']:.1f}" if multi["flushes"] else "n/a"
            print(f"| trial {trial + 1} | {raw_rate:,.0f} | {multi['rate']:,.0f} | {ratios[-1]:.2f}x | {shared} | "
                  f"{multi['user_us']:.0f}+{multi['sys_us']:.0f} | {floor['rate']:,.0f} | {floors[-1]:.2f}x | "
                  f"{floor['user_us']:.0f}+{floor['sys_us']:.0f} |")
        print()
        single = rows[2][1][0] / rows[0][1][0]
        print(f"single-writer append / raw fsync, median latency: {single:.2f}x (target <= 1.3x); "
              f"vs raw fdatasync: {rows[2][1][0] / rows[1][1][0]:.2f}x")
        if trials:
            print(f"{args.writers} writers / raw single-writer fsync rate, median of trials: "
                  f"{statistics.median(ratios):.2f}x (target >= 4x); the no-work floor reached "
                  f"{statistics.median(floors):.2f}x")
        if args.threads and trials:
            print()
            print(f"| {args.writers} threads x {args.per_writer}, one shared Ledger | raw fsync records/s | "
                  f"ledger records/s | ratio |")
            print("|---|---:|---:|---:|")
            for trial, (raw_rate, multi, _) in enumerate(trials):
                print(f"| trial {trial + 1} | {raw_rate:,.0f} | {multi['threads_rate']:,.0f} | "
                      f"{multi['threads_rate'] / raw_rate:.2f}x |")
        if args.diagnose:
            diagnose(scratch, args.single, args.payload_bytes, rows[0][1][0])
        if args.scale:
            scale(scratch, args.scale, args.payload_bytes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
