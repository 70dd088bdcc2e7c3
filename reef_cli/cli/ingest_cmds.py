"""`reef ingest`: agent session transcripts → `session` records and implicit reports (reef_cli/ingest/)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .boundary import error_line
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
    (score 1) the agent. Idempotent: a turn is ingested once. A file or source that cannot be read is named and
    the rest ingested, then exit 1; lines skipped inside a file are one warning naming it."""
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
    else:
        for warning in [] if quiet else res.warnings:
            sys.stderr.write(error_line("reef", warning, "ingest: warning"))
        for err in res.errors:
            sys.stderr.write(error_line("reef", err, "ingest"))
        if not quiet:
            print(f"ingested {res.turns} turn(s) from {res.sessions} session(s) ({res.files_read} file(s) read, "
                  f"{res.files_skipped} unchanged): {res.corrections} correction(s), {res.acceptances} acceptance(s)"
                  + (f", {res.held} unfinished turn(s) held" if res.held else "")
                  + (f", {res.unfinished} unfinished turn(s) recorded (untouched for a day)" if res.unfinished else "")
                  + (f", {res.existing_turns} turn(s) already in the ledger" if res.existing_turns else ""))
    if res.errors:  # what could be read is in the ledger; a file or source that could not be is a failure
        raise typer.Exit(1)


def bullets_cmd(ctx: typer.Context, as_json: bool = JSON) -> None:
    """List the learned bullets of the head release with their evidence count, last seen, measured utility (from
    gate ablations) and expiry; and the lessons a human rule already states (counted as evidence for it)."""
    from datetime import datetime, timezone

    from ..evolve import load_memory
    from ..bullets import learned_bullets

    store = ctx.obj.store()
    head = store.require_head()
    config = store.config_of(head)
    files = store.files_of(head)
    out = learned_bullets(load_memory(store, config, files), files, config, now=datetime.now(timezone.utc))
    if as_json:
        emit_json(out)
        return
    from rich.table import Table

    from .context import cell, console

    table = Table(title=f"learned bullets (release step {head.step})")
    for col in ("id", "where", "evidence", "last seen", "utility", "expires", "text"):
        table.add_column(col, overflow="fold")
    for b in out["bullets"]:
        util = "" if b["utility"] is None else f"{b['utility']:+.3f}"
        table.add_row(b["id"], cell(f"{b['surface']}: {b['path']}"), "" if b["evidence"] is None else str(b["evidence"]),
                      cell((b["last_seen"] or "")[:10]), util, b["expires"] or "", cell(b["text"]))
    console().print(table)
    if not out["bullets"]:
        print("no learned bullets yet")
    for c in out["covered"]:
        print(f"already a rule: {c['rule']} {c['rule_text']!r} <- {c['evidence']} observation(s) of {c['text']!r}")


def register(app: typer.Typer, harness_app: typer.Typer) -> None:
    app.command("ingest")(ingest_cmd)
    harness_app.command("bullets")(bullets_cmd)
