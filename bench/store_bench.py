"""Publish latency: reef's publish (tree + commit + CAS + fsync'd release-log line) vs the git CLI doing the same
change (`git add -A && git commit && git update-ref`) on the same disk, in the same run.

    .venv/bin/python bench/store_bench.py [--iterations 40] [--files 60]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reef_cli.bootstrap import init_project  # noqa: E402
from reef_cli.project import Project  # noqa: E402
from reef_cli.store import HarnessStore  # noqa: E402


def make_tree(root: Path, files: int) -> None:
    init_project(root, template="claude")
    for i in range(files):
        p = root / ".claude" / "skills" / f"skill-{i:03d}" / "SKILL.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"---\nname: skill-{i:03d}\ndescription: skill number {i}\n---\n\n" + "Body line.\n" * 40)
    hour_ago = time.time() - 3600  # a harness is mostly files and directories nobody touched recently (both sides
    for p in [root, *root.rglob("*")]:  # see the same tree)
        if ".reef" not in p.parts:
            os.utime(p, (hour_ago, hour_ago))


def bench_reef(root: Path, n: int) -> tuple[list[float], int]:
    """Publish latencies, and how many files the published harness holds."""
    store = HarnessStore(Project(root), "default")
    store.publish(reason="warm-up")
    out = []
    for i in range(n):
        (root / "CLAUDE.local.md").write_text(f"note {i}\n")
        t = time.perf_counter()
        res = store.publish(reason=f"edit {i}")
        out.append(time.perf_counter() - t)
        assert res.created
    return out, len(store.files_of(store.require_head()))


def bench_git(root: Path, n: int) -> list[float]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root)}
    run = lambda *a: subprocess.run(a, cwd=root, env=env, check=True, capture_output=True)  # noqa: E731
    shutil.rmtree(root / ".reef")
    run("git", "init", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-q", "-m", "base")
    out = []
    for i in range(n):
        (root / "CLAUDE.local.md").write_text(f"note {i}\n")
        t = time.perf_counter()
        run("sh", "-c", "git add -A && git commit -q -m edit && git update-ref refs/heads/reef HEAD")
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--files", type=int, default=60, help="extra skill files in the harness")
    args = ap.parse_args()
    base = Path(__file__).resolve().parent / "out"
    base.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as d:
        reef_dir, git_dir = Path(d) / "reef", Path(d) / "git"
        reef_dir.mkdir()
        make_tree(reef_dir, args.files)
        shutil.copytree(reef_dir, git_dir, symlinks=True)
        reef_t, nfiles = bench_reef(reef_dir, args.iterations)
        git_t = bench_git(git_dir, args.iterations)
    r, g = statistics.median(reef_t), statistics.median(git_t)
    print(f"harness of {nfiles} files, {args.iterations} publishes each")
    print(f"{'':28}{'median ms':>10}{'p90 ms':>10}")
    print(f"{'reef publish':28}{r * 1e3:10.2f}{sorted(reef_t)[int(0.9 * len(reef_t))] * 1e3:10.2f}")
    print(f"{'git add+commit+update-ref':28}{g * 1e3:10.2f}{sorted(git_t)[int(0.9 * len(git_t))] * 1e3:10.2f}")
    print(f"ratio reef/git: {r / g:.2f}x (target <= 0.30x)")


if __name__ == "__main__":
    main()
