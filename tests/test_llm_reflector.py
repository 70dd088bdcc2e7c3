"""The LLM Reflector against fake OpenAI and Anthropic servers speaking the real protocols: grounded lessons,
secrets that never reach the server, observe-only records never sent, batching, the budget stopping a run cleanly
(and the next run taking up where it stopped), --dry-run estimates, --show-prompt, usage in the ledger, prices."""

from __future__ import annotations

import json

import pytest

from fakes import text
from test_evolve import feedback, init_project, memory, session

SECRET = "ghp_" + "A1b2C3d4E5" * 4  # a GitHub token's shape: redact.py knows it


def reflect(reef, root, *args, code=0):
    r = reef("-C", str(root), "harness", "reflect", "--json", *args)
    assert r.code == code, r.err
    return json.loads(r.out) if code == 0 and r.out.strip() else {"err": r.err, "out": r.out}


def args(fake_llm, backend="openai"):
    url = fake_llm.base_url if backend == "openai" else fake_llm.url
    return ("--backend", backend, "--model-url", url, "--model", "cheap-model")


def answer(*lessons) -> str:
    return json.dumps({"lessons": list(lessons)})


def test_anthropic_messages_backend(reef, tmp_path, fake_llm, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-0000")
    (rid,) = feedback(ledger, "You keep leaving debug prints in; remove them before committing.")
    fake_llm.reply(text(answer({"text": "Remove debug prints before committing.", "polarity": "do",
                                "evidence": [rid], "quotes": [{"record_id": rid, "text": "leaving debug prints"}]}),
                        input_tokens=900, output_tokens=40))
    out = reflect(reef, root, *args(fake_llm, "anthropic"))
    assert out["observations"] == 1 and out["rejected"] == []
    assert out["usage"] == {"calls": 1, "input_tokens": 900, "output_tokens": 40, "cost": None, "estimated": False,
                            "budget_stopped": None}
    (req,) = fake_llm.calls
    assert req.route == "anthropic.messages" and req.headers["x-api-key"] == "sk-ant-test-key-0000"
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.json["model"] == "cheap-model" and "Reflector of reef" in req.json["system"]
    assert "sk-ant-test-key-0000" not in req.body.decode() and rid in req.json["messages"][0]["content"]
    assert any(p["text"] == "Remove debug prints before committing." for p in memory(root).values())
    (summary,) = [r for r in ledger.iter_records() if r.kind == "reflect"]
    assert summary.payload["usage"]["input_tokens"] == 900  # usage is in the ledger
    assert "sk-ant-test-key-0000" not in ledger.path.read_text()


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_secret_in_feedback_never_reaches_the_server(reef, tmp_path, fake_llm, backend):
    root, ledger = init_project(reef, tmp_path)
    # written straight to the ledger, bypassing `reef report`'s redaction (an old ledger, another writer)
    rep = session(ledger, f"Deploys failed: you pasted the token {SECRET} into the config. Never do that.")
    assert SECRET in ledger.path.read_text()
    fake_llm.reply(text(answer()))
    out = reflect(reef, root, *args(fake_llm, backend))
    assert out["usage"]["calls"] == 1
    body = fake_llm.calls[0].body.decode()
    assert rep.record_id in body and SECRET not in body and "[REDACTED:" in body


def test_observe_only_records_are_never_sent(reef, tmp_path, fake_llm):
    root, ledger = init_project(reef, tmp_path)
    hidden = session(ledger, "OBSERVE-ONLY-7781 use the shadow branch", observe_only=True)
    seen = session(ledger, "Use the main branch for hotfixes.")
    fake_llm.reply(text(answer()))
    reflect(reef, root, *args(fake_llm))
    body = fake_llm.calls[0].body.decode()
    assert seen.record_id in body and hidden.record_id not in body and "OBSERVE-ONLY-7781" not in body


def test_batching_and_the_budget_stop_then_resume(reef, tmp_path, fake_llm, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    ids = feedback(ledger, {"do": "run the linter before committing"}, 45)
    monkeypatch.setenv("REEF_REFLECTOR_BATCH_SIZE", "10")
    monkeypatch.setenv("REEF_REFLECTOR_MAX_CALLS", "2")
    for _ in range(8):
        fake_llm.reply(text(answer()))
    first = reflect(reef, root, *args(fake_llm))
    assert len(fake_llm.calls) == 2 and first["budget_stopped"] is True
    assert first["usage"]["budget_stopped"] == "max_calls 2 reached"
    assert first["observations"] == 20  # the answered batches' own lessons only
    assert first["through_seq"] == ledger.get(ids[20]).seq - 1  # the mark stops before the first unanswered record
    monkeypatch.setenv("REEF_REFLECTOR_MAX_CALLS", "10")
    second = reflect(reef, root, *args(fake_llm))
    assert len(fake_llm.calls) == 5 and second["observations"] == 25 and second["budget_stopped"] is False
    (pat,) = memory(root).values()
    assert pat["count"] == 45  # nothing counted twice across the stop
    assert [r.payload["usage"]["calls"] for r in ledger.iter_records() if r.kind == "reflect"] == [2, 3]


def test_token_budget_stops_before_sending(reef, tmp_path, fake_llm, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always pin dependency versions.", 3)
    monkeypatch.setenv("REEF_REFLECTOR_MAX_INPUT_TOKENS", "50")
    out = reflect(reef, root, *args(fake_llm))
    assert fake_llm.calls == [] and out["budget_stopped"] is True and out["from_seq"] == out["through_seq"] == 0
    assert "max_input_tokens 50 would be exceeded" in out["usage"]["budget_stopped"]


def test_dry_run_estimates_and_show_prompt_prints_without_sending(reef, tmp_path, fake_llm, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, f"Stop echoing {SECRET} in logs.", 1)
    feedback(ledger, "Prefer pathlib over os.path.", 24)
    monkeypatch.setenv("REEF_REFLECTOR_BATCH_SIZE", "10")
    out = reflect(reef, root, "--dry-run", *args(fake_llm))
    assert fake_llm.calls == [] and out["usage"]["estimated"] is True and out["usage"]["calls"] == 3
    assert out["usage"]["input_tokens"] > 1000 and out["written"] is False
    r = reef("-C", str(root), "harness", "reflect", "--show-prompt", "--json", *args(fake_llm))
    assert r.code == 0, r.err
    prompts = json.loads(r.out)
    assert len(prompts) == 3 and prompts[0]["url"] == fake_llm.base_url + "/chat/completions"
    assert prompts[0]["body"]["messages"][0]["role"] == "system"
    assert SECRET not in r.out and "[REDACTED:" in r.out and fake_llm.calls == []
    human = reef("-C", str(root), "harness", "reflect", "--dry-run", *args(fake_llm))
    assert "model estimate: 3 call(s)" in human.out


def test_max_cost_needs_a_price_and_prices_give_the_cost(reef, tmp_path, fake_llm, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Use ruff, not flake8.")
    monkeypatch.setenv("REEF_REFLECTOR_MAX_COST", "0.01")
    r = reef("-C", str(root), "harness", "reflect", *args(fake_llm))
    assert r.code == 4 and "reflector.budget.max_cost needs a price for model 'cheap-model'" in r.err
    cfg = root / "harness.yaml"
    cfg.write_text(cfg.read_text() + "reflector:\n  prices:\n    cheap-model: {input: 1.0, output: 4.0}\n")
    assert reef("-C", str(root), "publish", "-m", "prices").code == 0
    fake_llm.reply(text(answer(), input_tokens=1000, output_tokens=500))
    out = reflect(reef, root, *args(fake_llm))
    assert out["usage"]["cost"] == pytest.approx(0.003)


def test_a_truncated_anthropic_answer_is_refused(reef, tmp_path, fake_llm):
    from fakes import raw

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.")
    cut = raw(json.dumps({"type": "message", "role": "assistant", "content": [{"type": "text", "text": '{"less'}],
                          "stop_reason": "max_tokens", "usage": {"input_tokens": 10, "output_tokens": 1500}}))
    fake_llm.reply(cut, cut)
    out = reflect(reef, root, *args(fake_llm, "anthropic"), code=1)
    assert "cut off at max_tokens" in out["err"] and "high-water mark did not move" in out["err"]


def _cited(rid: str) -> dict:
    return {"text": "Run the tests before finishing.", "evidence": [rid], "quotes": [{"record_id": rid,
                                                                                    "text": "run the tests"}]}


def test_a_malformed_answer_skips_its_batch_and_the_run_goes_on(reef, tmp_path, fake_llm, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    ids = feedback(ledger, "Always run the tests before finishing.", 6)
    monkeypatch.setenv("REEF_REFLECTOR_BATCH_SIZE", "2")
    bad = text("Sure! Here are some lessons: 1. Use tabs.")
    fake_llm.reply(text(answer(_cited(ids[0]), _cited(ids[1]))), bad, bad,  # the second batch: a try and its retry
                   text(answer(_cited(ids[4]), _cited(ids[5]))))
    r = reef("-C", str(root), "harness", "reflect", "--json", *args(fake_llm))
    assert r.code == 0, r.err
    out = json.loads(r.out)
    (skipped,) = out["skipped_batches"]
    assert skipped["records"] == ids[2:4] and "the model's message is not a JSON object" in skipped["reason"]
    warning = "reef: warning: skipped a malformed answer of the reflector model for 2 record(s): "
    (line,) = [ln for ln in r.err.splitlines() if ln.strip()]  # one line
    assert line.startswith(warning) and line.endswith(f"(recorded as {skipped['rejection']})")
    assert out["observations"] == 4 and out["through_seq"] >= ledger.get(ids[5]).seq
    (pat,) = memory(root).values()
    assert pat["count"] == 4 and sorted(pat["evidence"]) == sorted(ids[:2] + ids[4:])
    (rej,) = [x for x in ledger.iter_records(kind="rejection") if x.record_id == skipped["rejection"]]
    assert rej.payload["lesson"]["cites"] == ids[2:4] and "not a JSON object" in rej.payload["reason"]
    assert len(fake_llm.calls) == 4
    again = reflect(reef, root, *args(fake_llm))  # read past: the skipped batch is not paid for again
    assert len(fake_llm.calls) == 4 and again["observations"] == 0


def test_a_run_whose_every_answer_is_malformed_is_an_error(reef, tmp_path, fake_llm, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    ids = feedback(ledger, "Always run the tests before finishing.", 4)
    monkeypatch.setenv("REEF_REFLECTOR_BATCH_SIZE", "2")
    before = (root / "reef/memory/patterns.json").read_bytes()
    bad = text(json.dumps({"answer": []}))
    fake_llm.reply(bad, bad, bad, bad)
    r = reef("-C", str(root), "harness", "reflect", *args(fake_llm))
    assert r.code == 1
    assert r.err.splitlines()[-1] == (
        "reef: error: every answer of the reflector model was malformed (2 batch(es), 4 record(s); the last: "
        f"{fake_llm.base_url}/chat/completions: the model's JSON has no 'lessons' list); each is recorded as a "
        "rejection; nothing was reflected (the high-water mark did not move)")
    assert (root / "reef/memory/patterns.json").read_bytes() == before
    assert sorted(c for x in ledger.iter_records(kind="rejection") for c in x.payload["lesson"]["cites"]) == sorted(ids)
    fake_llm.reply(text(answer(*map(_cited, ids[:2]))), text(answer(*map(_cited, ids[2:]))))
    assert reflect(reef, root, *args(fake_llm))["observations"] == 4  # the next run takes them up


def test_hostile_answers_skip_their_batch_or_fold_never_an_unexpected_error(reef, tmp_path, fake_llm, monkeypatch):
    """An answer nested deeper than the JSON decoder goes (OpenAI body or message text) is malformed like any other;
    a usage count that is not a number ("lots", 1e999) is unreported, not a crash, and the lessons still fold; an
    Anthropic text block whose text is not a string is no text."""
    from fakes.llm_server import raw

    root, ledger = init_project(reef, tmp_path)
    ids = feedback(ledger, "Always run the tests before finishing.", 8)
    monkeypatch.setenv("REEF_REFLECTOR_BATCH_SIZE", "2")
    deep_body, deep_text = raw("[" * 100_000 + "]" * 100_000), text("[" * 100_000 + "]" * 100_000)
    bad_usage = raw(json.dumps({"choices": [{"message": {"content": answer(_cited(ids[4]), _cited(ids[5]))}}],
                                "usage": {"prompt_tokens": "lots", "completion_tokens": [1]}}))
    inf_usage = ('{"choices": [{"message": {"content": %s}}], "usage": {"prompt_tokens": 1e999}}'
                 % json.dumps(answer(_cited(ids[6]), _cited(ids[7]))))
    fake_llm.reply(deep_body, deep_body, deep_text, deep_text, bad_usage, raw(inf_usage))
    r = reef("-C", str(root), "harness", "reflect", "--json", *args(fake_llm))
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert [s["records"] for s in out["skipped_batches"]] == [ids[0:2], ids[2:4]]
    assert "the answer is not valid JSON" in out["skipped_batches"][0]["reason"]
    assert "the model's message is not a JSON object" in out["skipped_batches"][1]["reason"]
    assert out["observations"] == 4 and out["through_seq"] >= ledger.get(ids[7]).seq
    assert reef("-C", str(root), "ledger", "verify").code == 0

    ids = feedback(ledger, "Always run the tests before finishing.", 2)
    blocks = [{"type": "text", "text": 5}, {"type": "text", "text": None}, {"type": "text", "text": answer(
        _cited(ids[0]), _cited(ids[1]))}]
    fake_llm.reply(raw(json.dumps({"content": blocks, "usage": {"input_tokens": "x", "output_tokens": -3}})))
    assert reflect(reef, root, *args(fake_llm, "anthropic"))["observations"] == 2


def test_a_hand_edit_saved_while_the_model_thinks_is_never_overwritten(reef, tmp_path, fake_llm):
    """The user deletes a pattern from reef/memory/patterns.json while a model-backed reflect waits for its answer:
    reflect refuses to write over it (exit 3, naming the file), records nothing, and the next reflect folds the same
    records into the edited file. It used to write back what it had read, so the deleted pattern came back, exit 0."""
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Run the linter before committing.", 3)
    feedback(ledger, "Use tabs for indentation.", 3)
    assert reef("-C", str(root), "harness", "reflect").code == 0  # the builtin reflector: patterns in the file
    path = root / "reef" / "memory" / "patterns.json"
    doc = json.loads(path.read_text())
    assert any("tab" in p["key"] for p in doc["patterns"])
    (rid,) = feedback(ledger, "You merged without a changelog entry.")
    edited = json.dumps({**doc, "patterns": [p for p in doc["patterns"] if "tab" not in p["key"]]}, indent=2) + "\n"
    lesson = answer({"text": "Write the changelog entry before merging.", "polarity": "do", "evidence": [rid]})

    def user_saves_then_model_answers(_req):
        path.write_text(edited)
        return text(lesson)

    fake_llm.default = user_saves_then_model_answers
    reflects = sum(r.kind == "reflect" for r in ledger.iter_records())
    out = reflect(reef, root, *args(fake_llm), code=3)
    assert out["err"] == ("reef: error: reef/memory/patterns.json changed while reef was reflecting into it (it no "
                          "longer holds the bytes reflect read); reef left your edit as it is and recorded nothing, "
                          "so the same records are still to reflect - run 'reef harness reflect' again to fold them "
                          "into the file as it is now\n")
    assert path.read_text() == edited
    assert sum(r.kind == "reflect" for r in ledger.iter_records()) == reflects
    fake_llm.default = text(lesson)
    again = reflect(reef, root, *args(fake_llm))
    assert again["written"] is True and rid in fake_llm.calls[-1].body.decode()
    keys = set(memory(root))
    assert not any("tab" in k for k in keys) and any("changelog" in k for k in keys)
