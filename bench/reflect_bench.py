"""Reflect + curate over 10^4, 10^5 and 10^6 synthetic ledger records: time and peak memory per size.

Two measurements per size, each in a fresh subprocess (so peak RSS is that size's own):

  core  the Reflector's fold and one Curator plan over a stream of records built in memory (no disk): what reef's
        own code costs. Baseline in the same process: a bare loop that touches every record's kind and payload.
  e2e   the same through a real hash-chained ledger file (`Ledger.iter_records`, which hash-checks every line).
        Baseline in the same process: the same file read line by line with `json.loads` only.

Records: 70% successful runs, 10% failed runs with a stderr excerpt, 15% reports (one third structured lessons,
two thirds free text, drawn from 300 lessons in three phrasings each), 5% routing decisions. Targets: linear growth,
>= 100k records/s, < 300 MB peak at 10^6.

Usage: .venv/bin/python bench/reflect_bench.py [--sizes 10000,100000,1000000] [--e2e-sizes 10000,100000,1000000]
       [--dir bench/out]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUBJECTS = ["the tests", "the linter", "the type checker", "the formatter", "the migrations", "the changelog",
            "the docs build", "the smoke suite", "the benchmarks", "the release notes"]
WHENS = ["before finishing", "before committing", "after every refactor", "before opening a pull request",
         "after editing the schema", "before pushing", "when touching the API", "after rebasing",
         "before asking for review", "when a build fails"]
VERBS = ["run", "update", "check"]


def lessons() -> list[tuple[str, str, str]]:
    out = []
    for subj in SUBJECTS:
        for when in WHENS:
            for verb in VERBS:
                out.append((f"Always {verb} {subj} {when}.", f"{verb.capitalize()} {subj} {when}, please.",
                            f"Please make sure you {verb} {subj} {when}!"))
    return out


def record_stream(n: int):
    from reef_cli.ledger import Record

    pool = lessons()
    h = "0" * 64
    last_run = "rec_0"
    for i in range(n):
        seq = i + 1
        r = i % 20
        created = f"2026-01-{1 + (i * 28) // max(n, 1):02d}T00:00:00.000Z"
        if r < 14:
            kind, payload = "interaction", {"argv": ["claude", "-p", "task"], "exit_code": 0, "observe_only": False,
                                            "routing": [], "stdout": {"digest": "sha256:x", "length": 10}}
        elif r < 16:
            kind, payload = "interaction", {"argv": ["claude", "-p", "task"], "exit_code": 1, "observe_only": False,
                                            "routing": [], "stderr": {"excerpt": f"Error: step {i % 40} failed",
                                                                      "length": 20}}
        elif r < 19:
            phr = pool[(i * 7919) % len(pool)][i % 3]
            fb = {"lesson": phr} if i % 3 == 0 else f"That was not good. {phr}"
            kind, payload = "report", {"score": 0.0, "feedback": fb, "receipts": [last_run]}
        else:
            kind, payload = "routing", {"task": f"t{i % 50}", "model": ["small", "large"][i % 2],
                                        "outcome": "failure" if i % 3 == 0 else "success"}
        if kind == "interaction":
            last_run = f"rec_{i}"
        yield Record(f"rec_{i}", kind, "bench", None, None, created, payload, seq, h, h)


class _FakeLedger:
    """The Ledger's read interface over an in-memory stream (the core measurement)."""

    def __init__(self, n: int):
        self.n = n

    def iter_records(self, kind=None, since=None, release_id=None, from_seq=None):
        return (r for r in record_stream(self.n) if from_seq is None or r.seq >= from_seq)

    def get(self, record_id):
        from reef_cli.errors import NotFound

        raise NotFound(record_id)


def _curate_inputs():
    from reef_cli.bootstrap import template_files
    from reef_cli.config import CONFIG_NAME, parse_config

    files = {rel: entry for rel, entry in template_files("claude").items() if rel in (CONFIG_NAME, "CLAUDE.md")}
    return parse_config(files[CONFIG_NAME].data), files


def run_one(mode: str, n: int, path: Path | None) -> dict:
    from datetime import datetime, timezone

    from reef_cli.curate import plan
    from reef_cli.patterns import PatternMemory
    from reef_cli.reflect import reflect

    config, files = _curate_inputs()  # parsed before the clock starts: a one-off cost of every command
    if mode == "core":
        t = time.perf_counter()
        touched = 0
        for rec in record_stream(n):
            touched += len(rec.kind) + len(rec.payload)
        base = time.perf_counter() - t
        ledger = _FakeLedger(n)
    else:
        from reef_cli.ledger import Ledger

        t = time.perf_counter()
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
        base = time.perf_counter() - t
        ledger = Ledger(path, "bench")
    mem = PatternMemory()
    t, c = time.perf_counter(), time.process_time()
    res = reflect(ledger, "bench", mem, threshold=config.reflector.similarity)
    t_reflect = time.perf_counter() - t
    t2 = time.perf_counter()
    p = plan(mem, files, config, now=datetime(2026, 2, 1, tzinfo=timezone.utc))
    t_curate = time.perf_counter() - t2
    cpu = time.process_time() - c
    total = t_reflect + t_curate
    return {"mode": mode, "records": n, "seconds": round(total, 3), "cpu_s": round(cpu, 3),
            "reflect_s": round(t_reflect, 3), "curate_s": round(t_curate, 3), "records_per_s": round(n / total),
            "records_per_cpu_s": round(n / cpu) if cpu else None, "baseline_s": round(base, 3),
            "ratio_vs_baseline": round(total / base, 2) if base else None, "observations": res.observations,
            "patterns": len(mem.patterns), "ops": len(p.ops),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def write_ledger(path: Path, n: int) -> None:
    """The synthetic stream as a real ledger; reports cite the real ids of their runs (each chunk of 1000 appends
    its runs and routing records first, then its reports)."""
    from reef_cli.ledger import Ledger, NewRecord

    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    real: dict[str, str] = {}
    with Ledger(path, "bench") as ledger:
        chunk: list = []

        def flush() -> None:
            first = [r for r in chunk if r.kind != "report"]
            for rec, stored in zip(first, ledger.append_many([NewRecord(r.kind, r.payload, None, None) for r in first])):
                real[rec.record_id] = stored.record_id
            reports = [NewRecord(r.kind, {**r.payload, "receipts": [real.get(x, x) for x in r.payload["receipts"]]},
                                 None, None) for r in chunk if r.kind == "report"]
            ledger.append_many(reports)
            real.clear()
            chunk.clear()

        for rec in record_stream(n):
            chunk.append(rec)
            if len(chunk) == 1000:
                flush()
        if chunk:
            flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--e2e-sizes", default="10000,100000,1000000")
    ap.add_argument("--dir", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--one", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), Path(args.path) if args.path else None)))
        return
    out_dir = Path(args.dir) / "reflect"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode, sizes in (("core", args.sizes), ("e2e", args.e2e_sizes)):
        for n in [int(s) for s in sizes.split(",") if s]:
            path = None
            if mode == "e2e":
                path = out_dir / f"ledger-{n}.jsonl"
                write_ledger(path, n)
            cmd = [sys.executable, __file__, "--one", mode, str(n)] + (["--path", str(path)] if path else [])
            row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            rows.append(row)
            print(f"{mode:4} {n:>9,} records  {row['seconds']:7.2f} s  {row['records_per_s']:>9,} rec/s "
                  f"({row['records_per_cpu_s']:,}/cpu-s)  "
                  f"x{row['ratio_vs_baseline']} of baseline ({row['baseline_s']} s)  peak {row['peak_rss_mb']} MB  "
                  f"patterns {row['patterns']}  ops {row['ops']}", flush=True)
    print(json.dumps(rows, indent=1))
    if os.environ.get("REEF_BENCH_KEEP") != "1":
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
