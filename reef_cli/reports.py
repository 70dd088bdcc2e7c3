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
    return value + 0.0  # -0 is 0: it was stored and echoed as "reported -0"


FEEDBACK_DEPTH = 16  # a lesson is a few keys deep; deeper is a mistake or an attack on the recursive code after it


class _NotJSON(ValueError):
    pass


def _not_json(constant: str):
    """Python's json reads NaN and Infinity, which JSON has not: the record could not be stored later."""
    raise _NotJSON(constant)


def load_feedback_json(path: Path) -> dict:
    """The object in `--feedback-json PATH` (- for stdin), read at most FEEDBACK_MAX bytes: every way it can be
    wrong is one InvalidInput naming the file."""
    try:
        if str(path) == "-":
            raw = sys.stdin.buffer.read(FEEDBACK_MAX + 1)
        else:
            with open(path, "rb") as f:
                raw = f.read(FEEDBACK_MAX + 1)
    except FileNotFoundError:
        raise InvalidInput(f"--feedback-json {path}: no such file") from None
    except IsADirectoryError:
        raise InvalidInput(f"--feedback-json {path}: is a directory, not a JSON file") from None
    except OSError as exc:
        raise InvalidInput(f"--feedback-json {path}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > FEEDBACK_MAX:
        raise InvalidInput(f"--feedback-json {path}: larger than the {FEEDBACK_MAX}-byte limit for feedback")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"--feedback-json {path}: not UTF-8 text") from None
    try:
        obj = json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise InvalidInput(f"--feedback-json {path}: nested more than {FEEDBACK_DEPTH} levels deep") from None
    except _NotJSON as exc:
        raise InvalidInput(f"--feedback-json {path}: not valid JSON ({exc} is not a JSON value)") from None
    except ValueError as exc:
        raise InvalidInput(f"--feedback-json {path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise InvalidInput(f"--feedback-json {path}: feedback must be a JSON object (keys like lesson, do, dont)")
    return clean_feedback(obj, f"--feedback-json {path}")


def clean_feedback(feedback: str | dict | None, source: str = "--feedback"):
    """Feedback as it may be stored: NUL bytes stripped (they end C strings in every tool downstream), valid Unicode
    (argv carries undecodable bytes as lone surrogates), at most FEEDBACK_DEPTH levels and FEEDBACK_MAX bytes."""
    if feedback is None:
        return None

    def clean(value, depth: int):
        if depth > FEEDBACK_DEPTH:
            raise InvalidInput(f"{source}: nested more than {FEEDBACK_DEPTH} levels deep")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInput(f"{source}: not valid UTF-8 text") from None
            return value.replace("\x00", "")
        if isinstance(value, dict):
            return {clean(k, depth + 1): clean(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v, depth + 1) for v in value]
        return value

    out = clean(feedback, 0)
    size = len(out.encode("utf-8")) if isinstance(out, str) else len(json.dumps(out, ensure_ascii=False).encode("utf-8"))
    if size > FEEDBACK_MAX:
        raise InvalidInput(f"{source} is {size} bytes; the limit is {FEEDBACK_MAX}")
    return out


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
    feedback = clean_feedback(feedback, "--feedback-json" if isinstance(feedback, dict) else "--feedback")
    if not receipts:
        raise InvalidInput("no receipt to report on: this shell has no unreported run; pass --receipt ID")
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
