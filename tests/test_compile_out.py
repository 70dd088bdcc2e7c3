"""`reef harness compile --out DIR` never loses what a user did in DIR: an edited file (one reef wrote, changed since)
or the user's own file is neither overwritten nor removed as stale without --force, and --force keeps a backup."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(GOLDEN / "canonical", root)
    assert reef("-C", str(root), "init").code == 0
    return root


def compile_to(reef, project, out, *extra):
    return reef("-C", str(project), "harness", "compile", "--agent", "opencode", "--out", str(out), *extra)


def test_a_hand_edit_in_dir_is_refused_not_overwritten(reef, project, tmp_path):
    out = tmp_path / "out"
    assert compile_to(reef, project, out).code == 0
    agents = out / "AGENTS.md"
    agents.write_text(agents.read_text() + "MY HAND EDIT\n")
    r = compile_to(reef, project, out)
    assert r.code == 3
    assert r.err == (f"reef: error: {out}: 1 file(s) differ from what 'reef harness compile' last wrote there "
                     "(AGENTS.md (modified)) and this compile would overwrite or remove them; move your edits into "
                     "the harness, or pass --force to go on with a backup; nothing was written\n")
    assert agents.read_text().endswith("MY HAND EDIT\n")


def test_an_edited_file_the_new_compile_drops_is_not_removed_as_stale(reef, project, tmp_path):
    out = tmp_path / "out"
    assert compile_to(reef, project, out).code == 0
    skill = out / ".opencode" / "skills" / "review" / "SKILL.md"
    skill.write_text(skill.read_text() + "my notes\n")
    shutil.rmtree(project / ".agents")
    assert reef("-C", str(project), "publish", "-m", "drop review").code == 0
    r = compile_to(reef, project, out)
    assert r.code == 3 and ".opencode/skills/review/SKILL.md (modified)" in r.err
    assert skill.read_text().endswith("my notes\n")


def test_a_users_own_file_where_the_compile_writes_is_refused(reef, project, tmp_path):
    out = tmp_path / "out"
    assert compile_to(reef, project, out).code == 0
    (out / "AGENTS.md").unlink()
    (out / ".opencode" / "skills" / "review" / "SKILL.md").unlink()  # a file reef wrote, deleted: nothing to lose
    manifest = json.loads((out / ".reef-compiled.json").read_text())
    manifest["files"].pop("AGENTS.md")
    (out / ".reef-compiled.json").write_text(json.dumps(manifest))
    (out / "AGENTS.md").write_text("mine\n")
    r = compile_to(reef, project, out)
    assert r.code == 3 and "(AGENTS.md (not written by reef))" in r.err
    assert (out / "AGENTS.md").read_text() == "mine\n"


def test_force_keeps_a_backup_and_says_where(reef, project, tmp_path):
    out = tmp_path / "out"
    assert compile_to(reef, project, out).code == 0
    agents = out / "AGENTS.md"
    compiled = agents.read_bytes()
    agents.write_text("MY HAND EDIT\n")
    r = compile_to(reef, project, out, "--force", "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    backup = Path(data["backup"])
    assert backup.parent == project / ".reef" / "backups" and data["backed_up"] == ["AGENTS.md"]
    assert (backup / "AGENTS.md").read_text() == "MY HAND EDIT\n" and agents.read_bytes() == compiled
    agents.write_text("again\n")
    r = compile_to(reef, project, out, "--force")
    assert r.code == 0 and f"kept a backup of 1 file(s) you had changed in {out}: " in r.out
    again = compile_to(reef, project, out, "--json")  # clean now: nothing to refuse, nothing to back up
    assert again.code == 0 and json.loads(again.out)["backup"] is None


def test_an_older_manifest_without_digests_refuses_only_files_that_would_change(reef, project, tmp_path):
    out = tmp_path / "out"
    assert compile_to(reef, project, out).code == 0
    manifest = json.loads((out / ".reef-compiled.json").read_text())
    (out / ".reef-compiled.json").write_text(json.dumps({**manifest, "files": sorted(manifest["files"])}))
    assert compile_to(reef, project, out).code == 0  # every file as this compile writes it: nothing to lose
    (out / ".reef-compiled.json").write_text(json.dumps({**manifest, "files": sorted(manifest["files"])}))
    (out / "AGENTS.md").write_text("edited?\n")
    r = compile_to(reef, project, out)
    assert r.code == 3 and "AGENTS.md (may be edited; the manifest of an older reef keeps no digests)" in r.err


def test_force_over_a_users_link_keeps_the_link_and_never_writes_through_it(reef, project, tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    assert compile_to(reef, project, out).code == 0
    (outside / "review").mkdir(parents=True)
    (outside / "review" / "SKILL.md").write_text("someone else's\n")
    shutil.rmtree(out / ".opencode" / "skills")
    (out / ".opencode" / "skills").symlink_to(outside)
    r = compile_to(reef, project, out)
    assert r.code == 3 and f".opencode/skills/review/SKILL.md (under a symlink: {out}/.opencode/skills)" in r.err
    r = compile_to(reef, project, out, "--force", "--json")
    assert r.code == 0, r.err
    backup = Path(json.loads(r.out)["backup"])
    assert (backup / ".opencode" / "skills").is_symlink() and (backup / ".opencode" / "skills").readlink() == outside
    assert (outside / "review" / "SKILL.md").read_text() == "someone else's\n"
    assert not (out / ".opencode" / "skills").is_symlink()


def test_a_manifest_naming_a_path_outside_dir_is_not_reefs(reef, project, tmp_path):
    out = tmp_path / "out"
    assert compile_to(reef, project, out).code == 0
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    manifest = json.loads((out / ".reef-compiled.json").read_text())
    manifest["files"]["../victim"] = "0" * 64
    (out / ".reef-compiled.json").write_text(json.dumps(manifest))
    r = compile_to(reef, project, out, "--force")
    assert r.code == 3 and "was not written by 'reef harness compile'" in r.err
    assert victim.read_text() == "precious\n" and not (project / ".reef" / "backups").exists()
