"""A release is a Git tree anyone with push access can forge: pull, merge, checkout, publish --from-git and sync
refuse (exit 4, one line, nothing written, the chain not moved) a path inside .git/.reef, outside the local include
globs, or a symlink leaving the harness (reef_cli/admission.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pygit2
import pytest

from reef_cli.admission import link_problem, path_problem

from test_remote import git, log_bytes, ok

FORGED = "rel_01M8TZZZZZZZZZZZZZZZZZZZZZ"


def forge(a: Path, bare: Path, extra: dict[str, tuple[bytes, int]], *, push: bool = True) -> str:
    """A step-N+1 release in A's store built with plain Git plumbing (no reef check), holding A's head tree plus
    `extra` ({path: (bytes, filemode)}), pushed over the remote's scenario ref."""
    repo = pygit2.Repository(str(a / ".reef" / "git"))
    ref = "refs/reef/scenarios/default"
    head = repo.references[ref].peel()
    rel = json.loads(next(ln for ln in head.message.splitlines() if ln.startswith("reef-release: "))[14:])

    gd = str(a / ".reef" / "git")

    def plumb(*args: str, data: bytes = b"") -> str:  # `git mktree` takes names libgit2 refuses (.git): a forgery
        return subprocess.run(["git", "--git-dir", gd, *args], input=data, check=True,
                              capture_output=True).stdout.decode().strip()

    def put(tree: str | None, parts: list[str], blob: str, mode: int) -> str:
        entries = {}
        for line in (plumb("ls-tree", tree).splitlines() if tree else []):
            entries[line.split("\t", 1)[1]] = line
        name = parts[0]
        if len(parts) == 1 and blob is None:
            entries.pop(name)
        elif len(parts) == 1:
            entries[name] = f"{mode:o} blob {blob}\t{name}"
        else:
            old = entries.get(name)
            sub = old.split()[2] if old and old.split()[1] == "tree" else None
            entries[name] = f"040000 tree {put(sub, parts[1:], blob, mode)}\t{name}"
        return plumb("mktree", data=("\n".join(entries.values()) + "\n").encode())

    tree = str(head.tree.id)
    for path, (data, mode) in extra.items():
        blob = None if data is None else plumb("hash-object", "-w", "--stdin", data=data)
        tree = put(tree, path.split("/"), blob, mode)
    tree = repo[tree]
    new = dict(rel, content_id=str(tree.id), parent_release_id=rel["release_id"], release_id=FORGED,
               step=rel["step"] + 1, operation="publish", reason="tidy")
    sig = pygit2.Signature("x", "x@x")
    c = repo.create_commit(None, sig, sig, "publish: tidy\n\nreef-release: " + json.dumps(new, sort_keys=True) + "\n",
                           tree.id, [head.id])
    if push:
        repo.references.create(ref, c, force=True)
        git("--git-dir", str(a / ".reef" / "git"), "push", "-q", "-f", str(bare), f"{ref}:{ref}", cwd=a)
    return str(c)


@pytest.fixture
def pair(tmp_path, reef):
    """A (reef project, pushed) and B (a Git clone that pulled A's step 1)."""
    bare = tmp_path / "remote.git"
    pygit2.init_repository(str(bare), bare=True)
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        git("init", "-q", cwd=d)
    ok(reef("-C", str(a), "init", "--template", "claude"))
    ok(reef("-C", str(a), "remote", "add", "origin", str(bare)))
    ok(reef("-C", str(a), "push"))
    git("remote", "add", "origin", str(bare), cwd=b)
    ok(reef("-C", str(b), "pull"))
    return tmp_path, bare, a, b


HOOK = b"#!/bin/sh\necho PWNED > pwned\n"
EXEC, BLOB, LINK = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE, pygit2.GIT_FILEMODE_BLOB, pygit2.GIT_FILEMODE_LINK


@pytest.mark.parametrize("extra, path, why", [
    ({".git/hooks/pre-commit": (HOOK, EXEC)}, ".git/hooks/pre-commit", "lies inside a '.git' directory"),
    ({".GIT/hooks/pre-commit": (HOOK, EXEC)}, ".GIT/hooks/pre-commit", "lies inside a '.GIT' directory"),
    ({".claude/x/.git/config": (b"[core]\n", BLOB)}, ".claude/x/.git/config", "lies inside a '.git' directory"),
    ({".reef/project.json": (b"{}", BLOB)}, ".reef/project.json", "lies inside a '.reef' directory"),
    ({"conftest.py": (b"import os\n", BLOB)}, "conftest.py",
     "is outside the include globs of harness.yaml of your head release (step 1)"),
    ({"CLAUDE.local.md": (b"/etc/passwd", LINK)}, "CLAUDE.local.md",
     "is a symlink to '/etc/passwd' outside the harness"),
    ({".claude/rules/x.md": (b"../../../secret", LINK)}, ".claude/rules/x.md",
     "is a symlink to '../../../secret' outside the harness"),
])
def test_pull_refuses_a_forged_release_and_writes_nothing(reef, pair, extra, path, why):
    _, bare, a, b = pair
    forge(a, bare, extra)
    before = log_bytes(b)
    ref_before = git("--git-dir", str(b / ".reef" / "git"), "rev-parse", "refs/reef/scenarios/default", cwd=b)
    r = reef("-C", str(b), "pull")
    assert r.code == 4, (r.out, r.err)
    assert r.err.strip() == (f"reef: error: release {FORGED} (step 2) from remote 'origin' holds '{path}', which "
                             f"{why}; nothing of scenario 'default' was pulled")
    assert log_bytes(b) == before
    assert git("--git-dir", str(b / ".reef" / "git"), "rev-parse", "refs/reef/scenarios/default", cwd=b) == ref_before
    assert (path.startswith(".reef") or not os.path.lexists(b / path)) and not (b / ".git" / "hooks" / "pre-commit").exists()
    assert not (b / ".GIT").exists() and not (b / "conftest.py").exists()
    assert json.loads((b / ".reef" / "project.json").read_text()) != {}
    r = ok(reef("-C", str(b), "status"))
    assert "harness clean" in r.out


def test_a_forged_harness_yaml_cannot_widen_what_a_pull_writes(reef, pair):
    _, bare, a, b = pair
    cfg = (a / "harness.yaml").read_text().replace("include:\n", "include:\n  - '**'\n")
    forge(a, bare, {"harness.yaml": (cfg.encode(), BLOB), "conftest.py": (b"x = 1\n", BLOB)})
    r = reef("-C", str(b), "pull")
    assert r.code == 4
    assert r.err.strip() == (f"reef: error: release {FORGED} (step 2) from remote 'origin' widens harness.yaml's "
                             "include with '**', beyond harness.yaml of your head release (step 1); reef takes a "
                             "wider harness only from your own harness.yaml — nothing of scenario 'default' was pulled")
    assert not (b / "conftest.py").exists() and "'**'" not in (b / "harness.yaml").read_text()


def test_a_release_without_harness_yaml_is_refused(reef, pair):
    """Without its harness.yaml nothing would say what it may hold: refused, not waved through."""
    _, bare, a, b = pair
    forge(a, bare, {"harness.yaml": (None, BLOB), "conftest.py": (b"x = 1\n", BLOB)})
    r = reef("-C", str(b), "pull")
    assert r.code == 4
    assert r.err.strip() == (f"reef: error: release {FORGED} (step 2) from remote 'origin' holds no harness.yaml; "
                             "nothing of scenario 'default' was pulled")
    assert not (b / "conftest.py").exists() and (b / "harness.yaml").exists()


def test_a_fresh_clone_refuses_a_git_hook_in_the_chain(reef, tmp_path, pair):
    _, bare, a, _ = pair
    forge(a, bare, {".git/hooks/pre-commit": (HOOK, EXEC)})
    c = tmp_path / "c"
    c.mkdir()
    git("init", "-q", cwd=c)
    git("remote", "add", "origin", str(bare), cwd=c)
    r = reef("-C", str(c), "pull")
    assert r.code == 4 and f"holds '.git/hooks/pre-commit', which lies inside a '.git' directory" in r.err
    assert not (c / ".git" / "hooks" / "pre-commit").exists() and not (c / "CLAUDE.md").exists()


def test_merge_refuses_a_forged_diverged_chain(reef, pair):
    _, bare, a, b = pair
    (b / "CLAUDE.md").write_text((b / "CLAUDE.md").read_text() + "\nB's line\n")
    ok(reef("-C", str(b), "publish", "-m", "b"))
    forge(a, bare, {".git/hooks/pre-commit": (HOOK, EXEC)})
    r = reef("-C", str(b), "pull")
    assert r.code == 3 and "diverged" in r.err
    before = log_bytes(b)
    r = reef("-C", str(b), "merge")
    assert r.code == 4
    assert r.err.strip() == (f"reef: error: release {FORGED} (step 2) from remote 'origin' holds "
                             "'.git/hooks/pre-commit', which lies inside a '.git' directory; nothing was merged")
    assert log_bytes(b) == before and not (b / ".git" / "hooks" / "pre-commit").exists()


def forged_into_chain(a: Path, bare: Path) -> None:
    """A forged release put straight into a's chain, as a pull made before pulls were checked would have left it."""
    from reef_cli.project import Project
    from reef_cli.remote import release_of_commit
    from reef_cli.store import HarnessStore

    commit = forge(a, bare, {".git/hooks/pre-commit": (HOOK, EXEC)}, push=False)
    store = HarnessStore(Project(a), "default")
    release, _ = release_of_commit(store.git, commit)
    store.log.append(release)
    store.git.set_ref(store.ref, commit)


def test_checkout_refuses_a_forged_release_already_in_the_chain(reef, pair, tmp_path):
    """A chain pulled before pull checked releases may hold one: checkout writes none of it."""
    _, bare, a, _ = pair
    forged_into_chain(a, bare)
    dest = tmp_path / "out"
    r = reef("-C", str(a), "checkout", "HEAD", str(dest))
    assert r.code == 4
    assert r.err.strip() == (f"reef: error: release {FORGED} (step 2) holds '.git/hooks/pre-commit', which lies "
                             f"inside a '.git' directory; nothing was written to {dest}")
    assert not dest.exists()


def test_publish_from_git_refuses_a_link_leaving_the_harness(reef, tmp_path):
    p = tmp_path / "p"
    p.mkdir()
    git("init", "-q", cwd=p)
    ok(reef("-C", str(p), "init", "--template", "claude"))
    git("add", "-A", cwd=p)
    git("commit", "-qm", "v1", cwd=p)
    secret = tmp_path / "secret"
    secret.write_text("key\n")
    (p / ".claude" / "rules").mkdir(exist_ok=True)
    os.symlink(secret, p / ".claude" / "rules" / "leak.md")
    git("add", "-A", cwd=p)
    git("commit", "-qm", "link", cwd=p)
    before = log_bytes(p)
    r = reef("-C", str(p), "publish", "--from-git", "HEAD")
    assert r.code == 4
    head = git("rev-parse", "HEAD", cwd=p).strip()
    assert r.err.strip() == (f"reef: error: --from-git HEAD ({head[:12]}) holds '.claude/rules/leak.md', which is a "
                             f"symlink to '{secret}' outside the harness; nothing was published")
    assert log_bytes(p) == before


@pytest.mark.parametrize("rel", [".git/x", "a/.GIT/x", ".git./x", "GIT~1/config", ".g\u200cit/x", ".reef/x",
                                 "a/../b", "/abs", "a//b", ".Reef"])
def test_paths_no_release_may_hold(rel):
    assert path_problem(rel) is not None


@pytest.mark.parametrize("rel, target, fine", [
    ("a/b/up", "..", True),
    ("a/b/y", "up/../..", False),  # `up` may itself be a link pointing up: .. after a name is refused
    ("x", "..", False),
    ("a/x", "../CLAUDE.md", True),
    ("x", ".git/config", False),
    ("x", "/etc/passwd", False),
    ("a/x", "b/c", True),
])
def test_links_a_release_may_hold(rel, target, fine):
    assert (link_problem(rel, target) is None) is fine


def test_rollback_to_a_forged_release_already_in_the_chain_publishes_nothing(reef, pair):
    _, bare, a, _ = pair
    forged_into_chain(a, bare)
    with open(a / "CLAUDE.md", "a") as f:
        f.write("- a later rule\n")
    ok(reef("-C", str(a), "publish", "-m", "step 3"))
    before = log_bytes(a)
    r = reef("-C", str(a), "rollback", "2")
    assert r.code == 4
    assert r.err.strip() == (f"reef: error: release {FORGED} (step 2) holds '.git/hooks/pre-commit', which lies "
                             "inside a '.git' directory; nothing was published")
    assert log_bytes(a) == before and not (a / ".git" / "hooks" / "pre-commit").exists()
