"""`reef doctor` against real broken set-ups: modes changed with chmod, a truncated and a cut ledger, a shadowing
`reef-claude` on PATH, an edited installed harness, a live and a dead endpoint, agents at other versions."""

from __future__ import annotations

import http.server
import json
import os
import socket
import stat
import sys
import threading
from pathlib import Path

import pytest

from conftest import run_reef
from reef_cli.doctor import FAIL, OK, WARN, check_agents, diagnose

LEDGER = Path(".reef/scenarios/default/ledger.jsonl")


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    owner_only(root)
    return root


def owner_only(root: Path) -> None:
    """.reef 0700, its files 0600: what state should be (reef init did not always make it so)."""
    os.chmod(root / ".reef", 0o700)
    for dirpath, dirs, files in os.walk(root / ".reef"):
        for d in dirs:
            os.chmod(os.path.join(dirpath, d), 0o700)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o600)


def env_with(path_dirs: list[Path] | None = None, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REEF_")}
    env["PATH"] = os.pathsep.join([*(str(d) for d in path_dirs or []), str(Path(sys.executable).parent), "/usr/bin",
                                   "/bin"])
    env.update(extra)
    return env


def by_name(report, name: str):
    found = [c for c in report.checks if c.name == name]
    assert found, f"no check {name} in {[c.name for c in report.checks]}"
    return found[0]


def records(reef, project: Path, n: int = 3) -> None:
    for _ in range(n):
        assert reef("-C", str(project), "run", "--", sys.executable, "-c", "pass").code == 0


def test_healthy_project_is_all_ok_and_exits_0(reef, project):
    records(reef, project)
    owner_only(project)
    report = diagnose(project, environ=env_with())
    for name in ("python", "reef", "project", "state:store", "state:ledger", "state:permissions", "endpoint"):
        assert by_name(report, name).status == OK, by_name(report, name)
    assert by_name(report, "state:ledger").message == "ledger verifies: 3 record(s)"
    assert report.exit_code == 0


def test_group_readable_state_warns_and_world_writable_fails(reef, project):
    os.chmod(project / LEDGER.parent / "scenario.json", 0o644)
    report = diagnose(project, environ=env_with())
    c = by_name(report, "state:permissions")
    assert c.status == WARN and "readable by others" in c.message and c.fix == f"chmod -R go-rwx {project / '.reef'}"
    assert report.exit_code == 0  # a warning alone does not fail
    os.chmod(project / ".reef", 0o777)
    report = diagnose(project, environ=env_with())
    c = by_name(report, "state:permissions")
    assert c.status == FAIL and "1 path(s) under" in c.message and "writable by others" in c.message
    assert report.exit_code == 1


def test_truncated_ledger_warns_and_a_cut_record_fails(reef, project):
    records(reef, project)
    ledger = project / LEDGER
    data = ledger.read_bytes()
    lines = data.splitlines(keepends=True)
    ledger.write_bytes(data + lines[1][: len(lines[1]) // 2])  # a crash mid-write: a torn, unacknowledged line
    c = by_name(diagnose(project, environ=env_with()), "state:ledger")
    assert c.status == WARN and "ends in a torn line" in c.message and f"{len(lines)} record(s)" in c.message
    ledger.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])  # acknowledged records cut off the end
    c = by_name(diagnose(project, environ=env_with()), "state:ledger")
    assert c.status == FAIL and "lost acknowledged records" in c.message and "--accept-loss" in c.fix
    ledger.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2] + b"\n" + lines[2])  # a record cut short inside
    report = diagnose(project, environ=env_with())
    c = by_name(report, "state:ledger")
    assert c.status == FAIL and "does not verify at line 2" in c.message and "reef ledger verify" in c.fix
    assert report.exit_code == 1


def test_unreadable_store_fails_without_crashing(project):
    (project / ".reef" / "scenarios" / "default" / "releases.jsonl").write_text("not json\n")
    report = diagnose(project, environ=env_with())
    assert by_name(report, "state:store").status == FAIL
    assert report.exit_code == 1


WHAT = {"directory": "is a directory where reef expects a file",
        "symlink": "is a symlink where reef expects a file (reef never follows symlinks in its state)",
        "fifo": "is not a regular file (a FIFO, a socket or a device) where reef expects one",
        "file": "is not a directory where reef expects one"}


@pytest.mark.parametrize("name,kind,row", [
    ("ledger.jsonl.lock", "directory", "state:ledger"), ("ledger.jsonl.lock", "symlink", "state:ledger"),
    ("ledger.jsonl.lock", "fifo", "state:ledger"), ("ledger.jsonl.sync", "symlink", "state:ledger"),
    ("ledger.jsonl", "symlink", "state:ledger"), ("ledger.jsonl", "directory", "state:ledger"),
    ("ledger.jsonl.idx", "directory", "state:ledger"), ("lock", "directory", "state:files"),
    ("lock", "symlink", "state:files"), ("runs", "file", "state:files"), ("pending", "file", "state:files"),
    ("releases.jsonl", "directory", "state:store"), ("../../trees", "file", "state:files")])
def test_misplaced_state_is_a_failure_naming_it_with_move_it_away(reef, project, tmp_path, name, kind, row):
    """Doctor said "0 failure(s)" over a directory, symlink or FIFO at the ledger's lock or sync page, a symlinked
    ledger ("ledger verifies"), or a directory at the scenario lock, while every `reef run` (or publish) stopped
    there with exit 4; a directory at releases.jsonl read "store unreadable: IsADirectoryError ..." with "restore
    .reef from a backup" as the fix; a misplaced ledger file met by verify had "reef ledger verify" as its fix. Now
    each is one failing row in the line every command gives, with "move PATH away" as the fix."""
    from reef_cli.doctor import check_state

    records(reef, project, 1)
    path = Path(os.path.normpath(project / LEDGER.parent / name))
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    victim = tmp_path / "victim"
    victim.write_text("VICTIM\n")
    {"directory": path.mkdir, "symlink": lambda: path.symlink_to(victim), "fifo": lambda: os.mkfifo(path),
     "file": lambda: path.write_text("x")}[kind]()
    checks, _, _ = check_state(project, None, env_with())
    found = [c for c in checks if c.status == FAIL]
    assert [(c.name, c.message, c.fix) for c in found] == [(row, f"{path} {WHAT[kind]}", f"move {path} away")]
    assert victim.read_text() == "VICTIM\n"


def install(reef, project: Path, bins: Path, root: Path) -> Path:
    r = reef("-C", str(project), "harness", "install", "--adapter", "claude", "--dest", str(root),
             "--bin-dir", str(bins), "--json")
    assert r.code == 0, r.err
    return bins / "reef-claude"


def test_shadowing_reef_claude_on_path_fails_until_the_bound_one_comes_first(reef, project, tmp_path):
    wrapper = install(reef, project, tmp_path / "bin", tmp_path / "root")
    shadow_dir = tmp_path / "shadow"
    shadow_dir.mkdir()
    shadow = shadow_dir / "reef-claude"
    shadow.write_text("#!/bin/sh\nexec echo unbound\n")  # an old, unbound reef-claude (a console script)
    shadow.chmod(0o755)
    report = diagnose(project, environ=env_with([shadow_dir, tmp_path / "bin"]))
    c = by_name(report, "wrapper:claude")
    assert c.status == FAIL
    assert c.message == (f"reef-claude on PATH is {shadow} (an unbound reef-claude), shadowing the bound wrapper "
                         f"{wrapper}")
    assert c.fix == f"put {tmp_path / 'bin'} before {shadow_dir} on PATH, or remove {shadow}"
    assert report.exit_code == 1

    c = by_name(diagnose(project, environ=env_with([tmp_path / "bin", shadow_dir])), "wrapper:claude")
    assert c.status == OK and str(wrapper) in c.message

    c = by_name(diagnose(project, environ=env_with([shadow_dir])), "wrapper:claude")
    assert c.status == FAIL and c.fix == f"add {tmp_path / 'bin'} to PATH before {shadow_dir}"

    c = by_name(diagnose(project, environ=env_with([])), "wrapper:claude")
    if c.status != FAIL:  # the venv's own console script may be on PATH: then it shadows
        assert c.status == WARN and "not on PATH" in c.message


def test_edited_installed_harness_fails_with_the_reinstall_fix(reef, project, tmp_path):
    install(reef, project, tmp_path / "bin", tmp_path / "root")
    env = env_with([tmp_path / "bin"])
    assert by_name(diagnose(project, environ=env), "install:claude").status == OK
    (tmp_path / "root" / "claude" / "CLAUDE.md").write_text("edited in place\n")
    c = by_name(diagnose(project, environ=env), "install:claude")
    assert c.status == FAIL and "CLAUDE.md (modified)" in c.message
    assert c.fix.startswith("reef harness install --adapter claude")


def test_endpoints_live_and_dead(project):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # shutdown() waits a poll
    try:
        live = f"http://127.0.0.1:{server.server_address[1]}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # bound, never listening: refused
            report = diagnose(project, environ=env_with(REEF_SERVE_URL=live, REEF_ENGINE_URL=dead))
    finally:
        server.shutdown()
        server.server_close()
    assert by_name(report, "endpoint:serve").status == OK
    c = by_name(report, "endpoint:engine")
    assert c.status == FAIL and "unreachable" in c.message and c.fix == "start it, or fix/unset REEF_ENGINE_URL"
    assert report.exit_code == 1


def test_reflector_model_url_from_harness_yaml_is_checked(project):
    cfg = project / "harness.yaml"
    cfg.write_text(cfg.read_text() + "reflector:\n  backend: llm\n  model_url: http://127.0.0.1:9/v1\n  model: m\n")
    c = by_name(diagnose(project, environ=env_with()), "endpoint:reflector")
    assert c.status == FAIL and "harness.yaml reflector.model_url" in c.message


def fake_pinned(agents: Path, version: str) -> None:
    """A pinned claude install laid out as install-agents.sh leaves it: node_modules/.bin -> the package."""
    pkg = agents / "claude" / "node_modules" / "@anthropic-ai" / "claude-code"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": "@anthropic-ai/claude-code", "version": version}))
    (pkg / "cli.js").write_text("#!/bin/sh\necho should-not-run\n")
    (pkg / "cli.js").chmod(0o755)
    bin_dir = agents / "claude" / "node_modules" / ".bin"
    bin_dir.mkdir()
    os.symlink("../@anthropic-ai/claude-code/cli.js", bin_dir / "claude")


def test_agent_versions_against_the_pins(tmp_path):
    from reef_cli.adapters import load

    pin = load("claude").npm_version
    agents = tmp_path / "agents"
    fake_pinned(agents, pin)
    checks = {c.name: c for c in check_agents(env_with(REEF_AGENTS_DIR=str(agents)))}
    assert checks["agent:claude"].status == OK and f"{pin} (pinned)" in checks["agent:claude"].message

    old = tmp_path / "old-claude"
    old.write_text("#!/bin/sh\necho '1.0.0 (Claude Code)'\n")
    old.chmod(0o755)
    c = {c.name: c for c in check_agents(env_with(REEF_CLAUDE_BIN=str(old)))}["agent:claude"]
    assert c.status == WARN and f"Claude Code 1.0.0 at {old}; reef is tested with {pin}" == c.message
    assert c.fix.startswith("adapters/install-agents.sh claude")

    c = {c.name: c for c in check_agents(env_with(REEF_AGENTS_DIR=str(tmp_path / "none")))}["agent:pi"]
    if c.status != OK:  # pi may be on the machine's PATH
        assert c.status == WARN and "'pi' not found" in c.message and "install-agents.sh pi" in c.fix


def test_cli_outside_a_project_warns_and_json_shape(tmp_path):
    r = run_reef("doctor", "--json", cwd=tmp_path, env={"REEF_AGENTS_DIR": str(tmp_path / "none")})
    data = json.loads(r.stdout)
    assert set(data) == {"ok", "counts", "checks"}
    project = [c for c in data["checks"] if c["name"] == "project"][0]
    assert project["status"] == "warn" and project["message"].startswith("not a reef project")
    assert r.returncode == (0 if data["counts"]["fail"] == 0 else 1)


def test_cli_text_and_exit_1_on_failure(project):
    os.chmod(project / ".reef", 0o777)
    r = run_reef("doctor", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"fail  state:permissions  1 path(s) under {project / '.reef'} are writable by others" in r.stdout
    assert f"fix: chmod -R go-rwx {project / '.reef'}" in r.stdout
    assert "failure(s)" in r.stdout.splitlines()[-1]


@pytest.mark.parametrize("content", ["[\n", "{}\n", "[]\n"])
def test_corrupt_scenario_file_fails_doctor_and_status_in_one_line(reef, project, content):
    """A scenario.json torn or of the wrong shape made doctor say 'ok' while every command then failed ({} and []
    even ended in 'unexpected error: KeyError/TypeError')."""
    path = project / ".reef" / "scenarios" / "default" / "scenario.json"
    path.write_text(content)
    report = diagnose(project, environ=env_with())
    check = by_name(report, "state:store")
    assert check.status == FAIL and f"{path}: corrupt scenario file" in check.message
    r = reef("-C", str(project), "status")
    assert r.code == 1 and r.err.startswith(f"reef: error: {path}: corrupt scenario file"), r.err
    assert "unexpected" not in r.err and len(r.err.strip().splitlines()) == 1


def test_a_transcript_left_unread_is_a_warning_naming_it(reef, project, tmp_path):
    """What the hook or a wrapper could not ingest: doctor is the one pass a user runs when learning seems off."""
    assert by_name(diagnose(project, environ=env_with()), "state:ingest").status == OK
    bad = tmp_path / "s\x1b]0;x\x07.jsonl"
    bad.write_text(json.dumps({"sessionId": "s"}) + "\nnot json\n")
    assert reef("-C", str(project), "ingest", str(bad)).code == 0  # lines skipped: a warning, the rest ingested
    report = diagnose(project, environ=env_with())
    c = by_name(report, "state:ingest")
    assert c.status == WARN and report.exit_code == 0
    assert c.message.startswith("1 transcript(s) not fully ingested since ")
    assert c.message.endswith(f"(latest: {tmp_path}/s\\x1b]0;x\\x07.jsonl: skipped 1 line(s) reef could not read "
                              "(line 2: not JSON))")
    assert c.fix == "'reef status --json' lists them; repair or remove each transcript and the next ingest clears it"
    bad.unlink()  # gone: nothing left to learn from it, and the next ingest forgets it
    assert reef("-C", str(project), "ingest", "--agent", "claude").code == 0
    assert by_name(diagnose(project, environ=env_with()), "state:ingest").status == OK


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_an_install_record_doctor_cannot_read_as_state_is_a_finding_not_a_hang(reef, project, tmp_path, kind):
    """doctor read .reef/installs/*.json with a plain open(): a FIFO there hung `reef doctor` for good, and a huge
    file was read whole. Now either is one failing row naming the file; the other checks still run."""
    from conftest import planted_fifo
    from reef_cli.doctor import check_state, check_wrappers
    from reef_cli.install import RECORD_LIMIT

    install(reef, project, tmp_path / "bin", tmp_path / "root")
    record = next((project / ".reef" / "installs").glob("claude-*.json"))
    if kind == "huge":
        os.truncate(record, RECORD_LIMIT + 1)
        rows = check_wrappers(project / ".reef", env_with([tmp_path / "bin"]))
        checks, _, _ = check_state(project, None, env_with())
        what = f"{record} is larger than {RECORD_LIMIT} bytes, more than reef ever writes there"
    else:
        record.unlink()
        with planted_fifo(record):
            rows = check_wrappers(project / ".reef", env_with([tmp_path / "bin"]))
            checks, _, _ = check_state(project, None, env_with())
        what = f"{record} {WHAT['fifo']}"
    assert [(c.name, c.status, c.message) for c in rows] == [("wrapper", FAIL, what)]
    assert rows[0].fix.startswith(f"move {record} away")
    assert not [c for c in checks if c.name.startswith("install")]  # neither "intact" nor "none installed"


def test_a_wrappers_sessions_file_is_not_a_corrupt_install_record(reef, project, tmp_path):
    """Every wrapper session leaves .reef/installs/<record>.sessions.json (this shell's last receipts) beside the
    install record; doctor read it as a record and failed: "corrupt install record", after any reef-claude run."""
    from reef_cli.doctor import check_wrappers

    install(reef, project, tmp_path / "bin", tmp_path / "root")
    record = next((project / ".reef" / "installs").glob("claude-*.json"))
    record.with_name(record.stem + ".sessions.json").write_text('{"sessions": {}}\n')
    rows = check_wrappers(project / ".reef", env_with([tmp_path / "bin"]))
    assert [(c.name, c.status) for c in rows] == [("wrapper:claude", OK)]


@pytest.mark.parametrize("name,row", [("rollback.json", "state:interrupted"),
                                      ("evolve/journal.json", "state:interrupted"),
                                      ("ingest-failed.json", "state:ingest")])
def test_a_fifo_at_what_status_reads_is_named_never_waited_on(reef, project, name, row):
    """`reef status` and `reef doctor` read the rollback journal, the evolve journal and ingest-failed.json with a
    plain open(): a FIFO at any hung both for good. Status now stops with the one line for it (exit 4) where the
    file decides what it shows (the journals) and leaves out a notice it cannot read (ingest failures); doctor has
    a failing row naming it either way."""
    from conftest import planted_fifo
    from reef_cli.doctor import check_state

    path = project / LEDGER.parent / name
    path.parent.mkdir(exist_ok=True)
    with planted_fifo(path):
        st = reef("-C", str(project), "status")
        checks, _, _ = check_state(project, None, env_with())
    if row == "state:ingest":
        assert st.code == 0 and "ingest:" not in st.out
    else:
        assert (st.code, st.err) == (4, f"reef: error: {path} {WHAT['fifo']}; move it away (nothing was changed "
                                        "by this command)\n")
    found = [c for c in checks if c.status == FAIL]
    assert [c.name for c in found] == [row] and str(path) in found[0].message and WHAT["fifo"] in found[0].message
