"""`reef eval` and `reef ci`: thin shells over reef_cli.gate, plus the CI job's Markdown summary and JUnit XML."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Optional

import typer

from .context import Env, emit_json, note

JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")
WORKERS = typer.Option(None, "--workers", "-j", min=1, help="Episodes run in parallel (default: number of cores).")
POLICY = typer.Option(None, "--policy", help="paired (default), tally (wins - losses > margin), floor or always.")
MAX_EPISODES = typer.Option(None, "--max-episodes", min=0, help="Episode budget; the gate rejects if it runs out first.")
EXECUTOR = typer.Option(None, "--executor", help="Where episodes run: local (threads, default) or ray (reef[ray]; "
                        "env REEF_EXECUTOR).")
RAY_ADDRESS = typer.Option(None, "--ray-address", help="Ray cluster to join with --executor ray (default: start a "
                           "local one; env REEF_RAY_ADDRESS).")
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
        from ..gate import GateSettings

        GateSettings(policy=policy)


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _delta(x) -> str:
    return "-" if x is None else f"{x:+.2f}"


def _render(verdict, label: str) -> None:
    from rich.table import Table

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
    for e in verdict.errors[:5]:
        print(f"episode error: {e}")
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
    as_json: bool = JSON,
    executor: Optional[str] = EXECUTOR,
    ray_address: Optional[str] = RAY_ADDRESS,
) -> None:
    """Run the canary gate on a candidate harness without publishing: exit 0 if it would publish, 1 if not."""
    from ..errors import NotFound, UsageError
    from ..gate import ablations, frozen_changes, gate_candidate

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
    raise typer.Exit(0 if verdict.published else 1)


# ------------------------------------------------------------------------------------------------ reef ci


def _ci_store(env: Env, base_dir: Path | None):
    """The store and baseline for `reef ci`: the project's head, or a base checkout (`--base DIR`), in which case a
    project without `.reef/` gets a private one (a CI workspace is thrown away after the job)."""
    from ..config import CONFIG_NAME, load_config
    from ..errors import NotFound
    from ..project import Project, find_project
    from ..store import HarnessStore, collect_files

    if base_dir is None:
        store = env.store()
        head = store.require_head()
        return store, head, store.files_of(head), f"release {head.step} ({head.release_id})"
    base_dir = base_dir if base_dir.is_absolute() else env.cwd / base_dir
    cfg = load_config(base_dir / CONFIG_NAME)
    base_files = collect_files(base_dir, tuple(cfg.include) + (CONFIG_NAME,), cfg.exclude)
    try:
        project = find_project(env.cwd)
    except NotFound:
        project = Project(env.cwd)
        project.create_state("default")
    store = HarnessStore(project, env.scenario())  # finds the project just made when there was none
    if not store.exists():
        store.create(cfg.recipe)
    return store, base_files, base_files, f"{base_dir}"


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
) -> None:
    """Gate the working tree's harness (e.g. a pull request) against the published head.

    Exit 0: pass (better, or no harness change); 1: a regression or not better; 4: a policy violation (the change
    touches a Frozen path such as a canary task, an evaluator or harness.yaml)."""
    from ..config import CONFIG_NAME, parse_config
    from ..errors import PolicyError
    from ..gate import frozen_changes, gate_candidate

    env: Env = ctx.obj
    _check_policy(policy)
    spec = _executor(executor, ray_address, env)
    store, baseline, base_files, base_label = _ci_store(env, base)
    config = parse_config(base_files[CONFIG_NAME].data, source=f"{CONFIG_NAME} ({base_label})")
    files = store.worktree_files(config)
    report = CiReport(base_label=base_label)
    violations = frozen_changes(store.project.root, config, base_files, files)
    if violations:
        report.status, report.violations = "blocked", violations
        report.reason = (f"the change touches {len(violations)} Frozen path(s) (first: {violations[0].path}: "
                         f"{violations[0].reason}); the gate cannot vouch for a change to its own tasks or rules")
    elif files == base_files:
        report.status, report.reason = "pass", "no harness changes; nothing to gate"
    else:
        with _interruptible(), _progress(not as_json) as progress:
            verdict = gate_candidate(store, files, ledger=store.ledger(), baseline=baseline, workers=workers,
                                     policy=policy, max_episodes=max_episodes, progress=progress, environ=env.environ,
                                     executor=spec)
        if verdict is None:
            report.status, report.reason = "pass", "no canary tasks (harness.yaml gate.tasks); nothing to gate"
        else:
            report.verdict = verdict
            report.status = "pass" if verdict.published else "fail"
            report.reason = verdict.reason
    if summary is not None:
        _write(summary if summary.is_absolute() else env.cwd / summary, report.markdown())
    if junit is not None:
        _write(junit if junit.is_absolute() else env.cwd / junit, report.junit())
    if as_json:
        emit_json(report.to_json())
    elif report.verdict is not None:
        _render(report.verdict, "working tree")
    elif report.status != "blocked":  # a block is reported once, as the error line
        print(f"reef ci: {report.status}: {report.reason}")
    if report.status == "blocked":
        raise PolicyError(report.reason)
    raise typer.Exit(0 if report.status == "pass" else 1)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


class CiReport:
    def __init__(self, base_label: str):
        self.base_label = base_label
        self.status = "pass"  # pass | fail | blocked
        self.reason = ""
        self.verdict = None
        self.violations: list = []

    def to_json(self) -> dict:
        return {"status": self.status, "reason": self.reason, "baseline": self.base_label,
                "violations": [v.to_json() for v in self.violations],
                "verdict": self.verdict.to_json() if self.verdict is not None else None}

    def markdown(self) -> str:
        icon = {"pass": "✅ pass", "fail": "❌ not published", "blocked": "⛔ blocked by policy"}[self.status]
        lines = [f"## reef canary gate: {icon}", "", f"**{self.reason}**", "", f"Baseline: {self.base_label}", ""]
        if self.violations:
            lines += ["| path | change | zone | why |", "|---|---|---|---|"]
            lines += [f"| `{v.path}` | {v.change} | {v.zone} | {_md(v.reason)} |" for v in self.violations]
            lines += ["", "Frozen paths (canary tasks, evaluators, harness.yaml, the human's rules) change only "
                          "through a human release (`reef publish`), never through a gated pull request.", ""]
        v = self.verdict
        if v is not None:
            lines += [f"Policy `{v.policy}`, decision **{v.decision}** at stage `{v.stage}`; "
                      f"episodes spent: {v.episodes_spent} of up to {v.episodes_budget}.", ""]
            if v.interval is not None:
                lo, hi, level = v.interval
                lines += [f"Mean paired improvement: [{lo:+.3f}, {hi:+.3f}] ({level:.0%} one-sided bootstrap bounds "
                          "over tasks; publish needs the lower bound above 0).", ""]
            lines += ["| task | current | candidate | delta | status |", "|---|---:|---:|---:|---|"]
            for t in v.per_task:
                name = f"`{t.task_id}`" + (" (sentinel)" if t.sentinel else "")
                lines.append(f"| {name} | {_fmt(t.current)} | {_fmt(t.candidate)} | {_delta(t.delta)} | {t.status} |")
            if v.errors:
                lines += ["", "<details><summary>episode errors</summary>", ""]
                lines += [f"- {_md(e)}" for e in v.errors]
                lines += ["", "</details>"]
            if v.record_id:
                lines += ["", f"Gate record: `{v.record_id}`"]
        return "\n".join(lines) + "\n"

    def junit(self) -> str:
        import xml.etree.ElementTree as ET

        suites = ET.Element("testsuites", name="reef ci")
        suite = ET.SubElement(suites, "testsuite", name="reef canary gate")
        cases = []
        decision = ET.Element("testcase", classname="reef.gate", name="decision")
        if self.status != "pass":
            ET.SubElement(decision, "failure", message=self.reason, type=self.status).text = self.reason
        cases.append(decision)
        for v in self.violations:
            case = ET.Element("testcase", classname="reef.frozen", name=v.path)
            ET.SubElement(case, "failure", message=f"{v.change}: {v.reason}", type="policy").text = v.reason
            cases.append(case)
        if self.verdict is not None:
            for t in self.verdict.per_task:
                case = ET.Element("testcase", classname="reef.canary", name=t.task_id)
                if t.status in ("regressed", "sentinel-failed"):
                    msg = f"{t.status}: current {_fmt(t.current)}, candidate {_fmt(t.candidate)}"
                    ET.SubElement(case, "failure", message=msg, type=t.status).text = msg
                elif t.status == "not-run":
                    ET.SubElement(case, "skipped", message="not run: the gate decided before reaching this task")
                ET.SubElement(case, "system-out").text = (
                    f"current {_fmt(t.current)} candidate {_fmt(t.candidate)} delta {_delta(t.delta)} "
                    f"pairs {t.pairs} status {t.status}")
                cases.append(case)
        failures = sum(1 for c in cases if c.find("failure") is not None)
        skipped = sum(1 for c in cases if c.find("skipped") is not None)
        for el in (suites, suite):
            el.set("tests", str(len(cases)))
            el.set("failures", str(failures))
        suite.set("skipped", str(skipped))
        suite.extend(cases)
        ET.indent(suites)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command("ci")(ci)
