"""`reef ci` (reef_cli/ci.py): outputs checked before the gate runs, a base checkout after a head run, and the
summary's bullets with their evidence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import example_suite_project, set_block

NEWLINE = "- Always end files with a trailing newline."
TABS = "- Use tabs for indentation in Makefiles."


@pytest.fixture
def project(reef, tmp_path):
    """A claude-template project with the example suite and agent, published as release 2 (repeats 2)."""
    root = example_suite_project(reef, tmp_path / "proj")
    assert reef("-C", str(root), "publish", "-m", "canary suite and the example agent").code == 0
    return root


def episodes(root: Path) -> int:
    from reef_cli.ledger import Ledger

    return sum(1 for _ in Ledger(root / ".reef/scenarios/default/ledger.jsonl", "default").iter_records(kind="episode"))


def test_ci_then_ci_against_a_base_checkout_of_the_same_content(reef, project, tmp_path):
    """The same baseline content judged once as the head release and once as a --base checkout is two runs,
    not one journal whose episode records collide (that exited 3 on every later run)."""
    base = tmp_path / "base"
    shutil.copytree(project, base, ignore=shutil.ignore_patterns(".reef"))
    set_block(project, NEWLINE, TABS)
    first = reef("-C", str(project), "ci", "--json")
    assert first.code == 0, first.err
    for _ in range(2):
        r = reef("-C", str(project), "ci", "--base", str(base), "--json")
        assert r.code == 0, r.err
        assert json.loads(r.out)["verdict"]["decision"] == "publish"
    again = reef("-C", str(project), "ci", "--json")
    assert again.code == 0, again.err


@pytest.mark.parametrize("option", ["--junit", "--summary"])
def test_an_output_that_is_a_directory_is_refused_before_the_gate_runs(reef, project, option):
    (project / "out").mkdir()
    set_block(project, NEWLINE, TABS)
    r = reef("-C", str(project), "ci", option, "out")
    assert r.code == 4
    assert r.err == f"reef: error: {option} {project / 'out'}: is a directory; give a file path\n"
    assert episodes(project) == 0


def test_an_output_under_a_file_is_refused_before_the_gate_runs(reef, project):
    (project / "f").write_text("x")
    set_block(project, NEWLINE, TABS)
    r = reef("-C", str(project), "ci", "--junit", "f/j.xml")
    assert r.code == 4 and r.err == f"reef: error: --junit {project / 'f/j.xml'}: {project / 'f'} is not a directory\n"
    assert episodes(project) == 0


def test_a_base_that_is_not_a_checkout_is_one_line(reef, project, tmp_path):
    r = reef("-C", str(project), "ci", "--base", str(tmp_path / "nope"))
    assert r.code == 4
    assert r.err == f"reef: error: --base {tmp_path / 'nope'}: not a directory; pass a checkout of the base branch\n"
    (tmp_path / "empty").mkdir()
    r = reef("-C", str(project), "ci", "--base", str(tmp_path / "empty"))
    assert r.code == 4 and "no harness.yaml there" in r.err


def test_the_summary_lists_added_and_removed_bullets_with_their_evidence(reef, project):
    from reef_cli.patterns import Pattern, PatternMemory

    base_block = "- Keep functions short. <!-- reef:abc123 -->"
    set_block(project, base_block)
    memory = PatternMemory({
        "k1": Pattern(key="k1", id="abc123", text="Keep functions short.", polarity="do", count=4,
                      evidence=["rec_A", "rec_B", "rec_C", "rec_D"]),
        "k2": Pattern(key="k2", id="def456", text="Always end files with a trailing newline.", polarity="do",
                      count=7, evidence=[f"rec_{i}" for i in range(7)]),
    })
    mem = project / "reef/memory/patterns.json"
    mem.parent.mkdir(parents=True, exist_ok=True)
    mem.write_bytes(memory.dumps())
    assert reef("-C", str(project), "publish", "-m", "a learned bullet and its memory").code == 0
    set_block(project, NEWLINE + " <!-- reef:def456 -->", TABS)
    r = reef("-C", str(project), "ci", "--summary", "s.md", "--json")
    assert r.code == 0, r.err
    md = (project / "s.md").read_text()
    assert "### Bullets" in md
    assert ("- + added `CLAUDE.md` (`def456`): Always end files with a trailing newline. — seen 7x: `rec_0`, `rec_1`, "
            "`rec_2`, `rec_3`, `rec_4` and 2 more") in md
    assert "- + added `CLAUDE.md` (`b_" in md and "Use tabs for indentation in Makefiles. — no pattern in memory" in md
    assert ("- - removed `CLAUDE.md` (`abc123`): Keep functions short. — seen 4x: `rec_A`, `rec_B`, `rec_C`, `rec_D`"
            in md)
    bullets = {b["id"]: b for b in json.loads(r.out)["bullets"]}
    assert bullets["def456"]["count"] == 7 and bullets["abc123"]["change"] == "removed"
    r = reef("-C", str(project), "ci")  # the terminal lists them too
    assert r.code == 0, r.err
    assert ("+ CLAUDE.md: Always end files with a trailing newline. (seen 7x: rec_0, rec_1, rec_2, rec_3, rec_4 and 2 "
            "more; utility") not in r.out  # no attribution in ci
    assert "+ CLAUDE.md: Always end files with a trailing newline. (seen 7x: rec_0, rec_1, rec_2, rec_3, rec_4 and 2 more)" in r.out
    assert "- CLAUDE.md: Keep functions short. (seen 4x: rec_A, rec_B, rec_C, rec_D)" in r.out


TOKEN = "ghp_" + "x" * 36


def secret_line(project: Path) -> int:
    set_block(project, NEWLINE, f"- Deploy with token {TOKEN}.")
    return next(i for i, line in enumerate((project / "CLAUDE.md").read_text().splitlines(), 1) if TOKEN in line)


def test_ci_and_eval_refuse_a_change_publish_would_refuse_for_a_secret(reef, project):
    """ci passed (exit 0) and eval judged a working tree that publish refuses (exit 4): the CI job went green on a
    change that can never be published, and the gate stored the candidate. Now both refuse it the same way, before
    any episode; the summary and JUnit still say why."""
    line = secret_line(project)
    why = (f"CLAUDE.md:{line} (github token): looks like a secret; a release is stored in Git, pushed and compiled "
           "into the agent's files, so publish would refuse this change and the gate ran nothing — remove it (use an "
           "environment variable), or judge it anyway with --allow-secret")
    r = reef("-C", str(project), "ci", "--summary", "s.md", "--junit", "j.xml")
    assert (r.code, r.err) == (4, f"reef: error: {why}\n")
    assert f"## reef canary gate: ⛔ blocked by policy\n\n**{why}**" in (project / "s.md").read_text()
    assert "<failure" in (project / "j.xml").read_text()
    r = reef("-C", str(project), "ci", "--json")
    assert r.code == 4 and json.loads(r.out)["status"] == "blocked" and json.loads(r.out)["reason"] == why
    r = reef("-C", str(project), "eval")
    assert (r.code, r.out, r.err) == (4, "", f"reef: error: {why}\n")
    assert episodes(project) == 0


def stored_text(root: Path) -> str:
    """Every file under .reef, Git objects inflated."""
    import zlib

    out = []
    for p in (root / ".reef").rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            if "objects" in p.parts and len(p.parent.name) == 2:
                data = zlib.decompress(data)
            out.append(data.decode("utf-8", "replace"))
    return "".join(out)


def test_a_secret_judged_with_allow_secret_is_stored_and_shown_redacted(reef, project):
    """With --allow-secret the gate runs, but the gate record's new bullets, the summary (the CI job page) and the
    printed bullets held the raw token."""
    secret_line(project)
    r = reef("-C", str(project), "ci", "--allow-secret", "--summary", "s.md")
    assert r.code == 0, r.err
    shown = "Deploy with token [REDACTED:github_token]."
    assert f"+ CLAUDE.md: {shown} (no pattern in memory (written by hand))\n" in r.out
    md = (project / "s.md").read_text()
    assert shown in md and TOKEN not in md and TOKEN not in r.out + r.err
    assert "ghp_" not in stored_text(project)
    from reef_cli.ledger import Ledger

    gate = next(Ledger(project / ".reef/scenarios/default/ledger.jsonl", "default").iter_records(kind="gate"))
    assert shown in {b["text"] for b in gate.payload["new_bullets"]}


def test_ci_prints_a_bullets_terminal_escapes_escaped(reef, project):
    """reef ci printed each bullet's text raw: an OSC title or colour in a bullet reached the terminal."""
    set_block(project, "- Run the linter \x1b]0;PWNED\x07\x1b[31mRED", f"- Deploy with token {TOKEN}.")
    r = reef("-C", str(project), "ci")  # blocked by the secret: nothing runs, the bullets are still listed
    assert r.code == 4 and "\x1b" not in r.out + r.err
    assert ("+ CLAUDE.md: Run the linter \\x1b]0;PWNED\\x07\\x1b[31mRED (no pattern in memory (written by hand))\n"
            in r.out)
