"""A one-step stand-in for slime on the GPU check: same flags, same prompt data, same checkpoint layout.

It loads the HF checkpoint named by --hf-checkpoint, takes one policy-gradient step on the rows reef exported
(loss = -reward * sum of the masked response tokens' log-probs, AdamW), and saves the result where slime's full disk
weight sync would: <--update-weight-disk-dir>/weight_v000001. slime itself cannot be installed on that machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read_rows(path: str) -> list[dict]:
    """The rows reef exported, checked the way the step uses them (one clear line instead of a CUDA-side error)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"one_step: {path} holds no rows")
    for i, row in enumerate(rows):
        n, tokens, mask = int(row["response_length"]), row["tokens"], row["loss_mask"]
        if not 0 < n < len(tokens) or len(mask) != n or not isinstance(row["reward"], (int, float)):
            raise SystemExit(f"one_step: row {i} of {path}: response_length {n}, {len(tokens)} token(s), "
                             f"{len(mask)} loss-mask value(s), reward {row['reward']!r} do not fit together")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--hf-checkpoint", required=True)
    p.add_argument("--prompt-data", required=True)
    p.add_argument("--update-weight-disk-dir", required=True)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--dry-run", action="store_true", help="parse the flags and check the rows; no torch, no checkpoint")
    args, ignored = p.parse_known_args(argv)
    print(f"one_step: slime flags passed through: {' '.join(ignored)}", flush=True)
    rows = read_rows(args.prompt_data)
    if args.dry_run:
        print(f"one_step: dry run: {len(rows)} row(s) from {args.prompt_data}, checkpoint {args.hf_checkpoint}, "
              f"output {Path(args.update_weight_disk_dir) / 'weight_v000001'}", flush=True)
        return 0
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(args.hf_checkpoint, torch_dtype=torch.float32).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_total = torch.zeros((), device="cuda")
    for row in rows:
        tokens = torch.tensor([row["tokens"]], device="cuda")
        n = int(row["response_length"])
        logits = model(tokens).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)[0, -n:]
        mask = torch.tensor(row["loss_mask"], device="cuda", dtype=logp.dtype)
        loss_total = loss_total - float(row["reward"]) * (logp * mask).sum() / max(1.0, float(mask.sum()))
    loss = loss_total / len(rows)
    loss.backward()
    opt.step()
    print(f"one_step: {len(rows)} row(s), loss {loss.item():.4f}", flush=True)
    out = Path(args.update_weight_disk_dir) / "weight_v000001"
    out.mkdir(parents=True, exist_ok=True)
    base = json.loads((Path(args.hf_checkpoint) / "config.json").read_text())
    dtype = getattr(torch, str(base.get("torch_dtype") or base.get("dtype") or "bfloat16"), torch.bfloat16)
    model.to(dtype).save_pretrained(out, safe_serialization=True)  # the dtype the engine serves
    AutoTokenizer.from_pretrained(args.hf_checkpoint).save_pretrained(out)
    print(f"one_step: saved {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
