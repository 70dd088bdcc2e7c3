"""The harness store through the CLI: init, status, publish by CAS, rollback, log/show/diff/checkout, zones."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_reef

REAL = Path(os.environ.get("REEF_SHARED", REPO.parent / "shared")) / "data" / "real-harnesses"


def init(reef, path: Path, *extra: str):
    r = reef("-C", str(path), "init", *extra)
    assert r.code == 0, r.err
    return r


def head(reef, path: Path) -> dict:
    r = reef("-C", str(path), "status", "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)["head"]


@pytest.mark.parametrize("template", ["claude", "agents", "minimal"])
def test_init_templates_publish_release_one(reef, tmp_path, template):
    r = init(reef, tmp_path, "--template", template, "--json")
    data = json.loads(r.out)
    assert data["created"] is True
    rel = data["release"]
    assert rel["step"] == 1 and rel["operation"] == "init" and rel["parent_release_id"] is None
    assert rel["runtime_load_id"] is None and rel["evidence"] == []
    assert len(rel["content_id"]) == 40
    assert (tmp_path / "harness.yaml").is_file()
    st = json.loads(reef("-C", str(tmp_path), "status", "--json").out)
    assert st["clean"] is True and st["ledger_path"].endswith("ledger.jsonl")


def test_init_is_idempotent(reef, tmp_path):
    first = json.loads(init(reef, tmp_path, "--json").out)["release"]
    again = init(reef, tmp_path, "--json")
    data = json.loads(again.out)
    assert data["created"] is False and data["release"] == first
    assert len(json.loads(reef("-C", str(tmp_path), "log", "--json").out)) == 1


def test_init_never_overwrites_user_files(reef, tmp_path):
    (tmp_path / "CLAUDE.md").write_text("mine\n")
    r = reef("-C", str(tmp_path), "init", "--template", "claude")
    assert r.code == 3
    assert "CLAUDE.md already exists" in r.err and r.err.startswith("reef: error: ")
    assert (tmp_path / "CLAUDE.md").read_text() == "mine\n"
    assert not (tmp_path / ".reef").exists() or not (tmp_path / ".reef" / "project.json").exists()


def test_unknown_template(reef, tmp_path):
    r = reef("-C", str(tmp_path), "init", "--template", "nope")
    assert r.code == 1 and "no harness template 'nope'" in r.err and "claude" in r.err


def test_status_shows_changes_with_zones_and_publish(reef, tmp_path):
    init(reef, tmp_path)
    (tmp_path / "CLAUDE.local.md").write_text("notes\n")
    skill = tmp_path / ".claude/skills/code-review/SKILL.md"
    skill.write_text(skill.read_text() + "\n4. Be kind.\n")
    (tmp_path / ".claude/rules/safety.md").unlink()
    (tmp_path / "unrelated.txt").write_text("not harness\n")
    st = json.loads(reef("-C", str(tmp_path), "status", "--json").out)
    changes = {c["path"]: (c["change"], c["zone"]) for c in st["changes"]}
    assert changes == {
        ".claude/rules/safety.md": ("deleted", "frozen"),
        ".claude/skills/code-review/SKILL.md": ("modified", "evolvable"),
        "CLAUDE.local.md": ("added", "learned"),
    }
    before = head(reef, tmp_path)
    r = reef("-C", str(tmp_path), "publish", "-m", "human edits", "--json")
    assert r.code == 0, r.err
    rel = json.loads(r.out)["release"]
    assert rel["step"] == 2 and rel["parent_release_id"] == before["release_id"] and rel["reason"] == "human edits"
    assert json.loads(reef("-C", str(tmp_path), "status", "--json").out)["clean"] is True
    r = reef("-C", str(tmp_path), "publish", "-m", "again")
    assert r.code == 0 and "nothing to publish" in r.out


def test_publish_expect_head_conflict(reef, tmp_path):
    init(reef, tmp_path)
    first = head(reef, tmp_path)["release_id"]
    (tmp_path / "CLAUDE.local.md").write_text("a\n")
    assert reef("-C", str(tmp_path), "publish", "-m", "a", "--expect-head", first).code == 0
    (tmp_path / "CLAUDE.local.md").write_text("b\n")
    r = reef("-C", str(tmp_path), "publish", "-m", "b", "--expect-head", first)
    assert r.code == 3
    assert first in r.err and "nothing was published" in r.err
    assert len(json.loads(reef("-C", str(tmp_path), "log", "--json").out)) == 2


RACE = r"""
import sys, time
from pathlib import Path
from reef_cli.project import Project
from reef_cli.store import HarnessStore
from reef_cli.gitstore import Entry
from reef_cli.errors import ConflictError
root, tag, go = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
store = HarnessStore(Project(root), "default")
head = store.head()
files = store.files_of(head)
files["CLAUDE.local.md"] = Entry(f"from {tag}\n".encode())
while time.time() < go:
    time.sleep(0.001)
try:
    r = store.publish(reason=tag, files=files, expected_head=head.release_id)
    print("WON", r.release.release_id)
except ConflictError as e:
    print("LOST", e)
    sys.exit(3)
"""


def test_two_processes_race_exactly_one_wins(reef, tmp_path):
    import time

    init(reef, tmp_path)
    script = tmp_path / "race.py"
    script.write_text(RACE)
    go = time.time() + 1.0  # both processes have read the same head before either commits
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), tag, str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for tag in ("p1", "p2")]
    outs = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    assert sorted(code for code, _, _ in outs) == [0, 3], outs
    loser = next(out for code, out, _ in outs if code == 3)
    assert "moved: expected rel_" in loser and "but it is rel_" in loser
    log = json.loads(reef("-C", str(tmp_path), "log", "--json").out)
    assert [r["step"] for r in log] == [2, 1]
    winner = next(out for code, out, _ in outs if code == 0).split()[1]
    assert log[0]["release_id"] == winner


def test_torn_tail_is_repaired_and_corruption_is_refused(reef, tmp_path):
    init(reef, tmp_path)
    log_path = tmp_path / ".reef/scenarios/default/releases.jsonl"
    good = log_path.read_bytes()
    with open(log_path, "ab") as f:
        f.write(b'{"release_id": "rel_torn", "ste')
    assert reef("-C", str(tmp_path), "log", "--json").code == 0
    (tmp_path / "CLAUDE.local.md").write_text("x\n")
    r = reef("-C", str(tmp_path), "publish", "-m", "after crash", "--json")
    assert r.code == 0, r.err
    lines = log_path.read_bytes().splitlines()
    assert len(lines) == 2 and lines[0] == good.rstrip(b"\n")
    assert json.loads(lines[1])["step"] == 2
    corrupted = b"{not json}\n" + log_path.read_bytes()
    log_path.write_bytes(corrupted)
    r = reef("-C", str(tmp_path), "log")
    assert r.code == 1 and "line 1 is corrupt" in r.err and str(log_path) in r.err
    (tmp_path / "CLAUDE.local.md").write_text("y\n")
    assert reef("-C", str(tmp_path), "publish", "-m", "refused").code == 1
    assert log_path.read_bytes() == corrupted


def test_rollback_through_a_symlinked_directory_publishes_nothing(reef, tmp_path):
    """`.claude` moved elsewhere and linked back: reef never writes through a symlink, so a rollback that must
    write under it used to be published first and then fail to write the tree (exit 4 with the new head already
    in the log, the files still the old head's). It now refuses before publishing."""
    init(reef, tmp_path)
    skill = tmp_path / ".claude" / "skills" / "two" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: two\ndescription: the second skill\n---\nDo two.\n")
    assert reef("-C", str(tmp_path), "publish", "-m", "two").code == 0
    before = head(reef, tmp_path)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-claude"
    (tmp_path / ".claude").rename(elsewhere)
    (tmp_path / ".claude").symlink_to(elsewhere)
    r = reef("-C", str(tmp_path), "rollback", "1", "--force")
    assert r.code == 4 and r.err.strip() == (f"reef: error: cannot roll back: {tmp_path / '.claude'} is a symlink; "
                                             f"reef never writes through symlinks (nothing was published)")
    assert json.loads(reef("-C", str(tmp_path), "log", "--json").out)[0]["release_id"] == before["release_id"]
    assert (elsewhere / "skills" / "two" / "SKILL.md").read_text().endswith("Do two.\n")


def test_rollback_republishes_and_restores_worktree(reef, tmp_path):
    init(reef, tmp_path)
    one = head(reef, tmp_path)
    (tmp_path / "CLAUDE.local.md").write_text("learned a bad thing\n")
    reef("-C", str(tmp_path), "publish", "-m", "two")
    r = reef("-C", str(tmp_path), "rollback", "1", "--json")
    assert r.code == 0, r.err
    rel = json.loads(r.out)["release"]
    assert rel["step"] == 3 and rel["operation"] == "rollback" and rel["content_id"] == one["content_id"]
    assert rel["meta"]["rollback_target_release_id"] == one["release_id"]
    assert not (tmp_path / "CLAUDE.local.md").exists()
    assert json.loads(reef("-C", str(tmp_path), "status", "--json").out)["clean"] is True
    r = reef("-C", str(tmp_path), "rollback", one["release_id"])
    assert r.code == 0 and "nothing to do" in r.out
    r = reef("-C", str(tmp_path), "rollback", "99")
    assert r.code == 1 and "release step 99 does not exist" in r.err
    shown = json.loads(reef("-C", str(tmp_path), "show", "HEAD~1", "--json").out)
    assert shown["step"] == 2 and json.loads(reef("-C", str(tmp_path), "show", "head", "--json").out)["step"] == 3
    r = reef("-C", str(tmp_path), "show", "HEAD~3")
    assert r.code == 1 and "'HEAD~3' does not exist" in r.err


def test_rollback_refuses_dirty_worktree(reef, tmp_path):
    init(reef, tmp_path)
    (tmp_path / "CLAUDE.local.md").write_text("a\n")
    reef("-C", str(tmp_path), "publish", "-m", "two")
    (tmp_path / "CLAUDE.local.md").write_text("unpublished\n")
    r = reef("-C", str(tmp_path), "rollback", "1")
    assert r.code == 3 and "unpublished changes (CLAUDE.local.md)" in r.err
    assert (tmp_path / "CLAUDE.local.md").read_text() == "unpublished\n"


def test_scenario_recipe_binding_conflict(reef, tmp_path):
    init(reef, tmp_path, "--scenario", "alpha", "--recipe", "harness-curate")
    r = reef("-C", str(tmp_path), "init", "--scenario", "alpha", "--recipe", "harness-review")
    assert r.code == 3 and "bound to recipe 'harness-curate'" in r.err
    r = reef("-C", str(tmp_path), "init", "--scenario", "beta", "--recipe", "harness-review", "--json")
    assert r.code == 0 and json.loads(r.out)["recipe"] == "harness-review"
    r = reef("-C", str(tmp_path), "init", "--scenario", "delta", "--recipe", "nope")
    assert r.code == 4 and "unknown recipe 'nope'" in r.err and "harness-curate" in r.err
    r = reef("-C", str(tmp_path), "--scenario", "gamma", "status")
    assert r.code == 1 and "scenario 'gamma' does not exist" in r.err and "alpha" in r.err
    r = reef("-C", str(tmp_path), "--scenario", "Bad Name", "status")
    assert r.code == 4 and "scenario name 'Bad Name' is invalid" in r.err


def test_log_show_diff_checkout(reef, tmp_path):
    init(reef, tmp_path)
    (tmp_path / "CLAUDE.local.md").write_text("hello\n")
    reef("-C", str(tmp_path), "publish", "-m", "notes")
    log = json.loads(reef("-C", str(tmp_path), "log", "--json").out)
    assert [r["step"] for r in log] == [2, 1]
    rid = log[0]["release_id"]
    k = next(k for k in range(8, len(rid) + 1) if sum(r["release_id"].startswith(rid[:k]) for r in log) == 1)
    shown = json.loads(reef("-C", str(tmp_path), "show", rid[:k].lower(), "--json").out)
    assert shown["release_id"] == log[0]["release_id"] and "CLAUDE.local.md" in shown["files"]
    d = reef("-C", str(tmp_path), "diff", "1", "2")
    assert "--- /dev/null" in d.out and "+++ b/CLAUDE.local.md" in d.out and "+hello" in d.out
    out = tmp_path / "out"
    assert reef("-C", str(tmp_path), "checkout", "1", str(out)).code == 0
    for p in (tmp_path / "harness.yaml", tmp_path / "CLAUDE.md", tmp_path / ".claude/settings.json"):
        assert (out / p.relative_to(tmp_path)).read_bytes() == p.read_bytes()
    assert not (out / "CLAUDE.local.md").exists()
    table = reef("-C", str(tmp_path), "log")
    assert table.code == 0 and "notes" in table.out


def test_diff_shows_a_harness_files_terminal_escapes_escaped(reef, tmp_path):
    """`reef diff` wrote a file's bytes to the terminal raw: an OSC title or a clear-screen in a bullet was obeyed
    (other listings escape them). Tabs and line ends stay as they are."""
    init(reef, tmp_path)
    (tmp_path / "CLAUDE.local.md").write_text("- Run \x1b]0;PWNED\x07\x1b[31mRED\r\n\tindented\n")
    assert reef("-C", str(tmp_path), "publish", "-m", "notes").code == 0
    d = reef("-C", str(tmp_path), "diff", "1", "2")
    assert d.code == 0 and "\x1b" not in d.out
    assert "+- Run \\x1b]0;PWNED\\x07\\x1b[31mRED\r\n+\tindented\n" in d.out


def test_checkout_refuses_to_write_through_symlinks(reef, tmp_path):
    proj = tmp_path / "p"
    proj.mkdir()
    init(reef, proj)
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / ".claude").symlink_to(outside)
    r = reef("-C", str(proj), "checkout", "1", str(dest))
    assert r.code == 4 and "symlink" in r.err and ".claude" in r.err
    assert list(outside.iterdir()) == []
    dest2 = tmp_path / "dest2"
    dest2.mkdir()
    (dest2 / "CLAUDE.md").symlink_to(outside / "victim.md")
    r = reef("-C", str(proj), "checkout", "1", str(dest2))
    assert r.code == 4 and not (outside / "victim.md").exists()


def test_not_a_project(reef, tmp_path):
    r = reef("-C", str(tmp_path), "status")
    assert r.code == 1 and "not a reef project" in r.err and "reef init" in r.err


def test_project_found_from_subdirectory(reef, tmp_path):
    init(reef, tmp_path)
    sub = tmp_path / "src" / "deep"
    sub.mkdir(parents=True)
    r = reef("status", "--json", cwd=sub)
    assert r.code == 0 and json.loads(r.out)["project"] == str(tmp_path)


def test_invalid_harness_yaml_names_field_and_line(reef, tmp_path):
    init(reef, tmp_path)
    cfg = tmp_path / "harness.yaml"
    cfg.write_text(cfg.read_text().replace("max_bullets: 20", "max_bullets: lots"))
    r = reef("-C", str(tmp_path), "publish", "-m", "bad")
    assert r.code == 4
    line = next(i for i, l in enumerate(cfg.read_text().splitlines(), 1) if "max_bullets" in l)
    assert f"line {line}" in r.err and "budgets.max_bullets" in r.err and "Traceback" not in r.err
    cfg.write_text("version: 1\ninclude: [a\n")
    r = reef("-C", str(tmp_path), "status")
    assert r.code == 4 and "invalid YAML" in r.err


def test_freeze_and_unfreeze_are_releases_and_keep_comments(reef, tmp_path):
    init(reef, tmp_path)
    r = reef("-C", str(tmp_path), "harness", "zone", ".claude/skills/code-review/SKILL.md", "--json")
    assert json.loads(r.out)[0]["zone"] == "evolvable"
    r = reef("-C", str(tmp_path), "harness", "freeze", ".claude/skills/code-review/**", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["release"]["operation"] == "freeze"
    r = reef("-C", str(tmp_path), "harness", "zone", ".claude/skills/code-review/SKILL.md", "--json")
    assert json.loads(r.out)[0] | {"reason": ""} == {"path": ".claude/skills/code-review/SKILL.md", "normalized": ".claude/skills/code-review/SKILL.md",
                                                      "zone": "frozen", "automatic_write": "blocked", "reason": ""}
    text = (tmp_path / "harness.yaml").read_text()
    assert "# the human's rules, permissions and hooks" in text
    r = reef("-C", str(tmp_path), "harness", "unfreeze", ".claude/skills/code-review/**", "--to", "evolvable", "--json")
    assert json.loads(r.out)["release"]["operation"] == "unfreeze"
    log = json.loads(reef("-C", str(tmp_path), "log", "--json").out)
    assert [r["operation"] for r in log] == ["unfreeze", "freeze", "init"]
    assert json.loads(reef("-C", str(tmp_path), "status", "--json").out)["clean"] is True


def _copy_real(name: str, dest: Path) -> Path:
    src = REAL / name
    shutil.copytree(src, dest / name)
    return dest / name


@pytest.mark.skipif(not REAL.is_dir(), reason="shared/data/real-harnesses not present")
@pytest.mark.parametrize("name", sorted(p.name for p in REAL.iterdir() if p.is_dir()) if REAL.is_dir() else [])
def test_import_every_real_harness(reef, tmp_path, name):
    src = _copy_real(name, tmp_path / "src")
    proj = tmp_path / "proj"
    proj.mkdir()
    r = reef("-C", str(proj), "init", "--import", str(src), "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    rel = data["release"]
    show = json.loads(reef("-C", str(proj), "show", rel["release_id"], "--json").out)
    harness_like = [p for p in (str(f.relative_to(src)) for f in src.rglob("*") if f.is_file())
                    if p.endswith(("CLAUDE.md", "AGENTS.md", "SKILL.md")) or "/.claude/" in f"/{p}"]
    for p in harness_like:
        assert p in show["files"], p
        assert (proj / p).read_bytes() == (src / p).read_bytes()
    assert json.loads(reef("-C", str(proj), "status", "--json").out)["clean"] is True
    # in-place adoption gives the same files
    r2 = reef("-C", str(src), "init", "--import", ".", "--json")
    assert r2.code == 0, r2.err
    assert json.loads(r2.out)["release"]["content_id"] == rel["content_id"]


@pytest.mark.skipif(not REAL.is_dir(), reason="shared/data/real-harnesses not present")
def test_import_warns_about_broken_frontmatter(reef, tmp_path):
    src = _copy_real("badlogic__pi-mono", tmp_path)
    proj = tmp_path / "proj"
    proj.mkdir()
    data = json.loads(reef("-C", str(proj), "init", "--import", str(src), "--json").out)
    warned = "\n".join(data["warnings"])
    assert "invalid-yaml/SKILL.md" in warned and "no-frontmatter/SKILL.md" in warned


def test_installed_console_script_runs(tmp_path):
    r = run_reef("init", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_reef("status", cwd=tmp_path)
    assert r.returncode == 0 and "harness clean" in r.stdout
    r = run_reef("rollback", cwd=tmp_path)
    assert r.returncode == 2 and "Missing argument" in r.stderr


def test_incremental_tree_equals_full_tree(tmp_path):
    """Publishing reuses unchanged subtrees; the content id must equal hashing the whole tree from scratch."""
    import random

    from reef_cli.gitstore import Entry, GitStore

    git = GitStore(tmp_path / "git")
    rng = random.Random(7)
    names = ["a.md", "b/c.md", "b/d/e.md", "b/d/f.md", "g/h/i/j.md", "k", "b/x.sh"]
    files = {n: Entry(f"{n} v0\n".encode()) for n in names}
    tree = git.write_tree(files)
    for step in range(60):
        changes: dict = {}
        for n in rng.sample(names + [f"new/{step}/n.md"], 3):
            if n in files and rng.random() < 0.3:
                changes[n] = None
            else:
                changes[n] = Entry(f"{n} v{step}\n".encode(), 0o100755 if n.endswith(".sh") else 0o100644)
        for n, e in changes.items():
            if e is None:
                files.pop(n, None)
            else:
                files[n] = e
        tree = git.update_tree(tree, changes)
        assert tree == git.write_tree(files), step
        assert git.read_tree(tree) == files
    assert sorted(git.blob_ids(tree)) == sorted(files)


def test_a_tree_id_is_hashed_in_memory_as_write_tree_would_and_writes_nothing(tmp_path):
    """The gate names a candidate by tree id; computing it wrote the candidate's blobs (a secret included) into
    .reef/git although nothing was published. Names that sort differently as a directory ("a/" after "a.b", "a-")
    and every mode check the ordering and the entry format against pygit2's own."""
    from reef_cli.gitstore import MODE_EXEC, MODE_LINK, Entry, GitStore, tree_id

    files = {"a.b": Entry(b"1\n"), "a/x": Entry(b"2\n"), "a-": Entry(b"3\n"), "a/b/c.sh": Entry(b"#!", MODE_EXEC),
             "z": Entry(b"a.b", MODE_LINK), "\u00e9t\u00e9.md": Entry(b""), "b/a/a": Entry(b"4"), "b/a.": Entry(b"5")}
    git = GitStore(tmp_path / "git")
    assert tree_id({}) == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    ids = [tree_id(files), tree_id({"a.md": Entry(b"ghp_" + b"w" * 36)})]
    assert not [p for p in (tmp_path / "git" / "objects").rglob("*") if p.is_file()]  # nothing written
    assert ids == [git.write_tree(files), git.write_tree({"a.md": Entry(b"ghp_" + b"w" * 36)})]


def test_a_missing_tree_is_a_store_error(tmp_path):
    from reef_cli.errors import StoreError
    from reef_cli.gitstore import GitStore

    git = GitStore(tmp_path / "git")
    for read in (git.read_tree, git.blob_ids):
        with pytest.raises(StoreError, match="is missing from reef's object store"):
            read("0" * 40)


def test_stat_cache_never_hides_a_change(tmp_path):
    """The working-tree stat cache reuses only old, unchanged files: a same-size rewrite is always seen."""
    import os as _os

    from reef_cli.harness_files import collect_files

    fresh, old = tmp_path / "a.md", tmp_path / "b.md"
    fresh.write_text("one\n")
    old.write_text("old\n")
    _os.utime(old, (1_000_000_000, 1_000_000_000))
    cache: dict = {}
    first = collect_files(tmp_path, ("*.md",), stat_cache=cache)
    reads = []
    real_open = open

    def counting_open(path, *a, **k):
        reads.append(_os.path.basename(path))
        return real_open(path, *a, **k)

    import builtins

    builtins.open, saved = counting_open, builtins.open
    try:
        fresh.write_text("two\n")  # same size, likely the same mtime tick: racy, so it must be re-read
        second = collect_files(tmp_path, ("*.md",), stat_cache=cache)
        old.write_text("older\n")  # an old file that changed size is re-read too
        third = collect_files(tmp_path, ("*.md",), stat_cache=cache)
    finally:
        builtins.open = saved
    assert first["a.md"].data == b"one\n" and second["a.md"].data == b"two\n"
    assert second["b.md"].data == b"old\n" and third["b.md"].data == b"older\n"
    assert sorted(reads) == ["a.md", "a.md", "b.md"]  # the unchanged old file came from the cache once


def test_directory_cache_sees_added_removed_and_retyped_entries(tmp_path):
    """Old directories are not re-listed while their mtime and inode hold; anything that changes an entry's name
    changes that mtime, and an entry whose type changed behind a forged mtime makes its directory be listed again."""
    import os as _os

    from reef_cli.harness_files import collect_files

    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    (sub / "one.md").write_text("1\n")
    (tmp_path / "top.md").write_text("t\n")
    (tmp_path / "skip.txt").write_text("not included\n")
    hour_ago = 1_000_000_000
    for path in (sub / "one.md", tmp_path / "top.md", sub, sub.parent, tmp_path):
        _os.utime(path, (hour_ago, hour_ago))
    cache: dict = {}
    assert set(collect_files(tmp_path, ("**/*.md",), stat_cache=cache)) == {"a/b/one.md", "top.md"}
    assert {key[1] for key in cache if isinstance(key, tuple)} == {"", "a/", "a/b/"}  # all three listings kept
    scans = []
    real_scandir = _os.scandir

    def counting_scandir(path):
        scans.append(_os.path.relpath(path, tmp_path))
        return real_scandir(path)

    _os.scandir = counting_scandir
    try:
        assert set(collect_files(tmp_path, ("**/*.md",), stat_cache=cache)) == {"a/b/one.md", "top.md"}
        assert scans == []  # nothing re-listed
        (sub / "two.md").write_text("2\n")  # moves a/b's mtime
        (tmp_path / "top.md").unlink()  # moves the root's
        assert set(collect_files(tmp_path, ("**/*.md",), stat_cache=cache)) == {"a/b/one.md", "a/b/two.md"}
        assert sorted(scans) == [".", "a/b"]
        for path in (sub, tmp_path):
            _os.utime(path, (hour_ago, hour_ago))
        collect_files(tmp_path, ("**/*.md",), stat_cache=cache)  # cache the forged-old listings
        (sub / "one.md").unlink()
        (sub / "one.md").mkdir()
        (sub / "one.md" / "inner.md").write_text("i\n")
        _os.utime(sub, (hour_ago, hour_ago))  # the listing of a/b looks unchanged, but one.md is a directory now
        scans.clear()
        assert set(collect_files(tmp_path, ("**/*.md",), stat_cache=cache)) == {"a/b/one.md/inner.md", "a/b/two.md"}
        assert "a/b" in scans
    finally:
        _os.scandir = real_scandir


def test_a_ref_left_behind_by_a_crash_is_repaired_by_the_next_publish(reef, tmp_path):
    """The release log is the commit point; the Git ref is derived and catches up, even on a no-op publish."""
    from reef_cli.gitstore import GitStore

    init(reef, tmp_path)
    (tmp_path / "CLAUDE.local.md").write_text("a\n")
    reef("-C", str(tmp_path), "publish", "-m", "two")
    log = json.loads(reef("-C", str(tmp_path), "log", "--json").out)
    ref = "refs/reef/scenarios/default"
    GitStore(tmp_path / ".reef" / "git").set_ref(ref, log[1]["commit_id"])  # died after the log line, before the ref
    r = reef("-C", str(tmp_path), "publish", "-m", "nothing new")
    assert r.code == 0 and "nothing to publish" in r.out
    assert GitStore(tmp_path / ".reef" / "git").get_ref(ref) == log[0]["commit_id"]


def test_a_users_file_is_replaced_by_rename_and_an_edit_saved_after_the_check_is_kept(tmp_path):
    """rv-attack: `reef checkout` checked every path, then truncated each file in place: an edit saved between the
    check and the write was lost, and a kill mid-write left a cut file. Now the write is staged beside the file,
    compared with what the check saw, and renamed over it."""
    from reef_cli.errors import ConflictError
    from reef_cli.gitstore import Entry
    from reef_cli.harness_files import write_files

    dest = tmp_path / "co"
    dest.mkdir()
    (dest / "CLAUDE.md").write_bytes(b"your edit, saved after the check\n")
    with pytest.raises(ConflictError, match="CLAUDE.md changed while reef was writing it"):
        write_files(dest, {"CLAUDE.md": Entry(b"release\n")}, expected={"CLAUDE.md": b"what the check saw\n"})
    assert (dest / "CLAUDE.md").read_bytes() == b"your edit, saved after the check\n"
    assert sorted(p.name for p in dest.iterdir()) == ["CLAUDE.md"]  # no staged copy left behind

    inode = os.stat(dest / "CLAUDE.md").st_ino
    write_files(dest, {"CLAUDE.md": Entry(b"release\n")}, expected={"CLAUDE.md": b"your edit, saved after the check\n"})
    assert (dest / "CLAUDE.md").read_bytes() == b"release\n"
    assert os.stat(dest / "CLAUDE.md").st_ino != inode  # a rename, not a truncate in place


def test_checkout_keeps_a_private_files_mode(tmp_path):
    """A CLAUDE.md the user keeps private (0600) came back 0644 from `reef checkout`/rollback: the staged copy got a
    fixed mode. An existing file keeps its bits (durable.kept_mode); x follows the release."""
    import stat

    from reef_cli.gitstore import MODE_EXEC, Entry
    from reef_cli.store import write_files

    dest = tmp_path / "co"
    dest.mkdir()
    (dest / "CLAUDE.md").write_bytes(b"mine\n")
    (dest / "CLAUDE.md").chmod(0o600)
    (dest / "run.sh").write_bytes(b"mine\n")
    (dest / "run.sh").chmod(0o640)
    write_files(dest, {"CLAUDE.md": Entry(b"release\n"), "run.sh": Entry(b"#!/bin/sh\n", MODE_EXEC)},
                expected={"CLAUDE.md": b"mine\n", "run.sh": b"mine\n"})
    assert (dest / "CLAUDE.md").read_bytes() == b"release\n"
    assert stat.S_IMODE((dest / "CLAUDE.md").stat().st_mode) == 0o600
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o750


def test_a_directory_where_the_staged_copy_goes_is_named_not_a_crash(tmp_path):
    """rv-attack: a directory named like reef's staged copy (`.CLAUDE.md.reef-tmp`) is refused with exit 4."""
    from reef_cli.errors import InvalidInput
    from reef_cli.gitstore import Entry
    from reef_cli.harness_files import write_files

    dest = tmp_path / "co"
    (dest / ".CLAUDE.md.reef-tmp").mkdir(parents=True)
    (dest / "CLAUDE.md").write_bytes(b"mine\n")
    with pytest.raises(InvalidInput, match=r"\.CLAUDE\.md\.reef-tmp is in the way .* move it away"):
        write_files(dest, {"CLAUDE.md": Entry(b"release\n")}, expected={"CLAUDE.md": b"mine\n"})
    assert (dest / "CLAUDE.md").read_bytes() == b"mine\n"


def test_rollback_keeps_an_edit_saved_after_its_clean_tree_check(reef, tmp_path):
    """rv-attack: `reef rollback` checked the tree clean, published, then rewrote the files: an edit saved in
    between was overwritten. The guarded sync keeps it and names it (exit 3); the other files are written."""
    from reef_cli.errors import ConflictError
    from reef_cli.gitstore import Entry
    from reef_cli.project import Project
    from reef_cli.store import HarnessStore

    assert reef("-C", str(tmp_path), "init", "--template", "claude").code == 0
    store = HarnessStore(Project(tmp_path), "default")
    old = store.files_of(store.head())
    new = dict(old)
    new["CLAUDE.md"] = Entry(b"rolled back\n")
    new["CLAUDE.local.md"] = Entry(b"new file\n")
    (tmp_path / "CLAUDE.md").write_bytes(b"my edit, saved after the check\n")
    with pytest.raises(ConflictError, match=r"CLAUDE\.md changed while reef was writing the working tree"):
        store.sync_worktree(old, new, guard=True)
    assert (tmp_path / "CLAUDE.md").read_bytes() == b"my edit, saved after the check\n"
    assert (tmp_path / "CLAUDE.local.md").read_bytes() == b"new file\n"
    store.sync_worktree(old, new)  # unguarded (--force): replaced as before
    assert (tmp_path / "CLAUDE.md").read_bytes() == b"rolled back\n"


@pytest.mark.parametrize("damage", ["link-inside", "directory"])
def test_rollback_over_a_symlinked_or_replaced_file_publishes_nothing(reef, tmp_path, damage):
    """CLAUDE.md a symlink (to a file in the project) or a directory: rollback --force published the rollback, then
    refused to write it (exit 4, the tree still the old head's)."""
    init(reef, tmp_path)
    claude = tmp_path / "CLAUDE.md"
    claude.write_text(claude.read_text() + "- two\n")
    assert reef("-C", str(tmp_path), "publish", "-m", "two").code == 0
    before = json.loads(reef("-C", str(tmp_path), "log", "--json").out)[0]["release_id"]
    if damage == "link-inside":
        claude.rename(tmp_path / "real.md")
        claude.symlink_to("real.md")
        why = "is a symlink; reef never writes through symlinks"
    else:
        claude.unlink()
        claude.mkdir()
        why = "is a directory; reef writes a file there"
    r = reef("-C", str(tmp_path), "rollback", "1", "--force")
    assert r.code == 4 and r.err.strip() == f"reef: error: cannot roll back: {claude} {why} (nothing was published)"
    assert json.loads(reef("-C", str(tmp_path), "log", "--json").out)[0]["release_id"] == before
