"""`reef train`: one weight-training step of a scenario, from ledger records to a hot-swapped, published release.

Order, and what each failure leaves:
1. refuse while a failed transfer has locked the scenario (the engine's weights are unknown);
2. select qualifying records after the last weight release's high-water mark (`--dry-run` stops here);
3. check the engine is up (down: nothing ran, nothing is locked);
4. with canary tasks and no comparable stored verdict for the previous weights, measure them (weights/gate.py);
   export slime rollout data into `.reef/scenarios/<s>/train/<run>/`, launch the trainer (a crash, timeout or a
   missing checkpoint: the engine was never touched, the head is unchanged);
5. hot-swap the checkpoint into SGLang under a new weight version and read it back (any failure here locks);
6. publish a weight release (operation `train`, runtime_load_id = the weight version, content = the checkpoint
   manifest), the commit point; the high-water mark moves with it;
7. with canary tasks (or `--eval CMD`), gate the new weights against the previous release's stored verdict and roll
   back (reload the previous checkpoint, publish a `rollback` release) when they lose (weights/gate.py).
Every failure is one ledger record (`train_failed`) and one error line; the head never moves on a failure. So is
a Ctrl-C (exit 130): one from the pause of step 5 until step 6's release is written locks like a failed swap (the
engine may serve, or go on loading, weights no release names), and the engine is asked to continue generating.
A run killed between 6 and 7 leaves published weights with no `weight_gate` record: the next `reef train` (once
the engine answers with those weights) gates them before training on top of them, and rolls them back if they lose
or can no longer be judged (`_settle_unjudged`).

This module is the step and its weight gate; the scenario's state (recipe, weight head, locks, checkpoint manifest)
is weights/state.py, and the transfer into the engine (swap, verify, publish, roll back) weights/transfer.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import InvalidInput, PolicyError, ReefError
from ..ids import new_id
from .state import checkpoint_manifest, refuse_if_locked, training_lock, weight_before, weight_head
from .transfer import (TrainInterrupted, publish_weights, recorder, restore, sigterm_interrupts,
                       swap_and_publish)


@dataclass(frozen=True)
class TrainOptions:
    engine_url: str | None = None
    trainer: str | None = None
    dry_run: bool = False
    timeout_s: float | None = None
    eval_cmd: str | None = None
    canary_scenario: str | None = None
    gate: bool = True  # False: --no-gate, publish every successful step
    cwd: Path | None = None  # where the trainer and --eval run (the user's directory: relative paths as typed)
    slime_dir: str | None = None
    ray_address: str | None = None
    flush_retries: int = 60
    flush_wait_s: float = 1.0


@dataclass
class TrainResult:
    recipe: str
    selection: object
    run_id: str | None = None
    run_dir: Path | None = None
    release: object | None = None
    runtime_load_id: str | None = None
    checkpoint: str | None = None
    swap: dict | None = None
    trainer: dict | None = None
    gate: dict | None = None
    gate_plan: str | None = None
    rollback: object | None = None
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    settled: dict | None = None  # the head an interrupted run left unjudged, gated (or rolled back) by this one

    def to_json(self) -> dict:
        out = {"recipe": self.recipe, "dry_run": self.dry_run, "selection": self.selection.to_json(),
               "run_id": self.run_id, "run_dir": str(self.run_dir) if self.run_dir else None,
               "gate_plan": self.gate_plan, "warnings": self.warnings}
        if not self.dry_run:
            out.update({"release_id": self.release.release_id if self.release else None,
                        "runtime_load_id": self.runtime_load_id, "checkpoint": self.checkpoint,
                        "swap": self.swap, "trainer": self.trainer, "gate": self.gate,
                        "rolled_back": self.rollback is not None,
                        "rollback_release_id": self.rollback.release_id if self.rollback else None,
                        "settled": self.settled})
        return out


def check_options(*, engine_url: str | None, timeout_s: float | None) -> None:
    """`reef train`'s options that can be judged alone, checked before anything runs: a timeout of -5 s used to
    launch the trainer and stop it at once, and `nan` meant no timeout at all."""
    import math

    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InvalidInput(f"--timeout {timeout_s:g}: expected a number of seconds above 0")
    if engine_url is not None:
        from .sglang import checked_url

        checked_url(engine_url)


def train(store, recipe, opts: TrainOptions, *, environ: dict | None = None,
          progress: Callable[[dict], None] | None = None) -> TrainResult:
    """One step under the scenario's training lock: two trainers swapping one engine would race each other."""
    if opts.dry_run:
        return _train(store, recipe, opts, environ, progress, {})
    run: dict = {}  # what _train has got to: its recorder, its result
    with training_lock(store), sigterm_interrupts():
        try:
            return _train(store, recipe, opts, environ, progress, run)
        except KeyboardInterrupt:
            raise _interrupted(store, run) from None


def _interrupted(store, run: dict) -> TrainInterrupted:
    """An interruption outside the trainer and the swap (those record their own): before the engine was touched,
    or after the new weights were published (the next `reef train` gates them first: `_settle_unjudged`)."""
    failed, result = run.get("failed"), run.get("result")
    if failed is None:
        return TrainInterrupted("interrupted before training started; nothing ran")
    release = result.release if result is not None else None
    if release is None:
        what = "interrupted before the engine was touched; the engine and the head are as they were"
    else:
        what = (f"interrupted after release {release.release_id} (weight version {release.runtime_load_id}) was "
                "published" + ("" if result.gate_plan is None else ", before the weight gate decided; the next "
                               "'reef train' judges those weights before training on them"))
    exc = TrainInterrupted(what)
    failed("interrupted", exc)
    return exc


def _selection(store, recipe, prev):
    """The rewarded records a step trains on: those after the ones the head weight release `prev` took."""
    from .records import select

    marks = prev.meta["records"] if prev else {}
    return select(store.ledger(), recipe, from_seq=int(marks.get("through_seq", 0)),
                  carried=marks.get("pending_ids", ()))


def _start_point(prev, info: dict) -> tuple:
    """(base model, checkpoint to train from): the head weight release's, else what the engine serves."""
    if prev:
        return prev.meta.get("base_model_path"), prev.meta.get("checkpoint")
    return info.get("model_path"), info.get("model_path")


def _train(store, recipe, opts: TrainOptions, environ: dict | None,
           progress: Callable[[dict], None] | None, run: dict) -> TrainResult:
    environ = dict(os.environ if environ is None else environ)
    emit = progress or (lambda event: None)
    if not opts.dry_run:
        refuse_if_locked(store)
    prev = weight_head(store)
    selection = _selection(store, recipe, prev)
    result = TrainResult(recipe.name, selection, dry_run=opts.dry_run)
    from . import gate as wgate

    gate_plan = wgate.plan(store.project, store.scenario, eval_cmd=opts.eval_cmd, canary_scenario=opts.canary_scenario,
                           enabled=opts.gate, environ=environ)
    result.gate_plan = (None if gate_plan is None else gate_plan.suite.describe() if gate_plan.suite
                        else f"--eval {gate_plan.shown}")
    if opts.dry_run:
        return result
    if not selection.samples:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(selection.skipped.items()))
        raise InvalidInput(f"nothing to train on in scenario '{store.scenario}': no qualifying rewarded records after "
                           f"seq {selection.from_seq} ({len(selection.pending)} waiting for a reward"
                           + (f"; skipped: {why}" if why else "") + ")")
    url = opts.engine_url or environ.get("REEF_ENGINE_URL")
    if not url:
        raise InvalidInput("no engine: pass --engine URL (the SGLang server to hot-swap) or set REEF_ENGINE_URL")
    from .sglang import Engine, EngineError

    engine = Engine(url, flush_retries=opts.flush_retries, flush_wait=opts.flush_wait_s)
    run_id = new_id("trn")
    result.run_id = run_id
    ledger = store.ledger()

    failed = recorder(store, run_id, recipe.name, url)
    run.update(failed=failed, result=result)

    emit({"event": "engine", "url": url})
    try:
        info = engine.model_info()
    except EngineError as exc:
        failed("engine", exc)
        raise
    engine_version = info.get("weight_version")
    base_model, start_from = _start_point(prev, info)
    if prev and engine_version is not None and str(engine_version) != prev.runtime_load_id:
        exc = ReefError(f"the engine serves weight version {engine_version!r}, but the head weight release "
                        f"{prev.release_id} is {prev.runtime_load_id!r}")
        failed("engine", exc, locked=True, answered_version=str(engine_version))
        raise PolicyError(f"{exc}; weight updates are now locked — check the engine, then run 'reef train --unlock'")

    if _settle_unjudged(store, engine, prev, gate_plan, url, environ, emit, result, opts):
        prev = weight_head(store)  # rolled back: train from the weights the engine serves now, and their records
        selection = result.selection = _selection(store, recipe, prev)
        base_model, start_from = _start_point(prev, info)

    run_dir = store.dir / "train" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    result.run_dir = run_dir
    # measured before the trainer runs: a gate that cannot judge (say, an agent that never calls the model) stops
    # the step before any GPU time is spent, and the engine serves exactly the previous weights now
    baseline = _baseline(store, prev, gate_plan, url, run_dir, run_id, environ, emit, result, failed)
    from .records import export
    from .trainer import TrainerFailed, build_argv, launch, shown_argv, slime_flags

    exported = export(selection, run_dir / "rollouts.jsonl")
    emit({"event": "exported", **exported})
    flags = slime_flags(run_dir=run_dir, prompt_data=run_dir / "rollouts.jsonl", hf_checkpoint=str(start_from),
                        samples=len(selection.samples), trainer=recipe.trainer)
    argv = build_argv(opts.trainer, opts.slime_dir or environ.get("REEF_SLIME_DIR"), flags, cwd=opts.cwd)
    child_env = dict(environ)
    ray = opts.ray_address or environ.get("REEF_RAY_ADDRESS")
    if ray:
        child_env["RAY_ADDRESS"] = ray
    child_env["REEF_RUN_DIR"] = str(run_dir)
    timeout = opts.timeout_s if opts.timeout_s is not None else recipe.trainer.get("timeout_s")
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "recipe": recipe.name, "argv": shown_argv(argv),
                                                  "engine": url, "from_seq": selection.from_seq,
                                                  "through_seq": selection.through_seq}, indent=2) + "\n")
    try:
        trained = launch(argv, cwd=opts.cwd or store.project.root, env=child_env, log_path=run_dir / "trainer.log",
                         hf_dir=run_dir / "hf", timeout_s=timeout,
                         on_tick=lambda s, line: emit({"event": "trainer", "elapsed_s": s, "line": line}))
    except TrainerFailed as exc:
        failed(exc.stage, exc, exit_status=exc.status, log=str(run_dir / "trainer.log"))
        raise
    result.trainer = trained.to_json()
    result.checkpoint = str(trained.checkpoint)
    try:
        manifest = checkpoint_manifest(trained.checkpoint)
    except (InvalidInput, OSError) as exc:
        failed("checkpoint", exc, checkpoint=str(trained.checkpoint))  # the engine was never touched
        if isinstance(exc, OSError):
            raise InvalidInput(f"checkpoint {trained.checkpoint} cannot be read: {exc.strerror or exc}") from None
        raise

    head = store.head()
    step = (head.step + 1) if head else 1
    version = f"{step}:{run_id[-8:].lower()}"
    emit({"event": "swap", "weight_version": version})

    def publish(swap):
        result.swap = swap.to_json()
        meta = {"checkpoint": str(trained.checkpoint), "run_id": run_id, "recipe": recipe.name, "engine": url,
                "base_model_path": base_model, "previous_weight_version": swap.previous_version,
                "records": {"from_seq": selection.from_seq, "through_seq": selection.through_seq,
                            "count": len(selection.samples), "pending_ids": list(selection.pending)},
                "gate_plan": None if gate_plan is None else gate_plan.kind,
                "trainer": {"argv": shown_argv(trained.argv), "duration_s": round(trained.duration_s, 3),
                            "log": str(trained.log_path)}}
        return publish_weights(store, manifest, head, version, meta, "train",
                        f"train {recipe.name} on {len(selection.samples)} record(s) through seq "
                        f"{selection.through_seq}", tuple(s.record_id for s in selection.samples[:1000]), failed)

    release = swap_and_publish(store, engine, str(trained.checkpoint), version, failed, "swap", publish, manifest)
    result.release, result.runtime_load_id = release, version
    ledger.append("train", {"run_id": run_id, "recipe": recipe.name, "runtime_load_id": version,
                            "checkpoint": str(trained.checkpoint), "records": len(selection.samples),
                            "through_seq": selection.through_seq}, release_id=release.release_id,
                  content_id=release.content_id)
    if gate_plan is not None:
        _gate(store, engine, result, prev, baseline, gate_plan, url, environ, failed, emit, opts)
    return result


def _settle_unjudged(store, engine, head, gate_plan, url: str, environ: dict, emit, result: TrainResult,
                     opts: TrainOptions) -> bool:
    """A `reef train` killed after publishing its weights but before the weight gate decided left them as the head
    with no `weight_gate` record (or with a rollback verdict that was never carried out). Weights nobody judged do
    not stay: before training on top of them, this gates them now, against the weights before them, exactly as
    that run would have (the engine still serves them: the caller checked), and rolls them back if they lose or
    cannot be judged; a recorded rollback verdict is carried out. Returns True when it rolled back."""
    from . import gate as wgate

    if head is None or head.operation != "train" or not head.meta.get("run_id"):
        return False
    planned = head.meta.get("gate_plan", "unknown")  # releases before this field: judged if a gate is planned now
    if planned is None:
        return False  # published with --no-gate (or with no canary tasks): every step publishes
    run_id = head.meta["run_id"]
    verdicts = [r.payload for r in store.ledger().iter_records(kind="weight_gate") if r.payload.get("run_id") == run_id]
    if verdicts and verdicts[-1].get("passed"):
        return False
    what = f"the head's weights (release {head.release_id}, run {run_id}) were published by a 'reef train' that " \
           "stopped before the weight gate decided"
    if gate_plan is None and not verdicts:
        result.warnings.append(f"{what}; they stay unjudged because this run has no weight gate (--no-gate)")
        return False
    earlier = weight_before(store, head)
    failed = recorder(store, run_id, head.meta.get("recipe", result.recipe), url)
    emit({"event": "settle", "release_id": head.release_id, "run_id": run_id})
    settled = TrainResult(result.recipe, result.selection, run_id=run_id, run_dir=store.dir / "train" / run_id,
                          release=head, runtime_load_id=head.runtime_load_id, warnings=result.warnings)
    if verdicts:  # the verdict was recorded, the rollback never published: carry it out
        verdict = verdicts[-1]
        settled.gate = verdict
        if earlier is not None and earlier.meta.get("checkpoint"):
            settled.rollback = restore(store, engine, earlier, run_id=run_id, failed=failed,
                                        evidence=(head.release_id,),
                                        reason=f"weight gate: {verdict.get('reason')}; reload step {earlier.step} "
                                               f"({earlier.release_id}) (the interrupted run's verdict)",
                                        meta={"rejected_gate": _brief(verdict)})
    else:
        if gate_plan.kind == "eval":
            baseline = (wgate.stored_verdict(store, earlier) or earlier.meta.get("gate")) if earlier else None
        else:
            stored = wgate.stored_verdict(store, earlier) if earlier else None
            baseline = stored if wgate.comparable(gate_plan.suite, stored) else None
            if earlier is not None and baseline is None:
                # the weights before them can no longer be measured (the engine serves these): not judged, not kept
                settled.gate = {"kind": gate_plan.kind, "decision": wgate.ROLLBACK, "passed": False, "score": None,
                                "baseline": None, "reason": "no comparable verdict of the previous weights to judge "
                                                            "them against"}
                store.ledger().append("weight_gate", {"run_id": run_id, **settled.gate},
                                      release_id=head.release_id, content_id=head.content_id)
                if earlier.meta.get("checkpoint"):
                    settled.rollback = restore(
                        store, engine, earlier, run_id=run_id, failed=failed, evidence=(head.release_id,),
                        reason=f"weight gate: {settled.gate['reason']}; reload step {earlier.step} "
                               f"({earlier.release_id})", meta={"rejected_gate": _brief(settled.gate)})
                baseline = False
        if baseline is not False:
            _gate(store, engine, settled, earlier, baseline, gate_plan, url, environ, failed, emit, opts)
    if settled.rollback is not None and earlier is not None:
        kept = wgate.stored_verdict(store, earlier)
        if kept is not None:  # the same weights again: the next gate compares with their verdict
            wgate.store_verdict(store, settled.rollback, kept)
    decision = (f"rolled back — release {settled.rollback.release_id} serves step {earlier.step} again"
                if settled.rollback else f"gated now: {((settled.gate or {}).get('decision') or 'kept')}")
    result.warnings.append(f"{what}; {decision}")
    result.settled = {"release_id": head.release_id, "run_id": run_id, "gate": settled.gate,
                      "rollback_release_id": settled.rollback.release_id if settled.rollback else None}
    return settled.rollback is not None


def _baseline(store, prev, gate_plan, url: str, run_dir: Path, run_id: str, environ: dict, emit, result,
              failed) -> dict | None:
    """The previous weights' verdict the candidate must not lose to. With canary tasks and none stored that can be
    compared, the previous weights are measured now, before training and the swap, while the engine serves them (a
    failure here leaves the engine and the head as they were, and no trainer has run)."""
    from . import gate as wgate

    if gate_plan is None or prev is None:
        return None
    stored = wgate.stored_verdict(store, prev)
    if gate_plan.kind == "eval":
        return stored or prev.meta.get("gate")
    if wgate.comparable(gate_plan.suite, stored):
        return stored
    try:
        verdict = wgate.measure(store, gate_plan.suite, engine_url=url, release=prev, run_dir=run_dir, run_id=run_id,
                                environ=environ, emit=emit, warnings=result.warnings)
    except ReefError as exc:
        from ..redact import redact

        failed("gate", exc)
        raise type(exc)(f"weight gate: measuring the previous weights (release {prev.release_id}) failed: "
                        f"{redact(str(exc))[0]}; nothing was swapped") from None
    wgate.store_verdict(store, prev, verdict)
    return verdict


def _gate(store, engine, result: TrainResult, prev, baseline, gate_plan, url: str, environ: dict, failed,
          emit, opts: TrainOptions) -> None:
    """Judge the new weights (now the head and served) and keep them, or reload the previous checkpoint and
    publish that as a `rollback` release when they lose or cannot be judged."""
    from . import gate as wgate

    release = result.release
    try:
        if gate_plan.kind == "eval":
            emit({"event": "gate", "command": gate_plan.shown})
            score = wgate.run_eval(gate_plan.command, url, result.runtime_load_id, environ, cwd=opts.cwd)
            verdict = wgate.judge_score(score, baseline, gate_plan.shown)
            keep = {"kind": "eval", "score": score, "command": gate_plan.shown, "release_id": release.release_id}
        else:
            measured = wgate.measure(store, gate_plan.suite, engine_url=url, release=release, run_dir=result.run_dir,
                                     run_id=result.run_id, environ=environ, emit=emit, warnings=result.warnings)
            verdict = wgate.judge(gate_plan.suite, measured, baseline)
            keep = measured
    except ReefError as exc:
        from ..redact import redact

        failed("gate", exc)
        verdict = {"kind": gate_plan.kind, "decision": wgate.ROLLBACK, "passed": False, "score": None,
                   "baseline": (baseline or {}).get("score"), "reason": f"could not run: {redact(str(exc))[0]}"}
        keep = None
    result.gate = verdict
    store.ledger().append("weight_gate", {"run_id": result.run_id, **verdict}, release_id=release.release_id,
                          content_id=release.content_id)
    if verdict["passed"]:
        wgate.store_verdict(store, release, keep)
        return
    if prev is None or not prev.meta.get("checkpoint"):
        return  # nothing earlier to serve: the new weights stay, and the CLI says so
    result.rollback = restore(store, engine, prev, run_id=result.run_id, failed=failed,
                               evidence=(release.release_id,),
                               reason=f"weight gate: {verdict['reason']}; reload step {prev.step} ({prev.release_id})",
                               meta={"gate": _brief(baseline), "rejected_gate": _brief(verdict)})
    if baseline is not None:
        wgate.store_verdict(store, result.rollback, baseline)
    result.runtime_load_id = result.rollback.runtime_load_id


def _brief(verdict: dict | None) -> dict | None:
    """A verdict as a release carries it: without the per-episode scores (those stay in verdicts.json)."""
    if verdict is None:
        return None
    return {k: v for k, v in verdict.items() if k not in ("episodes", "errors")}

