"""Writing a release's files into the user's working tree without ever replacing bytes reef did not plan over.

The contract (issue 10, "user edits are never lost"): every path an evolve changes was read when the plan was
made (`expected`: sha256 of its bytes, None when absent). Right before a file is replaced it is read again; if it
holds neither those bytes nor already the new ones, the user changed it meanwhile and nothing more is written
(what was written is put back) — exit 3, with what to do. The new bytes go to a temp file in the same directory
first, for every path, so a full disk or a read-only directory fails before any file is replaced; a read-only
file is a user's "do not touch" and is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..durable import fill_and_close, fsync_dir, kept_mode, read_nofollow
from ..errors import ConflictError, InvalidInput, ReefError
from ..gitstore import Entry
from .common import fault

MODE_EXEC = 0o100755


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def read_current(root: Path, rel: str) -> bytes | None:
    """The working tree's bytes at `rel` (None: absent); never follows a symlink."""
    from ..harness_files import non_directory_parent

    path = root / rel
    bad = non_directory_parent(root, rel)  # a symlink on the way: InvalidInput there; a missing one: read gives None
    if bad is not None:
        raise InvalidInput(f"{bad} is not a directory; cannot write {rel} under it")
    try:
        return read_nofollow(path)
    except InvalidInput:
        raise
    except OSError as exc:
        raise ReefError(f"cannot read {path}: {exc.strerror}; nothing was written or published") from None


def expected_bytes(root: Path, paths) -> dict[str, str | None]:
    """{path: sha256 of the working tree's bytes now | None}: what a plan made now was made from."""
    return {rel: _digest(read_current(root, rel)) for rel in sorted(set(paths))}


def _temp(target: Path) -> Path:
    """The staged copy of `target`, beside it (so the replace is a rename); one fixed name, so a resume finds it."""
    return target.with_name(f".{target.name}.reef-tmp")


def made_read_only(path: Path) -> bool:
    """The user made it read-only: no write permission for its owner (root ignores modes, so ask the bits)."""
    return not (os.lstat(path).st_mode & stat.S_IWUSR) or not os.access(path, os.W_OK)


@dataclass(frozen=True)
class Written:
    path: str
    old: bytes | None
    new: bytes | None


def _edited(rel: str) -> ConflictError:
    return ConflictError(
        f"{rel} changed in the working tree while reef was evolving it (it no longer holds the bytes the plan was "
        f"made from); reef left it as it is and published nothing — publish your edit first ('reef publish -m "
        f"MESSAGE') or move it aside, then run 'reef harness evolve' again")


def write_tree(root: Path, base: dict, files: dict, expected: dict, *, before_write=None) -> list[Written]:
    """Bring the working tree from `base` to `files` at every path where the two differ, compare-and-swap per file.

    A path already holding its new bytes is skipped (a resumed write). Returns what was replaced, for `restore`.
    """
    targets = sorted(rel for rel in set(base) | set(files) if base.get(rel) != files.get(rel))
    plan: list[tuple[str, bytes | None, Entry | None]] = []
    for rel in targets:
        if rel.startswith("/") or ".." in rel.split("/"):
            raise InvalidInput(f"release holds an unsafe path '{rel}'")
        new = files.get(rel)
        cur = read_current(root, rel)  # also refuses a symlinked parent before anything below touches it
        try:
            _temp(root / rel).unlink()  # a killed write left its staged copy: the resume starts from clean
        except FileNotFoundError:
            pass
        if (new is None and cur is None) or (new is not None and cur == new.data):
            continue
        want = expected.get(rel, _digest(base[rel].data) if rel in base else None)
        if _digest(cur) != want:
            raise _edited(rel)
        if cur is not None and made_read_only(root / rel):
            raise InvalidInput(f"{root / rel} is read-only; reef does not write through a file a user made "
                               f"read-only — make it writable (chmod u+w {rel}) and run 'reef harness evolve' "
                               f"again (nothing was written or published)")
        plan.append((rel, cur, new))
    temps: dict[str, Path] = {}
    try:
        for rel, _cur, new in plan:  # every byte lands in a temp file first: a full disk fails here, harmlessly
            if new is None:
                continue
            target = root / rel
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = _temp(target)
                # the rule every rewrite of a user's file follows (durable.kept_mode): an existing file keeps its
                # bits, x only where the release says; a new one gets 0644 / 0755 under the umask
                executable = new.mode == MODE_EXEC
                keep = kept_mode(target, executable)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                             0o755 if executable else 0o644)
                temps[rel] = tmp
                fill_and_close(fd, new.data, keep)
            except OSError as exc:
                raise ReefError(f"cannot write {target}: {exc.strerror}; nothing was written or published") from None
        if before_write is not None:
            before_write()
        written: list[Written] = []
        try:
            for rel, cur, new in plan:
                now = read_current(root, rel)  # the compare-and-swap, right before the replace
                if now != cur:
                    raise _edited(rel)
                target = root / rel
                try:
                    if new is None:
                        os.unlink(target)
                    else:
                        os.replace(temps.pop(rel), target)
                except OSError as exc:
                    raise ReefError(f"cannot write {target}: {exc.strerror}; nothing was written or "
                                    "published") from None
                written.append(Written(rel, cur, None if new is None else new.data))
                if len(written) == 1 and len(plan) > 1:
                    fault("writing")  # test-only: killed with the working tree half written
            for parent in sorted({(root / rel).parent for rel, _c, _n in plan}):
                fsync_dir(parent)
        except BaseException:
            restore(root, written)
            raise
        return written
    finally:
        for tmp in temps.values():
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def restore(root: Path, written: list[Written]) -> None:
    """Put back what `write_tree` replaced, where the file still holds reef's bytes (never over a newer edit)."""
    from ..durable import write_atomic

    for w in reversed(written):
        target = root / w.path
        try:
            if read_current(root, w.path) != w.new:
                continue
            if w.old is None:
                os.unlink(target)
            else:
                write_atomic(target, w.old)
        except (OSError, ReefError):
            continue  # best effort: the journal's `writing` phase lets the next evolve finish or report it
