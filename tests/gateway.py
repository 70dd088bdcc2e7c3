"""`reef serve` in a real subprocess for tests: started on a free port, stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from conftest import reef_init, run_reef
from reef_cli.ledger import Ledger

REEF = str(Path(sys.executable).parent / "reef")


class Gateway:
    def __init__(self, project: Path, upstream: str, *args: str, env: dict | None = None):
        self.log_path = project / f".serve-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([REEF, "-C", str(project), "serve", "--upstream", upstream, "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     env={**os.environ, **(env or {})})
        line = self.banner = self.proc.stdout.readline()
        if line.startswith("{") and '"listening"' in line:  # --json
            self.url = json.loads(line)["url"]
        elif "serving " in line:
            self.url = line.split("serving ", 1)[1].split()[0]
        else:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # up but printing something else: do not leave it running
                self.proc.kill()
                self.proc.wait()
            raise RuntimeError(f"reef serve did not start (exit {self.proc.returncode}): {line}{self.log()}")
        self.project = project

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()
            self.proc.stdout.close()

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.stop()


def init_project(path: Path) -> Path:
    """A new project at `path` (`reef init`, in-process: the gateway, not init, is under test) to record into."""
    return reef_init(path)


def exchanges(project: Path) -> list:
    """The inference records in the default scenario's ledger, oldest first."""
    ledger = Ledger(project / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
    return [r for r in ledger.iter_records() if r.kind == "inference"]


@contextmanager
def in_process(gw, code: int = 0):
    """Run a `reef_cli.serve.app.Gateway` (built by the test, e.g. with hooks added or a constant patched) on its own
    thread; yields its URL; on exit stops it and asserts it stopped with `code` (0: cleanly, ledgers verified)."""
    ready, box = threading.Event(), {}

    def serve():
        async def main():
            box["stop"], box["loop"] = asyncio.Event(), asyncio.get_running_loop()
            box["code"] = await gw.run(box["stop"], on_ready=lambda url: (box.update(url=url), ready.set()))
        asyncio.run(main())

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert ready.wait(20), "the in-process gateway did not start"
        yield box["url"]
    finally:
        if "loop" in box:
            box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(20)
    assert box.get("code") == code
