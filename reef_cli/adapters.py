"""Agent adapters as data: `adapters/<name>/descriptor.json` says where an agent reads its harness, which limits it
imposes, how to point it at an install root, how to run it headless and which of its output events to keep.

Keeping this in data means adding an agent is a reviewed JSON file, and the compiler, installer and wrapper stay
generic. Loading is stdlib-only: wrappers call this on every agent start.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .errors import InvalidInput, NotFound
from .project import shipped

ADAPTERS_DIR = shipped("adapters")


@dataclass(frozen=True)
class Layout:
    instructions: str  # the one instruction file the agent gets (project-relative)
    reads: tuple[str, ...]  # canonical instruction files in the agent's own precedence order
    skills: str  # skill directory: <skills>/<name>/SKILL.md
    rules: str | None  # rules directory, or None: rules are appended to the instruction file
    settings: str | None  # where .claude/settings.json goes, or None: not for this agent
    commands: str | None  # where commands / prompt templates go (<commands>/<name>.md), or None: not for this agent
    own_dir: str  # the agent's private directory (.claude, .pi, ...): passed through to this agent only
    config_strip: tuple[str, ...]  # prefixes dropped for the config-dir layout (CLAUDE_CONFIG_DIR, ...)


@dataclass(frozen=True)
class Capture:
    name: str
    match: dict
    keep: tuple[str, ...]


@dataclass(frozen=True)
class Adapter:
    name: str
    title: str
    wrapper: bool
    binary: str
    npm_package: str | None
    npm_version: str | None
    layout: Layout
    limits: dict
    frontmatter: dict[str, tuple[str, ...]]
    config_dir: str
    env: dict[str, str]
    headless: tuple[str, ...]
    capture: tuple[Capture, ...] = ()
    source: Path = field(default=Path("."), compare=False)

    @property
    def npm_spec(self) -> str | None:
        if not self.npm_package:
            return None
        return f"{self.npm_package}@{self.npm_version}" if self.npm_version else self.npm_package

    def headless_argv(self, prompt: str) -> list[str]:
        """The agent's non-interactive arguments for one prompt (without the binary)."""
        return [prompt if a == "{prompt}" else a for a in self.headless]

    def agent_env(self, agent_dir: Path) -> dict[str, str]:
        return {k: v.replace("{dir}", str(agent_dir)) for k, v in self.env.items()}

    def bin_env(self) -> str:
        """Env var that overrides where the real agent binary is (REEF_CLAUDE_BIN, ...)."""
        return f"REEF_{self.name.upper()}_BIN"

    def to_json(self) -> dict:
        return json.loads(self.source.read_text()) if self.source.is_file() else {"name": self.name}


def names() -> list[str]:
    return sorted(p.name for p in ADAPTERS_DIR.iterdir() if (p / "descriptor.json").is_file())


def wrapper_names() -> list[str]:
    return [n for n in names() if load(n).wrapper]


@lru_cache(maxsize=None)
def load(name: str) -> Adapter:
    path = ADAPTERS_DIR / name / "descriptor.json"
    if not name or "/" in name or name.startswith(".") or not path.is_file():
        raise NotFound(f"no agent adapter '{name}' (known: {', '.join(names())})")
    try:
        d = json.loads(path.read_text())
    except ValueError as exc:
        raise InvalidInput(f"{path}: not valid JSON ({exc})") from None
    try:
        lay = d["layout"]
        layout = Layout(lay["instructions"], tuple(lay["reads"]), lay["skills"].rstrip("/"),
                        (lay.get("rules") or None), lay.get("settings"), lay.get("commands"), lay["own_dir"].rstrip("/"),
                        tuple(lay.get("config_strip") or ()))
        npm = d.get("npm") or {}
        return Adapter(
            name=d["name"], title=d.get("title", d["name"]), wrapper=bool(d.get("wrapper", True)),
            binary=d["binary"], npm_package=npm.get("package"), npm_version=npm.get("version"), layout=layout,
            limits=dict(d.get("limits") or {}),
            frontmatter={k: tuple(v) for k, v in (d.get("frontmatter") or {}).items()},
            config_dir=d["config_dir"], env=dict(d.get("env") or {}), headless=tuple(d.get("headless") or ()),
            capture=tuple(Capture(c["as"], dict(c["match"]), tuple(c.get("keep") or ())) for c in d.get("capture") or ()),
            source=path,
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidInput(f"{path}: malformed adapter descriptor (missing or wrong field {exc})") from None


def captured_events(adapter: Adapter, stdout: bytes) -> dict:
    """The events the agent printed about what it loaded (Claude Code's `init`, pi's `session`), trimmed to `keep`.

    Agents print one JSON object per line in their JSON modes; anything else on stdout is ignored.
    """
    out: dict = {}
    if not adapter.capture:
        return out
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith(b"{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        for cap in adapter.capture:
            if cap.name in out:
                continue
            if all(event.get(k) == v for k, v in cap.match.items()):
                out[cap.name] = {k: event[k] for k in cap.keep if k in event} if cap.keep else event
    return out


def data_dir(environ: dict | None = None) -> Path:
    """$XDG_DATA_HOME or ~/.local/share: where pinned agents and install roots live."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "share"))


def agents_dir(environ: dict | None = None) -> Path:
    """Where `adapters/install-agents.sh` puts pinned agent CLIs: $REEF_AGENTS_DIR or <data dir>/reef/agents."""
    env = os.environ if environ is None else environ
    if env.get("REEF_AGENTS_DIR"):
        return Path(env["REEF_AGENTS_DIR"])
    return data_dir(env) / "reef" / "agents"


def find_binary(adapter: Adapter, environ: dict | None = None) -> str | None:
    """The real agent: $REEF_<NAME>_BIN, then the pinned install under agents_dir(), then PATH."""
    import shutil

    env = os.environ if environ is None else environ
    explicit = env.get(adapter.bin_env())
    if explicit:
        return explicit
    pinned = agents_dir(env) / adapter.name / "node_modules" / ".bin" / adapter.binary
    if os.access(pinned, os.X_OK):
        return str(pinned)
    return shutil.which(adapter.binary, path=env.get("PATH"))


def install_hint(adapter: Adapter) -> str:
    return (f"{adapter.binary} ({adapter.title}) not found: install it with 'adapters/install-agents.sh {adapter.name}' "
            f"from reef's checkout, or 'npm install -g {adapter.npm_spec}', or set {adapter.bin_env()}="
            f"/path/to/{adapter.binary}")
