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


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--hf-checkpoint", required=True)
    p.add_argument("--prompt-data", required=True)
    p.add_argument("--update-weight-disk-dir", required=True)
    p.add_argument("--lr", type=float, default=2e-4)
    args, ignored = p.parse_known_args()
    print(f"one_step: slime flags passed through: {' '.join(ignored)}", flush=True)
    rows = [json.loads(line) for line in Path(args.prompt_data).read_text().splitlines() if line.strip()]
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
