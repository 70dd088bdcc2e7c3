"""`reef ci` gates human edits: the human's own rules and instructions are evaluated like any harness change; only
the measuring stick (canary tasks, evaluators, harness.yaml gate/zones) is refused, unless --suite-change."""

from __future__ import annotations

import json

import pytest

from test_gate import NEWLINE, TABS, ledger_records, project, set_block  # noqa: F401 - `project` is a fixture


def human_lines(root, *lines: str) -> None:
    """Lines the human adds to CLAUDE.md outside reef's managed block."""
    path = root / "CLAUDE.md"
    path.write_text(path.read_text().replace("## Learned by reef", "\n".join(lines) + "\n\n## Learned by reef"))


def test_a_human_rule_outside_the_block_is_evaluated_and_passes_when_better(reef, project):
    human_lines(project, NEWLINE, TABS)
    r = reef("-C", str(project), "ci", "--json", "--summary", "s.md", "--junit", "j.xml")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["status"] == "pass" and out["verdict"]["decision"] == "publish" and out["violations"] == []
    added = {(b["change"], b["path"], b["text"]) for b in out["bullets"]}
    assert ("added", "CLAUDE.md", "Always end files with a trailing newline.") in added
    md = (project / "s.md").read_text()
    assert md.startswith("## reef canary gate: ✅ pass") and "| `notes-newline` | 0.00 | 1.00 | +1.00 | improved |" in md
    assert "### Bullets" in md and "Always end files with a trailing newline." in md
    assert ledger_records(project, "episode")


def test_a_human_edit_that_is_not_better_fails_with_1_not_4(reef, project):
    human_lines(project, "- Write clean code.")
    (project / "CLAUDE.md").write_text((project / "CLAUDE.md").read_text().replace("# Project instructions", "# Rules"))
    r = reef("-C", str(project), "ci", "--json")
    assert r.code == 1, r.err
    out = json.loads(r.out)
    assert out["status"] == "fail" and out["verdict"]["decision"] == "reject"
    assert [b["text"] for b in out["bullets"] if b["change"] == "added"] == ["Write clean code."]


def test_an_edit_to_the_humans_frozen_rule_file_is_evaluated(reef, project):
    rules = project / ".claude" / "rules" / "safety.md"
    rules.write_text(rules.read_text() + f"\n{NEWLINE}\n{TABS}\n")
    r = reef("-C", str(project), "ci", "--json")
    assert r.code == 1, r.err  # judged (the example agent does not read rule files: not better), not refused
    out = json.loads(r.out)
    assert out["violations"] == [] and out["verdict"]["decision"] == "reject"
    assert {b["path"] for b in out["bullets"]} == {".claude/rules/safety.md"}


@pytest.mark.parametrize("path, edit, what", [
    ("canary/example.yaml", lambda t: t.replace("timeout: 60", "timeout: 61", 1), "canary task"),
    ("evaluators/check.sh", None, "evaluator"),
    ("harness.yaml", lambda t: t.replace("repeats: 2", "repeats: 1"), "harness.yaml gate"),
    ("harness.yaml", lambda t: t.replace("    - .claude/rules/**\n", "", 1), "harness.yaml zones"),
])
def test_a_change_to_the_measuring_stick_exits_4_and_runs_nothing(reef, project, path, edit, what):
    target = project / path
    if edit is None:
        target.parent.mkdir(exist_ok=True)
        target.write_text("exit 0\n")
    else:
        target.write_text(edit(target.read_text()))
    human_lines(project, NEWLINE, TABS)  # a real improvement rides along: still refused
    r = reef("-C", str(project), "ci", "--summary", "s.md", "--junit", "j.xml")
    assert r.code == 4, (r.out, r.err)
    assert f"first: {path}: {what}" in r.err and "--suite-change" in r.err and r.err.startswith("reef: error: ")
    assert "⛔ blocked by policy" in (project / "s.md").read_text()
    assert f'classname="reef.frozen" name="{path}"' in (project / "j.xml").read_text()
    assert not ledger_records(project, "episode")


def test_other_harness_yaml_sections_are_evaluated(reef, project):
    cfg = project / "harness.yaml"
    cfg.write_text(cfg.read_text().replace("max_bullets: 20", "max_bullets: 25"))
    r = reef("-C", str(project), "ci", "--json")
    assert r.code == 1, r.err  # evaluated (no behaviour change: not better), not refused
    assert json.loads(r.out)["verdict"]["decision"] == "reject"


def test_suite_change_evaluates_both_sides_on_the_new_suite(reef, project):
    from reef_cli.example_agent import suite_files

    extra = project / "canary" / "extra.yaml"
    extra.write_text("version: 1\ntasks:\n  - id: makefile-again\n    prompt: 'Create a Makefile whose build target "
                     "runs: echo built.'\n    check: grep -qP '^\\techo built' Makefile\n    timeout: 60\n")
    assert suite_files()  # the example suite is there
    human_lines(project, NEWLINE, TABS)
    r = reef("-C", str(project), "ci", "--suite-change", "--json", "--summary", "s.md")
    assert r.code in (0, 1), r.err
    out = json.loads(r.out)
    assert out["suite_change"] == [{"path": "canary/extra.yaml", "change": "added", "what": "canary task"}]
    assert "makefile-again" in {t["task_id"] for t in out["verdict"]["per_task"]}
    md = (project / "s.md").read_text()
    assert "--suite-change" in md and "both sides were evaluated on the new suite" in md
