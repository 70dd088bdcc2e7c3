"""The children `reef train` starts in their own sessions (the trainer, the gate's `reef serve`) die with it.

Their own sessions let reef stop a whole process group on a timeout or Ctrl-C, but also let them outlive a `reef
train` killed with SIGKILL: a trainer holding the GPUs for a step nobody will publish, a gateway serving on for ever.
On Linux the kernel sends them SIGTERM when reef train dies (PR_SET_PDEATHSIG), so each stops as on any other stop.
The signal follows the thread that started the child: both are started from reef train's main thread.
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
        if os.getppid() != parent:  # reef train died before the prctl took hold
            os.kill(os.getpid(), signal.SIGTERM)

    return hook
