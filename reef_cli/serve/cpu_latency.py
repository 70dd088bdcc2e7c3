"""`reef serve --low-latency`: keep this machine's idle CPUs polling instead of sleeping while the gateway runs.

Why a gateway cares: a call through reef wakes it three times more than a call straight to the model (the client's
request, the upstream's answer, the ledger sync's completion). Where an idle CPU sleeps in a deep state, or where a
virtual machine's idle vCPU halts and the host must reschedule it, each wake-up costs tens to hundreds of
microseconds, and those wake-ups, not reef's code, were most of its added latency on an idle VM (bench/RESULTS.md,
"The gateway, session 11"). Linux's CPU latency QoS (`/dev/cpu_dma_latency`) lets a process ask that no CPU take
longer than N µs to wake; at 0 the idle governors pick their polling state, as `tuned`'s latency-performance profile
does for latency-sensitive servers.

The request is the open file: it holds while the gateway runs and the kernel drops it when the file is closed,
including after a crash or a kill -9, so nothing outlives the process. It is opt-in because it costs CPU time on
every idle core of the machine (a VM's host sees its vCPUs busy), which a gateway beside a developer's agents all
day should not spend unasked. A machine that cannot grant it (not Linux, no permission, no such device) still
serves; the gateway says why once and `/reef/status` shows it.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

DEVICE = "/dev/cpu_dma_latency"


@dataclass(frozen=True)
class Hold:
    """What `hold()` got: `held` True while the request stands; `why` says why not when it could not be made."""

    held: bool
    why: str | None = None
    fd: int | None = None

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass

    def status(self) -> dict:
        return {"held": self.held, "why": self.why} if not self.held else {"held": True, "us": 0}


def hold(device: str = DEVICE) -> Hold:
    """Ask that no CPU take longer than 0 µs to wake, for as long as the returned Hold is not released."""
    try:
        fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Hold(False, f"{device} does not exist (not Linux, or a kernel without CPU latency QoS)")
    except PermissionError:
        return Hold(False, f"no permission to write {device} (root, or a udev rule granting it, is needed)")
    except OSError as exc:
        return Hold(False, f"cannot open {device}: {exc.strerror}")
    try:
        if not stat.S_ISCHR(os.fstat(fd).st_mode):  # a regular file there would just get four bytes written into it
            os.close(fd)
            return Hold(False, f"{device} is not a character device; nothing asked of the kernel")
        os.write(fd, struct.pack("=i", 0))  # the kernel reads a 32-bit value in µs (or a hex string)
    except OSError as exc:
        os.close(fd)
        return Hold(False, f"cannot write {device}: {exc.strerror}")
    return Hold(True, None, fd)


def current(device: str = DEVICE) -> int | None:
    """The machine's aggregate CPU latency limit in µs as the kernel reports it (None where it cannot be read):
    0 while some process holds it at 0, 2000000000 (no limit) when none does."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISCHR(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, 4)
    except OSError:
        return None
    finally:
        os.close(fd)
    return struct.unpack("=i", data)[0] if len(data) == 4 else None
