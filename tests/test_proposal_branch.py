"""`reef harness evolve --branch` and `reef publish --from-git`: a proposal as a commit on the user's own repo."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pygit2

from conftest import reef_init
from test_evolve import LINT, feedback, init_project
from test_secret_paths import TOKEN, git_objects


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


def _killed_evolve(root: Path, *args: str, point: str = "planned") -> subprocess.CompletedProcess:
    import os
    import signal

    from conftest import reef_exe

    r = subprocess.run([reef_exe(), "-C", str(root), "harness", "evolve", "--json", *args], capture_output=True,
                       text=True, env={**os.environ, "REEF_FAULT": f"evolve:{point}"}, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    return r


def test_a_killed_branch_evolve_resumed_without_branch_still_goes_to_its_branch(reef, tmp_path):
    root, ledger = repo_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    _killed_evolve(root, "--branch", "mine")
    r = reef("-C", str(root), "harness", "evolve", "--json")  # resumed without --branch
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["resumed"] is True and out["status"] == "branch" and out["branch"]["branch"] == "mine"
    assert len(json.loads(reef("-C", str(root), "log", "--json").out)) == 1  # nothing reached the release chain
    assert not (root / "CLAUDE.local.md").exists()
    assert "CLAUDE.local.md" in [e.name for e in pygit2.Repository(str(root)).revparse_single("mine").tree]
    assert not (root / ".reef/scenarios/default/evolve/journal.json").exists()


def test_a_resume_that_asks_for_another_mode_is_refused(reef, tmp_path):
    root, ledger = repo_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    killed = _killed_evolve(root, "--branch")
    journal = json.loads((root / ".reef/scenarios/default/evolve/journal.json").read_text())
    name, eid = journal["branch"], journal["evolve_id"]
    assert name == f"reef/evolve-{eid[-8:]}" and killed.stdout == ""
    r = reef("-C", str(root), "harness", "evolve", "--branch", "other")
    assert r.code == 3 and r.err.strip() == (
        f"reef: error: an interrupted evolve ({eid}, phase 'planned') was proposing on branch '{name}', not "
        f"'other'; resume it with 'reef harness evolve --branch {name}' (or without --branch), then run --branch "
        "other again")
    r = reef("-C", str(root), "harness", "evolve", "--branch", "--json")  # the default name: the same branch
    assert r.code == 0 and json.loads(r.out)["branch"]["branch"] == name

    feedback(ledger, {"lesson": "Use tabs for indentation."}, 3)
    _killed_evolve(root)  # a publishing evolve, killed
    eid = json.loads((root / ".reef/scenarios/default/evolve/journal.json").read_text())["evolve_id"]
    r = reef("-C", str(root), "harness", "evolve", "--branch", "later")
    assert r.code == 3 and r.err.strip() == (
        f"reef: error: an interrupted evolve ({eid}, phase 'planned') was publishing to the release chain, not to "
        "a branch; finish it with 'reef harness evolve' (without --branch), then run --branch again")
    assert len(json.loads(reef("-C", str(root), "log", "--json").out)) == 1
    r = reef("-C", str(root), "harness", "evolve", "--json")
    assert r.code == 0 and json.loads(r.out)["resumed"] is True
    assert len(json.loads(reef("-C", str(root), "log", "--json").out)) == 2


def test_an_existing_branch_is_refused_before_anything_is_reflected(reef, tmp_path):
    root, ledger = repo_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    git("branch", "mine", cwd=root)
    before = [x.record_id for x in ledger.iter_records()]
    r = reef("-C", str(root), "harness", "evolve", "--branch", "mine")
    assert r.code == 3 and r.err.strip() == (
        f"reef: error: branch 'mine' already exists in {root / '.git'}; pass another --branch NAME or delete it")
    assert [x.record_id for x in ledger.iter_records()] == before  # no reflect, no proposal: nothing was paid for
    assert not (root / ".reef/scenarios/default/evolve/journal.json").exists()


def test_a_branch_that_cannot_be_written_keeps_the_journal_and_a_kill_after_it_resumes(reef, tmp_path):
    """The branch is written before the journal is cleared: a branch of the same name made while the evolve was
    interrupted stops the resume (exit 3) with the plan kept, and a kill right after the branch is written resumes
    to that same commit instead of refusing its own branch."""
    root, ledger = repo_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    _killed_evolve(root, "--branch", "mine")
    journal = root / ".reef/scenarios/default/evolve/journal.json"
    git("branch", "mine", cwd=root)  # the user's own branch, made meanwhile
    r = reef("-C", str(root), "harness", "evolve")
    assert r.code == 3 and "branch 'mine' already exists" in r.err
    assert journal.exists()  # the plan is kept: deleting the branch lets the resume finish it
    git("branch", "-D", "mine", cwd=root)
    _killed_evolve(root, point="branched")
    tip = pygit2.Repository(str(root)).revparse_single("mine")
    assert journal.exists() and "Reef-Proposal: " in tip.message
    r = reef("-C", str(root), "harness", "evolve", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["resumed"] is True and out["status"] == "branch" and out["branch"]["commit_id"] == str(tip.id)
    assert not journal.exists() and len(json.loads(reef("-C", str(root), "log", "--json").out)) == 1


def test_sync_publishes_nothing_on_a_trailer_no_evolve_of_ours_made(reef, tmp_path):
    """Anyone can type `Reef-Proposal:` into a commit: sync used to publish HEAD's harness on it (here an older
    harness, silently reverting step 2)."""
    root, _ = repo_project(reef, tmp_path)
    with open(root / "CLAUDE.md", "a") as f:
        f.write("- a rule published later by the team\n")
    assert reef("-C", str(root), "publish", "-m", "step 2 rule").code == 0
    git("commit", "-q", "--allow-empty", "-m", "fix typo\n\nReef-Proposal: prop_does_not_exist", cwd=root)
    tip = git("rev-parse", "HEAD", cwd=root).strip()
    r = reef("-C", str(root), "sync", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["published"] is None
    assert r.err.splitlines()[0] == (f"reef: commit {tip[:12]} carries 'Reef-Proposal: prop_does_not_exist', which "
                                     "no evolve of scenario 'default' made here; nothing was published from Git HEAD")
    head = json.loads(reef("-C", str(root), "show", "HEAD", "--json").out)
    assert head["step"] == 2 and head["reason"] == "step 2 rule"


def test_sync_will_not_publish_a_merged_proposal_over_a_release_made_since(reef, tmp_path):
    root, ledger = repo_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    out = json.loads(reef("-C", str(root), "harness", "evolve", "--branch", "--json").out)
    with open(root / "CLAUDE.md", "a") as f:  # published, not committed to Git: HEAD's CLAUDE.md is the old one
        f.write("- a rule published after the proposal\n")
    assert reef("-C", str(root), "publish", "-m", "step 2 rule").code == 0
    git("checkout", "-q", "--", "CLAUDE.md", cwd=root)
    git("merge", "-q", "--no-ff", "-m", "merge proposal", out["branch"]["branch"], cwd=root)
    r = reef("-C", str(root), "sync", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["published"] is None
    tip = git("rev-parse", "HEAD", cwd=root).strip()
    assert r.err.splitlines()[0] == (
        f"reef: Git HEAD ({tip[:12]}) differs from release step 2 in CLAUDE.md, which proposal {out['evolve_id']} did "
        "not change — publishing HEAD would overwrite it; nothing was published (rebase the proposal onto the "
        "current harness, or run 'reef publish --from-git HEAD' if HEAD is what you mean)")
    assert json.loads(reef("-C", str(root), "show", "HEAD", "--json").out)["step"] == 2


SECRET_REFUSED = ("looks like a secret; a release is stored in Git, pushed and compiled into the agent's files, so "
                  "nothing was published — remove it (use an environment variable), or publish anyway with ")


def test_publish_from_git_refuses_a_secret_as_a_working_tree_publish_does(reef, tmp_path):
    root = reef_init(tmp_path / "p", "--template", "claude")
    git("init", "-q", "-b", "main", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-qm", "harness", cwd=root)
    lines = (root / "CLAUDE.md").read_text().splitlines()
    (root / "CLAUDE.md").write_text("\n".join(lines + ["", f"Deploy with `gh auth login --with-token {TOKEN}`."]) + "\n")
    git("commit", "-qam", "deploy notes", cwd=root)
    git("checkout", "-q", "HEAD~1", "--", "CLAUDE.md", cwd=root)  # the working tree holds no secret: Git's HEAD does
    r = reef("-C", str(root), "publish", "--from-git", "main")
    assert (r.code, r.err) == (4, f"reef: error: CLAUDE.md:{len(lines) + 2} (github token): {SECRET_REFUSED}"
                                  "--allow-secret\n")
    assert len(json.loads(reef("-C", str(root), "log", "--json").out)) == 1
    assert TOKEN not in git_objects(root)
    r = reef("-C", str(root), "publish", "--from-git", "main", "--allow-secret")
    assert r.code == 0, r.err
    assert json.loads(reef("-C", str(root), "show", "HEAD", "--json").out)["step"] == 2
    assert TOKEN in git_objects(root)  # what --allow-secret means, and what the check above would have seen


def test_sync_publishes_no_secret_typed_into_a_merged_proposal(reef, tmp_path):
    root, ledger = repo_project(reef, tmp_path)
    feedback(ledger, LINT, 3)
    out = json.loads(reef("-C", str(root), "harness", "evolve", "--branch", "--json").out)
    git("merge", "-q", "--no-ff", "--no-commit", out["branch"]["branch"], cwd=root)
    with open(root / "CLAUDE.local.md", "a") as f:  # the reviewer's edit to the file the proposal changed
        f.write(f"token: {TOKEN}\n")
    git("commit", "-qam", "merge proposal", cwd=root)
    line = (root / "CLAUDE.local.md").read_text().splitlines().index(f"token: {TOKEN}") + 1
    r = reef("-C", str(root), "sync", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["published"] is None
    tip = git("rev-parse", "HEAD", cwd=root).strip()
    assert r.err.splitlines()[0] == (f"reef: Git HEAD ({tip[:12]}): CLAUDE.local.md:{line} (github token): "
                                     f"{SECRET_REFUSED}'reef publish --from-git HEAD --allow-secret'")
    assert len(json.loads(reef("-C", str(root), "log", "--json").out)) == 1
    assert TOKEN not in git_objects(root)
