"""A ledger at the ledger's path that lost acknowledged records is a loss, whatever file it is.

The acknowledged mark (`<ledger>.sync`, reef_cli/ledger/acked.py) is the machine's statement of what reef
acknowledged to callers. A deleted ledger, an older or shorter copy put back under a new inode, a `cp -a` copy cut at
a line boundary, another record where the mark's belongs: each read as "intact" (the mark spoke only for its own
inode, or for a file ending in a torn line), `reef run` appended over it, and the receipts since the last publish
(which no release anchor covers) were gone without a word. Also here: readers refuse a symlinked ledger as writers
do, and a crash at any step of an append or of recording a loss never reads as a loss that did not happen.
"""

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
from test_ledger_cut import LEDGER, append

REMEDY = ("restore the ledger from a backup, or record the loss with 'reef repair ledger --accept-loss' (nothing was "
          "changed)")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    reef_init(root)  # in-process: set-up, not under test
    assert append(root / LEDGER, 4).returncode == 0
    return root


def last_record(path: Path) -> dict:
    return json.loads(path.read_bytes().splitlines()[-1])


def put_back(path: Path, data: bytes) -> None:
    """An older copy put back by a rename (a restore, `git checkout`, an editor's save): a new inode at the path."""
    before = path.stat().st_ino
    path.with_name("restored").write_bytes(data)
    os.replace(path.with_name("restored"), path)
    assert path.stat().st_ino != before


def refused_everywhere(project: Path, tmp_path: Path, line: str) -> None:
    """`reef ledger verify` (text and --json), `reef run` and a plain append all refuse with `line`, exit 4, and
    nothing runs or changes."""
    path = project / LEDGER
    before = path.read_bytes() if path.exists() else None
    r = run_reef("ledger", "verify", cwd=project)
    assert (r.returncode, r.stdout, r.stderr) == (4, "", f"reef: error: {line}\n")
    r = run_reef("ledger", "verify", "--json", cwd=project)
    assert r.returncode == 4 and json.loads(r.stdout)["problem"] == "cut"
    marker = tmp_path / "ran"
    r = run_reef("run", "--", "touch", str(marker), cwd=project)
    assert (r.returncode, r.stderr) == (4, f"reef: error: {line}\n") and not marker.exists()
    r = append(path, 1)
    assert r.returncode == 4 and r.stderr == line + "\n" and not r.stdout
    assert (path.read_bytes() if path.exists() else None) == before
    r = run_reef("repair", "ledger", cwd=project)
    assert (r.returncode, r.stderr) == (4, f"reef: error: {line}\n")


def recorded_then_clean(project: Path, said: str) -> None:
    r = run_reef("repair", "ledger", "--accept-loss", cwd=project)
    assert r.returncode == 0 and said in r.stdout, (r.stdout, r.stderr)
    assert last_record(project / LEDGER)["kind"] == "ledger_cut"
    assert run_reef("ledger", "verify", cwd=project).returncode == 0
    assert run_reef("run", "--", "true", cwd=project).returncode == 0
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert run_reef("repair", "ledger", cwd=project).returncode == 0


def test_a_deleted_ledger_is_a_loss_not_intact(project: Path, tmp_path: Path) -> None:
    path = project / LEDGER
    last, whole = last_record(path), path.stat().st_size
    path.unlink()
    line = (f"ledger {path} lost acknowledged records: record seq 4 (hash {last['hash'][:16]}) was acknowledged "
            f"ending at offset {whole}, but the file is gone, so every record up to seq 4 is missing; {REMEDY}")
    refused_everywhere(project, tmp_path, line)
    assert not path.exists()  # refusing never creates the file
    r = run_reef("ledger", "show", last["record_id"], cwd=project)  # it said "the ledger does not exist yet"
    assert (r.returncode, r.stderr) == (4, f"reef: error: {line}\n")
    r = run_reef("doctor", cwd=project)  # it said "empty (no records yet)"
    assert r.returncode == 1 and f"ledger {path} does not verify: ledger {path} lost acknowledged" in r.stdout
    assert "'reef repair ledger --accept-loss' records the loss" in r.stdout
    recorded_then_clean(project, "the ledger file was gone (a new one holds this record); records seq 1-4 are lost")


def test_a_shorter_ledger_put_back_under_a_new_inode_is_a_loss(project: Path, tmp_path: Path) -> None:
    """The test that left this to the release anchors (tests/test_ledger.py) covered nothing after the last
    publish: here no release anchors any record, so only the mark can tell."""
    path = project / LEDGER
    last, whole = last_record(path), path.stat().st_size
    kept = b"".join(path.read_bytes().splitlines(keepends=True)[:2])
    put_back(path, kept)
    refused_everywhere(project, tmp_path, (
        f"ledger {path} lost acknowledged records: record seq 4 (hash {last['hash'][:16]}) was acknowledged ending at "
        f"offset {whole}, but the file's complete records end at offset {len(kept)} (seq 2), so 2 acknowledged "
        f"records (seq 3..4) are missing; {REMEDY}"))
    recorded_then_clean(project, "records seq 3-4 are lost")


def test_an_emptied_ledger_under_a_new_inode_is_a_loss(project: Path, tmp_path: Path) -> None:
    path = project / LEDGER
    put_back(path, b"")
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 4 and "at offset 0 (seq 0), so 4 acknowledged records (seq 1..4) are missing" in r.stderr
    assert append(path, 1).returncode == 4 and path.read_bytes() == b""


def test_a_copy_cut_at_a_line_boundary_is_a_loss(project: Path, tmp_path: Path) -> None:
    """`cp -a`, then the copy cut exactly after a record (no torn line): only a torn line made the mark speak for a
    file of another inode, so this passed as intact and was appended to."""
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(project), str(copy)], check=True)
    path = copy / LEDGER
    last, whole = last_record(path), path.stat().st_size
    lines = path.read_bytes().splitlines(keepends=True)
    with open(path, "r+b") as handle:
        handle.truncate(len(b"".join(lines[:3])))
    refused_everywhere(copy, tmp_path, (
        f"ledger {path} lost acknowledged records: record seq 4 (hash {last['hash'][:16]}) was acknowledged ending at "
        f"offset {whole}, but the file's complete records end at offset {len(b''.join(lines[:3]))} (seq 3), so 1 "
        f"acknowledged record (seq 4) is missing; {REMEDY}"))
    assert run_reef("ledger", "verify", cwd=project).returncode == 0  # the original is untouched
    recorded_then_clean(copy, "record seq 4 is lost")


def _other_ledger(tmp_path: Path, n: int) -> bytes:
    """A ledger of the same scenario with other records (another project's, an older branch's)."""
    other = tmp_path / "other" / "ledger.jsonl"
    assert append(other, n).returncode == 0
    return other.read_bytes()


@pytest.mark.parametrize("records", [4, 6])
def test_another_record_where_the_acknowledged_one_belongs_is_a_loss(project: Path, tmp_path: Path,
                                                                     records: int) -> None:
    """A file of as many records, or more, whose record at the mark's seq is not the one acknowledged: the chain is
    intact and no record is short, but the acknowledged record is gone."""
    path = project / LEDGER
    last, whole = last_record(path), path.stat().st_size
    other = _other_ledger(tmp_path, records)
    put_back(path, other)
    found = json.loads(other.splitlines()[3])["hash"]
    refused_everywhere(project, tmp_path, (
        f"ledger {path} lost acknowledged records: record seq 4 (hash {last['hash'][:16]}) was acknowledged ending at "
        f"offset {whole}, but seq 4 there is another record (hash {found[:16]}): the file was replaced or rewritten, "
        f"so acknowledged record seq 4 is missing; {REMEDY}"))
    recorded_then_clean(project, "acknowledged record seq 4 was replaced by another and is lost")


def test_what_is_not_a_loss(tmp_path: Path) -> None:
    """A new project (no ledger, no mark), a `cp -a` copy left whole, a compaction, and a ledger removed together
    with its `.sync` page (a deliberate fresh start) all verify and take appends."""
    root = tmp_path / "fresh"
    reef_init(root)
    assert run_reef("ledger", "verify", cwd=root).returncode == 0
    assert run_reef("run", "--", "true", cwd=root).returncode == 0
    assert append(root / LEDGER, 3).returncode == 0
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(root), str(copy)], check=True)
    for project in (copy, root):
        r = run_reef("ledger", "verify", cwd=project)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert run_reef("run", "--", "true", cwd=project).returncode == 0
    r = run_reef("ledger", "compact", "--keep", "1", cwd=copy)
    assert r.returncode == 0, r.stderr
    assert run_reef("ledger", "verify", cwd=copy).returncode == 0
    assert run_reef("run", "--", "true", cwd=copy).returncode == 0
    for name in ("ledger.jsonl", "ledger.jsonl.sync"):
        (root / LEDGER).with_name(name).unlink()
    assert run_reef("ledger", "verify", cwd=root).returncode == 0
    assert run_reef("run", "--", "true", cwd=root).returncode == 0


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_records_with_no_acknowledged_mark_are_never_called_intact(project: Path, reef, how: str) -> None:
    """`.sync` emptied or deleted, then the acknowledged last record cut: verify said "intact", doctor ok, and the
    next append started a new mark that erased the trace. Nothing can tell a cut end now, so verify says the end is
    unchecked and warns (exit 0: a ledger from a reef older than the mark is the same case), doctor warns, and the
    writer that starts the new mark notes it in `.repairs`, which verify lists from then on."""
    from reef_cli.ledger.acked import unmarked

    path = project / LEDGER
    sync = path.with_name("ledger.jsonl.sync")
    sync.write_bytes(b"") if how == "emptied" else sync.unlink()
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    r = reef("ledger", "verify", cwd=project)
    assert (r.code, r.out) == (0, "ledger chain intact: 3 record(s) verified, 1 release anchor(s) held; its end is "
                                  "unchecked (no acknowledged mark)\n")
    assert r.err == f"reef: warning: {unmarked(path, 3)}\n"
    assert json.loads(reef("ledger", "verify", "--json", cwd=project).out)["mark_missing"] is True
    if how == "emptied":
        r = reef("doctor", cwd=project)
        assert "ledger.jsonl.sync holds no acknowledged mark: records cut off its end could not be detected" in r.out
    r = append(path, 1)
    assert r.returncode == 0 and "its 3 record(s) had no acknowledged mark" in r.stderr, r.stderr
    r = reef("ledger", "verify", cwd=project)
    assert (r.code, r.out) == (0, "ledger intact: 4 record(s) verified, 1 release anchor(s) held\n")
    assert "reef: warning: no acknowledged mark was kept for seq 1..3 (a writer started one at " in r.err
    assert append(path, 1).returncode == 0 and len(Ledger(path, "default").verify().repairs) == 1  # said once


def test_appends_refuse_a_chain_broken_before_the_last_acknowledged_record(project: Path, reef, tmp_path: Path) -> None:
    """A record deleted in the middle: `reef ledger verify` exits 4, yet `reef report`, `reef run` and a running
    gateway appended onto the broken chain (a writer looks only at the last record). The mark's record no longer
    ends where it was acknowledged (one read tells), so a writer's first look walks the chain then, and refuses;
    so do `reef run` before it runs anything and a writer that already had the file open. A reformat that keeps
    every record's hash moves the record too, but the walk finds the chain whole and appends go on."""
    path = project / LEDGER
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    running = Ledger(path, "default")
    running.append("interaction", {"i": 4}, release_id="r", content_id="c")
    full = path.read_bytes()
    broken = b"".join(lines[:2] + lines[3:]) + full[len(whole):]
    path.write_bytes(broken)  # in place, as an editor or `sed -i` without a rename does
    third = json.loads(lines[3])["record_id"]
    line = (f"{path}: seq 3 deleted before line 3 (record {third}); the ledger was changed before record seq 5, "
            f"acknowledged ending at offset {len(full)}, so nothing is "
            f"appended to it: restore it from a backup ('reef ledger verify' names the break; nothing was changed)")
    r = append(path, 1)
    assert (r.returncode, r.stderr) == (4, line + "\n")
    with pytest.raises(DamagedState) as refused:
        running.append("interaction", {"i": 5}, release_id="r", content_id="c")
    assert str(refused.value) == line
    marker = tmp_path / "ran"
    r = reef("run", "--", "touch", str(marker), cwd=project)
    assert (r.code, r.err) == (4, f"reef: error: {line}\n") and not marker.exists()
    assert path.read_bytes() == broken
    path.write_bytes(full.replace(b'"seq":2}', b'"seq": 2}', 1))  # the same records, one line reformatted
    assert append(path, 1).returncode == 0 and Ledger(path, "default").verify().ok


# --- readers refuse a symlinked ledger, as writers do -------------------------------------------------------------

_READERS = {
    "verify": ("ledger", "verify"), "verify-json": ("ledger", "verify", "--json"), "tail": ("ledger", "tail"),
    "query": ("ledger", "query", "--json"), "export": ("ledger", "export"), "show": ("ledger", "show", "RECEIPT"),
    "reflect": ("harness", "reflect"), "repair": ("repair", "ledger"), "run": ("run", "--", "true"),
}


def test_readers_refuse_a_symlinked_ledger_like_writers(project: Path, tmp_path: Path) -> None:
    """`reef ledger verify` said "intact" over a ledger that is a symlink (to anything: a file an attacker chose, a
    copy elsewhere) that every writer refuses; tail, query, export and reflect read through it. Every command now
    says the writers' one line, exit 4, and the target is left as it was."""
    receipt = json.loads((project / LEDGER).read_bytes().splitlines()[0])["record_id"]
    victim = tmp_path / "elsewhere" / "ledger.jsonl"
    victim.parent.mkdir()
    victim.write_bytes((project / LEDGER).read_bytes())
    before = victim.read_bytes()
    link = project / LEDGER
    link.unlink()
    link.symlink_to(victim)
    line = (f"reef: error: {link} is a symlink where reef expects a file (reef never follows symlinks in its state); "
            "move it away (nothing was changed by this command)\n")
    for label, args in _READERS.items():
        r = run_reef(*(receipt if a == "RECEIPT" else a for a in args), cwd=project)
        assert (r.returncode, r.stderr) == (4, line), (label, r.returncode, r.stdout, r.stderr)
        assert "intact" not in r.stdout, label
    r = run_reef("doctor", cwd=project)
    assert r.returncode == 1 and line[len("reef: error: "):].split("; move it away")[0] in r.stdout, r.stdout
    assert victim.read_bytes() == before


def test_a_symlinked_state_directory_is_followed(project: Path, tmp_path: Path) -> None:
    """Only the ledger file itself is refused: `.reef` kept on another disk through a symlinked directory works."""
    moved = tmp_path / "disk2" / ".reef"
    moved.parent.mkdir()
    os.rename(project / ".reef", moved)
    (project / ".reef").symlink_to(moved)
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 0 and "5 record(s) verified" not in r.stderr, r.stderr
    assert run_reef("run", "--", "true", cwd=project).returncode == 0
    r = run_reef("ledger", "tail", "--json", cwd=project)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 5
    assert run_reef("doctor", cwd=project).stdout.count("ledger verifies: 5 record(s)") == 1


# --- a crash at any step never reads as a loss that did not happen --------------------------------------------------

KILL = textwrap.dedent("""
    import os, signal, sys
    from reef_cli.ledger import Ledger, acked, compaction, writer
    step = sys.argv[2]
    die = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    real_write, real_sync, real_note = writer.os.write, writer._fdatasync, acked.MarkPage.note
    def write(fd, data):
        if step == "mid-write":
            real_write(fd, data[: len(data) // 2])
            die()
        return real_write(fd, data)
    def sync(fd):
        if step == "before-sync":
            die()
        real_sync(fd)
        if step == "after-sync":
            die()
    def note(self, *args):
        if step == "before-note":  # synced, not yet noted (the same point as after-sync, seen from the mark)
            die()
        real_note(self, *args)
        if step == "after-note":
            die()
    writer.os.write, writer._fdatasync, acked.MarkPage.note = write, sync, note
    if step.startswith("compact"):
        compaction.fsync_dir = die  # the copy swapped in, the mark not yet moved
    ledger = Ledger(sys.argv[1], "default")
    if step.startswith("compact"):
        ledger.compact(keep=int(step.split("-")[1]))
    ledger.append("interaction", {"dies": step}, release_id="r", content_id="c")
""")

_APPEND_STEPS = ["mid-write", "before-sync", "after-sync", "before-note", "after-note", "compact-2", "compact-0"]


@pytest.mark.parametrize("step", _APPEND_STEPS)
def test_a_writer_killed_at_any_step_of_an_append_leaves_no_false_loss(tmp_path: Path, step: str) -> None:
    """SIGKILL at each step of an append (the mark is stored only after the sync it describes: never ahead of the
    file) and of a compaction (the copy swapped in before the mark moves): the ledger verifies, no loss is
    reported, the next append goes on, and every acknowledged record is still there."""
    path = tmp_path / "ledger.jsonl"
    done = append(path, 3)
    assert done.returncode == 0
    acknowledged = done.stdout.split()
    proc = subprocess.run([sys.executable, "-c", KILL, str(path), step], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with Ledger(path, "default") as ledger:
        assert ledger.acknowledged_cut(thorough=True) is None and ledger.acknowledged_cut() is None
        assert ledger.verify().ok, ledger.verify().message
    later = append(path, 1)
    assert later.returncode == 0, later.stderr
    with Ledger(path, "default") as ledger:
        ids = [r.record_id for r in ledger.iter_records()]
        assert ledger.verify().ok and later.stdout.split()[0] in ids
        if not step.startswith("compact"):
            assert ids[:3] == acknowledged


REPAIR_KILL = textwrap.dedent("""
    import os, signal, sys
    from reef_cli.ledger import Ledger, acked, writer
    step = sys.argv[2]
    die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    if step == "kept-aside":
        real = writer.write_atomic
        writer.write_atomic = lambda *a, **k: (real(*a, **k), die())
    elif step == "cut-back":
        writer.Writer._forget_durable_beyond = die
    elif step == "record-synced":
        acked.MarkPage.note = die
    Ledger(sys.argv[1], "default").accept_cut()
""")


@pytest.mark.parametrize("step", ["kept-aside", "cut-back", "record-synced"])
def test_a_repair_killed_at_any_step_leaves_the_loss_reported_or_recorded_once(project: Path, step: str) -> None:
    """`reef repair ledger --accept-loss` killed after keeping the cut bytes aside, after cutting the file back, or
    after its `ledger_cut` record is durable but before the mark moves: the loss is still reported, or recorded
    (never "intact" without the record); a second repair records it once, and the record names the kept bytes."""
    path = project / LEDGER
    subprocess.run(["truncate", "-s", "-20", str(path)], check=True)
    cut = path.read_bytes()[path.read_bytes().rfind(b"\n") + 1 :]
    proc = subprocess.run([sys.executable, "-c", REPAIR_KILL, str(path), step], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    r = run_reef("ledger", "verify", cwd=project)
    kinds = [json.loads(line)["kind"] for line in path.read_bytes().split(b"\n")[:-1]]  # the cut line left out
    if step == "record-synced":
        assert r.returncode == 0 and kinds[-1] == "ledger_cut", r.stderr
    else:
        assert r.returncode == 4 and "lost acknowledged records: record seq 4" in r.stderr, r.stderr
    r = run_reef("repair", "ledger", "--accept-loss", cwd=project)
    assert r.returncode == 0, r.stderr
    kinds = [json.loads(line)["kind"] for line in path.read_bytes().splitlines()]
    assert kinds.count("ledger_cut") == 1 and run_reef("ledger", "verify", cwd=project).returncode == 0
    record = next(json.loads(line) for line in path.read_bytes().splitlines() if b"ledger_cut" in line)
    assert (path.parent / record["payload"]["kept_in"]).read_bytes() == cut
    assert append(path, 1).returncode == 0


def test_a_loss_found_by_a_long_running_writer_is_refused_too(tmp_path: Path) -> None:
    """A writer that holds the ledger open (reef serve) while the file is replaced by a shorter one or removed:
    its next append re-opens the path and refuses instead of appending to, or creating, a file without the
    acknowledged records."""
    path = tmp_path / "ledger.jsonl"
    with Ledger(path, "default") as ledger:
        for i in range(3):
            ledger.append("interaction", {"i": i}, release_id=None, content_id=None)
        kept = b"".join(path.read_bytes().splitlines(keepends=True)[:1])
        put_back(path, kept)
        with pytest.raises(DamagedState, match="so 2 acknowledged records .seq 2..3. are missing"):
            ledger.append("interaction", {}, release_id=None, content_id=None)
        path.unlink()
        with pytest.raises(DamagedState, match="but the file is gone"):
            ledger.append("interaction", {}, release_id=None, content_id=None)
        assert not path.exists()


# --- the `.sync` page emptied under a running writer -----------------------------------------------------------------

EMPTIED = textwrap.dedent("""
    import os, sys
    from reef_cli.ledger import Ledger, group_commit
    path, n, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    sync = path + ".sync"
    if how == "removed":  # look for a new page at every append, not at most every 100 ms
        group_commit._AVERAGE_FRESH_NS = group_commit._FOLLOW_EVERY_NS = 0
    with Ledger(path, "default") as ledger:
        for i in range(n):
            if i == n // 2:
                group_commit.COORDINATE_ABOVE_NS = 0  # the rest led, as on a disk whose syncs take milliseconds
            if i and how == "removed":
                os.unlink(sync) if i % 2 else os.replace(open(path + ".new", "w").name, sync)
            elif i:
                if i % 3 == 0:
                    os.truncate(sync, 0)
                elif i % 3 == 1:
                    open(sync, "w").close()  # what `: > ledger.jsonl.sync` does
                else:
                    os.truncate(sync, 10)  # the leader's fields cut short, the mark gone
            if how == "cut" and i == n - 1:
                data = open(path, "rb").read()
                os.truncate(path, data.rstrip(b"\\n").rfind(b"\\n") + 1)  # the last acknowledged record cut too
            print(ledger.append("interaction", {"i": i}, release_id="r", content_id="c").record_id, flush=True)
""")


def test_a_writer_whose_sync_page_is_emptied_between_appends_goes_on(project: Path) -> None:
    """`: > ledger.jsonl.sync` (or any truncation) while a writer had the page mapped made its next load or store
    SIGBUS, which killed it outright (a gateway with requests in flight). The page is read and written with
    pread/pwrite now: the writer finishes every append, fast and led, the chain verifies, and its next
    acknowledgement writes the mark back (it knew the file it appended to, so nothing is noted)."""
    from reef_cli.ledger import acked

    path = project / LEDGER
    proc = subprocess.run([sys.executable, "-c", EMPTIED, str(path), "8", "keep"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    acknowledged = proc.stdout.split()
    assert len(acknowledged) == 8 and proc.stderr == ""
    records = list(Ledger(path, "default").iter_records())
    assert [r.record_id for r in records[-8:]] == acknowledged and len(records) == 12
    r = run_reef("ledger", "verify", cwd=project)
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert r.stdout.startswith("ledger intact: 12 record(s) verified")
    mark = acked.read(path.with_name("ledger.jsonl.sync"))
    assert (mark.ino, mark.end, mark.seq, mark.hash) == (path.stat().st_ino, path.stat().st_size, 12,
                                                         records[-1].hash[:16])


def test_a_writer_whose_sync_page_is_removed_or_replaced_goes_on_marking_the_file_at_the_path(project: Path) -> None:
    """`rm ledger.jsonl.sync` (or another file renamed over it) under a running writer: a led sync failed ("cannot
    sync ...: No such file or directory") and the writer refused every append after it; unled, its marks went on
    into the removed file, so the path held none while it ran. Now it creates the leader's file again and follows
    the page to the file at the path (checked at most every 100 ms; every append here)."""
    from reef_cli.ledger import acked

    path = project / LEDGER
    proc = subprocess.run([sys.executable, "-c", EMPTIED, str(path), "8", "removed"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert len(proc.stdout.split()) == 8 and proc.stderr == ""
    r = run_reef("ledger", "verify", cwd=project)
    assert (r.returncode, r.stderr) == (0, "") and r.stdout.startswith("ledger intact: 12 record(s) verified")
    assert acked.read(path.with_name("ledger.jsonl.sync")).seq == 12


def test_a_record_cut_while_the_sync_page_was_emptied_is_noted_not_buried(project: Path) -> None:
    """The page emptied and the last acknowledged record cut under a running writer: nothing can tell the cut now,
    so the writer, finding the file changed and the mark gone, notes it in `.repairs` as a new writer over an
    unmarked file does, and verify warns from then on (it used to die of SIGBUS; appending on silently would have
    buried the cut under a new mark)."""
    path = project / LEDGER
    proc = subprocess.run([sys.executable, "-c", EMPTIED, str(path), "3", "cut"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert "its 5 record(s) had no acknowledged mark (ledger.jsonl.sync missing, empty or from an older reef)" in \
        proc.stderr
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 0 and r.stdout.startswith("ledger intact: 6 record(s) verified"), r.stdout + r.stderr
    assert "reef: warning: no acknowledged mark was kept for seq 1..5 (a writer started one at " in r.stderr
