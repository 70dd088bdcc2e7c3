"""The few ways reef puts bytes on disk so that a crash leaves the old state or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a directory entry (a created or renamed file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


STATE_FILE_MODE = 0o600
"""reef's own state (ledger, release log, scenario and project files) is the owner's alone, whatever the umask."""
STATE_DIR_MODE = 0o700


def make_dirs(path: Path, mode: int = STATE_DIR_MODE) -> None:
    """`mkdir -p` giving every directory it creates `mode` (Path.mkdir gives missing parents the umask's default)."""
    if path.is_dir():
        return
    make_dirs(path.parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass


_umask_lock = threading.Lock()
_umask_holders = 0  # threads inside private_umask; the first narrows the umask, the last puts the user's back
_umask_saved = 0


@contextlib.contextmanager
def private_umask():
    """Narrow the umask to the owner's bits for code that creates files whose modes reef cannot pass (libgit2 gives
    objects, refs and config the umask's modes). The umask is the process's: another thread creating a file
    meanwhile gets owner-only modes too, which errs the safe way. Overlapping users (reef serve's ledger threads, the
    gate's parallel episodes) share one narrowing: the umask goes back to the user's only when the last one leaves,
    so neither a thread still writing gets the wide umask back early nor is the narrowed one left behind."""
    global _umask_holders, _umask_saved
    with _umask_lock:
        if _umask_holders == 0:
            _umask_saved = os.umask(0o077)
            os.umask(_umask_saved | 0o077)
        _umask_holders += 1
    try:
        yield
    finally:
        with _umask_lock:
            _umask_holders -= 1
            if _umask_holders == 0:
                os.umask(_umask_saved)


def kept_mode(path, executable: bool | None = None) -> int | None:
    """The permission bits a rewrite of `path` goes out with: the regular file there keeps its own (a patterns.json
    or CLAUDE.md the user keeps private, 0600, must not come back world-readable; a group-writable one stays so),
    with execute bits added where read bits are (`executable` True) or taken away (False); setuid, setgid and sticky
    are not carried over. None when no regular file is there (absent, a symlink, a FIFO): a new file, whose mode is
    the caller's default under the umask. Every rewrite of a file reef does not own asks here."""
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    bits = st.st_mode & 0o777
    if executable is True:
        return bits | ((bits & 0o444) >> 2)  # x wherever r is
    if executable is False:
        return bits & ~0o111
    return bits


def write_atomic(path: Path, data: bytes, mode: int | None = None, *, executable: bool | None = None) -> None:
    """Temp file, fsync, rename, fsync the directory: readers see the old or the new file, never half of one.

    `mode` given (STATE_FILE_MODE for reef's state): the file gets it, whatever it had; a umask can only narrow it.
    `mode` None (a user's file: memory, harness files, config, a page or script they asked for): a file already
    there keeps its permission bits (`kept_mode`, with `executable` as there), a new one gets 0644 (0755 when
    `executable`) under the umask. The temp file is this thread's own and is never opened through a symlink."""
    keep = kept_mode(path, executable) if mode is None else None
    create = mode if mode is not None else (0o755 if executable else 0o644)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_native_id()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a killed writer's leftover: its mode is not this file's
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, create)
    try:
        fill_and_close(fd, data, keep)  # exactly the old bits: the umask must not narrow them either
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def append_durable(path: Path, line: bytes, mode: int = STATE_FILE_MODE) -> None:
    """Append one line and fsync it (the commit point of an append-only log); a new file's entry is synced too.
    Opened as every state file is (`open_state`): a symlink there was appended through."""
    new = not path.exists()
    fd = open_state(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        write_all(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        fsync_dir(path.parent)


def fill_and_close(fd: int, data: bytes, mode: int | None = None) -> None:
    """Write all of `data` to a new file's `fd`, set `mode` exactly (when given: the umask must not narrow a kept
    file's bits), fsync, close: the staging step before every rename that replaces a file."""
    try:
        write_all(fd, data)
        if mode is not None:
            os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> int:
    """`os.write` until every byte is written (a write may stop short, e.g. on a signal or a nearly full disk)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return len(data)


def last_lines(handle, limit: int, block: int = 64 * 1024) -> list[tuple[int, bytes]]:
    """Up to `limit` complete lines from the end of a binary file, newest first, as (offset, bytes without the
    newline), reading blocks backwards: an append-only log's tail costs the same on any length. Text after the
    final newline (a torn write) is never a line."""
    position = handle.seek(0, os.SEEK_END)
    pending = b""  # the start of a line that began before `position`
    seen_newline = False
    found: list[tuple[int, bytes]] = []
    while position > 0 and len(found) < limit:
        step = min(block, position)
        position -= step
        handle.seek(position)
        parts = (handle.read(step) + pending).split(b"\n")
        pending = parts[0]
        if len(parts) == 1:
            continue
        offset = position + len(pending) + 1
        complete: list[tuple[int, bytes]] = []
        for raw in parts[1:]:
            complete.append((offset, raw))
            offset += len(raw) + 1
        if not seen_newline:
            complete.pop()  # what follows the file's last newline
            seen_newline = True
        found.extend(reversed(complete))
    if position == 0 and seen_newline and len(found) < limit:
        found.append((0, pending))
    return found[:limit]


def read_nofollow(path: Path) -> bytes | None:
    """A user's file as reef is about to compare or replace it: its bytes, or None when absent. Never read through a
    symlink, never a directory or device (InvalidInput naming the path); other OS errors are the caller's. Opened
    non-blocking: a FIFO there (a user's `mkfifo`, or a hostile one) had the open wait for a writer, and reflect,
    evolve and checkout hung on it for ever; now it is refused like a device."""
    import errno
    import stat

    from .errors import InvalidInput

    try:  # O_NONBLOCK: a FIFO there would block the open until someone writes to it
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidInput(f"{path} is a symlink; reef never writes through symlinks") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInput(f"{path} is not a regular file; reef will not replace it")
        os.set_blocking(fd, True)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# Reef's own state replaced by something else, by errno name: a directory where a file was, a file where a directory
# was, a symlink (reef opens its state with O_NOFOLLOW), a FIFO, socket or device. The user's (or an attacker's)
# doing, and fixable by moving it away: exit 4, not a crash. The one wording for each, whichever command meets it.
_MISPLACED = {"EISDIR": "is a directory where reef expects a file",
              "ENOTDIR": "is not a directory where reef expects one",
              "ELOOP": "is a symlink where reef expects a file (reef never follows symlinks in its state)",
              "ENXIO": "is not a regular file (a FIFO, a socket or a device) where reef expects one"}


def misplaced(path, errno_name: str):
    """The MisplacedState (exit 4) for a state path that holds the wrong kind of thing (`errno_name`: EISDIR,
    ENOTDIR, ELOOP, ENXIO), its one line naming the path and saying to move it away; None for any other errno.
    Every place that reports misplaced state (open_state, the CLI boundary, reef doctor) builds it here."""
    from .errors import MisplacedState

    what = _MISPLACED.get(errno_name)
    if what is None:
        return None
    return MisplacedState(f"{path} {what}; move it away (nothing was changed by this command)", str(path),
                          f"{path} {what}")


def misplaced_oserror(exc: BaseException):
    """`misplaced` for an OSError that names its file (one raised outside open_state, by a plain open()), or None."""
    import errno

    if not isinstance(exc, OSError) or exc.filename is None:
        return None
    name = errno.errorcode.get(exc.errno or 0, "")
    return misplaced(_in_the_way(exc.filename) if name == "ENOTDIR" else exc.filename, name)


def _in_the_way(path) -> Path:
    """For ENOTDIR on `path`: the first directory on its way that is a file (or a FIFO...), the one to move away;
    `path` itself when none is (it was to be opened as a directory)."""
    return next((p for p in reversed(Path(path).parents) if p.exists() and not p.is_dir()), Path(path))


def open_state(path, flags: int, mode: int = 0o600) -> int:
    """`os.open` for one of reef's own state files (the ledger, its index, lock and sync pages): never through a
    symlink. A symlink planted there (to /etc/passwd, say) had reef write into its target; now MisplacedState (exit
    4) naming the path. A directory in a file's place (or a file in a directory's), a FIFO, a socket or a device is
    MisplacedState too, with the line every command gives for it (`misplaced`)."""
    import errno
    import stat

    try:
        # O_NONBLOCK: a FIFO planted there would block the open (and every reef command) until someone writes to it
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            os.close(fd)
            raise OSError(errno.EISDIR if stat.S_ISDIR(kind) else errno.ENXIO, "not a regular file")
        if not flags & os.O_NONBLOCK:
            os.set_blocking(fd, True)
        return fd
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "")
        found = misplaced(_in_the_way(path) if name == "ENOTDIR" else path, name)
        if found is not None:
            raise found from None
        raise


SMALL_STATE_LIMIT = 1 << 20
"""The most bytes reef reads of a state file it writes as one small JSON document (project.json, scenario.json:
about a hundred bytes), so a file planted or pasted there cannot make every command read gigabytes."""


def read_state(path, limit: int | None = None) -> bytes | None:
    """One of reef's own state files read whole: its bytes, or None when there is none. Opened by `open_state`
    (never through a symlink, never waiting on a FIFO, never a directory or device: its one line, exit 4), so every
    state read refuses what the writers refuse. `limit` (bytes) bounds files that never grow: over it, InvalidInput
    naming the file, exit 4."""
    from .errors import InvalidInput

    try:
        fd = open_state(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with open(fd, "rb") as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise InvalidInput(f"{path} is larger than {limit} bytes, more than reef ever writes there; move it away "
                           "(nothing was changed by this command)")
    return data


def refuse_misplaced(path) -> None:
    """Raise `open_state`'s one line (MisplacedState, exit 4) when `path` exists and is a directory or a symlink, so a
    command can refuse before it changes anything rather than when it reaches the file; a missing or regular file
    passes. One lstat(), no open, for the usual case."""
    import stat

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:  # a file where one of its directories goes: that one is named
        raise misplaced(_in_the_way(path), "ENOTDIR") from None
    if not stat.S_ISREG(mode):  # a directory, a symlink, a FIFO...
        os.close(open_state(path, os.O_RDWR))  # raises its line
