"""What an installed reef carries: setuptools' own build step, run offline on pyproject.toml, must copy every file of
the folders reef ships (starter harnesses, recipes, adapters) and its schemas into the package, where
`project.shipped` finds them outside a checkout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO

BUILD = """
import json, pathlib, sys
from setuptools.dist import Distribution
dist = Distribution({"script_name": "setup.py"})
dist.parse_config_files()
cmd = dist.get_command_obj("build_py")
cmd.build_lib = sys.argv[1]
cmd.ensure_finalized()
cmd.run()
root = pathlib.Path(sys.argv[1])
print(json.dumps(sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())))
"""


def test_the_package_build_carries_every_shipped_file(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path / "lib")], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    built = set(json.loads(r.stdout.splitlines()[-1]))
    for folder in ("harness_templates", "recipes", "adapters"):
        expected = {f"reef_cli/shipped/{folder}/{p.relative_to(REPO / folder)}"
                    for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
        assert expected and expected <= built, sorted(expected - built)
    assert {"reef_cli/schemas/harness.schema.json", "reef_cli/schemas/task.schema.json"} <= built
    assert "reef_cli/cli/entry.py" in built


def test_shipped_folders_are_found_in_a_checkout() -> None:
    from reef_cli.project import shipped

    for folder in ("harness_templates", "recipes", "adapters"):
        assert shipped(folder) == REPO / folder


def test_every_package_of_reef_cli_is_listed_in_pyproject():
    """A package left out of [tool.setuptools] packages is missing from a built wheel (reef_cli.evolve once was)."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "reef_cli").rglob("__init__.py")
        if "shipped" not in p.parts and "__pycache__" not in p.parts
    }
    assert found - listed == set(), f"pyproject.toml does not list {sorted(found - listed)}"
