"""Which receipts `reef report` attaches to when none are named: this shell's runs that have no report yet.

A shell is identified by REEF_SESSION when set, else by the parent process id and its start time (so a recycled pid
is a different shell). The pending list is a small JSON file per shell, changed under a lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from .durable import make_dirs, open_state, write_all


def shell_key(environ: dict | None = None) -> str:
    env = os.environ if environ is None else environ
    if env.get("REEF_SESSION"):
        return "s-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in env["REEF_SESSION"])[:80]
    ppid = os.getppid()
    try:
        fields = Path(f"/proc/{ppid}/stat").read_text().rsplit(")", 1)[1].split()
        started = fields[19]
    except (OSError, IndexError):
        started = "0"
    return f"p-{ppid}-{started}"


@contextlib.contextmanager
def flocked(path: str | Path):
    """An exclusive flock(2) on `path` (the primitive filelock.FileLock uses on the same file), taken directly:
    the filelock package's import alone costs 15-50 ms on every `reef run` and every agent start. The lock file is
    reef's state, so owner-only (0600), and never opened through a symlink or taken for a directory: either is one
    line naming it, exit 4 (`open_state`), whichever command meets it."""
    fd = open_state(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class PendingReceipts:
    def __init__(self, scenario_dir: Path, key: str):
        self.dir = scenario_dir / "pending"
        self.path = self.dir / f"{key}.json"

    def _lock(self):
        make_dirs(self.dir)  # reef's state: 0700 whatever the umask
        return flocked(f"{self.path}.lock")

    def _write(self, receipts: list[str]) -> None:
        """Rename into place without fsync: this is convenience state, rebuilt by naming receipts explicitly."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, json.dumps({"receipts": receipts}).encode())
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def _read(self) -> list[str]:
        """The receipts, or none when the file is absent, torn or not a small regular file: read as state is
        (`read_state`), so a FIFO there is not waited on (it hung `reef run` after the command and every `reef
        report`); convenience state, so what cannot be read is empty and the next write replaces it."""
        from .durable import SMALL_STATE_LIMIT, read_state
        from .errors import ReefError

        try:
            data = json.loads(read_state(self.path, SMALL_STATE_LIMIT) or b"{}")
            return [str(r) for r in data.get("receipts", [])]
        except (ValueError, AttributeError, TypeError, ReefError):
            return []

    def check(self) -> None:
        """Raise what `add` would meet on the way to its lock (a directory or a symlink in the lock file's place):
        `reef run` asks before running the command, not after its record is in the ledger. One lstat: no lock
        taken, nothing created (`add` does that)."""
        from .durable import refuse_misplaced

        refuse_misplaced(f"{self.path}.lock")

    def add(self, receipt: str) -> None:
        with self._lock():
            receipts = self._read()
            receipts.append(receipt)
            self._write(receipts[-100:])

    def peek(self) -> list[str]:
        return self._read()

    @contextlib.contextmanager
    def claimed(self):
        """This shell's unreported receipts, locked until the block ends; call `done(receipts)` inside it once they
        are reported. Two `reef report`s racing in one shell then attach once: the second finds them claimed."""
        with self._lock():
            yield self._read()

    def done(self, reported: list[str]) -> None:
        """Forget reported receipts; only inside `claimed()` (the lock is held)."""
        left = [r for r in self._read() if r not in set(reported)]
        if left:
            self._write(left)
        else:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass

    def clear(self, reported: list[str]) -> None:
        with self._lock():
            self.done(reported)
