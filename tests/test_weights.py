"""Weights: recipes catalog, record selection/export, the SGLang shim, `reef train` end to end and its faults.

The engine is a fake SGLang server on 127.0.0.1 speaking SGLang's endpoints and shapes (tests/fakes/sglang_server.py);
the trainer is a fake slime train.py that accepts slime's flags and writes a checkpoint (tests/fakes/slime_train.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import reef_exe
from fakes.sglang_server import FakeSGLang

FAKES = Path(__file__).parent / "fakes"
TRAINER = f"{sys.executable} {FAKES / 'slime_train.py'}"
SCEN = "model"


@pytest.fixture
def engine():
    fake = FakeSGLang().start()
    yield fake
    fake.stop()


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    r = reef("-C", str(root), "init", "--template", "minimal")
    assert r.code == 0, r.err
    return root


def ledger_of(root: Path, scenario: str = SCEN):
    from reef_cli.ledger import Ledger

    d = root / ".reef" / "scenarios" / scenario
    d.mkdir(parents=True, exist_ok=True)
    return Ledger(d / "ledger.jsonl", scenario)


def inference(led, fake: FakeSGLang | None = None, *, prompt="fix the bug", n=4, **extra):
    """An exchange as reef serve records it in front of SGLang: exact ids, logprobs, the version that answered."""
    ids = [ord(c) % 256 for c in prompt]
    if fake is not None:
        out = fake.generate({"input_ids": ids, "sampling_params": {"max_new_tokens": n}, "return_logprob": True})
        o_ids, lps, version = out["output_ids"], [x[0] for x in out["meta_info"]["output_token_logprobs"]], \
            out["meta_info"]["weight_version"]
    else:
        o_ids, lps, version = list(range(1, n + 1)), [-0.5] * n, "default"
    payload = {"prompt": [{"role": "user", "content": prompt}], "weight_version": version,
               "training": {"prompt_token_ids": ids, "output_token_ids": o_ids, "output_logprobs": lps}, **extra}
    return led.append("inference", payload, release_id=None, content_id=None)


def scored(led, rec, score, kind="report"):
    return led.append(kind, {"score": score, "receipts": [rec.record_id]}, release_id=None, content_id=None)


def train(reef, root, *args, recipe="sao"):
    return reef("-C", str(root), "-s", SCEN, "train", *(["--recipe", recipe] if recipe else []), *args)


def swap_args(fake):
    return ("--engine", fake.url, "--trainer", TRAINER)


# -- recipes --------------------------------------------------------------------------------------------------------
def test_recipes_catalog_lists_every_recipe_validated(reef):
    r = reef("recipes", "--json")
    assert r.code == 0, r.err
    by = {x["name"]: x for x in json.loads(r.out)}
    assert set(by) >= {"harness-curate", "harness-review", "sao", "openclawrl", "tttd", "skillclaw"}
    assert by["sao"]["kind"] == "weights" and by["sao"]["reward"]["sources"] == ["check", "report"]
    assert by["openclawrl"]["reward"]["sources"] == ["report", "next_state"]
    assert by["tttd"]["select"]["group_by"] == "task_id" and by["tttd"]["reward"]["center"] == "group_mean"
    assert by["skillclaw"]["kind"] == "harness" and by["skillclaw"]["engine"] == "skillclaw"
    assert by["harness-curate"]["engine"] == "curate" and by["harness-review"]["publish"] == "review"
    table = reef("recipes")
    assert table.code == 0 and "openclawrl" in table.out and "next_state" in table.out


@pytest.mark.parametrize("text,message", [
    ("name: x\nkind: weights\ndescription: d\npublish: always\n", "field 'select' is required"),
    ("name: x\nkind: model\ndescription: d\npublish: gated\n", "field 'kind'"),
    ("name: x\nkind: harness\ndescription: d\npublish: gated\ncolour: red\n", "unknown field 'colour'"),
    ("name: x\nkind: weights\ndescription: d\npublish: always\nselect: {}\ntrainer: {}\nreward: {sources: [vibes]}\n",
     "field 'reward/sources/0'"),
    ("name: [\n", "not valid YAML"),
])
def test_recipe_schema_names_the_bad_field(text, message):
    from reef_cli.errors import InvalidInput
    from reef_cli.recipes import parse

    with pytest.raises(InvalidInput, match="bad.yaml") as exc:
        parse(text, source="bad.yaml")
    assert message in str(exc.value)


# -- the SGLang shim ------------------------------------------------------------------------------------------------
def test_check_weight_version_reads_generate_and_chat_shapes():
    from reef_cli.weights.sglang import check_weight_version

    assert check_weight_version({"weight_version": "3:ab"}, "3:ab").ok
    assert check_weight_version({"meta_info": {"weight_version": "3:ab"}, "text": "x"}, "3:ab").ok  # /generate body
    assert check_weight_version({"metadata": {"weight_version": "3:ab"}}, "3:ab").ok  # chat completion body
    bad = check_weight_version({"weight_version": "2:zz"}, "3:ab")
    assert not bad.ok and bad.answered == "2:zz" and "expected 3:ab" in bad.reason
    missing = check_weight_version({"choices": []}, "3:ab")
    assert not missing.ok and missing.answered is None and "does not say" in missing.reason
    assert check_weight_version({}, None).ok  # not a weight release: nothing to check
    assert check_weight_version(None, "1:a").ok is False


def test_hot_swap_retries_a_busy_flush_and_reads_the_version_back(engine, tmp_path):
    from reef_cli.weights.sglang import Engine

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    engine.busy_flushes = 3
    res = Engine(engine.url, flush_wait=0.01).hot_swap(str(ckpt), "7:abc")
    assert res.weight_version == "7:abc" and res.previous_version == "default" and res.flush_attempts == 4
    calls = [c for c in engine.calls if not c.startswith("GET /get_model_info")]
    assert calls == ["POST /pause_generation"] + ["POST /flush_cache"] * 4 + [
        "POST /update_weights_from_disk", "POST /continue_generation"]
    assert engine.weight_version == "7:abc" and not engine.paused


def test_hot_swap_failures_resume_generation_and_say_where(engine, tmp_path):
    from reef_cli.weights.sglang import Engine, SwapFailed

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    client = Engine(engine.url, flush_wait=0.0, flush_retries=2)
    engine.busy_flushes = 5
    with pytest.raises(SwapFailed, match="still busy after 2 attempts") as exc:
        client.hot_swap(str(ckpt), "1:a")
    assert exc.value.stage == "flush_cache" and exc.value.touched and not engine.paused
    engine.busy_flushes = 0
    engine.refuse_update = True
    with pytest.raises(SwapFailed, match="refused the weights") as exc:
        client.hot_swap(str(ckpt), "1:a")
    assert exc.value.stage == "update" and not engine.paused and engine.weight_version == "default"
    engine.refuse_update, engine.wrong_version = False, True
    with pytest.raises(SwapFailed, match="reports weight version 'stale-1:a'") as exc:
        client.hot_swap(str(ckpt), "1:a")
    assert exc.value.stage == "read_back" and exc.value.answered_version == "stale-1:a"


def test_engine_down_is_one_clear_error():
    from reef_cli.weights.sglang import Engine, EngineDown

    with pytest.raises(EngineDown, match=r"SGLang engine at http://127.0.0.1:9 is unreachable"):
        Engine("http://127.0.0.1:9", timeout=2).model_info()
    assert Engine("http://127.0.0.1:9", timeout=2).health() is False


# -- selection and export ---------------------------------------------------------------------------------------------
def test_dry_run_selects_rewarded_records_and_carries_the_rest(reef, project):
    led = ledger_of(project)
    a, b, c = inference(led), inference(led, prompt="two"), inference(led, prompt="three")
    led.append("inference", {"prompt": "no tokens"}, release_id=None, content_id=None)
    scored(led, a, 1.0, "check")
    scored(led, a, 0.0)  # check wins over report for sao
    scored(led, b, 0.25)
    led.append("check", {"passed": False, "receipts": [c.record_id]}, release_id=None, content_id=None)
    inference(led, prompt="unscored")
    r = train(reef, project, "--dry-run", "--json")
    assert r.code == 0, r.err
    sel = json.loads(r.out)["selection"]
    assert [(s["record_id"], s["reward"]) for s in sel["samples"]] == [(a.record_id, 1.0), (b.record_id, 0.25),
                                                                       (c.record_id, 0.0)]
    assert sel["pending"] == 1 and sel["skipped"] == {"no token data": 1}
    text = train(reef, project, "--dry-run", recipe=None)
    assert text.code == 0 and "would train recipe sao on 3 record(s)" in text.out and "1 waiting for a reward" in text.out


def test_openclawrl_next_state_scores_the_previous_turn(reef, project):
    led = ledger_of(project)
    first = inference(led, prompt="deploy it", session="s1")
    inference(led, prompt="deploy it", session="s1")  # the user had to ask again: a retry
    ok = inference(led, prompt="now the docs", session="s2")
    inference(led, prompt="thanks, next", session="s2")
    tool = inference(led, prompt="run tests", session="s3")
    inference(led, prompt="tool failed", session="s3", tool_error=True)
    reported = inference(led, prompt="a", session="s4")
    inference(led, prompt="b", session="s4")
    scored(led, reported, 0.5)  # an explicit report wins over the next state
    r = train(reef, project, "--dry-run", "--json", recipe="openclawrl")
    assert r.code == 0, r.err
    got = {s["record_id"]: s["reward"] for s in json.loads(r.out)["selection"]["samples"]}
    assert got == {first.record_id: 0.0, ok.record_id: 1.0, tool.record_id: 0.0, reported.record_id: 0.5}


def test_tttd_groups_attempts_and_centres_rewards(reef, project):
    led = ledger_of(project)
    p1 = [inference(led, prompt=f"p1 try {i}", task_id="p1") for i in range(3)]
    lone = inference(led, prompt="p2", task_id="p2")
    for rec, score in zip(p1, (1.0, 0.0, 0.5)):
        scored(led, rec, score)
    scored(led, lone, 1.0)
    r = train(reef, project, "--dry-run", "--json", recipe="tttd")
    sel = json.loads(r.out)["selection"]
    assert [s["reward"] for s in sel["samples"]] == [0.5, -0.5, 0.0]
    assert sel["skipped"] == {"group too small": 1}


def test_export_writes_slime_rows(tmp_path):
    from reef_cli.recipes import load
    from reef_cli.weights.records import export, select
    from reef_cli.weights.slime_replay import group_rows, load_rows

    led = ledger_of(tmp_path)
    rec = inference(led, n=3, task_id="t")
    led.append("inference", {**rec.payload, "training": {**rec.payload["training"], "loss_mask": [1, 0, 1]},
                             "task_id": "t"}, release_id=None, content_id=None)
    for r in led.iter_records(kind="inference"):
        scored(led, r, 1.0)
    sel = select(led, load("tttd"))
    export(sel, tmp_path / "out.jsonl")
    rows = load_rows(str(tmp_path / "out.jsonl"))
    assert rows[0]["tokens"] == rec.payload["training"]["prompt_token_ids"] + rec.payload["training"]["output_token_ids"]
    assert rows[0]["response_length"] == 3 and rows[0]["loss_mask"] == [1, 1, 1] and rows[1]["loss_mask"] == [1, 0, 1]
    assert rows[0]["rollout_log_probs"] == [-0.5] * 3 and rows[0]["metadata"]["reef_record_id"] == rec.record_id
    assert [len(g) for g in group_rows(rows)] == [2]


# -- reef train end to end --------------------------------------------------------------------------------------------
def test_train_end_to_end_publishes_a_weight_release_the_engine_serves(reef, project, engine):
    from reef_cli.weights.sglang import Engine, check_weight_version

    led = ledger_of(project)
    before = engine.generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}})
    recs = [inference(led, engine, prompt=f"task {i}") for i in range(3)]
    for rec, score in zip(recs, (1.0, 0.0, 1.0)):
        scored(led, rec, score, "check")
    r = train(reef, project, *swap_args(engine), "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    load_id, ckpt = out["runtime_load_id"], Path(out["checkpoint"])
    assert load_id.startswith("1:") and out["release_id"].startswith("rel_")
    assert ckpt.name == "weight_v000001" and (ckpt / "config.json").is_file()
    assert ckpt.is_relative_to(project / ".reef" / "scenarios" / SCEN / "train")
    log = Path(out["trainer"]["log"]).read_text()
    assert "3 sample(s)" in log and "--sglang-" not in log
    # the engine answers under the new version, with the new weights
    after = Engine(engine.url).generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3},
                                         "return_logprob": True})
    assert check_weight_version(after["meta_info"], load_id).ok
    assert after["output_ids"] != before["output_ids"] and engine.loads[-1]["model_path"] == str(ckpt)
    # the release chain: operation train, load id, content = the checkpoint manifest
    shown = json.loads(reef("-C", str(project), "-s", SCEN, "show", "HEAD", "--json").out)
    assert shown["operation"] == "train" and shown["runtime_load_id"] == load_id
    assert set(shown["files"]) == {"weights/manifest.json"} and shown["meta"]["checkpoint"] == str(ckpt)
    manifest = json.loads(subprocess.run(["git", "--git-dir", str(project / ".reef" / "git"), "show",
                                          f"{shown['content_id']}:weights/manifest.json"],
                                         capture_output=True, text=True, check=True).stdout)
    assert set(manifest["files"]) == {"config.json", "fake_weights.json", "model.safetensors"}
    logged = reef("-C", str(project), "-s", SCEN, "log")
    assert "load id" in logged.out and load_id in logged.out
    kinds = [x.kind for x in led.iter_records()]
    assert kinds[-1] == "train"
    # the next step trains only on what came after the high-water mark, from the new checkpoint
    assert train(reef, project, *swap_args(engine)).code == 4
    new = inference(led, engine, prompt="task 4")
    scored(led, new, 1.0)
    r2 = train(reef, project, *swap_args(engine), "--json", recipe=None)
    assert r2.code == 0, r2.err
    out2 = json.loads(r2.out)
    assert out2["selection"]["records"] == 1 and out2["runtime_load_id"].startswith("2:")
    assert f"hf-checkpoint={ckpt}" in Path(out2["trainer"]["log"]).read_text()
    assert engine.weight_version == out2["runtime_load_id"]
    # the harness scenario beside it is untouched, and a harness cannot be published into the weights scenario
    assert json.loads(reef("-C", str(project), "status", "--json").out)["head"]["step"] == 1
    st = reef("-C", str(project), "-s", SCEN, "status")
    assert st.code == 0 and f"holds weight releases: step 2" in st.out and out2["runtime_load_id"] in st.out
    pub = reef("-C", str(project), "-s", SCEN, "publish", "-m", "oops")
    assert pub.code == 4 and "scenario 'model' holds weight releases; a harness cannot be published into it" in pub.err


def test_train_refuses_harness_recipes_and_binding_conflicts(reef, project, engine):
    r = reef("-C", str(project), "train", "--dry-run")
    assert r.code == 4 and "bound to harness recipe 'harness-curate'" in r.err and "reef harness evolve" in r.err
    assert train(reef, project, "--dry-run").code == 0
    r = train(reef, project, "--dry-run", recipe="tttd")
    assert r.code == 3 and "bound to recipe 'sao', not 'tttd'" in r.err
    r = train(reef, project, "--dry-run", recipe="nope")
    assert r.code == 4 and "unknown recipe 'nope'" in r.err


def _head(reef, root):
    r = reef("-C", str(root), "-s", SCEN, "log", "--json")
    return json.loads(r.out)[0] if r.code == 0 and json.loads(r.out) else None


def _prime(led, fake, n=2):
    for i in range(n):
        scored(led, inference(led, fake, prompt=f"q{i}"), 1.0)


def _failures(led):
    return [r.payload for r in led.iter_records(kind="train_failed")]


def test_trainer_crash_leaves_head_and_engine_alone(reef, project, engine, monkeypatch):
    led = ledger_of(project)
    _prime(led, engine)
    monkeypatch.setenv("FAKE_TRAINER_EXIT", "3")
    r = train(reef, project, *swap_args(engine))
    assert r.code == 1 and r.err.count("\n") == 1
    assert "trainer exited with status 3 (fake slime: CUDA error: out of memory (simulated)); log: " in r.err
    assert _head(reef, project) is None and engine.weight_version == "default" and engine.loads == []
    assert _failures(led)[-1]["stage"] == "trainer" and _failures(led)[-1]["locked"] is False
    monkeypatch.setenv("FAKE_TRAINER_EXIT", "")
    monkeypatch.setenv("FAKE_TRAINER_NO_CKPT", "1")
    r = train(reef, project, *swap_args(engine))
    assert r.code == 1 and "trainer exited 0 but left no checkpoint" in r.err
    monkeypatch.setenv("FAKE_TRAINER_NO_CKPT", "")
    assert train(reef, project, *swap_args(engine)).code == 0  # not locked: the records are still there


def test_trainer_timeout_stops_it(reef, project, engine, monkeypatch):
    led = ledger_of(project)
    _prime(led, engine, 1)
    monkeypatch.setenv("FAKE_TRAINER_SLEEP", "30")
    started = time.monotonic()
    r = train(reef, project, *swap_args(engine), "--timeout", "0.5")
    assert r.code == 1 and "trainer timed out after 0.5 s and was stopped" in r.err
    assert time.monotonic() - started < 15 and _failures(led)[-1]["stage"] == "timeout"


@pytest.mark.parametrize("fault,stage,message", [
    ("refuse_update", "swap:update", "refused the weights"),
    ("wrong_version", "swap:read_back", "reports weight version 'stale-1:"),
])
def test_failed_transfer_locks_until_unlock(reef, project, engine, fault, stage, message):
    led = ledger_of(project)
    _prime(led, engine)
    setattr(engine, fault, True)
    r = train(reef, project, *swap_args(engine))
    assert r.code == 1 and message in r.err and r.err.count("\n") == 1
    assert "weight updates of scenario 'model' are locked until 'reef train --unlock'" in r.err
    assert _head(reef, project) is None and not engine.paused
    fail = _failures(led)[-1]
    assert fail["stage"] == stage and fail["locked"] is True
    setattr(engine, fault, False)
    r = train(reef, project, *swap_args(engine))
    assert r.code == 4 and "weight updates for scenario 'model' are locked" in r.err and "reef train --unlock" in r.err
    assert train(reef, project, "--dry-run").code == 0  # looking is still allowed
    u = reef("-C", str(project), "-s", SCEN, "train", "--unlock", "--json")
    assert u.code == 0 and json.loads(u.out)["unlocked"] is True
    assert [x.kind for x in led.iter_records()][-1] == "weights_unlock"
    assert reef("-C", str(project), "-s", SCEN, "train", "--unlock").out.startswith("scenario 'model' has no weight lock")
    r = train(reef, project, *swap_args(engine), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["selection"]["records"] == 2  # nothing was lost to the failure


@pytest.mark.parametrize("damage", ["", '{"at": "2026-12-01T', "null", "[]", '"locked"'])
def test_a_damaged_lock_file_still_locks(reef, project, engine, damage):
    """A weights.lock truncated or overwritten by hand still locks (the engine's weights are still unknown) and
    `--unlock` clears it; before, `null` silently unlocked and `[]` ended in "unexpected error"."""
    _prime(ledger_of(project), engine)
    (project / ".reef" / "scenarios" / SCEN / "weights.lock").write_text(damage)
    r = train(reef, project, *swap_args(engine))
    assert r.code == 4 and "weight updates for scenario 'model' are locked since ? (unreadable lock file)" in r.err
    u = reef("-C", str(project), "-s", SCEN, "train", "--unlock", "--json")
    assert u.code == 0 and json.loads(u.out)["unlocked"] is True
    assert train(reef, project, *swap_args(engine)).code == 0


def test_engine_down_fails_before_training(reef, project, engine):
    led = ledger_of(project)
    _prime(led, engine)
    r = train(reef, project, "--engine", "http://127.0.0.1:9", "--trainer", TRAINER)
    assert r.code == 1 and "SGLang engine at http://127.0.0.1:9 is unreachable" in r.err
    assert _failures(led)[-1]["stage"] == "engine" and _failures(led)[-1]["locked"] is False
    assert not (project / ".reef" / "scenarios" / SCEN / "weights.lock").exists()
    r = train(reef, project, "--trainer", TRAINER)
    assert r.code == 4 and "no engine: pass --engine URL" in r.err


def test_engine_serving_other_weights_locks(reef, project, engine):
    led = ledger_of(project)
    _prime(led, engine)
    assert train(reef, project, *swap_args(engine)).code == 0
    engine.weight_version = "someone-else"
    _prime(led, engine)
    r = train(reef, project, *swap_args(engine))
    assert r.code == 4 and "the engine serves weight version 'someone-else'" in r.err and "locked" in r.err


def test_weight_gate_rolls_back_a_losing_candidate(reef, project, engine, tmp_path, monkeypatch):
    led = ledger_of(project)
    score_file = tmp_path / "score"
    evaluator = tmp_path / "eval.py"
    evaluator.write_text("import os, sys\nassert os.environ['REEF_WEIGHT_VERSION']\n"
                         f"print('scoring'); print(open({str(score_file)!r}).read())\n")
    gate = ("--eval", f"{sys.executable} {evaluator}")
    _prime(led, engine)
    score_file.write_text('{"score": 0.8}')
    first = json.loads(train(reef, project, *swap_args(engine), *gate, "--json").out)
    assert first["gate"]["passed"] and first["gate"]["baseline"] is None
    _prime(led, engine)
    score_file.write_text("0.9")
    second = train(reef, project, *swap_args(engine), *gate, "--json")
    assert second.code == 0 and json.loads(second.out)["gate"]["baseline"] == 0.8
    kept = json.loads(second.out)
    _prime(led, engine)
    score_file.write_text("0.5")
    monkeypatch.setenv("FAKE_TRAINER_BIAS", "999")
    third = train(reef, project, *swap_args(engine), *gate, "--json")
    assert third.code == 4 and "reef: error: weight gate: the new weights" in third.err and "0.5 < 0.9; rolled back" in third.err
    out = json.loads(third.out)
    assert out["rolled_back"] and out["gate"] == {**out["gate"], "passed": False, "score": 0.5, "baseline": 0.9}
    assert engine.model_path == kept["checkpoint"] and engine.weight_version == out["runtime_load_id"]
    head = _head(reef, project)
    assert head["operation"] == "rollback" and head["runtime_load_id"] == out["runtime_load_id"]
    assert head["meta"]["rollback_target_release_id"] == kept["release_id"]
    assert head["content_id"] == json.loads(reef("-C", str(project), "-s", SCEN, "show", kept["release_id"],
                                                 "--json").out)["content_id"]  # same checkpoint, same content


def test_sigint_is_forwarded_to_the_trainer(reef, project, engine, tmp_path):
    led = ledger_of(project)
    _prime(led, engine, 1)
    env = {**os.environ, "FAKE_TRAINER_SLEEP": "60"}
    proc = subprocess.Popen([reef_exe(), "-s", SCEN, "train", "--recipe", "sao", *swap_args(engine)], cwd=project,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_root = project / ".reef" / "scenarios" / SCEN / "train"
    deadline = time.monotonic() + 120  # generous: a loaded 2-core CI machine starts reef and the trainer slowly
    while time.monotonic() < deadline and not any("sample(s)" in p.read_text() for p in run_root.glob("*/trainer.log")):
        time.sleep(0.1)
    assert any("sample(s)" in p.read_text() for p in run_root.glob("*/trainer.log")), "the trainer never started"
    second = train(reef, project, *swap_args(engine), recipe=None)  # one trainer per scenario at a time
    assert second.code == 3 and "another 'reef train' is running on scenario 'model'" in second.err
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=50)  # the fake trainer sleeps 60 s: only a forwarded SIGINT ends it sooner
    assert proc.returncode == 130 and "trainer interrupted (SIGINT forwarded)" in err
    assert [p["stage"] for p in _failures(led)] == ["interrupted"] and engine.loads == []


@pytest.fixture
def sigterm_trap():
    """SIGTERM to this process, where reef does not handle it, fails the test instead of ending the test run."""
    def trap(_signum, _frame):
        raise RuntimeError("SIGTERM reached the test: reef did not handle it")

    previous = signal.signal(signal.SIGTERM, trap)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])  # SIGTERM: a service manager stopping reef
def test_ctrl_c_during_the_hot_swap_resumes_the_engine_records_and_locks(reef, project, engine, sigterm_trap, sig):
    """Ctrl-C while the engine loads the new weights: it may finish loading after reef stopped waiting, so the
    engine is asked to continue generating (not left paused), the failure is recorded, and the scenario locks (the
    next `reef train` would otherwise publish over weights no release names)."""
    led = ledger_of(project)
    _prime(led, engine)
    engine.signal_on["POST /update_weights_from_disk"] = sig
    r = train(reef, project, *swap_args(engine))
    assert r.code == 130, r.err
    assert "reef: error: interrupted during the hot swap of '1:" in r.err and "(at update); it may still load" in r.err
    assert "weight updates of scenario 'model' are locked until 'reef train --unlock'" in r.err
    assert engine.calls[-1] == "POST /continue_generation" and not engine.paused
    assert engine.weight_version.startswith("1:") and _head(reef, project) is None  # loaded, and no release names it
    (fail,) = _failures(led)
    assert fail["stage"] == "swap:update" and fail["locked"] is True and fail["weight_version"] == engine.weight_version
    r = train(reef, project, *swap_args(engine))
    assert r.code == 4 and "weight updates for scenario 'model' are locked" in r.err


def test_sigterm_is_forwarded_to_the_trainer_and_recorded(reef, project, engine, tmp_path, sigterm_trap):
    """A service manager stops `reef train` with SIGTERM: the trainer's process group (its own session) gets it
    too, and the run ends as a Ctrl-C does: recorded, exit 130, nothing swapped."""
    led = ledger_of(project)
    _prime(led, engine, 1)
    stopper = tmp_path / "stopped_trainer.py"
    stopper.write_text("import os, signal, time\nprint('training', flush=True)\n"
                       "os.kill(os.getppid(), signal.SIGTERM)\ntime.sleep(30)\n")
    started = time.monotonic()
    r = train(reef, project, "--engine", engine.url, "--trainer", f"{sys.executable} {stopper}")
    assert r.code == 130 and r.err.startswith("reef: error: trainer interrupted (SIGTERM forwarded); log: "), r.err
    assert time.monotonic() - started < 20  # the trainer's 30 s sleep ended by the forwarded SIGTERM
    assert [p["stage"] for p in _failures(led)] == ["interrupted"] and engine.loads == []


def test_ctrl_c_before_the_swap_is_recorded_and_leaves_the_engine_alone(reef, project, engine):
    led = ledger_of(project)
    _prime(led, engine)
    engine.signal_on["GET /get_model_info"] = signal.SIGINT  # reef's first look at the engine
    r = train(reef, project, *swap_args(engine))
    assert (r.code, r.err) == (130, "reef: error: interrupted before the engine was touched; the engine and the head "
                                    "are as they were\n")
    assert [(f["stage"], f["locked"]) for f in _failures(led)] == [("interrupted", False)]
    assert engine.loads == [] and not (project / ".reef" / "scenarios" / SCEN / "weights.lock").exists()
    assert train(reef, project, *swap_args(engine)).code == 0


def test_a_checkpoint_rewritten_while_the_engine_loads_it_is_not_published(reef, project, engine):
    """The manifest is hashed before the swap; a process the trainer left behind rewrites the weights before the
    engine reads them. The engine then serves bytes the manifest does not name: a failed swap, recorded and locked,
    not a release naming other bytes than those served."""
    led = ledger_of(project)
    _prime(led, engine)
    load = engine.load

    def late_writer_then_load(body):
        (Path(body["model_path"]) / "fake_weights.json").write_text('{"bias": 999}')
        return load(body)

    engine.load = late_writer_then_load
    r = train(reef, project, *swap_args(engine))
    assert r.code == 1 and r.err.count("\n") == 1, r.err
    assert "changed while the engine loaded it (changed: fake_weights.json); the engine serves weight version '1:" in r.err
    assert r.err.endswith("from bytes no release names; weight updates of scenario 'model' are locked until "
                          "'reef train --unlock'\n")
    assert engine.bias == 999 and not engine.paused and _head(reef, project) is None
    fail = _failures(led)[-1]
    assert fail["stage"] == "swap:verify" and fail["locked"] is True and fail["weight_version"] == engine.weight_version


def test_slime_replay_builds_slime_samples_from_the_export(tmp_path, monkeypatch):
    """reef's rollout function as slime calls it (args, rollout_id, data_source), against slime's own type names."""
    import argparse

    from reef_cli.recipes import load
    from reef_cli.weights.records import export, select

    monkeypatch.syspath_prepend(str(FAKES / "slime_pkg"))
    from reef_cli.weights.slime_replay import generate_rollout

    led = ledger_of(tmp_path)
    for task, score in (("a", 1.0), ("a", 0.0), ("b", 1.0), ("b", 1.0)):
        scored(led, inference(led, prompt=f"{task}{score}", task_id=task), score)
    export(select(led, load("tttd")), tmp_path / "rollouts.jsonl")
    out = generate_rollout(argparse.Namespace(prompt_data=str(tmp_path / "rollouts.jsonl")), 0, None)
    assert [[s.reward for s in g] for g in out.samples] == [[0.5, -0.5], [0.0, 0.0]]
    first = out.samples[0][0]
    assert first.status.value == "completed" and first.response_length == 4 and first.loss_mask == [1] * 4
    assert first.rollout_log_probs == [-0.5] * 4 and first.metadata["reef_record_id"]
    assert generate_rollout(argparse.Namespace(prompt_data=""), 0, None, evaluation=True).data == {}


def test_default_trainer_is_slimes_train_py_with_configured_ray(reef, project, engine, tmp_path, monkeypatch):
    from reef_cli.errors import InvalidInput
    from reef_cli.weights.trainer import build_argv

    with pytest.raises(InvalidInput, match="no trainer: pass --trainer 'CMD ARGS' or set REEF_SLIME_DIR"):
        build_argv(None, None, [])
    with pytest.raises(InvalidInput, match=f"REEF_SLIME_DIR={tmp_path}: no train.py there"):
        build_argv(None, str(tmp_path), [])
    with pytest.raises(InvalidInput, match="cannot split it like a shell"):
        build_argv("python 'unclosed", None, [])
    slime = tmp_path / "slime"
    slime.mkdir()
    (slime / "train.py").write_text("import os, runpy, sys\nprint('RAY_ADDRESS=' + os.environ.get('RAY_ADDRESS', ''))\n"
                                    f"sys.argv[0] = {str(FAKES / 'slime_train.py')!r}\n"
                                    f"runpy.run_path({str(FAKES / 'slime_train.py')!r}, run_name='__main__')\n")
    assert build_argv(None, str(slime), ["--x"], python="py") == ["py", str(slime / "train.py"), "--x"]
    monkeypatch.setenv("REEF_SLIME_DIR", str(slime))
    monkeypatch.setenv("REEF_RAY_ADDRESS", "http://127.0.0.1:8265")
    monkeypatch.setenv("REEF_ENGINE_URL", engine.url)
    led = ledger_of(project)
    _prime(led, engine)
    r = train(reef, project, "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    log = Path(out["trainer"]["log"]).read_text()
    assert "RAY_ADDRESS=http://127.0.0.1:8265" in log
    argv = out["trainer"]["argv"]
    assert argv[1] == str(slime / "train.py")
    for flag in ("--hf-checkpoint", "--load", "--save", "--prompt-data", "--rollout-num-gpus",
                 "--rollout-function-path", "--update-weight-disk-dir", "--advantage-estimator"):
        assert flag in argv
    assert argv[argv.index("--hf-checkpoint") + 1] == "/models/base"  # what the engine serves
    # a relative REEF_SLIME_DIR is where the user is (-C), as a relative --trainer path is; before, it was looked for
    # in reef's own working directory and the step failed with "no train.py there"
    monkeypatch.setenv("REEF_SLIME_DIR", "../slime")
    _prime(led, engine)
    r = reef("-C", str(project), "-s", SCEN, "train", "--json")
    assert r.code == 0, r.err
    assert Path(json.loads(r.out)["trainer"]["argv"][1]).resolve() == slime / "train.py"


def test_rollback_reloads_an_earlier_checkpoint_as_a_new_release(reef, project, engine):
    led = ledger_of(project)
    _prime(led, engine)
    first = json.loads(train(reef, project, *swap_args(engine), "--json").out)
    _prime(led, engine)
    second = json.loads(train(reef, project, *swap_args(engine), "--json").out)
    r = reef("-C", str(project), "-s", SCEN, "rollback", "1")
    assert r.code == 4 and "roll it back with 'reef -s model train --rollback 1 --engine URL'" in r.err
    r = reef("-C", str(project), "-s", SCEN, "train", "--rollback", "1", "--engine", engine.url, "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["checkpoint"] == first["checkpoint"] and engine.model_path == first["checkpoint"]
    assert engine.weight_version == out["runtime_load_id"] and out["runtime_load_id"].startswith("3:rb-")
    log = json.loads(reef("-C", str(project), "-s", SCEN, "log", "--json").out)
    assert [x["operation"] for x in log] == ["rollback", "train", "train"]
    assert log[0]["content_id"] == log[2]["content_id"] and log[0]["meta"]["rolled_back_release_id"] == second["release_id"]
    again = reef("-C", str(project), "-s", SCEN, "train", "--rollback", "1", "--engine", engine.url)
    assert again.code == 0 and "nothing to do" in again.out
    # the next training step starts from the checkpoint that is served now, after the same high-water mark
    _prime(led, engine, 1)
    third = json.loads(train(reef, project, *swap_args(engine), "--json").out)
    assert third["selection"]["records"] == 1
    assert f"hf-checkpoint={first['checkpoint']}" in Path(third["trainer"]["log"]).read_text()
    # a checkpoint whose bytes changed since its release is never reloaded
    (Path(second["checkpoint"]) / "model.safetensors").write_bytes(b"tampered")
    r = reef("-C", str(project), "-s", SCEN, "train", "--rollback", "2", "--engine", engine.url)
    assert r.code == 4 and "no longer holds the bytes release" in r.err and "nothing was reloaded" in r.err
    assert engine.weight_version == third["runtime_load_id"]


def test_openclawrl_last_turn_waits_for_its_next_state_across_runs(reef, project, engine):
    led = ledger_of(project)
    first = inference(led, engine, prompt="write the parser", session="s")
    scored(led, inference(led, engine, prompt="other"), 1.0)  # something to train on now
    out = json.loads(train(reef, project, *swap_args(engine), "--json", recipe="openclawrl").out)
    assert out["selection"]["records"] == 1 and out["selection"]["pending"] == 1
    inference(led, engine, prompt="write the parser", session="s")  # the user asked again: the first answer failed
    dry = json.loads(train(reef, project, "--dry-run", "--json", recipe=None).out)["selection"]
    assert [(s["record_id"], s["reward"]) for s in dry["samples"]] == [(first.record_id, 0.0)]


def test_trainer_and_eval_paths_are_relative_to_where_the_user_is(reef, project, engine):
    """`reef -C sub train --trainer 'python my_train.py'` (or typing it in sub/) finds sub/my_train.py, as a shell would;
    before, the trainer ran at the project root and its relative path was not found."""
    import shutil

    sub = project / "tools"
    sub.mkdir()
    shutil.copy(FAKES / "slime_train.py", sub / "my_train.py")
    (sub / "score.py").write_text("print(1)\n")
    _prime(ledger_of(project), engine)
    r = reef("-C", str(sub), "-s", SCEN, "train", "--recipe", "sao", "--engine", engine.url,
             "--trainer", f"{sys.executable} my_train.py", "--eval", f"{sys.executable} score.py", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["gate"]["score"] == 1.0 and engine.weight_version == out["runtime_load_id"]


def test_a_long_trainer_line_keeps_its_end(tmp_path):
    from reef_cli.weights.trainer import _last_line

    log = tmp_path / "trainer.log"
    log.write_text("starting\n" + "python: can't open file '" + "/very/long/path" * 20 + "': [Errno 2] No such file or directory\n")
    line = _last_line(log)
    assert len(line) <= 160 and line.startswith("python: can't open file '/very") and " … " in line
    assert line.endswith("[Errno 2] No such file or directory")


def test_a_weight_gate_that_cannot_run_rolls_back_or_says_the_weights_stay(reef, project, engine):
    led = ledger_of(project)
    broken = ("--eval", f"{sys.executable} -c 'import sys; sys.exit(3)'")
    _prime(led, engine)
    first = train(reef, project, *swap_args(engine), *broken)  # no earlier weights (no --init): nothing to reload
    head = _head(reef, project)
    assert first.code == 1 and first.err == (
        f"reef: error: weight gate: could not run: --eval \"{sys.executable} -c 'import sys; sys.exit(3)'\" exited 3 "
        f"without a score; there are no earlier weights to reload, so the new ones (release {head['release_id']}) "
        "stay published\n")
    assert [f["stage"] for f in _failures(led)] == ["gate"]
    _prime(led, engine)
    second = train(reef, project, *swap_args(engine), *broken, recipe=None)
    now = _head(reef, project)
    assert second.code == 4 and now["operation"] == "rollback" and now["meta"]["rollback_target_release_id"] == head["release_id"]
    assert "could not be judged (could not run: --eval" in second.err and "rolled back — release" in second.err
    assert engine.weight_version == now["runtime_load_id"] and engine.model_path == head["meta"]["checkpoint"]


def test_secrets_on_the_trainer_and_eval_command_lines_are_never_stored(reef, project, engine):
    """`--trainer '... --wandb-key K'` and `--eval '... --api-key K'`: the step runs with the real keys, but the
    release meta, run.json, the ledger, verdicts.json and the output carry them redacted. trainer.log is redacted as
    it is written (tests/test_secret_paths.py), but the fake trainer echoes its arguments as a Python list
    (`['--wandb-key', 'K']`), a shape the redactor does not read as a flag and its value yet: left out here."""
    key, tok = "sk-live-" + "a1b2c3d4e5" * 3, "0123456789abcdef" * 3
    score = project / "score.py"
    score.write_text(f"import sys\nassert sys.argv[-1] == {tok!r}\nprint(1)\n")
    _prime(ledger_of(project), engine)
    for extra in ((), ("--eval", f"{sys.executable} {score} --api-key {tok}")):
        r = train(reef, project, "--engine", engine.url, "--trainer", f"{TRAINER} --wandb-key {key}", *extra, "--json")
        assert r.code == 0, r.err
        assert key not in r.out + r.err and tok not in r.out + r.err
        _prime(ledger_of(project), engine)
    out = json.loads(r.out)
    assert out["gate"]["score"] == 1.0 and "[REDACTED" in out["gate"]["command"]
    from reef_cli.project import Project
    from reef_cli.store import HarnessStore

    metas = json.dumps([rel.meta for rel in HarnessStore(Project(project), SCEN).releases()])
    stored = metas + "".join(p.read_text(errors="replace") for p in (project / ".reef").rglob("*")
                               if p.is_file() and "objects" not in p.parts and p.name != "trainer.log")
    assert "[REDACTED" in stored and key not in stored and tok not in stored


def test_a_killed_train_stops_its_trainer(project, engine, tmp_path):
    """kill -9 of `reef train` mid-training: the trainer (in its own session) gets SIGTERM instead of holding the GPUs
    for a step nobody will publish; the rerun trains the same records."""
    import os
    import subprocess
    import time

    from conftest import reef_exe
    from test_weight_gate import _cmdline, _ppid

    _prime(ledger_of(project), engine)
    argv = [reef_exe(), "-C", str(project), "-s", SCEN, "train", "--recipe", "sao", *swap_args(engine), "--json"]
    proc = subprocess.Popen(argv, env={**os.environ, "FAKE_TRAINER_SLEEP": "30"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    trainer: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not trainer and time.monotonic() < deadline:
            time.sleep(0.1)
            trainer = [int(d) for d in os.listdir("/proc") if d.isdigit() and _ppid(int(d)) == proc.pid
                       and b"slime_train.py" in _cmdline(int(d))]
        assert trainer, "the trainer never started"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 15
        while _ppid(trainer[0]) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ppid(trainer[0]) is None, "the trainer outlived the reef train that started it"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in trainer:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["selection"]["records"] == 2


def test_a_checkpoint_follows_symlinks_inside_it_and_refuses_others(tmp_path):
    """rv-attack: symlinked checkpoint files were skipped in silence, so a release named a checkpoint without bytes
    the engine loads. A link inside the checkpoint is followed (named under its own path); one outside, one that
    dangles and a linked directory are refused with one line naming the link."""
    import os

    from reef_cli.errors import InvalidInput
    from reef_cli.weights.state import checkpoint_manifest

    ckpt = tmp_path / "ckpt"
    (ckpt / "shards").mkdir(parents=True)
    (ckpt / "shards" / "model-1.safetensors").write_bytes(b"weights")
    (ckpt / "config.json").write_text("{}")
    os.symlink("shards/model-1.safetensors", ckpt / "model.safetensors")
    files = checkpoint_manifest(ckpt)["files"]
    assert sorted(files) == ["config.json", "model.safetensors", "shards/model-1.safetensors"]
    assert files["model.safetensors"] == files["shards/model-1.safetensors"]
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"not in the checkpoint")
    for name, target, why in (("far.bin", outside, f"is a symlink to {outside}, outside the checkpoint"),
                              ("gone.bin", tmp_path / "nope", "which does not exist"),
                              ("linked", ckpt / "shards", "is a symlink to a directory")):
        os.symlink(target, ckpt / name)
        with pytest.raises(InvalidInput, match=f"checkpoint {ckpt}: {name} .*{why}") as caught:
            checkpoint_manifest(ckpt)
        assert "\n" not in str(caught.value)
        os.unlink(ckpt / name)


def test_the_sglang_gateway_redacts_the_prompt_it_keeps_for_training(tmp_path, engine):
    """In front of SGLang the gateway keeps the client's messages (and the call's token ids) for training, without
    --store-content. They were stored as sent: a key pasted into a chat reached the ledger in clear. The messages
    are now redacted like stored content, and a call with a secret keeps no token ids (they decode back to it)."""
    import urllib.request

    from gateway import in_process, init_project
    from reef_cli.ledger import Ledger
    from reef_cli.project import Project
    from reef_cli.serve.app import Gateway, ServeConfig

    project = init_project(tmp_path / "proj")
    gw = Gateway(ServeConfig(project=Project(project), scenario="default", upstream=engine.url + "/v1",
                             upstream_api="sglang", port=0), {},
                 log=open(tmp_path / "log", "w"), out=open(tmp_path / "out", "w"))
    secret = "sk-ant-api03-" + "A" * 90
    tool = {"type": "function", "function": {"name": "deploy", "description": f"deploys with token {secret}",
                                             "parameters": {"type": "object", "properties": {}}}}
    with in_process(gw) as url:
        for content, extra in ((f"my key is {secret}", {}), ("fix the bug", {}), ("deploy it", {"tools": [tool]})):
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}], **extra}).encode()
            request = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                             headers={"content-type": "application/json"})
            with urllib.request.urlopen(request, timeout=20) as answer:
                assert answer.status == 200
    ledger = project / ".reef" / "scenarios" / "default" / "ledger.jsonl"
    assert secret not in ledger.read_text()
    with_secret, plain, in_a_tool = [r.payload for r in Ledger(ledger, "default").iter_records(kind="inference")]
    # the token ids also encode the request's tools: a secret in one means none are kept
    assert "training" not in in_a_tool and in_a_tool["training_withheld"].startswith("a secret was found")
    assert "sk-ant-api03-" not in json.dumps(with_secret["prompt"]) and "training" not in with_secret
    assert with_secret["training_withheld"].startswith("a secret was found")
    assert plain["prompt"] == [{"role": "user", "content": "fix the bug"}] and plain["training"]["prompt_token_ids"]


def test_an_inline_image_in_a_kept_prompt_is_stored_as_its_digest(tmp_path, engine):
    """Megabytes of base64 in a `data:` URL were redacted byte by byte (seconds, in the committer thread every
    record waits behind) and stored whole; the training record keeps its media type, length and digest."""
    import hashlib
    import urllib.request

    from gateway import in_process, init_project
    from reef_cli.ledger import Ledger
    from reef_cli.project import Project
    from reef_cli.serve.app import Gateway, ServeConfig

    project = init_project(tmp_path / "proj")
    gw = Gateway(ServeConfig(project=Project(project), scenario="default", upstream=engine.url + "/v1",
                             upstream_api="sglang", port=0), {},
                 log=open(tmp_path / "log", "w"), out=open(tmp_path / "out", "w"))
    image = "data:image/png;base64," + "iVBORw0KGgo" * 20_000
    parts = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": image}}]
    with in_process(gw) as url:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": parts}]}).encode()
        request = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 200
    [payload] = [r.payload for r in Ledger(project / ".reef" / "scenarios" / "default" / "ledger.jsonl",
                                           "default").iter_records(kind="inference")]
    kept = payload["prompt"][0]["content"][1]["image_url"]["url"]
    assert kept == f"data:image/png;length={len(image)};sha256={hashlib.sha256(image.encode()).hexdigest()}"


def test_a_trainer_command_line_is_stored_with_its_secrets_redacted_as_typed():
    """shown_argv joined the words with shlex, which quotes a word holding `$` or `!`: a MySQL-style `-pS3c$ret!x`
    then sat inside quotes, where the password rule does not look, and was stored in clear (run.json, records)."""
    from reef_cli.weights.trainer import shown_argv

    assert shown_argv(["mysql", "-uroot", "-pS3c$ret!x", "db"]) == ["mysql", "-uroot", "-p[REDACTED:password]", "db"]
    assert shown_argv(["python", "t.py", "--wandb-key", "abc$def1234567890xyz", "--lr", "1e-5"]) == \
        ["python", "t.py", "--wandb-key", "[REDACTED:api_key]", "--lr", "1e-5"]
