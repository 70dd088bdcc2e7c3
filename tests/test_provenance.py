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
