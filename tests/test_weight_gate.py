"""The weight gate from canary tasks: `reef train` judges the new weights by running the project's canary tasks
through `reef serve` in front of the engine and rolls them back when they lose to the previous weights' verdict.

Real seams: the fake SGLang server (tests/fakes/sglang_server.py), the fake slime trainer (its FAKE_TRAINER_BIAS
moves the tokens the new weights answer with), a real `reef serve` subprocess started by reef train, a real canary
agent subprocess calling it (tests/fakes/canary_agent.py) and a real check scoring the answer. The checks pass when
the first answered token lies in [400, 700): the base weights (bias 0) fail them, bias 450 passes, bias 900 fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from test_weights import FAKES, SCEN, _head, _prime, ledger_of, swap_args, train

AGENT = FAKES / "canary_agent.py"
TASKS = """version: 1
tasks:
  - id: capital
    prompt: Name the capital of France.
    check: {check}
    timeout: 60
  - id: sum
    prompt: What is 2 + 2?
    check: {check}
    tags: [sentinel]
    timeout: 60
"""


@pytest.fixture
def engine(tmp_path):
    from fakes.sglang_server import FakeSGLang

    base = tmp_path / "base-model"  # a real directory, so reloading the base weights (a rollback to step 1) works
    base.mkdir()
    (base / "config.json").write_text("{}")
    fake = FakeSGLang(str(base)).start()
    yield fake
    fake.stop()


@pytest.fixture
def gated(reef, tmp_path, engine):
    """A project whose default (harness) scenario publishes two canary tasks and an agent, and a weights scenario
    started from the engine's base weights."""
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init", "--template", "minimal").code == 0
    (root / "canary").mkdir()
    (root / "canary" / "tasks.yaml").write_text(TASKS.format(check=f"{sys.executable} {AGENT} check 400 700"))
    cfg = root / "harness.yaml"
    cfg.write_text(cfg.read_text() + f'gate:\n  repeats: 1\nagent: ["{{python}}", "{AGENT}", "{{prompt}}"]\n')
    r = reef("-C", str(root), "publish", "-m", "canary tasks for the weight gate")
    assert r.code == 0, r.err
    r = reef("-C", str(root), "-s", SCEN, "train", "--recipe", "sao", "--engine", engine.url, "--init")
    assert r.code == 0, r.err
    return root


def _kinds(led, kind):
    return [r.payload for r in led.iter_records(kind=kind)]


def test_a_worse_step_is_rolled_back_and_a_better_one_publishes(reef, gated, engine, monkeypatch):
    led = ledger_of(gated)
    base = _head(reef, gated)
    plan = json.loads(train(reef, gated, "--dry-run", "--json", recipe=None).out)
    assert plan["gate_plan"] == "2 canary task(s) x 1 of scenario 'default' (release 2)"
    # better: the base weights are measured first (no verdict yet), then the new ones; both through reef serve
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "450")
    r = train(reef, gated, *swap_args(engine), "--json", recipe=None)
    assert r.code == 0, r.err
    kept = json.loads(r.out)
    assert kept["gate"]["decision"] == "keep" and kept["gate"]["baseline"] == 0.0 and kept["gate"]["score"] == 1.0
    assert kept["gate"]["baseline_release_id"] == base["release_id"] and not kept["rolled_back"]
    measured = _kinds(led, "weight_canary")
    assert [m["runtime_load_id"] for m in measured] == [base["runtime_load_id"], kept["runtime_load_id"]]
    assert [m["per_task"] for m in measured] == [{"capital": 0.0, "sum": 0.0}, {"capital": 1.0, "sum": 1.0}]
    assert all(len(m["held_out"]) == 2 and m["gateway"] == "own" for m in measured)
    run_dir = Path(kept["run_dir"])
    assert sorted(p.name for p in (run_dir / "gate").iterdir()) == ["step-1", "step-2"]
    assert not list(run_dir.glob("gate/*/harness*"))  # the read-only harness copies are gone
    # every canary answer was recorded by the gate's serve, checked against the head's load id, and held out
    answers = {r.record_id: r.payload for r in led.iter_records(kind="inference") if r.payload.get("session", "")
               and r.payload["session"].startswith("reef-weight-gate-")}
    assert set(answers) == {x for m in measured for x in m["held_out"]}
    assert sorted(p["weight_version"] for p in answers.values()) == sorted(
        [base["runtime_load_id"]] * 2 + [kept["runtime_load_id"]] * 2)
    assert all(p["provenance"]["ok"] and p["outcome"] == "ok" for p in answers.values())
    # worse: lost to the stored verdict -> previous checkpoint reloaded, a rollback release, exit 4, one line
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "900")
    r = train(reef, gated, *swap_args(engine), "--json", recipe=None)
    assert r.code == 4 and r.err.count("\n") == 1, r.err
    lost = json.loads(r.out)
    assert lost["selection"]["skipped"] == {"weight-gate canary traffic (held out)": 4}  # both measurements
    assert lost["rolled_back"] and lost["gate"]["decision"] == "rollback"
    assert "sentinel task 'sum' failed" in lost["gate"]["reason"] and "task 'capital' regressed by 1.00" in lost["gate"]["reason"]
    assert (f"reef: error: weight gate: the new weights (release {lost['release_id']}) lost to release "
            f"{kept['release_id']}: ") in r.err and f"rolled back — release {lost['rollback_release_id']}" in r.err
    head = _head(reef, gated)
    kept_shown = json.loads(reef("-C", str(gated), "-s", SCEN, "show", kept["release_id"], "--json").out)
    assert head["operation"] == "rollback" and head["release_id"] == lost["rollback_release_id"]
    assert head["content_id"] == kept_shown["content_id"] and head["meta"]["rollback_target_release_id"] == kept["release_id"]
    assert engine.model_path == kept["checkpoint"] and engine.weight_version == head["runtime_load_id"]
    assert len(_kinds(led, "weight_canary")) == 3  # the stored verdict was the baseline: nothing re-measured
    gates = _kinds(led, "weight_gate")
    assert [g["decision"] for g in gates] == ["keep", "rollback"]
    text = train(reef, gated, "--dry-run", recipe=None)  # (nothing new to train on: only the text form is read)
    assert "weight gate: 2 canary task(s) x 1 of scenario 'default' (release 2)" in text.out
    # the log shows every weight release with its load id
    log = reef("-C", str(gated), "-s", SCEN, "log")
    for rel in (base["runtime_load_id"], kept["runtime_load_id"], lost["runtime_load_id"], head["runtime_load_id"]):
        assert rel in log.out
    # the rollback release carries the kept weights' verdict: the next step is compared with it, not re-measured
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "455")
    r = train(reef, gated, *swap_args(engine), "--json", recipe=None)
    assert r.code == 0, r.err
    again = json.loads(r.out)
    assert again["gate"]["baseline_release_id"] == kept["release_id"] and again["gate"]["decision"] == "keep"
    assert "not worse: mean paired difference +0.000" in again["gate"]["reason"]
    assert len(_kinds(led, "weight_canary")) == 4
    # a manual rollback to the kept step carries its verdict too: the next step is not re-measured either
    r = reef("-C", str(gated), "-s", SCEN, "train", "--engine", engine.url, "--rollback", kept["release_id"])
    assert r.code == 0, r.err
    _prime(led, engine)
    r = train(reef, gated, *swap_args(engine), "--json", recipe=None)
    assert r.code == 0 and json.loads(r.out)["gate"]["baseline_release_id"] == kept["release_id"], r.err
    assert len(_kinds(led, "weight_canary")) == 5


def test_engine_failure_during_rollback_locks(reef, gated, engine, monkeypatch):
    led = ledger_of(gated)
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "450")
    assert train(reef, gated, *swap_args(engine), recipe=None).code == 0
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "900")
    engine.refuse_after_loads = len(engine.loads) + 1  # the candidate loads; reloading the previous one is refused
    r = train(reef, gated, *swap_args(engine), recipe=None)
    assert r.code == 1 and r.err.count("\n") == 1, r.err
    assert "Failed to update weights: refused by test" in r.err and "locked until 'reef train --unlock'" in r.err
    assert _head(reef, gated)["operation"] == "train"  # the rejected weights stay the head: the engine serves them
    assert [f["stage"] for f in led_failures(led)] == ["rollback:update"] and led_failures(led)[0]["locked"]
    again = train(reef, gated, *swap_args(engine), recipe=None)
    assert again.code == 4 and "locked since" in again.err and "rollback:update failed" in again.err


def led_failures(led):
    return _kinds(led, "train_failed")


def test_no_gate_and_explicit_canary_scenario(reef, gated, engine, monkeypatch):
    led = ledger_of(gated)
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "900")
    r = train(reef, gated, *swap_args(engine), "--no-gate", "--json", recipe=None)
    assert r.code == 0 and json.loads(r.out)["gate"] is None and _kinds(led, "weight_canary") == []
    monkeypatch.setenv("REEF_WEIGHT_GATE", "off")
    assert json.loads(train(reef, gated, "--dry-run", "--json", recipe=None).out)["gate_plan"] is None
    monkeypatch.delenv("REEF_WEIGHT_GATE")
    bad = train(reef, gated, *swap_args(engine), "--canary-scenario", "nope", recipe=None)
    assert bad.code == 1
    assert "--canary-scenario nope: no such scenario (known: default, model)" in bad.err
    own = train(reef, gated, *swap_args(engine), "--canary-scenario", SCEN, recipe=None)
    assert own.code == 4 and "--canary-scenario model: that is the weights scenario itself" in own.err


def test_canary_tasks_without_an_agent_fail_before_training(reef, gated, engine):
    cfg = gated / "harness.yaml"
    cfg.write_text("\n".join(ln for ln in cfg.read_text().splitlines() if not ln.startswith("agent:")) + "\n")
    assert reef("-C", str(gated), "publish", "-m", "no agent").code == 0
    led = ledger_of(gated)
    _prime(led, engine)
    r = train(reef, gated, *swap_args(engine), recipe=None)
    assert r.code == 4 and "harness.yaml of scenario 'default' (release 3) has canary tasks but no 'agent'" in r.err
    assert engine.loads == [] and not list((gated / ".reef" / "scenarios" / SCEN).glob("train/*/trainer.log"))


def test_the_gate_uses_a_serve_that_fronts_the_scenario_else_starts_its_own(reef, gated, engine, monkeypatch):
    from gateway import Gateway

    led = ledger_of(gated)
    monkeypatch.setenv("REEF_SERVE_URL", "http://127.0.0.1:9")  # nothing there: the gate says so and starts its own
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "450")
    r = train(reef, gated, *swap_args(engine), "--json", recipe=None)
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["warnings"] and out["warnings"][0].startswith("REEF_SERVE_URL http://127.0.0.1:9 is not used for the "
                                                             "weight gate (its /reef/status did not answer")
    assert [m["gateway"] for m in _kinds(led, "weight_canary")] == ["own", "own"]
    with Gateway(gated, engine.url + "/v1", "--upstream-api", "sglang", env={"REEF_SCENARIO": SCEN}) as gw:
        monkeypatch.setenv("REEF_SERVE_URL", gw.url)
        _prime(led, engine)
        monkeypatch.setenv("FAKE_TRAINER_BIAS", "460")
        r = train(reef, gated, *swap_args(engine), "--json", recipe=None)
        assert r.code == 0, r.err
        assert json.loads(r.out)["warnings"] == []
    last = _kinds(led, "weight_canary")[-1]
    assert last["gateway"] == "external" and last["held_out"] == []  # held out by its session instead
    via = [r.payload for r in led.iter_records(kind="inference") if r.payload.get("session") == last["session"]]
    assert len(via) == 2 and all(p["weight_version"] == last["runtime_load_id"] for p in via)
    plan = json.loads(train(reef, gated, "--dry-run", "--json", recipe=None).out)
    assert plan["selection"]["skipped"] == {"weight-gate canary traffic (held out)": 2}


def test_a_first_step_that_loses_reloads_the_base_weights(reef, gated, engine, monkeypatch):
    (gated / "canary" / "tasks.yaml").write_text(TASKS.format(check=f"{sys.executable} {AGENT} check 0 300"))
    assert reef("-C", str(gated), "publish", "-m", "the base weights pass these").code == 0
    base = _head(reef, gated)
    led = ledger_of(gated)
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "900")
    r = train(reef, gated, *swap_args(engine), recipe=None)  # the text a user reads
    assert r.code == 4, r.err
    head = _head(reef, gated)
    rejected = json.loads(reef("-C", str(gated), "-s", SCEN, "show", "HEAD~1", "--json").out)
    assert f"Published weight release {rejected['release_id']} (step 2), runtime load id " \
           f"{rejected['runtime_load_id']}\n" in r.out
    assert "  canary capital: 1 -> 0 (regressed)\n  canary sum: 1 -> 0 (sentinel-failed)\n" in r.out
    assert r.err == (f"reef: error: weight gate: the new weights (release {rejected['release_id']}) lost to release "
                     f"{base['release_id']}: task 'capital' regressed by 1.00 (tolerance 0.4); sentinel task 'sum' "
                     f"failed (mean 0.00, was 1.00); rolled back — release {head['release_id']} reloads "
                     f"{base['release_id']} as runtime load id {head['runtime_load_id']}\n")
    assert head["operation"] == "rollback" and head["content_id"] == base["content_id"]
    assert head["meta"]["rollback_target_release_id"] == base["release_id"]
    assert engine.model_path == base["meta"]["checkpoint"] and engine.weight_version == head["runtime_load_id"]
    assert engine.bias == 0


def test_status_shows_the_weight_gate_and_the_lock(reef, gated, engine, monkeypatch):
    st = reef("-C", str(gated), "-s", SCEN, "status")
    assert st.code == 0 and "weight gate: 2 canary task(s) x 1 of scenario 'default' (release 2)" in st.out
    assert "LOCKED" not in st.out
    _prime(ledger_of(gated), engine)
    engine.refuse_update = True
    assert train(reef, gated, *swap_args(engine), "--no-gate", recipe=None).code == 1
    st = reef("-C", str(gated), "-s", SCEN, "status", "--json")
    out = json.loads(st.out)
    assert out["lock"]["stage"] == "swap:update" and out["weight_gate"].startswith("2 canary task(s)")
    text = reef("-C", str(gated), "-s", SCEN, "status").out
    assert "weight updates LOCKED since " in text and "then run 'reef train --unlock'" in text


def test_an_agent_that_cannot_run_stops_the_step_before_the_swap(reef, gated, engine):
    cfg = gated / "harness.yaml"
    cfg.write_text(cfg.read_text().replace(f'agent: ["{{python}}", "{AGENT}", "{{prompt}}"]',
                                           'agent: ["no-such-agent-xyz", "{prompt}"]'))
    assert reef("-C", str(gated), "publish", "-m", "a broken agent").code == 0
    led = ledger_of(gated)
    _prime(led, engine)
    before = _head(reef, gated)
    r = train(reef, gated, *swap_args(engine), recipe=None)
    assert r.code == 1 and r.err.count("\n") == 1, r.err
    assert r.err.startswith(f"reef: error: weight gate: measuring the previous weights (release {before['release_id']}) "
                            "failed: every canary episode failed (2), e.g. capital #1: agent cannot start "
                            "'no-such-agent-xyz'")
    assert "check the 'agent' in harness.yaml of scenario 'default'" in r.err and "nothing was swapped" in r.err
    assert engine.loads == [] and _head(reef, gated) == before
    assert [f["stage"] for f in _kinds(led, "train_failed")] == ["gate"]
    assert not list((gated / ".reef" / "scenarios" / SCEN).glob("train/*/trainer.log"))  # no trainer ran


def test_an_agent_that_never_calls_the_model_cannot_judge_weights(reef, gated, engine):
    cfg = gated / "harness.yaml"
    cfg.write_text(cfg.read_text().replace(f'agent: ["{{python}}", "{AGENT}", "{{prompt}}"]',
                                           'agent: ["{python}", "-c", "print(\'t500\')"]'))
    assert reef("-C", str(gated), "publish", "-m", "an agent without a model").code == 0
    _prime(ledger_of(gated), engine)
    r = train(reef, gated, *swap_args(engine), recipe=None)
    assert r.code == 1 and "failed: the agent made no model call that the gate's reef serve answered in 2 canary " \
                           "episode(s)" in r.err and "nothing was swapped" in r.err, r.err
    assert engine.loads == []


def test_a_damaged_verdicts_file_is_kept_aside_not_overwritten(tmp_path):
    """verdicts.json cut short or replaced by a list: reading it is 'no stored verdict' (the gate measures again),
    not an unexpected error, and the next store keeps the damaged bytes as verdicts.json.damaged."""
    from types import SimpleNamespace

    from reef_cli.weights.gate import store_verdict, stored_verdict, verdicts_path

    store = SimpleNamespace(dir=tmp_path)
    rel = SimpleNamespace(release_id="rel_a")
    path = verdicts_path(store)
    path.parent.mkdir(parents=True)
    for damaged in (b'{"rel_old": {"kind": "canary", "mean"', b'["not", "an", "object"]'):
        path.write_bytes(damaged)
        assert stored_verdict(store, rel) is None
        store_verdict(store, rel, {"kind": "canary", "mean": 0.5})
        assert path.with_name("verdicts.json.damaged").read_bytes() == damaged
        assert stored_verdict(store, rel) == {"kind": "canary", "mean": 0.5}
    # the first damaged copy was not overwritten by the second
    assert path.with_name("verdicts.json.damaged.1").read_bytes() == b'{"rel_old": {"kind": "canary", "mean"'


def test_a_train_killed_mid_gate_leaves_no_gateway_running(gated, engine, tmp_path):
    """kill -9 of `reef train` while the gate's own `reef serve` runs: that gateway goes too (SIGTERM, so it drains and
    verifies its ledger) instead of serving on, orphaned, for ever; the rerun then works."""
    import os
    import signal
    import subprocess
    import time

    from conftest import reef_exe
    from test_weights import TRAINER

    hang = tmp_path / "agents"  # each hanging canary agent leaves a file named by its pid there
    hang.mkdir()
    _prime(ledger_of(gated), engine)
    argv = [reef_exe(), "-C", str(gated), "-s", SCEN, "train", "--engine", engine.url, "--trainer", TRAINER]
    proc = subprocess.Popen(argv, env={**os.environ, "CANARY_AGENT_HANG": str(hang)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    serve: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not any(hang.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any(hang.iterdir()), "the canary agent never started"
        serve = [int(d) for d in os.listdir("/proc") if d.isdigit() and _ppid(int(d)) == proc.pid
                 and b"serve" in _cmdline(int(d))]
        assert len(serve) == 1
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while _ppid(serve[0]) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ppid(serve[0]) is None, "the gate's reef serve outlived the reef train that started it"
        agents = [int(p.name) for p in hang.iterdir()]
        while any(_ppid(pid) is not None for pid in agents) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_ppid(pid) is None for pid in agents), "a canary agent outlived the reef train that started it"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in [int(p.name) for p in hang.iterdir()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in serve:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def _ppid(pid: int) -> int | None:
    """The parent of a live process; None once it is gone (a zombie counts as gone)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[1])


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def test_weights_published_by_a_train_killed_before_the_gate_decided_are_gated_by_the_next_run(
        reef, gated, engine, monkeypatch, tmp_path):
    """kill -9 of `reef train` after it published the new weights, while the gate measures them: the head is a
    train release with no weight_gate record. The next run must not train on top of weights nobody judged: it gates
    them first (here they lose, so the previous weights are reloaded), then trains its own step."""
    import os
    import signal
    import subprocess
    import time

    from conftest import reef_exe
    from test_weights import TRAINER

    led = ledger_of(gated)
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "450")
    r = train(reef, gated, *swap_args(engine), "--json", recipe=None)
    assert r.code == 0, r.err
    kept = json.loads(r.out)  # a stored verdict now: the next run measures only its candidate, after publishing it
    _prime(led, engine)
    hang = tmp_path / "agents"
    hang.mkdir()
    argv = [reef_exe(), "-C", str(gated), "-s", SCEN, "train", "--engine", engine.url, "--trainer", TRAINER]
    proc = subprocess.Popen(argv, env={**os.environ, "CANARY_AGENT_HANG": str(hang), "FAKE_TRAINER_BIAS": "900"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not any(hang.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any(hang.iterdir()), "the canary agent never started"
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in [int(p.name) for p in hang.iterdir()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    unjudged = _head(reef, gated)
    assert unjudged["operation"] == "train" and unjudged["release_id"] != kept["release_id"]
    assert engine.weight_version == unjudged["runtime_load_id"]
    assert [g["run_id"] for g in _kinds(led, "weight_gate")] == [kept["run_id"]]  # no verdict for the new weights

    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "455")
    r = train(reef, gated, *swap_args(engine), "--json", recipe=None)
    assert r.code == 0, r.err
    out = json.loads(r.out)
    settled = out["settled"]
    assert settled["release_id"] == unjudged["release_id"] and settled["gate"]["decision"] == "rollback"
    assert "sentinel task 'sum' failed" in settled["gate"]["reason"]
    assert any(f"release {unjudged['release_id']}" in w and "stopped before the weight gate decided" in w
               and "rolled back" in w for w in out["warnings"])
    gates = _kinds(led, "weight_gate")
    assert [(g["run_id"], g["decision"]) for g in gates] == [
        (kept["run_id"], "keep"), (unjudged["meta"]["run_id"], "rollback"), (out["run_id"], "keep")]
    rollback = json.loads(reef("-C", str(gated), "-s", SCEN, "show", settled["rollback_release_id"], "--json").out)
    assert rollback["operation"] == "rollback" and rollback["meta"]["rollback_target_release_id"] == kept["release_id"]
    assert out["gate"]["baseline_release_id"] == kept["release_id"]  # the new step was judged against the kept weights
    assert _head(reef, gated)["release_id"] == out["release_id"]


def test_a_verdicts_path_that_is_a_directory_is_one_line_not_a_crash(reef, gated, engine):
    """rv-attack: train/verdicts.json as a directory gave 'unexpected error'. Now: exit 4, one line naming it,
    before any trainer runs or anything is swapped."""
    from reef_cli.weights.gate import verdicts_path
    from types import SimpleNamespace

    path = verdicts_path(SimpleNamespace(dir=gated / ".reef" / "scenarios" / SCEN))
    path.mkdir(parents=True)
    _prime(ledger_of(gated), engine)
    before = _head(reef, gated)
    r = train(reef, gated, *swap_args(engine), recipe=None)
    assert r.code == 4 and r.err == (f"reef: error: {path} is a directory, not the weight gate's verdicts file; "
                                     "move it away (nothing was changed)\n"), r.err
    assert engine.loads == [] and _head(reef, gated) == before and path.is_dir()
