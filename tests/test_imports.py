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
# Loaded only where they are used, not by `reef run` / `reef report` (each costs every agent session's start-up)
NOT_HOT = ("reef_cli.ledger.verify", "reef_cli.ledger.since", "reef_cli.ledger.anchors", "reef_cli.ledger.export",
           "reef_cli.chain_integrity", "difflib", "reef_cli.config")


# A fresh `python -c` that imports nothing, then forks one child per module: each child starts with exactly the
# modules a fresh interpreter has (the parent reads its requests with sys.stdin and answers with os.write, both
# loaded at start-up) and runs as `python -c "import MODULE"` would, from the chdir on: an import error prints its
# traceback and exits 1, a clean import exits 0 through the interpreter's normal exit. The same check as one
# interpreter per module, without ~25 ms of interpreter start-up for each of the ~140 modules.
_FORKER = r"""
import os, sys
for line in sys.stdin:
    module, cwd, log = line.rstrip("\n").split("\t")
    pid = os.fork()
    if pid == 0:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.chdir(cwd)
        __import__(module)
        raise SystemExit(0)
    _, status = os.waitpid(pid, 0)
    os.write(1, b"%d\n" % os.waitstatus_to_exitcode(status))
"""


@pytest.fixture(scope="module")
def import_alone(tmp_path_factory):
    """import_alone(module, cwd) -> (exit code, output) of importing `module` in a fresh interpreter run in `cwd`."""
    home = tmp_path_factory.mktemp("forker-home")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_CACHE_HOME": str(home / "cache")}
    env.pop("REEF_SCENARIO", None)
    logs = tmp_path_factory.mktemp("forker-logs")
    proc = subprocess.Popen([sys.executable, "-c", _FORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, text=True, bufsize=1)

    def call(module: str, cwd: Path) -> tuple[int, str]:
        log = logs / f"{module}.txt"
        proc.stdin.write(f"{module}\t{cwd}\t{log}\n")
        proc.stdin.flush()
        code = int(proc.stdout.readline())
        return code, log.read_text()

    yield call
    proc.stdin.close()
    proc.wait(timeout=30)


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_alone(module, tmp_path, import_alone):
    code, output = import_alone(module, tmp_path)
    assert code == 0, output
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
        lazy = sorted(n for n in names if n in NOT_HOT)
        assert lazy == [], f"reef {' '.join(args)} imported {lazy}"


def test_the_redactor_compiles_no_pattern_on_import():
    """`reef run` redacts its small payload on every call: a pattern is compiled when a text first reaches it (the
    redactor's catalogue has ~100; compiling them all cost ~10 ms of every run's start-up)."""
    code = ("import re, sys, importlib, pkgutil, reef_cli.redact as r\n"
            "mods = [r] + [importlib.import_module('reef_cli.redact.' + m.name)\n"
            "              for m in pkgutil.iter_modules(r.__path__)]\n"
            "print(sorted(f'{m.__name__}.{k}' for m in mods for k, v in vars(m).items() if isinstance(v, re.Pattern)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
