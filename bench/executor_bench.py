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
    from reef_cli.bootstrap import init_project
    from reef_cli.example_agent import suite_files
    from reef_cli.project import Project
    from reef_cli.store import HarnessStore

    root.mkdir()
    init_project(root)
    (root / "canary").mkdir()
    (root / "canary" / "example.yaml").write_text(suite_files()["example.yaml"])
    cfg = root / "harness.yaml"
    lines = [ln for ln in cfg.read_text().splitlines() if not ln.startswith("agent:")]
    text = "\n".join(lines).replace("  evaluators: [evaluators/**]", "  evaluators: [evaluators/**]\n  repeats: 2")
    cfg.write_text(text + '\nagent: ["{python}", -m, reef_cli.example_agent, -p, "{prompt}"]\n')
    store = HarnessStore(Project(root), "default")
    store.publish(reason="canary suite", operation="publish", files=store.worktree_files(),
                  expected_head=store.require_head().release_id)
    claude = root / "CLAUDE.md"
    body = claude.read_text()
    start = body.index("<!-- reef:begin learned -->") + len("<!-- reef:begin learned -->")
    end = body.index("<!-- reef:end learned -->")
    claude.write_text(body[:start] + "\n- Always end files with a trailing newline.\n"
                      "- Use tabs for indentation in Makefiles.\n" + body[end:])
    return store


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
