"""Running gate episodes: one task, one harness, one repeat, in a fresh work directory.

Each command (setup, agent, check) runs in its own session (`start_new_session=True`), so a timeout or an interrupt
kills the whole process group with `os.killpg`, grandchildren included. The leader is waited on without being reaped
(`waitid(WNOWAIT)`), so its process-group id cannot be reused while reef kills what it left behind. The leader is
a small reaper (`weights/orphans.group_dies_with_parent`) that takes the group down when reef dies, even by SIGKILL.

Finished episodes are appended to a journal (one fsync'd JSON line each); a run that is killed at any point resumes
by reading the journal and running only the episodes that are missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from .durable import STATE_FILE_MODE, append_durable, make_dirs, write_atomic
from .errors import InvalidInput
from .redact import WINDOW, content_fields, redact
from .releases import canonical
from .harness_files import rmtree, write_files
from .tasks import Task

SCORE_PREFIX = "score:"
TAIL_CHARS = 600


# ------------------------------------------------------------------------------------------------ processes


@dataclass(frozen=True)
class CommandOutcome:
    exit: int | None  # None: timed out or could not start
    timed_out: bool
    duration_s: float
    error: str | None = None


class ProcessGroups:
    """The process groups reef has running, so an interrupt can kill every one of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[int] = set()
        self.aborted = False

    def add(self, pgid: int) -> None:
        with self._lock:
            self._live.add(pgid)

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._live.discard(pgid)

    def kill_all(self) -> None:
        with self._lock:
            self.aborted = True
            live = list(self._live)
        for pgid in live:
            _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(pid: int) -> bool:
    """Has `pid` exited? Leaves it a zombie (not reaped), which keeps its process-group id reserved."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def run_command(
    cmd: str | Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    stdout: Path,
    stderr: Path,
    stdin: Path | None = None,
    groups: ProcessGroups | None = None,
    kill_grace: float = 2.0,
) -> CommandOutcome:
    """Run `cmd` (a string runs under /bin/sh -c) in a new session; on timeout kill its whole process group."""
    from .weights.orphans import group_dies_with_parent

    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    start = time.monotonic()
    why_r, why_w = os.pipe()  # the reaper says here why `argv` could not start
    try:
        with open(stdout, "ab") as out, open(stderr, "ab") as err, open(stdin or os.devnull, "rb") as inp:
            try:
                # under a reaper that takes the whole group down when reef dies, even by SIGKILL (weights/orphans.py)
                proc = subprocess.Popen(group_dies_with_parent(argv, why_w), cwd=cwd, env=dict(env), stdin=inp,
                                        stdout=out, stderr=err, start_new_session=True, close_fds=True,
                                        pass_fds=(why_w,))
            except OSError as exc:
                os.close(why_r)
                return CommandOutcome(None, False, 0.0, f"cannot start '{argv[0]}': {exc.strerror or exc}")
    finally:
        os.close(why_w)
    pgid = proc.pid
    if groups is not None:
        groups.add(pgid)
    timed_out = False
    try:
        deadline = start + timeout
        pause = 0.001
        while not _exited(proc.pid):
            now = time.monotonic()
            if now >= deadline or (groups is not None and groups.aborted):
                timed_out = now >= deadline
                _signal_group(pgid, signal.SIGTERM)
                grace_end = time.monotonic() + kill_grace
                while not _exited(proc.pid) and time.monotonic() < grace_end:
                    time.sleep(0.01)
                break
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, 0.02)
    except BaseException:  # Ctrl-C while it ran: the reaper's report pipe is not read, so close it here
        os.close(why_r)
        raise
    finally:
        _signal_group(pgid, signal.SIGKILL)  # the leader's leftovers (and the leader, after a timeout)
        code = proc.wait()
        if groups is not None:
            groups.discard(pgid)
    duration = time.monotonic() - start
    with os.fdopen(why_r, "rb") as why:
        cannot = why.read().decode(errors="replace")
    if cannot:
        return CommandOutcome(None, False, duration, f"cannot start '{argv[0]}': {cannot}")
    if timed_out:
        return CommandOutcome(None, True, duration, f"timed out after {timeout:g}s; its process group was killed")
    if groups is not None and groups.aborted:
        return CommandOutcome(None, False, duration, "interrupted")
    return CommandOutcome(code, False, duration)


# ------------------------------------------------------------------------------------------------ episodes


@dataclass(frozen=True)
class EpisodeRequest:
    task: Task
    side: str  # candidate | current | ablate:<bullet id>
    repeat: int
    harness_dir: Path
    content_id: str

    @property
    def key(self) -> str:
        return episode_key(self.task, self.side, self.content_id, self.repeat)


def episode_key(task: Task, side: str, content_id: str, repeat: int) -> str:
    return f"{task.id}|{task.digest[7:19]}|{side}|{content_id[:12]}|{repeat}"


@dataclass(frozen=True)
class EpisodeResult:
    key: str
    task_id: str
    side: str
    repeat: int
    content_id: str
    score: float
    exit: int | None
    check_exit: int | None
    duration_s: float
    timed_out: bool
    error: str | None = None
    stdout: dict = field(default_factory=dict)
    stderr: dict = field(default_factory=dict)
    skills_used: tuple[str, ...] = ()
    tail: str = ""
    record_id: str = ""  # minted when the episode ends and journaled, so a resend after a crash reuses it

    def to_json(self) -> dict:
        return {
            "key": self.key, "task_id": self.task_id, "side": self.side, "repeat": self.repeat,
            "content_id": self.content_id, "score": self.score, "exit": self.exit, "check_exit": self.check_exit,
            "duration_s": round(self.duration_s, 3), "timed_out": self.timed_out, "error": self.error,
            "stdout": self.stdout, "stderr": self.stderr, "skills_used": list(self.skills_used), "tail": self.tail,
            "record_id": self.record_id,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> "EpisodeResult":
        return cls(
            key=d["key"], task_id=d["task_id"], side=d["side"], repeat=int(d["repeat"]), content_id=d["content_id"],
            score=float(d["score"]), exit=d.get("exit"), check_exit=d.get("check_exit"),
            duration_s=float(d.get("duration_s", 0.0)), timed_out=bool(d.get("timed_out", False)),
            error=d.get("error"), stdout=dict(d.get("stdout") or {}), stderr=dict(d.get("stderr") or {}),
            skills_used=tuple(d.get("skills_used") or ()), tail=d.get("tail", ""), record_id=d.get("record_id", ""),
        )

    def ledger_payload(self, run: str) -> dict:
        """Gate evidence: outcome and output digests, never the outputs themselves."""
        return {
            "run": run, "task_id": self.task_id, "side": self.side, "repeat": self.repeat, "score": self.score,
            "exit": self.exit, "check_exit": self.check_exit, "duration_s": round(self.duration_s, 3),
            "timed_out": self.timed_out, "error": self.error, "stdout": self.stdout, "stderr": self.stderr,
            "skills_used": list(self.skills_used), "content_id": self.content_id,
        }


def parse_score(text: str, exit_code: int | None) -> tuple[float, str | None]:
    """The check's verdict: the last `score: X` line (X in [0, 1]) if any, else 1.0 on exit 0 and 0.0 otherwise."""
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if stripped.lower().startswith(SCORE_PREFIX):
            raw = stripped[len(SCORE_PREFIX):].strip()
            try:
                value = float(raw)
            except ValueError:
                return 0.0, f"check printed an unreadable score '{raw}'"
            if not 0.0 <= value <= 1.0:
                return 0.0, f"check printed score {raw}, outside [0, 1]"
            return value, None
    return (1.0, None) if exit_code == 0 else (0.0, None)


def agent_argv(agent: Sequence[str], prompt: str) -> tuple[list[str], bool]:
    """Substitute `{prompt}` and `{python}`; returns (argv, prompt_in_argv). Without `{prompt}` it goes to stdin."""
    if not agent:
        raise InvalidInput("harness.yaml has no 'agent'; set e.g. agent: [reef-claude, -p, \"{prompt}\"]")
    used = any("{prompt}" in a for a in agent)
    return [a.replace("{prompt}", prompt).replace("{python}", sys.executable) for a in agent], used


def _tail(path: Path) -> str:
    """The last TAIL_CHARS characters of an output file, redacted: the journal keeps it after the run, and reef
    never stores a secret. A window of WINDOW bytes more is read and redacted, and the tail is cut from the redacted
    text, so a secret that starts before the cut and ends inside the tail is seen whole (a cut made in the raw text
    would leave its end, too short to match, behind); a redaction marker is never cut in half."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_CHARS - WINDOW))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    out = redact(text)[0]
    cut = max(0, len(out) - TAIL_CHARS)
    opened = out.rfind("[REDACTED:", 0, cut + len("[REDACTED:") - 1)  # a marker that starts before the cut
    if 0 <= opened < cut and out.find("]", opened) >= cut:
        cut = opened  # the cut falls inside a marker: keep the marker whole
    return out[cut:]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _skills_used(routing: Path) -> tuple[str, ...]:
    out: list[str] = []
    try:
        lines = routing.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return ()
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("decision") in ("skill_used", "skill") and isinstance(d.get("skill"), str):
            out.append(d["skill"])
    return tuple(dict.fromkeys(out))


class LocalPool:
    """The default executor: episodes on local threads (each one mostly waits on its agent's process)."""

    def __init__(self, workers: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="reef-episode")

    def submit(self, runner, req):
        return self.pool.submit(runner.run_one, req)

    def shutdown(self, cancel: bool = False) -> None:
        self.pool.shutdown(wait=True, cancel_futures=cancel)


class EpisodeRunner:
    """Runs episodes for one gate run: the agent command, the trusted suite directory and the seed are fixed."""

    def __init__(
        self,
        agent: Sequence[str],
        *,
        suite_dir: Path,
        seed: int = 0,
        workers: int | None = None,
        work_root: Path | None = None,
        environ: Mapping[str, str] | None = None,
        kill_grace: float = 2.0,
        store_content: bool = False,
        executor=None,
    ) -> None:
        self.agent = tuple(agent)
        self.executor = executor  # an executors.ExecutorSpec (its make(n) gives the pool); None: local threads
        self.store_content = store_content
        self.suite_dir = Path(suite_dir)
        self.seed = seed
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.work_root = work_root
        self.environ = dict(os.environ if environ is None else environ)
        self.kill_grace = kill_grace
        self.groups = ProcessGroups()

    def settings(self) -> dict:
        """What a runner elsewhere (a Ray worker) needs to run one of our episodes exactly as we would."""
        return {"agent": self.agent, "suite_dir": self.suite_dir, "seed": self.seed, "work_root": self.work_root,
                "environ": self.environ, "kill_grace": self.kill_grace, "store_content": self.store_content}

    def episode_seed(self, task: Task, repeat: int) -> str:
        """The same for candidate and current, so both sides meet the same luck (common random numbers)."""
        return f"{self.seed}:{task.id}:{repeat}"

    def run_one(self, req: EpisodeRequest) -> EpisodeResult:
        ep_dir = Path(tempfile.mkdtemp(prefix="reef-episode-", dir=self.work_root))
        try:
            return self._run_in(ep_dir, req)
        finally:
            rmtree(ep_dir)

    def _run_in(self, ep_dir: Path, req: EpisodeRequest) -> EpisodeResult:
        from .harness_files import write_files
        from .gitstore import Entry

        task = req.task
        work = ep_dir / "work"
        work.mkdir()
        routing = ep_dir / "routing.jsonl"
        out, err = ep_dir / "agent.out", ep_dir / "agent.err"
        base_env = {
            **self.environ,
            "REEF_TASK_ID": task.id,
            "REEF_WORK_DIR": str(work),
            "REEF_EPISODE_SEED": self.episode_seed(task, req.repeat),
            "REEF_ROUTING_FILE": str(routing),
            "REEF_PYTHON": sys.executable,
        }

        def result(score, exit_code, check_exit, duration, timed_out, error, tail=""):
            from .ids import new_id

            return EpisodeResult(
                key=req.key, task_id=task.id, side=req.side, repeat=req.repeat, content_id=req.content_id,
                score=score, exit=exit_code, check_exit=check_exit, duration_s=duration, timed_out=timed_out,
                error=error if error is None else redact(error)[0],  # a check's unreadable score line is its output
                stdout=content_fields(_read(out), self.store_content),
                stderr=content_fields(_read(err), self.store_content),
                skills_used=_skills_used(routing), tail=tail, record_id=new_id("ep"),
            )

        total = 0.0
        if task.setup is not None:
            if task.setup.files:
                write_files(work, {p: Entry(text.encode("utf-8")) for p, text in task.setup.files})
            if task.setup.command is not None:
                so, se = ep_dir / "setup.out", ep_dir / "setup.err"
                env = {**base_env, "REEF_SUITE_DIR": str(self.suite_dir)}
                oc = run_command(task.setup.command, cwd=work, env=env, timeout=task.timeout, stdout=so, stderr=se,
                                 groups=self.groups, kill_grace=self.kill_grace)
                total += oc.duration_s
                if oc.exit != 0:
                    why = oc.error or f"exited with {oc.exit}"
                    return result(0.0, None, None, total, oc.timed_out, f"setup {why}", _tail(se))
        argv, in_argv = agent_argv(self.agent, task.prompt)
        prompt_file = None
        if not in_argv:
            prompt_file = ep_dir / "prompt.txt"
            prompt_file.write_text(task.prompt, encoding="utf-8")
        agent_env = {**base_env, "REEF_HARNESS_DIR": str(req.harness_dir)}
        oc = run_command(argv, cwd=work, env=agent_env, timeout=task.timeout, stdout=out, stderr=err,
                         stdin=prompt_file, groups=self.groups, kill_grace=self.kill_grace)
        total += oc.duration_s
        if oc.exit is None:
            return result(0.0, None, None, total, oc.timed_out, f"agent {oc.error}", _tail(err) or _tail(out))
        co, ce = ep_dir / "check.out", ep_dir / "check.err"
        check_env = {**base_env, "REEF_SUITE_DIR": str(self.suite_dir), "REEF_AGENT_STDOUT": str(out),
                     "REEF_AGENT_EXIT": str(oc.exit)}
        ck = run_command(task.check, cwd=work, env=check_env, timeout=task.timeout, stdout=co, stderr=ce,
                         groups=self.groups, kill_grace=self.kill_grace)
        total += ck.duration_s
        if ck.exit is None:
            return result(0.0, oc.exit, None, total, ck.timed_out, f"check {ck.error}", _tail(ce))
        score, error = parse_score(_read(co).decode("utf-8", "replace"), ck.exit)
        if task.skill_trigger:
            used = _skills_used(routing)
            wanted = task.skill
            if (wanted and wanted not in used) or not used:
                need = f"skill '{wanted}'" if wanted else "a skill"
                score, error = 0.0, f"{need} was not used (skill-trigger task; skills used: {', '.join(used) or 'none'})"
        tail = "" if score >= 1.0 else (_tail(ce) or _tail(co) or _tail(err))
        return result(score, oc.exit, ck.exit, total, False, error, tail)

    def run_many(
        self,
        requests: Iterable[EpisodeRequest],
        *,
        journal: "Journal | None" = None,
        on_result: Callable[[EpisodeResult, bool], None] | None = None,
    ) -> dict[str, EpisodeResult]:
        """Run `requests` on the worker pool in the order given (callers interleave sides); journaled ones are reused.

        `on_result(result, resumed)` is called in this thread, so callers may write the ledger from it.
        """
        results: dict[str, EpisodeResult] = {}
        todo: list[EpisodeRequest] = []
        for req in requests:
            if req.key in results:
                continue
            done = journal.get(req.key) if journal is not None else None
            if done is not None:
                results[req.key] = done
                if on_result:
                    on_result(done, True)
            else:
                todo.append(req)
        if not todo:
            return results
        n = min(self.workers, len(todo))
        pool = self.executor.make(n) if self.executor is not None else LocalPool(n)
        try:
            pending = {pool.submit(self, req) for req in todo}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    res = fut.result()
                    if journal is not None:
                        journal.add(res)
                    results[res.key] = res
                    if on_result:
                        on_result(res, False)
        except BaseException:
            self.groups.kill_all()
            pool.shutdown(cancel=True)
            raise
        pool.shutdown()
        return results


# ------------------------------------------------------------------------------------------------ journal


class Journal:
    """Finished episodes of one gate run, one fsync'd JSON line each; a torn last line is dropped on open."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._done: dict[str, EpisodeResult] = {}
        make_dirs(self.path.parent)
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        keep = data.rfind(b"\n") + 1
        if keep != len(data):  # a crash mid-append: drop the torn tail
            with open(self.path, "rb+") as f:
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
        for line in data[:keep].splitlines():
            try:
                res = EpisodeResult.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue  # the journal is a cache: an unreadable line is just an episode to run again
            self._done[res.key] = res

    def get(self, key: str) -> EpisodeResult | None:
        return self._done.get(key)

    def __len__(self) -> int:
        return len(self._done)

    def add(self, res: EpisodeResult) -> None:
        line = canonical(res.to_json()) + b"\n"
        with self._lock:
            append_durable(self.path, line)
            self._done[res.key] = res


# ------------------------------------------------------------------------------------------------ harness copies


def materialise_readonly(dest: Path, files: Mapping) -> Path:
    """A read-only copy of a harness (files and directories) at `dest`, built once (a marker beside it says so)."""
    marker = dest.with_name(dest.name + ".complete")
    if marker.exists() and dest.is_dir():
        return dest
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    rmtree(tmp)
    write_files(tmp, dict(files), read_only=True)
    for dirpath, _dirnames, _ in os.walk(tmp, topdown=False):
        os.chmod(dirpath, 0o500)  # reef's state: the owner's alone, like write_files' read-only files
    rmtree(dest)
    os.rename(tmp, dest)
    write_atomic(marker, b"ok\n", STATE_FILE_MODE)
    return dest
