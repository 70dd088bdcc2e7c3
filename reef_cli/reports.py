"""Reports: a score and the "why" attached to receipts. A single scalar loses the reason, so text is first-class."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from .errors import InvalidInput, NotFound

FEEDBACK_MAX = 64 * 1024


def parse_score(raw) -> float:
    """Finite numbers only: booleans, NaN, infinities and strings are refused."""
    if isinstance(raw, bool):
        raise InvalidInput(f"--score {raw}: a score must be a finite number, not a boolean")
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() in ("true", "false", "yes", "no"):
            raise InvalidInput(f"--score {raw}: a score must be a finite number, not a boolean")
        try:
            value = float(text)
        except ValueError:
            raise InvalidInput(f"--score {raw!r}: a score must be a finite number") from None
    elif isinstance(raw, (int, float)):
        value = float(raw)
    else:
        raise InvalidInput(f"--score {raw!r}: a score must be a finite number")
    if not math.isfinite(value):
        raise InvalidInput(f"--score {raw}: a score must be a finite number, not NaN or infinity")
    return value


def load_feedback_json(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8") if str(path) != "-" else sys.stdin.read()
    except FileNotFoundError:
        raise InvalidInput(f"--feedback-json {path}: no such file") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"--feedback-json {path}: not UTF-8 text") from None
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"--feedback-json {path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise InvalidInput(f"--feedback-json {path}: feedback must be a JSON object (keys like lesson, do, dont)")
    return obj


def _owner_scenario(store, receipt: str) -> str | None:
    from .ledger import Ledger
    from .project import ScenarioPaths

    for name in store.project.scenarios():
        if name == store.scenario:
            continue
        other = ScenarioPaths(store.project, name).ledger_path
        if other.exists():
            try:
                Ledger(other, name).get(receipt)
                return name
            except NotFound:
                continue
    return None


def report(store, score, *, feedback: str | dict | None = None, receipts: list[str], record_id: str | None = None):
    """Validate everything first, then append one report record; nothing is written on a refusal."""
    value = parse_score(score)
    if not receipts:
        raise InvalidInput("no receipt to report on: this shell has no unreported run; pass --receipt ID")
    if isinstance(feedback, str) and len(feedback.encode()) > FEEDBACK_MAX:
        raise InvalidInput(f"--feedback is {len(feedback.encode())} bytes; the limit is {FEEDBACK_MAX}")
    ledger = store.ledger()
    releases = []
    for rid in receipts:
        try:
            rec = ledger.get(rid)
        except NotFound:
            owner = _owner_scenario(store, rid)
            if owner:
                raise InvalidInput(f"receipt {rid} belongs to scenario '{owner}', not '{store.scenario}'") from None
            raise InvalidInput(f"unknown receipt {rid} in scenario '{store.scenario}'") from None
        if rec.kind not in ("interaction", "inference"):  # a run, or an exchange recorded by reef serve
            raise InvalidInput(f"record {rid} is a {rec.kind} record, not a receipt of a run")
        releases.append((rec.release_id, rec.content_id))
    if feedback is not None:
        from .redact import redact_obj  # its patterns cost ~3 ms to compile: only when there is feedback

        feedback = redact_obj(feedback)[0]
    payload = {"score": value, "feedback": feedback, "receipts": list(receipts)}
    if len({r for r, _ in releases}) > 1:
        payload["receipt_releases"] = {rid: rel for rid, (rel, _) in zip(receipts, releases)}
    release_id, content_id = releases[0]
    return ledger.append("report", payload, release_id=release_id, content_id=content_id, record_id=record_id)
