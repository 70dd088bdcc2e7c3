"""The error boundary: the one place exceptions become a one-line message and an exit code, for `reef` and the
`reef-<agent>` wrappers. Typer-free and import-light, since every hot command ends here; typer's own exceptions are
turned into exit codes in main.run before they reach it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import ExitCode, ReefError, Stopped
from ..printable import printable


def crash_log(exc: BaseException) -> Path:
    import traceback  # only on a crash: it pulls in linecache and tokenize (~8 ms)

    text = "".join(traceback.format_exception(exc))
    base = Path(os.environ.get("XDG_STATE_HOME") or (Path.home() / ".local" / "state")) / "reef"
    try:
        base.mkdir(parents=True, exist_ok=True)
        path = base / "crash.log"
    except OSError:
        import tempfile

        path = Path(tempfile.gettempdir()) / "reef-crash.log"
    with open(path, "a") as f:
        f.write(text)
    return path


# The machine refusing, not reef failing: a read-only or full disk, missing permissions, too many open files.
_ENVIRONMENT = {"EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT", "EIO", "EMFILE", "ENFILE", "ETXTBSY"}


def environment_error(exc: BaseException) -> str | None:
    """One line for an OSError the machine caused (naming the file), or None for anything that is a bug."""
    import errno

    if not isinstance(exc, OSError) or errno.errorcode.get(exc.errno or 0) not in _ENVIRONMENT:
        return None
    where = exc.filename if exc.filename is not None else "a file"
    what = exc.strerror or errno.errorcode[exc.errno]
    return f"{where}: {what} (check its permissions and the free space there)"


def misplaced_error(exc: BaseException) -> str | None:
    """One line for reef's state replaced by the wrong kind of thing, met by a plain open() (`durable.misplaced`,
    the line open_state raises), or None."""
    from ..durable import misplaced_oserror

    found = misplaced_oserror(exc)
    return None if found is None else str(found)


def error_line(prog: str, message: object, label: str = "error") -> str:
    """`prog: error: MESSAGE` as written to stderr, one line: control characters in the message (a path or a
    remote's name holding `ESC[2J` or a carriage return) are escaped as `reef log`/`show` escape them (printable:
    `\\x1b[2J`), newlines too, so an error can neither repaint the user's terminal nor forge a line after it."""
    return f"{prog}: {label}: {printable(str(message))}\n"


def guarded(fn, prog: str = "reef") -> int:
    """Run fn() and return its exit code; a ReefError prints `prog: error: ...` and exits with its code."""
    try:
        return fn()
    except Stopped as exc:  # not a failure: what was under way is kept, and the signal is obeyed
        sys.stderr.write(f"{prog}: {exc}\n")
        return int(exc.exit_code)
    except ReefError as exc:
        sys.stderr.write(error_line(prog, exc))
        return int(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:  # a bug, not a user error: short line here, traceback in a file
        line = environment_error(exc)
        if line is not None:
            sys.stderr.write(error_line(prog, line))
            return int(ExitCode.ERROR)
        line = misplaced_error(exc)
        if line is not None:
            sys.stderr.write(error_line(prog, line))
            return int(ExitCode.INVALID)
        path = crash_log(exc)
        sys.stderr.write(error_line(prog, f"{type(exc).__name__}: {exc} (traceback in {path})", "unexpected error"))
        return int(ExitCode.ERROR)
