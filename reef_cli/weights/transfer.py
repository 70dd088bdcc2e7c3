"""Moving weights into the engine and recording them: hot-swap a checkpoint, check it still holds the bytes its
manifest names, publish the release that names them; on a failure one `train_failed` record and, where the engine
may serve weights no release names, the scenario's lock. A rollback (`reef train --rollback`, or the weight gate's)
is the same transfer of an earlier release's checkpoint.

Its own room because the step (train.py), its gate and `reef train --rollback` share this one path to the engine,
with its rules on signals: SIGINT and SIGTERM are held while a failure is recorded, and SIGTERM is a Ctrl-C for
the length of a step.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ..errors import ExitCode, InvalidInput, ReefError
from ..ids import new_id
from ..times import format_time, utc_now
from .state import (BASE_FORMAT, MANIFEST_PATH, WEIGHT_OPERATIONS, checkpoint_manifest, refuse_if_locked, set_lock,
                    training_lock)


class TrainInterrupted(ReefError):
    """Ctrl-C (or SIGTERM) during `reef train`, recorded: the message says what the engine and the head were left
    with."""

    exit_code = ExitCode.INTERRUPTED


@contextlib.contextmanager
def sigterm_interrupts():
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


def recorder(store, run_id: str, recipe: str, url: str):
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
                set_lock(store, redact_obj({"at": format_time(utc_now()), "run_id": run_id, "stage": stage,
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


def restore(store, engine, target, *, run_id: str, reason: str, evidence, meta: dict, failed):
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
        return publish_weights(store, named, head, version, published, "rollback", reason, tuple(evidence), failed)

    return swap_and_publish(store, engine, ckpt, version, failed, "rollback", publish,
                             None if named.get("format") == BASE_FORMAT else named)


def swap_and_publish(store, engine, ckpt: str, version: str, failed, stage: str, publish, manifest: dict | None):
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
    refuse_if_locked(store)
    target, head = store.find(ref), store.require_head()
    if target.operation not in WEIGHT_OPERATIONS:
        raise InvalidInput(f"release {target.release_id} is not a weight release")
    if target.content_id == head.content_id:
        return None
    url = engine_url or environ.get("REEF_ENGINE_URL")
    if not url:
        raise InvalidInput("no engine: pass --engine URL (the SGLang server to hot-swap) or set REEF_ENGINE_URL")
    run_id = new_id("trn")
    failed = recorder(store, run_id, store.info().recipe, url)
    engine = Engine(url)
    from .gate import store_verdict, stored_verdict

    with training_lock(store), sigterm_interrupts():
        rel = restore(store, engine, target, run_id=run_id, failed=failed, evidence=(target.release_id,),
                       reason=f"rollback to step {target.step} ({target.release_id})", meta={})
        verdict = stored_verdict(store, target)
        if verdict is not None:  # the same weights: the next weight gate compares with their verdict, not re-measures
            store_verdict(store, rel, verdict)
        return rel


def publish_weights(store, manifest: dict, head, version: str, meta: dict, operation: str, reason: str, evidence,
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

