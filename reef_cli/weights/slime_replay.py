"""slime's rollout function for records reef already has: it replays the exported rows instead of generating.

Loaded inside slime's process by `--rollout-function-path reef_cli.weights.slime_replay.generate_rollout` (so
reef must be importable there). Each JSONL row of `--prompt-data` (written by `records.export`) already holds the
exact tokens SGLang saw and produced, the rollout log-probs, the loss mask and the reward; they become slime
`Sample`s grouped by `group_index`, so no engine is needed during training. slime is imported here only.
"""

from __future__ import annotations

import json


def load_rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def group_rows(rows: list[dict]) -> list[list[dict]]:
    """Rows in groups, in order of first appearance (slime normalises advantages within a group)."""
    groups: dict[int, list[dict]] = {}
    for row in rows:
        groups.setdefault(int(row.get("group_index", len(groups))), []).append(row)
    return list(groups.values())


def generate_rollout(args, rollout_id, data_source, evaluation=False):
    from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput
    from slime.utils.types import Sample

    if evaluation:
        return RolloutFnEvalOutput(data={})
    out = []
    for members in group_rows(load_rows(args.prompt_data)):
        group = []
        for i, row in enumerate(members):
            sample = Sample(
                group_index=int(row.get("group_index", 0)), index=i, prompt=row.get("prompt", ""),
                tokens=list(row["tokens"]), response_length=int(row["response_length"]),
                loss_mask=list(row["loss_mask"]), rollout_log_probs=list(row["rollout_log_probs"]) or None,
                reward=float(row["reward"]), weight_versions=list(row.get("weight_versions") or []),
                metadata=dict(row.get("metadata") or {}),
            )
            sample.status = Sample.Status.COMPLETED
            group.append(sample)
        out.append(group)
    return RolloutFnTrainOutput(samples=out)
