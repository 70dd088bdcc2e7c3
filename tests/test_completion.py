"""Shell completion: the real bash completion function, sourced from `reef completion show bash`, run in a bash
subprocess with COMP_WORDS/COMP_CWORD as bash sets them; zsh and fish through the same protocol their scripts use
(those shells are not installed here); `reef completion install` writing its files once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_reef
from reef_cli.project import Project
from reef_cli.store import HarnessStore

BIN = str(Path(sys.executable).parent)


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    assert reef("-C", str(root), "init", "--scenario", "nightly").code == 0
    return root


def bash_complete(line: str, cwd: Path, tmp_path: Path) -> list[str]:
    """Complete `line` (ending in a space completes a new word) with the script the user installs."""
    script = tmp_path / "reef.bash"
    script.write_text(run_reef("completion", "show", "bash", cwd=cwd).stdout)
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    if line.endswith(" "):
        words.append("")
    array = " ".join("'" + w + "'" for w in words)
    prog = (f"source {script}; COMP_WORDS=({array}); COMP_CWORD={cword}; _reef_completion reef; "
            "printf '%s\\n' \"${COMPREPLY[@]}\"")
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [w for w in out.stdout.splitlines() if w]


def test_bash_completes_commands_options_and_subcommands(project, tmp_path):
    top = bash_complete("reef ", project, tmp_path)
    assert {"init", "run", "report", "show", "doctor", "completion", "harness", "ledger"} <= set(top)
    assert bash_complete("reef do", project, tmp_path) == ["doctor"]
    assert "--json" in bash_complete("reef doctor --", project, tmp_path)
    assert {"show", "install"} == set(bash_complete("reef completion ", project, tmp_path))
    assert "verify" in bash_complete("reef ledger ", project, tmp_path)


def test_bash_completes_scenarios_releases_and_adapters(reef, project, tmp_path):
    (project / "CLAUDE.md").write_text("# changed\n")
    assert reef("-C", str(project), "publish", "-m", "second").code == 0
    ids = [r.release_id for r in HarnessStore(Project(project), "default").releases()]
    assert len(ids) == 2
    assert bash_complete("reef show ", project, tmp_path) == ids[::-1]  # newest first
    assert bash_complete(f"reef diff {ids[0]} {ids[1][:-2]}", project, tmp_path) == [ids[1]]
    assert set(bash_complete("reef --scenario ", project, tmp_path)) == {"default", "nightly"}
    assert bash_complete("reef --scenario n", project, tmp_path) == ["nightly"]
    nightly = bash_complete("reef --scenario nightly rollback ", project, tmp_path)
    assert len(nightly) == 1 and nightly[0] not in ids  # the other scenario's releases
    assert bash_complete("reef harness install --adapter ", project, tmp_path) == ["claude", "codex", "opencode",
                                                                                   "pi"]
    assert bash_complete("reef run --adapter o", project, tmp_path) == ["opencode"]


def test_outside_a_project_dynamic_values_are_empty_not_errors(tmp_path):
    (tmp_path / "x").mkdir()
    assert bash_complete("reef show ", tmp_path / "x", tmp_path) == []
    assert "doctor" in bash_complete("reef ", tmp_path / "x", tmp_path)


def test_zsh_and_fish_protocols(project):
    zsh = run_reef(cwd=project, env={"_REEF_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "reef --scenario "})
    assert zsh.returncode == 0 and zsh.stdout.startswith("_arguments") and '"nightly"' in zsh.stdout
    fish = run_reef(cwd=project, env={"_REEF_COMPLETE": "complete_fish", "_TYPER_COMPLETE_FISH_ACTION": "get-args",
                                      "_TYPER_COMPLETE_ARGS": "reef harness install --adapter p"})
    assert fish.returncode == 0 and fish.stdout.strip() == "pi\tpi"
    for shell, marker in (("zsh", "compdef _reef_completion reef"), ("fish", "complete --command reef")):
        r = run_reef("completion", "show", shell, cwd=project)
        assert r.returncode == 0 and marker in r.stdout


def test_show_unknown_shell_is_invalid_input(project):
    r = run_reef("completion", "show", "tcsh", cwd=project)
    assert r.returncode == 4 and r.stderr.strip() == "reef: error: unknown shell 'tcsh'; use one of: bash, zsh, fish"


def test_install_writes_each_shell_once_and_bash_loads_it(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    env = {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CONFIG_HOME": str(home / ".config"),
           "SHELL": "/bin/bash"}
    r = run_reef("completion", "install", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    script = home / ".local/share/bash-completion/completions/reef"
    assert f"wrote {script}" in r.stdout and f"added a line to {home / '.bashrc'}" in r.stdout
    again = run_reef("completion", "install", "--shell", "bash", cwd=tmp_path, env=env)
    assert "already installed" in again.stdout
    assert (home / ".bashrc").read_text().count("# reef shell completion") == 1
    out = subprocess.run(["bash", "--norc", "-c", f"source {home / '.bashrc'}; complete -p reef"], capture_output=True,
                         text=True, env={**os.environ, **env})
    assert out.stdout.strip() == "complete -o default -F _reef_completion reef"
    assert run_reef("completion", "install", "--shell", "zsh", cwd=tmp_path, env=env).returncode == 0
    assert (home / ".zfunc" / "_reef").read_text().startswith("#compdef reef")
    assert "fpath+=(" in (home / ".zshrc").read_text()
    assert run_reef("completion", "install", "--shell", "fish", cwd=tmp_path, env=env).returncode == 0
    assert (home / ".config/fish/completions/reef.fish").is_file()
    bad = run_reef("completion", "install", cwd=tmp_path, env={**env, "SHELL": "/bin/tcsh"})
    assert bad.returncode == 4 and "pass --shell bash|zsh|fish" in bad.stderr
