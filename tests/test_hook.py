"""reef's Claude Code SessionEnd/Stop hook: merged into the user's settings without touching anything else, and a
hook process that never fails or blocks the agent (exit 0, detached work, no-op outside a project)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from test_evolve import init_project

GOLDEN = Path(__file__).parent / "golden" / "transcripts"


def install(reef, root, tmp_path, *args):
    return reef("-C", str(root), "harness", "install", "--adapter", "claude", "--dest", str(tmp_path / "inst"),
                "--bin-dir", str(tmp_path / "bin"), "--json", *args)


def test_install_merges_the_hook_and_keeps_the_users_settings(reef, tmp_path):
    root, _ = init_project(reef, tmp_path)
    settings = Path(os.environ["HOME"]) / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    mine = {"type": "command", "command": "notify-send done"}
    settings.write_text(json.dumps({"theme": "dark", "hooks": {"Stop": [{"hooks": [mine]}]}}))
    r = install(reef, root, tmp_path)
    assert r.code == 0, r.err
    assert json.loads(r.out)["hook"] == {"settings": str(settings), "changed": True}
    doc = json.loads(settings.read_text())
    assert doc["theme"] == "dark" and doc["hooks"]["Stop"][0] == {"hooks": [mine]}
    (ours,) = doc["hooks"]["SessionEnd"][0]["hooks"]
    assert ours["command"].endswith("-m reef_cli.hook claude") and ours["timeout"] == 10
    assert doc["hooks"]["Stop"][1]["hooks"] == [ours]
    again = install(reef, root, tmp_path)
    assert json.loads(again.out)["hook"]["changed"] is False
    assert json.loads(settings.read_text()) == doc


def test_no_hook_and_a_broken_settings_file(reef, tmp_path):
    root, _ = init_project(reef, tmp_path)
    settings = Path(os.environ["HOME"]) / ".claude" / "settings.json"
    assert json.loads(install(reef, root, tmp_path, "--no-hook").out)["hook"] is None and not settings.exists()
    settings.parent.mkdir(parents=True)
    settings.write_text("{not json")
    r = install(reef, root, tmp_path)
    assert r.code == 4 and "settings.json is not valid JSON" in r.err and "--no-hook" in r.err
    assert settings.read_text() == "{not json"


def test_install_updates_a_symlinked_private_settings_file_where_it_points(reef, tmp_path):
    """rv-attack: a settings.json linked from a dotfiles repository was replaced by a plain file (the repository's
    copy never got the hook, the link was gone), and one kept 0600 because it holds an API key under "env" came
    back 0644, readable by every user."""
    root, _ = init_project(reef, tmp_path)
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    real.write_text(json.dumps({"env": {"ANTHROPIC_API_KEY": "sk-ant-kept-private"}}))
    os.chmod(real, 0o600)
    settings = Path(os.environ["HOME"]) / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.symlink_to(real)
    r = install(reef, root, tmp_path)
    assert r.code == 0, r.err
    assert settings.is_symlink() and os.readlink(settings) == str(real)
    doc = json.loads(real.read_text())
    assert doc["env"] == {"ANTHROPIC_API_KEY": "sk-ant-kept-private"} and doc["hooks"]["Stop"]
    assert os.stat(real).st_mode & 0o777 == 0o600
    assert sorted(p.name for p in dotfiles.iterdir()) == ["claude-settings.json"]


def hook(stdin: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reef_cli.hook", "claude"], input=stdin, cwd=cwd, text=True,
                          capture_output=True, env={**os.environ, **env}, timeout=30)


def test_the_hook_ingests_its_session_detached_and_never_fails(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    transcript = tmp_path / "t.jsonl"
    shutil.copy(GOLDEN / "claude.jsonl", transcript)
    event = {"session_id": "27afa82b-71ef-4a2b-a9c2-2776c6f477ec", "transcript_path": str(transcript),
             "cwd": str(root), "hook_event_name": "SessionEnd"}
    for bad in ("", "not json", json.dumps({"cwd": str(tmp_path / "nowhere")})):
        r = hook(bad, tmp_path)
        assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    r = hook(json.dumps(event), tmp_path, REEF_HOOK_ACTIVE="1")  # inside reef: nothing
    assert r.returncode == 0
    started = time.monotonic()
    r = hook(json.dumps(event), tmp_path)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(rec.kind == "report" for rec in ledger.iter_records()):
        time.sleep(0.2)
    kinds = [rec.kind for rec in ledger.iter_records()]
    assert kinds.count("session") == 2 and kinds.count("report") == 1, kinds
    assert time.monotonic() - started < 20


def test_a_transcript_the_hook_cannot_read_shows_in_status_until_it_reads_clean(reef, tmp_path):
    """The hook's output reaches no one (and exit 2 would keep Claude Code from stopping): a transcript it could not
    read used to be lost without a word. Now `reef status` names it, and the next clean read clears it."""
    root, ledger = init_project(reef, tmp_path)
    transcript = tmp_path / "t\x1b[2J.jsonl"  # printed escaped, never as a terminal sequence
    good = (GOLDEN / "claude.jsonl").read_text()
    transcript.write_text("not json at all\n" * 3 + good)
    event = {"session_id": "27afa82b-71ef-4a2b-a9c2-2776c6f477ec", "transcript_path": str(transcript),
             "cwd": str(root), "hook_event_name": "Stop"}
    r = hook(json.dumps(event), tmp_path)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    failed = root / ".reef" / "scenarios" / "default" / "ingest-failed.json"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not failed.exists():
        time.sleep(0.1)
    st = reef("-C", str(root), "status")
    assert st.code == 0
    line = next(x for x in st.out.splitlines() if x.startswith("ingest: "))
    assert line.startswith("ingest: 1 transcript(s) not fully ingested since ")
    assert line.endswith(f"(latest: {tmp_path}/t\\x1b[2J.jsonl: skipped 3 line(s) reef could not read (line 1: "
                         "not JSON; 2 more)); 'reef status --json' lists them")
    (entry,) = json.loads(reef("-C", str(root), "status", "--json").out)["ingest_failures"]
    assert entry["path"] == str(transcript) and entry["whole"] is False
    assert [rec.kind for rec in ledger.iter_records()].count("session") == 2  # the rest of it was learned from
    transcript.write_text(good)  # repaired: the next read clears it
    from reef_cli.hook import ingest_now  # what the hook's detached child runs, in-process this time

    ingest_now(json.dumps(event).encode(), dict(os.environ))
    assert json.loads(reef("-C", str(root), "status", "--json").out)["ingest_failures"] == []
    assert not any(x.startswith("ingest: ") for x in reef("-C", str(root), "status").out.splitlines())


def test_an_ingest_the_hook_could_not_run_at_all_shows_in_status(reef, tmp_path):
    """A failure outside any one file (here reef's own ingest state of the wrong kind) is recorded against the
    hook's transcript: before, only ingest-hook.log, which nothing reads, had it."""
    from reef_cli.hook import ingest_now

    root, _ = init_project(reef, tmp_path)
    transcript = tmp_path / "t.jsonl"
    shutil.copy(GOLDEN / "claude.jsonl", transcript)
    state = root / ".reef" / "scenarios" / "default" / "ingest.json"
    state.mkdir()
    event = {"session_id": "27afa82b-71ef-4a2b-a9c2-2776c6f477ec", "transcript_path": str(transcript),
             "cwd": str(root), "hook_event_name": "SessionEnd"}
    assert ingest_now(json.dumps(event).encode(), dict(os.environ)) == 0  # what the detached child runs
    (entry,) = json.loads(reef("-C", str(root), "status", "--json").out)["ingest_failures"]
    assert entry["path"] == str(transcript) and entry["whole"] is True
    assert entry["why"] == f"not ingested: IsADirectoryError: [Errno 21] Is a directory: '{state}'"


TOKEN = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"  # a GitHub token's shape, in a directory name


def test_what_the_hook_stores_of_an_error_is_redacted_one_line_and_bounded(reef, tmp_path):
    """The hook wrote an exception's text to ingest-hook.log and ingest-failed.json as it was: a path, a URL with
    credentials or a token from the transcript can be in it, and reef never stores a secret. Now both hold the
    redacted text, on one line (the session id comes from the hook's input), cut to about LINE_MAX characters."""
    from reef_cli.hook import LINE_MAX, ingest_now

    deep = tmp_path / TOKEN / ("d" * 200) / ("e" * 200) / ("f" * 200) / ("g" * 200)
    deep.mkdir(parents=True)
    root, _ = init_project(reef, deep)
    transcript = tmp_path / "t.jsonl"
    shutil.copy(GOLDEN / "claude.jsonl", transcript)
    state = root / ".reef" / "scenarios" / "default" / "ingest.json"
    state.mkdir()  # an ingest that cannot run at all: its exception names this path, token and all
    event = {"session_id": "s\nForged line", "transcript_path": str(transcript), "cwd": str(root),
             "hook_event_name": "SessionEnd"}
    assert ingest_now(json.dumps(event).encode(), dict(os.environ)) == 0
    log = (root / ".reef" / "scenarios" / "default" / "ingest-hook.log").read_text()
    why = json.loads((root / ".reef" / "scenarios" / "default" / "ingest-failed.json").read_text())
    (entry,) = why["files"].values()
    for text in (log, entry["why"]):
        assert TOKEN not in text and "[REDACTED:github_token]" in text
        assert text.rstrip("\n").count("\n") == 0 and len(text) <= LINE_MAX + 20
    assert log.startswith("SessionEnd s\\x0aForged line: IsADirectoryError: [Errno 21] Is a directory: ")
    assert log.endswith(" [...]\n")


def test_the_hook_log_is_rotated_not_grown_without_end(tmp_path):
    """A hook failing after every session appended forever; past LOG_MAX the log moves to .1 (one old log kept)."""
    from reef_cli.hook import LOG_MAX, log_failure

    log = tmp_path / "ingest-hook.log"
    log.write_bytes(b"x" * (LOG_MAX + 1))
    log_failure(log, "SessionEnd s: boom")
    assert log.read_text() == "SessionEnd s: boom\n" and (tmp_path / "ingest-hook.log.1").stat().st_size == LOG_MAX + 1
