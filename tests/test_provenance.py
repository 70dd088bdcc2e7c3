"""Weights x gateway, end to end on CPU: a fake SGLang engine behind a real `reef serve` subprocess, the real openai
SDK, `reef train` with the fake slime trainer consuming the records serve wrote, a weight release with a new load
id, and the provenance check (retry once, then 409 / no receipt, recorded) streaming and not."""

from __future__ import annotations

import json
import sys

import openai
import pytest

from gateway import Gateway
from test_weights import SCEN, engine, inference, ledger_of, project, scored, swap_args, train  # noqa: F401


def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0,
                         default_headers={"x-reef-scenario": SCEN})


def ask(gw: Gateway, text: str):
    return client(gw).chat.completions.with_raw_response.create(
        model="smol", messages=[{"role": "user", "content": text}], max_tokens=4)


EVAL = """\
import os, sys, openai
# a canary set scored through reef serve: an answer only counts when serve verified the candidate's weights
c = openai.OpenAI(base_url=os.environ["REEF_SERVE_URL"] + "/v1", api_key="unused", max_retries=0,
                  default_headers={"x-reef-scenario": "model", "x-reef-tag-purpose": "weight-gate"})
ok = 0
for prompt in ("canary 1", "canary 2"):
    try:
        c.chat.completions.create(model="smol", messages=[{"role": "user", "content": prompt}], max_tokens=4)
        ok += 1
    except openai.ConflictError:
        pass
print(ok / 2)
"""


def test_serve_records_train_consumes_new_load_id_answers_and_mismatch_is_refused(reef, project, engine, tmp_path,
                                                                                  monkeypatch):
    # a first weight release (serve freezes a scenario's head, so the weights scenario needs one)
    led = ledger_of(project)
    scored(led, inference(led, engine, prompt="seed"), 1.0, "check")
    first = train(reef, project, *swap_args(engine), "--json")
    assert first.code == 0, first.err
    load1 = json.loads(first.out)["runtime_load_id"]

    with Gateway(project, engine.url + "/v1", "--upstream-api", "sglang") as gw:
        raws = [ask(gw, f"task {i}") for i in range(2)]
        rids = [r.headers["x-reef-agent-record-id"] for r in raws]
        sent = engine.chat_bodies[-1]
        assert sent["logprobs"] is True and sent["return_meta_info"] is True and sent["return_prompt_token_ids"] is True
        led = ledger_of(project)
        for rid in rids:
            p = led.get(rid).payload
            assert p["outcome"] == "ok" and p["weight_version"] == load1
            assert p["provenance"]["ok"] and p["provenance"]["expected"] == load1
            assert p["prompt"][0]["content"].startswith("task ")
            t = p["training"]
            assert t["prompt_token_ids"] and len(t["output_token_ids"]) == len(t["output_logprobs"]) == 4
        import urllib.request

        for rid, score in zip(rids, (1.0, 0.0)):
            req = urllib.request.Request(gw.url + "/reef/report", method="POST",
                                         data=json.dumps({"score": score, "receipts": [rid]}).encode(),
                                         headers={"x-reef-scenario": SCEN, "Content-Type": "application/json"})
            assert urllib.request.urlopen(req).status == 200

        # reef train consumes exactly the serve records, hot-swaps, publishes a new load id, and its weight gate
        # scores the candidate through the same gateway (REEF_SERVE_URL): each canary answer verified against it
        evaluator = tmp_path / "eval_via_serve.py"
        evaluator.write_text(EVAL)
        monkeypatch.setenv("REEF_SERVE_URL", gw.url)
        r = train(reef, project, *swap_args(engine), "--eval", f"{sys.executable} {evaluator}", "--json", recipe=None)
        assert r.code == 0, r.err
        out = json.loads(r.out)
        load2, rel2 = out["runtime_load_id"], out["release_id"]
        assert load2 != load1 and sorted(s["record_id"] for s in out["selection"]["samples"]) == sorted(rids)
        assert out["gate"]["passed"] and out["gate"]["score"] == 1.0
        canaries = [x.payload for x in ledger_of(project).iter_records()
                    if x.kind == "inference" and (x.payload.get("tags") or {}).get("purpose") == "weight-gate"]
        assert [(c["weight_version"], c["outcome"]) for c in canaries] == [(load2, "ok")] * 2

        # new requests through the same gateway: answered and recorded under the new release and load id
        raw = ask(gw, "after the swap")
        assert raw.headers["x-reef-release-id"] == rel2
        p = ledger_of(project).get(raw.headers["x-reef-agent-record-id"]).payload
        assert p["weight_version"] == load2 and p["outcome"] == "ok"

        # a stale answer once (the engine swapped behind reef's back, then back): retried, the client sees 200
        engine.answer_versions = ["rogue"]
        raw = ask(gw, "retry me")
        p = ledger_of(project).get(raw.headers["x-reef-agent-record-id"]).payload
        assert p["outcome"] == "ok" and p["weight_version"] == load2
        assert p["retried"] == [f"answered by weight version rogue, expected {load2}"]

        # stale twice: 409, recorded as refused with the version that answered
        engine.answer_versions = ["rogue", "rogue"]
        with pytest.raises(openai.ConflictError) as err:
            ask(gw, "refuse me")
        assert f"answered by weight version rogue, expected {load2}" in str(err.value)
        rid = err.value.response.headers["x-reef-agent-record-id"]
        p = ledger_of(project).get(rid).payload
        assert p["outcome"] == "refused" and p["status"] == 409
        assert p["provenance"]["answered"] == "rogue" and len(p["retried"]) == 1

        # streaming: SGLang refuses meta info on streams, so the check asks the engine when the stream ends
        chunks = list(client(gw).chat.completions.create(model="smol", messages=[{"role": "user", "content": "s"}],
                                                         stream=True))
        assert "return_meta_info" not in engine.chat_bodies[-1]
        receipt = chunks[-1].model_extra["reef"]
        p = ledger_of(project).get(receipt["agent_record_id"]).payload
        assert p["outcome"] == "ok" and p["weight_version"] == load2 and p["provenance"]["source"] == "engine"
        assert receipt["release_id"] == rel2

        # the engine swaps weights mid-stream: the stream ends without a receipt, the record says refused
        engine.swap_mid_stream = "rogue-2"
        stream = client(gw).chat.completions.with_raw_response.create(
            model="smol", messages=[{"role": "user", "content": "s2"}], stream=True)
        rid = stream.headers["x-reef-agent-record-id"]
        chunks = list(stream.parse())
        assert chunks and all("reef" not in (c.model_extra or {}) for c in chunks)
        p = ledger_of(project).get(rid).payload
        assert p["outcome"] == "refused" and p["provenance"]["answered"] == "rogue-2"
        assert gw.stop() == 0  # drained, ledgers verified


# -- starting a weights scenario: the engine's base weights as step 1, so serve can record before any training ----
def test_init_base_weights_then_serve_records_under_step_1_and_train_publishes_step_2(project, engine, tmp_path):
    from conftest import run_reef

    base_dir = tmp_path / "base-model"  # the engine serves a real directory, so a rollback can reload it
    base_dir.mkdir()
    (base_dir / "config.json").write_text("{}")
    engine.model_path = str(base_dir)

    # serve names the exact command when the scenario does not exist yet (and writes nothing)
    missing = run_reef("-s", SCEN, "serve", "--upstream", engine.url + "/v1", "--upstream-api", "sglang", "--port", "0",
                       cwd=project)
    assert missing.returncode == 1 and missing.stdout == ""
    assert (f"scenario '{SCEN}' does not exist" in missing.stderr
            and f"'reef -s {SCEN} train --recipe sao --engine {engine.url} --init'" in missing.stderr)
    assert not (project / ".reef" / "scenarios" / SCEN).exists()

    with Gateway(project, engine.url + "/v1", "--upstream-api", "sglang") as gw:
        # a request for it while serve runs (header-routed): 404 naming the same command
        with pytest.raises(openai.NotFoundError) as err:
            ask(gw, "too early")
        assert f"'reef -s {SCEN} train --recipe sao --engine {engine.url} --init'" in str(err.value)

        init = run_reef("-s", SCEN, "train", "--recipe", "sao", "--engine", engine.url, "--init", "--json",
                        cwd=project)
        assert init.returncode == 0, init.stderr
        base = json.loads(init.stdout)
        assert base["step"] == 1 and base["runtime_load_id"] == "default" and base["base_model_path"] == str(base_dir)
        again = run_reef("-s", SCEN, "train", "--engine", engine.url, "--init", cwd=project)
        assert again.returncode == 3 and f"already has release {base['release_id']} (step 1)" in again.stderr

        raws = [ask(gw, f"task {i}") for i in range(2)]
        rids = [r.headers["x-reef-agent-record-id"] for r in raws]
        assert {r.headers["x-reef-release-id"] for r in raws} == {base["release_id"]}
        for rid in rids:
            p = ledger_of(project).get(rid).payload
            assert p["outcome"] == "ok" and p["weight_version"] == "default" and p["provenance"]["ok"]
        import urllib.request

        req = urllib.request.Request(gw.url + "/reef/report", method="POST",
                                     data=json.dumps({"score": 1.0, "receipts": rids}).encode(),
                                     headers={"x-reef-scenario": SCEN, "Content-Type": "application/json"})
        assert urllib.request.urlopen(req).status == 200

        trained = run_reef("-s", SCEN, "train", *swap_args(engine), "--json", cwd=project)
        assert trained.returncode == 0, trained.stderr
        out = json.loads(trained.stdout)
        assert sorted(s["record_id"] for s in out["selection"]["samples"]) == sorted(rids)
        assert out["runtime_load_id"].startswith("2:") and engine.loads[-1]["weight_version"] == out["runtime_load_id"]
        raw = ask(gw, "after the swap")
        assert raw.headers["x-reef-release-id"] == out["release_id"]
        assert ledger_of(project).get(raw.headers["x-reef-agent-record-id"]).payload["weight_version"] == \
            out["runtime_load_id"]
        assert gw.stop() == 0

    # step 1 names the base weights, so rolling back to it reloads the engine's original model path
    back = run_reef("-s", SCEN, "train", "--engine", engine.url, "--rollback", "1", "--json", cwd=project)
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["checkpoint"] == str(base_dir) and engine.model_path == str(base_dir)


def test_init_errors_name_what_to_do(reef, project, engine):
    r = train(reef, project, "--init")
    assert r.code == 4 and "--init needs the engine: pass --engine URL" in r.err
    r = train(reef, project, "--engine", engine.url, "--init", recipe=None)
    assert r.code == 4 and "name its recipe: 'reef -s model train --recipe NAME --engine URL --init'" in r.err
    engine.stop()
    r = train(reef, project, "--engine", engine.url, "--init")
    assert r.code == 1 and "is unreachable" in r.err
    assert not (project / ".reef" / "scenarios" / SCEN / "scenario.json").exists()  # a failed --init wrote nothing
    r = train(reef, project, "--engine", engine.url, "--init", recipe="skillclaw")
    assert r.code == 4 and "create its scenario with 'reef init --scenario model --recipe skillclaw'" in r.err
    r = reef("-C", str(project), "init", "--scenario", "w", "--recipe", "sao")
    assert r.code == 4 and "'reef -s NAME train --recipe sao --engine URL --init'" in r.err
    # a scenario created by an older reef (no release): serve says how to give it one, without --recipe
    from reef_cli.project import Project
    from reef_cli.store import HarnessStore

    HarnessStore(Project(project), SCEN).create("sao")
    r = reef("-C", str(project), "-s", SCEN, "serve", "--upstream", engine.url, "--upstream-api", "sglang")
    assert r.code == 1 and "has no release yet" in r.err and f"'reef -s {SCEN} train --engine {engine.url} --init'" in r.err
