"""Whole-process time of the commands that run after every agent session (`reef report`, `reef run -- true`)
against a minimal click app with one option, in the same run. Target: <= 2x. Also the first `reef run` after
`reef init` in a fresh project (min(runs, 5) projects), which must not pay for materialising the release.

    .venv/bin/python bench/startup_bench.py [--runs 20] [--instructions]

--instructions also counts each command's user-space instructions once under valgrind's callgrind (PYTHONHASHSEED=0):
slow (~10 s a command) but the same from run to run whatever the load, where wall time on a shared machine moves
by +-15% or more.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MINIMAL_CLICK = """
import click

@click.command()
@click.option("--score", type=float)
def main(score):
    click.echo(score)

main()
"""


def timed(argv: list[str], cwd: Path, env: dict, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - t)
    return out


def instructions(argv: list[str], cwd: Path, env: dict) -> float:
    """User-space instructions (millions) of one run of argv under callgrind."""
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], cwd=cwd,
                       env={**env, "PYTHONHASHSEED": "0"}, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    return next(int(line.split()[-1]) for line in r.stderr.splitlines() if "Collected" in line) / 1e6


def first_runs(reef: str, base: Path, env: dict, n: int) -> list[float]:
    out = []
    for i in range(n):
        proj = base / f"fresh{i}"
        proj.mkdir()
        subprocess.run([reef, "init"], cwd=proj, env=env, check=True, capture_output=True)
        out.extend(timed([reef, "run", "--", "true"], proj, env, 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--instructions", action="store_true", help="also count instructions under callgrind")
    args = ap.parse_args()
    bin_dir = Path(sys.executable).parent
    reef = str(bin_dir / "reef")
    base = Path(__file__).resolve().parent / "out"
    base.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as d:
        proj = Path(d) / "proj"
        proj.mkdir()
        env = {**os.environ, "HOME": d, "REEF_SESSION": "bench"}
        # Measure what an installed reef does: load cached bytecode. With PYTHONDONTWRITEBYTECODE set (as in some
        # sandboxes) an edited module would otherwise be recompiled on every start (+30 ms for `reef run`).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parent.parent / "reef_cli")], check=True)
        subprocess.run([reef, "init"], cwd=proj, env=env, check=True, capture_output=True)
        subprocess.run([reef, "run", "--", "true"], cwd=proj, env=env, check=True, capture_output=True)
        click_app = Path(d) / "minimal_click.py"
        click_app.write_text(MINIMAL_CLICK)
        receipt = json.loads(subprocess.run([reef, "ledger", "tail", "-n", "1", "--json"], cwd=proj, env=env,
                                            check=True, capture_output=True, text=True).stdout)["record_id"]
        rows = {
            "minimal click app": timed([sys.executable, str(click_app), "--score", "1"], proj, env, args.runs),
            "reef run -- true": timed([reef, "run", "--", "true"], proj, env, args.runs),
            "reef report": timed([reef, "report", "--score", "1", "--receipt", receipt], proj, env, args.runs),
            "reef --help": timed([reef, "--help"], proj, env, args.runs),
            "first run after init": first_runs(reef, Path(d), env, min(args.runs, 5)),
        }
        counted = {}
        if args.instructions:
            if shutil.which("valgrind") is None:
                raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
            counted = {name: instructions(argv, proj, env) for name, argv in (
                ("minimal click app", [sys.executable, str(click_app), "--score", "1"]),
                ("reef run -- true", [sys.executable, reef, "run", "--", "true"]),
                ("reef report", [sys.executable, reef, "report", "--score", "1", "--receipt", receipt]))}
    base_ms = statistics.median(rows["minimal click app"]) * 1e3
    print(f"{'command':24}{'median ms':>10}{'ratio':>8}")
    for name, ts in rows.items():
        ms = statistics.median(ts) * 1e3
        print(f"{name:24}{ms:10.1f}{ms / base_ms:7.2f}x")
    for name, n in counted.items():
        print(f"{name:24}{n:9.1f}M instructions {n / counted['minimal click app']:6.2f}x")
    print("target: reef run / reef report <= 2.00x the minimal click app")


if __name__ == "__main__":
    main()
