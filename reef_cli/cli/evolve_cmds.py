"""`reef harness reflect|evolve|promote|reject|demote|proposals|patterns` and `reef demo`: thin shells over
reef_cli.evolve and reef_cli.demo."""

from __future__ import annotations

import contextlib
import sys
from datetime import datetime, timezone
from typing import Optional

import typer

from ..printable import printable
from .context import Env, cell, console, emit_json, note
from .gate_cmds import EXECUTOR, RAY_ADDRESS

JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")
BACKEND = typer.Option(None, "--backend", help="Reflector backend: builtin (offline) or llm (default: harness.yaml).")
MODEL_URL = typer.Option(None, "--model-url", help="OpenAI-compatible base URL for the llm backend (e.g. http://127.0.0.1:8000/v1).")
MODEL = typer.Option(None, "--model", help="Model name for the llm backend.")


def _now(env: Env) -> datetime | None:
    """REEF_NOW (ISO 8601) pins the clock, for expiry tests and replays."""
    raw = env.environ.get("REEF_NOW")
    if not raw:
        return None
    from ..errors import InvalidInput

    try:
        ts = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"REEF_NOW={raw!r}: not an ISO 8601 time") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


@contextlib.contextmanager
def _progress(enabled: bool):
    """A rich status line on a terminal (stderr), silent elsewhere; yields the progress callback."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console

    with Console(stderr=True).status("reef: reflecting…") as status:
        def update(event: dict) -> None:
            kind = event.get("event")
            if kind == "reflect":
                status.update(f"reef: reflecting… {event['records']} records")
            elif kind == "plan":
                status.update(f"reef: gating… up to {event.get('max_episodes', event.get('full_tally', '?'))} episodes")
            elif kind == "episode":
                status.update(f"reef: gating… {event['done']} episodes ({event['task_id']})")
            elif kind == "stage":
                status.update(f"reef: gating… {event.get('stage')}")
        yield update


def _options(ctx, *, dry_run=False, review=False, backend=None, model_url=None, model=None, progress=None,
             attribute=3):
    from ..evolve import Options

    from .context import note

    env: Env = ctx.obj
    return Options(dry_run=dry_run, review=review, backend=backend, model_url=model_url, model=model, now=_now(env),
                   environ=dict(env.environ), progress=progress, attribute=attribute, warn=note)


def _render(out, title: str) -> None:
    for w in out.warnings:
        note(f"warning: {w}")
    lines = out.diff if out.status in ("dry-run", "review") else [*(_op_line(o) for o in out.ops)] + \
        [ln for ln in out.diff if ln.startswith(("!", "x"))]
    if lines:
        print(f"{title}:")
        for line in lines:
            print(f"  {printable(line)}")
    if out.admission:
        a = out.admission
        print(f"admission: {len(a['admitted'])} new bullet(s) paid their way, {len(a['dropped'])} did not"
              + (f", {len(a['deferred'])} wait for the next evolve" if a["deferred"] else ""))
    if out.verdict:
        v = out.verdict
        print(f"gate: {v.get('decision')} ({v.get('reason', '')}; {v.get('episodes_spent', 0)} episodes)")
    if out.release:
        r = out.release
        print(printable(f"Published release {r['release_id']} (step {r['step']}, {r['operation']}): {r['reason']}"))
    if out.pending and out.pending.get("status") == "pending":
        p = out.pending
        print(f"Pending proposal {p['proposal_id']} ({p.get('mode')}): promote with "
              f"'reef harness promote {p['proposal_id']}' or reject with 'reef harness reject {p['proposal_id']}'")
    for n in out.negatives:
        print(printable(f"negative evidence: {n['key']} ({n.get('origin')}: {n.get('reason')}; "
                        f"re-earn {n.get('needed')})"))


def _op_line(o: dict) -> str:
    from ..curate import Op

    return Op.from_json(o).line()


def reflect_cmd(ctx: typer.Context, as_json: bool = JSON,
                dry_run: bool = typer.Option(False, "--dry-run", help="Write nothing; with a model backend, send "
                                             "nothing and estimate the calls, tokens and cost."),
                show_prompt: bool = typer.Option(False, "--show-prompt", help="Print exactly what a model backend "
                                                 "would be sent (redacted), send nothing, write nothing."),
                backend: Optional[str] = BACKEND, model_url: Optional[str] = MODEL_URL,
                model: Optional[str] = MODEL) -> None:
    """Loop 1: fold new ledger records into pattern memory (the working tree's copy)."""
    import dataclasses

    from ..evolve import run_reflect

    store = ctx.obj.store()
    opts = _options(ctx, dry_run=dry_run or show_prompt, backend=backend, model_url=model_url, model=model)
    opts = dataclasses.replace(opts, show_prompt=show_prompt)
    with _progress(not as_json and not show_prompt) as progress:
        res = run_reflect(store, dataclasses.replace(opts, progress=progress))
    usage = res.result.usage or {}
    if show_prompt:
        prompts = res.result.prompts
        if as_json:
            emit_json(prompts)
            return
        for p in prompts:
            emit_json(p)
        if not prompts:
            print("nothing would be sent: no new record carries a signal for the model")
        return
    if as_json:
        emit_json(res.to_json())
        return
    r = res.result
    print(f"reflected {r.records_read} record(s) from seq {r.from_seq}: {r.observations} observation(s), "
          f"{len(r.created)} new pattern(s), {len(r.rejected)} rejected lesson(s)")
    for rej in r.rejected:
        print(f"  rejected: {rej.lesson.text!r}: {rej.reason}")
    print(f"{res.path}: {'updated' if res.written else 'unchanged'} ({len(r.memory.patterns)} pattern(s))")
    if usage:
        cost = "" if usage.get("cost") is None else f", ${usage['cost']:.4f}"
        print(f"model {'estimate' if usage.get('estimated') else 'usage'}: {usage['calls']} call(s), "
              f"{usage['input_tokens']} input / {usage['output_tokens']} output token(s){cost}"
              + (f"; stopped at the budget: {usage['budget_stopped']}" if usage.get("budget_stopped") else ""))


def evolve_cmd(ctx: typer.Context,
               dry_run: bool = typer.Option(False, "--dry-run", help="Show what would change; write nothing."),
               review: bool = typer.Option(False, "--review", help="Write a pending proposal instead of publishing."),
               as_json: bool = JSON, backend: Optional[str] = BACKEND, model_url: Optional[str] = MODEL_URL,
               model: Optional[str] = MODEL,
               attribute: int = typer.Option(3, "--attribute", help="Attribute up to N new bullets; only those that pay their way publish, the rest wait (0: judge them together)."),
               branch: Optional[str] = typer.Option(None, "--branch", metavar="[NAME]", help="Write the candidate as a commit on branch NAME (default reef/evolve-ID) of your Git repository, with a Markdown description; the index and working tree are not touched."),
               open_pr: bool = typer.Option(False, "--open-pr", help="With --branch: open a pull request with 'gh' if installed (else print the description)."),
               executor: Optional[str] = EXECUTOR, ray_address: Optional[str] = RAY_ADDRESS) -> None:
    """Reflect, propose bullet edits, guard, gate and publish one release (or propose it as a Git branch)."""
    from ..evolve import evolve

    store = ctx.obj.store()
    if branch is not None:
        from ..proposal_branch import check_branch_name, user_repo

        user_repo(store.project.root)  # refused outside a Git repository before anything is reflected
        if branch:
            check_branch_name(branch)
    elif open_pr:
        from ..errors import InvalidInput

        raise InvalidInput("--open-pr needs --branch: the pull request is opened from the proposal's branch")
    opts = _options(ctx, dry_run=dry_run, review=review, backend=backend, model_url=model_url, model=model,
                    attribute=attribute)
    opts.branch = branch
    if executor or ray_address:  # checked before any work; the gate reads it as it reads $REEF_EXECUTOR
        from ..executors import ENV_EXECUTOR, ENV_RAY_ADDRESS, ExecutorSpec

        spec = ExecutorSpec.of(executor, ray_address, opts.environ)
        opts.environ[ENV_EXECUTOR] = spec.kind
        if spec.ray_address:
            opts.environ[ENV_RAY_ADDRESS] = spec.ray_address
    with _progress(not as_json) as progress:
        opts.progress = progress
        out = evolve(store, opts)
    if out.branch and open_pr:
        from ..proposal_branch import BranchResult, open_pr as do_open

        b = out.branch
        url = do_open(store.project.root, BranchResult(b["branch"], b["commit_id"], b["description"]),
                      b["title"], b["body"])
        out.branch = {**b, "pr_url": url}
    if as_json:
        emit_json(out.to_json())
        return
    if out.branch:
        b = out.branch
        print(f"Proposed on branch {b['branch']} ({b['commit_id'][:12]}); your index and working tree are untouched")
        if b.get("pr_url"):
            print(f"Pull request: {b['pr_url']}")
        else:
            print(b["description"])
        print(f"After merging it: reef publish --from-git <merged branch>")
        return
    if out.resumed:
        note(f"resumed interrupted evolve {out.evolve_id}")
    if out.status in ("nothing", "dry-run") and not out.diff:
        print("nothing to evolve: no pattern reached a new tier" + (" (dry run)" if out.status == "dry-run" else ""))
        return
    _render(out, {"dry-run": "would change", "review": "proposed"}.get(out.status, "bullet operations"))


def promote_cmd(ctx: typer.Context, ref: str = typer.Argument(..., metavar="PROPOSAL|KEY"), as_json: bool = JSON) -> None:
    """Publish a pending proposal, one key of it, or move a pattern one surface up (a human decision)."""
    from ..evolve import promote

    out = promote(ctx.obj.store(), ref, _options(ctx))
    if as_json:
        emit_json(out.to_json())
        return
    _render(out, "promoted")
    if out.status == "nothing":
        print("nothing changed: the head already has these bullets")


def reject_cmd(ctx: typer.Context, ref: str = typer.Argument(..., metavar="PROPOSAL"),
               reason: str = typer.Option("", "--reason", "-m", help="Why (kept with the negative evidence)."),
               as_json: bool = JSON) -> None:
    """Reject a pending proposal: its keys become negative evidence until re-earned."""
    from ..evolve import reject

    out = reject(ctx.obj.store(), ref, reason)
    if as_json:
        emit_json(out.to_json())
        return
    print(f"rejected {out.pending['proposal_id']}")
    _render(out, "rejected")


def demote_cmd(ctx: typer.Context, ref: str = typer.Argument(..., metavar="KEY"),
               reason: str = typer.Option("", "--reason", "-m", help="Why (kept with the negative evidence)."),
               as_json: bool = JSON) -> None:
    """Remove a learned bullet or pattern everywhere and record negative evidence."""
    from ..evolve import demote

    out = demote(ctx.obj.store(), ref, reason, _options(ctx))
    if as_json:
        emit_json(out.to_json())
        return
    if out.status == "nothing" and not out.ops:
        print(f"{ref} is already demoted: no bullet to remove")
        return
    _render(out, "demoted")


def proposals_cmd(ctx: typer.Context, status: Optional[str] = typer.Option(None, "--status", help="pending, promoted, rejected or superseded."),
                  as_json: bool = JSON) -> None:
    """List proposals waiting for (or decided by) a human."""
    from ..evolve import list_proposals

    props = [{k: v for k, v in p.items() if k != "memory"} for p in list_proposals(ctx.obj.store(), status)]
    if as_json:
        emit_json(props)
        return
    if not props:
        print("no proposals")
        return
    for p in props:
        print(printable(f"{p['proposal_id']}  {p['status']:10} {p.get('mode', '')}  {p['created_at'][:19]}  "
                        f"{', '.join(p['keys'])}"))
        for line in p.get("diff", []):
            print(f"    {printable(line)}")


def patterns_cmd(ctx: typer.Context, as_json: bool = JSON) -> None:
    """List pattern memory (working tree copy, else the head release's)."""
    from ..evolve import load_memory

    store = ctx.obj.store()
    head = store.require_head()
    config = store.config_of(head)
    memory = load_memory(store, config, store.files_of(head))
    rows = [memory.patterns[k].to_json() for k in sorted(memory.patterns)]
    if as_json:
        emit_json({"through_seq": memory.through_seq, "patterns": rows})
        return
    from rich.table import Table

    table = Table(title=f"pattern memory (through seq {memory.through_seq})")
    for col in ("id", "key", "count", "last seen", "state", "text"):
        table.add_column(col, overflow="fold")
    for r in rows:
        state = "suppressed" if r["suppressed"] else ("observe-only" if r["count"] == r["observe_only"] else "")
        table.add_row(cell(r["id"]), cell(r["key"]), str(r["count"]), cell(r["last_seen"][:10]), state,
                      cell(r["text"]))
    console().print(table)


def demo_cmd(ctx: typer.Context, as_json: bool = JSON,
             agent: Optional[str] = typer.Option(None, "--agent", help="Run this agent command instead of the bundled example (a shell command; {prompt} is replaced)."),
             suite: Optional[str] = typer.Option(None, "--suite", help="A directory of task YAML files (canary and train splits) instead of the bundled suite."),
             keep: bool = typer.Option(False, "--keep", help="Keep the temporary project and print its path.")) -> None:
    """The main job on embedded defaults: a temporary project, sessions with feedback, evolve, a better harness."""
    from pathlib import Path

    from ..demo import load_suite_dir, run_demo

    env: Env = ctx.obj
    emit = None if as_json else print
    files = load_suite_dir(env.cwd / Path(suite)) if suite else None
    summary = run_demo(agent=agent, keep=keep, environ=dict(env.environ), echo=emit, suite=files)
    if as_json:
        emit_json(summary)


def register(harness_app: typer.Typer) -> None:
    harness_app.command("reflect")(reflect_cmd)
    harness_app.command("evolve")(evolve_cmd)
    harness_app.command("promote")(promote_cmd)
    harness_app.command("reject")(reject_cmd)
    harness_app.command("demote")(demote_cmd)
    harness_app.command("proposals")(proposals_cmd)
    harness_app.command("patterns")(patterns_cmd)


def register_root(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
