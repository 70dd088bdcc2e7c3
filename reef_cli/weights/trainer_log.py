"""The trainer's output on its way into `trainer.log`, redacted: reef never stores a secret, and trainers print
theirs (a W&B or Hugging Face key echoed at start-up, the arguments they were given, a config dump).

The output is read from a pipe by a thread and written in blocks, each redacted as a whole, so a secret is seen
whole when it arrives in one burst (a PEM key printed line by line comes in microseconds):
- when the output pauses (`PAUSE_S` with nothing new), everything pending is written;
- while it keeps coming, the lines that end at least `WINDOW` characters before the end of what is pending are
  written, once redacting them alone gives what redacting them with all that follows gives, colour codes aside (a
  secret found anywhere makes the redactor drop them all): no secret spans the cut. Pending text with no such cut
  is kept until `MAX_PENDING`, then written as redacted with all its context.
The log is text (UTF-8, undecodable bytes replaced); it lags the trainer by at most a pause or a few kilobytes.
"""

from __future__ import annotations

import codecs
import os
import re
import select
import threading
from typing import BinaryIO

PAUSE_S = 0.25
MAX_PENDING = 1 << 20
_TRIES = 3  # line boundaries tried, newest first, before waiting for more output
_COLOUR = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class RedactedLog:
    """`start()` a thread copying the pipe `fd` into `log`, redacted; `close()` after the trainer has exited."""

    def __init__(self, fd: int, log: BinaryIO):
        self._fd, self._log = fd, log
        self._pending = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reef-trainer-log", daemon=True)

    def start(self) -> "RedactedLog":
        self._thread.start()
        return self

    def close(self, wait_s: float = 5.0) -> None:
        """Wait for the end of the output (a process the trainer left behind may hold the pipe open: then stop after
        `wait_s`), write what is pending, close the pipe."""
        self._thread.join(wait_s)
        self._stop.set()
        self._thread.join()
        os.close(self._fd)

    def _run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while True:
                ready, _, _ = select.select([self._fd], [], [], PAUSE_S)
                if not ready:
                    self._write_all()
                    if self._stop.is_set():
                        break
                    continue
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    break
                self._pending += decoder.decode(chunk)
                self._write_settled()
        finally:
            self._pending += decoder.decode(b"", final=True)
            self._write_all()

    def _write_all(self) -> None:
        from ..redact import redact

        if self._pending:
            text, self._pending = self._pending, ""
            self._log.write(redact(text)[0].encode("utf-8"))

    def _write_settled(self) -> None:
        from ..redact import WINDOW, redact

        text = self._pending
        if len(text) < 2 * WINDOW:
            return
        whole = redact(text)[0]
        end = len(text) - WINDOW
        for _ in range(_TRIES):
            cut = max(text.rfind("\n", 0, end), text.rfind("\r", 0, end)) + 1
            if cut <= 0:
                break
            head = redact(text[:cut])[0]
            if _COLOUR.sub("", whole) == _COLOUR.sub("", head + redact(text[cut:])[0]):
                self._log.write(head.encode("utf-8"))
                self._pending = text[cut:]
                return
            end = cut - 1
        if len(text) >= MAX_PENDING:  # no clean cut in a megabyte: what is there, redacted with all its context
            self._write_all()
