"""The correction detector's precision and recall on the labelled follow-ups, against the detector of another
revision (the baseline) in the same run.

Two corpora: tests/corpus/corrections.jsonl (the set the detector was developed on) and tests/corpus/followups.jsonl
(realistic follow-ups written from the hostile pass of 2026-12-02: pasted errors, "never mind", "Stop words",
"Undo/redo support", … beside real corrections and thanks). The baseline is reef_cli/corrections.py as it is at
`--baseline` (a git revision, default `main`), loaded from `git show` into a scratch module.

    .venv/bin/python bench/corrections_bench.py [--baseline REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPORA = ("corrections.jsonl", "followups.jsonl")


def load(rev: str | None):
    if rev is None:
        from reef_cli import corrections

        return corrections
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:reef_cli/corrections.py"], capture_output=True,
                         text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "corrections_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("corrections_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def scores(module, rows: list[dict], label: str) -> tuple[float, float]:
    tp = fp = fn = 0
    for r in rows:
        got = module.classify(r["text"], r["previous_prompt"]).kind
        tp += got == label and r["label"] == label
        fp += got == label and r["label"] != label
        fn += got != label and r["label"] == label
    return tp / max(tp + fp, 1), tp / max(tp + fn, 1)


def wrong(module, rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        got = module.classify(r["text"], r["previous_prompt"]).kind
        if got != r["label"]:
            out.append(f"    {r['label'] or 'neutral'} read as {got or 'neutral'}: {r['text'][:70]!r}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="main")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    detectors = {f"baseline ({args.baseline})": load(args.baseline), "this tree": load(None)}
    print(f"{'corpus':18} {'detector':22} {'rows':>4}  corr. P   corr. R   acc. P   acc. R   wrong")
    for name in CORPORA:
        rows = [json.loads(x) for x in (ROOT / "tests" / "corpus" / name).read_text().splitlines() if x.strip()]
        for label, module in detectors.items():
            cp, cr = scores(module, rows, "correction")
            ap_, ar = scores(module, rows, "acceptance")
            print(f"{name:18} {label:22} {len(rows):>4}  {cp:7.2f}  {cr:7.2f}  {ap_:7.2f}  {ar:7.2f}  "
                  f"{len(wrong(module, rows)):5}")
        for line in wrong(detectors["this tree"], rows):
            print(line)


if __name__ == "__main__":
    main()
