"""`reef harness install`: idempotent, hashed, never through symlinks, prunes only what the previous release had."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from reef_cli.install import InstallRecord, verify

SKILL = "---\nname: {n}\ndescription: {d}\n---\nbody\n"


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    return root


def install(reef, project: Path, *extra: str, adapter: str = "claude"):
    return reef("-C", str(project), "harness", "install", "--adapter", adapter, *extra)


def install_json(reef, project: Path, dest: Path, bins: Path, adapter: str = "claude") -> dict:
    r = install(reef, project, "--dest", str(dest), "--bin-dir", str(bins), "--json", adapter=adapter)
    assert r.code == 0, r.err
    return json.loads(r.out)


def publish(reef, project: Path, msg: str = "change") -> None:
    r = reef("-C", str(project), "publish", "-m", msg)
    assert r.code == 0, r.err


def test_install_writes_compiled_tree_record_and_bound_wrapper(reef, project, tmp_path):
    dest, bins = tmp_path / "root", tmp_path / "bin"
    data = install_json(reef, project, dest, bins)
    rec = data["record"]
    agent_dir = dest / "claude"
    assert data["current"] is False and rec["agent_dir"] == str(agent_dir) and rec["step"] == 1
    assert sorted(data["written"]) == ["CLAUDE.md", "rules/safety.md", "settings.json", "skills/code-review/SKILL.md"]
    assert (agent_dir / "CLAUDE.md").read_bytes() == (project / "CLAUDE.md").read_bytes()
    assert verify(InstallRecord.from_json(rec)) == []
    wrapper = (bins / "reef-claude").read_text()
    assert os.access(bins / "reef-claude", os.X_OK) and rec["wrapper"] == str(bins / "reef-claude")
    assert f"REEF_PROJECT={project}\n" in wrapper and "REEF_SCENARIO=default\n" in wrapper
    assert f"REEF_INSTALL_ROOT={dest}\n" in wrapper
    records = list((project / ".reef" / "installs").glob("claude-*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["files"]["CLAUDE.md"] == rec["files"]["CLAUDE.md"]


def test_install_is_idempotent(reef, project, tmp_path):
    dest, bins = tmp_path / "root", tmp_path / "bin"
    install_json(reef, project, dest, bins)
    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*")} | {bins / "reef-claude": (bins / "reef-claude").stat().st_mtime_ns}
    again = install_json(reef, project, dest, bins)
    assert again["current"] is True and again["written"] == [] and again["removed"] == []
    assert {p: p.stat().st_mtime_ns for p in before} == before
    r = install(reef, project, "--dest", str(dest), "--bin-dir", str(bins))
    assert r.code == 0 and r.out.startswith("already current: claude harness at release")


def test_new_release_prunes_stale_files_only_inside_the_root(reef, project, tmp_path):
    dest, bins = tmp_path / "root", tmp_path / "bin"
    install_json(reef, project, dest, bins)
    agent_dir = dest / "claude"
    (agent_dir / "projects").mkdir()
    (agent_dir / "projects" / "session.jsonl").write_text("the agent's own state\n")
    (agent_dir / "skills" / "mine").mkdir()
    (agent_dir / "skills" / "mine" / "notes.md").write_text("user file\n")
    os.remove(project / ".claude" / "skills" / "code-review" / "SKILL.md")
    os.rmdir(project / ".claude" / "skills" / "code-review")
    (project / ".claude" / "skills" / "new-one").mkdir()
    (project / ".claude" / "skills" / "new-one" / "SKILL.md").write_text(SKILL.format(n="new-one", d="fresh"))
    publish(reef, project)
    data = install_json(reef, project, dest, bins)
    assert data["removed"] == ["skills/code-review/SKILL.md"] and data["written"] == ["skills/new-one/SKILL.md"]
    assert not (agent_dir / "skills" / "code-review").exists()  # emptied directories go too
    assert (agent_dir / "projects" / "session.jsonl").read_text() == "the agent's own state\n"
    assert (agent_dir / "skills" / "mine" / "notes.md").exists()
    assert data["record"]["step"] == 2


def test_links_inside_the_root_are_replaced_never_followed(reef, project, tmp_path):
    dest, bins = tmp_path / "root", tmp_path / "bin"
    install_json(reef, project, dest, bins)
    agent_dir = dest / "claude"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "CLAUDE.md").write_text("victim\n")
    os.remove(agent_dir / "CLAUDE.md")
    os.symlink(outside / "CLAUDE.md", agent_dir / "CLAUDE.md")
    for f in (agent_dir / "rules").iterdir():
        f.unlink()
    (agent_dir / "rules").rmdir()
    os.symlink(outside, agent_dir / "rules")
    problems = verify(InstallRecord.from_json(install_json(reef, project, dest, bins)["record"]))
    assert problems == []
    assert (outside / "CLAUDE.md").read_text() == "victim\n" and not (outside / "safety.md").exists()
    assert not (agent_dir / "CLAUDE.md").is_symlink() and not (agent_dir / "rules").is_symlink()


def test_a_symlinked_root_is_refused(reef, project, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    r = install(reef, project, "--dest", str(tmp_path / "link" / "sub"), "--bin-dir", str(tmp_path / "bin"))
    assert r.code == 0  # a link above the root is the user's business
    r = install(reef, project, "--dest", str(tmp_path / "link"), "--bin-dir", str(tmp_path / "bin"))
    assert r.code == 4 and "is a symlink; reef never installs through symlinks" in r.err
    assert not (real / "claude").exists()


def test_the_wrapper_bin_link_is_replaced_not_written_through(reef, project, tmp_path):
    bins = tmp_path / "bin"
    bins.mkdir()
    target = tmp_path / "venv-reef-claude"
    target.write_text("#!/bin/sh\necho console script\n")
    os.symlink(target, bins / "reef-claude")  # what install.sh leaves in ~/.local/bin
    install_json(reef, project, tmp_path / "root", bins)
    assert not (bins / "reef-claude").is_symlink() and target.read_text() == "#!/bin/sh\necho console script\n"


def test_verify_names_modified_missing_and_linked_files(reef, project, tmp_path):
    rec = InstallRecord.from_json(install_json(reef, project, tmp_path / "root", tmp_path / "bin")["record"])
    agent_dir = Path(rec.agent_dir)
    (agent_dir / "CLAUDE.md").write_text("edited in place\n")
    os.remove(agent_dir / "settings.json")
    os.remove(agent_dir / "rules" / "safety.md")
    os.symlink(tmp_path / "elsewhere", agent_dir / "rules" / "safety.md")
    assert verify(rec) == [f"{agent_dir}/CLAUDE.md (modified)", f"{agent_dir}/rules/safety.md (replaced by a symlink)",
                           f"{agent_dir}/settings.json (missing)"]


def test_one_agent_dir_belongs_to_one_project(reef, project, tmp_path):
    dest = tmp_path / "root"
    install_json(reef, project, dest, tmp_path / "bin")
    other = tmp_path / "other"
    other.mkdir()
    assert reef("-C", str(other), "init").code == 0
    r = install(reef, other, "--dest", str(dest), "--bin-dir", str(tmp_path / "bin2"))
    assert r.code == 3 and f"holds the claude harness of project {project}" in r.err


def test_default_root_is_under_the_data_dir_and_bin_under_home(reef, project, no_real_home):
    r = install(reef, project, "--json")
    assert r.code == 0, r.err
    rec = json.loads(r.out)["record"]
    assert rec["root"].startswith(str(no_real_home / ".local" / "share" / "reef" / "installs" / "proj-"))
    assert rec["root"].endswith("-default") and rec["wrapper"] == str(no_real_home / ".local" / "bin" / "reef-claude")


def test_unknown_adapters_fail(reef, project):
    r = install(reef, project, adapter="vim")
    assert r.code == 1 and "no agent adapter 'vim'" in r.err


@pytest.mark.parametrize("adapter", ["claude", "opencode", "pi", "codex"])
def test_each_adapter_installs_its_config_layout(reef, project, tmp_path, adapter):
    data = install_json(reef, project, tmp_path / "root", tmp_path / "bin", adapter=adapter)
    files = set(data["record"]["files"])
    if adapter == "claude":
        assert files == {"CLAUDE.md", "rules/safety.md", "settings.json", "skills/code-review/SKILL.md"}
    else:
        assert files == {"AGENTS.md", "skills/code-review/SKILL.md"}
        assert "Never commit secrets" in (tmp_path / "root" / adapter / "AGENTS.md").read_text()


def test_printed_script_installs_the_same_tree_and_prunes(reef, project, tmp_path):
    dest, bins = tmp_path / "root", tmp_path / "bin"
    r = install(reef, project, "--dest", str(dest), "--bin-dir", str(bins), "--print", adapter="pi")
    assert r.code == 0 and r.out.startswith("#!/bin/sh\n")
    done = subprocess.run(["bash"], input=r.out, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "reef: installed release" in done.stdout
    again = install_json(reef, project, dest, bins, adapter="pi")
    assert again["current"] is True  # the script wrote exactly what install would have
    os.remove(project / ".claude" / "skills" / "code-review" / "SKILL.md")
    publish(reef, project)
    r = install(reef, project, "--dest", str(dest), "--bin-dir", str(bins), "--print", adapter="pi")
    assert subprocess.run(["sh"], input=r.out, capture_output=True, text=True, timeout=30).returncode == 0
    assert not (dest / "pi" / "skills" / "code-review" / "SKILL.md").exists()
    assert install_json(reef, project, dest, bins, adapter="pi")["current"] is True


def test_printed_script_carries_binary_bytes_exactly(reef, project, tmp_path):
    blob = bytes(range(256)) + b"\x00tail"
    d = project / ".claude" / "skills" / "code-review"
    (d / "data.bin").write_bytes(blob)
    (d / "run.sh").write_text("#!/bin/sh\necho 'quote' \"$HOME\" `x`\n")
    os.chmod(d / "run.sh", 0o755)
    publish(reef, project)
    dest = tmp_path / "root"
    r = install(reef, project, "--dest", str(dest), "--bin-dir", str(tmp_path / "bin"), "--print")
    done = subprocess.run(["sh"], input=r.out, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    skill = dest / "claude" / "skills" / "code-review"
    assert (skill / "data.bin").read_bytes() == blob
    assert (skill / "run.sh").read_text() == "#!/bin/sh\necho 'quote' \"$HOME\" `x`\n" and os.access(skill / "run.sh", os.X_OK)


def test_install_passes_on_compile_warnings(reef, project, tmp_path):
    (project / "CLAUDE.local.md").write_text("- a note\n")
    (project / "AGENTS.md").write_text("ignored by claude\n")
    cfg = project / "harness.yaml"
    cfg.write_text(cfg.read_text().replace("  - CLAUDE.md\n", "  - CLAUDE.md\n  - AGENTS.md\n", 1))
    publish(reef, project)
    r = install(reef, project, "--dest", str(tmp_path / "root"), "--bin-dir", str(tmp_path / "bin"))
    assert r.code == 0, r.err
    assert "reef: warning: AGENTS.md is not compiled for claude: Claude Code reads CLAUDE.md instead" in r.err
    assert "- a note" in (tmp_path / "root" / "claude" / "CLAUDE.md").read_text()


FIFO_LINE = "is not a regular file (a FIFO, a socket or a device) where reef expects one; move it away"


def test_a_fifo_at_the_install_record_or_marker_is_refused_not_waited_on(reef, project, tmp_path):
    """`reef harness install` read its install record and the agent directory's marker with a plain open(): a FIFO
    at either hung it for good (and every wrapper start with it). Now each is the one line for state of the wrong
    kind, naming the file, exit 4; nothing is installed."""
    from conftest import planted_fifo

    dest, bins = tmp_path / "root", tmp_path / "bin"
    rec = Path(install_json(reef, project, dest, bins)["record"]["agent_dir"])
    record = next((project / ".reef" / "installs").glob("claude-*.json"))
    for path in (record, rec / ".reef-install.json"):
        saved = path.read_bytes()
        path.unlink()
        with planted_fifo(path):
            r = install(reef, project, "--dest", str(dest), "--bin-dir", str(bins))
        assert (r.code, r.err) == (4, f"reef: error: {path} {FIFO_LINE} (nothing was changed by this command)\n")
        path.unlink()
        path.write_bytes(saved)


def test_a_huge_install_record_is_refused_not_read_whole(reef, project, tmp_path):
    from reef_cli.install import RECORD_LIMIT

    dest, bins = tmp_path / "root", tmp_path / "bin"
    install_json(reef, project, dest, bins)
    record = next((project / ".reef" / "installs").glob("claude-*.json"))
    os.truncate(record, RECORD_LIMIT + 1)  # sparse: no disk spent
    r = install(reef, project, "--dest", str(dest), "--bin-dir", str(bins))
    assert (r.code, r.err) == (4, f"reef: error: {record} is larger than {RECORD_LIMIT} bytes, more than reef ever "
                                  "writes there; move it away (nothing was changed by this command)\n")


def test_a_fifo_where_the_wrapper_goes_is_not_reefs_and_not_waited_on(reef, project, tmp_path):
    """The wrapper's first bytes were read with open() to see whether it is reef's: a FIFO there hung the install."""
    from conftest import planted_fifo

    dest, bins = tmp_path / "root", tmp_path / "bin"
    bins.mkdir()
    with planted_fifo(bins / "reef-claude"):
        r = install(reef, project, "--dest", str(dest), "--bin-dir", str(bins))
    assert r.code == 3 and r.err.startswith(f"reef: error: {bins / 'reef-claude'} exists and is not reef's;")


def test_a_fifo_at_the_compile_manifest_is_refused_not_waited_on(reef, project, tmp_path):
    from conftest import planted_fifo

    out = tmp_path / "out"
    assert reef("-C", str(project), "harness", "compile", "--agent", "claude", "--out", str(out)).code == 0
    manifest = out / ".reef-compiled.json"
    manifest.unlink()
    with planted_fifo(manifest):
        r = reef("-C", str(project), "harness", "compile", "--agent", "claude", "--out", str(out))
    assert (r.code, r.err) == (3, f"reef: error: {out} is not empty and was not written by 'reef harness compile'; "
                                  "choose an empty or new directory\n")  # compile_out: a manifest it cannot read
