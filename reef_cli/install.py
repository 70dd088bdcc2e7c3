"""Installing a compiled harness into an install root outside the user's project, and checking it is intact.

An install root holds one directory per agent (`claude/`, `opencode/`, `pi/`): the agent's config directory, which
the wrapper points CLAUDE_CONFIG_DIR / OPENCODE_CONFIG_DIR / PI_CODING_AGENT_DIR at. The agent also writes its own
state there (sessions, logs); reef only ever touches the files it installed. Every installed file is hashed into an
install record kept in the reef project (`.reef/installs/`), so a wrapper can refuse to run a harness someone edited
in place, and the next install knows which files the previous release had.

Writes never go through symlinks: each file is written to a temp file and renamed over the path (a link there is
replaced, not followed), directory links inside the root are replaced by real directories, and removals happen only
inside the agent directory, only for paths the previous install record lists.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
import stat
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .adapters import Adapter, data_dir
from .durable import SMALL_STATE_LIMIT, STATE_FILE_MODE, fill_and_close, make_dirs, read_state
from .errors import ConflictError, InvalidInput, ReefError
from .gitstore import MODE_EXEC, Entry
from .project import Project, write_atomic
from .releases import Release, canonical

RECORD_VERSION = 1
MARKER = ".reef-install.json"  # in the agent directory: which project/scenario owns it
COMPILED_MANIFEST = ".reef-compiled.json"  # in a `reef harness compile --out` directory
RECORD_LIMIT = 16 << 20
"""The most bytes read of an install record (or a compile manifest): a line per installed file, so a harness of
100,000 files fits; a file planted there cannot make every wrapper start read gigabytes (InvalidInput, exit 4)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class InstallRecord:
    adapter: str
    project: str
    scenario: str
    root: str
    agent_dir: str
    release_id: str
    content_id: str
    step: int
    files: dict[str, str]  # path relative to agent_dir -> sha256 of the bytes installed
    installed_at: str
    wrapper: str | None = None
    version: int = RECORD_VERSION

    def to_json(self) -> dict:
        return {"version": self.version, "adapter": self.adapter, "project": self.project, "scenario": self.scenario,
                "root": self.root, "agent_dir": self.agent_dir, "release_id": self.release_id,
                "content_id": self.content_id, "step": self.step, "files": dict(sorted(self.files.items())),
                "installed_at": self.installed_at, "wrapper": self.wrapper}

    @classmethod
    def from_json(cls, d: dict) -> "InstallRecord":
        return cls(adapter=d["adapter"], project=d["project"], scenario=d["scenario"], root=d["root"],
                   agent_dir=d["agent_dir"], release_id=d["release_id"], content_id=d["content_id"],
                   step=int(d["step"]), files=dict(d["files"]), installed_at=d.get("installed_at", ""),
                   wrapper=d.get("wrapper"), version=int(d.get("version", RECORD_VERSION)))


@dataclass(frozen=True)
class InstallResult:
    record: InstallRecord
    current: bool  # nothing needed changing
    written: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    replaced_links: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {"current": self.current, "written": list(self.written), "removed": list(self.removed),
                "replaced_links": list(self.replaced_links), "warnings": list(self.warnings),
                "record": self.record.to_json()}


# -- where things go -------------------------------------------------------------------------------------------------
def default_root(project: Project, scenario: str, environ: dict | None = None) -> Path:
    """<data dir>/reef/installs/<project name>-<hash>-<scenario>: outside the project, one per project+scenario."""
    real = os.path.realpath(project.root)
    tag = hashlib.sha256(real.encode()).hexdigest()[:8]
    return data_dir(environ) / "reef" / "installs" / f"{Path(real).name or 'root'}-{tag}-{scenario}"


def default_bin_dir(environ: dict | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("REEF_BIN_DIR"):
        return Path(env["REEF_BIN_DIR"])
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".local" / "bin"


def wrapper_path(adapter: Adapter, bin_dir: Path | None, environ: dict | None = None) -> Path:
    return Path(os.path.abspath(bin_dir or default_bin_dir(environ))) / f"reef-{adapter.name}"


def record_path(project: Project, adapter: str, agent_dir: Path) -> Path:
    tag = hashlib.sha256(os.path.abspath(agent_dir).encode()).hexdigest()[:16]
    return project.state / "installs" / f"{adapter}-{tag}.json"


def load_record(project: Project, adapter: Adapter, root: Path) -> InstallRecord | None:
    path = record_path(project, adapter.name, Path(root) / adapter.config_dir)
    raw = read_state(path, RECORD_LIMIT)  # a FIFO, a symlink or a huge file there: its one line, exit 4
    if raw is None:
        return None
    try:
        return InstallRecord.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        raise InvalidInput(f"{path}: corrupt install record; re-run 'reef harness install --adapter {adapter.name}'") from None


# -- checking --------------------------------------------------------------------------------------------------------
def verify(record: InstallRecord) -> list[str]:
    """Installed files that are no longer what reef wrote: 'PATH (modified|missing|replaced by a symlink|...)'."""
    return [f"{Path(record.agent_dir) / rel} ({why})" for rel, why in drift(Path(record.agent_dir), record.files)]


def drift(base: Path, digests: dict[str, str]) -> list[tuple[str, str]]:
    """(path, why) for each file reef wrote under `base` (`digests`: path -> sha256 of the bytes written) that is no
    longer those bytes: modified, missing, replaced by a symlink, under one, or not a regular file. What `install`,
    the wrappers and `compile --out` check before they trust or overwrite a file reef wrote (a user's edit)."""
    problems = []
    for rel, digest in sorted(digests.items()):
        path = base / rel
        bad = _link_component(base, rel)
        if bad:
            problems.append((rel, f"under a symlink: {bad}"))
            continue
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            problems.append((rel, "missing"))
            continue
        if stat.S_ISLNK(st.st_mode):
            problems.append((rel, "replaced by a symlink"))
        elif not stat.S_ISREG(st.st_mode):
            problems.append((rel, "not a regular file"))
        else:
            try:
                found = _digest(path)
            except FileNotFoundError:
                problems.append((rel, "missing"))
                continue
            if found is None:
                problems.append((rel, "not a regular file"))  # swapped for a FIFO since the lstat
            elif found != digest:
                problems.append((rel, "modified"))
    return problems


def read_nofollow(path: Path) -> bytes:
    """A file reef wrote, whole: never through a symlink (ELOOP), never waiting on a FIFO or reading a device
    (OSError ENXIO naming it, which the CLI boundary gives as the one line for state of the wrong kind)."""
    fd = _open_regular(path)
    if fd is None:
        raise OSError(errno.ENXIO, "not a regular file", str(path))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _open_regular(path: Path) -> int | None:
    """A read-only fd on `path` when it is a regular file (never through a symlink, never waiting on a FIFO put there
    since it was looked at), else None; a missing file is the caller's FileNotFoundError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return fd


def _digest(path: Path) -> str | None:
    """sha256 of a regular file's bytes, read in blocks (an installed file grown huge is hashed, not held), or None
    for anything else at `path`."""
    fd = _open_regular(path)
    if fd is None:
        return None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _holds(path: Path, data: bytes) -> bool:
    """Whether `path` is a regular file holding exactly `data`; reads at most one byte more than `data`."""
    try:
        fd = _open_regular(path)
    except OSError:
        return False
    if fd is None:
        return False
    with os.fdopen(fd, "rb") as f:
        return f.read(len(data) + 1) == data


def _link_component(base: Path, rel: str) -> str | None:
    if os.path.islink(base):
        return str(base)
    cur = base
    for part in rel.split("/")[:-1]:
        cur = cur / part
        if os.path.islink(cur):
            return str(cur)
    return None


def _safe_rel(rel: str) -> str:
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
        raise InvalidInput(f"refusing unsafe path '{rel}' in a compiled harness")
    return rel


# -- writing ---------------------------------------------------------------------------------------------------------
@dataclass
class _Sync:
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)


def sync_tree(dest: Path, files: dict[str, Entry], previous: set[str] | frozenset[str] = frozenset()) -> _Sync:
    """Make `dest` hold `files` and none of `previous` that `files` lacks; leave every other path alone."""
    dest = Path(os.path.abspath(dest))
    if os.path.islink(dest):
        raise InvalidInput(f"{dest} is a symlink; reef never installs through symlinks — point at a real directory")
    if dest.exists() and not dest.is_dir():
        raise InvalidInput(f"{dest} exists and is not a directory")
    result = _Sync()
    for rel in sorted(set(previous) - set(files)):
        _safe_rel(rel)
        if _link_component(dest, rel):
            continue  # never follow a link to delete something outside
        path = dest / rel
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            os.unlink(path)
            result.removed.append(rel)
            _prune_empty(dest, path.parent)
    dest.mkdir(parents=True, exist_ok=True)
    for rel, entry in sorted(files.items()):
        _safe_rel(rel)
        cur = dest
        for part in rel.split("/")[:-1]:
            cur = cur / part
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                os.mkdir(cur)
                continue
            if stat.S_ISLNK(st.st_mode):
                os.unlink(cur)  # a link inside the install root: replace it, never follow it
                os.mkdir(cur)
                result.links.append(str(cur.relative_to(dest)))
            elif not stat.S_ISDIR(st.st_mode):
                if str(cur.relative_to(dest)) in previous:
                    os.unlink(cur)
                    os.mkdir(cur)
                else:
                    raise ConflictError(f"{cur} is a file where reef needs a directory for {rel}; move it away")
        path = dest / rel
        mode = 0o755 if entry.mode == MODE_EXEC else 0o644
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise ConflictError(f"{path} is a directory where reef installs a file; move it away")
            if stat.S_ISLNK(st.st_mode):
                result.links.append(rel)
            elif stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode and _holds(path, entry.data):
                continue
        _write_replace(path, entry.data, mode)
        result.written.append(rel)
    return result


def foreign_files(dest: Path, files: dict[str, Entry], previous: set[str] | frozenset[str]) -> list[str]:
    """Paths in `dest` that reef did not install and `files` would replace with other bytes (a file, a directory, a
    link, or a file where a directory must go): the user's own files, never overwritten without --force. Paths
    reef installed before (`previous`) are its own to restore."""
    dest = Path(os.path.abspath(dest))
    out = []
    for rel, entry in sorted(files.items()):
        cur = dest
        for part in rel.split("/")[:-1]:
            cur = cur / part
            if os.path.lexists(cur) and (os.path.islink(cur) or not os.path.isdir(cur)):
                sub = str(cur.relative_to(dest))
                if sub not in previous and not any(p.startswith(sub + "/") for p in previous):
                    out.append(str(cur))  # neither a file reef installed nor a directory it made
                break
        else:
            path = dest / rel
            if rel in previous or not os.path.lexists(path):
                continue
            if not _holds(path, entry.data):  # a link, a directory, a FIFO, or other bytes
                out.append(str(path))
    return out


def _is_reef_wrapper(path: Path, adapter: Adapter) -> bool:
    try:
        fd = _open_regular(path)  # a FIFO named reef-<agent> would have hung the install here
    except OSError:
        return False
    if fd is None:
        return False
    with os.fdopen(fd, "rb") as f:
        head = f.read(200)
    return head.startswith(f"#!/bin/sh\n# reef-{adapter.name}: ".encode())


def _write_replace(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.reef-{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    fill_and_close(fd, data, mode)  # every byte: one os.write may stop short
    os.replace(tmp, path)  # rename replaces a symlink at `path` itself; it never follows it


def _prune_empty(top: Path, d: Path) -> None:
    while d != top and str(d).startswith(str(top) + os.sep):
        try:
            os.rmdir(d)
        except OSError:
            return
        d = d.parent


# -- installing ------------------------------------------------------------------------------------------------------
def utcnow_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def compiled_for_install(store, adapter: Adapter, release: Release):
    from .compile import compile_harness

    return compile_harness(store.files_of(release), adapter, layout="config")


def install(
    store,
    adapter: Adapter,
    *,
    release: Release | None = None,
    root: Path | None = None,
    bin_dir: Path | None = None,
    write_wrapper: bool = True,
    environ: dict | None = None,
    now: Callable[[], str] = utcnow_iso,
    force: bool = False,
) -> InstallResult:
    """Compile `release` (default: the head) for `adapter` into its install root; idempotent. Files reef did not
    install there (and a wrapper script that is not reef's) are refused before anything is written, unless
    `force`."""
    if not adapter.wrapper:
        raise InvalidInput(f"adapter '{adapter.name}' has no wrapper; use 'reef harness compile --agent {adapter.name}'")
    release = release or store.require_head()
    root = Path(os.path.abspath(root or default_root(store.project, store.scenario, environ)))
    agent_dir = root / adapter.config_dir
    if os.path.islink(root):
        raise InvalidInput(f"{root} is a symlink; reef never installs through symlinks — point --dest at a real directory")
    compiled = compiled_for_install(store, adapter, release)
    files = compiled.files
    if MARKER in files:
        raise InvalidInput(f"the compiled harness has a file named {MARKER}, which reef reserves")
    _claim(agent_dir, store, adapter)
    previous = load_record(store.project, adapter, root)
    prev_files = set(previous.files) if previous else set()
    if previous and previous.content_id == release.content_id and not verify(previous) and \
            set(previous.files) == set(files) and _wrapper_ok(previous, adapter, store, root, bin_dir, write_wrapper, environ):
        return InstallResult(previous, True, warnings=compiled.warnings)
    if not force:
        foreign = foreign_files(agent_dir, files, prev_files)
        wrapper_at = wrapper_path(adapter, bin_dir, environ) if write_wrapper else None
        # a link there (install.sh links the venv's console script) is replaced, its target left alone
        if wrapper_at is not None and os.path.lexists(wrapper_at) and not os.path.islink(wrapper_at) and \
                not _is_reef_wrapper(wrapper_at, adapter):
            foreign.append(str(wrapper_at))
        if foreign:
            more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
            raise ConflictError(f"{foreign[0]}{more} exists and is not reef's; installing would overwrite it — move "
                                "it away, choose another --dest, or pass --force")
    synced = sync_tree(agent_dir, files, prev_files)
    _write_marker(agent_dir, store, adapter)
    wrapper = None
    if write_wrapper:
        wrapper = str(write_wrapper_script(adapter, store.project, store.scenario, root,
                                           bin_dir or default_bin_dir(environ)))
    record = _record(store, adapter, release, root, files, now(), wrapper)
    path = record_path(store.project, adapter.name, agent_dir)
    make_dirs(path.parent)  # .reef/installs: state, owner-only like the rest of .reef (doctor warned on it)
    write_atomic(path, canonical(record.to_json()) + b"\n", STATE_FILE_MODE)
    remember_installation(record, environ)
    return InstallResult(record, False, tuple(synced.written), tuple(synced.removed), tuple(synced.links),
                         compiled.warnings)


def _record(store, adapter: Adapter, release: Release, root: Path, files: dict[str, Entry], installed_at: str,
            wrapper: str | None) -> InstallRecord:
    """What `install` writes and what the printed installer writes: the same record."""
    return InstallRecord(
        adapter=adapter.name, project=str(store.project.root), scenario=store.scenario, root=str(root),
        agent_dir=str(root / adapter.config_dir), release_id=release.release_id, content_id=release.content_id,
        step=release.step, files={rel: sha256(e.data) for rel, e in files.items()}, installed_at=installed_at,
        wrapper=wrapper,
    )


def _marker(store, adapter: Adapter) -> bytes:
    return canonical({"adapter": adapter.name, "project": str(store.project.root), "scenario": store.scenario}) + b"\n"


def _claim(agent_dir: Path, store, adapter: Adapter) -> None:
    """One agent directory belongs to one project and scenario; a second one would silently fight the first. The
    marker is read as reef's state is (`read_state`): a FIFO, a symlink or a huge file there is its one line, exit 4."""
    if not agent_dir.is_dir():
        return  # nothing there yet (a file in its place: sync_tree names it)
    try:
        owner = json.loads(read_state(agent_dir / MARKER, SMALL_STATE_LIMIT) or b"null")
    except ValueError:
        return  # a torn marker is ours to rewrite
    if not isinstance(owner, dict):
        return
    if owner.get("project") != str(store.project.root) or owner.get("scenario") != store.scenario:
        raise ConflictError(
            f"{agent_dir} holds the {adapter.name} harness of project {owner.get('project')} (scenario "
            f"'{owner.get('scenario')}'); choose another --dest for this one"
        )


def _write_marker(agent_dir: Path, store, adapter: Adapter) -> None:
    data = _marker(store, adapter)
    path = agent_dir / MARKER
    if os.path.islink(path) or not _holds(path, data):
        _write_replace(path, data, 0o644)


# -- the user's installations ----------------------------------------------------------------------------------------
# A small pointer per install root under <data dir>/reef/installations/, so an unbound `reef-<agent>` (the venv's
# console script, often earlier on PATH than the bound wrapper in ~/.local/bin) can find the one installation.
def installations_dir(environ: dict | None = None) -> Path:
    from .adapters import data_dir

    return data_dir(environ) / "reef" / "installations"


def remember_installation(record: InstallRecord, environ: dict | None = None) -> None:
    tag = hashlib.sha256(os.path.abspath(record.agent_dir).encode()).hexdigest()[:16]
    path = installations_dir(environ) / f"{record.adapter}-{tag}.json"
    data = canonical({"adapter": record.adapter, "project": record.project, "scenario": record.scenario,
                      "root": record.root, "agent_dir": record.agent_dir, "wrapper": record.wrapper}) + b"\n"
    if _holds(path, data):
        return
    make_dirs(path.parent)  # names this user's projects: theirs alone
    write_atomic(path, data, STATE_FILE_MODE)


def installations(adapter: str, environ: dict | None = None) -> list[dict]:
    """This user's live installations of `adapter` (a pointer whose install root or project is gone is skipped),
    sorted by project path."""
    out = []
    try:
        names = sorted(os.listdir(installations_dir(environ)))
    except OSError:
        return []
    for name in names:
        if not (name.startswith(f"{adapter}-") and name.endswith(".json")):
            continue
        try:  # read as state (never a FIFO, a link or a huge file): a wrapper start must not hang on a planted one
            d = json.loads(read_state(installations_dir(environ) / name, SMALL_STATE_LIMIT) or b"null")
            owner = json.loads(read_state(Path(d["agent_dir"]) / MARKER, SMALL_STATE_LIMIT) or b"null")
        except (OSError, ValueError, KeyError, TypeError, ReefError):
            continue
        if not isinstance(owner, dict):
            continue
        if d.get("adapter") != adapter or owner.get("project") != d.get("project") or \
                owner.get("scenario") != d.get("scenario") or \
                not (Path(d["project"]) / ".reef" / "project.json").is_file():
            continue
        out.append(d)
    return sorted(out, key=lambda d: (d["project"], d["scenario"], d["root"]))


# -- the installed wrapper -------------------------------------------------------------------------------------------
def wrapper_text(adapter: Adapter, project: Project, scenario: str, root: Path, python: str | None = None) -> str:
    python = python or sys.executable
    script = Path(python).parent / f"reef-{adapter.name}"
    target = [str(script)] if script.is_file() else [python, "-m", "reef_cli.cli.wrapper", adapter.name]
    q = shlex.quote
    return (
        "#!/bin/sh\n"
        f"# reef-{adapter.name}: {adapter.title} with the reef harness of {project.root} (scenario {scenario}).\n"
        f"# Written by 'reef harness install --adapter {adapter.name}'; re-run that to update or restore it.\n"
        f"REEF_PROJECT={q(str(project.root))}\n"
        f"REEF_SCENARIO={q(scenario)}\n"
        f"REEF_INSTALL_ROOT={q(str(root))}\n"
        "export REEF_PROJECT REEF_SCENARIO REEF_INSTALL_ROOT\n"
        f"exec {' '.join(q(t) for t in target)} \"$@\"\n"
    )


def write_wrapper_script(adapter: Adapter, project: Project, scenario: str, root: Path, bin_dir: Path) -> Path:
    path = wrapper_path(adapter, bin_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = wrapper_text(adapter, project, scenario, root).encode()
    if os.path.isdir(path) and not os.path.islink(path):
        raise ConflictError(f"{path} is a directory; cannot install the reef-{adapter.name} wrapper there")
    if not (not path.is_symlink() and _holds(path, data) and os.access(path, os.X_OK)):
        _write_replace(path, data, 0o755)
    return path


def _wrapper_ok(record, adapter, store, root, bin_dir, write_wrapper, environ) -> bool:
    if not write_wrapper:
        return True
    path = wrapper_path(adapter, bin_dir, environ)
    if record.wrapper != str(path) or path.is_symlink():
        return False
    return _holds(path, wrapper_text(adapter, store.project, store.scenario, root).encode())


# -- the printed installer -------------------------------------------------------------------------------------------
def shell_script(store, adapter: Adapter, *, release: Release | None = None, root: Path | None = None,
                 bin_dir: Path | None = None, environ: dict | None = None) -> str:
    """A self-contained POSIX sh script doing what `install` does, for `reef harness install --print | bash`.

    It needs nothing but sh, mkdir, rm, mv and chmod; file bytes travel in quoted heredocs when they are text, else
    through printf octal escapes. Stale removal uses the install record as it is when the script is made.
    """
    release = release or store.require_head()
    root = Path(os.path.abspath(root or default_root(store.project, store.scenario, environ)))
    agent_dir = root / adapter.config_dir
    files = compiled_for_install(store, adapter, release).files
    previous = load_record(store.project, adapter, root)
    stale = sorted(set(previous.files) - set(files)) if previous else []
    bin_path = wrapper_path(adapter, bin_dir, environ)
    record = _record(store, adapter, release, root, files, utcnow_iso(), str(bin_path))
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        f"# Install the reef harness of {store.project.root} (scenario {store.scenario}, release {release.release_id},",
        f"# step {release.step}) for {adapter.title} into {agent_dir}, and the reef-{adapter.name} wrapper.",
        "set -euf",
        f"dest={q(str(agent_dir))}",
        "fail() { echo \"reef install: $*\" >&2; exit 1; }",
        "[ -L \"$dest\" ] && fail \"$dest is a symlink; reef never installs through symlinks\"",
        f"[ -L {q(str(root))} ] && fail {q(str(root))}' is a symlink; reef never installs through symlinks'",
        "mkdir -p \"$dest\"",
        "# put F: create F's directories inside $dest, replacing (never following) links on the way",
        "prep() { d=\"$dest\"; rest=\"${1%/*}\"; [ \"$rest\" = \"$1\" ] && return 0",
        "  old_ifs=$IFS; IFS=/; for part in $rest; do IFS=$old_ifs; d=\"$d/$part\"",
        "    if [ -L \"$d\" ]; then rm -f \"$d\"; fi; [ -d \"$d\" ] || mkdir \"$d\"; done; IFS=$old_ifs; }",
        "put() { prep \"$1\"; t=\"$dest/$1.reef-$$.tmp\"; cat > \"$t\"; chmod \"$2\" \"$t\"; mv -f \"$t\" \"$dest/$1\"; }",
    ]
    for rel in stale:
        lines.append(f"p=\"$dest\"/{q(rel)}; if [ -f \"$p\" ] || [ -L \"$p\" ]; then rm -f \"$p\"; fi")
    for rel, entry in sorted(files.items()):
        mode = "755" if entry.mode == MODE_EXEC else "644"
        lines.extend(_emit(f"put {q(rel)} {mode}", entry.data))
    lines.extend(_emit(f"put {q(MARKER)} 644", _marker(store, adapter)))
    sums = "".join(f"{sha256(e.data)}  {rel}\n" for rel, e in sorted(files.items()) if "\n" not in rel and "\\" not in rel)
    if sums:  # the bytes written are the bytes hashed: catches any shell that mangles a heredoc
        lines.extend(_emit("if command -v sha256sum >/dev/null 2>&1 && ! (cd \"$dest\" && sha256sum --quiet -c -)",
                           sums.encode()))
        lines.append("then fail \"installed files do not match their sha256\"; fi")
    rec_path = record_path(store.project, adapter.name, agent_dir)
    lines.append(f"(umask 077; mkdir -p {q(str(rec_path.parent))})")  # state: owner-only, as `install` writes it
    lines.extend(_emit(f"(umask 077; cat > {q(str(rec_path))}.tmp)", canonical(record.to_json()) + b"\n"))
    lines.append(f"mv -f {q(str(rec_path))}.tmp {q(str(rec_path))}")
    lines.append(f"mkdir -p {q(str(bin_path.parent))}")
    lines.append(f"rm -f {q(str(bin_path))}.tmp")
    lines.extend(_emit(f"cat > {q(str(bin_path))}.tmp",
                       wrapper_text(adapter, store.project, store.scenario, root).encode()))
    lines.append(f"chmod 755 {q(str(bin_path))}.tmp && mv -f {q(str(bin_path))}.tmp {q(str(bin_path))}")
    lines.append(f"echo \"reef: installed release {release.release_id} (step {release.step}) for {adapter.name} "
                 f"in $dest; run {bin_path.name}\"")
    return "\n".join(lines) + "\n"


def _emit(command: str, data: bytes) -> list[str]:
    """`command` fed `data` byte-exact on stdin: a quoted heredoc for text, printf escapes otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.endswith("\n") and "\r" not in text and "\0" not in text:
        tag = "REEF_EOF_" + sha256(data)[:12]
        return [f"{command} <<'{tag}'", text[:-1], tag]
    esc = "".join(f"\\0{b:03o}" for b in data)
    return [f"printf '%b' '{esc}' | {command}"]
