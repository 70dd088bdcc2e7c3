"""`reef serve`: the recording gateway, in the foreground."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def serve(
    ctx: typer.Context,
    upstream: str = typer.Option(..., "--upstream", help="The provider or engine to relay to, e.g. https://api.openai.com/v1 or http://127.0.0.1:30000."),
    upstream_api: str = typer.Option("auto", "--upstream-api", help="Which protocol the upstream speaks: openai, anthropic, auto (relay both), or sglang (OpenAI routes; records token ids, logprobs and the weight version, and checks it against the release)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; a non-loopback one needs --token-file."),
    port: int = typer.Option(8900, "--port", help="Port to bind (0 picks a free one and prints it)."),
    token_file: Optional[Path] = typer.Option(None, "--token-file", help="Accepted bearer tokens, one per line (or sha256:HEX digests); several allow rotation; reread within about two seconds of a change."),
    inject: str = typer.Option("none", "--inject", help="system: prepend the current release's compiled instructions to the system prompt; none: relay bodies unchanged."),
    store_content: bool = typer.Option(False, "--store-content", help="Keep redacted request and response text in each record (default: digests only)."),
    pass_client_key: bool = typer.Option(False, "--pass-client-key", help="Relay the client's own Authorization / x-api-key upstream (reef's token then goes in x-reef-token)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds the upstream may stay silent before the call fails with 504."),
    max_body: int = typer.Option(32 * 1024 * 1024, "--max-body", help="Largest request body in bytes; larger ones get 413."),
    drain_timeout: float = typer.Option(10.0, "--drain-timeout", help="On SIGTERM, seconds to let in-flight requests finish."),
    as_json: bool = typer.Option(False, "--json", help="Log one JSON object per request instead of a text line."),
    loop: str = typer.Option("auto", "--loop", help="Event loop: auto (uvloop where installed, else asyncio), uvloop or asyncio."),
    low_latency: bool = typer.Option(False, "--low-latency", help="While serving, keep the machine's idle CPUs polling instead of sleeping (Linux CPU latency QoS, /dev/cpu_dma_latency = 0; needs root): cuts the wake-up cost each call pays, at the price of CPU time on idle cores."),
) -> None:
    """Run an OpenAI/Anthropic-compatible gateway that records every model call with a receipt."""
    from ..serve.app import ServeConfig, serve as run_gateway

    env = ctx.obj
    if upstream_api == "sglang":  # its scenario starts from the engine's weights; say that command when it is missing
        from ..serve.provenance import require_servable

        store = require_servable(env.project(), env.scenario(), upstream)
    else:
        store = env.store()
    config = ServeConfig(project=store.project, scenario=store.scenario, upstream=upstream, upstream_api=upstream_api,
                         host=host, port=port, token_file=token_file, inject=inject, store_content=store_content,
                         pass_client_key=pass_client_key, json_logs=as_json, timeout=timeout, max_body=max_body,
                         drain_timeout=drain_timeout, loop=loop, low_latency=low_latency)
    raise typer.Exit(run_gateway(config, env.environ))


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
