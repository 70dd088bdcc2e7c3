"""The trainer's output on its way into `trainer.log`, redacted: reef never stores a secret, and trainers print
theirs (a W&B or Hugging Face key echoed at start-up, the arguments they were given, a config dump).

The output is read from a pipe by a thread and written in blocks, each redacted as a whole, so a secret is seen
whole when it arrives in one burst (a PEM key printed line by line comes in microseconds). A block never ends
inside a line the trainer is still writing: a key printed in two writes with a pause between them (`print(..., end="")`
then the rest) is only written once its line is complete:
- when the output pauses (`PAUSE_S` with nothing new), the complete lines pending are written; the line still being
  written waits for its end (a newline, a carriage return that starts the next progress-bar update, the end of the
  output, or `MAX_PENDING`). A progress bar drawn with `\\r` therefore shows in the log one update behind;
- while it keeps coming, the lines that end at least `WINDOW` characters before the end of what is pending are
  written, once redacting them alone gives what redacting them with all that follows gives, colour codes aside (a
  secret found anywhere makes the redactor drop them all): no secret spans the cut. Pending text with no such cut
  is kept until `MAX_PENDING`, then written up to a space (or any character) at least `WINDOW` characters before its
  end where the same holds; the tail stays pending, so a `NAME=` at the cut still has its value after it.
Each block is redacted after the last `WINDOW` characters already written, as context: a value on the line after
its key (`password: |`, then the value) is found when the two lines went out in different blocks. Should that
context read differently with the block after it (a secret straddling the blocks), the block is written from the
first character that differs: some text is repeated rather than any part of a secret written unredacted twice.
The log is text (UTF-8, undecodable bytes replaced); it lags the trainer by at most a pause, a line or a few
kilobytes.
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
_TRIES = 3  # cuts tried, newest first, before waiting for more output
_COLOUR = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_SPACE = re.compile(r"[ \t\n\r]")
_LINE_END = re.compile(r"\r\n|[\r\n]")


class RedactedLog:
    """`start()` a thread copying the pipe `fd` into `log`, redacted; `close()` after the trainer has exited."""

    def __init__(self, fd: int, log: BinaryIO):
        self._fd, self._log = fd, log
        self._pending = ""
        self._context = ""  # the end of what was written, raw: what the next block is redacted after
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
        fresh = False  # output came since the last pause: a quiet trainer is not re-read every PAUSE_S
        try:
            while True:
                ready, _, _ = select.select([self._fd], [], [], PAUSE_S)
                if not ready:
                    if self._stop.is_set():
                        break
                    if fresh:
                        self._write_lines()
                        fresh = False
                    continue
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    break
                self._pending += decoder.decode(chunk)
                fresh = True
                self._write_settled()
        finally:
            self._pending += decoder.decode(b"", final=True)
            if self._pending:
                self._emit(self._pending)
                self._pending = ""

    def _write_lines(self) -> None:
        """On a pause: the complete lines, if the line still being written does not change how they read."""
        text = self._pending
        end = len(text)
        if text.endswith("\r"):  # may be the first half of a \r\n
            end -= 1
        self._cut_at(_line_ends(text, end))

    def _write_settled(self) -> None:
        from ..redact import WINDOW

        text = self._pending
        if len(text) < 2 * WINDOW:
            return
        end = len(text) - WINDOW
        if self._cut_at(_line_ends(text, end)) or len(text) < MAX_PENDING:
            return
        # no clean line end in a megabyte: a space, or failing that any character, a window before the end
        if not self._cut_at(_spaces(text, end)) and not self._cut_at([end]) and len(text) >= 2 * MAX_PENDING:
            self._emit(text)  # a secret across every cut tried, twice over: all of it, with all its context
            self._pending = ""

    def _cut_at(self, cuts) -> bool:
        """Write the pending text up to the first of `cuts` (at most `_TRIES`) that no secret spans; keep the rest.
        Each is read after the context of what was written before it."""
        from ..redact import redact

        text, context = self._pending, self._context
        whole = None
        for cut in cuts:
            head, tail = redact(context + text[:cut])[0], text[cut:]
            if tail:
                if whole is None:
                    whole = _COLOUR.sub("", redact(context + text)[0])
                if whole != _COLOUR.sub("", head + redact(tail)[0]):
                    continue
            self._write(text[:cut], head)
            self._pending = tail
            return True
        return False

    def _emit(self, raw: str) -> None:
        from ..redact import redact

        self._write(raw, redact(self._context + raw)[0])

    def _write(self, raw: str, joint: str) -> None:
        """Write `raw`, given `joint`: the context and `raw` redacted together; keep the new context."""
        from ..redact import WINDOW, redact

        context = self._context
        if context:
            before = redact(context)[0]
            if not joint.startswith(before):  # colour codes dropped, or a secret straddling the blocks
                before, joint = _COLOUR.sub("", before), _COLOUR.sub("", joint)
            joint = joint[_common_prefix(before, joint):]
        self._log.write(joint.encode("utf-8"))
        context = (context + raw)[-WINDOW:]
        line = _LINE_END.search(context) if len(context) == WINDOW else None  # from a line's start, where there is one
        self._context = context[line.end():] if line else context


def _line_ends(text: str, end: int):
    """Cuts just after a line end before `end`, newest first, at most `_TRIES`."""
    for _ in range(_TRIES):
        cut = max(text.rfind("\n", 0, end), text.rfind("\r", 0, end)) + 1
        if cut <= 0:
            return
        yield cut
        end = cut - 1


def _spaces(text: str, end: int):
    """Cuts just after white space in the `WINDOW`-odd characters before `end`, newest first, at most `_TRIES`."""
    found = 0
    for m in reversed(list(_SPACE.finditer(text, max(0, end - 4096), end))):
        yield m.end()
        found += 1
        if found == _TRIES:
            return


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # the first difference, by halves
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
