"""Everything reef writes under `.reef` is the owner's alone (0600 files, 0700 directories, read-only copies 0400/0500)
whatever the umask, through every command that writes state: the store, runs, pending receipts, ingest, reflect,
evolve, the gate's run directories, the page. The user's own files keep the umask's modes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conftest import example_suite_project, set_block

GOLDEN = Path(__file__).parent / "golden" / "transcripts"


def shared(state: Path) -> list[str]:
    """Paths under `state` that anyone but the owner may read, write or enter (symlinks aside)."""
    out = []
    for p in [state, *state.rglob("*")]:
        st = p.lstat()
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
            out.append(f"{p.relative_to(state.parent)} {oct(stat.S_IMODE(st.st_mode))}")
    return sorted(out)


@pytest.fixture
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.mark.parametrize("umask", [0o022, 0o000], indirect=True, ids=["022", "000"])
def test_every_state_path_is_owner_only_whatever_the_umask(reef, tmp_path, monkeypatch, umask):
    root = example_suite_project(reef, tmp_path / "proj")
    assert reef("-C", str(root), "publish", "-m", "suite").code == 0
    monkeypatch.setenv("REEF_SESSION", "modes")
    steps = [
        ("run", "--", "true"),
        ("report", "--score", "0", "--feedback", "you forgot to run the tests"),
        ("ingest", str(GOLDEN / "claude.jsonl")),
        ("page",),
        ("harness", "reflect"),
        ("harness", "evolve", "--review"),
    ]
    for args in steps:
        r = reef("-C", str(root), *args)
        assert r.code == 0, (args, r.err)
    set_block(root, "- Run the tests before saying you are done.")
    assert reef("-C", str(root), "eval", "--working-tree").code in (0, 1)
    state = root / ".reef"
    for d in ("runs", "pending", "evolve", "gate"):
        assert (state / "scenarios/default" / d).is_dir(), d  # the flow reached every kind of state
    assert (state / "page/default/index.html").is_file()
    assert shared(state) == [], "\n".join(shared(state))
    assert stat.S_IMODE((root / "CLAUDE.md").stat().st_mode) == 0o644  # the user's own files stay ordinary


def test_an_atomic_rewrite_keeps_the_files_mode_and_a_new_file_follows_the_umask(tmp_path):
    """The one rule for every atomic rewrite of a user's file (memory, harness files, config, hook settings): a
    file there keeps its bits (even against the umask), a new one gets 0644 under the umask; reef's own state,
    written with an explicit mode, gets that mode whatever it had."""
    from reef_cli.durable import STATE_FILE_MODE, write_atomic

    def mode(p):
        return stat.S_IMODE(p.stat().st_mode)

    old = os.umask(0o022)
    try:
        private, shared_rw, script = tmp_path / "private.json", tmp_path / "group.yaml", tmp_path / "hook.sh"
        for path, bits in ((private, 0o600), (shared_rw, 0o664), (script, 0o750)):
            path.write_bytes(b"old\n")
            path.chmod(bits)
            write_atomic(path, b"new\n")
            assert path.read_bytes() == b"new\n" and mode(path) == bits, path
        write_atomic(script, b"text\n", executable=False)
        assert mode(script) == 0o640
        os.umask(0o077)
        write_atomic(tmp_path / "fresh.json", b"{}\n")
        assert mode(tmp_path / "fresh.json") == 0o600
        shared_rw.chmod(0o644)
        write_atomic(shared_rw, b"state\n", STATE_FILE_MODE)
        assert mode(shared_rw) == 0o600
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.json", "group.yaml", "hook.sh", "private.json"]


def test_a_fifo_where_a_users_file_is_read_is_refused_not_waited_on(tmp_path):
    """A FIFO at patterns.json (or CLAUDE.md) hung `reef harness reflect`, evolve and checkout for ever: read_nofollow
    opened it blocking, waiting for a writer that never came. Now it is refused as not a regular file."""
    import threading

    from reef_cli.durable import read_nofollow
    from reef_cli.errors import InvalidInput

    fifo = tmp_path / "patterns.json"
    os.mkfifo(fifo)
    outcome = []

    def read():
        try:
            outcome.append(read_nofollow(fifo))
        except InvalidInput as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    waited = reader.is_alive()
    if waited:  # the bug: unblock the reader so the test ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert not waited and outcome == [f"{fifo} is not a regular file; reef will not replace it"]


def test_an_atomic_rewrite_never_writes_through_a_symlink_at_its_temp_name(tmp_path):
    """The temp file beside the target had a predictable name (pid) and was opened O_CREAT|O_TRUNC without
    O_NOFOLLOW: a symlink planted there had the new bytes written into its target (here a victim file under
    tmp_path, never a system file). Now the temp is this thread's own, created O_EXCL|O_NOFOLLOW."""
    import threading

    from reef_cli.durable import write_atomic

    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"victim\n")
    target = tmp_path / "proj" / "patterns.json"
    target.parent.mkdir()
    target.write_bytes(b"old\n")
    for name in (f".{target.name}.{os.getpid()}.tmp", f".{target.name}.{os.getpid()}.{threading.get_native_id()}.tmp"):
        (target.parent / name).symlink_to(victim)
    write_atomic(target, b"new\n")
    assert victim.read_bytes() == b"victim\n" and target.read_bytes() == b"new\n" and not target.is_symlink()
