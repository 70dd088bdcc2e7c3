"""Rule hygiene: a lesson a human rule already states is counted as evidence for that rule, not added again
(measured on tests/corpus/rule_dupes.jsonl); `reef harness bullets` lists what reef learned."""

from __future__ import annotations

import json
from pathlib import Path

from test_evolve import LINT, evolve, feedback, init_project

from reef_cli.hygiene import covers, rule_lines
from reef_cli.patterns import polarity_of, terms_of

CORPUS = Path(__file__).parent / "corpus" / "rule_dupes.jsonl"


def test_duplicate_detection_on_the_labelled_corpus():
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    assert len(rows) >= 30 and sum(not r["duplicate"] for r in rows) >= 14
    tp = fp = fn = 0
    for r in rows:
        got = covers(terms_of(r["rule"]), polarity_of(r["rule"]), terms_of(r["lesson"]), polarity_of(r["lesson"]), 0.6)
        tp += got and r["duplicate"]
        fp += got and not r["duplicate"]
        fn += (not got) and r["duplicate"]
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert precision >= 0.95 and recall >= 0.8, (precision, recall)


def test_rule_lines_skip_blocks_headings_code_and_comments():
    text = ("# Rules\n\n- Use pnpm for everything.\nAlways run the tests first.\n```\nnpm install\n```\n"
            "<!-- reef:begin learned -->\n- Learned bullet here. <!-- reef:abc -->\n<!-- reef:end learned -->\n"
            "<!-- a comment -->\n")
    assert rule_lines(text) == [(3, "Use pnpm for everything."), (4, "Always run the tests first.")]


def test_a_lesson_the_human_already_states_is_evidence_not_a_new_bullet(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    claude = root / "CLAUDE.md"
    claude.write_text("- Always run the full test suite before you say you're done.\n" + claude.read_text())
    assert reef("-C", str(root), "publish", "-m", "a human rule").code == 0
    feedback(ledger, "You forgot to run the tests before saying you were done", 5)
    out = evolve(reef, root)
    assert out["ops"] == []  # only pattern memory is published: no bullet
    assert "Run the tests before saying you are done" not in claude.read_text()
    (b,) = [b for b in out["blocked"] if b["kind"] == "covered"]
    assert b["path"] == "CLAUDE.md:1" and b["negative"] is False and "counted as evidence for that rule (5)" in b["reason"]
    r = reef("-C", str(root), "harness", "bullets", "--json")
    assert r.code == 0, r.err
    listed = json.loads(r.out)
    assert listed["bullets"] == []
    assert listed["covered"] == [{"pattern": b["key"], "text": "Run the tests before saying you are done.",
                                  "evidence": 5, "last_seen": listed["covered"][0]["last_seen"],
                                  "rule": "CLAUDE.md:1",
                                  "rule_text": "Always run the full test suite before you say you're done."}]


def test_bullets_lists_evidence_last_seen_utility_and_expiry(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    assert evolve(reef, root)["status"] == "published"
    listed = json.loads(reef("-C", str(root), "harness", "bullets", "--json").out)
    (b,) = listed["bullets"]
    assert b["text"] == "Run the linter before committing." and b["surface"] == "block" and b["path"] == "CLAUDE.md"
    assert b["evidence"] == 5 and b["records"] == 5 and b["utility"] is None and b["suppressed"] is False
    assert b["expires"] > b["last_seen"][:10]
    human = reef("-C", str(root), "harness", "bullets")
    assert human.code == 0 and "Run the linter before committing." in human.out and b["id"] in human.out
