"""`reef publish` refuses what every other clone's `reef pull` would refuse (reef_cli/admission.py, one set of rules):
exit 4, one line naming the path and why, nothing published, the working tree as it was. A relative link that stays
inside the harness is published and pulled; an absolute one is not, even pointing inside the project."""

from __future__ import annotations

import os

import pytest

from conftest import reef_init
from test_pull_admission import pair  # noqa: F401  (fixture: A pushed, B a Git clone that pulled step 1)
from test_remote import log_bytes, ok


@pytest.fixture
def project(tmp_path):
    return reef_init(tmp_path / "p", "--template", "claude")


def skill(project, target: str) -> None:
    """`.claude/skills/x/SKILL.md` a symlink to `target`, the file it means being reef/notes/skill.md."""
    (project / "reef" / "notes").mkdir(parents=True, exist_ok=True)
    (project / "reef" / "notes" / "skill.md").write_text("# the skill\n")
    (project / ".claude" / "skills" / "x").mkdir(parents=True, exist_ok=True)
    os.symlink(target, project / ".claude" / "skills" / "x" / "SKILL.md")


@pytest.mark.parametrize("make, why", [
    (lambda p: skill(p, str(p / "reef" / "notes" / "skill.md")),
     "is a symlink to the absolute path '{p}/reef/notes/skill.md', which another clone cannot resolve the same way; "
     "reef pull refuses it, so nothing was published — make it relative: "
     "ln -sfn ../../../reef/notes/skill.md .claude/skills/x/SKILL.md"),
    (lambda p: skill(p, "sub/../../../../reef/notes/skill.md"),
     "is a symlink to 'sub/../../../../reef/notes/skill.md', which climbs out of a name it entered; reef takes only "
     "plain targets; reef pull refuses it, so nothing was published"),
], ids=["absolute-inside", "climbs-out-of-a-name"])
def test_publish_refuses_a_link_pull_would_refuse(reef, project, make, why):
    a = project
    make(a)
    (a / "CLAUDE.md").write_text((a / "CLAUDE.md").read_text() + "\nMy own line.\n")
    before = log_bytes(a)
    link = os.readlink(a / ".claude" / "skills" / "x" / "SKILL.md")
    r = reef("-C", str(a), "publish", "-m", "a skill")
    assert (r.code, r.err) == (4, f"reef: error: '.claude/skills/x/SKILL.md' {why.format(p=a)}\n")
    assert log_bytes(a) == before
    assert os.readlink(a / ".claude" / "skills" / "x" / "SKILL.md") == link
    assert "My own line." in (a / "CLAUDE.md").read_text()


def test_publish_refuses_a_folder_a_case_insensitive_disk_reads_as_dot_git(reef, project):
    a = project
    (a / ".claude" / "x" / ".GIT").mkdir(parents=True)
    (a / ".claude" / "x" / ".GIT" / "config").write_text("[core]\n")
    before = log_bytes(a)
    r = reef("-C", str(a), "publish", "-m", "x")
    assert (r.code, r.err) == (4, "reef: error: '.claude/x/.GIT/config' lies inside a '.GIT' directory; reef pull "
                                  "refuses it, so nothing was published\n")
    assert log_bytes(a) == before


def test_a_relative_link_inside_the_harness_is_published_and_pulled(reef, pair):  # noqa: F811
    _, _, a, b = pair
    skill(a, "../../../reef/notes/skill.md")
    ok(reef("-C", str(a), "publish", "-m", "a skill"))
    ok(reef("-C", str(a), "push"))
    ok(reef("-C", str(b), "pull"))
    assert os.readlink(b / ".claude" / "skills" / "x" / "SKILL.md") == "../../../reef/notes/skill.md"
    assert (b / ".claude" / "skills" / "x" / "SKILL.md").read_text() == "# the skill\n"
