"""The real model end to end (slow; skipped without reef[local]): `reef model serve-local` (SmolLM2-135M on this CPU)
behind a real `reef serve`, the chat agent as the gate's agent, and `reef eval` publishing the one rule the model
demonstrably follows ("Answer in Spanish.") on held-out prompts, with every call recorded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, reef_exe, run_reef
from gateway import Gateway

from reef_cli import local_model
from reef_cli.ledger import Ledger

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(local_model.packaged_model() is None or bool(local_model.missing_server_modules()),
                       reason="reef[local] is not installed (./install.sh --local)"),
    pytest.mark.timeout(900),
]

sys.path.insert(0, str(REPO / "bench"))


@pytest.fixture(scope="module")
def model_url(tmp_path_factory):
    log = tmp_path_factory.mktemp("model") / "server.log"
    proc = subprocess.Popen([reef_exe(), "model", "serve-local", "--port", "0", "--json", "--log", str(log)],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, f"serve-local did not start: {log.read_text() if log.exists() else ''}"
        yield json.loads(line)["url"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        proc.stdout.close()


def test_chat_agent_gets_a_real_answer(model_url, tmp_path):
    r = subprocess.run([sys.executable, "-m", "reef_cli.chat_agent", "-p", "What is the capital of France?"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "REEF_CHAT_URL": model_url, "REEF_CHAT_MAX_TOKENS": "32"})
    assert r.returncode == 0, r.stderr
    assert "paris" in r.stdout.lower()


def test_gate_publishes_a_rule_the_real_model_follows(model_url, tmp_path):
    import efficacy_checks
    from efficacy_real import CANARY, CHECK

    root = tmp_path / "proj"
    root.mkdir()
    assert run_reef("init", "--template", "minimal", cwd=root).returncode == 0
    (root / "evaluators").mkdir()
    (root / "evaluators" / "answer_check.py").write_text(Path(efficacy_checks.__file__).read_text())
    prompts = CANARY["spanish"][:6]
    tasks = "".join(f"  - id: es{i}\n    prompt: {json.dumps(p)}\n    check: {json.dumps(CHECK.format(kind='spanish'))}\n"
                    f"    timeout: 300\n" for i, p in enumerate(prompts, 1))
    (root / "canary").mkdir()
    (root / "canary" / "es.yaml").write_text("version: 1\ntasks:\n" + tasks)
    cfg = root / "harness.yaml"
    cfg.write_text(cfg.read_text().replace("  - canary/**\n", "  - canary/**\n  - evaluators/**\n") +
                   "gate:\n  tasks: [canary/*.yaml]\n  evaluators: [evaluators/**]\n  repeats: 1\n"
                   'agent: ["{python}", "-m", "reef_cli.chat_agent", "-p", "{prompt}"]\n')
    r = run_reef("publish", "-m", "suite", cwd=root)
    assert r.returncode == 0, r.stderr
    agents = root / "AGENTS.md"
    agents.write_text(agents.read_text().replace("<!-- reef:begin learned -->\n",
                                                 "<!-- reef:begin learned -->\n- Answer in Spanish.\n"))
    with Gateway(root, model_url) as gw:
        r = run_reef("eval", "--working-tree", "--json", cwd=root, timeout=600,
                     env={"REEF_CHAT_URL": gw.url + "/v1", "REEF_CHAT_MAX_TOKENS": "48"})
        gw.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    verdict = json.loads(r.stdout)
    assert verdict["decision"] == "publish" and verdict["interval"]["lo"] > 0
    calls = [x for x in Ledger(root / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default").iter_records()
             if x.kind == "inference"]
    assert len(calls) == verdict["episodes_spent"]  # every model call of every episode was recorded
