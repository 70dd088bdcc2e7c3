"""The harness store of one scenario: working tree <-> Git trees, publishing by compare-and-swap, rollback.

Order of a publish: objects first (orphans are harmless), then the fsync'd release-log line (the commit point), then
the Git ref (derived; a ref left behind by a crash is repaired from the log by the next publish). The scenario lock
serialises writers across processes. Reading and writing the files themselves is harness_files.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .durable import (SMALL_STATE_LIMIT, STATE_FILE_MODE, make_dirs, open_state, read_nofollow, read_state,
                      refuse_misplaced)
from .errors import ConflictError, DamagedState, InvalidInput, NotFound, StoreError
from .gitstore import Entry, GitStore
from .harness_files import collect_files, rmtree, unreplaceable, writable_parents, write_files
from .ids import new_id
from .project import Project, ScenarioPaths, check_scenario_name, write_atomic
from .releases import TRAILER, Release, ReleaseLog, canonical
from .times import format_time, utc_now

if TYPE_CHECKING:  # config, chain_integrity and difflib load where used: `reef run` needs none of them
    from collections.abc import Callable

    from . import chain_integrity
    from .config import HarnessConfig



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
        from . import chain_integrity

        chain_integrity.check_log_not_lost(self)

    def check_integrity(self, head: Release | None = None) -> None:
        """Refuse (DamagedState, exit 4) a release chain that lost something; see `chain_integrity.check`."""
        from . import chain_integrity

        chain_integrity.check(self, head)

    def rebuild_releases(self) -> chain_integrity.RebuildResult:
        """`reef repair releases`: rebuild the release log from the store's commits (`chain_integrity.rebuild`)."""
        from . import chain_integrity

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
        from .config import CONFIG_NAME, parse_config

        files = self.files_of(release)
        if CONFIG_NAME not in files:
            raise InvalidInput(f"release {release.release_id} has no {CONFIG_NAME}")
        return parse_config(files[CONFIG_NAME].data, source=f"{CONFIG_NAME} (release step {release.step})", validate=False)

    def materialised_config(self, release: Release) -> tuple[Path, HarnessConfig]:
        """The release's read-only copy and its config, without touching the object store when cached."""
        from .config import CONFIG_NAME, config_data, from_data

        tree = self.materialise(release)
        cache = _config_cache(tree, release)
        try:
            return tree, from_data(json.loads(cache.read_bytes()))
        except (FileNotFoundError, ValueError):
            pass
        raw = (tree / CONFIG_NAME).read_bytes()
        data = config_data(raw, f"{CONFIG_NAME} (release step {release.step})", validate=False)
        write_atomic(cache, json.dumps(data, sort_keys=True).encode(), STATE_FILE_MODE)
        return tree, from_data(data)

    def run_settings(self, release: Release) -> tuple[Path, tuple[dict, ...], bool]:
        """What `reef run` needs of a release's harness.yaml: its read-only copy, the `observe_only` rules and
        `ledger.store_content`, read from `materialised_config`'s cache as `config.from_data` reads them, without
        building the config (its three dataclasses and module were ~7% of a run's start-up). A missing or
        unexpected cache goes through `materialised_config`, which rebuilds it or says what is wrong."""
        tree = self.materialise(release)
        try:
            data = json.loads(_config_cache(tree, release).read_bytes())
            rules = tuple(data.get("observe_only") or ())
            return tree, rules, bool((data.get("ledger") or {}).get("store_content", False))
        except (FileNotFoundError, ValueError, AttributeError, TypeError):
            pass
        tree, config = self.materialised_config(release)
        return tree, config.observe_only, config.store_content

    def worktree_config(self) -> HarnessConfig:
        from .config import CONFIG_NAME, parse_config

        path = self.project.root / CONFIG_NAME
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise InvalidInput(f"{path}: missing; restore it with 'reef checkout HEAD .' or re-run 'reef init'") from None
        return parse_config(raw, source=str(path))

    def worktree_files(self, config: HarnessConfig | None = None) -> dict[str, Entry]:
        from .config import CONFIG_NAME

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
            from .config import CONFIG_NAME, parse_config

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
            writable_parents(root, rel)
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
                    writable_parents(self.project.root, rel)
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


def _config_cache(tree: Path, release: Release) -> Path:
    """Where a materialised release's config is cached as JSON, beside its read-only copy."""
    return tree.with_name(f"{release.content_id}.config.json")


def unified_diff(old: dict[str, Entry], new: dict[str, Entry], a_label: str, b_label: str) -> str:
    import difflib

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
