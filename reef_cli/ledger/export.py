"""Export: ledger records in other systems' shapes."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInput
from .record import Record, canonical_json

def to_langfuse_score(record: Record) -> list[dict]:
    """Langfuse score bodies for a `report` record, one per receipt (trace id): the score lands on every trace
    the feedback was about. Ids are derived from the record id and position, so re-exporting upserts."""
    if record.kind != "report":
        raise InvalidInput(f"record {record.record_id} is a '{record.kind}' record; only 'report' records carry scores")
    payload = record.payload
    score = payload.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise InvalidInput(f"report record {record.record_id} has no numeric 'score'")
    feedback = payload.get("feedback")
    if feedback is None or isinstance(feedback, str):
        comment = feedback
    else:
        comment = canonical_json(feedback).decode("utf-8")
    receipts = payload.get("receipts") or []
    if isinstance(receipts, (str, dict)):
        receipts = [receipts]
    scores = []
    for position, receipt in enumerate(receipts):
        observation = None
        if isinstance(receipt, dict):
            trace = receipt.get("trace_id") or receipt.get("traceId")
            observation = receipt.get("observation_id") or receipt.get("observationId")
        else:
            trace = receipt
        if not isinstance(trace, str) or not trace:
            raise InvalidInput(f"report record {record.record_id}: receipt {position} has no trace id")
        body: dict[str, Any] = {
            "id": f"{record.record_id}-{position}",
            "name": "reef.score",
            "value": float(score),
            "dataType": "NUMERIC",
            "comment": comment,
            "traceId": trace,
            "metadata": {
                "record_id": record.record_id,
                "scenario": record.scenario,
                "release_id": record.release_id,
                "content_id": record.content_id,
                "created_at": record.created_at,
                "seq": record.seq,
            },
        }
        if observation:
            body["observationId"] = observation
        scores.append(body)
    return scores
