"""Launching the weight trainer (slime's `train.py` by default) as a subprocess, with slime's own flags.

The contract with any trainer: it accepts slime's flags, reads the prompt data reef exported, and exits 0 leaving an
HF checkpoint directory (a `config.json` beside the weights) under `--update-weight-disk-dir` — where slime's full
disk weight sync writes `weight_v<N>` directories. The newest such directory is the candidate.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import ExitCode, InvalidInput, ReefError
from .orphans import die_with_parent

REPLAY_ROLLOUT = "reef_cli.weights.slime_replay.generate_rollout"
KILL_GRACE_S = 10.0
FORWARDED = (signal.SIGINT, signal.SIGTERM)  # to the trainer's process group, which is not reef's


class TrainerFailed(ReefError):
    def __init__(self, message: str, *, stage: str, status: int | None = None):
        super().__init__(message)
        self.stage = stage
        self.status = status  # the trainer's exit status (exit_code is reef's own, from the error class)


class TrainerInterrupted(TrainerFailed):
    exit_code = ExitCode.INTERRUPTED


@dataclass(frozen=True)
class TrainerResult:
    argv: tuple[str, ...]
    exit_code: int
    duration_s: float
    checkpoint: Path
    log_path: Path

    def to_json(self) -> dict:
        return {"argv": shown_argv(self.argv), "exit_code": self.exit_code, "duration_s": round(self.duration_s, 3),
                "checkpoint": str(self.checkpoint), "log": str(self.log_path)}


def shown_argv(argv) -> list[str]:
    """`argv` as reef stores and prints it: a key typed on the trainer's command line (`--wandb-key K`, `HF_TOKEN=K`)
    redacted. Read as the command line it makes (`redact_argv`), so a flag names the secret that follows it as a
    separate word; a word shlex would quote (`-pS3c$ret` after mysql) is read as typed, not inside quotes."""
    from ..redact import redact_argv

    return redact_argv(list(argv))


def slime_flags(*, run_dir: Path, prompt_data: Path, hf_checkpoint: str, samples: int, trainer: dict) -> list[str]:
    """slime's flags for one training step on exported rollouts: the checkpoint it starts from, Megatron state under
    the run, the prompt data and its keys, reef's replay rollout function, full-weight disk sync into the run."""
    flags = [
        "--hf-checkpoint", hf_checkpoint,
        "--load", str(run_dir / "megatron"),
        "--save", str(run_dir / "megatron"),
        "--prompt-data", str(prompt_data),
        "--input-key", "prompt", "--label-key", "label", "--metadata-key", "metadata",
        "--rollout-function-path", REPLAY_ROLLOUT,
        "--rollout-batch-size", str(samples),
        "--num-rollout", "1",
        "--rollout-num-gpus", str(trainer.get("rollout_num_gpus", 1)),
        "--update-weight-transport", "disk",
        "--update-weight-disk-dir", str(run_dir / "hf"),
        "--update-weight-disk-keep-files",
    ]
    for key, value in (trainer.get("args") or {}).items():
        if value is True:
            flags.append(key)
        elif value is not False:
            flags += [key, str(value)]
    return flags


def build_argv(trainer: str | None, slime_dir: str | None, flags: list[str], python: str = "python3",
               cwd: Path | None = None) -> list[str]:
    """`--trainer` split like a shell, or slime's own entry point in the configured checkout; slime's flags follow.
    A relative REEF_SLIME_DIR is taken from `cwd`, where the user is (`reef -C DIR`), as the trainer command is."""
    if trainer:
        try:
            head = shlex.split(trainer)
        except ValueError as exc:
            from ..redact import redact

            raise InvalidInput(f"--trainer {redact(trainer)[0]!r}: cannot split it like a shell ({exc})") from None
        if not head:
            raise InvalidInput("--trainer is empty")
    elif slime_dir:
        entry = Path(cwd or Path.cwd()) / slime_dir / "train.py"
        if not entry.is_file():
            raise InvalidInput(f"REEF_SLIME_DIR={slime_dir}: no train.py there (a checkout of THUDM/slime expected)")
        head = [python, str(entry)]
    else:
        raise InvalidInput("no trainer: pass --trainer 'CMD ARGS' or set REEF_SLIME_DIR to a slime checkout")
    return head + flags


def find_checkpoint(hf_dir: Path) -> Path | None:
    """The newest HF checkpoint the trainer left: `hf_dir` itself or its newest `weight_v*` subdirectory."""
    if (hf_dir / "config.json").is_file():
        return hf_dir
    try:
        found = sorted(p for p in hf_dir.iterdir() if p.is_dir() and (p / "config.json").is_file())
    except FileNotFoundError:
        return None
    return found[-1] if found else None


def launch(argv: list[str], *, cwd: Path, env: dict, log_path: Path, hf_dir: Path, timeout_s: float | None,
           on_tick: Callable[[float, str], None] | None = None, poll_s: float = 0.2) -> TrainerResult:
    """Run the trainer in its own process group with output to `log_path`, redacted on the way (trainer_log.py);
    SIGINT is forwarded to the group (which a terminal's Ctrl-C would not reach), and so is SIGTERM (a service
    manager stopping reef stops the trainer with it, and the run is recorded as interrupted); a timeout ends it
    (SIGTERM, then SIGKILL after a grace period)."""
    from .trainer_log import RedactedLog

    started = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    interrupted: list[int] = []
    box: list[subprocess.Popen] = []

    def forward(signum, _frame):
        interrupted.append(signum)
        if box:
            _signal_group(box[0], signum)

    # The handler goes in before the trainer starts: a Ctrl-C between the two would otherwise kill reef with a
    # KeyboardInterrupt and leave the trainer (in its own session) running unattended.
    with open(log_path, "ab", buffering=0) as log:
        previous = {sig: signal.signal(sig, forward) for sig in FORWARDED} \
            if threading.current_thread() is threading.main_thread() else None
        out, into = os.pipe()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=into,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=die_with_parent(os.getpid()))
        except BaseException as exc:
            _restore(previous)
            os.close(out)
            os.close(into)
            if isinstance(exc, FileNotFoundError):
                raise TrainerFailed(f"trainer command not found: {argv[0]}", stage="launch") from None
            if isinstance(exc, PermissionError):
                raise TrainerFailed(f"trainer command is not executable: {argv[0]}", stage="launch") from None
            raise
        os.close(into)
        copier = RedactedLog(out, log).start()
        box.append(proc)
        if interrupted:  # Ctrl-C came while it was starting
            _signal_group(proc, interrupted[0])
        timed_out = False
        try:
            while proc.poll() is None:
                elapsed = time.monotonic() - started
                if timeout_s is not None and elapsed > timeout_s and not timed_out:
                    timed_out = True
                    _stop(proc)
                    break
                if on_tick is not None:
                    on_tick(elapsed, _last_line(log_path))
                time.sleep(poll_s)
            code = proc.wait()
        finally:
            _restore(previous)
            copier.close()
    duration = time.monotonic() - started
    exit_code = 128 - code if code < 0 else code
    if interrupted:
        raise TrainerInterrupted(f"trainer interrupted ({signal.Signals(interrupted[0]).name} forwarded); log: "
                                 f"{log_path}", stage="interrupted", status=exit_code)
    if timed_out:
        raise TrainerFailed(f"trainer timed out after {timeout_s:g} s and was stopped; log: {log_path}",
                            stage="timeout", status=exit_code)
    if exit_code != 0:
        tail = _last_line(log_path)
        raise TrainerFailed(f"trainer exited with status {exit_code}" + (f" ({tail})" if tail else "")
                            + f"; log: {log_path}", stage="trainer", status=exit_code)
    checkpoint = find_checkpoint(hf_dir)
    if checkpoint is None:
        raise TrainerFailed(f"trainer exited 0 but left no checkpoint (a directory with config.json) under {hf_dir}; "
                            f"log: {log_path}", stage="checkpoint", status=0)
    return TrainerResult(tuple(argv), exit_code, duration, checkpoint, log_path)


def _restore(previous) -> None:
    for sig, handler in (previous or {}).items():
        signal.signal(sig, handler)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen) -> None:
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)


def _last_line(path: Path, limit: int = 160) -> str:
    """The log's last non-blank line, redacted (it is printed, and stored in a `train_failed` record: a trainer
    echoing its `--wandb-key` or HF_TOKEN on the way out must not put it there), at most `limit` characters. The
    end of the log is read with a window's room before that line, so a key on the line before it is context."""
    from ..redact import WINDOW, redact

    try:
        with open(path, "rb") as f:
            start = max(0, os.fstat(f.fileno()).st_size - (4096 + WINDOW))
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    head_cut = start > 0
    if head_cut:  # the read began inside a line: drop it, unless it is the last one
        nl = text.find("\n")
        if 0 <= nl < len(text.rstrip()):
            text, head_cut = text[nl + 1:], False
    lines = [ln for ln in redact(text)[0].splitlines() if ln.strip()]
    line = " ".join(lines[-1].split()) if lines else ""
    if len(line) <= limit:
        return line
    if head_cut:  # a line longer than what was read: only its end is known whole
        return f"… {line[-(limit - 2):]}"
    half = (limit - 3) // 2  # an error's end says what went wrong ("... No such file or directory"): keep both ends
    return f"{line[:half]} … {line[-half:]}"
