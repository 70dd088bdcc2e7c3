"""One exception hierarchy for every domain; the CLI edge maps each type to an exit code once."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    CONFLICT = 3
    INVALID = 4
    INTERRUPTED = 130


class ReefError(Exception):
    """A user-facing failure: the message is one sentence naming the file, field or id at fault."""

    exit_code = ExitCode.ERROR


class NotFound(ReefError):
    exit_code = ExitCode.ERROR


class StoreError(ReefError):
    """Corruption or an unreadable state file: stop and change nothing."""

    exit_code = ExitCode.ERROR


class DamagedState(StoreError):
    """State that something else vouches for has gone missing (a ledger shorter than a release's anchor, a release
    log emptied while the store holds its commits): refuse to go on over it, and say how to recover."""

    exit_code = ExitCode.INVALID


class MisplacedState(StoreError):
    """One of reef's own state files replaced by something else (a directory, a symlink): the user's to move away,
    so exit 4 as for invalid input; a StoreError still, so a caller that keeps a record (the gateway) answers that
    the record could not be kept (503), not that the client sent something wrong (400). Built by
    `durable.misplaced` only, so each kind of thing has one wording; `path` is what to move away and `what` the
    line without the advice (`reef doctor` gives the advice as its fix)."""

    exit_code = ExitCode.INVALID

    def __init__(self, message: str, path: str, what: str):
        super().__init__(message)
        self.path = path
        self.what = what

    def __reduce__(self):  # picklable across a process pool, like the other ReefErrors
        return type(self), (str(self), self.path, self.what)


class ConflictError(ReefError):
    """Lost a compare-and-swap, an id reused with other content, a scenario bound to another recipe."""

    exit_code = ExitCode.CONFLICT


class InvalidInput(ReefError):
    exit_code = ExitCode.INVALID


class PolicyError(ReefError):
    """Blocked by the zone guard or another safety policy."""

    exit_code = ExitCode.INVALID


class UsageError(ReefError):
    exit_code = ExitCode.USAGE


class Stopped(ReefError):
    """A signal asked reef to stop while it kept something it must not lose (a run's record): raised once that is
    durable, so reef exits as the signal asks, 128+N (130 for SIGINT), with a line saying what was kept."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum

    def __reduce__(self):
        return type(self), (str(self), self.signum)

    @classmethod
    def after_run(cls, signum: int, receipt: str) -> "Stopped":
        import signal

        return cls(f"stopped by {signal.Signals(signum).name} once the run was recorded (receipt {receipt})", signum)
