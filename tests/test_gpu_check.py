"""gpu/check.sh and its Python parts on CPU: the GPU run cannot happen in CI, so everything around it is run here —
`--cpu` takes every stage (reef init, train --init, records, train with a trainer, verify, reef serve) against the fake
SGLang and the fake slime trainer; the GPU path's own failures (no GPU, bad arguments, budget) print their one line;
gpu/one_step.py parses slime's flags and checks reef's export without torch (`--dry-run`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "gpu" / "check.sh"


def check(*args, tmp_path, **env):
    run_env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_DIR": str(tmp_path / "work"), **env}
    return subprocess.run(["bash", str(CHECK), *args], capture_output=True, text=True, env=run_env, timeout=300)


def test_cpu_mode_runs_every_stage_and_prints_one_pass_line(tmp_path):
    r = check("--cpu", tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr + (tmp_path / "work" / "check.log").read_text()
    assert r.stdout.count("\n") == 1 and r.stdout.startswith("gpu-check: PASS (cpu mode: fake engine and trainer) ")
    train = json.loads((tmp_path / "work" / "train.json").read_text())
    load_id = train["runtime_load_id"]
    assert f"load id {load_id} read back {load_id}, weight version matches" in r.stdout
    assert f"chat+stream answered by {load_id}/{load_id}" in r.stdout
    assert train["selection"]["records"] == 4 and train["gate_plan"] is None
    log = (tmp_path / "work" / "check.log").read_text()
    assert [ln.split(" (")[0] for ln in log.splitlines() if ln.startswith("== ")] == [
        "== python", "== serve", "== init", "== records", "== train", "== verify", "== gateway"]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_without_a_gpu_the_check_fails_at_once_naming_the_stage(tmp_path):
    r = check(tmp_path=tmp_path)
    assert r.returncode == 1
    assert r.stdout == (f"gpu-check: FAIL gpu — nvidia-smi not found: no NVIDIA driver on this machine "
                        f"(log: {tmp_path / 'work' / 'check.log'})\n")


def test_bad_argument_and_spent_budget_are_one_line_each(tmp_path):
    r = check("--gpu", tmp_path=tmp_path)
    assert r.returncode == 2 and r.stdout == "gpu-check: FAIL usage — unknown argument '--gpu' (expected --cpu or nothing)\n"
    r = check("--cpu", tmp_path=tmp_path, GPU_CHECK_BUDGET="5")
    assert r.returncode == 1 and r.stdout.startswith("gpu-check: FAIL python — no time left in the budget of 5s")
    helped = check("--help", tmp_path=tmp_path)
    assert helped.returncode == 0 and "--cpu" in helped.stdout and "GPU_CHECK_BUDGET" in helped.stdout


def test_one_step_dry_run_reads_reefs_export_and_slimes_flags(tmp_path):
    from reef_cli.weights.records import Sample, Selection, export

    samples = tuple(Sample(f"rec_{i}", i, [{"role": "user", "content": "q"}], (5, 6, 7, 8), 2, (1, 1), (-0.5, -0.4),
                           1.0, ("rep",), None, "1:a") for i in range(3))
    rows = tmp_path / "rollouts.jsonl"
    export(Selection(samples, 0, 3, ()), rows)
    argv = [sys.executable, str(ROOT / "gpu" / "one_step.py"), "--hf-checkpoint", "/models/base", "--prompt-data",
            str(rows), "--update-weight-disk-dir", str(tmp_path / "out"), "--rollout-num-gpus", "1", "--dry-run"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "slime flags passed through: --rollout-num-gpus 1" in r.stdout
    assert f"dry run: 3 row(s) from {rows}, checkpoint /models/base, output {tmp_path / 'out' / 'weight_v000001'}" in r.stdout
    assert not (tmp_path / "out").exists()
    rows.write_text(json.dumps({"tokens": [1, 2], "response_length": 2, "loss_mask": [1, 1], "reward": 1.0}) + "\n")
    bad = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr.strip().endswith(
        f"one_step: row 0 of {rows}: response_length 2, 2 token(s), 2 loss-mask value(s), reward 1.0 do not fit together")
