"""A link into the measuring stick (`.claude/skills/answers -> ../../canary`) hands the agent its held-out tasks:
compile, publish, ci and eval refuse it (exit 4) with one line naming the link and where it points."""

from __future__ import annotations

import os

import pytest

from reef_cli.stick_links import agent_view, stick_links
from reef_cli.gitstore import MODE_LINK, Entry


def link(target: str) -> Entry:
    return Entry(target.encode(), MODE_LINK)


SUITE = {"canary/suite.yaml": Entry(b"tasks: []\n"), "evaluators/score.py": Entry(b"print(1)\n"),
         "CLAUDE.md": Entry(b"# rules\n")}


@pytest.mark.parametrize("links, bad", [
    ({".claude/skills/answers": link("../../canary")}, ".claude/skills/answers"),  # the suite directory
    ({".claude/skills/s/x.yaml": link("../../../canary/suite.yaml")}, ".claude/skills/s/x.yaml"),  # one task file
    ({".claude/skills/all": link("../..")}, ".claude/skills/all"),  # the root holds the suite
    ({".claude/skills/e": link("../../evaluators")}, ".claude/skills/e"),
    ({".claude/a": link("../canary"), ".claude/skills/b": link("../a/suite.yaml")}, ".claude/a"),  # a chain
    ({"docs/d": link("../.claude"), ".claude/c": link("../canary")}, ".claude/c"),  # a link in a directory on the way
])
def test_links_into_the_stick_are_found(links, bad):
    found = stick_links({**SUITE, **links})
    assert found and found[0].path == bad


def test_links_elsewhere_loops_and_exits_are_not():
    files = {**SUITE, ".claude/skills/r": link("../rules"), "x": link("y"), "y": link("x"), "out": link("../up"),
             "abs": link("/etc")}
    assert stick_links(files) == []


def test_a_configured_suite_directory_counts_too():
    from reef_cli.config import parse_config

    config = parse_config(b"version: 1\ninclude: ['**']\ngate:\n  tasks: [exams/*.yaml]\n", source="harness.yaml")
    files = {"exams/a.yaml": Entry(b"tasks: []\n"), ".claude/skills/x": link("../../exams")}
    assert [s.lands for s in stick_links(files, (config,))] == ["exams"]
    assert stick_links(files) == []


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init", "--template", "claude").code == 0
    (root / "canary").mkdir()
    (root / "canary" / "suite.yaml").write_text("tasks:\n  - {id: t0, prompt: 'task', check: 'true'}\n")
    assert reef("-C", str(root), "publish", "-m", "suite").code == 0
    os.symlink("../../canary", root / ".claude" / "skills" / "answers")
    return root


LINE = ("reef: error: .claude/skills/answers is a link to '../../canary', which reaches the canary suite ('canary'); "
        "the agent would read the held-out measuring stick through it — remove the link; nothing was {}\n")


def test_compile_publish_ci_and_eval_refuse_the_link(reef, project):
    r = reef("-C", str(project), "harness", "compile", "--agent", "claude", "--worktree")
    assert (r.code, r.err) == (4, LINE.format("compiled"))
    r = reef("-C", str(project), "publish", "-m", "skill link")
    assert (r.code, r.err) == (4, LINE.format("published"))
    r = reef("-C", str(project), "ci")
    assert (r.code, r.err) == (4, LINE.format("run"))
    r = reef("-C", str(project), "ci", "--suite-change")  # no suite makes reading its own tasks fair
    assert r.code == 4
    r = reef("-C", str(project), "eval", "--working-tree")
    assert (r.code, r.err) == (4, LINE.format("run"))


def test_the_agents_view_of_a_harness_holds_no_measuring_stick():
    from types import SimpleNamespace

    config = SimpleNamespace(gate=SimpleNamespace(tasks=("exams/*.yaml",), evaluators=("grading/**",)))
    files = {**SUITE, "exams/t.yaml": Entry(b"tasks: []\n"), "grading/g.py": Entry(b""), "exams-notes.md": Entry(b""),
             ".claude/skills/s/SKILL.md": Entry(b"x\n")}
    assert sorted(agent_view(files, (config,))) == [".claude/skills/s/SKILL.md", "CLAUDE.md", "exams-notes.md"]


def test_a_canary_episodes_agent_cannot_read_the_suite_in_its_harness(reef, tmp_path):
    """Every gate episode's agent got the whole tree as $REEF_HARNESS_DIR, canary/ included: an agent that read
    its exam there scored 1.00 in `reef eval`. It now gets the harness without the tasks and evaluators."""
    import json

    from conftest import set_block

    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    (root / "canary").mkdir()
    (root / "canary" / "t.yaml").write_text(
        "version: 1\ntasks:\n  - id: peek\n    prompt: answer\n    check: grep -qx clean answer.txt\n    timeout: 30\n")
    cfg = root / "harness.yaml"
    agent = ('["sh", "-c", "if [ -e \\"$REEF_HARNESS_DIR/canary\\" ]; then echo leaked; '
             'elif [ -e \\"$REEF_HARNESS_DIR/harness.yaml\\" ]; then echo clean; fi > answer.txt", "{prompt}"]')
    cfg.write_text("\n".join(ln for ln in cfg.read_text().splitlines() if not ln.startswith("agent:"))
                   + f"\nagent: {agent}\n")
    assert reef("-C", str(root), "publish", "-m", "one canary task").code == 0
    set_block(root, "- Read the task twice.")
    r = reef("-C", str(root), "eval", "--json", "--policy", "paired", "--repeats", "1")
    v = json.loads(r.out)
    assert {t["task_id"]: (t["current"], t["candidate"]) for t in v["per_task"]} == {"peek": (1.0, 1.0)}, r.out
