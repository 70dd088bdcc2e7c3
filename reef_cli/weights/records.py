"""Which ledger records a weight recipe trains on, their rewards, and their export as slime rollout data.

The record shape consumed (written by `reef serve` in front of an SGLang upstream; tests write it directly):

    kind: "inference"                      (the recipe's select.record_kind)
    release_id / content_id: the release frozen at request start
    payload:
      prompt:          the request's messages (list) or text
      weight_version:  the version that answered (SGLang meta_info.weight_version / metadata.weight_version)
      session:         optional conversation id (openclawrl: the next turn of a session scores the previous one)
      task_id:         optional problem id (tttd: attempts grouped by it; any recipe's select.group_by field)
      retry:           optional bool, set when the request repeats the previous turn of its session
      tool_error:      optional bool, set when the request carries a failed tool result for the previous answer
      training:
        prompt_token_ids: [int]            the exact ids SGLang saw
        output_token_ids: [int]            the ids it generated
        output_logprobs:  [float]          one per output token (SGLang meta_info.output_token_logprobs[i][0])
        loss_mask:        [0|1]            optional, one per output token (default: all 1)

Rewards link to a record by id: a `report` record (`payload.score`, `payload.receipts` = [record ids]) or a `check`
record (a verifier's verdict: `payload.receipts`, and `payload.score` or `payload.passed`).

Canary traffic is never trained on: records of the weight gate's session (`reef-weight-gate-...`) and those a
`weight_canary` record lists as `held_out` are skipped, so the tasks that judge the weights stay held out.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..errors import InvalidInput
from .gate import CANARY_RECORD, GATE_SESSION_PREFIX

EXPORT_FORMAT = "reef-slime-rollouts/1"
PENDING_LIMIT = 10_000  # unrewarded records carried to the next run, newest kept


@dataclass(frozen=True)
class Sample:
    """One exported row; the field names are slime's `Sample` fields, plus prompt data keys slime reads."""

    record_id: str
    seq: int
    prompt: object
    tokens: tuple[int, ...]
    response_length: int
    loss_mask: tuple[int, ...]
    rollout_log_probs: tuple[float, ...]
    reward: float
    reward_from: tuple[str, ...]
    group: str | None
    weight_version: str | None

    def to_row(self, group_index: int) -> dict:
        return {
            "prompt": self.prompt,
            "label": None,
            "tokens": list(self.tokens),
            "response_length": self.response_length,
            "loss_mask": list(self.loss_mask),
            "rollout_log_probs": list(self.rollout_log_probs),
            "reward": self.reward,
            "group_index": group_index,
            "weight_versions": [self.weight_version] if self.weight_version else [],
            "metadata": {"reef_record_id": self.record_id, "reef_seq": self.seq,
                         "reef_reward_from": list(self.reward_from), "reef_group": self.group},
        }


@dataclass(frozen=True)
class Selection:
    samples: tuple[Sample, ...]
    from_seq: int  # exclusive: records after this were read
    through_seq: int  # the new high-water mark
    pending: tuple[str, ...]  # qualifying records still waiting for a reward
    skipped: dict = field(default_factory=dict)  # reason -> count

    def to_json(self) -> dict:
        return {"records": len(self.samples), "from_seq": self.from_seq, "through_seq": self.through_seq,
                "pending": len(self.pending), "skipped": dict(self.skipped),
                "samples": [{"record_id": s.record_id, "seq": s.seq, "reward": s.reward,
                             "tokens": len(s.tokens), "response_length": s.response_length,
                             "reward_from": list(s.reward_from), "group": s.group,
                             "weight_version": s.weight_version} for s in self.samples]}


def _training(payload: dict, require: Iterable[str]) -> tuple[list[int], list[int], list[float], list[int]] | str:
    """The token data of a record, or the reason it does not qualify."""
    t = payload.get("training")
    if not isinstance(t, dict):
        return "no token data"
    p_ids, o_ids, lps = t.get("prompt_token_ids"), t.get("output_token_ids"), t.get("output_logprobs")
    ints = lambda v: isinstance(v, list) and all(type(x) is int for x in v)  # noqa: E731
    if not ints(p_ids) or not ints(o_ids) or not o_ids:
        return "no token ids"
    if lps is None and "logprobs" not in require:
        lps = []
    if not isinstance(lps, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                            and math.isfinite(x) for x in lps):
        return "no logprobs"
    if lps and len(lps) != len(o_ids):
        return "logprobs do not match output tokens"
    if "logprobs" in require and not lps:
        return "no logprobs"
    mask = t.get("loss_mask")
    if mask is None:
        mask = [1] * len(o_ids)
    if not isinstance(mask, list) or len(mask) != len(o_ids) or any(m not in (0, 1) for m in mask):
        return "loss mask does not match output tokens"
    return list(p_ids), list(o_ids), [float(x) for x in lps], list(mask)


def _score_of(kind: str, payload: dict) -> float | None:
    score = payload.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
        return float(score)
    if kind == "check" and isinstance(payload.get("passed"), bool):
        return 1.0 if payload["passed"] else 0.0
    return None


def _last_user_text(prompt) -> str | None:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for m in reversed(prompt):
            if isinstance(m, dict) and m.get("role") == "user":
                c = m.get("content")
                return c if isinstance(c, str) else json.dumps(c, sort_keys=True)
    return None


def _next_state_reward(prev: dict, nxt: dict) -> float:
    """The next turn of a session judges the previous answer: a retry or a failed tool result says it did not do
    the job (0.0); a conversation that moves on says it did (1.0)."""
    if nxt.get("retry") is True or nxt.get("tool_error") is True:
        return 0.0
    a, b = _last_user_text(prev.get("prompt")), _last_user_text(nxt.get("prompt"))
    if a is not None and a == b:
        return 0.0
    return 1.0


def select(ledger, recipe, *, from_seq: int = 0, carried: Iterable[str] = ()) -> Selection:
    """Stream the ledger after `from_seq` once and pick the records `recipe` trains on.

    `carried` are records before the mark that qualified but had no reward yet; a reward arriving now brings them
    in. Records that qualify but still have no reward are returned as `pending` for the next run.
    """
    from ..errors import NotFound

    sel, rew = recipe.select, recipe.reward
    kind = sel.get("record_kind", "inference")
    require = tuple(sel.get("require") or ())
    sources = tuple(rew.get("sources") or ())
    group_by = sel.get("group_by")
    skipped: dict[str, int] = {}
    candidates: dict[str, tuple[int, dict]] = {}  # record id -> (seq, payload)
    order: list[str] = []
    rewards: dict[str, dict[str, tuple[float, str]]] = {}  # record id -> source -> (reward, from record id)
    sessions: dict[str, list[str]] = {}
    held_out: set[str] = set()
    through = from_seq
    carried = set(carried)

    for rec in ledger.iter_records(from_seq=from_seq + 1 if from_seq else None):
        if rec.seq <= from_seq:
            continue
        through = rec.seq
        payload = rec.payload
        if rec.kind == kind:
            candidates[rec.record_id] = (rec.seq, payload)
            order.append(rec.record_id)
        elif rec.kind == CANARY_RECORD:
            held_out.update(x for x in payload.get("held_out") or () if isinstance(x, str))
        elif rec.kind in ("report", "check") and rec.kind in sources:
            score = _score_of(rec.kind, payload)
            receipts = payload.get("receipts") or ([payload["receipt"]] if isinstance(payload.get("receipt"), str) else [])
            if score is None:
                continue
            for rid in receipts:
                if isinstance(rid, str):
                    rewards.setdefault(rid, {})[rec.kind] = (score, rec.record_id)  # the latest wins

    for rid in sorted(carried - set(candidates)):  # earlier records whose reward may have arrived since
        try:
            old = ledger.get(rid)
        except NotFound:
            continue
        if old.kind == kind:
            candidates[rid] = (old.seq, old.payload)
            order.insert(0, rid)

    for rid in [r for r in candidates if r in held_out or str(candidates[r][1].get("session") or "")
                .startswith(GATE_SESSION_PREFIX)]:
        del candidates[rid]
        skipped["weight-gate canary traffic (held out)"] = skipped.get("weight-gate canary traffic (held out)", 0) + 1
    order = [r for r in order if r in candidates]

    if "next_state" in sources:  # sessions span runs: a carried turn is judged by the next one recorded since
        for rid in sorted(candidates, key=lambda r: candidates[r][0]):
            if isinstance(candidates[rid][1].get("session"), str):
                sessions.setdefault(candidates[rid][1]["session"], []).append(rid)
        for ids in sessions.values():
            for prev, nxt in zip(ids, ids[1:]):
                score = _next_state_reward(candidates[prev][1], candidates[nxt][1])
                rewards.setdefault(prev, {}).setdefault("next_state", (score, nxt))

    samples: list[Sample] = []
    pending: list[str] = []
    for rid in sorted(set(order), key=lambda r: candidates[r][0]):
        seq, payload = candidates[rid]
        data = _training(payload, require)
        if isinstance(data, str):
            skipped[data] = skipped.get(data, 0) + 1
            continue
        found = rewards.get(rid, {})
        source = next((s for s in sources if s in found), None)
        if source is None:
            pending.append(rid)
            continue
        p_ids, o_ids, lps, mask = data
        group = str(payload.get(group_by)) if group_by and payload.get(group_by) is not None else None
        if group_by and group is None:
            skipped[f"no {group_by}"] = skipped.get(f"no {group_by}", 0) + 1
            continue
        reward, by = found[source]
        samples.append(Sample(rid, seq, payload.get("prompt"), tuple(p_ids + o_ids), len(o_ids), tuple(mask),
                              tuple(lps), reward, (by,), group,
                              str(payload["weight_version"]) if payload.get("weight_version") is not None else None))

    samples = _apply_groups(samples, sel, rew, skipped)
    limit = sel.get("max_records")
    if limit and len(samples) > limit:
        skipped["over max_records"] = skipped.get("over max_records", 0) + len(samples) - limit
        samples = samples[-limit:]
    return Selection(tuple(samples), from_seq, through, tuple(pending[-PENDING_LIMIT:]), skipped)


def _apply_groups(samples: list[Sample], sel: dict, rew: dict, skipped: dict) -> list[Sample]:
    if not sel.get("group_by"):
        return samples
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    keep: list[Sample] = []
    minimum = int(sel.get("min_group_size", 1))
    for members in groups.values():
        if len(members) < minimum:
            skipped["group too small"] = skipped.get("group too small", 0) + len(members)
            continue
        if rew.get("center") == "group_mean":
            mean = sum(s.reward for s in members) / len(members)
            members = [Sample(**{**s.__dict__, "reward": s.reward - mean}) for s in members]
        keep.extend(members)
    return sorted(keep, key=lambda s: s.seq)


def export(selection: Selection, path: Path) -> dict:
    """Write the selection as slime prompt data (JSONL, one sample per line); returns a summary for the run."""
    if not selection.samples:
        raise InvalidInput("no qualifying records to train on")
    group_ids: dict[str | None, int] = {}
    lines = []
    for i, s in enumerate(selection.samples):
        key = s.group if s.group is not None else f"#{i}"
        idx = group_ids.setdefault(key, len(group_ids))
        lines.append(json.dumps(s.to_row(idx), sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    from ..durable import write_atomic

    write_atomic(path, ("\n".join(lines) + "\n").encode("utf-8"))
    return {"format": EXPORT_FORMAT, "path": str(path), "samples": len(lines), "groups": len(group_ids)}
