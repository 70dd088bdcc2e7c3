"""Harness files on disk: collecting them from a directory into {path: Entry} and writing such a dict back into
one, byte for byte and never through a symlink; removing reef's own read-only copies.

Its own room because more than the store moves files this way: checkout, pull, bootstrap, the episode runner's
read-only trees and the agent wrapper all read or write a directory of harness files, and none of them needs the
release chain (store.py) to do so.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import time
from pathlib import Path

from .durable import fill_and_close, kept_mode, make_dirs, read_nofollow, write_all
from .errors import ConflictError, InvalidInput, StoreError
from .gitstore import MODE_EXEC, MODE_LINK, Entry, mode_of

SKIP_DIRS = {".reef", ".git"}


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


def writable_parents(dest: Path, rel: str) -> None:
    """InvalidInput unless `rel` can be written under `dest`: every directory on the way is one, or is missing."""
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
        writable_parents(dest, rel)
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
        fill_and_close(fd, entry.data, keep)
        if expected is not None and rel in expected and read_nofollow(target) != expected[rel]:
            raise ConflictError(f"{target} changed while reef was writing it; your edit is kept and the file was "
                                "not replaced — run the command again to re-check it")
        if os.path.islink(target):
            raise InvalidInput(f"{target} is a symlink; reef never writes through symlinks")
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


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
