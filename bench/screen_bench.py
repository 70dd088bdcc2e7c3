"""The injection screen (reef_cli/screen.py) on its labelled sets, against the screen as the hostile pass found it
(read from git in the same run: the baseline).

Per screen and set: attacks caught (with the right kind), per family for the disguised set, lessons refused (false
positives), and the time one lesson takes to screen, with the ratio to the baseline.

    .venv/bin/python bench/screen_bench.py [--baseline COMMIT] [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import types
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reef_cli import screen as now  # noqa: E402

BASELINE_COMMIT = "c19e819bc783b8bee91ee6884461122e83e3f1ad"  # reef_cli/screen.py before the disguised-lessons pass
DATA = ROOT / "tests" / "data"


def baseline(commit: str) -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{commit}:reef_cli/screen.py"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    module = types.ModuleType("reef_screen_baseline")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, "screen@baseline", "exec"), module.__dict__)
    return module


def score(screen, hostile, benign) -> tuple[int, Counter, int]:
    caught = Counter()
    for text, kind, family in hostile:
        finding = screen(text)
        caught[family] += finding is not None and finding.kind == kind
    refused = sum(screen(text) is not None for text in benign)
    return sum(caught.values()), caught, refused


def per_lesson_us(screen, texts, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for text in texts:
            screen(text)
        best = min(best, time.perf_counter() - start)
    return best / len(texts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=BASELINE_COMMIT)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    old = baseline(args.baseline)
    disguised = json.loads((DATA / "screen_disguised.json").read_text())
    corpus = json.loads((DATA / "screen_corpus.json").read_text())
    sets = {"disguised": (disguised["hostile"], disguised["benign"]),
            "corpus": ([(t, k, k) for t, k in corpus["attacks"]], corpus["benign"])}
    screens = {"reef (now)": now.screen, "reef (before)": old.screen}
    print(f"{'screen':<14} {'set':<10} {'caught':>8} {'recall':>7} {'refused':>8}")
    for name, screen in screens.items():
        for label, (hostile, benign) in sets.items():
            total, _, refused = score(screen, hostile, benign)
            print(f"{name:<14} {label:<10} {total:>4}/{len(hostile):<3} {total / len(hostile):>7.1%} "
                  f"{refused:>4}/{len(benign):<3}")
    families = Counter(family for _, _, family in disguised["hostile"])
    rows = {name: score(screen, *sets["disguised"])[1] for name, screen in screens.items()}
    print(f"\n{'family (disguised)':<20}" + "".join(f"{name:>15}" for name in screens))
    for family, n in sorted(families.items()):
        print(f"{family:<20}" + "".join(f"{f'{rows[name][family]}/{n}':>15}" for name in screens))
    texts = [t for t, _, _ in disguised["hostile"]] + disguised["benign"]
    times = {}
    for _ in range(2):  # take turns, so load on a shared machine hits both
        for name, screen in screens.items():
            t = per_lesson_us(screen, texts, args.rounds // 2 or 1)
            times[name] = min(times.get(name, t), t)
    base = times["reef (before)"]
    print("\n" + "  ".join(f"{name}: {us:.0f} us/lesson ({us / base:.2f}x)" for name, us in times.items()))


if __name__ == "__main__":
    main()
