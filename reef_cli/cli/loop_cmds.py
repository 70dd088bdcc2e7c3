"""Loop 0 commands, called after every agent session: `reef run` and `reef report`. Keep their imports lean."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def run(
    ctx: typer.Context,
    cmd: List[str] = typer.Argument(..., metavar="-- CMD [ARGS]...", help="The agent command to run."),
    observe_only: bool = typer.Option(False, "--observe-only", help="Record the run, but never let it originate a proposal."),
    adapter: Optional[str] = typer.Option(None, "--adapter", help="Name of the agent adapter (for records and observe-only rules)."),
    store_content: Optional[bool] = typer.Option(None, "--store-content/--digest-only", help="Keep the full (redacted) output text, or only digests and excerpts (default: harness.yaml ledger.store_content, else digests)."),
) -> None:
    """Run CMD under the current release and record a receipt; exits with CMD's status."""
    from .hot import record_run

    code = record_run(ctx.obj, list(cmd), observe_only=observe_only, adapter=adapter, store_content=store_content)
    raise typer.Exit(code)


def report(
    ctx: typer.Context,
    score: str = typer.Option(..., "--score", help="A finite number, e.g. 0 (bad) .. 1 (good)."),
    feedback: Optional[str] = typer.Option(None, "--feedback", help="What went wrong or right, in words."),
    feedback_json: Optional[Path] = typer.Option(None, "--feedback-json", help="A JSON object file (keys lesson, do, dont are read first); - for stdin."),
    receipt: Optional[List[str]] = typer.Option(None, "--receipt", help="Receipt(s) to report on (default: this shell's unreported runs)."),
    record_id: Optional[str] = typer.Option(None, "--id", help="Idempotency id: resending the same report is a no-op."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Attach a score and feedback to receipts."""
    from .hot import record_report

    record_report(ctx.obj, score, feedback=feedback, feedback_json=str(feedback_json) if feedback_json else None,
                  receipt=list(receipt or []), record_id=record_id, as_json=as_json)


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_interspersed_args": False})(run)
    app.command("report")(report)
