"""Episode commands (canary and gate agents, setup, check) die with reef, grandchildren included, even when reef is
killed with SIGKILL: they run in their own sessions, so nothing else would stop them (weights/orphans.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from reef_cli.episodes import run_command

REEF_LIKE = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from reef_cli.episodes import run_command
    work = Path(sys.argv[1])
    agent = ["/bin/sh", "-c", sys.argv[2]]
    # from a worker thread that waits for it, as the episode pool runs agents
    t = threading.Thread(target=run_command, args=(agent,), kwargs=dict(cwd=work, env={"PATH": "/usr/bin:/bin"},
                         timeout=600, stdout=work / "out", stderr=work / "err"))
    t.start()
    t.join()
""")


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(path: Path, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("agent", [
    "sleep 300 & echo $! > grandchild; echo $$ > agent; wait",
    # a grandchild that ignores SIGTERM: it outlived reef when the agent itself died of the SIGTERM at once
    "(trap '' TERM; exec sleep 301) & echo $! > grandchild; echo $$ > agent; wait",
], ids=["plain", "grandchild-ignores-sigterm"])
def test_kill_9_of_reef_takes_the_agent_and_its_children_down(tmp_path: Path, agent: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", REEF_LIKE, str(tmp_path), agent])
    pids: list[int] = []
    try:
        pids = [_wait_for(tmp_path / "agent"), _wait_for(tmp_path / "grandchild")]
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], "an agent process outlived the reef that started it"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_reaper_keeps_exit_codes_signals_stdin_and_start_failures(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("hello\n")
    run = dict(cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout=30, stdout=tmp_path / "out",
               stderr=tmp_path / "err")
    assert run_command("exit 7", **run).exit == 7
    assert run_command(["/bin/sh", "-c", "kill -TERM $$"], **run).exit == -signal.SIGTERM
    assert run_command(["/bin/cat"], stdin=tmp_path / "in", **run).exit == 0
    assert (tmp_path / "out").read_text() == "hello\n"
    oc = run_command(["/nonexistent/agent"], **run)
    assert oc.exit is None and oc.error == "cannot start '/nonexistent/agent': No such file or directory"
    started = time.monotonic()
    oc = run_command(["/bin/sh", "-c", "sleep 60 & wait"], **{**run, "timeout": 0.5}, kill_grace=0.5)
    assert oc.timed_out and time.monotonic() - started < 10


def test_the_reaper_passes_a_sigkill_and_gives_the_agent_a_shells_signals(tmp_path: Path) -> None:
    """An agent killed by SIGKILL (the OOM killer) came back as exit 1 with a traceback in its stderr; agents
    started with SIGPIPE ignored (Python's), so `yes | head -n1` failed with a broken pipe."""
    killed = run_command("kill -KILL $$", cwd=tmp_path, env=dict(os.environ), timeout=20,
                         stdout=tmp_path / "o1", stderr=tmp_path / "e1")
    assert killed.exit == -signal.SIGKILL and (tmp_path / "e1").read_text() == ""
    piped = run_command("yes | head -n1 >/dev/null; grep SigIgn /proc/self/status", cwd=tmp_path,
                        env=dict(os.environ), timeout=20, stdout=tmp_path / "o2", stderr=tmp_path / "e2")
    # A shell passes on what its own parent ignored (a job started with & ignores SIGINT and SIGQUIT), and only
    # Python's own ignores (SIGPIPE, SIGXFSZ) must not reach the agent: expect this process's mask without them.
    with open("/proc/self/status") as status:
        own = int(next(line for line in status if line.startswith("SigIgn:")).split()[1], 16)
    # (and SIGTERM, which the reaper resets as well)
    expected = own & ~sum(1 << (sig - 1) for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM))
    words = (tmp_path / "o2").read_text().split()
    assert piped.exit == 0 and words == ["SigIgn:", f"{expected:016x}"]
    child = int(words[1], 16)
    assert not child & (1 << (signal.SIGPIPE - 1)) and not child & (1 << (signal.SIGXFSZ - 1))
    assert (tmp_path / "e2").read_text() == ""


def test_a_timeout_sends_one_sigterm_and_keeps_the_callers_grace(tmp_path: Path) -> None:
    """The reaper passed reef's SIGTERM on a second time and cut the grace to its own 2 s."""
    agent = [sys.executable, "-c", textwrap.dedent("""
        import signal, time
        n = [0]
        def h(*_): n[0] += 1
        signal.signal(signal.SIGTERM, h)
        while not n[0]: time.sleep(0.01)
        time.sleep(3)  # a slow clean-up, inside the caller's 5 s of grace
        open('terms', 'w').write(str(n[0]))
    """)]
    out = run_command(agent, cwd=tmp_path, env=dict(os.environ), timeout=0.5, stdout=tmp_path / "o",
                      stderr=tmp_path / "e", kill_grace=5)
    assert out.timed_out and (tmp_path / "terms").read_text() == "1"


def test_an_interrupted_command_leaves_no_descriptor_open(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C while a command ran left the reaper's report pipe open: one descriptor per interrupted command."""
    from reef_cli import episodes

    def interrupted(pid):
        raise KeyboardInterrupt

    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(episodes, "_exited", interrupted)
    for _ in range(5):
        with pytest.raises(KeyboardInterrupt):
            run_command("sleep 30", cwd=tmp_path, env=dict(os.environ), timeout=60, stdout=tmp_path / "o",
                        stderr=tmp_path / "e")
    assert len(os.listdir("/proc/self/fd")) == before
