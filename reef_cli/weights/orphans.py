"""The children reef starts in their own sessions die with it: the trainer and the gate's `reef serve`
(`die_with_parent`), and every episode command, i.e. the canary and gate agents, their setup and check commands
(`group_dies_with_parent`).

Their own sessions let reef stop a whole process group on a timeout or Ctrl-C, but also let them outlive a reef
killed with SIGKILL: a trainer holding the GPUs for a step nobody will publish, a gateway serving on for ever, an
agent still editing a work directory and calling a model for a gate nobody will read. On Linux the kernel sends
them SIGTERM when reef dies (PR_SET_PDEATHSIG), so each stops as on any other stop. The signal follows the thread
that started the child, so the child must be started from a thread that outlives it: the trainer and gateway are
started from reef's main thread, and each episode command from the thread that waits for it.
"""

from __future__ import annotations

import os
import signal
import sys


def die_with_parent(parent: int):
    """A `preexec_fn` for subprocess.Popen: SIGTERM to the child when process `parent` (the caller) dies."""
    def hook() -> None:
        if not sys.platform.startswith("linux"):
            return
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # reef died before the prctl took hold
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


_REAPER = r"""
import os, signal, sys, time
parent, report = int(sys.argv[1]), int(sys.argv[2])
argv = sys.argv[3:]
os.set_inheritable(report, False)
orphaned = []
def stop(*_):
    # SIGTERM reaches the reaper from the kernel when reef died (PR_SET_PDEATHSIG), or from reef's own signal to
    # the whole group (a timeout), which the agent got as well: only the first is passed on, once
    if orphaned or os.getppid() == parent:
        return
    orphaned.append(time.monotonic())
    signal.signal(signal.SIGALRM, lambda *_: os.killpg(0, signal.SIGKILL))
    signal.alarm(2)
    os.killpg(0, signal.SIGTERM)
signal.signal(signal.SIGTERM, stop)
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
if os.getppid() != parent or orphaned:
    os._exit(143)
pid = os.fork()
if pid == 0:
    # the agent starts with the signal dispositions a shell would give it, not Python's (SIGPIPE, SIGXFSZ ignored)
    for sig in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(report, (exc.strerror or str(exc)).encode())
    os._exit(127)
os.close(report)
while True:
    try:
        _, status = os.waitpid(pid, 0)
        break
    except ChildProcessError:
        os._exit(127)
if orphaned:
    # reef is gone: what is left of the group (children that ignore SIGTERM) gets SIGKILL when the 2 s are up
    time.sleep(max(0.0, 2.0 - (time.monotonic() - orphaned[0])))
    os.killpg(0, signal.SIGKILL)
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
"""


def group_dies_with_parent(argv: list[str], report_fd: int) -> list[str]:
    """`argv` run under a small reaper that leads its process group: when reef dies, the kernel sends the reaper
    SIGTERM (PR_SET_PDEATHSIG, set in the reaper's own single-threaded process: no `preexec_fn` in reef's episode
    threads), and it passes SIGTERM to the whole group, the agent's own children included (SIGKILL 2 s later). A
    SIGTERM that reef itself sends to the group (a timeout) is not passed on a second time, and leaves the grace to
    reef; the agent gets SIGPIPE and SIGXFSZ at their defaults, as from a shell.
    The agent is forked from it in the same group, inherits stdin/stdout/stderr and the environment, and its exit
    status (or the signal that ended it) becomes the reaper's. When `argv` cannot be started, the reaper writes why
    to `report_fd` (pass it in `pass_fds`) and exits 127."""
    return [sys.executable, "-I", "-S", "-c", _REAPER, str(os.getpid()), str(report_fd), *argv]
