"""The ledger notices what is missing, and the release chain what it lost (issue 10).

Releases anchor the ledger's last record; a ledger cut short of an anchor (truncated, deleted, or cut and grown
again with other records) fails `reef ledger verify` and stops reflect and evolve, exit 4 with one line. An emptied,
deleted or cut release log, or a lost `.reef/git`, is refused instead of starting history again, and
`reef repair releases` rebuilds the log from the store's commits."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import reef_exe, run_reef
from reef_cli.ledger import Ledger, NewRecord

LEDGER = Path(".reef/scenarios/default/ledger.jsonl")
LOG = Path(".reef/scenarios/default/releases.jsonl")


def fill(root: Path, n: int, start: int = 0) -> list:
    with Ledger(root / LEDGER, "default") as ledger:
        return ledger.append_many([NewRecord("interaction", {"i": i}, "r", "c") for i in range(start, start + n)])


def publish_edit(reef, root: Path, text: str) -> dict:
    with open(root / "CLAUDE.md", "a") as handle:
        handle.write(f"\n{text}\n")
    r = reef("-C", str(root), "publish", "-m", text, "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)["release"]


@pytest.fixture
def anchored(reef, tmp_path):
    """A project whose second release anchors a ledger of 5 records, then 3 more records."""
    assert reef("-C", str(tmp_path), "init").code == 0
    records = fill(tmp_path, 5)
    release = publish_edit(reef, tmp_path, "rule two")
    fill(tmp_path, 3, start=5)
    return tmp_path, release, records


def test_a_release_records_the_ledgers_last_record_as_its_anchor(reef, anchored):
    root, release, records = anchored
    assert release["ledger_anchor"] == {"seq": 5, "hash": records[-1].hash}
    first = json.loads(reef("-C", str(root), "log", "--json").out)[-1]  # newest first
    assert first["ledger_anchor"] == {"seq": 0, "hash": "0" * 64}  # init, over an empty ledger
    r = reef("-C", str(root), "ledger", "verify")
    assert r.code == 0 and r.out.strip() == "ledger intact: 8 record(s) verified, 2 release anchor(s) held"


def cut_to(path: Path, lines: int, *, in_place: bool = True) -> None:
    """Keep the first `lines` lines: in place (the writers' acknowledged mark notices too, tests/test_ledger_cut.py),
    or as an old copy put back from a backup of ledger.jsonl alone (its `.sync` page gone, so no mark): a file only
    the anchors can hold to account, which writers grow again."""
    kept = b"".join(path.read_bytes().splitlines(keepends=True)[:lines])
    if in_place:
        path.write_bytes(kept)
    else:
        path.with_name("restored").write_bytes(kept)
        os.replace(path.with_name("restored"), path)
        path.with_name(path.name + ".sync").unlink()


@pytest.mark.parametrize("damage", ["truncated", "deleted", "emptied", "regrown"])
def test_a_ledger_short_of_an_anchor_fails_verify_reflect_and_evolve(reef, anchored, damage):
    root, release, records = anchored
    path = root / LEDGER
    if damage == "truncated":
        cut_to(path, 4)
        why = "the ledger ends at seq 4"
    elif damage == "deleted":
        path.unlink()
        why = "the ledger file is gone"
    elif damage == "emptied":
        path.write_bytes(b"")
        why = "the ledger has no records"
    else:  # cut, then grown past the anchor again by new runs: the chain is intact, the anchored record is not
        cut_to(path, 2, in_place=False)
        fill(root, 6, start=100)
        why = "seq 5 there is another record"
    anchor = f"release {release['release_id']} (step 2) anchors seq 5 hash {records[-1].hash[:16]}"
    for command in (("ledger", "verify"), ("harness", "reflect"), ("harness", "evolve", "--dry-run")):
        r = reef("-C", str(root), *command)
        assert r.code == 4, (command, r.out, r.err)
        lines = r.err.strip().splitlines()
        if damage == "regrown" and command == ("ledger", "verify"):  # the writer that grew it found no mark
            assert lines[1].startswith("reef: warning: no acknowledged mark was kept for seq 1..2 "), r.err
            lines = lines[:1]
        assert len(lines) == 1 and lines[0].startswith("reef: error: ledger "), (command, r.err)
        assert str(path) in lines[0] and anchor in lines[0] and why in lines[0], (command, lines[0])
    r = reef("-C", str(root), "ledger", "verify", "--json")
    result = json.loads(r.out)
    assert r.code == 4 and result["ok"] is False and result["problem"] == "short" and result["first_bad_seq"] == 5
    r = reef("-C", str(root), "repair", "ledger")
    assert r.code == 4 and anchor in r.err and "--accept-loss" in r.err
    r = reef("-C", str(root), "repair", "ledger", "--accept-loss")
    assert r.code == 0 and "anchors of step 2 (seq 5) are given up" in r.out, r.err
    loss = json.loads(reef("-C", str(root), "ledger", "tail", "-n", "1", "--json").out)
    assert loss["kind"] == "anchor_loss" and loss["payload"]["anchors"][0]["release_id"] == release["release_id"]
    assert why in loss["payload"]["anchors"][0]["why"]
    for command in (("ledger", "verify"), ("harness", "reflect", "--dry-run"), ("repair", "ledger")):
        r = reef("-C", str(root), *command)
        assert r.code == 0, (command, r.err)
    assert reef("-C", str(root), "repair", "ledger", "--accept-loss").out.startswith("ledger holds all 2 release")


def test_a_compaction_that_removed_the_anchored_record_still_holds(reef, anchored):
    root, _, _ = anchored
    r = reef("-C", str(root), "ledger", "compact", "--keep", "2")
    assert r.code == 0, r.err
    assert reef("-C", str(root), "ledger", "verify").code == 0
    assert reef("-C", str(root), "harness", "reflect", "--dry-run").code == 0


def test_a_torn_tail_is_repaired_out_loud(reef, anchored):
    root, _, _ = anchored
    path = root / LEDGER
    with open(path, "ab") as handle:
        handle.write(b'{"content_id":"c","created_at":"2026-0')
    code = (
        "import sys; from reef_cli.ledger import Ledger\n"
        "with Ledger(sys.argv[1], 'default') as ledger:\n"
        "    record = ledger.append('interaction', {'after': 'torn'}, release_id='r', content_id='c')\n"
        "    print(record.seq, [n['bytes'] for n in ledger.repairs])\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["9", "[38]"], r.stderr
    warning = r.stderr
    assert "reef: warning: ledger" in warning and "torn last line (38 bytes after seq 8)" in warning
    assert str(path) + ".repairs" in warning
    r = reef("-C", str(root), "ledger", "verify")
    assert r.code == 0 and "9 record(s) verified" in r.out
    assert "a torn last line (38 bytes after seq 8) was cut off" in r.err
    result = json.loads(reef("-C", str(root), "ledger", "verify", "--json").out)
    assert [(n["bytes"], n["after_seq"]) for n in result["repairs"]] == [(38, 8)]
    assert stat.S_IMODE(os.stat(str(path) + ".repairs").st_mode) == 0o600


# --- the release log and the store ----------------------------------------------------------------------------


@pytest.fixture
def three(reef, tmp_path):
    assert reef("-C", str(tmp_path), "init").code == 0
    fill(tmp_path, 2)
    publish_edit(reef, tmp_path, "rule two")
    publish_edit(reef, tmp_path, "rule three")
    return tmp_path, (tmp_path / LOG).read_bytes()


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_a_lost_release_log_is_refused_and_rebuilt_from_the_commits(reef, three, damage):
    root, original = three
    log = root / LOG
    log.unlink() if damage == "deleted" else log.write_bytes(b"")
    state = "gone" if damage == "deleted" else "empty"
    for command in (("status",), ("init",), ("log",), ("publish", "-m", "again"), ("ledger", "verify")):
        r = reef("-C", str(root), *command)
        assert r.code == 4, (command, r.out, r.err)
        assert r.err.strip() == (
            f"reef: error: {log} is {state} but refs/reef/scenarios/default in {root / '.reef/git'} holds the "
            f"releases of scenario 'default'; nothing was changed — run 'reef repair releases' to rebuild the log "
            f"from those commits"
        ), command
    assert not log.exists() or log.read_bytes() == b""
    r = reef("-C", str(root), "repair", "releases")
    assert r.code == 0, r.err
    assert r.out.startswith("rebuilt the release log: 3 release(s) from commit ")
    assert log.read_bytes() == original  # byte for byte, anchors included
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    again = reef("-C", str(root), "repair", "releases")
    assert again.code == 0 and again.out.startswith("release log intact: 3 release(s) match")
    assert publish_edit(reef, root, "rule four")["step"] == 4


def test_a_log_that_lost_its_last_lines_is_refused_and_rebuilt(reef, three):
    root, original = three
    log = root / LOG
    cut_to(log, 1)
    r = reef("-C", str(root), "publish", "-m", "x")
    assert r.code == 4 and "ends at step 1 but refs/reef/scenarios/default has 2 release(s) after it" in r.err
    assert reef("-C", str(root), "init").code == 4
    r = reef("-C", str(root), "repair", "releases", "--json")
    result = json.loads(r.out)
    assert r.code == 0 and result["rebuilt"] is True and result["releases"] == 3
    assert log.read_bytes() == original
    assert Path(result["kept"]).read_bytes() == original.splitlines(keepends=True)[0]


def test_a_log_one_release_ahead_of_the_ref_is_a_crash_not_a_loss(reef, three):
    """Publish appends the log line before it moves the ref: a crash between leaves the ref one behind."""
    import pygit2

    root, original = three
    repo = pygit2.Repository(str(root / ".reef/git"))
    head = json.loads(original.splitlines()[-1])
    previous = json.loads(original.splitlines()[-2])
    repo.references.create("refs/reef/scenarios/default", pygit2.Oid(hex=previous["commit_id"]), force=True)
    assert reef("-C", str(root), "init").code == 0
    r = reef("-C", str(root), "repair", "releases")
    assert r.code == 0 and r.out.startswith("release log intact: 3"), r.out
    assert str(repo.references["refs/reef/scenarios/default"].target) == head["commit_id"]


def test_init_refuses_a_project_whose_store_is_gone(reef, three):
    root, original = three
    import shutil

    shutil.rmtree(root / ".reef/git")
    r = reef("-C", str(root), "init")
    assert r.code == 4 and "Already initialised" not in r.out
    assert r.err.strip() == (
        f"reef: error: {root / '.reef/git'} is gone but {root / LOG} names 3 release(s) whose files were in it; "
        f"nothing was changed — restore .reef/git from a backup, or move .reef aside and run 'reef init' to start a "
        f"new history from the working tree"
    )
    assert not (root / ".reef/git").exists() and (root / LOG).read_bytes() == original
    assert reef("-C", str(root), "publish", "-m", "x").code == 4
    os.rename(root / ".reef", root / ".reef.broken")
    r = reef("-C", str(root), "init")
    assert r.code == 0 and r.out.startswith("Initialised reef"), r.err


# --- owner-only state ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", ["022", "000"])
def test_state_is_owner_only_whatever_the_umask(tmp_path, umask):
    script = f'umask {umask} && "$0" init >/dev/null && "$0" run -- true >/dev/null && "$0" report --score 1'
    r = subprocess.run(["sh", "-c", script, reef_exe()], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "REEF_SESSION": "perm"})
    assert r.returncode == 0, r.stderr
    state = tmp_path / ".reef"
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.lstat().st_mode) for p in [state, *state.rglob("*")]}
    scenario = ".reef/scenarios/default"
    for d in (".reef", ".reef/scenarios", scenario, ".reef/git", ".reef/trees"):
        assert modes[d] == 0o700, (d, oct(modes[d]))
    for f in ("project.json", "scenarios/default/scenario.json", "scenarios/default/releases.jsonl",
              "scenarios/default/ledger.jsonl", "scenarios/default/ledger.jsonl.lock", "scenarios/default/lock"):
        assert modes[".reef/" + f] == 0o600, (f, oct(modes[".reef/" + f]))
    ledger_files = [p for p in modes if p.startswith(scenario + "/ledger.jsonl")]
    assert len(ledger_files) >= 3 and all(modes[p] == 0o600 for p in ledger_files), ledger_files
    assert stat.S_IMODE((tmp_path / "CLAUDE.md").stat().st_mode) == 0o644  # the user's own files stay ordinary


def test_init_tightens_state_made_by_an_older_reef(tmp_path):
    assert run_reef("init", cwd=tmp_path).returncode == 0
    os.chmod(tmp_path / ".reef", 0o755)
    os.chmod(tmp_path / LOG, 0o644)
    (tmp_path / ".reef/scenarios/default/runs").mkdir(mode=0o755, exist_ok=True)
    os.chmod(tmp_path / ".reef/scenarios/default/runs", 0o755)
    assert run_reef("init", cwd=tmp_path).returncode == 0
    assert stat.S_IMODE((tmp_path / ".reef").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / ".reef/scenarios/default/runs").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / LOG).stat().st_mode) == 0o600


def test_init_tightens_everything_an_older_reef_left_to_the_umask(tmp_path):
    assert run_reef("init", cwd=tmp_path).returncode == 0
    assert run_reef("page", cwd=tmp_path).returncode == 0
    state = tmp_path / ".reef"
    loose = [p for p in state.rglob("*") if not p.is_symlink()]
    for p in loose:  # what the umask 022 gave an older reef's git store, trees and page
        os.chmod(p, stat.S_IMODE(p.lstat().st_mode) | (0o055 if p.is_dir() else 0o044))
    trees = [p for p in (state / "trees").rglob("*") if p.is_file() and p.suffix != ".json"]
    assert trees and run_reef("init", cwd=tmp_path).returncode == 0
    assert [str(p) for p in loose if p.lstat().st_mode & 0o077] == []
    assert all(not p.stat().st_mode & 0o200 for p in trees if p.name != ".reef-complete")  # read-only stays so


def test_commits_from_before_anchors_rebuild_and_a_commit_without_a_release_is_named():
    from reef_cli.errors import StoreError
    from reef_cli.releases import releases_from_commits

    def body(step: int, parent: str | None) -> str:  # a release as reef wrote it before anchors: no ledger_anchor
        return json.dumps({"release_id": f"rel_{step}", "scenario": "default", "content_id": "t" * 40,
                           "parent_release_id": parent, "step": step, "operation": "publish", "reason": "r",
                           "evidence": [], "created_at": "2026-11-30T00:00:00.000Z", "runtime_load_id": None,
                           "meta": {}}, sort_keys=True)

    commits = [("a" * 40, f"init: r\n\nreef-release: {body(1, None)}\n"),
               ("b" * 40, f"publish: r\nreef-release: fake\n\nreef-release: {body(2, 'rel_1')}\n")]
    releases = releases_from_commits(commits)
    assert [(r.step, r.commit_id, r.ledger_anchor) for r in releases] == [(1, "a" * 40, None), (2, "b" * 40, None)]
    with pytest.raises(StoreError, match=r"commit cccccccccccc carries no readable release \(no reef-release line\)"):
        releases_from_commits([*commits, ("c" * 40, "hand-made commit\n")])
    with pytest.raises(StoreError, match=r"commit bbbbbbbbbbbb breaks the chain \(step 2 after 0\)"):
        releases_from_commits(commits[1:])


def test_a_publish_over_a_short_ledger_carries_the_failing_anchor_forward(reef, anchored):
    """Cut the ledger, let new runs grow it past the anchor, publish: the new release must not vouch for the regrown
    ledger, or the newest anchor (what reflect and evolve check) would launder the cut."""
    root, release, records = anchored
    cut_to(root / LEDGER, 2, in_place=False)
    fill(root, 8, start=100)
    later = publish_edit(reef, root, "rule three")
    assert later["ledger_anchor"] == release["ledger_anchor"]
    r = reef("-C", str(root), "harness", "reflect")
    assert r.code == 4 and f"release {release['release_id']} (step 2) anchors seq 5" in r.err
    assert reef("-C", str(root), "repair", "ledger", "--accept-loss").code == 0
    after = publish_edit(reef, root, "rule four")
    assert after["ledger_anchor"]["seq"] == 11  # 2 kept + 8 new + the anchor_loss record
    assert reef("-C", str(root), "ledger", "verify").code == 0


def test_overlapping_private_umasks_neither_widen_a_writer_nor_leave_the_umask_narrowed(tmp_path):
    """reef serve's ledger threads and the gate's parallel episodes write the store at once: the umask is the
    process's, so a thread leaving private_umask must not give the wide umask back to one still inside it (its git
    objects would be 0444), and the last to leave must put the user's umask back (not the narrowed one it found)."""
    import threading

    from reef_cli.durable import private_umask

    def current() -> int:
        mask = os.umask(0)
        os.umask(mask)
        return mask

    a_in, b_in, a_out, b_wrote = (threading.Event() for _ in range(4))
    modes: dict[str, int] = {}

    def a() -> None:
        with private_umask():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b() -> None:
        a_in.wait(5)
        with private_umask():
            b_in.set()
            a_out.wait(5)  # a has left; b is still writing
            fd = os.open(tmp_path / "object", os.O_WRONLY | os.O_CREAT, 0o444)
            os.close(fd)
            modes["object"] = stat.S_IMODE((tmp_path / "object").stat().st_mode)
            b_wrote.set()

    old = os.umask(0o022)
    try:
        threads = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert b_wrote.is_set()
        assert modes["object"] == 0o400
        assert current() == 0o022
        with pytest.raises(KeyboardInterrupt), private_umask():
            raise KeyboardInterrupt
        assert current() == 0o022
    finally:
        os.umask(old)
