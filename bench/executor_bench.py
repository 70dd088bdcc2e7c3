"""Canary episodes per second with the local thread pool vs Ray tasks on this machine, on the same project, seed
and candidate (the example suite and agent, 20 episodes per gate run), and whether the verdicts are identical.
Ray is timed twice: the first run includes starting the local Ray instance, the second runs on the warm one.

    .venv/bin/python bench/executor_bench.py [--workers 2] [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def make_project(root: Path):
    """The example-suite project the gate tests use (tests/conftest.py: example_suite_project, set_block), made
    through the same CLI calls, published, with two new bullets as the working tree's candidate."""
    import contextlib
    import io
    from types import SimpleNamespace

    from conftest import example_suite_project, set_block
    from reef_cli.cli.main import run
    from reef_cli.project import Project
    from reef_cli.store import HarnessStore

    def reef(*args: str):
        with contextlib.redirect_stdout(io.StringIO()):
            return SimpleNamespace(code=run(list(args)))

    example_suite_project(reef, root)
    assert reef("-C", str(root), "publish", "-m", "canary suite").code == 0
    set_block(root, "- Always end files with a trailing newline.", "- Use tabs for indentation in Makefiles.")
    return HarnessStore(Project(root), "default")


def gate_once(store, spec, workers: int, journal: Path):
    from reef_cli.gate import gate_candidate

    t = time.perf_counter()
    v = gate_candidate(store, store.worktree_files(), ledger=None, workers=workers, journal_dir=journal,
                       executor=spec)
    return time.perf_counter() - t, v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    from reef_cli.executors import ExecutorSpec, ray_available

    with tempfile.TemporaryDirectory() as d:
        store = make_project(Path(d) / "proj")
        rows, verdicts = [], {}
        for label, spec in [("local", ExecutorSpec("local"))] * args.runs + \
                           ([("ray (cold)", ExecutorSpec("ray"))] + [("ray (warm)", ExecutorSpec("ray"))] *
                            (args.runs - 1) if ray_available() else []):
            secs, v = gate_once(store, spec, args.workers, Path(tempfile.mkdtemp(dir=d)))
            rows.append((label, v.episodes_spent, secs))
            verdicts.setdefault(label.split()[0], set()).add(
                (v.decision, v.reason, str(v.interval), tuple(t.to_json()["delta"] for t in v.per_task)))
    base = min(s / n for lab, n, s in rows if lab == "local")
    print(f"workers {args.workers}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'executor':<12} {'episodes':>8} {'seconds':>8} {'episodes/s':>11} {'ratio':>7}")
    for label, n, secs in rows:
        print(f"{label:<12} {n:>8} {secs:>8.2f} {n / secs:>11.2f} {base / (secs / n):>6.2f}x")
    same = len({frozenset(v) for v in verdicts.values()}) == 1 and all(len(v) == 1 for v in verdicts.values())
    print(f"verdicts identical across executors and runs: {'yes' if same else 'NO'}")
    if not ray_available():
        print("Ray is not installed (pip install 'reef[ray]'): local only")


if __name__ == "__main__":
    main()
