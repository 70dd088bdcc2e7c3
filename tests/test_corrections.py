"""The correction detector on a labelled corpus (tests/corpus/corrections.jsonl, look-alike non-corrections
included), and descriptive corrections becoming imperative lessons in the builtin Reflector, grounded in the
record they cite."""

from __future__ import annotations

import json
from pathlib import Path

from test_evolve import feedback, init_project, memory

from reef_cli.corrections import classify, imperative
from reef_cli.patterns import sentence
from reef_cli.reflect import correction_lesson

CORPUS = Path(__file__).parent / "corpus" / "corrections.jsonl"


def corpus() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def scores(rows: list[dict], label: str) -> tuple[float, float]:
    """(precision, recall) of the detector for one label."""
    tp = fp = fn = 0
    for r in rows:
        got = classify(r["text"], r["previous_prompt"]).kind
        tp += got == label and r["label"] == label
        fp += got == label and r["label"] != label
        fn += got != label and r["label"] == label
    return tp / max(tp + fp, 1), tp / max(tp + fn, 1)


def test_corpus_is_big_enough_and_has_look_alikes():
    rows = corpus()
    assert len(rows) >= 50
    assert sum(r["label"] is None for r in rows) >= 20  # "No problem", quoted "you forgot", questions, "Now add"
    assert sum(r["label"] == "correction" for r in rows) >= 30


def test_detector_precision_and_recall_on_the_corpus():
    rows = corpus()
    p, r = scores(rows, "correction")
    assert p >= 0.95 and r >= 0.9, (p, r)
    p, r = scores(rows, "acceptance")
    assert p >= 0.9 and r >= 0.9, (p, r)


def test_expected_lessons_of_the_corpus():
    for row in corpus():
        if row["lesson"]:
            got = correction_lesson(row["text"])
            assert got is not None and sentence(got[0]) == sentence(row["lesson"]), row


def test_quoted_text_and_code_are_not_the_users_words():
    assert classify('Add an error message "you forgot your password"').kind is None
    assert classify("Rename `dont_retry` to `no_retry`").kind is None
    assert classify("you forgot `make lint`").kind == "correction"


def test_a_correction_wins_over_thanks_and_a_re_ask_is_a_correction():
    assert classify("thanks, but you forgot the docs").kind == "correction"
    assert classify("Add a retry to the upload function", "add a retry to the upload function").cue == "re-ask"
    assert classify("Add pagination", "add a retry to the upload function").kind is None


def test_imperative_refuses_what_it_cannot_rewrite():
    assert imperative("You forgot again.") is None
    assert imperative("the output was wrong") is None
    assert imperative("Why did you do that?") is None or imperative("Why did you do that?")[0] == "Do not do that"
    assert imperative("You forgot to run the tests before saying you were done") == \
        ("Run the tests before saying you are done", "do")


def test_six_descriptive_reports_become_one_imperative_pattern(reef, tmp_path):
    """The issue's example: six `--feedback "You forgot to run the tests before saying you were done"` gave 0
    observations; each now gives one, all folded into one pattern that quotes the user's own sentence."""
    root, ledger = init_project(reef, tmp_path)
    said = "You forgot to run the tests before saying you were done"
    ids = feedback(ledger, said, 6)
    r = reef("-C", str(root), "harness", "reflect", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["observations"] == 6 and not out["rejected"]
    (pat,) = [p for p in memory(root).values() if p["text"] == "Run the tests before saying you are done."]
    assert pat["count"] == 6 and pat["polarity"] == "do"
    for rid in ids:  # anti-fabrication: the quoted span is in every cited record
        assert said in json.dumps(ledger.get(rid).payload)


def test_a_fabricated_quote_is_still_rejected(reef, tmp_path):
    from reef_cli.reflect import Lesson, Verifier

    root, ledger = init_project(reef, tmp_path)
    (rid,) = feedback(ledger, "no, use pnpm")
    v = Verifier(ledger, "default")
    assert v.check(Lesson("Use pnpm.", "do", (rid,), ((rid, "no, use pnpm"),))) is None
    assert "does not appear" in v.check(Lesson("Use yarn.", "do", (rid,), ((rid, "use yarn"),)))


FOLLOWUPS = Path(__file__).parent / "corpus" / "followups.jsonl"


def test_precision_on_realistic_follow_ups_with_pasted_output_and_look_alikes():
    """tests/corpus/followups.jsonl: the hostile pass's five prompts that became score-0 reports and then CLAUDE.md
    bullets ("I ran the deploy and got: Error: you must specify a region", "Never mind the docs…", "Stop words
    should be…", "Undo/redo support is the next feature", a pasted "you didn't provide a value"), more look-alikes,
    and real corrections and thanks. The detector before this set: correction precision 0.62 (20 false
    corrections), recall 1.00 (bench/corrections_bench.py)."""
    rows = [json.loads(line) for line in FOLLOWUPS.read_text().splitlines() if line.strip()]
    assert len(rows) >= 60 and sum(r["label"] is None for r in rows) >= 20
    wrong = [(r["label"], r["text"]) for r in rows if classify(r["text"], r["previous_prompt"]).kind != r["label"]]
    assert wrong == []
    p, r = scores(rows, "correction")
    assert p == 1.0 and r == 1.0


def test_pasted_output_is_not_the_users_words():
    assert classify("I ran the deploy and got: Error: you must specify a region").kind is None
    assert classify("Here is the CI log:\nerror: you didn't provide a value for 'x'").kind is None
    assert classify("you didn't run the tests. I got: FAILED tests/test_x.py").cue == "didnt"
    assert classify("Two things:\nyou forgot the docs").cue == "forgot"  # not an output's introduction


def test_stop_never_undo_count_only_as_orders_to_the_agent():
    assert classify("Stop words should be filtered in the tokenizer").kind is None
    assert classify("Stop the dev server and start it with --debug").kind is None
    assert classify("Never mind the docs, implement the cache layer now").kind is None
    assert classify("Undo/redo support is the next feature: implement it").kind is None
    assert classify("Revert button should be disabled while saving").kind is None
    assert [classify(t).cue for t in ("stop.", "Stop adding print statements", "never use sudo", "undo that",
                                      "Roll back the schema change")] == ["dont", "dont", "dont", "revert", "revert"]
