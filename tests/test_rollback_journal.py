"""A `reef rollback` killed between its publish and its working-tree write (REEF_FAULT=rollback:published, a
SIGKILL there) is named by status and doctor, refused by publish, and finished by the next rollback; an edit saved
in between is kept. It used to look like the user's own edits: publishing them silently undid the rollback."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from conftest import run_reef


def killed_rollback(reef, root: Path) -> tuple[dict, Path]:
    assert reef("-C", str(root), "init").code == 0
    one = json.loads(reef("-C", str(root), "status", "--json").out)["head"]
    local = root / "CLAUDE.local.md"
    local.write_text("learned a bad thing\n")
    assert reef("-C", str(root), "publish", "-m", "two").code == 0
    r = run_reef("rollback", "1", cwd=root, env={"REEF_FAULT": "rollback:published"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert local.read_text() == "learned a bad thing\n"  # published, not written
    return one, local


def test_a_killed_rollback_is_named_refused_by_publish_and_finished_by_rollback(reef, tmp_path):
    one, local = killed_rollback(reef, tmp_path)
    rb = json.loads(reef("-C", str(tmp_path), "status", "--json").out)["head"]
    assert rb["operation"] == "rollback" and rb["step"] == 3
    sentence = (f"rollback to step 1 (published as step 3, {rb['release_id']}) was interrupted before it wrote the "
                "working tree, which may still hold step 2's files; run 'reef rollback 1' to finish it (publishing "
                "the working tree now would undo the rollback)")
    st = reef("-C", str(tmp_path), "status")
    assert f"A {sentence}\nNot yet written by the rollback (or edited since):\n  added     CLAUDE.local.md" in st.out
    assert "publish with" not in st.out
    pub = reef("-C", str(tmp_path), "publish", "-m", "oops")
    assert pub.code == 3 and pub.err == f"reef: error: nothing was published: a {sentence}\n"
    doc = reef("-C", str(tmp_path), "doctor", "--json")
    assert doc.code == 1
    [row] = [c for c in json.loads(doc.out)["checks"] if c["name"] == "state:interrupted"]
    assert row == {"name": "state:interrupted", "status": "fail", "message": f"a {sentence}",
                   "fix": "reef rollback 1"}
    fin = reef("-C", str(tmp_path), "rollback", "1")
    assert fin.code == 0, fin.err
    assert fin.out == (f"Finished the interrupted rollback: the working tree now holds release {rb['release_id']} "
                       "(step 3)\n")
    assert not local.exists()
    assert json.loads(reef("-C", str(tmp_path), "status", "--json").out)["clean"] is True
    assert json.loads(reef("-C", str(tmp_path), "log", "--json").out)[0]["step"] == 3  # nothing more published
    [row] = [c for c in json.loads(reef("-C", str(tmp_path), "doctor", "--json").out)["checks"]
             if c["name"] == "state:interrupted"]
    assert row["status"] == "ok"


def test_finishing_a_killed_rollback_keeps_an_edit_saved_since(reef, tmp_path):
    _one, local = killed_rollback(reef, tmp_path)
    local.write_text("my own edit\n")
    r = reef("-C", str(tmp_path), "rollback", "1")
    assert r.code == 3
    assert r.err == (f"reef: error: {local} changed while reef was writing the working tree; your edit is kept and "
                     "that file was not replaced\n")
    assert local.read_text() == "my own edit\n"
    # settled: the edit is the user's now, to publish like any other
    assert "Unpublished changes (publish with: reef publish -m MESSAGE):" in reef("-C", str(tmp_path), "status").out
    assert reef("-C", str(tmp_path), "publish", "-m", "mine").code == 0


def test_doctor_names_an_evolve_killed_while_writing_the_working_tree(reef, tmp_path):
    """It said nothing (0 failures) while `reef status` reported the half-written evolve."""
    from test_evolve import LINT, _evolve_proc, feedback, init_project

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    feedback(ledger, {"lesson": "Use tabs for indentation."}, 3)
    assert _evolve_proc(root, {"REEF_FAULT": "evolve:writing"}).returncode == -signal.SIGKILL
    journal = json.loads((root / ".reef/scenarios/default/evolve/journal.json").read_text())
    doc = reef("-C", str(root), "doctor", "--json")
    assert doc.code == 1
    [row] = [c for c in json.loads(doc.out)["checks"] if c["name"] == "state:interrupted"]
    assert row == {"name": "state:interrupted", "status": "fail",
                   "message": f"evolve {journal['evolve_id']} was interrupted in phase writing; run 'reef harness "
                              "evolve' to finish it (the working tree already holds some of its files)",
                   "fix": "reef harness evolve"}
    assert _evolve_proc(root, {}).returncode == 0
    [row] = [c for c in json.loads(reef("-C", str(root), "doctor", "--json").out)["checks"]
             if c["name"] == "state:interrupted"]
    assert row == {"name": "state:interrupted", "status": "ok", "message": "no evolve or rollback was left half-done",
                   "fix": ""}


def test_status_json_and_table_show_a_pending_rollback_even_over_a_clean_tree(reef, tmp_path):
    """`reef status --json` said nothing of an interrupted rollback (doctor failed on it, publish refused over it),
    and the table named it only while the tree differed from the head: with the old files moved away by hand it
    read "harness clean" while the journal still stood. Both forms now name it, with the command that finishes it."""
    one, local = killed_rollback(reef, tmp_path)
    st = json.loads(reef("-C", str(tmp_path), "status", "--json").out)
    rb = st["head"]
    pend = st["rollback_pending"]
    assert pend["target"] == {"release_id": one["release_id"], "step": 1}
    assert pend["published_as"] == {"release_id": rb["release_id"], "step": 3}
    assert pend["rolled_back_from"]["step"] == 2 and pend["fix"] == "reef rollback 1"
    assert pend["message"].startswith("a rollback to step 1 (published as step 3")
    assert st["evolve_interrupted"] is None
    local.unlink()  # the tree now matches the head by hand; the journal is still there
    out = reef("-C", str(tmp_path), "status").out
    assert f"\n{pend['message'][0].upper()}{pend['message'][1:]}\nharness clean" in out
    assert json.loads(reef("-C", str(tmp_path), "status", "--json").out)["rollback_pending"] == pend
    assert reef("-C", str(tmp_path), "rollback", "1").code == 0
    st = json.loads(reef("-C", str(tmp_path), "status", "--json").out)
    assert st["rollback_pending"] is None and st["clean"] is True
