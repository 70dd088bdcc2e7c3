"""The example agent: small, deterministic, offline, and better exactly when its harness holds the right rules."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from reef_cli import example_agent
from reef_cli.example_agent import classify, main, suite_files

RULES = """# Project
<!-- reef:begin learned -->
- Always end files with a trailing newline.
- Use tabs for indentation in Makefiles.
- Start shell scripts with a #!/bin/sh shebang.
- Run the tests before finishing (write a TESTED marker).
<!-- reef:end learned -->
"""

SKILL = """---
name: release-notes
description: Use when writing release notes.
---
- Start release notes with a '# Release notes' heading.
"""


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """Run the agent in-process in a fresh work dir: agent(prompt, claude_md=None, files=, args=) -> (code, work)."""
    harness = tmp_path / "harness"
    harness.mkdir()
    routing = tmp_path / "routing.jsonl"

    def guard(*_a, **_k):
        raise AssertionError("the example agent opened a socket")

    monkeypatch.setattr(socket, "socket", guard)
    monkeypatch.setenv("REEF_HARNESS_DIR", str(harness))
    monkeypatch.setenv("REEF_ROUTING_FILE", str(routing))
    monkeypatch.delenv("REEF_EXAMPLE_NOISE", raising=False)
    monkeypatch.setenv("REEF_EPISODE_SEED", "0:t:0")
    counter = {"n": 0}

    def run(prompt, claude_md=None, *, files=None, args=()):
        counter["n"] += 1
        work = tmp_path / f"work{counter['n']}"
        work.mkdir()
        if claude_md is not None:
            (harness / "CLAUDE.md").write_text(claude_md)
        for rel, text in (files or {}).items():
            (harness / rel).parent.mkdir(parents=True, exist_ok=True)
            (harness / rel).write_text(text)
        monkeypatch.chdir(work)
        code = main(["-p", prompt, *args])
        return code, work

    run.routing = routing
    return run


def test_help_says_it_is_an_example():
    out = subprocess.run([sys.executable, "-m", "reef_cli.example_agent", "--help"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and "EXAMPLE agent" in out.stdout and "not a real coding agent" in out.stdout
    assert "EXAMPLE agent" in example_agent.__doc__


def test_without_rules_it_is_naive(agent):
    code, work = agent('Write the text "hi" to hi.txt.', "# nothing\n")
    assert code == 0 and (work / "hi.txt").read_bytes() == b"hi"
    code, work = agent("Create a Makefile with a target build that runs: echo building")
    assert (work / "Makefile").read_text() == "build:\n    echo building"
    code, work = agent("Write a shell script run.sh that prints ok.")
    assert (work / "run.sh").read_text() == "echo ok" and not os.access(work / "run.sh", os.X_OK)
    assert not (work / "TESTED").exists()


def test_rules_in_the_harness_change_what_it_writes(agent):
    code, work = agent('Write the text "hi" to hi.txt.', RULES)
    assert code == 0 and (work / "hi.txt").read_bytes() == b"hi\n" and (work / "TESTED").read_text() == "ok\n"
    code, work = agent("Create a Makefile with a target build that runs: echo building")
    assert (work / "Makefile").read_text() == "build:\n\techo building\n"
    code, work = agent("Write a shell script run.sh that prints ok.")
    assert (work / "run.sh").read_text() == "#!/bin/sh\necho ok\n" and os.access(work / "run.sh", os.X_OK)
    decisions = [json.loads(line) for line in agent.routing.read_text().splitlines()]
    assert {"decision": "rule_applied", "rule": "shebang", "source": "CLAUDE.md"} in decisions


def test_the_later_of_two_contradicting_rules_wins(agent):
    code, work = agent("Create a Makefile with a target b that runs: x", RULES + "- Indent with four spaces.\n")
    assert (work / "Makefile").read_text() == "b:\n    x\n"
    code, work = agent("Create a Makefile with a target b that runs: x",
                       "- Indent with four spaces.\n- Use tabs for indentation in Makefiles.\n")
    assert (work / "Makefile").read_text() == "b:\n\tx"


def test_rules_come_from_notes_and_agents_md_too(agent):
    code, work = agent('Write the text "hi" to hi.txt.', None,
                       files={"CLAUDE.local.md": "- End every file with a newline.\n"})
    assert (work / "hi.txt").read_text() == "hi\n"


def test_a_skill_is_used_when_the_prompt_names_it(agent):
    files = {".claude/skills/release-notes/SKILL.md": SKILL}
    code, work = agent("Write release notes for version 1.2 to NOTES.md.", "", files=files)
    assert (work / "NOTES.md").read_text().startswith("# Release notes\n")
    decisions = [json.loads(line) for line in agent.routing.read_text().splitlines()]
    assert decisions[0] == {"decision": "skill_used", "skill": "release-notes",
                            "source": ".claude/skills/release-notes/SKILL.md"}
    code, work = agent('Write the text "hi" to hi.txt.')
    assert (work / "hi.txt").read_text() == "hi"  # the skill's rules load only when it is used


def test_replace_and_unknown_prompts(agent, capsys):
    code, work = agent('Replace "teh" with "the" in README.md.', RULES)
    assert code == 1 and "README.md does not exist" in capsys.readouterr().err
    code, work = agent("Make me a sandwich.")
    assert code == 1 and "I only understand" in capsys.readouterr().err


def test_noise_is_seeded_by_episode_and_prompt(agent, monkeypatch):
    prompt = 'Write the text "hi" to hi.txt.'
    outcomes = []
    for seed in range(40):
        monkeypatch.setenv("REEF_EPISODE_SEED", f"0:t:{seed}")
        _, work = agent(prompt, RULES, args=("--noise", "0.3"))
        outcomes.append((work / "hi.txt").read_bytes())
    forgot = outcomes.count(b"hi")
    assert 4 <= forgot <= 24  # about 30% of 40
    monkeypatch.setenv("REEF_EPISODE_SEED", "0:t:7")
    again = [agent(prompt, RULES, args=("--noise", "0.3"))[1] for _ in range(2)]
    assert again[0].joinpath("hi.txt").read_bytes() == again[1].joinpath("hi.txt").read_bytes() == outcomes[7]
    monkeypatch.setenv("REEF_EXAMPLE_NOISE", "1")
    _, work = agent(prompt, "# no rules\n")
    assert (work / "hi.txt").read_bytes() == b"hi\n"  # with certain noise an unknown good habit happens by luck


def test_bad_noise_is_a_usage_error(agent, monkeypatch):
    monkeypatch.setenv("REEF_EXAMPLE_NOISE", "lots")
    with pytest.raises(SystemExit) as err:
        agent('Write the text "hi" to hi.txt.')
    assert err.value.code == 2


def test_rule_keywords():
    assert classify("Always add a trailing newline to files") == "trailing-newline"
    assert classify("Use tabs for indentation in Makefiles") == "makefile-tabs"
    assert classify("Run the tests before finishing (write TESTED marker)") == "run-tests"
    assert classify("Indent with four spaces") == "spaces-indent"
    assert classify("Start shell scripts with a #!/bin/sh shebang") == "shebang"
    assert classify("Start release notes with a '# Release notes' heading") == "release-heading"
    assert classify("Be kind") is None


def test_the_bundled_suite_is_valid_and_learnable():
    from reef_cli.tasks import parse_task_file

    tasks = parse_task_file(suite_files()["example.yaml"], "canary/example.yaml")
    canary = [t for t in tasks if t.split == "canary"]
    train = [t for t in tasks if t.split == "train"]
    assert len(canary) >= 4 and any(t.sentinel for t in canary) and len(train) >= 2
    assert all(classify(t.description) for t in train)  # each train task's feedback is a rule the agent knows
    assert not {t.prompt for t in canary} & {t.prompt for t in train}


def test_it_needs_no_harness(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("REEF_HARNESS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["-p", 'Write the text "x" to x.txt.']) == 0
    assert "no harness given" in capsys.readouterr().err and Path("x.txt").read_text() == "x"
