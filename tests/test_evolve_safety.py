"""Evolve never loses a user's edit: kills at every point of the write, edits racing the gate, read-only targets."""

from __future__ import annotations

import json
import signal
import stat

from test_evolve import LINT, _evolve_proc, _gated_project, block_ids, evolve, feedback, init_project, releases

TABS = {"lesson": "Use tabs for indentation."}
JOURNAL = ".reef/scenarios/default/evolve/journal.json"


def _status(reef, root) -> dict:
    return json.loads(reef("-C", str(root), "status", "--json").out)


def test_kill_right_after_publish_then_a_user_edit_survives_the_resume(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    killed = _evolve_proc(root, {"REEF_FAULT": "evolve:published"})
    assert killed.returncode == -signal.SIGKILL
    assert len(releases(reef, root)) == 2
    assert _status(reef, root)["clean"] is True  # the working tree already holds the release: nothing to "publish"
    claude = root / "CLAUDE.md"
    claude.write_text(claude.read_text() + "\nMy own rule, outside reef's block.\n")
    done = _evolve_proc(root, {})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resumed"] is True
    assert "My own rule, outside reef's block." in claude.read_text() and len(block_ids(claude)) == 1
    st = _status(reef, root)
    assert [(c["path"], c["change"]) for c in st["changes"]] == [("CLAUDE.md", "modified")]
    assert reef("-C", str(root), "publish", "-m", "my rule").code == 0  # what status advises keeps the evolve
    head = releases(reef, root)[0]
    assert len(block_ids(claude)) == 1 and head["step"] == 3 and _status(reef, root)["clean"] is True


def test_kill_half_way_through_the_working_tree_write_resumes_to_one_release(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    feedback(ledger, TABS, 3)
    killed = _evolve_proc(root, {"REEF_FAULT": "evolve:writing"})
    assert killed.returncode == -signal.SIGKILL
    assert len(releases(reef, root)) == 1  # no release whose files never reached the working tree
    assert json.loads((root / JOURNAL).read_text())["phase"] == "writing"
    from reef_cli.evolve import in_flight
    from reef_cli.project import find_project
    from reef_cli.store import HarnessStore

    note = in_flight(HarnessStore(find_project(root), "default"))
    assert "was interrupted in phase writing; run 'reef harness evolve' to finish it" in note
    assert note in reef("-C", str(root), "status").out  # said before status advises a publish
    done = _evolve_proc(root, {})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["resumed"] is True and out["status"] == "published" and len(releases(reef, root)) == 2
    assert len(block_ids(root / "CLAUDE.md")) == 1 and len(block_ids(root / "CLAUDE.local.md")) == 1
    assert _status(reef, root)["clean"] is True and not (root / JOURNAL).exists()


def test_an_edit_after_a_half_write_stops_the_resume_and_is_kept(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    feedback(ledger, TABS, 3)
    assert _evolve_proc(root, {"REEF_FAULT": "evolve:writing"}).returncode == -signal.SIGKILL
    # CLAUDE.local.md is written first (sorted); CLAUDE.md still holds the base bytes. The user edits it now.
    claude = root / "CLAUDE.md"
    claude.write_text(claude.read_text() + "\nmine\n")
    r = reef("-C", str(root), "harness", "evolve")
    assert r.code == 3, r.err
    assert "CLAUDE.md changed in the working tree while reef was evolving it" in r.err
    assert "reef publish -m" in r.err
    assert claude.read_text().endswith("\nmine\n") and len(releases(reef, root)) == 1


def test_a_read_only_target_is_refused_before_anything_is_written_or_published(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    feedback(ledger, TABS, 3)
    claude = root / "CLAUDE.md"
    before = claude.read_bytes()
    claude.chmod(0o444)
    r = reef("-C", str(root), "harness", "evolve")
    assert r.code == 4, r.err
    assert "CLAUDE.md is read-only" in r.err and "chmod u+w CLAUDE.md" in r.err
    assert claude.read_bytes() == before and not (root / "CLAUDE.local.md").exists()
    assert len(releases(reef, root)) == 1
    claude.chmod(0o644)
    out = evolve(reef, root)
    assert out["status"] == "published" and out["resumed"] is True
    assert len(block_ids(claude)) == 1 and len(block_ids(root / "CLAUDE.local.md")) == 1
    assert stat.S_IMODE(claude.stat().st_mode) == 0o644 and _status(reef, root)["clean"] is True


def test_a_private_file_keeps_its_permissions_when_evolve_writes_it(reef, tmp_path):
    """A CLAUDE.md the user keeps private (0600) came back world-readable (0644): the new text went out with a
    fixed mode. An existing file keeps its own bits."""
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    claude = root / "CLAUDE.md"
    claude.chmod(0o600)
    out = evolve(reef, root)
    assert out["status"] == "published" and len(block_ids(claude)) == 1
    assert stat.S_IMODE(claude.stat().st_mode) == 0o600


# ------------------------------------------------------------------------------ edits racing the gate

RACER = """
import os, pathlib
root = pathlib.Path({root!r})
flag = root.parent / "raced"
if not flag.exists():
    flag.write_text("1")
    {edit}
text = (pathlib.Path(os.environ["REEF_HARNESS_DIR"]) / "CLAUDE.md").read_text()
if (pathlib.Path(os.environ["REEF_HARNESS_DIR"]) / "CLAUDE.local.md").exists():
    text += (pathlib.Path(os.environ["REEF_HARNESS_DIR"]) / "CLAUDE.local.md").read_text()
if "linter" in text.lower():
    pathlib.Path("linted").write_text("yes")
print("done")
"""


def _racing(reef, tmp_path, edit: str):
    root, ledger = _gated_project(reef, tmp_path, check="test -f linted")
    (tmp_path / "agent.py").write_text(RACER.format(root=str(root), edit=edit))
    return root, ledger


def test_a_user_edit_made_while_the_gate_runs_is_never_overwritten(reef, tmp_path):
    root, ledger = _racing(reef, tmp_path, 'p = root / "CLAUDE.md"; p.write_text(p.read_text() + "\\nedited during the gate\\n")')
    feedback(ledger, LINT, 5)
    r = reef("-C", str(root), "harness", "evolve")
    assert r.code == 3, r.err
    assert "CLAUDE.md changed in the working tree while reef was evolving it" in r.err
    claude = root / "CLAUDE.md"
    assert claude.read_text().endswith("edited during the gate\n") and block_ids(claude) == []
    assert len(releases(reef, root)) == 2  # init + the gate's set-up: nothing from this evolve
    assert reef("-C", str(root), "publish", "-m", "my edit").code == 0
    out = evolve(reef, root)  # the stale plan is dropped, a fresh one sees the edit
    assert out["status"] == "published" and out["resumed"] is False
    assert "edited during the gate" in claude.read_text() and len(block_ids(claude)) == 1


def test_a_file_created_while_the_gate_runs_is_never_overwritten(reef, tmp_path):
    root, ledger = _racing(reef, tmp_path, '(root / "CLAUDE.local.md").write_text("# my local notes\\n")')
    feedback(ledger, LINT, 3)  # count 3: the notes tier, CLAUDE.local.md, which does not exist yet
    r = reef("-C", str(root), "harness", "evolve")
    assert r.code == 3, r.err
    assert "CLAUDE.local.md changed in the working tree" in r.err
    assert (root / "CLAUDE.local.md").read_text() == "# my local notes\n" and len(releases(reef, root)) == 2
    again = reef("-C", str(root), "harness", "evolve")  # resumes the same verdict, and refuses the same way
    assert again.code == 3 and (root / "CLAUDE.local.md").read_text() == "# my local notes\n"


def test_the_journal_is_a_typed_value_that_round_trips(tmp_path):
    from reef_cli.curate import Op
    from reef_cli.evolve import EvolveJournal, JournalFile

    j = EvolveJournal("evo_1", "rel_1", "{}", (Op("add", "notes", "CLAUDE.local.md", "abc123", "do:x", "X.", "t"),),
                      gated=True, expected={"CLAUDE.local.md": None})
    jf = JournalFile(tmp_path)
    assert jf.save(j.advance("gated", verdict={"decision": "publish"})) == jf.load()
    assert EvolveJournal.from_json(j.to_json()) == j
    (tmp_path / "journal.json").write_text("{torn")
    assert jf.load() is None


def test_a_write_that_fails_half_way_leaves_the_previous_state(reef, tmp_path):
    """A full disk, simulated with RLIMIT_FSIZE: CLAUDE.md (big) cannot be written, CLAUDE.local.md (small) could."""
    import os
    import resource
    import subprocess

    from conftest import reef_exe

    root, ledger = init_project(reef, tmp_path)
    claude = root / "CLAUDE.md"
    claude.write_text(claude.read_text() + "\n".join(f"my line {i} " + "x" * 60 for i in range(800)) + "\n")
    assert reef("-C", str(root), "publish", "-m", "a big CLAUDE.md").code == 0
    feedback(ledger, LINT, 5)
    feedback(ledger, TABS, 3)
    limit = claude.stat().st_size - 100  # the ledger and state files stay far below it

    def cap():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    before = claude.read_bytes()
    r = subprocess.run([reef_exe(), "-C", str(root), "harness", "evolve"], capture_output=True, text=True,
                       env=dict(os.environ), preexec_fn=cap, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "cannot write" in r.stderr and "CLAUDE.md" in r.stderr and "nothing was written or published" in r.stderr
    assert "unexpected" not in r.stderr
    assert claude.read_bytes() == before and not (root / "CLAUDE.local.md").exists()
    assert len(releases(reef, root)) == 2 and not list(root.glob(".*.reef-tmp"))
    out = evolve(reef, root)  # room again: the journal's plan is finished
    assert out["status"] == "published" and out["resumed"] is True
    assert len(block_ids(claude)) == 1 and claude.read_text().count("my line") == 800
    assert _status(reef, root)["clean"] is True


def test_the_journal_only_moves_forward():
    import pytest

    from reef_cli.evolve import EvolveJournal

    j = EvolveJournal("evo_1", "rel_1", "{}", ()).advance("published", release_id="rel_2")
    with pytest.raises(ValueError, match="from published back to writing"):
        j.advance("writing")
