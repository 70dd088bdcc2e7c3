"""The `reef serve` the weight gate sends canary traffic through, for the length of one measurement.

REEF_SERVE_URL is used when that gateway fronts this very scenario through SGLang (its `/reef/status` says so);
otherwise a `reef serve --upstream-api sglang --port 0 --json` is started on 127.0.0.1 as a child process — the same
command a user runs, so canary answers are checked against the head's load id and recorded exactly as live traffic
is — and stopped with SIGTERM afterwards (its drain and ledger verification run as usual). Its JSON request log gives
the record ids of the canary calls, which the gate lists as held out of training.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ..errors import ReefError
from .orphans import die_with_parent

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class GatewayFailed(ReefError):
    pass


class Gateway:
    def __init__(self, project, scenario: str, engine_url: str, log_path: Path, environ: dict,
                 warnings: list[str] | None = None):
        self.project, self.scenario, self.engine_url = project, scenario, engine_url.rstrip("/")
        self.log_path, self.environ = Path(log_path), dict(environ)
        self.warnings = warnings if warnings is not None else []
        self.url = ""
        self.external = False
        self.record_ids: set[str] = set()
        self.answered = 0  # model calls answered 2xx (known for a gateway of our own only)
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> "Gateway":
        given = (self.environ.get("REEF_SERVE_URL") or "").rstrip("/")
        if given:
            why = self._fronts_us(given)
            if why is None:
                self.url, self.external = given, True
                return self
            from ..redact import redact

            self.warnings.append(f"REEF_SERVE_URL {redact(given)[0]} is not used for the weight gate ({why}); started a "
                                 "gateway of its own")
        self._start()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def _fronts_us(self, url: str) -> str | None:
        """None when the gateway at `url` serves this scenario in front of SGLang, else why not."""
        try:
            with urllib.request.urlopen(url + "/reef/status", timeout=5) as resp:
                status = json.loads(resp.read())
        except (OSError, ValueError) as exc:
            return f"its /reef/status did not answer: {getattr(exc, 'reason', None) or exc}"
        if status.get("upstream_api") != "sglang":
            return f"it relays to a {status.get('upstream_api')} upstream, not SGLang"
        if status.get("default_scenario") != self.scenario:
            return f"it records scenario '{status.get('default_scenario')}', not '{self.scenario}'"
        return None

    def _start(self) -> None:
        argv = [sys.executable, "-m", "reef_cli", "-C", str(self.project.root), "-s", self.scenario, "serve",
                "--upstream", self.engine_url + "/v1", "--upstream-api", "sglang", "--host", "127.0.0.1",
                "--port", "0", "--json"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in self.environ.items() if k != "REEF_SERVE_URL"}
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                          env=env, cwd=self.project.root, start_new_session=True,
                                          preexec_fn=die_with_parent(os.getpid()))
        deadline = time.monotonic() + START_TIMEOUT_S
        buf = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._proc.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(self._proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                for line in buf.split(b"\n")[:-1]:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(event, dict) and event.get("event") == "listening":
                        self.url = str(event["url"]).rstrip("/")
                        return
            elif self._proc.poll() is not None:
                break
        self.stop()
        raise GatewayFailed(f"reef serve for the weight gate did not start within {START_TIMEOUT_S:g} s: "
                            f"{_last_line(self.log_path) or 'no output'} (log: {self.log_path})")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        ids, self.answered = _logged_calls(self.log_path)
        self.record_ids |= ids


def _logged_calls(path: Path) -> tuple[set[str], int]:
    """The record ids of the calls the gateway logged, and how many model calls it answered 2xx."""
    from ..ingest.model import json_lines

    ids, answered = set(), 0
    try:
        for event in json_lines(path):
            if isinstance(event.get("record_id"), str):
                ids.add(event["record_id"])
            status = event.get("status")
            if "/v1/" in str(event.get("path")) and isinstance(status, int) and 200 <= status < 300:
                answered += 1
    except OSError:
        pass
    return ids, answered


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""
