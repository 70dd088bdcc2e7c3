"""`reef demo`: the main job on embedded defaults, offline — a harness that gets better from feedback, gated.

What it does, in a temporary directory:

1. A project from the `claude` template plus the bundled canary suite and the bundled example agent
   (`python -m reef_cli.example_agent -p PROMPT`, which reads the harness at `$REEF_HARNESS_DIR` and does better
   when it holds the right rules); release 1 is that harness, unchanged.
2. The canary score of release 1 (`baseline_score`): every canary task, `repeats` times, on release 1.
3. Sessions: the agent runs each *train* task of the suite (never a canary task: those stay held out) through
   `reef run`'s recorder; the task's check scores it, and a failed session is reported the way a user would —
   the score and, as feedback, the task's `description` (the rule it needed). Each round is followed by
   `reef harness evolve`: reflect, propose, guard, the canary gate, publish.
4. The canary score of the final release (`final_score`), the release log with the gate's verdict on each, and
   the per-bullet diff between release 1 and the final release.

`--agent CMD` runs the same loop with a real agent command (split like a shell would; `{prompt}` is replaced by
the task's prompt, or the prompt goes to stdin when CMD has no `{prompt}`).

Decisions: default tiers and budgets (the demo shows the real ladder: 3 observations reach the notes file, 5 the
CLAUDE.md block), `gate.repeats: 2` to stay well under 30 s on two cores, two sessions per train task per round,
three rounds. The temporary project is removed unless `--keep`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from .errors import InvalidInput

ROUNDS = 3
SESSIONS_PER_ROUND = 2
REPEATS = 2
EXAMPLE_AGENT = ("{python}", "-m", "reef_cli.example_agent", "-p", "{prompt}")


def bundled_suite() -> dict[str, str]:
    """The starter canary suite that ships with reef: {relative path under canary/: YAML text}."""
    from .example_agent import suite_files

    return dict(suite_files())


def load_suite_dir(path: Path) -> dict[str, str]:
    """`--suite DIR`: every *.yaml under DIR, by relative path."""
    if not path.is_dir():
        raise InvalidInput(f"--suite {path}: not a directory")
    files = {str(p.relative_to(path)).replace("/", "-"): p.read_text(encoding="utf-8")
             for p in sorted(path.rglob("*.yaml"))}
    if not files:
        raise InvalidInput(f"--suite {path}: no *.yaml task files")
    return files


def _yaml_list(items) -> str:
    import json

    return "[" + ", ".join(json.dumps(x) for x in items) + "]"


def _configure(root: Path, agent: tuple[str, ...], suite: dict[str, str]) -> None:
    from .bootstrap import template_files
    from .harness_files import write_files

    files = template_files("claude")
    write_files(root, files)
    for rel, text in suite.items():
        target = root / "canary" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    cfg = root / "harness.yaml"
    text = cfg.read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("agent:")]
    text = "\n".join(lines).replace("  evaluators: [evaluators/**]", f"  evaluators: [evaluators/**]\n  repeats: {REPEATS}")
    cfg.write_text(text.rstrip("\n") + f"\nagent: {_yaml_list(agent)}\n")


def canary_score(store, release, *, environ: dict, workers: int | None = None) -> tuple[float, dict[str, float]]:
    """Mean canary score of one release: every canary task, `gate.repeats` times (no ledger records)."""
    from .episodes import EpisodeRequest, EpisodeRunner
    from .tasks import load_suite

    files = store.files_of(release)
    config = store.config_of(release)
    canary = load_suite(files, config.gate.tasks).canary
    if not canary:
        raise InvalidInput("the demo harness has no canary tasks")
    tree = store.materialise(release)
    runner = EpisodeRunner(config.agent, suite_dir=tree, seed=config.gate.seed, workers=workers, environ=environ)
    reqs = [EpisodeRequest(t, "current", r, tree, release.content_id) for r in range(config.gate.repeats)
            for t in canary]
    got = runner.run_many(reqs)
    per_task: dict[str, list[float]] = {}
    for q in reqs:
        per_task.setdefault(q.task.id, []).append(got[q.key].score)
    means = {tid: sum(v) / len(v) for tid, v in per_task.items()}
    return sum(means.values()) / len(means), means


def _session(store, task, agent: tuple[str, ...], environ: dict, round_no: int) -> dict:
    """One recorded run of a train task, checked, and reported like a user would."""
    from .episodes import agent_argv, parse_score, run_command
    from .reports import report
    from .runs import run_recorded
    from .harness_files import write_files
    from .gitstore import Entry

    work = Path(tempfile.mkdtemp(prefix="reef-demo-session-"))
    try:
        if task.setup is not None and task.setup.files:
            write_files(work, {p: Entry(t.encode("utf-8")) for p, t in task.setup.files})
        argv, prompt_in_argv = agent_argv(agent, task.prompt)
        if not prompt_in_argv:
            argv = ["/bin/sh", "-c", 'printf "%s" "$REEF_DEMO_PROMPT" | "$@"', "reef-demo", *argv]
        env = {**environ, "REEF_DEMO_PROMPT": task.prompt, "REEF_TASK_ID": "", "REEF_WORK_DIR": str(work)}
        res = run_recorded(store, argv, env=env, adapter="demo", cwd=work, stdout_fd=None, stderr_fd=None,
                           capture=True)
        if res.stop_signal is not None:  # asked to stop once the agent was gone: its run is kept, the demo ends
            from .errors import Stopped

            raise Stopped.after_run(res.stop_signal, res.record.record_id)
        out = work.parent / f"{work.name}.check.out"
        err = work.parent / f"{work.name}.check.err"
        ck = run_command(task.check, cwd=work, env={**environ, "REEF_AGENT_EXIT": str(res.exit_code)},
                         timeout=task.timeout, stdout=out, stderr=err)
        score, _ = parse_score(out.read_text(errors="replace") if out.exists() else "", ck.exit)
        for p in (out, err):
            p.unlink(missing_ok=True)
        fb = None
        if score < 1.0 and task.description:
            fb = task.description
        rep = report(store, score, feedback=fb, receipts=[res.record.record_id])
        return {"task": task.id, "round": round_no, "receipt": res.record.record_id, "report": rep.record_id,
                "score": score, "feedback": fb}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_demo(*, agent: str | None = None, keep: bool = False, environ: dict | None = None,
             echo: Callable[[str], None] | None = None, suite: dict[str, str] | None = None,
             rounds: int = ROUNDS, sessions: int = SESSIONS_PER_ROUND) -> dict:
    from .bootstrap import init_project
    from .evolve import Options, evolve
    from .store import HarnessStore
    from .tasks import load_suite

    say = echo or (lambda _m: None)
    environ = dict(os.environ if environ is None else environ)
    agent_argv = tuple(shlex.split(agent)) if agent else EXAMPLE_AGENT
    if not agent_argv:
        raise InvalidInput("--agent: empty command")
    suite = suite if suite is not None else bundled_suite()
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="reef-demo-"))
    try:
        _configure(root, agent_argv, suite)
        init = init_project(root)
        store = HarnessStore(init.project, init.scenario)
        first = store.require_head()
        files = store.files_of(first)
        tasks = load_suite(files, store.config_of(first).gate.tasks)
        train = list(tasks.train)
        if not train:
            raise InvalidInput("the demo suite has no train tasks to run sessions on")
        say(f"reef demo: project {root} (release 1: {first.release_id})")
        say(f"  agent: {' '.join(a.replace('{python}', 'python') for a in agent_argv)}")
        baseline, base_tasks = canary_score(store, first, environ=environ)
        say(f"  canary score of release 1: {baseline:.2f} over {len(base_tasks)} held-out task(s)")
        sessions_log, evolves = [], []
        for round_no in range(1, rounds + 1):
            for task in train:
                for _ in range(sessions):
                    sessions_log.append(_session(store, task, agent_argv, environ, round_no))
            failed = sum(1 for s in sessions_log if s["round"] == round_no and s["score"] < 1.0)
            out = evolve(store, Options(environ=environ))
            evolves.append({"round": round_no, **out.to_json()})
            verdict = out.verdict or {}
            rel = out.release
            say(f"  round {round_no}: {len(train) * sessions} session(s), {failed} reported as failed; evolve: "
                f"{out.status}" + (f" (gate: {verdict.get('decision')}, {verdict.get('reason', '')})" if verdict else
                                   " (not gated)" if out.ops else "") +
                (f" -> release step {rel['step']}" if rel else ""))
            for line in (out.diff or []):
                say(f"      {line}")
        final = store.require_head()
        final_score, final_tasks = canary_score(store, final, environ=environ)
        releases = [_release_row(r) for r in store.releases()]
        diff = _bullet_diff(store, first, final)
        say(f"  canary score of the final release (step {final.step}): {final_score:.2f} (was {baseline:.2f})")
        say("  releases:")
        for r in releases:
            say(f"    step {r['step']:>2} {r['operation']:8} gate: {r['gate']:10} {r['reason']}")
        say("  per-bullet diff, release 1 -> final:")
        for line in diff or ["(no bullets changed)"]:
            say(f"    {line}")
        summary = {
            "project": str(root) if keep else None,
            "agent": list(agent_argv),
            "baseline_score": round(baseline, 6),
            "final_score": round(final_score, 6),
            "baseline_per_task": base_tasks,
            "final_per_task": final_tasks,
            "improved": final_score > baseline,
            "releases": releases,
            "diff": diff,
            "sessions": sessions_log,
            "evolves": evolves,
            "seconds": round(time.monotonic() - started, 2),
        }
        say(f"  done in {summary['seconds']:.1f} s" + (f"; project kept at {root}" if keep else ""))
        return summary
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _release_row(r) -> dict:
    gate = r.meta.get("gate") or {}
    if gate:
        verdict = gate.get("decision", "")
    elif r.operation == "evolve" and r.meta.get("bullets"):
        verdict = "not gated"
    else:
        verdict = "-"
    return {"step": r.step, "release_id": r.release_id, "operation": r.operation, "reason": r.reason,
            "gate": verdict, "gate_reason": gate.get("reason"), "evidence": list(r.evidence),
            "content_id": r.content_id}


def _bullet_diff(store, a, b) -> list[str]:
    """Bullets added/removed/changed between two releases, per surface file (ids make it exact)."""
    from .curate import Surfaces

    config = store.config_of(b)
    before, after = Surfaces(store.files_of(a), config), Surfaces(store.files_of(b), config)
    out = []
    for bid in sorted(set(before.by_id) | set(after.by_id)):
        old = {w.path: w.text for w in before.by_id.get(bid, [])}
        new = {w.path: w.text for w in after.by_id.get(bid, [])}
        for path in sorted(set(old) | set(new)):
            if path not in old:
                out.append(f"+ [{path}] reef:{bid}  {new[path]}")
            elif path not in new:
                out.append(f"- [{path}] reef:{bid}  {old[path]}")
            elif old[path] != new[path]:
                out.append(f"~ [{path}] reef:{bid}  {old[path]!r} -> {new[path]!r}")
    return out
