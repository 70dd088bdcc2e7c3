"""`reef harness evolve --branch` and `reef publish --from-git`: a proposal as a commit on the user's own repo."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pygit2

from test_evolve import LINT, feedback, init_project


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@x", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}).stdout


def repo_project(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    git("init", "-q", "-b", "main", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-qm", "harness", cwd=root)
    return root, ledger


def test_evolve_branch_writes_a_commit_and_leaves_index_and_tree_alone(reef, tmp_path):
    root, ledger = repo_project(reef, tmp_path)
    ids = feedback(ledger, LINT, 3)  # tier 3: notes (CLAUDE.local.md)
    (root / "scratch.txt").write_text("user's uncommitted work\n")
    git("add", "scratch.txt", cwd=root)
    index_before = (root / ".git" / "index").read_bytes()
    status_before = git("status", "--porcelain", cwd=root)
    r = reef("-C", str(root), "harness", "evolve", "--branch", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["status"] == "branch" and out["release"] is None
    b = out["branch"]
    assert b["branch"].startswith("reef/evolve-")
    assert (root / ".git" / "index").read_bytes() == index_before
    assert git("status", "--porcelain", cwd=root) == status_before
    assert not (root / "CLAUDE.local.md").exists()
    assert len(json.loads(reef("-C", str(root), "log", "--json").out)) == 1
    repo = pygit2.Repository(str(root))
    commit = repo.revparse_single(b["branch"])
    assert str(commit.parents[0].id) == str(repo.head.target)
    assert "CLAUDE.local.md" in [e.name for e in commit.tree]
    desc = b["description"]
    assert "Run the linter before committing" in desc and "Not gated" in desc
    assert any(f"`{i}`" in desc for i in ids)
    assert f"Reef-Proposal: {out['evolve_id']}" in commit.message

    # merged by a human (fast-forward), then published from git: the release keeps the link
    git("stash", "-q", cwd=root)
    git("merge", "-q", "--ff-only", b["branch"], cwd=root)
    r = reef("-C", str(root), "publish", "--from-git", "main", "--json")
    assert r.code == 0, r.err
    rel = json.loads(r.out)["release"]
    assert rel["meta"]["proposal"] == out["evolve_id"] and rel["meta"]["git_commit"] == b["commit_id"]
    assert "merged proposal" in rel["reason"]
    st = json.loads(reef("-C", str(root), "status", "--json").out)
    assert st["clean"] is True


def test_branch_refused_outside_a_git_repo_and_on_an_existing_branch(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    r = reef("-C", str(root), "harness", "evolve", "--branch")
    assert r.code == 4 and "is not inside a Git repository" in r.err
    git("init", "-q", "-b", "main", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-qm", "harness", cwd=root)
    git("branch", "taken", cwd=root)
    r = reef("-C", str(root), "harness", "evolve", "--branch", "taken")
    assert r.code == 3 and "branch 'taken' already exists" in r.err
    r = reef("-C", str(root), "harness", "evolve", "--branch", "bad..name")
    assert r.code == 4 and "not a valid Git branch name" in r.err
    r = reef("-C", str(root), "harness", "evolve", "--open-pr")
    assert r.code == 4 and "--open-pr needs --branch" in r.err


def test_evolve_branch_without_gh_prints_the_description(reef, tmp_path, monkeypatch):
    root, ledger = repo_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    monkeypatch.setenv("PATH", "/nonexistent")
    r = reef("-C", str(root), "harness", "evolve", "--branch", "mine", "--open-pr")
    assert r.code == 0, r.err
    assert "Proposed on branch mine" in r.out and "## Bullets" in r.out and "## Gate" in r.out


def test_publish_from_git_unknown_ref(reef, tmp_path):
    root, _ = repo_project(reef, tmp_path)
    r = reef("-C", str(root), "publish", "--from-git", "nope")
    assert r.code == 1 and "--from-git nope: no such commit or branch" in r.err
    r = reef("-C", str(root), "publish")
    assert r.code == 2 and "publish needs -m MESSAGE" in r.err


def test_sync_publishes_a_merged_proposal_and_pushes_it(reef, tmp_path):
    root, ledger = repo_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    out = json.loads(reef("-C", str(root), "harness", "evolve", "--branch", "--json").out)
    git("merge", "-q", "--no-ff", "-m", "merge proposal", out["branch"]["branch"], cwd=root)
    bare = tmp_path / "hub.git"
    pygit2.init_repository(str(bare), bare=True)
    assert reef("-C", str(root), "remote", "add", "hub", str(bare)).code == 0
    r = reef("-C", str(root), "sync", "--json")
    assert r.code == 0, r.err
    res = json.loads(r.out)
    assert res["published"]["meta"]["proposal"] == out["evolve_id"]
    assert res["push"]["scenarios"][0]["state"] == "pushed"
    r = reef("-C", str(root), "sync", "--json")  # again: the proposal is linked, nothing new
    assert json.loads(r.out)["published"] is None
