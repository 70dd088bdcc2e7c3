"""Transcript ingest throughput on a generated corpus of Claude Code sessions, and the correction detector's
precision/recall on the labelled corpus (tests/corpus/corrections.jsonl).

Corpus: N sessions (default 10^4) in Claude Code's project-transcript JSONL shape (the format of
tests/golden/transcripts/claude.jsonl), 4 turns each: a prompt, a tool call and its result, the agent's answer;
one follow-up in three is a correction drawn from the corpus, one in six a thanks. Measured in one process:

  baseline  read every file and json.loads every line (what any reader of these files pays)
  ingest    `reef ingest` of the whole folder into a fresh project's ledger (parse, redact, detect, append)
  again     the same ingest re-run: unchanged files are skipped by the state file
  prefilled the same ingest into a project whose ledger already holds --prefill records (default 100,000): its
            ratio against `ingest` says whether ingest slows with the ledger's size (1.0x: it does not)

Usage: .venv/bin/python bench/ingest_bench.py [--sessions 10000] [--prefill 100000] [--dir bench/out/ingest]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPTS = ["add pagination to the list endpoint", "fix the failing date parser test", "rename the config loader",
           "write docs for the export command", "make the retry backoff exponential", "upgrade the http client"]
FOLLOW = ["now add a test for the empty case", "also handle the timeout", "show me the diff", "ship it"]


def corrections() -> list[str]:
    rows = [json.loads(x) for x in (ROOT / "tests/corpus/corrections.jsonl").read_text().splitlines() if x.strip()]
    return [r["text"] for r in rows if r["label"] == "correction" and "re-ask" not in r["text"]]


def line(sid: str, uuid: str, kind: str, content, ts: str, **kw) -> str:
    msg = {"role": kind, "content": content}
    if kind == "assistant":
        msg.update(model="claude-x", stop_reason=kw.pop("stop", "end_turn"))
    return json.dumps({"type": kind, "uuid": uuid, "sessionId": sid, "cwd": "/work/app", "isSidechain": False,
                       "timestamp": ts, "message": msg, **kw})


def generate(folder: Path, n: int) -> int:
    said = corrections()
    lines_total = 0
    proj = folder / "projects" / "-work-app"
    proj.mkdir(parents=True)
    for i in range(n):
        sid = f"s{i:06d}-0000-4000-8000-000000000000"
        ts = f"2026-11-{1 + i % 28:02d}T10:{i % 60:02d}:00.000Z"
        out = []
        for t in range(4):
            if t == 0:
                prompt = PROMPTS[i % len(PROMPTS)]
            elif (i + t) % 3 == 0:
                prompt = said[(i + t) % len(said)]
            elif (i + t) % 6 == 1:
                prompt = "thanks, that works"
            else:
                prompt = FOLLOW[(i + t) % len(FOLLOW)]
            u = f"{sid}-u{t}"
            out.append(line(sid, u, "user", prompt, ts))
            out.append(line(sid, u + "a", "assistant", [{"type": "tool_use", "id": f"t{t}", "name": "Bash",
                                                          "input": {"command": "pytest -q"}}], ts, stop="tool_use"))
            out.append(line(sid, u + "r", "user", [{"type": "tool_result", "tool_use_id": f"t{t}",
                                                     "is_error": t == 1, "content": "3 passed" if t != 1 else
                                                     "FAILED tests/test_x.py::test_empty"}], ts))
            out.append(line(sid, u + "b", "assistant", [{"type": "text", "text": f"Done with step {t}."}], ts))
        (proj / f"{sid}.jsonl").write_text("\n".join(out) + "\n")
        lines_total += len(out)
    return lines_total


def detector() -> tuple[float, float, float, float, int]:
    from reef_cli.corrections import classify

    rows = [json.loads(x) for x in (ROOT / "tests/corpus/corrections.jsonl").read_text().splitlines() if x.strip()]

    def pr(label):
        tp = sum(1 for r in rows if classify(r["text"], r["previous_prompt"]).kind == label and r["label"] == label)
        fp = sum(1 for r in rows if classify(r["text"], r["previous_prompt"]).kind == label and r["label"] != label)
        fn = sum(1 for r in rows if classify(r["text"], r["previous_prompt"]).kind != label and r["label"] == label)
        return tp / max(tp + fp, 1), tp / max(tp + fn, 1)

    (cp, cr), (ap, ar) = pr("correction"), pr("acceptance")
    return cp, cr, ap, ar, len(rows)


def prefill(store, n: int) -> None:
    """`n` ordinary run records (ids made by the ledger, so writing them needs no lookup), in batches."""
    from reef_cli.ledger import NewRecord

    ledger = store.ledger()
    payload = {"argv": ["pytest", "-q"], "exit": 0, "duration_s": 1.5, "stdout": {"excerpt": "3 passed"}}
    for start in range(0, n, 5000):
        ledger.append_many([NewRecord("run", payload, None, None) for _ in range(min(5000, n - start))])
    ledger.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--prefill", type=int, default=100_000)
    ap.add_argument("--dir", default=str(ROOT / "bench" / "out" / "ingest"))
    args = ap.parse_args()
    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    corpus, project = work / "claude", work / "proj"
    t0 = time.perf_counter()
    lines = generate(corpus, args.sessions)
    gen = time.perf_counter() - t0
    project.mkdir(parents=True)
    reef = str(Path(sys.executable).parent / "reef")
    subprocess.run([reef, "-C", str(project), "init"], check=True, capture_output=True)

    t0 = time.perf_counter()
    n = 0
    for f in sorted(corpus.rglob("*.jsonl")):
        with open(f, "rb") as fh:
            for raw in fh:
                json.loads(raw)
                n += 1
    base = time.perf_counter() - t0

    from reef_cli.ingest import ingest
    from reef_cli.project import Project
    from reef_cli.store import HarnessStore

    store = HarnessStore(Project(project), "default")
    t0 = time.perf_counter()
    res = ingest(store, paths=[corpus])
    took = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = ingest(store, paths=[corpus])
    took2 = time.perf_counter() - t0
    big = work / "big"
    big.mkdir()
    subprocess.run([reef, "-C", str(big), "init"], check=True, capture_output=True)
    big_store = HarnessStore(Project(big), "default")
    prefill(big_store, args.prefill)
    t0 = time.perf_counter()
    res3 = ingest(big_store, paths=[corpus])
    took3 = time.perf_counter() - t0
    assert res3.turns == res.turns, (res3.turns, res.turns)
    cp, cr, ap_, ar, rows = detector()
    size = (project / ".reef/scenarios/default/ledger.jsonl").stat().st_size
    print(f"corpus: {args.sessions} sessions, {lines} lines ({gen:.1f} s to generate)")
    print(f"{'step':<10}{'seconds':>10}{'sessions/s':>14}{'turns/s':>12}{'ratio':>9}")
    print(f"{'baseline':<10}{base:>10.2f}{args.sessions / base:>14.0f}{res.turns / base:>12.0f}{1:>8.2f}x")
    print(f"{'ingest':<10}{took:>10.2f}{res.sessions / took:>14.0f}{res.turns / took:>12.0f}{took / base:>8.2f}x")
    print(f"{'again':<10}{took2:>10.2f}{args.sessions / took2:>14.0f}{'-':>12}{took2 / base:>8.2f}x")
    print(f"{'prefilled':<10}{took3:>10.2f}{res3.sessions / took3:>14.0f}{res3.turns / took3:>12.0f}"
          f"{took3 / base:>8.2f}x   ({took3 / took:.2f}x the fresh ingest, into a ledger of {args.prefill} records)")
    print(f"ingested {res.turns} turns, {res.corrections} corrections, {res.acceptances} acceptances; "
          f"ledger {size / 1e6:.1f} MB ({size / max(res.turns, 1):.0f} bytes/turn); re-run added {again.turns}")
    print(f"detector on {rows} labelled follow-ups: corrections precision {cp:.2f} recall {cr:.2f}; "
          f"acceptances precision {ap_:.2f} recall {ar:.2f}")


if __name__ == "__main__":
    main()
