"""What every command needs: the project, the scenario, output streams and --json; built once per process."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import NotFound, ReefError
from ..project import Project, find_project


@dataclass
class Env:
    cwd: Path = field(default_factory=Path.cwd)
    scenario_name: str | None = None
    environ: dict = field(default_factory=lambda: dict(os.environ))
    _project: Project | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def at(cls, directory: str | Path | None, scenario_name: str | None) -> "Env":
        """`reef [-C DIR] [--scenario S]`: one definition for the typer callback and the fast path in hot.py."""
        try:
            cwd = Path.cwd()
        except FileNotFoundError:  # the shell's directory was deleted under it
            if directory is None or not Path(directory).is_absolute():
                raise ReefError("the current directory no longer exists; cd to the project (or pass -C DIR)") from None
            cwd = Path(directory)
        if directory is not None:
            cwd = (cwd / directory).resolve()
            if not cwd.is_dir():
                raise ReefError(f"-C {directory}: not a directory")
        return cls(cwd=cwd, scenario_name=scenario_name)

    def project(self) -> Project:
        """Found once per process: `store()` and `paths()` need it, and so does `scenario()` under them."""
        if self._project is None:
            self._project = find_project(self.cwd)
        return self._project

    def scenario(self) -> str:
        return self.scenario_name or self.environ.get("REEF_SCENARIO") or self.project().default_scenario()

    def paths(self):
        """The scenario's locations without loading the store (the lean path of `reef report`)."""
        from ..project import ScenarioPaths

        project = self.project()
        paths = ScenarioPaths(project, self.scenario())
        self._require(paths)
        return paths

    def store(self):
        from ..store import HarnessStore

        project = self.project()
        store = HarnessStore(project, self.scenario())
        self._require(store)
        return store

    @staticmethod
    def _require(store) -> None:
        project = store.project
        if not store.exists():
            known = ", ".join(project.scenarios()) or "none"
            raise NotFound(
                f"scenario '{store.scenario}' does not exist in {project.root} (known: {known}); "
                f"create it with 'reef init --scenario {store.scenario}'"
            )


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 200  # pipes and logs get full ids rather than ellipses
    return Console(stderr=stderr, highlight=False, width=width)


def cell(value) -> "object":
    """A table cell holding text from outside (bullet texts, keys, paths): control characters escaped
    (printable.py) and never read as rich markup, so '[/x]' in a bullet neither crashes the table nor styles it."""
    from rich.text import Text

    from ..printable import printable

    return Text(printable("" if value is None else str(value)))


def note(message: str) -> None:
    """A one-line notice on stderr (keeps stdout clean for pipes); control characters escaped (printable)."""
    from ..printable import printable

    sys.stderr.write(f"reef: {printable(message)}\n")
