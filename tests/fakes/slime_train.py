"""A stand-in for slime's train.py: parses slime's flags (unknown ones pass, as slime hands --sglang-* on), reads the
prompt data reef exported, and writes an HF-shaped checkpoint where slime's full disk weight sync would
(`--update-weight-disk-dir/weight_v000001/`). Its `fake_weights.json` bias is derived from the rewards, so the fake
engine visibly answers differently once the checkpoint is loaded.

Faults through the environment: FAKE_TRAINER_EXIT=N (exit N after logging), FAKE_TRAINER_NO_CKPT=1, FAKE_TRAINER_SLEEP=S
(sleep S seconds first, in small steps, so SIGINT/SIGTERM tests can interrupt it), FAKE_TRAINER_BIAS=N (force a bias).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(allow_abbrev=False)
    for flag in ("--hf-checkpoint", "--load", "--save", "--prompt-data", "--input-key", "--label-key", "--metadata-key",
                 "--rollout-function-path", "--update-weight-transport", "--update-weight-disk-dir"):
        p.add_argument(flag, required=flag in ("--hf-checkpoint", "--prompt-data", "--update-weight-disk-dir"))
    for flag in ("--rollout-batch-size", "--num-rollout", "--rollout-num-gpus"):
        p.add_argument(flag, type=int)
    p.add_argument("--update-weight-disk-keep-files", action="store_true")
    args, unknown = p.parse_known_args()
    print(f"fake slime: hf-checkpoint={args.hf_checkpoint} prompt-data={args.prompt_data} extra={unknown}", flush=True)
    rows = [json.loads(line) for line in Path(args.prompt_data).read_text().splitlines() if line.strip()]
    for row in rows:
        assert len(row["tokens"]) >= row["response_length"] == len(row["loss_mask"]) == len(row["rollout_log_probs"])
        assert row["metadata"]["reef_record_id"]
    assert args.rollout_batch_size == len(rows), (args.rollout_batch_size, len(rows))
    print(f"fake slime: {len(rows)} sample(s), mean reward {sum(r['reward'] for r in rows) / len(rows):.3f}", flush=True)
    sleep = float(os.environ.get("FAKE_TRAINER_SLEEP", "0"))
    end = time.monotonic() + sleep
    while time.monotonic() < end:
        time.sleep(0.05)
    if os.environ.get("FAKE_TRAINER_EXIT"):
        print("fake slime: CUDA error: out of memory (simulated)", flush=True)
        return int(os.environ["FAKE_TRAINER_EXIT"])
    if os.environ.get("FAKE_TRAINER_NO_CKPT"):
        return 0
    out = Path(args.update_weight_disk_dir) / "weight_v000001"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"architectures": ["FakeForCausalLM"], "trained_from": args.hf_checkpoint}))
    bias = int(os.environ.get("FAKE_TRAINER_BIAS", sum(int(r["reward"] * 10) for r in rows) + 1))
    (out / "fake_weights.json").write_text(json.dumps({"bias": bias}))
    (out / "model.safetensors").write_bytes(bytes(range(256)) * 4 + str(bias).encode())
    print(f"fake slime: saved {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
