"""`reef recipes` (the catalog) and `reef train` (one weight-training step, or a skillclaw step)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from .context import Env, console, emit_json, note

JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")


def recipes(as_json: bool = JSON) -> None:
    """List the recipe catalog: each recipe's surface, engine, publish mode and reward sources."""
    from ..recipes import catalog

    items = catalog()
    if as_json:
        emit_json([r.to_json() for r in items])
        return
    from rich.table import Table

    table = Table(title="recipes")
    for col in ("recipe", "surface", "engine", "publish", "rewards", "description"):
        table.add_column(col, overflow="fold" if col == "description" else None, no_wrap=col == "recipe")
    for r in items:
        table.add_row(r.name, r.kind, r.engine, r.publish, ", ".join(r.reward.get("sources", [])) or "-",
                      r.description)
    console().print(table)


def train(
    ctx: typer.Context,
    recipe: Optional[str] = typer.Option(None, "--recipe", help="Recipe to train with (a new scenario is bound to it; default: the scenario's)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="URL of the serving SGLang engine to hot-swap (env REEF_ENGINE_URL)."),
    trainer: Optional[str] = typer.Option(None, "--trainer", help="Trainer command, split like a shell; slime's flags are appended (default: slime's train.py in REEF_SLIME_DIR)."),
    eval_cmd: Optional[str] = typer.Option(None, "--eval", help="Weight gate by a command instead of canary tasks: it scores the new weights (last stdout line a number or {\"score\": N}); they roll back if they score below the previous release's verdict (env REEF_WEIGHT_EVAL)."),
    canary_scenario: Optional[str] = typer.Option(None, "--canary-scenario", help="Harness scenario whose published canary tasks and agent judge the new weights through reef serve (default: the project's default scenario, when it has canary tasks; env REEF_CANARY_SCENARIO)."),
    no_gate: bool = typer.Option(False, "--no-gate", help="Publish the new weights without the weight gate, even when there are canary tasks (env REEF_WEIGHT_GATE=off)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be trained on and stop."),
    init: bool = typer.Option(False, "--init", help="Start a weights scenario: bind it to --recipe and publish the engine's current (base) weights as step 1, so 'reef serve --upstream-api sglang' can record for it."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Stop the trainer after S seconds (default: the recipe's)."),
    unlock: bool = typer.Option(False, "--unlock", help="Clear the lock a failed weight transfer left, after checking the engine."),
    rollback: Optional[str] = typer.Option(None, "--rollback", help="Reload an earlier weight release's checkpoint into the engine and publish it as a new release (id, prefix, step or HEAD~N)."),
    as_json: bool = JSON,
) -> None:
    """Train the serving model on recorded traffic and hot-swap it into SGLang as a new weight release (on a
    skillclaw scenario: evolve its skill pool through the gate)."""
    from ..weights.state import open_scenario, unlock as clear_lock
    from ..weights.train import TrainOptions, check_options, train as run_train

    check_options(engine_url=engine, timeout_s=timeout)  # before a scenario is created or a trainer launched
    env: Env = ctx.obj
    if init:
        from ..weights.state import init_base

        store, bound, rel = init_base(env.project(), env.scenario(), recipe, engine, environ=env.environ)
        if as_json:
            emit_json({"release_id": rel.release_id, "step": rel.step, "runtime_load_id": rel.runtime_load_id,
                       "recipe": bound.name, "base_model_path": rel.meta["base_model_path"]})
        else:
            print(f"Started weights scenario '{store.scenario}' (recipe {bound.name}): release {rel.release_id} "
                  f"(step {rel.step}) is the base model {rel.meta['base_model_path']}, runtime load id "
                  f"{rel.runtime_load_id}")
            print(f"  next: reef -s {store.scenario} serve --upstream {rel.meta['engine']}/v1 --upstream-api sglang; "
                  f"then 'reef -s {store.scenario} train --engine {rel.meta['engine']}' on its rewarded records")
        return
    store, bound = open_scenario(env.project(), env.scenario(), recipe)
    if unlock:
        info = clear_lock(store)
        if as_json:
            emit_json({"unlocked": info is not None, "lock": info})
        else:
            print(f"unlocked weight updates of scenario '{store.scenario}' ({info.get('reason')})" if info
                  else f"scenario '{store.scenario}' has no weight lock")
        return
    if rollback is not None:
        from ..weights.transfer import rollback_weights

        rel = rollback_weights(store, rollback, engine, environ=env.environ)
        if as_json:
            emit_json({"rolled_back": rel is not None, "release_id": rel.release_id if rel else None,
                       "runtime_load_id": rel.runtime_load_id if rel else None,
                       "checkpoint": rel.meta.get("checkpoint") if rel else None})
        elif rel is None:
            print("nothing to do: the head already serves that checkpoint")
        else:
            print(f"Rolled back: weight release {rel.release_id} (step {rel.step}) reloads "
                  f"{rel.meta['rollback_target_release_id']} as runtime load id {rel.runtime_load_id}")
        return
    if bound.engine == "skillclaw":
        from ..skillclaw import evolve_skills

        res = evolve_skills(store, bound, dry_run=dry_run)
        if as_json:
            emit_json(res.to_json())
        else:
            print(res.summary())
        if not res.ok:
            raise typer.Exit(1)
        return
    opts = TrainOptions(engine_url=engine, trainer=trainer, dry_run=dry_run, timeout_s=timeout, eval_cmd=eval_cmd,
                        canary_scenario=canary_scenario, gate=not no_gate, cwd=env.cwd)
    with _Progress(enabled=not as_json and sys.stderr.isatty()) as progress:
        result = run_train(store, bound, opts, environ=env.environ, progress=progress)
    if as_json:
        out = result.to_json()
        emit_json(out)
    else:
        _print(result)
    g, rb, new = result.gate, result.rollback, result.release
    if g is not None and not g["passed"] and rb is None:
        from ..errors import ReefError

        raise ReefError(f"weight gate: {g['reason']}; there are no earlier weights to reload, so the new ones "
                        f"(release {new.release_id}) stay published")
    if rb is not None:
        from ..errors import PolicyError

        target = rb.meta["rollback_target_release_id"]
        why = (f"could not be judged ({g['reason']})" if g["score"] is None
               else f"lost to release {g.get('baseline_release_id') or target}: {g['reason']}")
        raise PolicyError(f"weight gate: the new weights (release {new.release_id}) {why}; rolled back — release "
                          f"{rb.release_id} reloads {target} as runtime load id {rb.runtime_load_id}")


def _print(result) -> None:
    sel = result.selection
    if result.dry_run:
        print(f"would train recipe {result.recipe} on {len(sel.samples)} record(s) (seq {sel.from_seq + 1}.."
              f"{sel.through_seq}); {len(sel.pending)} waiting for a reward")
        print(f"  weight gate: {result.gate_plan or 'none (every successful step publishes)'}")
        for reason, n in sorted(sel.skipped.items()):
            print(f"  skipped {n}: {reason}")
        for s in sel.samples:
            print(f"  {s.record_id}  seq {s.seq}  reward {s.reward:g}  {s.response_length} token(s)"
                  + (f"  group {s.group}" if s.group else ""))
        return
    rel = result.release
    print(f"Published weight release {rel.release_id} (step {rel.step}), runtime load id {rel.runtime_load_id}")
    print(f"  checkpoint {result.checkpoint}")
    print(f"  trained on {len(sel.samples)} record(s) through seq {sel.through_seq}; log {result.trainer['log']}")
    for w in result.warnings:
        note(f"warning: {w}")
    if result.gate is not None:
        g = result.gate
        for t in g.get("per_task") or ():
            print(f"  canary {t['task_id']}: {t['current']:g} -> {t['candidate']:g} ({t['status']})")
        if g["passed"]:
            print(f"  weight gate: kept — {g['reason']}")


class _Progress:
    """One rich status line on stderr while the trainer runs (elapsed time and its last log line)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._status = None

    def __enter__(self):
        if self.enabled:
            self._status = console(stderr=True).status("reef train: selecting records")
            self._status.__enter__()
        return self

    def __call__(self, event: dict) -> None:
        if self._status is None:
            return
        kind = event.get("event")
        if kind == "trainer":
            line = event.get("line") or ""
            self._status.update(f"reef train: trainer running {event['elapsed_s']:.0f}s  {line[:100]}")
        elif kind == "exported":
            self._status.update(f"reef train: exported {event['samples']} sample(s); launching the trainer")
        elif kind == "swap":
            self._status.update(f"reef train: hot-swapping weight version {event['weight_version']}")
        elif kind == "gate":
            what = (f"running {event['episodes']} canary episode(s) on weight version {event['weight_version']}"
                    if "episodes" in event else "evaluating the new weights")
            self._status.update(f"reef train: {what}")

    def __exit__(self, *exc):
        if self._status is not None:
            self._status.__exit__(*exc)
        return False


def register(app: typer.Typer) -> None:
    app.command("recipes")(recipes)
    app.command("train")(train)
