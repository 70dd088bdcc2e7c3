"""`reef ingest`: agent session transcripts → `session` records and implicit reports (reef_cli/ingest/)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .context import emit_json

JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")


def ingest_cmd(ctx: typer.Context,
               paths: Optional[List[Path]] = typer.Argument(None, help="Session files or folders to read (default: "
                                                            "the wrappers' config dirs and your own agent dirs)."),
               agent: Optional[str] = typer.Option(None, "--agent", help="Only this agent: claude, opencode, pi "
                                                   "or codex (default: all; sniffed per file for a PATH)."),
               since: Optional[str] = typer.Option(None, "--since", help="Only sessions active since then: an "
                                                   "ISO date/time or a duration (30m, 12h, 7d)."),
               quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing unless something failed."),
               as_json: bool = JSON) -> None:
    """Read the agents' own session stores into the ledger: one `session` record per turn (digests, redacted
    excerpts, tool calls and outcomes), and an implicit report for each follow-up that corrects (score 0) or thanks
    (score 1) the agent. Idempotent: a turn is ingested once."""
    import sys

    from ..ingest import ingest

    env = ctx.obj
    store = env.store()

    def progress(event: dict) -> None:
        if not quiet and not as_json:
            sys.stderr.write(f"reef: ingest… {event['files']} file(s), {event['turns']} turn(s)\n")

    res = ingest(store, agent=agent, paths=list(paths or []), since=since, environ=env.environ, progress=progress)
    if as_json:
        emit_json(res.to_json())
        return
    for err in res.errors:
        sys.stderr.write(f"reef: ingest: {err}\n")
    if not quiet:
        print(f"ingested {res.turns} turn(s) from {res.sessions} session(s) ({res.files_read} file(s) read, "
              f"{res.files_skipped} unchanged): {res.corrections} correction(s), {res.acceptances} acceptance(s)"
              + (f", {res.held} unfinished turn(s) held" if res.held else "")
              + (f", {res.existing} already in the ledger" if res.existing else ""))


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
