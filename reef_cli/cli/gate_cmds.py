"""`reef eval` and `reef ci`: thin shells over reef_cli.gate and reef_cli.ci (which writes the CI job's Markdown
summary and JUnit XML)."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Optional

import typer

from ..ci import delta as _delta, fmt as _fmt
from .context import Env, emit_json, note

JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")
WORKERS = typer.Option(None, "--workers", "-j", min=1, help="Episodes run in parallel (default: number of cores).")
POLICY = typer.Option(None, "--policy", help="sequential (default: adaptive, sequential test), paired (fixed "
                      "passes, bootstrap bound), tally (wins - losses > margin), floor or always.")
MAX_EPISODES = typer.Option(None, "--max-episodes", min=0, help="Episode budget; the gate rejects if it runs out first.")
EXECUTOR = typer.Option(None, "--executor", help="Where episodes run: local (threads, default) or ray (reef[ray]; "
                        "env REEF_EXECUTOR).")
RAY_ADDRESS = typer.Option(None, "--ray-address", help="Ray cluster to join with --executor ray (default: start a "
                           "local one; env REEF_RAY_ADDRESS).")
ALLOW_SECRET = typer.Option(False, "--allow-secret", help="Judge the working tree even when a changed file holds what "
                            "looks like a secret (by default that is refused, as publish refuses it; records keep "
                            "its text redacted).")
REPEATS = typer.Option(None, "--repeats", "-k", min=1, help="Repeats per task and side (default: harness.yaml gate.repeats).")


def _executor(kind, ray_address, env):
    """The executor the flags ask for (checked before any work), or None: the gate then takes $REEF_EXECUTOR or
    the baseline's harness.yaml gate.executor."""
    from ..executors import ExecutorSpec

    spec = ExecutorSpec.of(kind, ray_address, env.environ)
    return spec if kind or ray_address else None


@contextlib.contextmanager
def _interruptible():
    """SIGTERM behaves like Ctrl-C, so the runner kills every episode's process group on the way out."""
    def handler(_sig, _frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (tests calling in a thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _progress(enabled: bool):
    """Prints the estimate before and "episodes spent, decision" after; a rich progress bar on a terminal."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True, highlight=False)
    bar = Progress(TextColumn("reef gate"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                   TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal)
    state: dict = {}

    def update(event: dict) -> None:
        kind = event.get("event")
        if kind == "plan":
            resumed = f"; resuming a run with {event['resumable']} finished episode(s)" if event.get("resumable") else ""
            cap = f", budget {event['budget']}" if event.get("budget") is not None else ""
            note(f"gate: policy {event['policy']}, {event['tasks']} canary task(s) x {event['repeats']} repeat(s); "
                 f"expect {event['min']}-{event['max']} episodes (full paired tally: {event['full_tally']}{cap}){resumed}")
            state["task"] = bar.add_task("", total=event["max"] or None)
        elif kind == "episode" and "task" in state:
            bar.update(state["task"], advance=1, description=f"{event['task_id']} [{event['side']}]")
        elif kind == "stage" and "task" in state:
            bar.update(state["task"], description=str(event.get("stage")))

    with bar:
        yield update


def _check_policy(policy: str | None) -> None:
    """An unknown --policy is an error before anything runs, even when there is nothing to evaluate."""
    if policy is not None:
        from ..gate_policies import GateSettings

        GateSettings(policy=policy)


def _render(verdict, label: str) -> None:
    from rich.table import Table

    from ..printable import printable
    from .context import console

    table = Table(title=f"canary gate: {label} vs baseline", show_lines=False)
    for col in ("task", "current", "candidate", "delta", "status"):
        table.add_column(col, justify="right" if col in ("current", "candidate", "delta") else "left")
    for t in verdict.per_task:
        name = t.task_id + (" (sentinel)" if t.sentinel else "")
        table.add_row(name, _fmt(t.current), _fmt(t.candidate), _delta(t.delta), t.status)
    out = console()
    out.print(table)
    if verdict.interval is not None:
        lo, hi, level = verdict.interval
        print(f"interval: mean paired improvement in [{lo:+.3f}, {hi:+.3f}] ({level:.0%} one-sided bounds, "
              "bootstrap over tasks)")
    if verdict.tally:
        t = verdict.tally
        print(f"tally: {t['wins']} wins, {t['losses']} losses, {t['ties']} ties (margin {t['margin']})")
    for bid, u in verdict.bullet_utility.items():
        print(f"bullet {bid}: utility {_delta(u)} (candidate minus candidate-without-it)")
    for e in verdict.errors[:5]:  # may quote a check's output
        print(printable(f"episode error: {e}"))
    print(f"episodes spent: {verdict.episodes_spent} of up to {verdict.episodes_budget}"
          + (f" (+{verdict.attribution_episodes} for attribution)" if verdict.attribution_episodes else "")
          + f"; decision: {verdict.decision} ({verdict.policy}, stage {verdict.stage}) - {verdict.reason}")
    if verdict.record_id:
        print(f"gate record: {verdict.record_id}")


def eval_cmd(
    ctx: typer.Context,
    candidate: Optional[str] = typer.Option(None, "--candidate", help="Evaluate this release (id, prefix or step)."),
    working_tree: bool = typer.Option(False, "--working-tree", help="Evaluate the harness in the working tree (default)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Compare against this release (default: the head)."),
    policy: Optional[str] = POLICY,
    workers: Optional[int] = WORKERS,
    max_episodes: Optional[int] = MAX_EPISODES,
    repeats: Optional[int] = REPEATS,
    attribute: bool = typer.Option(False, "--attribute", help="Leave-one-out utility of each bullet the candidate adds."),
    explain: bool = typer.Option(False, "--explain", help="Per task: the paired differences, the running bound and "
                                 "why sampling stopped (JSON: `trace`)."),
    as_json: bool = JSON,
    executor: Optional[str] = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
    allow_secret: bool = ALLOW_SECRET,
) -> None:
    """Run the canary gate on a candidate harness without publishing: exit 0 if it would publish, 1 if not, 4 if the
    working tree holds what publish refuses as a secret (nothing runs; --allow-secret judges it anyway)."""
    from ..errors import NotFound, UsageError
    from ..gate import gate_candidate
    from ..harness_diff import ablations, frozen_changes

    env: Env = ctx.obj
    _executor(executor, ray_address, env)  # a bad --executor fails before any work
    if candidate and working_tree:
        raise UsageError("--candidate and --working-tree are mutually exclusive")
    _check_policy(policy)
    store = env.store()
    base = store.find(baseline) if baseline else store.require_head()
    base_files = store.files_of(base)
    if candidate:
        rel = store.find(candidate)
        files, label = store.files_of(rel), f"release {rel.step}"
    else:
        files, label = store.worktree_files(), "working tree"
    if files == base_files:
        msg = f"nothing to evaluate: the {label} is identical to release {base.step} ({base.release_id})"
        emit_json({"decision": None, "reason": msg}) if as_json else print(msg)
        return
    if not candidate and not allow_secret:  # what publish would read: the working tree's changes since the head
        from ..errors import PolicyError
        from ..harness_secrets import changed, find, gate_refusal

        head_files = base_files if baseline is None else store.files_of(store.require_head())
        if refusal := gate_refusal(find(files, changed(head_files, files))):
            raise PolicyError(refusal)
    from ..stick_links import refuse_stick_links

    refuse_stick_links(files, (store.config_of(base),), root=None if candidate else store.project.root,
                       done="nothing was run")
    for v in frozen_changes(store.project.root, store.config_of(base), base_files, files):
        note(f"warning: the {label} changes {v.path} ({v.reason}); the gate judges with release {base.step}'s tasks, "
             "evaluators and settings")
    with _interruptible(), _progress(not as_json) as progress:
        verdict = gate_candidate(store, files, ledger=store.ledger(), baseline=base, workers=workers, policy=policy,
                                 max_episodes=max_episodes, repeats=repeats, progress=progress, environ=env.environ,
                                 attribute=ablations(base_files, files) if attribute else None,
                                 executor=_executor(executor, ray_address, env))
    if verdict is None:
        raise NotFound(f"release {base.step} has no canary tasks (harness.yaml gate.tasks); add some under canary/ "
                       "and publish them first")
    if as_json:
        emit_json({**verdict.to_json(), "candidate": label, "baseline_step": base.step})
    else:
        _render(verdict, label)
        if explain:
            from ..adaptive import explain as explain_lines

            print("\n".join(explain_lines(verdict.trace)))
    raise typer.Exit(0 if verdict.published else 1)


# ------------------------------------------------------------------------------------------------ reef ci


def ci(
    ctx: typer.Context,
    as_json: bool = JSON,
    summary: Optional[Path] = typer.Option(None, "--summary", help="Write a Markdown summary (for the CI job page)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML (one test case per canary task)."),
    base: Optional[Path] = typer.Option(None, "--base", help="A checkout of the base branch: gate against its harness "
                                        "instead of the published head (no .reef/ needed)."),
    policy: Optional[str] = POLICY,
    workers: Optional[int] = WORKERS,
    max_episodes: Optional[int] = MAX_EPISODES,
    executor: Optional[str] = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
    suite_change: bool = typer.Option(False, "--suite-change", help="The change edits the measuring stick (canary "
                                      "tasks, evaluators, harness.yaml gate/zones) on purpose: judge both sides on the new suite."),
    allow_secret: bool = ALLOW_SECRET,
) -> None:
    """Gate the working tree's harness (e.g. a pull request) against the published head.

    Exit 0: pass (better, or no harness change); 1: a regression or not better; 4: the change touches the measuring
    stick (canary tasks, evaluators, harness.yaml gate/zones) without --suite-change, or a changed file holds what
    looks like a secret (publish refuses it) without --allow-secret. Edits to your own rules and instructions are
    evaluated like any harness change."""
    from ..ci import base_checkout, check_output, head_baseline, run_ci, write_output
    from ..errors import PolicyError

    env: Env = ctx.obj
    _check_policy(policy)
    spec = _executor(executor, ray_address, env)
    outputs = [(check_output(p if p.is_absolute() else env.cwd / p, opt), render)
               for p, opt, render in ((summary, "--summary", "markdown"), (junit, "--junit", "junit")) if p is not None]
    if base is None:
        store, baseline, base_files, label = head_baseline(env.store())
    else:
        store, baseline, base_files, label = base_checkout(env.cwd, env.scenario_name or env.environ.get("REEF_SCENARIO"),
                                                           base)
    with _interruptible(), _progress(not as_json) as progress:
        report = run_ci(store, baseline, base_files, label, workers=workers, policy=policy,
                        max_episodes=max_episodes, progress=progress, environ=env.environ, executor=spec,
                        suite_change=suite_change, allow_secret=allow_secret)
    for path, render in outputs:
        write_output(path, getattr(report, render)())
    if as_json:
        emit_json(report.to_json())
    elif report.verdict is not None:
        _render(report.verdict, "working tree")
    elif report.status != "blocked":  # a block is reported once, as the error line
        print(f"reef ci: {report.status}: {report.reason}")
    if not as_json:
        from ..printable import printable

        for b in report.bullets:  # a harness's text: shown escaped, never obeyed by the terminal
            print(printable(f"{'+' if b.change == 'added' else '-'} {b.path}: {b.text} "
                            f"({b.evidence_text().replace('`', '')})"))
    if report.status == "blocked":
        raise PolicyError(report.reason)
    raise typer.Exit(0 if report.status == "pass" else 1)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command("ci")(ci)
