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
