"""Refs on the remote reef cannot take cost only themselves, and tracking refs follow the remote: a ref the remote
deleted is pruned at the next fetch instead of being acted on forever."""

from __future__ import annotations

import pygit2

from test_pull_admission import pair  # noqa: F401  (fixture: A pushed, B a Git clone that pulled step 1)
from test_remote import git, ok


def test_a_ref_reef_cannot_take_skips_only_itself_and_is_pruned_once_gone(reef, pair):  # noqa: F811
    _, bare, a, b = pair
    default = git("--git-dir", str(bare), "rev-parse", "refs/reef/scenarios/default", cwd=a).strip()
    git("--git-dir", str(bare), "update-ref", "refs/reef/scenarios/a/b", default, cwd=a)
    with open(a / "CLAUDE.md", "a") as f:
        f.write("- A's rule\n")
    ok(reef("-C", str(a), "publish", "-m", "a rule"))
    ok(reef("-C", str(a), "push"))
    r = ok(reef("-C", str(b), "pull"))
    assert "pull origin: scenario default fast-forward, 1 release(s)" in r.out
    assert "reef: skipped refs/reef/scenarios/a/b on remote 'origin': 'a/b' is not a scenario name reef can take " \
           "(1-64 lowercase letters, digits, '.', '_', '-')" in r.err.splitlines()
    assert "- A's rule" in (b / "CLAUDE.md").read_text()
    tracking = pygit2.Repository(str(b / ".reef" / "git")).references
    assert "refs/reef/remotes/origin/scenarios/a/b" in tracking
    git("--git-dir", str(bare), "update-ref", "-d", "refs/reef/scenarios/a/b", cwd=a)
    with open(a / "CLAUDE.md", "a") as f:
        f.write("- A's second rule\n")
    ok(reef("-C", str(a), "publish", "-m", "another"))
    ok(reef("-C", str(a), "push"))
    r = ok(reef("-C", str(b), "pull"))
    assert "skipped" not in r.err and "fast-forward, 1 release(s)" in r.out
    assert "refs/reef/remotes/origin/scenarios/a/b" not in pygit2.Repository(str(b / ".reef" / "git")).references
