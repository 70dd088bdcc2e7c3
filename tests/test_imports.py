"""Import hygiene: every module imports on its own (no cycles, no import-time side effects), and the commands that
run after every agent session stay off the heavy dependencies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_reef

MODULES = sorted(
    ".".join(p.relative_to(REPO).with_suffix("").parts)
    for p in (REPO / "reef_cli").rglob("*.py")
    if p.name != "__main__.py"
)
HEAVY = ("pygit2", "jsonschema", "rich", "ruamel.yaml", "typer", "click", "filelock")


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_alone(module, tmp_path):
    r = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == [], "importing must not write files"


def test_core_modules_do_not_import_the_cli_toolkit():
    code = ("import sys, importlib, pkgutil, reef_cli\n"
            "for m in pkgutil.iter_modules(reef_cli.__path__):\n"
            "    if not m.ispkg and m.name != '__main__': importlib.import_module('reef_cli.' + m.name)\n"
            "print([n for n in ('typer', 'rich') if n in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _imported(args: list[str], cwd: Path, env: dict) -> set[str]:
    # `python -m reef_cli` enters where the `reef` console script does (reef_cli.cli.entry:main)
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "reef_cli", *args], cwd=cwd, capture_output=True,
                       text=True, env={**os.environ, **env})
    names = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def test_hot_commands_stay_lean(tmp_path):
    env = {"REEF_SESSION": "lean"}
    assert run_reef("init", cwd=tmp_path).returncode == 0
    for args in (["run", "--", "true"], ["report", "--score", "1"]):  # the first run after init too (init warms)
        names = _imported(args, tmp_path, env)
        heavy = sorted(n for n in names if n in HEAVY or n.startswith(tuple(h + "." for h in HEAVY)))
        assert heavy == [], f"reef {' '.join(args)} imported {heavy}"
