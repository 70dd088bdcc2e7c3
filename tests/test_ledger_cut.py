"""An acknowledged record cut off the ledger's end is reported, never trimmed as a crash's torn write.

A crashed writer's half line was never acknowledged and is cut off quietly by the next writer (tests/test_ledger.py);
the same bytes left by `truncate -s -20` on a record that was appended, synced and acknowledged are a lost record:
`reef ledger verify` fails naming the file, the record and the offset, appends refuse (nothing changed), and
`reef repair ledger --accept-loss` keeps the cut bytes aside and records the loss in the chain."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import reef_init, run_reef
from reef_cli.errors import DamagedState
from reef_cli.ledger import Ledger

LEDGER = Path(".reef/scenarios/default/ledger.jsonl")

APPEND = textwrap.dedent("""
    import sys
    from reef_cli.errors import ReefError
    from reef_cli.ledger import Ledger
    with Ledger(sys.argv[1], "default") as ledger:
        try:
            for i in range(int(sys.argv[2])):
                print(ledger.append("interaction", {"i": i}, release_id="r", content_id="c").record_id, flush=True)
        except ReefError as exc:
            print(exc, file=sys.stderr)
            sys.exit(int(exc.exit_code))
""")


def append(path: Path, n: int) -> subprocess.CompletedProcess:
    """Append `n` records from a separate process (the acknowledgement is the printed id)."""
    return subprocess.run([sys.executable, "-c", APPEND, str(path), str(n)], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    reef_init(tmp_path)  # in-process: set-up, not under test
    assert append(tmp_path / LEDGER, 4).returncode == 0
    return tmp_path


def test_a_cut_acknowledged_last_record_fails_verify_and_appends_and_is_kept_by_repair(project: Path) -> None:
    path = project / LEDGER
    last = json.loads(path.read_bytes().splitlines()[-1])
    whole = path.stat().st_size
    subprocess.run(["truncate", "-s", "-20", str(path)], check=True)
    damaged = path.read_bytes()

    records_end = damaged.rfind(b"\n") + 1
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 4, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert lines[0] == (
        f"reef: error: ledger {path} lost acknowledged records: record seq 4 (hash {last['hash'][:16]}) was "
        f"acknowledged ending at offset {whole}, but the file's complete records end at offset {records_end} (seq 3), "
        f"followed by {len(damaged) - records_end} bytes of a cut line, so 1 acknowledged record (seq 4) is missing; "
        f"restore the ledger from a backup, or record "
        f"the loss with 'reef repair ledger --accept-loss' (it keeps the cut bytes aside; nothing was changed)"
    )
    assert json.loads(run_reef("ledger", "verify", "--json", cwd=project).stdout)["problem"] == "cut"

    r = append(path, 1)  # a later writer refuses rather than trimming the record as a torn write
    assert r.returncode == 4 and "lost acknowledged records: record seq 4" in r.stderr and not r.stdout
    assert path.read_bytes() == damaged
    r = run_reef("repair", "ledger", cwd=project)
    assert r.returncode == 4 and "record seq 4" in r.stderr
    assert path.read_bytes() == damaged

    r = run_reef("repair", "ledger", "--accept-loss", cwd=project)
    assert r.returncode == 0, r.stderr
    kept = list(path.parent.glob("ledger.jsonl.cut-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == damaged[records_end:]
    assert f"kept in {kept[0].name}" in r.stdout and "record seq 4 is lost" in r.stdout  # it said "records up to"
    cut = json.loads(path.read_bytes().splitlines()[-1])
    assert cut["kind"] == "ledger_cut" and cut["seq"] == 4
    assert cut["payload"]["acknowledged"] == {"seq": 4, "hash": last["hash"][:16], "end": whole}
    assert run_reef("ledger", "verify", cwd=project).returncode == 0
    assert append(path, 1).returncode == 0


def test_whole_records_cut_in_place_are_reported_too(project: Path) -> None:
    path = project / LEDGER
    lines = path.read_bytes().splitlines(keepends=True)
    with open(path, "r+b") as handle:  # `head -n 2` written back into the same file
        handle.truncate(len(b"".join(lines[:2])))
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 4 and "record seq 4" in r.stderr and "followed by" not in r.stderr, r.stderr
    assert append(path, 1).returncode == 4
    assert path.read_bytes() == b"".join(lines[:2])


def test_a_writer_killed_mid_write_leaves_a_torn_line_that_is_still_cut_quietly(project: Path) -> None:
    """The never-acknowledged half line of a writer killed with SIGKILL inside its write: repaired, not refused."""
    path = project / LEDGER
    intact = path.read_bytes()
    child = textwrap.dedent("""
        import os, signal, sys
        import reef_cli.ledger.writer as writer
        from reef_cli.ledger import Ledger
        real = os.write
        def half(fd, data):
            real(fd, data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        writer.os.write = half
        with Ledger(sys.argv[1], "default") as ledger:
            ledger.append("interaction", {"dies": True}, release_id="r", content_id="c")
    """)
    proc = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert len(path.read_bytes()) > len(intact)
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = append(path, 1)
    assert r.returncode == 0 and "cut a torn last line" in r.stderr
    assert path.read_bytes().startswith(intact) and Ledger(path, "default").verify().ok


def test_a_removed_ledger_is_a_loss_until_it_is_recorded(tmp_path: Path) -> None:
    """A removed ledger whose `.sync` page stays was recreated empty by the next append, the acknowledged records
    gone without a word (the mark was forgotten as an old file's). It is a loss now: refused and reported until
    `accept_cut` records it; the new file, whatever inode it gets, is then held to its own records only."""
    path = tmp_path / "ledger.jsonl"
    assert append(path, 5).returncode == 0
    path.unlink()
    with Ledger(path, "default") as ledger:
        with pytest.raises(DamagedState, match=f"ledger {path} lost acknowledged records: record seq 5 .* but the file "
                                               f"is gone, so every record up to seq 5 is missing"):
            ledger.append("interaction", {}, release_id="r", content_id="c")
        assert not path.exists()
        assert ledger.verify().problem == "cut"
        recorded = ledger.accept_cut()
        assert recorded is not None and recorded.seq == 1 and recorded.payload["why"] == "gone"
        assert ledger.append("interaction", {}, release_id="r", content_id="c").seq == 2
        assert ledger.verify().ok and ledger.acknowledged_cut(thorough=True) is None
    for name in ("ledger.jsonl", "ledger.jsonl.sync"):  # removed with its page: a fresh start, nothing to hold it to
        (tmp_path / name).unlink()
    with Ledger(path, "default") as ledger:
        assert ledger.append("interaction", {}, release_id="r", content_id="c").seq == 1
        assert ledger.verify().ok


def test_compaction_moves_the_mark_to_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    assert append(path, 6).returncode == 0
    with Ledger(path, "default") as ledger:
        ledger.compact(keep=2)
        assert ledger.verify().ok
    assert append(path, 1).returncode == 0
    with Ledger(path, "default") as ledger:
        assert ledger.verify().ok and ledger.acknowledged_cut() is None


def test_append_refuses_in_process_with_damaged_state(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path, "default") as ledger:
        ledger.append("interaction", {}, release_id="r", content_id="c")
    os.truncate(path, path.stat().st_size - 5)
    with Ledger(path, "default") as ledger:
        with pytest.raises(DamagedState, match=f"ledger {path} lost acknowledged records: record seq 1"):
            ledger.append("interaction", {}, release_id="r", content_id="c")


def test_reef_run_refuses_before_running_the_command_on_a_cut_ledger(tmp_path):
    """`reef run` ran the agent's whole session and then could not record it (exit 4, the receipt lost): on a
    ledger with an acknowledged record cut off, it now says so before running anything."""
    from conftest import reef_init, run_reef

    project = tmp_path / "proj"
    project.mkdir()
    reef_init(project)
    assert run_reef("run", "--", "true", cwd=project).returncode == 0
    ledger = project / ".reef" / "scenarios" / "default" / "ledger.jsonl"
    with open(ledger, "r+b") as handle:
        handle.truncate(ledger.stat().st_size - 20)
    marker = tmp_path / "ran"
    r = run_reef("run", "--", "touch", str(marker), cwd=project)
    assert r.returncode == 4 and "lost acknowledged records" in r.stderr and not marker.exists(), r.stderr


def test_a_crash_while_a_removed_ledgers_loss_is_recorded_leaves_it_reported_then_recordable(tmp_path):
    """`accept_cut` of a removed ledger creates the new file before its `ledger_cut` record: killed in between, the
    new, empty file (often given the old inode number) still reads as the loss, never as intact, and a second
    repair records it once."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path, "default")
    for i in range(3):
        ledger.append("interaction", {"i": i}, release_id=None, content_id=None)
    ledger.close()
    path.unlink()
    code = ("import os, signal, sys\nfrom reef_cli.ledger import writer, Ledger\n"
            "writer.fsync_dir = lambda path: os.kill(os.getpid(), signal.SIGKILL)\n"
            "Ledger(sys.argv[1], 'default').accept_cut()\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True)
    assert r.returncode == -signal.SIGKILL and path.exists() and path.stat().st_size == 0
    again = Ledger(path, "default")
    assert again.verify().problem == "cut"
    with pytest.raises(DamagedState, match="record seq 3"):
        again.append("interaction", {"i": 1}, release_id=None, content_id=None)
    assert again.accept_cut().seq == 1 and again.accept_cut() is None
    again.append("interaction", {"i": 1}, release_id=None, content_id=None)
    assert [rec.kind for rec in again.iter_records()] == ["ledger_cut", "interaction"] and again.verify().ok


@pytest.mark.parametrize("name", ["ledger.jsonl", "ledger.jsonl.sync", "ledger.jsonl.idx", "ledger.jsonl.lock"])
def test_a_symlink_planted_for_a_ledger_state_file_is_refused_and_its_target_untouched(tmp_path, name):
    """A hostile pass pointed `ledger.jsonl.sync` at /etc/passwd: `reef run` wrote its sync page into it (the first
    bytes overwritten, the file padded to 4 KiB). No state file of the ledger is opened through a symlink now."""
    project = tmp_path / "proj"
    project.mkdir()
    reef_init(project)
    first = run_reef("run", "--", "true", cwd=project)
    assert first.returncode == 0
    receipt = first.stderr.split("receipt ", 1)[1].split()[0]
    state = project / ".reef" / "scenarios" / "default"
    victim = tmp_path / "victim"
    victim.write_bytes(b"VICTIM\n")
    link = state / name
    if link.exists():
        link.unlink()
    link.symlink_to(victim)
    # the index is opened by a lookup (show, an idempotent report), the rest by any append
    r = run_reef(*(("ledger", "show", receipt) if name.endswith(".idx") else ("run", "--", "true")), cwd=project)
    assert r.returncode == 4 and "is a symlink" in r.stderr and str(link) in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert victim.read_bytes() == b"VICTIM\n"


def test_repair_names_a_record_damaged_inside_the_ledger_instead_of_nothing_is_lost(project: Path) -> None:
    """A record edited in the middle of the ledger is not at its end: neither a cut nor a missing anchor. `reef
    repair ledger` said "nothing is lost" (exit 0) over it while `reef ledger verify` failed; it now names the
    line and says what can mend it, with or without --accept-loss, and changes nothing."""
    assert append(project / LEDGER, 4).returncode == 0
    lines = (project / LEDGER).read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"kind"', b'"kimd"', 1)
    (project / LEDGER).write_bytes(b"\n".join(lines))
    before = (project / LEDGER).read_bytes()
    for extra in ((), ("--accept-loss",)):
        r = run_reef("repair", "ledger", *extra, cwd=project)
        assert r.returncode == 4 and r.stdout == "", (extra, r.stdout)
        assert r.stderr.count("\n") == 1 and "line 2 is not a ledger record" in r.stderr
        assert "cannot mend a record damaged inside the ledger: restore the file from a backup" in r.stderr
    assert (project / LEDGER).read_bytes() == before


def test_accept_loss_over_a_line_damaged_inside_refuses_before_writing(project: Path) -> None:
    """A middle line cut in half also reads as a missing release anchor: --accept-loss recorded an anchor_loss
    (one more line per try) and then refused over the damage. The damage is now judged first: nothing written."""
    (project / "CLAUDE.md").write_text((project / "CLAUDE.md").read_text() + "- a rule\n")
    assert run_reef("publish", "-m", "a release anchors the ledger's end", cwd=project).returncode == 0
    assert run_reef("run", "--", "true", cwd=project).returncode == 0
    lines = (project / LEDGER).read_bytes().split(b"\n")
    lines[2] = lines[2][: len(lines[2]) // 2]
    (project / LEDGER).write_bytes(b"\n".join(lines))
    before = (project / LEDGER).read_bytes()
    for _ in range(2):
        r = run_reef("repair", "ledger", "--accept-loss", cwd=project)
        assert r.returncode == 4 and "line 3 is not a ledger record" in r.stderr, r.stderr
    assert (project / LEDGER).read_bytes() == before


def _copied_and_cut(project: Path, tmp_path: Path) -> tuple[Path, bytes]:
    """`cp -a` of the project (same bytes, new inode numbers, the `.sync` page copied with the ledger), then the
    copy's ledger cut 20 bytes into its last, acknowledged record."""
    copy = tmp_path.with_name(tmp_path.name + "-copy")
    subprocess.run(["cp", "-a", str(project), str(copy)], check=True)
    path = copy / LEDGER
    assert path.stat().st_ino != (project / LEDGER).stat().st_ino
    subprocess.run(["truncate", "-s", "-20", str(path)], check=True)
    return copy, path.read_bytes()


def test_a_copied_projects_cut_ledger_is_reported_not_trimmed(project: Path, tmp_path: Path) -> None:
    """The acknowledged mark was keyed by inode: in a `cp -a` copy (new inodes) it was ignored, so verify said
    "intact" and the next writer trimmed the acknowledged record as a crash's torn line. The mark belongs to the
    ledger's path: verify reports the loss and `reef run` refuses, the copy unchanged."""
    copy, damaged = _copied_and_cut(project, tmp_path)
    r = run_reef("ledger", "verify", cwd=copy)
    assert r.returncode == 4 and "lost acknowledged records: record seq 4" in r.stderr, (r.stdout, r.stderr)
    assert str(copy / LEDGER) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    marker = tmp_path / "ran"
    r = run_reef("run", "--", "touch", str(marker), cwd=copy)
    assert r.returncode == 4 and "lost acknowledged records" in r.stderr and not marker.exists(), r.stderr
    assert (copy / LEDGER).read_bytes() == damaged
    assert run_reef("ledger", "verify", cwd=project).returncode == 0  # the original is untouched


def test_a_writer_refuses_to_trim_a_copied_projects_cut_ledger(project: Path, tmp_path: Path) -> None:
    """The writer's own check (an append from any command, and `reef repair ledger --accept-loss`, which asks the
    writer to set the cut aside) compared inodes only, so in a copy it trimmed the cut record as a torn line."""
    copy, damaged = _copied_and_cut(project, tmp_path)
    r = append(copy / LEDGER, 1)
    assert r.returncode == 4 and "lost acknowledged records: record seq 4" in r.stderr, r.stderr
    assert (copy / LEDGER).read_bytes() == damaged
    r = run_reef("repair", "ledger", "--accept-loss", cwd=copy)
    assert r.returncode == 0 and "record seq 4 is lost" in r.stdout, r.stderr
    assert run_reef("ledger", "verify", cwd=copy).returncode == 0


def test_repair_ledger_json_prints_one_object_in_every_outcome(project: Path) -> None:
    """`reef repair ledger --json` printed `null` when nothing was lost, and nothing at all on stdout when it
    refused. It prints one object whatever the outcome, with the exit code the text form has."""
    def repair(*extra: str) -> tuple[int, dict, str]:
        r = run_reef("repair", "ledger", "--json", *extra, cwd=project)
        text = run_reef("repair", "ledger", *extra, cwd=project) if not extra else None
        if text is not None:
            assert text.returncode == r.returncode  # the same exit code as without --json
        return r.returncode, json.loads(r.stdout), r.stderr

    code, out, err = repair()
    assert code == 0 and err == ""
    assert out == {"outcome": "intact", "ok": True, "problem": None, "anchors_checked": 1, "recorded": [],
                   "message": "ledger holds all 1 release anchor(s): nothing is lost"}
    code, out, _ = repair("--accept-loss")  # nothing to accept: the same answer, nothing written
    assert code == 0 and out["outcome"] == "intact" and out["recorded"] == []

    path = project / LEDGER
    subprocess.run(["truncate", "-s", "-20", str(path)], check=True)
    code, out, err = repair()
    assert code == 4 and out["outcome"] == "loss_found" and out["ok"] is False and out["problem"] == "cut"
    assert "lost acknowledged records: record seq 4" in out["message"] and out["message"] in err
    code, out, _ = repair("--accept-loss")
    assert code == 0 and out["outcome"] == "loss_recorded" and out["ok"] is True
    assert [r["kind"] for r in out["recorded"]] == ["ledger_cut"] and "record seq 4 is lost" in out["message"]

    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"kind"', b'"kimd"', 1)
    path.write_bytes(b"\n".join(lines))
    code, out, err = repair()
    assert code == 4 and out["outcome"] == "damaged" and "line 2 is not a ledger record" in out["message"]
    assert err.count("\n") == 1 and out["message"] in err


# (the state file, the commands that touch it and so refuse): every other command goes on as if it were not there
_TOUCHED = {
    "ledger.jsonl.lock": {"run", "report", "report-id", "show", "compact"},
    "ledger.jsonl.idx": {"report", "report-id", "show", "compact"},
    "ledger.jsonl.sync": {"run", "report", "report-id", "verify", "show", "repair", "compact"},
}


@pytest.mark.parametrize("name", sorted(_TOUCHED))
def test_a_directory_where_a_ledger_state_file_goes_is_one_line_naming_it_and_exit_4(tmp_path, name):
    """A directory in place of the ledger's lock, index or sync page gave "cannot open the ledger files next to
    .../ledger.jsonl: Is a directory" (exit 1, naming the wrong file) from some commands and "... is a directory
    where reef expects a file" (exit 4) from others, and `reef run` ran the whole command before failing to record
    it. Now every command that touches the path says the same line naming it, exit 4, before changing anything."""
    project = tmp_path / "proj"
    project.mkdir()
    reef_init(project)  # set-up, in-process
    first = run_reef("run", "--", "true", cwd=project)
    receipt = first.stderr.split("receipt ", 1)[1].split()[0]
    state = project / ".reef" / "scenarios" / "default"
    target = state / name
    if target.exists():
        target.unlink()
    target.mkdir()
    before = (state / "ledger.jsonl").read_bytes()
    marker = tmp_path / "ran"
    commands = {
        "run": ("run", "--", "touch", str(marker)), "report": ("report", "--score", "1", "--receipt", receipt),
        "report-id": ("report", "--score", "1", "--receipt", receipt, "--id", "r1"), "verify": ("ledger", "verify"),
        "show": ("ledger", "show", receipt), "status": ("status",), "reflect": ("harness", "reflect"),
        "repair": ("repair", "ledger"), "compact": ("ledger", "compact", "--keep", "1"),
    }
    line = f"reef: error: {target} is a directory where reef expects a file; move it away (nothing was changed by " \
           f"this command)\n"
    for label, args in commands.items():
        r = run_reef(*args, cwd=project)
        if label in _TOUCHED[name]:
            assert (r.returncode, r.stderr) == (4, line), (label, r.returncode, r.stderr)
        else:
            assert r.returncode == 0 and "error" not in r.stderr, (label, r.returncode, r.stderr)
    if name.endswith(".sync"):  # verify reads the page: doctor's ledger check says the same, and how to fix it
        r = run_reef("doctor", cwd=project)
        what = line[len("reef: error: "):line.index(";")]
        assert r.returncode == 1 and f"state:ledger       {what}\n" in r.stdout and f"fix: move {target} away" in r.stdout
    after = (state / "ledger.jsonl").read_bytes()
    assert after.startswith(before)  # nothing stored was lost
    if "run" in _TOUCHED[name]:
        assert not marker.exists() and after == before  # refused before the command ran, not after
    target.rmdir()
    assert run_reef("report", "--score", "1", "--receipt", receipt, cwd=project).returncode == 0
    assert run_reef("ledger", "verify", cwd=project).returncode == 0


def test_a_directory_where_a_shells_pending_receipts_lock_goes_is_refused_before_reef_run_runs(tmp_path):
    """`reef run` ran the command and recorded it, then failed on the pending-receipts lock with exit 4 and "nothing
    was changed by this command" (the record was in the ledger, the command's own exit code lost)."""
    project = tmp_path / "proj"
    project.mkdir()
    reef_init(project)  # set-up, in-process
    env = {"REEF_SESSION": "s1"}
    assert run_reef("run", "--", "true", cwd=project, env=env).returncode == 0
    lock = project / ".reef" / "scenarios" / "default" / "pending" / "s-s1.json.lock"
    assert lock.is_file()
    lock.unlink()
    lock.mkdir()
    records = len((project / LEDGER).read_bytes().splitlines())
    marker = tmp_path / "ran"
    r = run_reef("run", "--", "touch", str(marker), cwd=project, env=env)
    assert (r.returncode, r.stderr) == (4, f"reef: error: {lock} is a directory where reef expects a file; move it "
                                           f"away (nothing was changed by this command)\n")
    assert not marker.exists() and len((project / LEDGER).read_bytes().splitlines()) == records
    r = run_reef("report", "--score", "1", cwd=project, env=env)
    assert r.returncode == 4 and str(lock) in r.stderr and r.stderr.count("\n") == 1


def test_the_gateway_answers_503_naming_a_directory_where_the_ledger_lock_goes(tmp_path):
    """Raised as invalid input, the line reached reef serve's clients as a 400 blaming their request; it is the
    gateway's state that keeps the record from being kept (503); the calls after it are refused before they reach
    the upstream while it is still there, and the call after it is moved away is kept."""
    import urllib.error
    import urllib.request

    from fakes import FakeLLM
    from gateway import Gateway, exchanges, init_project

    project = init_project(tmp_path / "proj")
    lock = project / ".reef" / "scenarios" / "default" / "ledger.jsonl.lock"
    if lock.exists():
        lock.unlink()
    lock.mkdir()
    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'

    def call(url: str) -> tuple[int, dict]:
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with FakeLLM() as llm, Gateway(project, llm.url) as gw:
        status, answer = call(gw.url)
        assert status == 503 and answer["error"]["message"].startswith(f"{lock} is a directory where reef expects"), answer
        calls = len(llm.calls)
        status, answer = call(gw.url)  # still in the way: refused before the upstream, which would bill it
        assert status == 503 and len(llm.calls) == calls, answer
        assert answer["error"]["message"].endswith("move it away (the gateway goes on once it is)"), answer
        lock.rmdir()
        assert call(gw.url)[0] == 200
    assert len(exchanges(project)) == 1
