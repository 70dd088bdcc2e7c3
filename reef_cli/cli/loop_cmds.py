"""Loop 0 commands, called after every agent session: `reef run` and `reef report`. Keep their imports lean."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .context import Env, emit_json


def run(
    ctx: typer.Context,
    cmd: List[str] = typer.Argument(..., metavar="-- CMD [ARGS]...", help="The agent command to run."),
    observe_only: bool = typer.Option(False, "--observe-only", help="Record the run, but never let it originate a proposal."),
    adapter: Optional[str] = typer.Option(None, "--adapter", help="Name of the agent adapter (for records and observe-only rules)."),
    store_content: Optional[bool] = typer.Option(None, "--store-content/--digest-only", help="Keep the full (redacted) output text, or only digests and excerpts (default: harness.yaml ledger.store_content, else digests)."),
) -> None:
    """Run CMD under the current release and record a receipt; exits with CMD's status."""
    from .entry import record_run

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
    from ..errors import InvalidInput
    from ..reports import load_feedback_json, report as do_report
    from ..sessions import PendingReceipts, shell_key

    env: Env = ctx.obj
    if feedback is not None and feedback_json is not None:
        raise InvalidInput("--feedback and --feedback-json are mutually exclusive")
    store = env.paths()
    fb = feedback
    if feedback_json is not None:
        fb = load_feedback_json(feedback_json if str(feedback_json) == "-" or feedback_json.is_absolute() else env.cwd / feedback_json)
    pending = PendingReceipts(store.dir, shell_key(env.environ))
    receipts = list(receipt or pending.peek())
    record = do_report(store, score, feedback=fb, receipts=receipts, record_id=record_id)
    if not receipt:
        pending.clear(receipts)
    if as_json:
        emit_json(record.to_json())
    else:
        print(f"reported {record.payload['score']:g} on {len(receipts)} receipt(s): {record.record_id}")


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_interspersed_args": False})(run)
    app.command("report")(report)
