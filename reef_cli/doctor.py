"""`reef doctor`: one pass over everything that makes reef work on this machine, each finding with its fix.

Every check returns `Check` rows (ok / warn / fail) and never raises: a doctor that crashes on the broken set-up it
was asked about is no use. `fail` means something reef does will not work (a ledger that does not verify, a wrapper
shadowed on PATH, state others can write); `warn` means something is off but reef still works (an agent not
installed, a version other than the pinned one, state others can read, an endpoint not configured to be reached).
The exit status is 1 when any row fails and 0 otherwise, so `reef doctor && ...` only stops on real breakage.

Pure: no typer or rich. Slow probes (an agent's `--version`, an endpoint's TCP connect) run with short timeouts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable
from urllib.parse import urlsplit

from .durable import read_state

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_PYTHON = (3, 11)
VERSION_TIMEOUT = 20.0  # node CLIs take seconds to print a version on a busy machine
CONNECT_TIMEOUT = 2.0
# Endpoints read from the environment (harness.yaml adds the reflector's model_url): name -> variable.
ENDPOINT_ENV = {"serve": "REEF_SERVE_URL", "engine": "REEF_ENGINE_URL", "reflector": "REEF_REFLECTOR_URL"}
_VERSION_RE = re.compile(r"\d+\.\d+\.\d+(?:[-+.][0-9A-Za-z.-]+)?")


@dataclass(frozen=True)
class Check:
    """One finding: `name` groups it (python, agent:claude, wrapper:pi, state:ledger, endpoint:serve ...)."""

    name: str
    status: str  # ok | warn | fail
    message: str
    fix: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]

    @property
    def exit_code(self) -> int:
        return 1 if any(c.status == FAIL for c in self.checks) else 0

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in (OK, WARN, FAIL)}

    def to_json(self) -> dict:
        return {"ok": self.exit_code == 0, "counts": self.counts(), "checks": [c.to_json() for c in self.checks]}


# -- python and reef -------------------------------------------------------------------------------------------------
def check_python(version: tuple = tuple(sys.version_info[:3]), executable: str = sys.executable) -> list[Check]:
    text = ".".join(str(v) for v in version)
    if tuple(version[:2]) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return [Check("python", FAIL, f"Python {text} ({executable}); reef needs {need} or newer",
                      f"reinstall reef with Python {need}+: ./install.sh")]
    return [Check("python", OK, f"Python {text} ({executable})")]


def check_reef(environ: dict) -> list[Check]:
    """reef's version, and whether the `reef` on PATH is this same installation (a second, older one is a classic)."""
    from . import __version__

    here = Path(sys.executable).parent / "reef"
    found = shutil.which("reef", path=environ.get("PATH"))
    msg = f"reef {__version__} ({Path(__file__).resolve().parent})"
    if found is None:
        return [Check("reef", WARN, f"{msg}; no 'reef' on PATH",
                      f"add {here.parent} to PATH, or link {here} into a directory on PATH")]
    if here.is_file() and os.path.realpath(found) != os.path.realpath(here):
        return [Check("reef", WARN, f"{msg}; but 'reef' on PATH is {found}, another installation",
                      f"put {here.parent} first on PATH or remove {found}")]
    return [Check("reef", OK, msg)]


# -- agents ----------------------------------------------------------------------------------------------------------
def package_version(binary: str, package: str | None) -> str | None:
    """The version in the package.json of the npm package a binary resolves into (no process started)."""
    if not package:
        return None
    p = Path(os.path.realpath(binary)).parent
    for d in (p, *p.parents):
        manifest = d / "package.json"
        if manifest.is_file():
            try:
                data = json.loads(manifest.read_text())
            except (OSError, ValueError):
                return None
            if data.get("name") == package:
                return str(data.get("version") or "") or None
        if d.name == "node_modules":
            return None
    return None


def probe_version(binary: str, timeout: float = VERSION_TIMEOUT) -> str | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    m = _VERSION_RE.search(out.stdout or "") or _VERSION_RE.search(out.stderr or "")
    return m.group(0) if m else None


def agent_version(binary: str, package: str | None) -> str | None:
    return package_version(binary, package) or probe_version(binary)


def check_agents(environ: dict) -> list[Check]:
    from concurrent.futures import ThreadPoolExecutor

    from .adapters import find_binary, install_hint, load, names

    adapters = [load(n) for n in names()]
    found = {a.name: find_binary(a, environ) for a in adapters}
    with ThreadPoolExecutor(max_workers=max(1, len(adapters))) as pool:
        versions = dict(zip(found, pool.map(lambda a: agent_version(found[a.name], a.npm_package)
                                            if found[a.name] else None, adapters)))
    out = []
    for a in adapters:
        binary, version = found[a.name], versions[a.name]
        name = f"agent:{a.name}"
        if binary is None:
            out.append(Check(name, WARN, f"{a.title}: '{a.binary}' not found", install_hint(a)))
        elif not os.access(binary, os.X_OK):
            out.append(Check(name, FAIL, f"{a.title}: {binary} is not an executable file",
                             f"fix or unset {a.bin_env()}, or reinstall: adapters/install-agents.sh {a.name}"))
        elif version is None:
            out.append(Check(name, WARN, f"{a.title}: {binary} did not report a version (pinned {a.npm_version})",
                             f"run '{binary} --version' to see why; reinstall: adapters/install-agents.sh {a.name}"))
        elif a.npm_version and version != a.npm_version:
            out.append(Check(name, WARN, f"{a.title} {version} at {binary}; reef is tested with {a.npm_version}",
                             f"adapters/install-agents.sh {a.name} (installs the pinned {a.npm_spec})"))
        else:
            pinned = " (pinned)" if a.npm_version else ""
            out.append(Check(name, OK, f"{a.title} {version}{pinned} at {binary}"))
    return out


# -- wrappers --------------------------------------------------------------------------------------------------------
def _on_path(command: str, environ: dict) -> list[str]:
    """Every executable `command` on PATH, in lookup order (shutil.which only gives the first)."""
    seen, out = set(), []
    for d in (environ.get("PATH") or "").split(os.pathsep):
        if not d:
            continue
        p = os.path.abspath(os.path.join(d, command))
        if p not in seen and os.path.isfile(p) and os.access(p, os.X_OK):
            seen.add(p)
            out.append(p)
    return out


def is_bound_wrapper(path: str) -> bool:
    """A wrapper written by `reef harness install` names its project; the bare console script does not."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!/bin/sh") and b"\nREEF_PROJECT=" in head


def install_records(state: Path) -> list[tuple[Path, dict | None, str | None]]:
    """(path, record, why) for each install record under .reef/installs: the parsed JSON (None when it does not
    parse), and `why` when the file could not be read as state is read (`durable.read_state`: a FIFO, a symlink, a
    directory or a file larger than any record), the line naming it. A FIFO there used to hang doctor for good."""
    from .durable import misplaced_oserror
    from .errors import MisplacedState, ReefError
    from .install import RECORD_LIMIT

    base = state / "installs"
    if not base.is_dir():
        return []
    out: list[tuple[Path, dict | None, str | None]] = []
    for p in sorted(base.glob("*.json")):
        if p.name.endswith(".sessions.json"):
            continue  # a wrapper's last session per shell (cli/wrapper.py, Binding.last_path), not a record
        try:
            raw = read_state(p, RECORD_LIMIT)
        except MisplacedState as exc:
            out.append((p, None, exc.what))
            continue
        except ReefError:
            out.append((p, None, f"{p} is larger than {RECORD_LIMIT} bytes, more than reef ever writes there"))
            continue
        except OSError as exc:
            found = misplaced_oserror(exc)
            out.append((p, None, found.what if found is not None else f"{p} cannot be read: {exc.strerror or exc}"))
            continue
        try:
            out.append((p, json.loads(raw) if raw is not None else None, None))
        except ValueError:
            out.append((p, None, None))
    return out


def check_wrappers(state: Path | None, environ: dict) -> list[Check]:
    """For each wrapper this project installed: it exists, it is what `reef-<agent>` runs from PATH, and no other
    `reef-<agent>` (an unbound console script, another project's wrapper) comes before it."""
    if state is None:
        return []
    out = []
    for path, rec, why in install_records(state):
        if why is not None:
            out.append(Check("wrapper", FAIL, why, f"move {path} away, then re-run 'reef harness install --adapter "
                                                   "AGENT' for the agent it was for"))
            continue
        if rec is None or not isinstance(rec, dict) or "adapter" not in rec:
            out.append(Check("wrapper", FAIL, f"{path}: corrupt install record",
                             "re-run 'reef harness install --adapter AGENT' for the agent it was for"))
            continue
        agent, wrapper = rec["adapter"], rec.get("wrapper")
        name = f"wrapper:{agent}"
        redo = f"reef harness install --adapter {agent}"
        if not wrapper:
            continue  # installed with --no-wrapper: nothing to find on PATH
        if not (os.path.isfile(wrapper) and os.access(wrapper, os.X_OK)):
            out.append(Check(name, FAIL, f"reef-{agent}: the bound wrapper {wrapper} is missing or not executable",
                             redo))
            continue
        found = _on_path(f"reef-{agent}", environ)
        first = found[0] if found else None
        if first is None:
            out.append(Check(name, WARN, f"reef-{agent} is bound at {wrapper} but its directory is not on PATH",
                             f"add {os.path.dirname(wrapper)} to PATH (e.g. in ~/.profile)"))
        elif os.path.realpath(first) == os.path.realpath(wrapper):
            out.append(Check(name, OK, f"reef-{agent} on PATH is the wrapper bound to this project ({wrapper})"))
        else:
            what = "another project's wrapper" if is_bound_wrapper(first) else "an unbound reef-" + agent
            listed = os.path.realpath(wrapper) in {os.path.realpath(f) for f in found}
            fix = (f"put {os.path.dirname(wrapper)} before {os.path.dirname(first)} on PATH, or remove {first}"
                   if listed else f"add {os.path.dirname(wrapper)} to PATH before {os.path.dirname(first)}")
            out.append(Check(name, FAIL, f"reef-{agent} on PATH is {first} ({what}), shadowing the bound wrapper "
                                         f"{wrapper}", fix))
    return out


# -- project state ---------------------------------------------------------------------------------------------------
def _modes(state: Path) -> tuple[list[str], list[str]]:
    """Paths under .reef that others can write (fail) and that others can read (warn)."""
    writable, readable = [], []
    for dirpath, dirnames, filenames in os.walk(state):
        for name in [None, *filenames]:
            p = dirpath if name is None else os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            if st.st_mode & 0o022:
                writable.append(p)
            elif st.st_mode & 0o055 if name is None else st.st_mode & 0o044:
                readable.append(p)
    return writable, readable


def _few(paths: list[str], n: int = 3) -> str:
    more = f" and {len(paths) - n} more" if len(paths) > n else ""
    return ", ".join(paths[:n]) + more


def check_permissions(state: Path) -> list[Check]:
    writable, readable = _modes(state)
    fix = f"chmod -R go-rwx {state}"
    if writable:
        return [Check("state:permissions", FAIL, f"{len(writable)} path(s) under {state} are writable by others: "
                                                 f"{_few(writable)}", fix)]
    if readable:
        return [Check("state:permissions", WARN, f"{len(readable)} path(s) under {state} are readable by others "
                                                 f"(ledger and receipts are private): {_few(readable)}", fix)]
    return [Check("state:permissions", OK, f"{state} is owner-only")]


def check_state(cwd: Path, scenario: str | None, environ: dict) -> tuple[list[Check], Path | None, object]:
    """The project at `cwd`: store readable, ledger verifies, owner-only state, installed harnesses intact.
    Returns the checks, the state directory (None outside a project) and the store (or None)."""
    from .errors import ReefError
    from .project import find_project

    try:
        project = find_project(cwd)
    except ReefError as exc:
        return [Check("project", WARN, str(exc), "cd into a reef project or pass -C DIR; 'reef init' makes one")], \
            None, None
    out = [Check("project", OK, f"reef project at {project.root}")]
    state = project.state
    store = None
    try:
        from .store import HarnessStore

        name = scenario or environ.get("REEF_SCENARIO") or project.default_scenario()
        store = HarnessStore(project, name)
        if not store.exists():
            known = ", ".join(project.scenarios()) or "none"
            out.append(Check("state:store", FAIL, f"scenario '{name}' does not exist (known: {known})",
                             f"reef init --scenario {name}"))
            store = None
        else:
            store.info()  # scenario.json must parse: every command reads it first
            head = store.require_head()
            store.files_of(head)  # reads the head's tree from the object store
            out.append(Check("state:store", OK, f"scenario '{name}': head release {head.release_id} "
                                                f"(step {head.step}) readable"))
    except Exception as exc:  # pygit2 and OS errors on a damaged store: reported, never raised
        misplaced = _misplaced("state:store", exc)
        if misplaced is not None:
            out.append(misplaced)
        elif isinstance(exc, ReefError):
            out.append(Check("state:store", FAIL, f"store unreadable: {exc}", "restore .reef from a backup; 'reef "
                             "ledger verify' and 'git -C .reef/git fsck' locate damage"))
        else:
            out.append(Check("state:store", FAIL, f"store unreadable: {type(exc).__name__}: {exc}",
                             "restore .reef from a backup; 'git -C .reef/git fsck' locates damage"))
        store = None
    if store is not None:
        out.extend(check_ledger(store))
        out.extend(check_state_files(store))
        out.extend(check_interrupted(store))
        out.extend(check_ingest(store))
    out.extend(check_permissions(state))
    out.extend(check_installs(state))
    return out, state, store


def _misplaced(name: str, exc: BaseException) -> Check | None:
    """The row for a state file of the wrong kind (`durable.misplaced`: a directory, a symlink, a FIFO where reef
    expects a file, a file where it expects a directory), or None for any other error. The row says what is there;
    its fix is the advice every command's line gives."""
    from .durable import misplaced_oserror
    from .errors import MisplacedState

    found = exc if isinstance(exc, MisplacedState) else misplaced_oserror(exc)
    if found is None:
        return None
    return Check(name, FAIL, found.what, f"move {found.path} away")


def check_ledger(store) -> list[Check]:
    from .durable import refuse_misplaced
    from .project import ScenarioPaths

    paths = ScenarioPaths(store.project, store.scenario)
    ledger = paths.ledger()
    try:  # checked before verify: a lock or sync page of the wrong kind stops every `reef run` (exit 4) while the
        # records still verify, and verify would read a symlinked ledger's target
        ledger.check_files()
        refuse_misplaced(ledger.index_path)
    except Exception as exc:
        found = _misplaced("state:ledger", exc)
        if found is None:
            raise
        return [found]
    if not os.path.lexists(paths.ledger_path) and not os.path.lexists(paths.ledger_path.with_name("ledger.jsonl.sync")):
        # no ledger and no acknowledged mark: a new project (a gone ledger whose mark says it held records is a loss
        # `verify` names)
        return [Check("state:ledger", OK, f"ledger {paths.ledger_path}: empty (no records yet)")]
    try:
        res = ledger.verify()
    except Exception as exc:  # a ledger too damaged to walk is a finding, not a crash
        found = _misplaced("state:ledger", exc)
        if found is not None:  # met while verifying (a FIFO planted meanwhile): the line every command gives
            return [found]
        return [Check("state:ledger", FAIL, f"ledger {paths.ledger_path} cannot be verified: {exc}",
                      "reef ledger verify")]
    if res.ok and res.torn_tail:
        return [Check("state:ledger", WARN, f"ledger verifies ({res.count} record(s)) but ends in a torn line, left by "
                                            "an interrupted write", "none needed: the next append cuts the torn line; "
                                                                    "'reef ledger verify' to re-check")]
    if res.ok and res.mark_missing:
        return [Check("state:ledger", WARN, f"ledger chain verifies ({res.count} record(s)) but "
                                            f"{paths.ledger_path.name}.sync holds no acknowledged mark: records cut off "
                                            "its end could not be detected",
                      "put back ledger.jsonl.sync if it was moved; otherwise the next append (reef run, reef report) "
                      "starts a new mark")]
    if res.ok and res.newline_missing:
        return [Check("state:ledger", WARN, f"ledger verifies ({res.count} record(s)) but its last record lacks its "
                                            "final newline (a write torn at its last byte; the record is whole)",
                      "'reef repair ledger' adds it (so does the next append); nothing is lost")]
    if res.ok:
        return [Check("state:ledger", OK, f"ledger verifies: {res.count} record(s)")]
    where = f" at line {res.line}" if res.line else ""
    return [Check("state:ledger", FAIL, f"ledger {paths.ledger_path} does not verify{where}: "
                                        f"{res.message or res.problem}",
                  "reef ledger verify --json shows the first bad record; restore the file from a backup"
                  + ("; with none, 'reef repair ledger --accept-loss' records the loss" if res.problem == "cut" else ""))]


def check_state_files(store) -> list[Check]:
    """The scenario's other state of a fixed kind: its lock a regular file (or absent), runs/ and pending/, and the
    project's .reef/trees (materialised releases) directories (or absent). Each of the wrong kind stops the commands
    that meet it (exit 4: publish and evolve at the lock, `reef run` at the directories), so doctor names it; the
    ledger's own files are check_ledger's."""
    from .durable import misplaced, refuse_misplaced

    out = []
    try:
        refuse_misplaced(store.dir / "lock")
    except Exception as exc:
        found = _misplaced("state:files", exc)
        if found is None:
            raise
        out.append(found)
    # judged as `reef run` judges them: a directory, or a link to one, is fine
    for path in (store.dir / "runs", store.dir / "pending", store.project.state / "trees"):
        if os.path.lexists(path) and not path.is_dir():
            out.append(_misplaced("state:files", misplaced(path, "ENOTDIR")))
    return out or [Check("state:files", OK, f"{store.dir}: lock, runs/ and pending/ (and .reef/trees) are what reef "
                                            "expects there")]


def check_interrupted(store) -> list[Check]:
    """An evolve or a rollback killed part-way (their journals): the working tree may hold part of a release, which
    `reef status` would otherwise list as the user's edits and `reef publish` would publish back. A half-written
    tree is a failure; an evolve stopped before it wrote anything is a warning (finishing it is still owed)."""
    from .evolve import JournalFile, in_flight
    from .rollback_journal import pending

    out = []
    try:
        journal = JournalFile(store.dir / "evolve").load()
        evolve = in_flight(store) if journal is not None else None
    except Exception as exc:  # an unreadable journal is a finding, not a crash
        evolve, journal = f"evolve journal in {store.dir / 'evolve'} cannot be read: {exc}", None
    if evolve:
        out.append(Check("state:interrupted", FAIL if journal is None or journal.phase == "writing" else WARN, evolve,
                         "reef harness evolve"))
    try:
        rolling = pending(store)
    except Exception as exc:
        out.append(Check("state:interrupted", FAIL, f"rollback journal {store.dir / 'rollback.json'} cannot be "
                                                    f"read: {exc}", f"move {store.dir / 'rollback.json'} away"))
        rolling = None
    if rolling is not None:
        out.append(Check("state:interrupted", FAIL, f"a {rolling.sentence()}", f"reef rollback {rolling.target.step}"))
    return out or [Check("state:interrupted", OK, "no evolve or rollback was left half-done")]
def check_ingest(store) -> list[Check]:
    """Transcripts the hook or a wrapper could not ingest, whole or in part (reef_cli/ingest/failures.py): a warning,
    since what could be read was learned from and reef still works; the hook's own output reaches no one."""
    from .durable import refuse_misplaced
    from .ingest import failures

    try:  # load() reads nothing of a file of the wrong kind (a notice never fails a command): doctor names it
        refuse_misplaced(store.dir / failures.NAME)
    except Exception as exc:
        row = _misplaced("state:ingest", exc)
        if row is None:
            raise
        return [row]
    found = failures.load(store.dir)
    if not found:
        return [Check("state:ingest", OK, "no transcript left unread by the last ingests")]
    return [Check("state:ingest", WARN, str(failures.summary(found)),
                  "'reef status --json' lists them; repair or remove each transcript and the next ingest clears it")]


def check_installs(state: Path) -> list[Check]:
    """Each harness this project installed (instructions, skills, settings and hooks) is as reef wrote it.
    reef installs no hooks of its own: the agents' hooks travel in the installed harness, so this is the check."""
    from .install import InstallRecord, verify

    out = []
    found = install_records(state)
    for path, rec, _why in found:
        try:
            record = InstallRecord.from_json(rec)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            continue  # reported by check_wrappers
        name = f"install:{record.adapter}"
        redo = f"reef harness install --adapter {record.adapter}"
        try:
            problems = verify(record)
        except OSError as exc:  # an agent directory we may not read: a finding, never a crash
            problems = [f"{exc.filename or record.agent_dir} ({exc.strerror or exc})"]
        if problems:
            out.append(Check(name, FAIL, f"installed harness in {record.agent_dir} changed: {_few(problems)}",
                             f"{redo} (move in-place edits into the project first: they would be overwritten)"))
        else:
            out.append(Check(name, OK, f"installed harness intact: release {record.release_id}, "
                                       f"{len(record.files)} file(s) in {record.agent_dir}"))
    if not found:  # records there but unreadable are check_wrappers' rows, never "none installed"
        out.append(Check("install", OK, "no harness installed for any agent (reef harness install --adapter AGENT)"))
    return out


# -- endpoints -------------------------------------------------------------------------------------------------------
def configured_endpoints(store, environ: dict) -> list[tuple[str, str, str]]:
    """(name, url, where configured) for every endpoint set in the environment or harness.yaml."""
    out = [(name, environ[var], var) for name, var in ENDPOINT_ENV.items() if environ.get(var)]
    if store is not None:
        try:
            cfg = store.worktree_config()
        except Exception:
            cfg = None
        url = cfg.reflector.model_url if cfg is not None and cfg.reflector.backend == "llm" else None
        if url and not any(n == "reflector" for n, _, _ in out):
            out.append(("reflector", url, "harness.yaml reflector.model_url"))
    return out


def reach(url: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """None when a TCP connection to the URL's host and port opens within `timeout`, else why not."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"not an http(s) URL: {url}"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"bad port in {url}"
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as exc:
        return str(exc.strerror or exc) if not isinstance(exc, TimeoutError) else f"no answer in {timeout:g}s"


def check_endpoints(store, environ: dict) -> list[Check]:
    eps = configured_endpoints(store, environ)
    if not eps:
        return [Check("endpoint", OK, "no serve / engine / reflector endpoint configured")]
    out = []
    for name, url, where in eps:
        why = reach(url)
        if why is None:
            out.append(Check(f"endpoint:{name}", OK, f"{name} {url} reachable ({where})"))
        else:
            out.append(Check(f"endpoint:{name}", FAIL, f"{name} {url} unreachable: {why} ({where})",
                             f"start it, or fix/unset {where}"))
    return out


# -- all of it -------------------------------------------------------------------------------------------------------
def diagnose(cwd: Path, scenario: str | None = None, environ: dict | None = None) -> Report:
    env = dict(os.environ if environ is None else environ)
    checks: list[Check] = []
    checks += check_python()
    checks += check_reef(env)
    checks += check_agents(env)
    state_checks, state, store = check_state(cwd, scenario, env)
    checks += check_wrappers(state, env)
    checks += state_checks
    checks += check_endpoints(store, env)
    return Report(tuple(checks))


def render(checks: Iterable[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"{c.status:<4}  {c.name:<18} {c.message}")
        if c.fix and c.status != OK:
            lines.append(f"      {'':<18} fix: {c.fix}")
    return "\n".join(lines)
