"""Loop 0: run any agent command under the current release and record what happened (the receipt).

The release is read once, before the child starts, and frozen into the record: a publish during the run does not
change what the run is attributed to. Output is teed to the user's terminal and digested; when both stdin and
stdout are terminals the child gets them directly (interactive agents need a TTY) and output is not captured.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .durable import make_dirs, misplaced
from .errors import DamagedState, InvalidInput
from .releases import Release

FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH)
BUFFER_CAP = 16 * 1024 * 1024


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    record: object  # ledger.Record
    release: Release
    harness_dir: Path
    stop_signal: int | None = None  # a SIGINT/SIGTERM/SIGHUP held until the record was durable: exit 128+N now


class _Tee:
    """Copy a child's stream to ours while hashing it; keep up to BUFFER_CAP bytes for excerpts."""

    def __init__(self, src, dst_fd: int | None):
        self.src, self.dst_fd = src, dst_fd
        self.sha = hashlib.sha256()
        self.length = 0
        self.buf = bytearray()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        while True:
            chunk = os.read(self.src.fileno(), 65536)
            if not chunk:
                break
            self.sha.update(chunk)
            self.length += len(chunk)
            if len(self.buf) < BUFFER_CAP:
                self.buf += chunk[: BUFFER_CAP - len(self.buf)]
            if self.dst_fd is not None:
                try:
                    view = memoryview(chunk)
                    while view:
                        n = os.write(self.dst_fd, view)
                        view = view[n:]
                except OSError:
                    self.dst_fd = None  # our reader went away; keep draining the child
        self.src.close()

    def fields(self, store_content: bool) -> dict:
        from .redact import content_fields

        out = content_fields(bytes(self.buf), store_content)
        out["digest"] = "sha256:" + self.sha.hexdigest()
        out["length"] = self.length
        if self.length > len(self.buf):
            out["truncated"] = True
        return out


@contextlib.contextmanager
def forwarding(proc, signals: tuple, ignore: tuple = ()):
    """While the body runs, pass `signals` on to `proc` and ignore `ignore`; the previous handlers come back after.
    Only the main thread may set handlers: elsewhere this does nothing."""
    def forward(signum, _frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            previous[sig] = signal.signal(sig, forward)
        for sig in ignore:
            previous[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class RunGuard:
    """Signals for one recorded run, from before its child starts until its record is durable.

    While the child lives, `forward` signals are passed on to it (the agent decides what they mean; its exit status
    says what it did) and `ignore` ones are ignored (an interactive child gets Ctrl-C from the terminal itself).
    Once it has exited there is nobody to pass them on to: SIGINT/SIGTERM/SIGHUP are held (`stop` is the first) so
    that redacting the output and appending the record finish, and the caller exits as the signal asks afterwards.
    Any number of them is held, not two: a user mashing Ctrl-C does it in the very seconds the output is redacted
    (~0.5 s/MB), and the record is the promise; SIGQUIT (Ctrl-\\) is the deliberate way out and gets its default
    action, and a supervisor escalates to SIGKILL anyway. Other signals with no child left are ignored. Only the
    main thread may set handlers: elsewhere this does nothing (nothing is held, nothing forwarded)."""

    def __init__(self, forward: tuple, ignore: tuple = ()):
        self.forward, self.ignore = set(forward), set(ignore)
        self.proc = None
        self.child_done = False
        self.received: list[str] = []  # stopping signals that reached reef during the run, for its record
        self.stop: int | None = None  # the first stopping signal held while there was no child to pass it to
        self._previous: dict = {}

    def __enter__(self) -> "RunGuard":
        if threading.current_thread() is threading.main_thread():
            for sig in self.forward | self.ignore | set(STOPPING) | {signal.SIGQUIT}:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def started(self, proc) -> None:
        """The child exists: a stopping signal that came in the moment before it did is its to act on."""
        self.proc = proc
        if self.stop is not None:
            sig, self.stop = self.stop, None
            self._pass_on(sig)

    def exited(self) -> None:
        self.child_done = True

    def _pass_on(self, signum: int) -> bool:
        """Whether the child got it. Not when its wait() had already reaped it (the moment before `exited()`):
        Popen.send_signal then does nothing, silently, and the signal would be lost instead of held."""
        if self.proc.returncode is not None:
            return False
        try:
            self.proc.send_signal(signum)
        except ProcessLookupError:
            return False
        return self.proc.returncode is None

    def _handle(self, signum, _frame) -> None:
        alive = self.proc is not None and not self.child_done and self.proc.returncode is None
        if alive and signum in self.ignore:
            return
        if signum in STOPPING:
            self.received.append(signal.Signals(signum).name)
        if alive and signum in self.forward:
            if self._pass_on(signum):
                return
            alive = False  # reaped the moment before: nobody got it, so it is held (or quits) as with no child
        if signum in STOPPING:
            if self.stop is None:
                self.stop = signum
                if self.proc is not None:  # before the child started it is passed on to the child, no note
                    with contextlib.suppress(OSError):  # os.write: a handler must not re-enter sys.stderr's buffer
                        os.write(2, b"reef: finishing this run's record before stopping (Ctrl-\\ quits at once "
                                    b"without it)\n")
        elif signum == signal.SIGQUIT and not alive:
            signal.signal(signum, signal.SIG_DFL)  # the way out that does not wait for the record
            os.kill(os.getpid(), signum)


def exit_status(status: int) -> int:
    """A child's wait status as a shell reports it: its exit code, or 128+N when signal N killed it."""
    return 128 - status if status < 0 else status


def read_routing(path: Path) -> list[dict]:
    """Routing decisions the agent appended as JSON lines; bad lines are kept as digests and flagged."""
    out: list[dict] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return out
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
            out.append(obj)
        except ValueError:
            out.append({"invalid": True, "line": n, "digest": "sha256:" + hashlib.sha256(line).hexdigest(),
                        "length": len(line)})
    return out


def model_of(argv: list[str], env: dict) -> str | None:
    for i, arg in enumerate(argv):
        if arg in ("--model", "-m") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    for var in ("REEF_MODEL", "ANTHROPIC_MODEL", "OPENAI_MODEL"):
        if env.get(var):
            return env[var]
    return None


def matches_observe_only(rules, *, model: str | None, adapter: str | None, argv: list[str]) -> bool:
    """harness.yaml `observe_only` rules: every key in a rule must match (shell-style globs, case-insensitive)."""
    command = os.path.basename(argv[0]) if argv else ""
    facts = {"model": model or "", "adapter": adapter or "", "command": command}
    for rule in rules:
        if all(fnmatch.fnmatch(facts[k].lower(), str(v).lower()) for k, v in rule.items()):
            return True
    return False


def run_recorded(
    store,
    argv: list[str],
    *,
    env: dict | None = None,
    adapter: str | None = None,
    observe_only: bool = False,
    harness_dir: Path | None = None,
    extra_payload: dict | None = None,
    cwd: Path | None = None,
    stdout_fd: int | None = 1,
    stderr_fd: int | None = 2,
    capture: bool | None = None,
    on_output=None,
    release: Release | None = None,
    store_content: bool | None = None,
    env_for_receipt=None,
    after_record=None,
) -> RunResult:
    """`release` pins the run to a release already materialised by the caller (a wrapper's install root), so a
    publish between the caller's install and this call cannot re-attribute the run. `env_for_receipt(record_id)`
    returns extra child environment that names the receipt (a wrapper's --via-serve session). `after_record(record)`
    runs once the record is durable, still under the run's signal guard (a wrapper remembering the receipt).
    `stop_signal` in the result is a stop request that came after the child exited: the caller exits 128+N."""
    from .sessions import PendingReceipts, shell_key

    if not argv:
        raise InvalidInput("no command given: use 'reef run -- CMD ARGS...'")
    release = release or store.require_head()
    tree, observe_rules, store_content_default = store.run_settings(release)
    if harness_dir is None:
        harness_dir = tree
    base_env = dict(os.environ if env is None else env)
    ledger = store.ledger()
    ledger.check_files()  # a directory where its lock is: refused before the session runs, not after
    cut = ledger.acknowledged_cut()
    if cut is not None:  # its record would be refused after the whole session ran: say so before running it
        raise DamagedState(cut[1])
    pending = PendingReceipts(store.dir, shell_key(base_env))
    pending.check()  # a directory where its lock goes failed after the record was kept, blaming "nothing changed"
    record_id = ledger.reserve_id()  # the receipt the child sees; reserved, so appending it needs no id lookup
    runs_dir = store.dir / "runs"
    make_dirs(runs_dir)  # reef's state: 0700 whatever the umask
    if not runs_dir.is_dir():  # a file in its place: refused now, not after the command ran unrecorded
        raise misplaced(runs_dir, "ENOTDIR")
    routing_file = runs_dir / f"{record_id}.routing.jsonl"
    child_env = {
        **base_env,
        "REEF_HARNESS_DIR": str(harness_dir),
        "REEF_RELEASE_ID": release.release_id,
        "REEF_CONTENT_ID": release.content_id,
        "REEF_RECORD_ID": record_id,
        "REEF_ROUTING_FILE": str(routing_file),
        "REEF_SCENARIO": store.scenario,
        "REEF_PROJECT": str(store.project.root),
    }
    if env_for_receipt is not None:
        child_env.update(env_for_receipt(record_id))
    model = model_of(argv, base_env)
    observe_only = observe_only or matches_observe_only(observe_rules, model=model, adapter=adapter, argv=argv)
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if capture is None:
        capture = not interactive
    # An interactive child gets Ctrl-C from the terminal itself; we only must not die of it first. From before the
    # child starts until its record is durable no signal may lose the run (RunGuard).
    guard = RunGuard(FORWARDED + (() if interactive else (signal.SIGINT,)),
                     ignore=(signal.SIGINT,) if interactive else ())
    with guard:
        started = time.time()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=child_env,
                stdout=subprocess.PIPE if capture else None,
                stderr=subprocess.PIPE if capture else None,
            )
        except FileNotFoundError:
            raise InvalidInput(f"command not found: {argv[0]}") from None
        except PermissionError:
            raise InvalidInput(f"command is not executable: {argv[0]}") from None

        guard.started(proc)
        tees = []
        if capture:
            tees = [_Tee(proc.stdout, stdout_fd), _Tee(proc.stderr, stderr_fd)]
        status = proc.wait()
        guard.exited()
        for t in tees:
            t.thread.join()
        duration = time.time() - started
        exit_code = exit_status(status)
        payload = {
            "argv": argv,
            "cwd": str(cwd or os.getcwd()),
            "exit_code": exit_code,
            "signal": -status if status < 0 else None,
            "duration_s": round(duration, 6),
            "observe_only": observe_only,
            "adapter": adapter,
            "model": model,
            "harness_dir": str(harness_dir),
            "captured": bool(capture),
            "routing": read_routing(routing_file),
        }
        if base_env.get("REEF_TASK_ID"):  # run as a gate episode: the held-out check must see that it ran this task
            payload["task_id"] = base_env["REEF_TASK_ID"]
        keep_text = store_content_default if store_content is None else store_content
        if capture:
            payload["stdout"] = tees[0].fields(keep_text)
            payload["stderr"] = tees[1].fields(keep_text)
            if on_output is not None:
                extra = on_output(bytes(tees[0].buf), bytes(tees[1].buf))
                if extra:
                    payload.update(extra)
        if extra_payload:
            payload.update(extra_payload)
        from .redact import redact_argv, redact_obj

        # The full output text is already redact()'s output (redacting is idempotent) and costs ~0.5 s/MB to scan:
        # set it aside rather than redact it twice. Everything else, excerpts included, goes through redact_obj.
        texts = {name: payload[name].pop("text") for name in ("stdout", "stderr")
                 if isinstance(payload.get(name), dict) and "text" in payload[name]}
        words = payload.pop("argv", None)  # redacted as the command line it makes (`mysql -pX`: a word is a secret by
        payload, _ = redact_obj(payload)  # the words before it), which reads each word alone too: not twice more
        if words is not None:
            payload["argv"] = redact_argv(words) if isinstance(words, list) else redact_obj(words)[0]
        for name, text in texts.items():
            payload[name]["text"] = text
        if guard.received:  # asked to stop during the run, up to now (the agent's own exit says what it did then)
            payload["interrupted"] = list(guard.received)
        record = ledger.append("interaction", payload, release_id=release.release_id, content_id=release.content_id,
                               record_id=record_id)
        try:
            routing_file.unlink()
        except FileNotFoundError:
            pass
        pending.add(record.record_id)
        if after_record is not None:
            after_record(record)
    return RunResult(exit_code, record, release, Path(harness_dir), guard.stop)
