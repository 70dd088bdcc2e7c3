"""Bad input and faults end as one line and the right exit code, never "unexpected error": feedback, zones,
checkout, install, a malformed model URL, a read-only or damaged .reef, and releases that would break later
commands. Each test pins the message and the exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import reef_exe, reef_init, run_reef


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    return root


def head_step(root: Path) -> int:
    lines = (root / ".reef/scenarios/default/releases.jsonl").read_text().splitlines()
    return len([ln for ln in lines if ln.strip()])


def records(root: Path, kind: str) -> list:
    from reef_cli.ledger import Ledger

    return list(Ledger(root / ".reef/scenarios/default/ledger.jsonl", "default").iter_records(kind=kind))


def receipt(root: Path) -> str:
    r = run_reef("run", "--", "true", cwd=root, env={"REEF_SESSION": "errors"})
    assert r.returncode == 0, r.stderr
    return r.stderr.split("receipt ")[1].split()[0]


# ------------------------------------------------------------------------------------------------ feedback


def test_feedback_that_is_not_utf8_is_one_line(project):
    rid = receipt(project)
    r = subprocess.run([reef_exe(), "report", "--score", "1", "--receipt", rid, "--feedback", b"a\xffb"],
                       cwd=project, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (4, "reef: error: --feedback: not valid UTF-8 text\n")
    assert records(project, "report") == []


@pytest.mark.parametrize("make, message", [
    (lambda p: p.mkdir(), "is a directory, not a JSON file"),
    (lambda p: p.write_text("[" * 5000 + "]" * 5000), "nested more than 16 levels deep"),
    (lambda p: p.write_text(json.dumps({"a": [[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]})),
     "nested more than 16 levels deep"),
    (lambda p: p.write_text(json.dumps({"lesson": "x" * 70000})), "larger than the 65536-byte limit for feedback"),
    (lambda p: p.write_bytes(b'{"lesson": "\xff"}'), "not UTF-8 text"),
])
def test_bad_feedback_json_is_one_line(reef, project, make, message):
    rid = receipt(project)
    make(project / "fb.json")
    r = reef("-C", str(project), "report", "--score", "1", "--receipt", rid, "--feedback-json", "fb.json")
    assert (r.code, r.err) == (4, f"reef: error: --feedback-json {project / 'fb.json'}: {message}\n")
    assert records(project, "report") == []


def test_feedback_loses_its_nul_bytes(reef, project):
    rid = receipt(project)
    (project / "fb.json").write_text(json.dumps({"lesson": "run\u0000 the tests", "do": ["a\u0000b"]}))
    r = reef("-C", str(project), "report", "--score", "1", "--receipt", rid, "--feedback-json", "fb.json")
    assert r.code == 0, r.err
    [rep] = records(project, "report")
    assert rep.payload["feedback"] == {"lesson": "run the tests", "do": ["ab"]}


def test_a_large_feedback_object_is_capped_like_text():
    from reef_cli.errors import InvalidInput
    from reef_cli.reports import FEEDBACK_MAX, clean_feedback

    big = {"do": ["x" * 1000] * 70}
    with pytest.raises(InvalidInput) as exc:
        clean_feedback(big, "--feedback-json")
    assert str(exc.value) == f"--feedback-json is {len(json.dumps(big))} bytes; the limit is {FEEDBACK_MAX}"


def _race_reports(project: Path, n: int) -> list[tuple[int, str]]:
    env = {**os.environ, "REEF_SESSION": "errors"}
    procs = [subprocess.Popen([reef_exe(), "report", "--score", "1"], cwd=project, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    return results


def test_concurrent_reports_in_one_shell_attach_once(project):
    """Eight `reef report`s racing in one shell on one run: one attaches, the others find nothing pending."""
    receipt(project)
    results = _race_reports(project, 8)
    assert sorted(code for code, _ in results) == [0] + [4] * 7, results
    assert all(err == "reef: error: no receipt to report on: this shell has no unreported run; pass --receipt ID\n"
               for code, err in results if code == 4)
    assert len(records(project, "report")) == 1


@pytest.mark.slow
def test_concurrent_reports_soak(project):
    """The race above, 10 rounds of 16 processes, each round on fresh runs."""
    for rounds in range(1, 11):
        receipt(project)
        receipt(project)
        results = _race_reports(project, 16)
        assert sorted(code for code, _ in results) == [0] + [4] * 15, results
        assert len(records(project, "report")) == rounds


# ------------------------------------------------------------------------------------------------ zones


def test_freeze_refuses_a_path_outside_the_project(reef, project, tmp_path):
    r = reef("-C", str(project), "harness", "freeze", str(tmp_path / "elsewhere.md"))
    assert (r.code, r.err) == (4, f"reef: error: {tmp_path / 'elsewhere.md'} is outside the project {project}; "
                                  "zones name paths inside it\n")
    r = reef("-C", str(project), "harness", "freeze", "/etc/passwd")
    assert r.code == 4 and "is outside the project" in r.err
    assert head_step(project) == 1


def test_freeze_takes_an_absolute_path_inside_the_project_as_relative(reef, project):
    r = reef("-C", str(project), "harness", "freeze", str(project / "reef" / "notes.md"))
    assert r.code == 0, r.err
    assert "- reef/notes.md" in (project / "harness.yaml").read_text()


@pytest.mark.parametrize("path, reason", [
    ("canary/x.yaml", "matches always-frozen glob 'canary/*.yaml'"),
    ("evaluators/check.sh", "matches always-frozen glob 'evaluators/**'"),
    ("harness.yaml", "harness.yaml is the zone map and is always frozen"),
])
def test_unfreezing_an_always_frozen_path_is_refused_and_publishes_nothing(reef, project, path, reason):
    r = reef("-C", str(project), "harness", "unfreeze", path, "--to", "learned")
    assert (r.code, r.err) == (4, f"reef: error: {path} stays Frozen whatever the zones say ({reason}); "
                                  "nothing published\n")
    assert head_step(project) == 1


def test_zone_edits_that_empty_a_zone_keep_harness_yaml_valid(reef, project):
    assert reef("-C", str(project), "harness", "freeze", "CLAUDE.md").code == 0  # managed: [CLAUDE.md] empties
    assert reef("-C", str(project), "harness", "unfreeze", "CLAUDE.md", "--to", "managed").code == 0
    assert reef("-C", str(project), "status").code == 0
    text = (project / "harness.yaml").read_text()
    assert "# A pattern seen this many times is promoted to that surface." in text


# ------------------------------------------------------------------------------------------------ checkout


def test_checkout_into_a_file_is_refused(reef, project):
    (project / "afile").write_text("x")
    r = reef("-C", str(project), "checkout", "1", "afile")
    assert (r.code, r.err) == (4, f"reef: error: {project / 'afile'} is a file, not a directory; give a directory "
                                  "to check out into\n")


def test_checkout_refuses_to_overwrite_a_file_and_writes_nothing(reef, project, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "CLAUDE.md").write_text("mine\n")
    r = reef("-C", str(project), "checkout", "1", str(dest))
    assert (r.code, r.err) == (3, f"reef: error: {dest / 'CLAUDE.md'} has other content; checking out would "
                                  "overwrite files of your own — move them away, or pass --force\n")
    assert sorted(p.name for p in dest.iterdir()) == ["CLAUDE.md"] and (dest / "CLAUDE.md").read_text() == "mine\n"
    r = reef("-C", str(project), "checkout", "1", str(dest), "--force")
    assert r.code == 0, r.err
    assert (dest / "CLAUDE.md").read_text() == (project / "CLAUDE.md").read_text()


def test_checkout_into_the_project_keeps_unpublished_edits(reef, project):
    assert reef("-C", str(project), "checkout", "1", ".").code == 0  # published bytes: nothing to lose
    (project / "CLAUDE.md").write_text((project / "CLAUDE.md").read_text() + "my unpublished rule\n")
    r = reef("-C", str(project), "checkout", "1", ".")
    assert (r.code, r.err) == (3, f"reef: error: {project / 'CLAUDE.md'} has other content; checking out would "
                                  "overwrite unpublished edits or files of your own — move them away, or pass "
                                  "--force\n")
    assert (project / "CLAUDE.md").read_text().endswith("my unpublished rule\n")


def test_checkout_refuses_a_symlink_before_writing_anything(reef, project, tmp_path):
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    os.symlink(outside, dest / "reef")  # sorts after CLAUDE.md and .claude: those must not be written first
    r = reef("-C", str(project), "checkout", "1", str(dest))
    assert (r.code, r.err) == (4, f"reef: error: {dest / 'reef'} is a symlink; reef never writes through symlinks\n")
    assert sorted(p.name for p in dest.iterdir()) == ["reef"] and list(outside.iterdir()) == []


# ------------------------------------------------------------------------------------------------ install --dest


def test_install_refuses_the_users_own_files_in_the_install_root(reef, project, tmp_path):
    dest, bins = tmp_path / "root", tmp_path / "bin"
    (dest / "claude").mkdir(parents=True)
    (dest / "claude" / "CLAUDE.md").write_text("my own notes\n")
    args = ("-C", str(project), "harness", "install", "--adapter", "claude", "--dest", str(dest), "--bin-dir", str(bins))
    r = reef(*args)
    assert (r.code, r.err) == (3, f"reef: error: {dest / 'claude' / 'CLAUDE.md'} exists and is not reef's; installing "
                                  "would overwrite it — move it away, choose another --dest, or pass --force\n")
    assert sorted(p.name for p in (dest / "claude").iterdir()) == ["CLAUDE.md"] and not bins.exists()
    assert reef(*args, "--force").code == 0
    assert reef(*args).code == 0  # now they are reef's: re-installing is fine


def test_install_refuses_a_wrapper_script_that_is_not_reefs(reef, project, tmp_path):
    bins = tmp_path / "bin"
    bins.mkdir()
    (bins / "reef-claude").write_text("#!/bin/sh\necho my own script\n")
    r = reef("-C", str(project), "harness", "install", "--adapter", "claude", "--dest", str(tmp_path / "root"),
             "--bin-dir", str(bins))
    assert (r.code, r.err) == (3, f"reef: error: {bins / 'reef-claude'} exists and is not reef's; installing would "
                                  "overwrite it — move it away, choose another --dest, or pass --force\n")
    assert (bins / "reef-claude").read_text() == "#!/bin/sh\necho my own script\n"
    assert not (tmp_path / "root").exists()


# ------------------------------------------------------------------------------------------------ model url


@pytest.mark.parametrize("url, why", [
    ("not a url", "is not an http(s) URL with a host"),
    ("http://", "is not an http(s) URL with a host"),
    ("ftp://host/v1", "is not an http(s) URL with a host"),
    ("http://host:port/v1", "is malformed (Port could not be cast to integer value as 'port')"),
])
def test_a_malformed_model_url_is_one_line(reef, project, url, why):
    rid = receipt(project)
    assert reef("-C", str(project), "report", "--score", "0", "--receipt", rid, "--feedback", "run the tests").code == 0
    r = reef("-C", str(project), "harness", "reflect", "--backend", "llm", "--model-url", url, "--model", "m")
    assert (r.code, r.err) == (4, f"reef: error: model URL {url!r} {why}; expected e.g. http://127.0.0.1:8000/v1\n")


# ------------------------------------------------------------------------------------------------ damaged state


def test_a_corrupt_git_object_is_one_line(project):
    for obj in (project / ".reef" / "git" / "objects").rglob("*"):
        if obj.is_file() and "pack" not in obj.parts:
            obj.chmod(0o644)
            obj.write_bytes(b"garbage")
    from reef_cli.harness_files import rmtree

    rmtree(project / ".reef" / "trees")  # `reef init` left the release materialised; make `reef run` read the store
    for args in (("status",), ("show", "1"), ("run", "--", "true")):
        r = run_reef(*args, cwd=project)
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.startswith(f"reef: error: {project / '.reef' / 'git'}: reef's object store is damaged (")
        assert r.stderr.endswith("); restore .reef/git from a backup or a copy of the project\n")
        assert "unexpected" not in r.stderr


def _read_only(path: Path, *cmd: str) -> subprocess.CompletedProcess | None:
    """Run reef with `path` bind-mounted read-only in a private mount namespace (a read-only disk, even for
    root); None where this machine does not allow it."""
    mount = 'mount --bind -o ro "$1" "$1"'
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "sh", "-c", mount, "sh", str(path)], capture_output=True, timeout=30).returncode != 0:
        return None
    return subprocess.run(["unshare", "-m", "sh", "-c", f'{mount} && shift && exec "$@"', "sh", str(path), reef_exe(),
                           *cmd], cwd=path.parent, capture_output=True, text=True, timeout=60)


def test_a_read_only_reef_directory_is_one_line(project):
    r = _read_only(project / ".reef", "run", "--", "true")
    if r is None:
        pytest.skip("no private mount namespace here (needs unshare and mount)")
    assert r.returncode == 1
    assert r.stderr.startswith(f"reef: error: {project / '.reef'}/")
    assert r.stderr.endswith(": Read-only file system (check its permissions and the free space there)\n")
    (project / "CLAUDE.md").write_text((project / "CLAUDE.md").read_text() + "x\n")
    r = _read_only(project / ".reef", "publish", "-m", "x")
    assert r.returncode == 1 and "unexpected" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


# ------------------------------------------------------------------------------------------------ publish validation


def test_publish_refuses_a_canary_task_without_check(reef, project):
    (project / "canary").mkdir()
    (project / "canary" / "a.yaml").write_text("tasks:\n  - {id: t1, prompt: hi}\n")
    r = reef("-C", str(project), "publish", "-m", "a task")
    assert (r.code, r.err) == (4, "reef: error: canary/a.yaml: line 2: task 't1' field 'tasks.0': 'check' is a "
                                  "required property; nothing was published\n")
    assert head_step(project) == 1
    assert reef("-C", str(project), "status").code == 0


def test_publish_refuses_a_skill_with_broken_frontmatter(reef, project):
    skill = project / ".claude" / "skills" / "x" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: [x\ndescription: y\n---\nbody\n")
    r = reef("-C", str(project), "publish", "-m", "a skill")
    assert (r.code, r.err) == (4, "reef: error: .claude/skills/x/SKILL.md: invalid YAML in frontmatter (line 3): "
                                  "expected ',' or ']', but got ':'; nothing was published\n")
    skill.write_text("---\nname: x\ndescription: y\n---\nbody\n")
    assert reef("-C", str(project), "publish", "-m", "a skill").code == 0
    assert head_step(project) == 2


def test_a_deleted_current_directory_is_one_line_not_an_unexpected_error(tmp_path):
    """`cd d && rm -rf d && reef status`: Path.cwd() raises FileNotFoundError; reef names the problem, exit 1."""
    import subprocess

    from conftest import reef_exe

    gone = tmp_path / "gone"
    gone.mkdir()
    script = f'cd "{gone}" && rmdir "{gone}" && exec "{reef_exe()}" status'
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "the current directory no longer exists" in r.stderr and "unexpected error" not in r.stderr


@pytest.mark.parametrize("name,args", [("releases.jsonl", ("status",)), ("ledger.jsonl", ("ledger", "verify")),
                                       ("ledger.jsonl.sync", ("run", "--", "true")), ("lock", ("publish", "-m", "x"))])
def test_a_state_file_replaced_by_a_directory_is_one_line_exit_4(tmp_path, name, args):
    """A hostile pass: each of these ended in 'unexpected error: IsADirectoryError' (exit 1, a traceback)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reef_init(tmp_path)
    assert run_reef("run", "--", "true", cwd=tmp_path).returncode == 0
    state = tmp_path / ".reef" / "scenarios" / "default" / name
    if state.is_dir():
        shutil.rmtree(state)
    elif state.exists():
        state.unlink()
    state.mkdir()
    r = run_reef(*args, cwd=tmp_path)
    assert r.returncode == 4 and "unexpected" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{state} is a directory where reef expects a file" in r.stderr


def test_a_file_where_a_state_directory_goes_is_named_before_the_command_runs(tmp_path):
    """`pending/` (this shell's unreported receipts) replaced by a file: reef run named the lock file inside it,
    which does not exist, rather than the file in the way."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reef_init(tmp_path)
    pending = tmp_path / ".reef" / "scenarios" / "default" / "pending"
    pending.write_text("not a directory")
    r = run_reef("run", "--", "touch", str(tmp_path / "ran"), cwd=tmp_path)
    assert r.returncode == 4 and r.stderr.strip() == (f"reef: error: {pending} is not a directory where reef "
                                                      "expects one; move it away (nothing was changed by this "
                                                      "command)"), r.stderr
    assert not (tmp_path / "ran").exists() and pending.read_text() == "not a directory"


@pytest.mark.parametrize("name", ["ledger.jsonl", "ledger.jsonl.sync", "ledger.jsonl.lock"])
def test_a_fifo_where_a_ledger_file_goes_is_one_line_before_the_command_runs(tmp_path, name):
    """A hostile pass: a FIFO at the ledger or its sync page hung reef run, verify and doctor forever (an open for
    reading waits for a writer), or ran the command and then failed its record ('cannot sync'), or ended in
    'unexpected error: not seekable'."""
    import os

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reef_init(tmp_path)
    assert run_reef("run", "--", "true", cwd=tmp_path).returncode == 0
    state = tmp_path / ".reef" / "scenarios" / "default" / name
    state.unlink()
    os.mkfifo(state)
    r = run_reef("run", "--", "touch", str(tmp_path / "ran"), cwd=tmp_path, timeout=30)
    assert r.returncode == 4 and r.stderr.strip() == (f"reef: error: {state} is not a regular file (a FIFO, a socket "
                                                      "or a device) where reef expects one; move it away (nothing "
                                                      "was changed by this command)"), r.stderr
    assert not (tmp_path / "ran").exists()
    verify = run_reef("ledger", "verify", cwd=tmp_path, timeout=30)  # no hang: refused where it reads the file
    assert verify.returncode == (0 if name == "ledger.jsonl.lock" else 4) and "unexpected" not in verify.stderr


MISPLACED_LINES = {
    "directory": "is a directory where reef expects a file",
    "symlink": "is a symlink where reef expects a file (reef never follows symlinks in its state)",
    "fifo": "is not a regular file (a FIFO, a socket or a device) where reef expects one",
}


@pytest.mark.parametrize("kind", sorted(MISPLACED_LINES))
def test_each_kind_of_misplaced_state_has_one_line_whoever_meets_it(tmp_path, kind):
    """The line was built in three places and a symlink had two wordings ("is a symlink; reef never writes its state
    through symlinks (move it away)" from open_state, "is a symlink reef does not follow" from the CLI boundary).
    Now: one line per kind, naming the path and saying to move it away, from `reef run`, from the boundary's
    reading of a plain OSError, and from open_state alike."""
    import errno

    from reef_cli.cli.boundary import misplaced_error
    from reef_cli.durable import open_state
    from reef_cli.errors import MisplacedState

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reef_init(tmp_path)
    lock = tmp_path / ".reef" / "scenarios" / "default" / "ledger.jsonl.lock"
    if lock.exists():
        lock.unlink()
    {"directory": lock.mkdir, "symlink": lambda: lock.symlink_to(tmp_path / "elsewhere"),
     "fifo": lambda: os.mkfifo(lock)}[kind]()
    line = f"{lock} {MISPLACED_LINES[kind]}; move it away (nothing was changed by this command)"
    r = run_reef("run", "--", "touch", str(tmp_path / "ran"), cwd=tmp_path, timeout=30)
    assert (r.returncode, r.stderr) == (4, f"reef: error: {line}\n")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "elsewhere").exists()
    with pytest.raises(MisplacedState) as raised:
        open_state(lock, os.O_RDWR | os.O_CREAT)
    assert (str(raised.value), raised.value.path) == (line, str(lock))
    code = {"directory": errno.EISDIR, "symlink": errno.ELOOP, "fifo": errno.ENXIO}[kind]
    assert misplaced_error(OSError(code, os.strerror(code), str(lock))) == line


@pytest.mark.parametrize("kind", ["dangling", "symlink", "fifo"])
def test_the_scenario_lock_is_never_opened_through_a_symlink(tmp_path, kind):
    """The scenario lock was opened with a plain os.open: a dangling symlink planted at `<scenario>/lock` had
    `reef publish` create the file it pointed to (anywhere the user can write), a symlink to a file had it opened
    for writing, a FIFO was taken as a lock. Now it is opened as the ledger's lock is: one line, exit 4, and the
    target never made or touched."""
    project = reef_init(tmp_path / "proj")
    lock = project / ".reef" / "scenarios" / "default" / "lock"
    lock.unlink(missing_ok=True)
    target = tmp_path / "victim"
    if kind == "symlink":
        target.write_text("VICTIM\n")
    {"dangling": lambda: lock.symlink_to(target), "symlink": lambda: lock.symlink_to(target),
     "fifo": lambda: os.mkfifo(lock)}[kind]()
    (project / "CLAUDE.md").write_text("an edit to publish\n")
    r = run_reef("publish", "-m", "x", cwd=project, timeout=30)
    what = MISPLACED_LINES["fifo" if kind == "fifo" else "symlink"]
    assert (r.returncode, r.stderr) == (4, f"reef: error: {lock} {what}; move it away (nothing was changed by this "
                                           "command)\n")
    assert head_step(project) == 1
    assert (target.read_text() == "VICTIM\n") if kind == "symlink" else not target.exists()


@pytest.mark.parametrize("name,kind", [("releases.jsonl", "fifo"), ("releases.jsonl", "symlink"),
                                       ("scenario.json", "directory"), ("scenario.json", "fifo")])
def test_a_scenario_file_of_the_wrong_kind_is_named_by_every_command(tmp_path, name, kind):
    """A FIFO at releases.jsonl hung every command, reef doctor too, until someone wrote to it; a directory or a
    FIFO at scenario.json read "scenario 'default' does not exist (known: default)"; a symlink at the release log
    was read (and appended) through. Now each is the one line naming it, exit 4, before the command does anything."""
    project = reef_init(tmp_path / "proj")
    path = project / ".reef" / "scenarios" / "default" / name
    path.unlink()
    {"directory": path.mkdir, "fifo": lambda: os.mkfifo(path),
     "symlink": lambda: path.symlink_to(tmp_path / "elsewhere")}[kind]()
    line = f"reef: error: {path} {MISPLACED_LINES[kind]}; move it away (nothing was changed by this command)\n"
    for args in (("status",), ("run", "--", "touch", str(tmp_path / "ran"))):
        r = run_reef(*args, cwd=project, timeout=30)
        assert (r.returncode, r.stderr) == (4, line), args
    assert not (tmp_path / "ran").exists() and not (tmp_path / "elsewhere").exists()


def test_a_file_where_a_state_directory_goes_is_named_not_the_path_beneath_it(tmp_path):
    """`.reef/trees` (the materialised releases) replaced by a file: reef run said ".reef/trees/<id>.<pid>.tmp is
    not a directory where reef expects one; move it away", a path that does not exist. The boundary now names the
    file in the way, as refuse_misplaced does."""
    from reef_cli.cli.boundary import misplaced_error

    project = reef_init(tmp_path / "proj")
    trees = project / ".reef" / "trees"
    shutil.rmtree(trees)
    trees.write_text("x")
    r = run_reef("run", "--", "touch", str(tmp_path / "ran"), cwd=project)
    assert (r.returncode, r.stderr) == (4, f"reef: error: {trees} is not a directory where reef expects one; move it "
                                           "away (nothing was changed by this command)\n")
    assert not (tmp_path / "ran").exists()
    import errno

    line = misplaced_error(OSError(errno.ENOTDIR, "Not a directory", str(trees / "a" / "b")))
    assert line.startswith(f"{trees} is not a directory")
    assert misplaced_error(OSError(errno.ENOTDIR, "Not a directory", str(tmp_path / "gone"))).startswith(
        f"{tmp_path / 'gone'} is not a directory")


def test_a_file_where_the_runs_directory_goes_is_refused_before_the_command_runs(tmp_path):
    """It ran the command, then failed to keep its record, saying 'nothing was changed' about the wrong path."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reef_init(tmp_path)
    runs = tmp_path / ".reef" / "scenarios" / "default" / "runs"
    if runs.exists():
        shutil.rmtree(runs)
    runs.write_text("x")
    r = run_reef("run", "--", "touch", str(tmp_path / "ran"), cwd=tmp_path)
    assert r.returncode == 4 and f"{runs} is not a directory where reef expects one" in r.stderr, r.stderr
    assert not (tmp_path / "ran").exists() and runs.read_text() == "x"


def test_ledger_tail_and_show_never_print_control_characters_from_feedback(tmp_path):
    """A hostile pass: feedback holding ESC[2J reached the terminal raw through `reef ledger tail` (it clears the
    reader's screen; an attacker's text can forge output)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reef_init(tmp_path)
    receipt = run_reef("run", "--", "true", cwd=tmp_path).stderr.split("receipt ", 1)[1].split()[0]
    assert run_reef("report", "--score", "0", "--feedback", "x\x01\x1b[2J\x7fY", "--receipt", receipt,
                    cwd=tmp_path).returncode == 0
    tail = run_reef("ledger", "tail", "-n", "1", cwd=tmp_path, env={"COLUMNS": "300"})
    record = json.loads(run_reef("ledger", "tail", "-n", "1", "--json", cwd=tmp_path).stdout)["record_id"]
    show = run_reef("ledger", "show", record, cwd=tmp_path)
    for out in (tail.stdout, show.stdout):
        assert "\x1b" not in out and "\x01" not in out and "\x7f" not in out, out
    assert "x\\x01\\x1b[2J\\x7fY" in tail.stdout


def test_feedback_json_with_nan_and_a_negative_zero_score(tmp_path):
    """A hostile pass: NaN in --feedback-json (Python's json reads it) ended in 'payload of a report record is not
    JSON-serialisable: Out of range float values...', and --score -0 was stored and echoed as -0."""
    from reef_cli.reports import parse_score

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reef_init(tmp_path)
    receipt = run_reef("run", "--", "true", cwd=tmp_path).stderr.split("receipt ", 1)[1].split()[0]
    bad = tmp_path / "fb.json"
    bad.write_text('{"a": NaN}')
    r = run_reef("report", "--score", "1", "--feedback-json", str(bad), "--receipt", receipt, cwd=tmp_path)
    assert r.returncode == 4 and r.stderr.strip() == f"reef: error: --feedback-json {bad}: not valid JSON (NaN is not a JSON value)"
    assert str(parse_score("-0")) == "0.0" and str(parse_score(-0.0)) == "0.0"


@pytest.mark.parametrize("kind", sorted(MISPLACED_LINES))
def test_a_project_file_of_the_wrong_kind_is_named_not_taken_for_no_project(reef, tmp_path, kind):
    """A directory or a FIFO at .reef/project.json read as "not a reef project (or any parent up to /)", sending
    the user to `reef init`; a symlink there was followed. Now the one line naming it, exit 4."""
    project = reef_init(tmp_path / "proj")
    path = project / ".reef" / "project.json"
    path.unlink()
    {"directory": path.mkdir, "fifo": lambda: os.mkfifo(path),
     "symlink": lambda: path.symlink_to(tmp_path / "elsewhere")}[kind]()
    if kind == "symlink":
        (tmp_path / "elsewhere").write_text('{"default_scenario": "default", "version": 1}\n')
    r = reef("status", cwd=project)
    assert (r.code, r.err) == (4, f"reef: error: {path} {MISPLACED_LINES[kind]}; move it away (nothing was "
                                  "changed by this command)\n")


@pytest.mark.parametrize("content,line", [
    (b" " * (1 << 20) + b"{}", "is larger than 1048576 bytes, more than reef ever writes there; move it away "
                               "(nothing was changed by this command)"),
    (b"[]\n", ": corrupt project file")])
def test_a_project_file_too_large_or_of_the_wrong_shape_is_one_line(reef, tmp_path, content, line):
    """A planted multi-gigabyte project.json was read whole into memory; `[]` there ended in "unexpected error"."""
    project = reef_init(tmp_path / "proj")
    path = project / ".reef" / "project.json"
    path.write_bytes(content)
    r = reef("status", cwd=project)
    assert (r.code, r.err) == (4 if "larger" in line else 1, f"reef: error: {path}{'' if ':' in line else ' '}{line}\n")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", sorted(MISPLACED_LINES))
def test_the_release_log_is_read_and_appended_only_as_a_regular_file(tmp_path, kind):
    """ReleaseLog opened its file with a plain open(): a FIFO there hung read/head/repair (an open for reading
    waits for a writer) and a symlink was read and appended through. Store.exists() refuses them first, but the
    log itself must not rely on its callers' lstat (a swap between the two)."""
    from reef_cli.errors import MisplacedState
    from reef_cli.releases import Release, ReleaseLog

    path = tmp_path / "releases.jsonl"
    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    {"directory": path.mkdir, "fifo": lambda: os.mkfifo(path), "symlink": lambda: path.symlink_to(victim)}[kind]()
    log = ReleaseLog(path)
    line = f"{path} {MISPLACED_LINES[kind]}; move it away (nothing was changed by this command)"
    release = Release.from_json({"release_id": "rel_1", "scenario": "default", "content_id": "t" * 40,
                                 "commit_id": "c" * 40, "step": 1, "operation": "publish"})
    for call in (log.read, log.head, log.repair, lambda: log.append(release)):
        with pytest.raises(MisplacedState) as raised:
            call()
        assert str(raised.value) == line
    assert victim.read_bytes() == b""


def test_report_names_a_scenario_file_of_the_wrong_kind_and_open_state_the_file_in_the_way(reef, tmp_path):
    """`reef report` (the lean path, ScenarioPaths) said "scenario 'default' does not exist" for a directory at
    scenario.json; open_state named a path beneath a file in the way ("…/x/y is not a directory")."""
    from reef_cli.durable import open_state
    from reef_cli.errors import MisplacedState

    project = reef_init(tmp_path / "proj")
    path = project / ".reef" / "scenarios" / "default" / "scenario.json"
    path.unlink()
    path.mkdir()
    r = reef("report", "--score", "1", cwd=project)
    assert (r.code, r.err) == (4, f"reef: error: {path} {MISPLACED_LINES['directory']}; move it away (nothing was "
                                  "changed by this command)\n")
    (tmp_path / "file").write_text("x")
    with pytest.raises(MisplacedState) as raised:
        open_state(tmp_path / "file" / "y", os.O_RDONLY)
    assert raised.value.path == str(tmp_path / "file")


def test_an_error_message_is_printed_with_its_control_characters_escaped(reef, tmp_path, capsys):
    """`reef: error:` printed the message raw: a path holding ESC[2J cleared the user's screen and a carriage return
    let it overwrite its own line. Now escaped as `reef log` escapes stored text (printable), newlines too; the
    "unexpected error" line as well."""
    from reef_cli.cli.boundary import guarded

    bad = tmp_path / "x\x1b[2J\ry\nz"
    r = reef("-C", str(bad), "status")
    assert (r.code, r.err) == (1, f"reef: error: -C {tmp_path}/x\\x1b[2J\\x0dy\\x0az: not a directory\n")

    def crash():
        raise RuntimeError("\x9b2J\u202e")
    assert guarded(crash) == 1
    assert capsys.readouterr().err.startswith("reef: unexpected error: RuntimeError: \\x9b2J\\u202e (traceback in ")
