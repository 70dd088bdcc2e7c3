"""The reef-<agent> wrappers with a stand-in agent (tests/fakes/agent.py): binding, verify, update, record, report,
exit status and signals. The real agents are driven in tests/test_agents_e2e.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAKE_AGENT = Path(__file__).parent / "fakes" / "agent.py"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def agent_bin(tmp_path) -> Path:
    """The stand-in agent as an executable (the wrapper runs it like the real binary)."""
    path = tmp_path / "fake-claude"
    path.write_text(f"#!{sys.executable}\n" + FAKE_AGENT.read_text())
    path.chmod(0o755)
    return path


@pytest.fixture
def setup(reef, tmp_path, agent_bin, no_real_home):
    project = tmp_path / "proj"
    project.mkdir()
    assert reef("-C", str(project), "init").code == 0
    r = reef("-C", str(project), "harness", "install", "--adapter", "claude", "--dest", str(tmp_path / "root"),
             "--bin-dir", str(tmp_path / "bin"), "--json")
    assert r.code == 0, r.err
    code = tmp_path / "code"  # the user's code project: no harness, not a reef project
    code.mkdir()
    env = {**os.environ, "REEF_CLAUDE_BIN": str(agent_bin), "REEF_SESSION": "test-shell", "HOME": str(no_real_home)}
    return {"project": project, "code": code, "wrapper": tmp_path / "bin" / "reef-claude", "env": env,
            "record": json.loads(r.out)["record"], "tmp": tmp_path}


def wrap(s, *args, env=None, cwd=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([str(s["wrapper"]), *args], cwd=cwd or s["code"], env={**s["env"], **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def receipt_of(stderr: str) -> str:
    m = re.search(r"reef: receipt (\S+) \(release (\S+), step (\d+)\)", stderr)
    assert m, stderr
    return m.group(1)


def ledger_record(project: Path, record_id: str):
    from reef_cli.ledger import Ledger

    return Ledger(project / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default").get(record_id)


def test_wrapper_runs_the_agent_on_the_install_root_and_records_it(setup):
    r = wrap(setup, "-p", "hi there", "--exit", "7")
    assert r.returncode == 7, r.stderr
    init = json.loads(r.stdout.splitlines()[0])  # the agent's stdout reaches the user unchanged
    rec = setup["record"]
    assert init["config_dir"] == rec["agent_dir"] and init["cwd"] == str(setup["code"])
    assert init["argv"] == ["-p", "hi there", "--exit", "7"] and init["skills"] == ["code-review"]
    assert "CLAUDE.md" in init["loaded"] and init["reef_release"] == rec["release_id"]
    record = ledger_record(setup["project"], receipt_of(r.stderr))
    assert record.kind == "interaction" and record.release_id == rec["release_id"]
    p = record.payload
    assert p["exit_code"] == 7 and p["adapter"] == "claude" and p["harness_dir"] == rec["agent_dir"]
    assert p["install"]["release_id"] == rec["release_id"] and p["install"]["binary"] == setup["env"]["REEF_CLAUDE_BIN"]
    assert p["agent_reported"]["init"]["skills"] == ["code-review"]
    assert p["agent_reported"]["result"] == {"subtype": "success", "is_error": False}
    assert "loaded" not in p["agent_reported"]["init"]  # only the descriptor's `keep` fields


def test_report_attaches_to_the_last_session_of_this_shell(setup):
    receipt = receipt_of(wrap(setup, "-p", "x").stderr)
    r = wrap(setup, "report", "--score", "0", "--feedback", "too verbose", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["kind"] == "report" and rep["payload"]["receipts"] == [receipt]
    assert rep["payload"]["feedback"] == "too verbose" and rep["release_id"] == setup["record"]["release_id"]
    again = wrap(setup, "report", "--score", "1")
    assert again.returncode == 4 and "no reef-claude session to report on in this shell" in again.stderr
    other = wrap(setup, "report", "--score", "1", env={"REEF_SESSION": "another-shell"})
    assert other.returncode == 4


def test_concurrent_wrapper_reports_attach_once(setup):
    """Eight `reef-claude report`s racing in one shell on its last session: one attaches, the others are told there
    is nothing left to report on."""
    receipt = receipt_of(wrap(setup, "-p", "x").stderr)
    procs = [subprocess.Popen([str(setup["wrapper"]), "report", "--score", "1"], cwd=setup["code"], env=setup["env"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stderr.close()
    assert sorted(code for code, _ in results) == [0] + [4] * 7, results
    assert all(err == "reef-claude: error: no reef-claude session to report on in this shell: run reef-claude first, "
                      "or pass --receipt ID\n" for code, err in results if code == 4)
    from reef_cli.ledger import Ledger

    ledger = Ledger(setup["project"] / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
    reports = [r for r in ledger.iter_records(kind="report")]
    assert len(reports) == 1 and reports[0].payload["receipts"] == [receipt]


def test_a_changed_install_refuses_to_start_and_says_how_to_restore(setup):
    agent_dir = Path(setup["record"]["agent_dir"])
    (agent_dir / "CLAUDE.md").write_text("sneaky edit\n")
    ran = setup["tmp"] / "ran"
    r = wrap(setup, "--touch", str(ran))
    assert r.returncode == 3 and not ran.exists()
    assert f"the installed claude harness was changed in place ({agent_dir}/CLAUDE.md (modified))" in r.stderr
    assert f"Restore it with: reef -C {setup['project']} --scenario default harness install --adapter claude" in r.stderr
    restore = subprocess.run([str(VENV_BIN / "reef"), "-C", str(setup["project"]), "harness", "install", "--adapter",
                              "claude", "--dest", str(setup["tmp"] / "root"), "--bin-dir", str(setup["tmp"] / "bin")],
                             env=setup["env"], capture_output=True, text=True, timeout=60)
    assert restore.returncode == 0, restore.stderr
    assert wrap(setup, "--touch", str(ran)).returncode == 0 and ran.exists()


def test_the_wrapper_follows_the_head_release(setup, reef):
    project = setup["project"]
    with open(project / "CLAUDE.md", "a") as f:
        f.write("- NEW-BULLET\n")
    assert reef("-C", str(project), "publish", "-m", "more").code == 0
    r = wrap(setup)
    assert r.returncode == 0, r.stderr
    assert "reef: updated the claude harness to release" in r.stderr
    record = ledger_record(project, receipt_of(r.stderr))
    assert record.payload["install"]["step"] == 2 and record.payload["install"]["release_id"] == record.release_id
    assert "NEW-BULLET" in (Path(setup["record"]["agent_dir"]) / "CLAUDE.md").read_text()


def test_exit_status_mirrors_a_signal_death(setup):
    r = wrap(setup, "--kill", "TERM")
    assert r.returncode == 128 + signal.SIGTERM, r.stderr


def test_signals_are_forwarded_to_the_agent(setup):
    ready = setup["tmp"] / "ready"
    proc = subprocess.Popen([str(setup["wrapper"]), "--wait-signal", str(ready)], cwd=setup["code"], env=setup["env"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert (setup["tmp"] / "ready.got").exists()
    assert proc.returncode == 128 + signal.SIGTERM, err


def test_unbound_console_script_uses_the_project_around_cwd(setup, no_real_home):
    env = {k: v for k, v in setup["env"].items() if k not in ("REEF_PROJECT", "REEF_INSTALL_ROOT")}
    r = subprocess.run([str(VENV_BIN / "reef-claude"), "-p", "x"], cwd=setup["project"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    init = json.loads(r.stdout.splitlines()[0])
    assert init["config_dir"].startswith(str(no_real_home / ".local" / "share" / "reef" / "installs"))
    # outside any project there are now two installations (--dest root, and the default root just made): pick one
    r = subprocess.run([str(VENV_BIN / "reef-claude")], cwd=setup["code"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("reef-claude: error: reef-claude is not bound and 2 installations of claude exist: ")
    assert f"{setup['project']} (scenario default, wrapper {setup['wrapper']})" in r.stderr
    assert f"{setup['project']} (scenario default, install root {no_real_home}/.local/share/reef/installs/" in r.stderr
    assert r.stderr.endswith("; run the wrapper of the one you mean, or run reef-claude inside its project\n")
    assert len(r.stderr.splitlines()) == 1


def test_unbound_console_script_without_any_installation_says_how_to_bind(setup, no_real_home, tmp_path):
    env = {k: v for k, v in setup["env"].items() if k not in ("REEF_PROJECT", "REEF_INSTALL_ROOT")}
    env["XDG_DATA_HOME"] = str(tmp_path / "elsewhere")  # another user's data: no installations
    r = subprocess.run([str(VENV_BIN / "reef-claude")], cwd=setup["code"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert r.stderr == ("reef-claude: error: reef-claude is not bound to a reef project: run 'reef harness install "
                        "--adapter claude' in your reef project, or run it inside one\n")


def test_unbound_console_script_runs_as_the_one_installation(setup):
    """The venv's reef-claude, earlier on PATH than the bound wrapper, no longer shadows it: with exactly one
    installation of claude it runs that one (its install root, its project), from any directory."""
    env = {k: v for k, v in setup["env"].items() if k not in ("REEF_PROJECT", "REEF_INSTALL_ROOT", "REEF_SCENARIO")}
    r = subprocess.run([str(VENV_BIN / "reef-claude"), "-p", "x"], cwd=setup["code"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[0])["config_dir"] == setup["record"]["agent_dir"]
    assert ledger_record(setup["project"], receipt_of(r.stderr)).kind == "interaction"


def test_a_missing_agent_binary_says_how_to_install_it(setup):
    env = {k: v for k, v in setup["env"].items() if k != "REEF_CLAUDE_BIN"}
    env.update(PATH="/usr/bin:/bin", REEF_AGENTS_DIR=str(setup["tmp"] / "no-agents"))
    r = subprocess.run([str(setup["wrapper"]), "-p", "x"], cwd=setup["code"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "claude (Claude Code) not found: install it with 'adapters/install-agents.sh claude'" in r.stderr


def test_under_reef_the_wrapper_runs_the_harness_it_is_given_and_records_nothing(setup):
    """A gate episode sets REEF_HARNESS_DIR to the candidate's canonical tree: that is what the agent must see."""
    canonical = Path(__file__).parent / "golden" / "canonical"
    installed = Path(setup["record"]["agent_dir"])
    (installed / "models.json").write_text('{"mine": true}\n')  # the user's own agent settings come along
    r = wrap(setup, "--exit", "5", env={"REEF_HARNESS_DIR": str(canonical)})
    assert r.returncode == 5, r.stderr
    init = json.loads(r.stdout.splitlines()[0])
    assert init["skills"] == ["demo", "review"]
    assert init["loaded"]["CLAUDE.md"] == "# Project instructions" and init["loaded"]["models.json"] == '{"mine": true}'
    assert init["config_dir"] != str(installed) and not Path(init["config_dir"]).exists()  # a throwaway copy
    assert "reef: receipt" not in r.stderr
    assert not (setup["project"] / ".reef" / "scenarios" / "default" / "ledger.jsonl").exists()
    # a compiled directory (no harness.yaml), as reef-claude itself exports to the agent, is not an episode
    r = wrap(setup, env={"REEF_HARNESS_DIR": str(installed)})
    assert r.returncode == 0 and "reef: receipt" in r.stderr


def test_the_wrapper_start_stays_off_heavy_imports(setup):
    """Every agent start goes through the wrapper: once installed, it must not pay for pygit2, YAML, rich, typer or
    filelock."""
    env = {**setup["env"], "REEF_CLAUDE_BIN": "/bin/true", "REEF_PROJECT": str(setup["project"]),
           "REEF_INSTALL_ROOT": str(setup["tmp"] / "root"), "REEF_QUIET": "1"}
    assert subprocess.run([sys.executable, "-m", "reef_cli.cli.wrapper", "claude"], cwd=setup["code"], env=env,
                          timeout=60).returncode == 0  # warms the materialised release
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "reef_cli.cli.wrapper", "claude"], cwd=setup["code"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    names = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    heavy = sorted(n for n in names if n.split(".")[0] in ("pygit2", "jsonschema", "rich", "typer", "click", "filelock")
                   or n.startswith("ruamel.yaml"))
    assert heavy == []


def test_via_serve_flag_env_and_per_agent_mechanism():
    from reef_cli.errors import InvalidInput
    from reef_cli.cli.wrapper import split_via_serve, via_serve_env

    assert split_via_serve(["--via-serve", "http://127.0.0.1:8900/", "-p", "x"], {}) == ("http://127.0.0.1:8900", ["-p", "x"])
    assert split_via_serve(["--via-serve=http://h:1", "-p"], {}) == ("http://h:1", ["-p"])
    assert split_via_serve(["-p", "--via-serve"], {"REEF_VIA_SERVE": "http://h:2"}) == ("http://h:2", ["-p", "--via-serve"])
    assert split_via_serve(["-p"], {}) == (None, ["-p"])
    with pytest.raises(InvalidInput, match="--via-serve needs the gateway's URL"):
        split_via_serve(["--via-serve", "-p"], {})
    with pytest.raises(InvalidInput, match="REEF_VIA_SERVE=ftp://x: expected the gateway's http"):
        split_via_serve([], {"REEF_VIA_SERVE": "ftp://x"})
    claude = via_serve_env("claude", "http://h:1", "rec_1", {"ANTHROPIC_CUSTOM_HEADERS": "x-team: a\nx-reef-session: old",
                                                             "REEF_SERVE_TOKEN": "tok"})
    assert claude["ANTHROPIC_BASE_URL"] == "http://h:1"
    assert claude["ANTHROPIC_CUSTOM_HEADERS"].splitlines() == ["x-team: a", "x-reef-session: rec_1", "x-reef-token: tok"]
    opencode = via_serve_env("opencode", "http://h:1", "rec_1", {})
    assert opencode["OPENAI_BASE_URL"] == opencode["ANTHROPIC_BASE_URL"] == "http://h:1/session/rec_1/v1"
    pi = via_serve_env("pi", "http://h:1", "rec_1", {})
    assert pi == {"REEF_SERVE_URL": "http://h:1", "REEF_SERVE_BASE_URL": "http://h:1/session/rec_1/v1",
                  "REEF_SERVE_SESSION": "rec_1"}


def test_a_hangup_after_the_agent_exited_keeps_its_record_and_receipt(setup):
    """SIGHUP (the terminal closed) while reef-claude redacts a long session's output after the agent exited: the run
    is recorded and remembered for `reef-claude report`, then the wrapper exits 128+1. It used to die unrecorded."""
    from test_runs import LOUD, gone, wait_for

    agent, done = setup["tmp"] / "loud-agent", setup["tmp"] / "done"
    agent.write_text(f"#!{sys.executable}\nimport sys\nsys.argv[1:] = [{str(done)!r}]\n" + LOUD)
    agent.chmod(0o755)
    proc = subprocess.Popen([str(setup["wrapper"]), "-p", "x"], cwd=setup["code"],
                            env={**setup["env"], "REEF_CLAUDE_BIN": str(agent)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    wait_for(proc, done)
    gone(int(done.read_text()))
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGHUP, err
    m = re.search(r"reef-claude: stopped by SIGHUP once the run was recorded \(receipt (\S+)\)\n$", err)
    assert m, err
    assert "reef: this session's transcript was not ingested: `reef ingest` reads it when you want\n" in err
    record = ledger_record(setup["project"], m.group(1))
    assert record.payload["exit_code"] == 0 and record.payload["interrupted"] == ["SIGHUP"]
    r = wrap(setup, "report", "--score", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["payload"]["receipts"] == [m.group(1)]


def test_a_transcript_the_wrapper_cannot_read_is_one_line_and_the_exit_status_stays_the_agents(setup, reef):
    """It used to be ingested in silence: the user never knew the session was not learned from. The exit status
    stays the agent's (a transcript reef cannot parse is not a failed task)."""
    sessions = Path(setup["record"]["agent_dir"]) / "projects" / "p"
    sessions.mkdir(parents=True)
    bad = sessions / "s\x1b[2J.jsonl"
    bad.write_text("not json\n" * 2)
    r = wrap(setup, "-p", "hi", "--exit", "3")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    shown = str(bad).replace("\x1b", "\\x1b")
    assert (f"reef: ingest read 1 transcript(s) only in part ({shown}: skipped 2 line(s) reef could not read (line 1: "
            f"not JSON; 1 more)); 'reef -C {setup['project']} status' lists them\n") in r.stderr
    r = wrap(setup, "-p", "again", "--exit", "0")  # unchanged since: not read again, nothing to say
    assert r.returncode == 0 and "ingest" not in r.stderr
    (entry,) = json.loads(reef("-C", str(setup["project"]), "status", "--json").out)["ingest_failures"]
    assert entry["path"] == str(bad) and entry["whole"] is False  # ... but still not learned from whole


def test_a_corrupt_opencode_database_is_named_after_the_run(reef, tmp_path, agent_bin, no_real_home):
    project = tmp_path / "proj"
    project.mkdir()
    assert reef("-C", str(project), "init").code == 0
    assert reef("-C", str(project), "harness", "install", "--adapter", "opencode", "--dest", str(tmp_path / "root"),
                "--bin-dir", str(tmp_path / "bin")).code == 0
    db = no_real_home / ".local/share/opencode/opencode.db"
    db.parent.mkdir(parents=True)
    db.write_text("not sqlite at all, but long enough to have a header " * 4)
    env = {**os.environ, "REEF_OPENCODE_BIN": str(agent_bin), "FAKE_AGENT_DIR_VAR": "OPENCODE_CONFIG_DIR"}
    r = subprocess.run([str(tmp_path / "bin" / "reef-opencode"), "run", "hi"], cwd=project, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (f"reef: ingest skipped 1 transcript(s) ({db}: file is not a database); 'reef -C {project} status' lists "
            "them\n") in r.stderr
    assert reef("-C", str(project), "status").out.splitlines()[1].endswith(
        f"(latest: {db}: file is not a database); 'reef status --json' lists them")


def test_an_ingest_that_fails_whole_is_one_line_not_a_traceback(setup):
    state = setup["project"] / ".reef" / "scenarios" / "default" / "ingest.json"
    state.mkdir()  # reef's own ingest state of the wrong kind: ingest stops before reading any transcript
    r = wrap(setup, "-p", "hi", "--exit", "5")
    assert r.returncode == 5 and "Traceback" not in r.stderr
    assert f"reef: could not ingest this session's transcript: [Errno 21] Is a directory: '{state}'\n" in r.stderr


def test_install_records_and_the_wrappers_session_file_are_owner_only(setup):
    """.reef/installs was made with the umask's 0755 and its records and the wrapper's sessions file written 0644:
    `reef doctor` then warned about reef's own files (the sessions file lists this user's receipts). Now 0700 and
    0600, as all of .reef, whatever the umask."""
    old = os.umask(0o022)
    try:
        assert wrap(setup, "-p", "x").returncode == 0
    finally:
        os.umask(old)
    installs = setup["project"] / ".reef" / "installs"
    modes = {p.name.split(".", 1)[-1]: oct(p.stat().st_mode & 0o777) for p in [installs, *installs.iterdir()]}
    assert modes == {"installs": "0o700", "json": "0o600", "sessions.json": "0o600",
                     "lock": "0o600", "sessions.json.lock": "0o600"}


def test_a_fifo_at_the_wrappers_session_file_is_not_waited_on(setup):
    """`reef-claude` (after the agent) and `reef-claude report` read .reef/installs/<record>.sessions.json with a
    plain open(): a FIFO there hung them for good. Read as nothing now; the next session's write replaces it."""
    from conftest import planted_fifo

    record = next((setup["project"] / ".reef" / "installs").glob("claude-*.json"))
    with planted_fifo(record.with_name(record.stem + ".sessions.json")) as path:
        rep = wrap(setup, "report", "--score", "1")
        run = wrap(setup, "-p", "x")
    assert rep.returncode == 4 and "no reef-claude session to report on in this shell" in rep.stderr
    assert run.returncode == 0, run.stderr
    assert path.is_file() and wrap(setup, "report", "--score", "1").returncode == 0
