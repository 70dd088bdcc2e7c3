"""Finding a reef project the way git finds a repository, and the layout of its state directory."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from .durable import SMALL_STATE_LIMIT, STATE_DIR_MODE, STATE_FILE_MODE, make_dirs, read_state, refuse_misplaced, write_atomic
from .errors import InvalidInput, NotFound, StoreError

__all__ = ["Project", "ScenarioPaths", "find_project", "check_scenario_name", "write_atomic"]

STATE_DIR = ".reef"
PROJECT_FILE = "project.json"
DEFAULT_SCENARIO = "default"
_SCENARIO_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def check_scenario_name(name: str) -> str:
    if not _SCENARIO_RE.match(name or ""):
        raise InvalidInput(
            f"scenario name '{name}' is invalid: use 1-64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class Project:
    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    @property
    def git_dir(self) -> Path:
        return self.state / "git"

    def scenario_dir(self, name: str) -> Path:
        return self.state / "scenarios" / check_scenario_name(name)

    def settings(self) -> dict:
        """The project file's settings ({} when it is gone); read as every state file is (`durable.read_state`)."""
        data = read_state(self.state / PROJECT_FILE, SMALL_STATE_LIMIT)
        if data is None:
            return {}
        try:
            settings = json.loads(data)
        except ValueError:
            settings = None
        if not isinstance(settings, dict):  # `[]` after a bad edit is as corrupt as torn bytes
            raise StoreError(f"{self.state / PROJECT_FILE}: corrupt project file")
        return settings

    def default_scenario(self) -> str:
        return self.settings().get("default_scenario", DEFAULT_SCENARIO)

    def create_state(self, default_scenario: str) -> None:
        """Make `root` a reef project: `.reef/` (ignored by the user's git) with its project file, written last as
        the marker `find_project` looks for."""
        from .releases import canonical

        make_dirs(self.state)
        write_atomic(self.state / ".gitignore", b"*\n", STATE_FILE_MODE)
        write_atomic(self.state / PROJECT_FILE, canonical({"version": 1, "default_scenario": default_scenario}) + b"\n",
                     STATE_FILE_MODE)
        self.secure_state()

    def secure_state(self) -> None:
        """Make the state owner-only whatever the umask it was made under: `.reef/` and the directories reef
        keeps in it 0700 (which alone shuts everything under it to others), its own state files 0600, and nothing
        below them open to group or others. `reef init` calls this every time, so a project made by an older reef
        is tightened too."""
        dirs = [self.state]
        files = [self.state / PROJECT_FILE, self.state / ".gitignore"]
        dirs.extend(p for p in self.state.iterdir() if p.is_dir() and not p.is_symlink())  # git, scenarios, trees…
        base = self.state / "scenarios"
        if base.is_dir():
            for scenario in base.iterdir():
                if scenario.is_dir() and not scenario.is_symlink():
                    dirs.append(scenario)
                    for entry in scenario.iterdir():  # runs/, evolve/, pending/ and the state files
                        if not entry.is_symlink():
                            (dirs if entry.is_dir() else files).append(entry)
        for path, mode in [*((d, STATE_DIR_MODE) for d in dirs), *((f, STATE_FILE_MODE) for f in files)]:
            try:
                if (os.lstat(path).st_mode & 0o777) != mode:
                    os.chmod(path, mode, follow_symlinks=False)
            except FileNotFoundError:
                pass
        # Deeper down (git objects and refs, materialised trees, pages, gate runs an older reef left to the umask)
        # only the group and other bits go: read-only copies stay read-only, executables executable.
        for dirpath, dirnames, filenames in os.walk(self.state):
            for name in (*dirnames, *filenames):
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                    if st.st_mode & 0o077 and not stat.S_ISLNK(st.st_mode):
                        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077, follow_symlinks=False)
                except FileNotFoundError:
                    pass

    def scenarios(self) -> list[str]:
        base = self.state / "scenarios"
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / "scenario.json").exists())


@dataclass(frozen=True)
class ScenarioPaths:
    """Where one scenario's state lives; enough for `reef report`, which must not pay for the store's imports."""

    project: Project
    scenario: str

    @property
    def dir(self) -> Path:
        return self.project.scenario_dir(self.scenario)

    @property
    def ledger_path(self) -> Path:
        return self.dir / "ledger.jsonl"

    def exists(self) -> bool:
        """As HarnessStore.exists: a scenario.json of the wrong kind is named (exit 4), not "does not exist"."""
        refuse_misplaced(self.dir / "scenario.json")
        return (self.dir / "scenario.json").is_file()

    def ledger(self):
        """This scenario's ledger (constructing one reads and opens nothing)."""
        from .ledger import Ledger

        return Ledger(self.ledger_path, self.scenario)


def shipped(name: str) -> Path:
    """A folder reef ships (harness_templates, recipes, adapters): at the top of a checkout, or under
    reef_cli/shipped/ in an installed wheel, where pyproject.toml maps them."""
    package = Path(__file__).resolve().parent
    installed = package / "shipped" / name
    return installed if installed.is_dir() else package.parent / name


def find_project(start: Path) -> Project:
    """Walk up from `start` to the first directory holding `.reef/project.json`. A project file of the wrong kind
    (a directory, a FIFO, a symlink) is named there (MisplacedState, exit 4), not passed over for "not a reef
    project" and a `reef init` that would fail on it; one lstat() per directory."""
    here = Path(os.path.abspath(start))
    for candidate in (here, *here.parents):
        marker = candidate / STATE_DIR / PROJECT_FILE
        try:
            mode = os.lstat(marker).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not stat.S_ISREG(mode):
            refuse_misplaced(marker)
        return Project(candidate)
    raise NotFound(f"not a reef project (or any parent up to /): {here}; run 'reef init' first")
