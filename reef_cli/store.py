"""The harness store of one scenario: working tree <-> Git trees, publishing by compare-and-swap, rollback.

Order of a publish: objects first (orphans are harmless), then the fsync'd release-log line (the commit point), then
the Git ref (derived; a ref left behind by a crash is repaired from the log by the next publish). The scenario lock
serialises writers across processes.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import functools
import errno
import json
import os
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from . import chain_integrity
from .config import CONFIG_NAME, HarnessConfig, parse_config
from .durable import (SMALL_STATE_LIMIT, STATE_FILE_MODE, kept_mode, make_dirs, open_state, read_nofollow, read_state,
                      refuse_misplaced, write_all)
from .errors import ConflictError, DamagedState, InvalidInput, NotFound, StoreError
from .gitstore import MODE_EXEC, MODE_LINK, Entry, GitStore, mode_of
from .ids import new_id
from .project import Project, ScenarioPaths, check_scenario_name, write_atomic
from .releases import TRAILER, Release, ReleaseLog, canonical
from .times import format_time, utc_now

SKIP_DIRS = {".reef", ".git"}


@dataclass(frozen=True)
class ScenarioInfo:
    name: str
    recipe: str
    created_at: str

    def to_json(self) -> dict:
        return {"name": self.name, "recipe": self.recipe, "created_at": self.created_at}


@dataclass(frozen=True)
class Change:
    path: str
    change: str  # added | modified | deleted
    zone: str

    def to_json(self) -> dict:
        return {"path": self.path, "change": self.change, "zone": self.zone}


@dataclass(frozen=True)
class PublishResult:
    release: Release
    created: bool
    changes: tuple[Change, ...] = field(default_factory=tuple)
    finished: bool = False  # a rollback: it finished writing an interrupted rollback's working tree


@functools.lru_cache(maxsize=4096)
def _may_contain(dir_rel: str, patterns: tuple[str, ...]) -> bool:
    """Could any pattern match something under `dir_rel`? Lets the walk skip node_modules and friends."""
    parts = dir_rel.split("/")
    for pat in patterns:
        segs = pat.split("/")
        ok = True
        for i, part in enumerate(parts):
            if i >= len(segs):
                ok = False
                break
            seg = segs[i]
            if seg == "**":
                break
            if any(c in seg for c in "*?["):
                from .zones import glob_match

                if not glob_match(seg, part):
                    ok = False
                    break
            elif seg != part:
                ok = False
                break
        else:
            ok = ok and len(segs) > len(parts)
        if ok:
            return True
    return False


RACY_S = 2.0  # a file modified this close to when it was cached may change again within the same mtime tick


def collect_files(root: Path, include: tuple[str, ...], exclude: tuple[str, ...] = (),
                  stat_cache: dict | None = None) -> dict[str, Entry]:
    """The harness files in a working tree: every regular file or in-tree symlink matched by `include`.

    `stat_cache` (a dict kept by the caller) skips work on what has not changed, trusting only entries that were
    already older than RACY_S when cached (the rule git uses against same-tick rewrites): a file whose size, mtime,
    inode and mode are unchanged is not re-read ({path: (stat key, cached at, Entry)}), and a directory whose mtime
    and inode are unchanged is not re-listed ({("dir", path, include, exclude): (stat key, cached at, entries)}) —
    adding, removing or renaming an entry changes its directory's mtime. Each entry is still lstat'ed.
    """
    from .zones import glob_matcher

    include, exclude = tuple(include), tuple(exclude)
    included, excluded = glob_matcher(include), glob_matcher(exclude)
    out: dict[str, Entry] = {}
    root_real = os.path.realpath(root)
    now = time.time()

    def listing(dir_abs: str, dir_rel: str, dir_st: os.stat_result | None) -> list[tuple[str, bool]]:
        """The entries worth a look: (name, is a directory), from the cache or from the directory itself."""
        key = cache_key = None
        if stat_cache is not None and dir_st is not None:
            cache_key = ("dir", dir_rel, include, exclude)
            key = (dir_st.st_mtime_ns, dir_st.st_ino)
            hit = stat_cache.get(cache_key)
            if hit is not None and hit[0] == key and hit[1] - dir_st.st_mtime_ns / 1e9 > RACY_S:
                return hit[2]
        try:
            with os.scandir(dir_abs) as found:
                entries = []
                for e in found:
                    rel = f"{dir_rel}{e.name}"
                    if e.is_dir(follow_symlinks=False):
                        if e.name not in SKIP_DIRS and _may_contain(rel, include):
                            entries.append((e.name, True))
                    elif included(rel) and not excluded(rel):
                        entries.append((e.name, False))
        except OSError as exc:
            raise StoreError(f"{dir_abs}: cannot read directory: {exc.strerror}") from None
        if cache_key is not None:
            stat_cache[cache_key] = (key, now, entries)
        return entries

    def walk(dir_abs: str, dir_rel: str, dir_st: os.stat_result | None) -> None:
        for name, is_dir in listing(dir_abs, dir_rel, dir_st):
            path, rel = f"{dir_abs}/{name}", f"{dir_rel}{name}"
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # removed since it was listed
            if is_dir != stat.S_ISDIR(st.st_mode):  # replaced since it was listed: list the directory again
                if stat_cache is not None:
                    stat_cache.pop(("dir", dir_rel, include, exclude), None)
                return walk(dir_abs, dir_rel, None)
            if is_dir:
                walk(path, rel + "/", st)
            elif stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                resolved = os.path.realpath(path)
                if not (resolved == root_real or resolved.startswith(root_real + os.sep)):
                    raise InvalidInput(
                        f"{rel} is a symlink to '{target}' outside the harness; reef stores links only within the harness"
                    )
                out[rel] = Entry(os.fsencode(target), MODE_LINK)
            elif stat.S_ISREG(st.st_mode):
                key = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode)
                hit = stat_cache.get(rel) if stat_cache is not None else None
                if hit is not None and hit[0] == key and hit[1] - st.st_mtime_ns / 1e9 > RACY_S:
                    out[rel] = hit[2]
                    continue
                with open(path, "rb") as f:
                    out[rel] = Entry(f.read(), mode_of(st.st_mode))
                if stat_cache is not None:
                    stat_cache[rel] = (key, now, out[rel])

    root_abs = str(root)
    try:
        root_st = os.stat(root_abs)
    except OSError as exc:
        raise StoreError(f"{root_abs}: cannot read directory: {exc.strerror}") from None
    walk(root_abs.rstrip("/") or "/", "", root_st)
    return dict(sorted(out.items()))


def non_directory_parent(dest: Path, rel: str) -> Path | None:
    """The first directory on the way from `dest` to `rel` that exists and is not a directory (None: every one is
    a directory or missing). A symlink on the way is InvalidInput: reef never writes through symlinks. Shared by
    write_files and checkout's conflict check, so both refuse the same paths."""
    cur = dest
    for part in rel.split("/")[:-1]:
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise InvalidInput(f"{cur} is a symlink; reef never writes through symlinks")
        if not stat.S_ISDIR(st.st_mode):
            return cur
    return None


def _writable_parents(dest: Path, rel: str) -> None:
    blocked = non_directory_parent(dest, rel)
    if blocked is not None:
        raise InvalidInput(f"{blocked} is not a directory; cannot write {rel} under it")


def unreplaceable(target: Path, entry: Entry | None) -> str | None:
    """Why writing `entry` at `target` (None: removing it) cannot simply replace what stands there: "is a directory"
    (no file replaces one), or None when nothing, a file, or a symlink where the release holds one too stands there.
    A symlink where the release holds a file (or nothing) is InvalidInput: writing would go through it, --force or
    not. Shared by rollback's check before it publishes and checkout's conflict check, so both judge a path alike;
    what a directory there means is theirs (checkout: a conflict; rollback: refused)."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode) and (entry is None or entry.mode != MODE_LINK):
        raise InvalidInput(f"{target} is a symlink; reef never writes through symlinks")
    if stat.S_ISDIR(st.st_mode):
        return "is a directory"
    return None


def write_files(dest: Path, files: dict[str, Entry], *, read_only: bool = False,
                expected: dict[str, bytes | None] | None = None) -> None:
    """Byte-exact materialisation that refuses to write through symlinks (O_NOFOLLOW on every file). `read_only`:
    reef's own copy of a release in its state (.reef/trees, a gate run's trees), so owner-only as well (0400, 0500
    for executables, directories 0700) whatever the umask; otherwise the user's files, with the umask's modes.

    A user's file is replaced by a rename from a staged copy beside it, never truncated in place: a kill leaves the
    old bytes or the new ones. `expected` maps paths to the bytes the caller's conflict check saw (None: absent);
    each is compared again right before its rename, so an edit the user saved meanwhile stops the write
    (ConflictError) and is kept."""
    mkdir = make_dirs if read_only else (lambda d: d.mkdir(parents=True, exist_ok=True))
    mkdir(dest)
    from .admission import problem
    from .errors import PolicyError

    for rel, entry in files.items():
        if (why := problem(rel, entry, None)) is not None:  # the last line of defence: admission.py checks first
            raise PolicyError(f"refusing to write '{rel}', which {why}; reef writes only harness files")
        _writable_parents(dest, rel)
        target = dest / rel
        mkdir(target.parent)
        if entry.mode == MODE_LINK:
            try:
                st = os.lstat(target)
                if not stat.S_ISLNK(st.st_mode):
                    raise InvalidInput(f"{target} exists and is not a symlink; refusing to replace it")
                os.unlink(target)
            except FileNotFoundError:
                pass
            os.symlink(os.fsdecode(entry.data), target)
            continue
        if not read_only:
            _replace_user_file(target, rel, entry, expected)
            continue
        try:
            if os.path.exists(target) and read_only:
                os.chmod(target, 0o600, follow_symlinks=False)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600 if read_only else 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InvalidInput(f"{target} is a symlink; reef never writes through symlinks") from None
            raise
        try:
            write_all(fd, entry.data)
        finally:
            os.close(fd)
        mode = 0o755 if entry.mode == MODE_EXEC else 0o644
        if read_only:
            mode &= 0o500
        os.chmod(target, mode)


def _replace_user_file(target: Path, rel: str, entry: Entry, expected: dict[str, bytes | None] | None) -> None:
    """Stage `entry` beside `target`, compare the target with what the caller saw, then rename over it."""
    if os.path.exists(target) and not os.access(target, os.W_OK):  # a file made read-only is not replaced either
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
    tmp = target.with_name(f".{target.name}.reef-tmp")
    executable = entry.mode == MODE_EXEC
    keep = kept_mode(target, executable)  # a private 0600 CLAUDE.md stays private (the one rule, durable.kept_mode)
    try:
        if os.path.isfile(tmp) and not os.path.islink(tmp):
            os.unlink(tmp)  # a killed checkout's leftover: a new file's mode comes from the umask, not from it
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o755 if executable else 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidInput(f"{tmp} is a symlink; reef never writes through symlinks") from None
        if exc.errno in (errno.EISDIR, errno.ENOTDIR):
            raise InvalidInput(f"{tmp} is in the way of the file reef stages there before replacing {target.name}; "
                               "move it away") from None
        raise
    try:
        try:
            write_all(fd, entry.data)
            if keep is not None:
                os.fchmod(fd, keep)
            os.fsync(fd)
        finally:
            os.close(fd)
        if expected is not None and rel in expected and read_nofollow(target) != expected[rel]:
            raise ConflictError(f"{target} changed while reef was writing it; your edit is kept and the file was "
                                "not replaced — run the command again to re-check it")
        if os.path.islink(target):
            raise InvalidInput(f"{target} is a symlink; reef never writes through symlinks")
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class HarnessStore:
    """One scenario's release chain over the project's working tree."""

    def __init__(self, project: Project, scenario: str, *, now: Callable[[], datetime] = utc_now):
        self.project = project
        self.scenario = check_scenario_name(scenario)
        self.dir = project.scenario_dir(scenario)
        self.log = ReleaseLog(self.dir / "releases.jsonl")
        self.now = now
        self._git: GitStore | None = None
        self._stat_cache: dict = {}
        self._blob_id_cache: dict[bytes, str] = {}

    # -- layout -------------------------------------------------------------------------------------------------
    @property
    def ref(self) -> str:
        return f"refs/reef/scenarios/{self.scenario}"

    @property
    def ledger_path(self) -> Path:
        return ScenarioPaths(self.project, self.scenario).ledger_path

    def ledger(self):
        return ScenarioPaths(self.project, self.scenario).ledger()

    @property
    def git(self) -> GitStore:
        if self._git is None:
            if not (self.project.git_dir / "HEAD").exists():
                head = self.log.head()
                if head is not None:  # an empty store would be made here: the releases' files would be gone
                    raise DamagedState(
                        f"{self.project.git_dir} is gone but {self.log.path} names {head.step} release(s) whose files "
                        f"were in it; nothing was changed — restore .reef/git from a backup, or move .reef aside and "
                        f"run 'reef init' to start a new history from the working tree"
                    )
            self._git = GitStore(self.project.git_dir)
        return self._git

    # -- integrity of the release chain (reef_cli/chain_integrity.py) ----------------------------------------------
    def _check_log_not_lost(self) -> None:
        chain_integrity.check_log_not_lost(self)

    def check_integrity(self, head: Release | None = None) -> None:
        """Refuse (DamagedState, exit 4) a release chain that lost something; see `chain_integrity.check`."""
        chain_integrity.check(self, head)

    def rebuild_releases(self) -> chain_integrity.RebuildResult:
        """`reef repair releases`: rebuild the release log from the store's commits (`chain_integrity.rebuild`)."""
        return chain_integrity.rebuild(self)

    def _next_anchor(self, chain: list[Release]) -> dict:
        """The anchor a new release records: the ledger's last record; but while the ledger falls short of an
        earlier anchor, that anchor again, so the newest anchor keeps vouching for what was lost (a ledger cut and
        grown back past it must not launder the cut) until the loss is restored or accepted."""
        from .ledger import anchors

        ledger = self.ledger()
        earlier = anchors.anchors_of(self.own_releases(chain))
        found = anchors.problems(ledger, earlier, every=False) if earlier else []
        if found:
            return {"seq": found[0][0].seq, "hash": found[0][0].hash}
        return ledger.anchor()

    def ledger_anchors(self) -> list:
        """The release anchors of this scenario's ledger (see `ledger.anchors`), oldest first."""
        from .ledger import anchors_of

        return anchors_of(self.own_releases(self.releases()))

    def own_releases(self, chain: list[Release]) -> list[Release]:
        """The releases published on this machine: one pulled from a remote (remote.py lists it in
        `pulled-releases` before it enters the log) anchors another machine's ledger, which stays there."""
        data = read_state(self.dir / "pulled-releases")
        if data is None:
            return chain
        pulled = set(data.decode("utf-8", "replace").split())
        return [r for r in chain if r.release_id not in pulled]

    def checked_ledger(self):
        """This scenario's ledger, refused (DamagedState, exit 4) when it falls short of a release's anchor: what
        reflect and evolve open, so they never learn from a ledger that lost records."""
        ledger = self.ledger()
        ledger.check_anchors(self.ledger_anchors())
        return ledger

    @contextlib.contextmanager
    def lock(self):
        """The scenario lock: `flock(2)` on `<scenario>/lock`, the primitive `filelock.FileLock` uses on the same path,
        taken blocking (FileLock's set-up and polling cost ~0.2 ms per publish). Opened as reef's other state files
        are (`open_state`): a symlink planted there was followed, and O_CREAT made its target wherever it pointed."""
        fd = open_state(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def exists(self) -> bool:
        """Whether the scenario was made; what every command asks first, so a scenario.json or release log of the
        wrong kind is refused here, naming it (MisplacedState, exit 4): a directory at scenario.json read as
        "scenario 'default' does not exist (known: default)", a FIFO at releases.jsonl hung every command (reef
        doctor too), a symlink there had publish append through it. Two lstat()s."""
        refuse_misplaced(self.dir / "scenario.json")
        refuse_misplaced(self.dir / "releases.jsonl")
        return (self.dir / "scenario.json").is_file()

    def info(self) -> ScenarioInfo:
        data = read_state(self.dir / "scenario.json", SMALL_STATE_LIMIT)
        if data is None:
            known = ", ".join(self.project.scenarios()) or "none"
            raise NotFound(f"scenario '{self.scenario}' does not exist (known: {known}); create it with 'reef init --scenario {self.scenario}'")
        try:
            d = json.loads(data)
        except ValueError:
            raise StoreError(f"{self.dir / 'scenario.json'}: corrupt scenario file") from None
        # Valid JSON of the wrong shape ({} or [] after a bad edit) is as corrupt as torn bytes: one line, no KeyError.
        fields = ("name", "recipe", "created_at")
        if not isinstance(d, dict) or not all(isinstance(d.get(k), str) for k in fields):
            missing = [k for k in fields if not isinstance(d, dict) or not isinstance(d.get(k), str)]
            raise StoreError(f"{self.dir / 'scenario.json'}: corrupt scenario file (field {missing[0]!r} "
                             "missing or not a string)")
        return ScenarioInfo(d["name"], d["recipe"], d["created_at"])

    def create(self, recipe: str) -> ScenarioInfo:
        """Bind a recipe to the scenario once; asking again with another recipe is a conflict."""
        make_dirs(self.dir)
        with self.lock():
            if self.exists():
                info = self.info()
                if info.recipe != recipe:
                    raise ConflictError(
                        f"scenario '{self.scenario}' is bound to recipe '{info.recipe}', not '{recipe}'; "
                        "a scenario's recipe never changes — use another --scenario name"
                    )
                return info
            info = ScenarioInfo(self.scenario, recipe, format_time(self.now()))
            write_atomic(self.dir / "scenario.json", canonical(info.to_json()) + b"\n", STATE_FILE_MODE)
            return info

    # -- reading ------------------------------------------------------------------------------------------------
    def head(self) -> Release | None:
        head = self.log.head()
        if head is None:
            self._check_log_not_lost()
        return head

    def require_head(self) -> Release:
        head = self.head()
        if head is None:
            raise NotFound(f"scenario '{self.scenario}' has no release yet; run 'reef init'")
        return head

    def releases(self) -> list[Release]:
        releases = self.log.read()
        if not releases:
            self._check_log_not_lost()
        return releases

    def find(self, ref: str) -> Release:
        return self.log.find(ref)

    def files_of(self, release: Release) -> dict[str, Entry]:
        return self.git.read_tree(release.content_id)

    def config_of(self, release: Release) -> HarnessConfig:
        files = self.files_of(release)
        if CONFIG_NAME not in files:
            raise InvalidInput(f"release {release.release_id} has no {CONFIG_NAME}")
        return parse_config(files[CONFIG_NAME].data, source=f"{CONFIG_NAME} (release step {release.step})", validate=False)

    def materialised_config(self, release: Release) -> tuple[Path, HarnessConfig]:
        """The release's read-only copy and its config, without touching the object store when cached."""
        from .config import config_data, from_data

        tree = self.materialise(release)
        cache = tree.with_name(f"{release.content_id}.config.json")
        try:
            return tree, from_data(json.loads(cache.read_bytes()))
        except (FileNotFoundError, ValueError):
            pass
        raw = (tree / CONFIG_NAME).read_bytes()
        data = config_data(raw, f"{CONFIG_NAME} (release step {release.step})", validate=False)
        write_atomic(cache, json.dumps(data, sort_keys=True).encode(), STATE_FILE_MODE)
        return tree, from_data(data)

    def worktree_config(self) -> HarnessConfig:
        path = self.project.root / CONFIG_NAME
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise InvalidInput(f"{path}: missing; restore it with 'reef checkout HEAD .' or re-run 'reef init'") from None
        return parse_config(raw, source=str(path))

    def worktree_files(self, config: HarnessConfig | None = None) -> dict[str, Entry]:
        config = config or self.worktree_config()
        include = tuple(config.include) + (CONFIG_NAME,)
        return collect_files(self.project.root, include, config.exclude, self._stat_cache)

    def changes(self, base: Release | None, files: dict[str, Entry], config: HarnessConfig,
                      new: dict[str, str] | None = None) -> tuple[Change, ...]:
        """What differs between `base` and `files`, with each path's zone; compares blob ids, never reads blobs."""
        from .zones import classify_many

        old = self.git.blob_ids(base.content_id) if base else {}
        if new is None:
            new = self._ids(files)
        kinds = []
        for rel in sorted(set(old) | set(new)):
            if rel not in new:
                kinds.append((rel, "deleted"))
            elif rel not in old:
                kinds.append((rel, "added"))
            elif old[rel] != new[rel]:
                kinds.append((rel, "modified"))
        zones = classify_many(self.project.root, config.zone_map(), [rel for rel, _ in kinds])
        return tuple(Change(rel, kind, z.zone) for (rel, kind), z in zip(kinds, zones))

    def status(self) -> tuple[Release, tuple[Change, ...]]:
        head = self.require_head()
        config = self.worktree_config()
        return head, self.changes(head, self.worktree_files(config), config)

    # -- writing ------------------------------------------------------------------------------------------------
    def publish(
        self,
        *,
        reason: str,
        operation: str = "publish",
        files: dict[str, Entry] | None = None,
        expected_head: str | None | type(...) = ...,
        evidence: tuple[str, ...] = (),
        meta: dict | None = None,
        allow_empty: bool = False,
        runtime_load_id: str | None = None,
        surface: str = "harness",
        extra_parents: tuple[str, ...] = (),
    ) -> PublishResult:
        """Publish `files` (default: the working tree) as the next release if the head is still `expected_head`.

        `surface="weights"` publishes a weight release: `files` is its checkpoint manifest, not a harness, so there is
        no harness.yaml to require and no zones to report.

        `expected_head=...` means "the head as read now", which still catches a racing writer between our read and
        the commit point because the check is repeated under the scenario lock.
        """
        if expected_head is ...:
            current = self.head()
            expected_head = current.release_id if current else None
        if operation == "publish" and surface == "harness":  # a human publish (working tree, or --from-git)
            from . import rollback_journal

            if (interrupted := rollback_journal.pending(self)) is not None:  # its old files are not the user's edits
                raise ConflictError(f"nothing was published: a {interrupted.sentence()}")
        if files is None:
            files = self.worktree_files()
        config = None
        if surface == "harness":
            if CONFIG_NAME not in files:
                raise InvalidInput(f"the harness has no {CONFIG_NAME}; it is required in every release")
            config = parse_config(files[CONFIG_NAME].data, source=str(self.project.root / CONFIG_NAME))
            from .validate import check_release

            check_release(files, config)  # a release that would break every later command is refused here
        from .admission import check_outgoing

        check_outgoing(files, config, self.project.root)  # nor one that every other clone's pull would refuse
        current = self.head()
        new_ids = self._ids(files)
        tree_id = self._tree_for(current, files, new_ids)
        make_dirs(self.dir)
        with self.lock():
            self.log.repair()
            chain = self.log.read()  # validates every line: corruption anywhere stops the publish
            head = chain[-1] if chain else None
            self.check_integrity(head)
            if head is not None and self.git.get_ref(self.ref) != head.commit_id:
                self.git.set_ref(self.ref, head.commit_id)  # a crash between the log line and the ref: repair
            head_id = head.release_id if head else None
            if surface == "harness" and head is not None and head.runtime_load_id is not None:
                raise InvalidInput(f"scenario '{self.scenario}' holds weight releases; a harness cannot be published "
                                   "into it (use the scenario of your harness, e.g. 'reef -s default publish')")
            if head_id != expected_head:
                raise ConflictError(
                    f"the head of scenario '{self.scenario}' moved: expected {expected_head or 'no release'} but it is "
                    f"{head_id} (step {head.step if head else 0}); nothing was published — re-read and retry"
                )
            if head is not None and head.content_id == tree_id and not allow_empty:
                return PublishResult(head, False, ())
            changes = self.changes(head, files, config, new_ids) if config is not None else ()
            when = self.now()
            release = Release(
                release_id=new_id("rel"),
                scenario=self.scenario,
                content_id=tree_id,
                commit_id="",
                parent_release_id=head_id,
                step=(head.step + 1) if head else 1,
                operation=operation,
                reason=reason,
                evidence=tuple(evidence),
                created_at=format_time(when),
                runtime_load_id=runtime_load_id,
                meta=dict(meta or {}),
                ledger_anchor=self._next_anchor(chain),
            )
            body = {k: v for k, v in release.to_json().items() if k != "commit_id"}
            message = f"{operation}: {reason}\n\n{TRAILER}{json.dumps(body, sort_keys=True)}\n"
            if extra_parents:  # a merge release (reef merge): the chain's head first, the joined head second
                commit_id = self.git.commit_merge(tree_id, [head.commit_id, *extra_parents], message, int(when.timestamp()))
            else:
                commit_id = self.git.commit(tree_id, head.commit_id if head else None, message, int(when.timestamp()))
            release = Release.from_json({**release.to_json(), "commit_id": commit_id})
            self.log.append(release)
            self.git.set_ref(self.ref, commit_id)
        return PublishResult(release, True, changes)

    def _ids(self, files: dict[str, Entry]) -> dict[str, str]:
        """Blob ids by path. Unchanged files come back from the stat cache as the same bytes objects, whose hash
        Python keeps and whose equality is identity, so their ids are a dict lookup instead of a SHA-1."""
        known = self._blob_id_cache
        if len(known) > 4 * len(files) + 64:
            known.clear()
        out = {}
        for rel, e in files.items():
            blob = known.get(e.data)
            if blob is None:
                blob = known[e.data] = self.git.hash_blob(e.data)
            out[rel] = f"{e.mode:o}:{blob}"
        return out

    def _tree_for(self, base: Release | None, files: dict[str, Entry], new: dict[str, str]) -> str:
        """Write only what differs from `base`: hashing is cheap, object writes and tree rebuilds are not."""
        if base is None:
            return self.git.write_tree(files)
        old = self.git.blob_ids(base.content_id)
        changed: dict[str, Entry | None] = {rel: None for rel in old.keys() - files.keys()}
        for rel, entry in files.items():
            if old.get(rel) != new[rel]:
                changed[rel] = entry
        if not changed:
            return base.content_id
        tree = self.git.update_tree(base.content_id, changed)
        self.git.remember_blob_ids(tree, new)
        return tree

    def dirty_paths(self) -> list[str]:
        _, changes = self.status()
        return [c.path for c in changes]

    def sync_worktree(self, old: dict[str, Entry], new: dict[str, Entry], *, guard: bool = False) -> None:
        """Make the working tree's harness files equal `new`, touching only paths that differ from `old`. `guard`:
        the tree was checked to hold `old`; a file that no longer does (an edit saved since) is not replaced or
        removed, and ConflictError names it once the rest is written."""
        root = self.project.root
        edited: list[str] = []
        for rel in sorted(set(old) - set(new)):
            _writable_parents(root, rel)
            if guard and read_nofollow(root / rel) not in (old[rel].data, None):
                edited.append(rel)
                continue
            try:
                os.unlink(root / rel)
            except FileNotFoundError:
                pass
        for rel, e in sorted(new.items()):
            if old.get(rel) == e:
                continue
            try:
                write_files(root, {rel: e}, expected={rel: old[rel].data if rel in old else None} if guard else None)
            except ConflictError:
                edited.append(rel)
        if edited:
            exc = ConflictError(f"{root / edited[0]} changed while reef was writing the working tree; your edit is "
                                f"kept and that file was not replaced" + (f" (and {len(edited) - 1} more)"
                                                                           if len(edited) > 1 else ""))
            exc.paths = tuple(edited)  # for a caller that reports kept edits its own way (pull)
            raise exc

    def rollback(self, ref: str, *, expected_head: str | None | type(...) = ..., force: bool = False) -> PublishResult:
        from . import rollback_journal

        target = self.find(ref)
        interrupted = rollback_journal.pending(self)
        if interrupted is not None:  # killed after its publish: finish writing it before anything else
            rollback_journal.finish(self, interrupted)
            if target.content_id == interrupted.head.content_id and expected_head in (..., interrupted.head.release_id):
                return PublishResult(interrupted.head, False, (), finished=True)
        head = self.require_head()
        if expected_head is ...:
            expected_head = head.release_id
        dirty = [] if force else self.dirty_paths()
        if dirty:
            raise ConflictError(
                f"the working tree has unpublished changes ({', '.join(dirty[:5])}); publish them or pass --force"
            )
        if target.content_id == head.content_id:
            return PublishResult(head, False, ())
        new_files = self.files_of(target)
        old_files = self.files_of(head)
        from .admission import check_files, own_bound  # a release pulled before pull checked them may hold anything

        label = f"release {target.release_id} (step {target.step})"
        check_files(new_files, label, own_bound(new_files, label), done="nothing was published")
        try:  # before publishing: a rollback published and then not written would leave the tree on the old head
            for rel in sorted(set(old_files) | set(new_files)):
                if old_files.get(rel) != new_files.get(rel):
                    _writable_parents(self.project.root, rel)
                    why = unreplaceable(self.project.root / rel, new_files.get(rel))
                    if why is not None:
                        raise InvalidInput(f"{self.project.root / rel} {why}; reef writes a file there")
        except InvalidInput as exc:
            raise InvalidInput(f"cannot roll back: {exc} (nothing was published)") from None
        rollback_journal.begin(self, head, target)
        try:
            result = self.publish(
                reason=f"rollback to step {target.step} ({target.release_id})",
                operation="rollback",
                files=new_files,
                expected_head=expected_head,
                meta={"rollback_target_release_id": target.release_id, "rolled_back_release_id": head.release_id},
            )
        except BaseException:
            rollback_journal.pending(self)  # drops the journal unless the publish got past its commit point
            raise
        if os.environ.get("REEF_FAULT") == "rollback:published":  # test-only: killed before the tree is written
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        try:
            self.sync_worktree(old_files, new_files, guard=not force)
        except ConflictError as exc:
            rollback_journal.done(self)  # the rest is written; what is left are the user's kept edits, named here
            raise ConflictError(f"rolled back: {result.release.release_id} is published, but {exc}; 'reef status' "
                                "shows it against the new head") from None
        rollback_journal.done(self)
        return result

    def diff(self, a: Release, b: Release) -> str:
        return unified_diff(self.files_of(a), self.files_of(b), f"step {a.step}", f"step {b.step}")

    def materialise(self, release: Release) -> Path:
        """A read-only copy of a release, cached by content id (run directories share it)."""
        cache = self.project.state / "trees" / release.content_id
        if (cache / ".reef-complete").exists():
            return cache
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        if tmp.exists():
            rmtree(tmp)
        make_dirs(cache.parent)  # .reef/trees: 0700 like the rest of the state
        write_files(tmp, self.files_of(release), read_only=True)
        write_atomic(tmp / ".reef-complete", (release.content_id + "\n").encode(), STATE_FILE_MODE)
        try:
            os.rename(tmp, cache)
        except OSError:
            rmtree(tmp)  # another process won the race; its copy is identical
        return cache


def rmtree(path: Path) -> None:
    """Remove a tree even where reef (a materialised harness) or an agent made parts of it read-only."""
    import shutil

    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o755)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o755)
            func(p)
        except OSError:
            pass

    if path.exists():
        shutil.rmtree(path, onerror=fix)


def unified_diff(old: dict[str, Entry], new: dict[str, Entry], a_label: str, b_label: str) -> str:
    out: list[str] = []
    for rel in sorted(set(old) | set(new)):
        a, b = old.get(rel), new.get(rel)
        if a == b:
            continue
        a_data = a.data if a else b""
        b_data = b.data if b else b""
        try:
            a_text = a_data.decode("utf-8").splitlines(keepends=True)
            b_text = b_data.decode("utf-8").splitlines(keepends=True)
        except UnicodeDecodeError:
            out.append(f"Binary file {rel} differs\n")
            continue
        a_name = f"a/{rel}" if a else "/dev/null"
        b_name = f"b/{rel}" if b else "/dev/null"
        lines = list(difflib.unified_diff(a_text, b_text, a_name, b_name, f"({a_label})", f"({b_label})"))
        for line in lines:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
        if a and b and a.mode != b.mode:
            out.append(f"mode change {a.mode:o} => {b.mode:o} {rel}\n")
    return "".join(out)
