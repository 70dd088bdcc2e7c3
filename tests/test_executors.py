"""Where episodes run: `--executor local|ray`. The Ray tests start a real local Ray instance (reef[ray]) and compare
its journal and verdict with the local executor's on the same project and seed; one kills the Ray worker process in
the middle of an episode and expects Ray to retry it."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from conftest import example_suite_project, set_block

from reef_cli.config import GateConfig, parse_config
from reef_cli.errors import InvalidInput
from reef_cli.executors import ExecutorSpec, ray_available

RAY = pytest.mark.skipif(not ray_available(), reason="Ray is not installed (pip install 'reef[ray]')")


def test_executor_spec_flags_env_and_errors():
    assert ExecutorSpec.of(environ={}) == ExecutorSpec("local", None)
    assert ExecutorSpec.of(environ={"REEF_EXECUTOR": "ray"}) == ExecutorSpec("ray", None)
    assert ExecutorSpec.of("local", environ={"REEF_EXECUTOR": "ray"}) == ExecutorSpec("local", None)
    assert ExecutorSpec.of("ray", "10.0.0.1:6379", environ={}) == ExecutorSpec("ray", "10.0.0.1:6379")
    assert ExecutorSpec.of(None, "10.0.0.1:6379", environ={}) == ExecutorSpec("ray", "10.0.0.1:6379")
    gate = GateConfig(executor="ray", ray_address="h:1")
    assert ExecutorSpec.of(environ={}, config=gate) == ExecutorSpec("ray", "h:1")  # harness.yaml
    assert ExecutorSpec.of(environ={"REEF_EXECUTOR": "local", "REEF_RAY_ADDRESS": ""}, config=GateConfig(
        executor="ray")) == ExecutorSpec("local", None)  # env over harness.yaml
    with pytest.raises(InvalidInput, match="unknown executor 'dask'; use one of: local, ray"):
        ExecutorSpec.of("dask", environ={})
    with pytest.raises(InvalidInput, match="--ray-address needs --executor ray"):
        ExecutorSpec.of("local", "10.0.0.1:6379", environ={})


def test_harness_yaml_gate_executor_is_validated():
    assert parse_config("version: 1\ninclude: ['**']\ngate:\n  executor: ray\n  ray_address: 'h:6379'\n").gate.executor == "ray"
    with pytest.raises(InvalidInput, match="executor"):
        parse_config("version: 1\ninclude: ['**']\ngate:\n  executor: dask\n")


def test_eval_rejects_an_unknown_executor_with_exit_4(reef, tmp_path):
    r = reef("-C", str(tmp_path), "eval", "--executor", "dask")
    assert r.code == 4 and r.err.strip() == "reef: error: unknown executor 'dask'; use one of: local, ray"


def test_evolve_takes_the_executor_flags_and_checks_them_before_any_work(reef, tmp_path):
    assert reef("-C", str(tmp_path), "init").code == 0
    r = reef("-C", str(tmp_path), "harness", "evolve", "--executor", "dask")
    assert r.code == 4 and r.err.strip() == "reef: error: unknown executor 'dask'; use one of: local, ray"
    r = reef("-C", str(tmp_path), "harness", "evolve", "--executor", "local", "--ray-address", "127.0.0.1:6379")
    assert r.code == 4 and "--ray-address needs --executor ray" in r.err
    assert reef("-C", str(tmp_path), "harness", "evolve", "--executor", "local", "--json").code == 0


def gate_project(reef, root: Path, agent: str | None = None) -> Path:
    """The example suite and agent (as tests/test_gate.py builds it), with a candidate in the working tree."""
    example_suite_project(reef, root, agent)
    assert reef("-C", str(root), "publish", "-m", "canary suite").code == 0
    set_block(root, "- Always end files with a trailing newline.", "- Use tabs for indentation in Makefiles.")
    return root


def journal(root: Path) -> dict:
    (path,) = (root / ".reef/scenarios/default/gate").glob("*/journal.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["key"]: r["score"] for r in rows}


def verdict_of(r) -> dict:
    assert r.code in (0, 1), r.err
    assert r.out.startswith("{"), (r.out[:2000], r.err[-2000:])
    v = json.loads(r.out)
    return {k: v[k] for k in ("decision", "reason", "interval", "per_task", "episodes_spent", "stage")}


@RAY
@pytest.mark.slow
def test_ray_gives_the_local_verdict_and_journal(reef, tmp_path):
    local = gate_project(reef, tmp_path / "local")
    ray_p = gate_project(reef, tmp_path / "ray")
    a = verdict_of(reef("-C", str(local), "eval", "--json", "--workers", "2"))
    b = verdict_of(reef("-C", str(ray_p), "eval", "--json", "--workers", "2", "--executor", "ray"))
    assert a == b and a["decision"] == "publish"
    assert journal(local) == journal(ray_p) and len(journal(local)) == a["episodes_spent"]
    # the budget still binds: both executors stop at the same episode and give the same (budget) verdict
    a = verdict_of(reef("-C", str(local), "eval", "--json", "--max-episodes", "6", "--policy", "tally"))
    b = verdict_of(reef("-C", str(ray_p), "eval", "--json", "--max-episodes", "6", "--policy", "tally",
                        "--executor", "ray"))
    assert a == b and a["episodes_spent"] <= 6


@RAY
@pytest.mark.slow
def test_ray_retries_an_episode_whose_worker_died(reef, tmp_path):
    marker = tmp_path / "killed-once"
    agent = tmp_path / "agent.sh"
    # The first typo-fix episode kills the Ray worker that runs it (its parent: run_command starts the agent with
    # Popen from the worker), as an OOM kill or a lost node would; Ray retries the task on a fresh worker.
    dirs = tmp_path / "dirs.log"
    agent.write_text("#!/bin/sh\n"
                     f'echo "$REEF_HARNESS_DIR $REEF_SUITE_DIR" >> {dirs}\n'
                     f'if [ "$REEF_TASK_ID" = typo-fix ] && [ ! -e {marker} ]; then touch {marker}; '
                     "kill -9 $PPID; sleep 5; fi\n"
                     f'exec {sys.executable} -m reef_cli.example_agent "$@"\n')
    agent.chmod(0o755)
    root = gate_project(reef, tmp_path / "proj", agent=str(agent))
    v = verdict_of(reef("-C", str(root), "eval", "--json", "--workers", "2", "--executor", "ray"))
    assert marker.exists()
    assert v["decision"] == "publish" and not json.loads(reef("-C", str(root), "eval", "--json").out).get("errors")
    assert len(journal(root)) == v["episodes_spent"]
    # the harness came through Ray's object store: each worker rebuilt it, none read the driver's .reef/
    lines = dirs.read_text().splitlines()
    assert lines and all("/reef-ray-trees-" in line and str(root) not in line for line in lines)
