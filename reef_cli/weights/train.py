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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import ConflictError, ExitCode, InvalidInput, PolicyError, ReefError
from ..ids import new_id
from ..releases import canonical
from ..times import format_time, utc_now

MANIFEST_PATH = "weights/manifest.json"
MANIFEST_FORMAT = "reef-checkpoint-manifest/1"
BASE_FORMAT = "reef-base-model/1"
LOCK_NAME = "weights.lock"
WEIGHT_OPERATIONS = ("train", "rollback", "base")


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


# -- the scenario's weight state ------------------------------------------------------------------------------------
def open_scenario(project, scenario: str, recipe_name: str | None):
    """The scenario's store and its weights recipe; a new scenario is bound to `recipe_name` here."""
    from ..recipes import load
    from ..store import HarnessStore

    store = HarnessStore(project, scenario)
    if not store.exists():
        if recipe_name is None:
            raise InvalidInput(f"scenario '{scenario}' does not exist; create it with 'reef -s {scenario} train "
                               "--recipe NAME --engine URL --init' (see 'reef recipes')")
        recipe = load(recipe_name)
        _require_trainable(recipe)
        if recipe.kind != "weights":  # skillclaw evolves a harness: it needs one published first
            raise InvalidInput(f"scenario '{scenario}' does not exist; create it with 'reef init --scenario "
                               f"{scenario} --recipe {recipe.name}'")
        store.create(recipe.name)
        return store, recipe
    bound = store.info().recipe
    if recipe_name is not None and recipe_name != bound:
        load(recipe_name)  # an unknown name says so before the binding conflict
        raise ConflictError(f"scenario '{scenario}' is bound to recipe '{bound}', not '{recipe_name}'; a scenario's "
                            "recipe never changes — use another --scenario name")
    recipe = load(bound)
    _require_trainable(recipe, scenario)
    return store, recipe


def init_base(project, scenario: str, recipe_name: str | None, engine_url: str | None, *,
              environ: dict | None = None):
    """`reef train --init`: step 1 of a weights scenario is the engine's base weights, as they serve now.

    `reef serve --upstream-api sglang` freezes a release per request and checks the engine answered with its
    runtime_load_id, so a scenario must have a release before serve can record the traffic its first training step
    needs. This one names the weights the engine loaded (content: a manifest of its model path, as /get_model_info
    reports it) under the weight version the engine reports, so serve's check passes for the base weights and
    `reef train` starts from that path; `--rollback 1` reloads it. Records already in the ledger stay trainable.
    Everything is checked (recipe, engine, its answer) before the scenario is created, so a failure writes nothing.
    """
    from ..recipes import load
    from ..store import HarnessStore
    from .sglang import Engine, EngineRefused

    existing = HarnessStore(project, scenario)
    if recipe_name is None and not existing.exists():
        raise InvalidInput(f"scenario '{scenario}' does not exist; name its recipe: 'reef -s {scenario} train "
                           "--recipe NAME --engine URL --init' (see 'reef recipes')")
    recipe = load(recipe_name or existing.info().recipe)
    if recipe.kind != "weights":
        raise InvalidInput(f"--init starts a weights scenario; '{recipe.name}' is a harness recipe (create its "
                           f"scenario with 'reef init --scenario {scenario} --recipe {recipe.name}')")
    environ = dict(os.environ if environ is None else environ)
    url = engine_url or environ.get("REEF_ENGINE_URL")
    if not url:
        raise InvalidInput("--init needs the engine: pass --engine URL (the SGLang server serving the base model) "
                           "or set REEF_ENGINE_URL")
    engine = Engine(url)
    if existing.exists() and existing.head() is not None:
        head = existing.head()
        raise ConflictError(f"scenario '{scenario}' already has release {head.release_id} (step {head.step}); "
                            "--init only starts a new weights scenario — run 'reef train' to continue it")
    info = engine.model_info()
    version, model_path = info.get("weight_version"), info.get("model_path")
    if version is None or not model_path:
        raise EngineRefused(f"SGLang engine at {engine.url}: /get_model_info names no "
                            f"{'weight_version' if version is None else 'model_path'}; reef cannot tell which "
                            "weights answer (upgrade SGLang)")
    store, recipe = open_scenario(project, scenario, recipe_name)
    version = str(version)
    manifest = {"format": BASE_FORMAT, "model_path": str(model_path), "tokenizer_path": info.get("tokenizer_path")}
    meta = {"checkpoint": str(model_path), "base_model_path": str(model_path), "recipe": recipe.name,
            "engine": engine.url, "records": {"from_seq": 0, "through_seq": 0, "count": 0, "pending_ids": []}}
    with _training_lock(store):
        release = _publish_plain(store, manifest, version, meta, f"base weights {model_path} ({recipe.name})")
    store.ledger().append("train_init", {"recipe": recipe.name, "runtime_load_id": version,
                                         "model_path": str(model_path), "engine": engine.url},
                          release_id=release.release_id, content_id=release.content_id)
    return store, recipe, release


def _publish_plain(store, manifest: dict, version: str, meta: dict, reason: str):
    from ..gitstore import Entry

    files = {MANIFEST_PATH: Entry(json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n")}
    return store.publish(reason=reason, operation="base", files=files, expected_head=None, meta=meta,
                         allow_empty=True, runtime_load_id=version, surface="weights").release


def _require_trainable(recipe, scenario: str | None = None) -> None:
    if recipe.kind == "weights" or recipe.engine == "skillclaw":
        return
    where = f"scenario '{scenario}' is bound to" if scenario else "recipe"
    raise InvalidInput(f"{where} harness recipe '{recipe.name}'; 'reef train' runs weight recipes and skillclaw "
                       "(see 'reef recipes'); evolve a harness with 'reef harness evolve'")


def lock_path(store) -> Path:
    return store.dir / LOCK_NAME


def read_lock(store) -> dict | None:
    """The lock a failed transfer set, or None; a lock file that is there but damaged (truncated, `null`, not an
    object) still locks: the engine's weights are just as unknown."""
    try:
        info = json.loads(lock_path(store).read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        info = None
    return info if isinstance(info, dict) else {"reason": "unreadable lock file", "at": "?"}


def _refuse_if_locked(store) -> None:
    lock = read_lock(store)
    if lock is not None:
        raise PolicyError(f"weight updates for scenario '{store.scenario}' are locked since {lock.get('at')} "
                          f"({lock.get('reason')}); check the engine, then run 'reef train --unlock'")


def _set_lock(store, info: dict) -> None:
    from ..durable import write_atomic

    write_atomic(lock_path(store), canonical(info) + b"\n")


def unlock(store) -> dict | None:
    """Clear the lock a failed transfer set; the person doing it has checked the engine. Recorded in the ledger."""
    info = read_lock(store)
    if info is None:
        return None
    head = store.head()
    store.ledger().append("weights_unlock", {"lock": info}, release_id=head.release_id if head else None,
                          content_id=head.content_id if head else None)
    lock_path(store).unlink(missing_ok=True)
    return info


def weights_status(store, environ: dict) -> tuple[dict | None, str]:
    """What `reef status` adds for a weights scenario: the lock a failed transfer left, and how the next step's
    weights will be judged (a gate that cannot run says why, as `reef train` would before training)."""
    from . import gate as wgate

    try:
        plan = wgate.plan(store.project, store.scenario, eval_cmd=None, canary_scenario=None, enabled=True,
                          environ=environ)
    except ReefError as exc:
        described = f"cannot run: {exc}"
    else:
        described = (plan.suite.describe() if plan and plan.suite else f"--eval {plan.shown}" if plan
                     else "none (every successful step publishes)")
    return read_lock(store), described


def weight_head(store):
    """The newest weight release (train or rollback) and the high-water mark it carries."""
    for rel in reversed(store.releases()):
        if rel.operation in WEIGHT_OPERATIONS and isinstance(rel.meta.get("records"), dict):
            return rel
    return None


def checkpoint_manifest(path: Path) -> dict:
    """Every file of a checkpoint directory with its size and SHA-256, sorted: the bytes a weight release names.

    A symlinked file whose target lies inside the checkpoint is followed and named under the link's path (a loader
    reads it through the link). One pointing outside (or nowhere), and a symlinked directory, are refused with one
    line: skipping them named a checkpoint without bytes the engine loads, and following one outside would name
    bytes the checkpoint does not hold, which a later rollback could not check again."""
    root = path.resolve()
    files = {}
    for p in sorted(path.rglob("*")):
        if p.is_symlink():
            target = p.resolve()
            rel = p.relative_to(path).as_posix()
            if not target.exists():
                raise InvalidInput(f"checkpoint {path}: {rel} is a symlink to {os.readlink(p)}, which does not exist")
            if target != root and root not in target.parents:
                raise InvalidInput(f"checkpoint {path}: {rel} is a symlink to {target}, outside the checkpoint; copy "
                                   "the file in (a weight release names only bytes its checkpoint holds)")
            if not target.is_file():
                raise InvalidInput(f"checkpoint {path}: {rel} is a symlink to a directory; copy or move the files "
                                   "in (a weight release names files)")
        elif not p.is_file():
            continue
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        files[p.relative_to(path).as_posix()] = {"bytes": p.stat().st_size, "sha256": h.hexdigest()}
    if not files:
        raise InvalidInput(f"checkpoint {path} holds no files")
    return {"format": MANIFEST_FORMAT, "files": files}


# -- one step ------------------------------------------------------------------------------------------------------
class TrainInterrupted(ReefError):
    """Ctrl-C (or SIGTERM) during `reef train`, recorded: the message says what the engine and the head were left
    with."""

    exit_code = ExitCode.INTERRUPTED


def train(store, recipe, opts: TrainOptions, *, environ: dict | None = None,
          progress: Callable[[dict], None] | None = None) -> TrainResult:
    """One step under the scenario's training lock: two trainers swapping one engine would race each other."""
    if opts.dry_run:
        return _train(store, recipe, opts, environ, progress, {})
    run: dict = {}  # what _train has got to: its recorder, its result
    with _training_lock(store), _sigterm_interrupts():
        try:
            return _train(store, recipe, opts, environ, progress, run)
        except KeyboardInterrupt:
            raise _interrupted(store, run) from None


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM (a service manager stopping reef) is a Ctrl-C for the length of a step, so it is recorded, locks
    where a Ctrl-C locks and exits 130, as `reef gate` and `reef model serve` treat it; it used to kill reef where
    it stood, with no record."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


@contextlib.contextmanager
def _training_lock(store):
    import fcntl

    store.dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(store.dir / "train.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConflictError(f"another 'reef train' is running on scenario '{store.scenario}'; "
                                "wait for it to finish") from None
        yield
    finally:
        os.close(fd)


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
        _refuse_if_locked(store)
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

    failed = _recorder(store, run_id, recipe.name, url)
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
        return _publish(store, manifest, head, version, meta, "train",
                        f"train {recipe.name} on {len(selection.samples)} record(s) through seq "
                        f"{selection.through_seq}", tuple(s.record_id for s in selection.samples[:1000]), failed)

    release = _swap_and_publish(store, engine, str(trained.checkpoint), version, failed, "swap", publish, manifest)
    result.release, result.runtime_load_id = release, version
    ledger.append("train", {"run_id": run_id, "recipe": recipe.name, "runtime_load_id": version,
                            "checkpoint": str(trained.checkpoint), "records": len(selection.samples),
                            "through_seq": selection.through_seq}, release_id=release.release_id,
                  content_id=release.content_id)
    if gate_plan is not None:
        _gate(store, engine, result, prev, baseline, gate_plan, url, environ, failed, emit, opts)
    return result


def _weight_before(store, release):
    """The weight release before `release` (what its gate compares with and a rollback reloads), or None."""
    earlier = None
    for rel in store.releases():
        if rel.release_id == release.release_id:
            return earlier
        if rel.operation in WEIGHT_OPERATIONS and isinstance(rel.meta.get("records"), dict):
            earlier = rel
    return None


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
    earlier = _weight_before(store, head)
    failed = _recorder(store, run_id, head.meta.get("recipe", result.recipe), url)
    emit({"event": "settle", "release_id": head.release_id, "run_id": run_id})
    settled = TrainResult(result.recipe, result.selection, run_id=run_id, run_dir=store.dir / "train" / run_id,
                          release=head, runtime_load_id=head.runtime_load_id, warnings=result.warnings)
    if verdicts:  # the verdict was recorded, the rollback never published: carry it out
        verdict = verdicts[-1]
        settled.gate = verdict
        if earlier is not None and earlier.meta.get("checkpoint"):
            settled.rollback = _restore(store, engine, earlier, run_id=run_id, failed=failed,
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
                    settled.rollback = _restore(
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
    result.rollback = _restore(store, engine, prev, run_id=result.run_id, failed=failed,
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


def _recorder(store, run_id: str, recipe: str, url: str):
    """`failed(stage, exc, locked=..., **extra)`: one `train_failed` ledger record, and the lock when asked."""
    ledger = store.ledger()

    def failed(stage: str, exc: Exception, *, locked: bool = False, **extra) -> None:
        from ..redact import redact_obj

        with _interrupts_held():
            head = store.head()
            # an error carries outside text (a trainer's or --eval's last line, an engine's answer): redacted
            payload = {"run_id": run_id, "recipe": recipe, "stage": stage, "error": str(exc), "locked": locked,
                       "engine": url, **extra}
            ledger.append("train_failed", redact_obj(payload)[0], release_id=head.release_id if head else None,
                          content_id=head.content_id if head else None)
            if locked:
                _set_lock(store, redact_obj({"at": format_time(utc_now()), "run_id": run_id, "stage": stage,
                                             "reason": f"{stage} failed: {exc}", "engine": url, **extra})[0])

    return failed


@contextlib.contextmanager
def _interrupts_held():
    """SIGINT and SIGTERM wait while a failure is recorded and the lock set: a second Ctrl-C there would leave an
    engine in an unknown state with no record and no lock. One that came is raised afterwards, unless an error is
    already on its way out (recording it is why we are here)."""
    import signal
    import sys
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    held = {sig: signal.signal(sig, lambda signum, _frame: came.append(signum))
            for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
    if came and sys.exc_info()[0] is None:
        raise KeyboardInterrupt


def _restore(store, engine, target, *, run_id: str, reason: str, evidence, meta: dict, failed):
    """Reload `target`'s checkpoint into the engine under a new version and publish it as a `rollback` release
    (history is never rewritten). The checkpoint must still hold exactly the bytes its release names."""
    ckpt = target.meta.get("checkpoint")
    if not ckpt:
        raise InvalidInput(f"release {target.release_id} names no checkpoint to reload")
    try:
        named = json.loads(store.files_of(target)[MANIFEST_PATH].data)
    except (KeyError, ValueError):
        raise InvalidInput(f"release {target.release_id} is not a weight release (no {MANIFEST_PATH})") from None
    try:  # base weights are the engine's own model path (maybe a hub id, maybe another machine): nothing to hash
        found = named if named.get("format") == BASE_FORMAT else checkpoint_manifest(Path(ckpt))
    except (InvalidInput, OSError):
        found = None
    if found != named:
        raise InvalidInput(f"checkpoint {ckpt} no longer holds the bytes release {target.release_id} names; "
                           "nothing was reloaded")
    head = store.head()
    version = f"{head.step + 1}:rb-{run_id[-6:].lower()}"

    def publish(swap):
        published = {**target.meta, "rollback_target_release_id": target.release_id,
                     "rolled_back_release_id": head.release_id,
                     "records": head.meta.get("records", target.meta.get("records")),
                     "previous_weight_version": swap.previous_version, **meta}
        return _publish(store, named, head, version, published, "rollback", reason, tuple(evidence), failed)

    return _swap_and_publish(store, engine, ckpt, version, failed, "rollback", publish,
                             None if named.get("format") == BASE_FORMAT else named)


def _swap_and_publish(store, engine, ckpt: str, version: str, failed, stage: str, publish, manifest: dict | None):
    """Hot-swap `ckpt` in as `version`, check it still holds the bytes `manifest` names, then `publish(swap)` the
    release that names them; returns the release.

    The manifest was hashed before the swap; a process still writing the checkpoint (one the trainer left behind, a
    Ray worker, an async checkpoint writer) could change it before or while the engine read it, and the release
    would name bytes the engine does not serve. So it is hashed again once the engine has read it back: a
    difference is a failed swap (`verify`). A failed swap that touched the engine locks (its weights are unknown),
    and so does an interruption between the engine taking the new weights and a release recording them (the engine
    serves a version no release names); both are recorded, and the error says so (exit 130 for an interruption)."""
    from .sglang import SwapFailed

    try:
        swap = engine.hot_swap(ckpt, version)
        if manifest is not None:
            _check_unchanged(ckpt, manifest, version)
        return publish(swap)
    except SwapFailed as exc:
        failed(f"{stage}:{exc.stage}", exc, locked=exc.touched, weight_version=version, checkpoint=ckpt,
               answered_version=exc.answered_version)
        if exc.touched:
            raise type(exc)(f"{exc}; weight updates of scenario '{store.scenario}' are locked until "
                            "'reef train --unlock'", stage=exc.stage, touched=True) from None
        raise
    except KeyboardInterrupt:
        head = store.head()
        if head is not None and head.runtime_load_id == version:
            raise  # published: what was left is the caller's
        exc = TrainInterrupted(f"interrupted after the engine loaded weight version {version} and before a release "
                               f"recorded it; weight updates of scenario '{store.scenario}' are locked until "
                               "'reef train --unlock'")
        failed("publish", exc, locked=True, weight_version=version, checkpoint=ckpt)
        raise exc from None


def _check_unchanged(ckpt: str, manifest: dict, version: str) -> None:
    """SwapFailed(stage verify) unless checkpoint `ckpt` still holds exactly the files `manifest` names."""
    from .sglang import SwapFailed

    try:
        now = checkpoint_manifest(Path(ckpt))
    except (InvalidInput, OSError) as exc:
        why = f"it can no longer be read: {getattr(exc, 'strerror', None) or exc}"
    else:
        if now == manifest:
            return
        was, found = manifest.get("files", {}), now.get("files", {})
        changed = sorted(name for name in was.keys() | found.keys() if was.get(name) != found.get(name))
        why = "changed: " + ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    raise SwapFailed(f"checkpoint {ckpt} changed while the engine loaded it ({why}); the engine serves weight "
                     f"version {version!r} from bytes no release names", stage="verify", touched=True)


def rollback_weights(store, ref: str, engine_url: str | None, *, environ: dict | None = None):
    """`reef train --rollback REF`: serve an earlier weight release's checkpoint again, as a new release."""
    from .sglang import Engine

    environ = dict(os.environ if environ is None else environ)
    _refuse_if_locked(store)
    target, head = store.find(ref), store.require_head()
    if target.operation not in WEIGHT_OPERATIONS:
        raise InvalidInput(f"release {target.release_id} is not a weight release")
    if target.content_id == head.content_id:
        return None
    url = engine_url or environ.get("REEF_ENGINE_URL")
    if not url:
        raise InvalidInput("no engine: pass --engine URL (the SGLang server to hot-swap) or set REEF_ENGINE_URL")
    run_id = new_id("trn")
    failed = _recorder(store, run_id, store.info().recipe, url)
    engine = Engine(url)
    from .gate import store_verdict, stored_verdict

    with _training_lock(store), _sigterm_interrupts():
        rel = _restore(store, engine, target, run_id=run_id, failed=failed, evidence=(target.release_id,),
                       reason=f"rollback to step {target.step} ({target.release_id})", meta={})
        verdict = stored_verdict(store, target)
        if verdict is not None:  # the same weights: the next weight gate compares with their verdict, not re-measures
            store_verdict(store, rel, verdict)
        return rel


def _publish(store, manifest: dict, head, version: str, meta: dict, operation: str, reason: str, evidence,
             failed) -> object:
    from ..gitstore import Entry

    files = {MANIFEST_PATH: Entry(json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n")}
    try:
        res = store.publish(reason=reason, operation=operation, files=files,
                            expected_head=head.release_id if head else None, evidence=evidence, meta=meta,
                            allow_empty=True, runtime_load_id=version, surface="weights")
    except ReefError as exc:
        failed("publish", exc, locked=True, weight_version=version, checkpoint=meta.get("checkpoint"))
        raise type(exc)(f"{exc}; the engine already serves weight version {version}, which no release records — "
                        "weight updates are locked until 'reef train --unlock'") from None
    return res.release
