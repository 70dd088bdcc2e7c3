"""A weights scenario's state, as every weight command reads it: the recipe it is bound to, the newest weight
release and its high-water mark, the lock a failed transfer leaves, the training lock, and the checkpoint manifest
(the bytes a weight release names).

Its own room because `reef train`, `reef train --rollback`, `--unlock`, `--init` and `reef status` all read it,
and none of them needs the step (train.py) or the engine transfer (transfer.py) to do so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from ..errors import ConflictError, InvalidInput, PolicyError, ReefError
from ..releases import canonical

MANIFEST_PATH = "weights/manifest.json"
MANIFEST_FORMAT = "reef-checkpoint-manifest/1"
BASE_FORMAT = "reef-base-model/1"
LOCK_NAME = "weights.lock"
WEIGHT_OPERATIONS = ("train", "rollback", "base")


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
    with training_lock(store):
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


def refuse_if_locked(store) -> None:
    lock = read_lock(store)
    if lock is not None:
        raise PolicyError(f"weight updates for scenario '{store.scenario}' are locked since {lock.get('at')} "
                          f"({lock.get('reason')}); check the engine, then run 'reef train --unlock'")


def set_lock(store, info: dict) -> None:
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


def weight_before(store, release):
    """The weight release before `release` (what its gate compares with and a rollback reloads), or None."""
    earlier = None
    for rel in store.releases():
        if rel.release_id == release.release_id:
            return earlier
        if rel.operation in WEIGHT_OPERATIONS and isinstance(rel.meta.get("records"), dict):
            earlier = rel
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


@contextlib.contextmanager
def training_lock(store):
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

