"""Evidence counts distinct runs: one receipt reported six times is one observation, not six."""

from __future__ import annotations

import re
import sys

from test_evolve import LINT, LINT_KEY, block_ids, evolve, feedback, init_project, memory


def test_one_receipt_reported_six_times_counts_once(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    r = reef("-C", str(root), "run", "--", sys.executable, "-c", "print('hi')")
    assert r.code == 0, r.err
    receipt = re.search(r"receipt (\S+)", r.err).group(1)
    for _ in range(6):
        r = reef("-C", str(root), "report", "--score", "0", "--feedback",
                 "Always run the linter before committing.", "--receipt", receipt)
        assert r.code == 0, r.err
    out = evolve(reef, root)
    pat = next(p for p in memory(root).values() if p["text"] == "Always run the linter before committing.")
    assert pat["count"] == 1 and pat["sources"] == [receipt] and len(pat["evidence"]) == 1
    assert not any(o["op"] == "add" for o in out["ops"]) and block_ids(root / "CLAUDE.md") == []


def test_distinct_runs_still_count_and_a_late_duplicate_adds_nothing(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 4)  # four runs, one report each
    evolve(reef, root)
    first = memory(root)[LINT_KEY]
    assert first["count"] == 4 and len(first["sources"]) == 4
    receipt = first["sources"][0]
    for _ in range(3):  # the same run reported again, in a later reflect
        ledger.append("report", {"score": 0, "feedback": LINT, "receipts": [receipt]}, release_id=None,
                      content_id=None)
    evolve(reef, root)
    assert memory(root)[LINT_KEY]["count"] == 4 and block_ids(root / "CLAUDE.md") == []
    run = ledger.append("interaction", {"argv": ["a"], "exit_code": 0, "routing": []}, release_id=None,
                        content_id=None)
    ledger.append("report", {"score": 0, "feedback": LINT, "receipts": [receipt, run.record_id]}, release_id=None,
                  content_id=None)
    evolve(reef, root)  # a report about one counted and one new run: the new run counts
    assert memory(root)[LINT_KEY]["count"] == 5 and len(block_ids(root / "CLAUDE.md")) == 1
