"""SkillClaw through `reef train`: a skill pool evolved from explained reports, published only as harness changes are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SCEN = "skills"


def make(reef, tmp_path, template="minimal"):
    root = tmp_path / "proj"
    root.mkdir()
    r = reef("-C", str(root), "init", "--template", template, "--scenario", SCEN, "--recipe", "skillclaw")
    assert r.code == 0, r.err
    return root


def lesson(root, text, skill=None, score=0.0):
    from reef_cli.ledger import Ledger

    fb = {"lesson": text, **({"skill": skill} if skill else {})}
    Ledger(root / ".reef" / "scenarios" / SCEN / "ledger.jsonl", SCEN).append(
        "report", {"score": score, "feedback": fb, "receipts": []}, release_id=None, content_id=None)


def step(reef, root, *args):
    return reef("-C", str(root), "-s", SCEN, "train", *args)


def test_create_then_improve_a_skill_not_gated_in_the_learned_zone(reef, tmp_path):
    root = make(reef, tmp_path)
    lesson(root, "Run the unit tests before committing.", "testing")
    lesson(root, "Run the linter on changed files.", "testing")
    lesson(root, "Prefer small pull requests.", "reviews")  # one lesson: not enough evidence
    dry = step(reef, root, "--dry-run", "--json")
    assert dry.code == 0, dry.err
    plan = {d["group"]: d["action"] for d in json.loads(dry.out)["decisions"]}
    assert plan == {"testing": "create", "reviews": "skip"}
    assert not (root / "reef/skills/testing/SKILL.md").exists()
    r = step(reef, root, "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["gate"] == {"decision": "not gated"} and out["release_id"]
    skill = (root / "reef/skills/testing/SKILL.md").read_text()  # the working tree follows the release
    assert skill.startswith("---\nname: testing\n") and "- Run the unit tests before committing." in skill
    head = json.loads(reef("-C", str(root), "-s", SCEN, "log", "--json").out)[0]
    assert head["operation"] == "skillclaw" and head["meta"]["skillclaw"]["decisions"][0]["action"] == "create"
    assert step(reef, root).out.startswith("skillclaw: ")  # reports taught once: nothing new
    assert json.loads(reef("-C", str(root), "-s", SCEN, "log", "--json").out)[0]["release_id"] == head["release_id"]
    lesson(root, "Run the unit tests before committing.", "testing")  # already known
    lesson(root, "Run tests with -x to stop at the first failure.", "testing")
    lesson(root, "Check coverage of new code.", "testing")
    r = step(reef, root, "--json")
    assert [d["action"] for d in json.loads(r.out)["decisions"]] == ["improve"]
    skill = (root / "reef/skills/testing/SKILL.md").read_text()
    assert skill.count("Run the unit tests before committing.") == 1 and "- Check coverage of new code." in skill


def test_overlapping_skills_merge():
    from reef_cli.gitstore import Entry
    from reef_cli.skillclaw import plan

    pattern = "reef/skills/{slug}/SKILL.md"
    files = {"reef/skills/tests/SKILL.md": Entry(b"# tests\n\n## Lessons\n\n- run the unit tests first\n- run tests often\n"),
             "reef/skills/testing/SKILL.md": Entry(b"# testing\n\n## Lessons\n\n- run the unit tests first\n"),
             "reef/skills/docs/SKILL.md": Entry(b"# docs\n\n## Lessons\n\n- write a changelog entry\n")}
    out, decisions = plan(files, pattern, [], min_evidence=2, max_skills=8)
    assert [(d.group, d.action, d.path) for d in decisions] == [("testing", "merge", "reef/skills/tests/SKILL.md")]
    assert "reef/skills/testing/SKILL.md" not in out and "reef/skills/docs/SKILL.md" in out


def test_evolvable_skills_need_the_gate(reef, tmp_path):
    root = make(reef, tmp_path, template="claude")  # .claude/skills/** is Evolvable; no canary tasks yet
    lesson(root, "Quote shell variables.", "shell")
    lesson(root, "Use set -euo pipefail.", "shell")
    r = step(reef, root)
    assert r.code == 4 and "Evolvable: only through the canary gate" in r.err
    assert not (root / ".claude/skills/shell/SKILL.md").exists()


def test_the_canary_gate_judges_the_candidate_pool(reef, tmp_path):
    from reef_cli.example_agent import suite_files

    root = make(reef, tmp_path, template="claude")
    (root / "canary").mkdir()
    (root / "canary" / "example.yaml").write_text(suite_files()["example.yaml"])
    cfg = root / "harness.yaml"
    text = "\n".join(ln for ln in cfg.read_text().splitlines() if not ln.startswith("agent:"))
    cfg.write_text(text + '\nagent: ["{python}", -m, reef_cli.example_agent, -p, "{prompt}"]\n')
    assert reef("-C", str(root), "-s", SCEN, "publish", "-m", "canary suite").code == 0
    before = json.loads(reef("-C", str(root), "-s", SCEN, "log", "--json").out)[0]["release_id"]
    lesson(root, "Quote shell variables.", "shell")
    lesson(root, "Use set -euo pipefail.", "shell")
    r = step(reef, root, "--json")
    out = json.loads(r.out)
    # a skill the example agent never reads cannot beat the current harness: the gate rejects, nothing publishes
    assert r.code == 1 and not out["ok"] and out["gate"]["decision"] == "reject" and out["release_id"] is None
    assert json.loads(reef("-C", str(root), "-s", SCEN, "log", "--json").out)[0]["release_id"] == before
    assert not (root / ".claude/skills/shell/SKILL.md").exists()


def test_skillclaw_scenario_needs_a_harness(reef, tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    assert reef("-C", str(root), "init", "--template", "minimal").code == 0
    r = reef("-C", str(root), "-s", "fresh", "train", "--recipe", "skillclaw")
    assert r.code == 4 and "reef init --scenario fresh --recipe skillclaw" in r.err
    r = reef("-C", str(root), "init", "--scenario", "w", "--recipe", "sao")
    assert r.code == 4 and "trains model weights" in r.err


def test_an_edit_saved_while_skillclaw_publishes_is_kept(reef, tmp_path, monkeypatch):
    """rv-attack: skillclaw checked the tree clean, gated and published, then wrote the files unguarded: a skill the
    user saved in between was overwritten. Now the write is staged, re-checked and renamed; the edit is kept and
    named, exit 3, as rollback does."""
    from reef_cli.store import HarnessStore

    root = make(reef, tmp_path)
    lesson(root, "Run the unit tests before committing.", "testing")
    lesson(root, "Run the linter on changed files.", "testing")
    skill = root / "reef/skills/testing/SKILL.md"
    real = HarnessStore.publish

    def publish_then_the_user_saves(self, *args, **kwargs):
        res = real(self, *args, **kwargs)
        skill.parent.mkdir(parents=True, exist_ok=True)
        skill.write_text("my own testing notes, saved meanwhile\n")
        return res

    monkeypatch.setattr(HarnessStore, "publish", publish_then_the_user_saves)
    r = step(reef, root, "--json")
    assert r.code == 3 and r.err.strip() == (f"reef: error: {skill} changed while reef was writing the working tree; "
                                             "your edit is kept and that file was not replaced"), r.err
    assert skill.read_text() == "my own testing notes, saved meanwhile\n"
