"""The Reflector through the CLI: lessons from feedback/failures/routing, near-duplicates, idempotence, the llm
backend against a fake OpenAI server, and anti-fabrication."""

from __future__ import annotations

import json

import pytest

from fakes import raw, text, truncated
from test_evolve import feedback, init_project, memory, session

from reef_cli.patterns import key_for, polarity_of, similarity, terms_of


def reflect(reef, root, *args, code=0) -> dict:
    r = reef("-C", str(root), "harness", "reflect", "--json", *args)
    assert r.code == code, r.err
    return json.loads(r.out) if code == 0 else {"err": r.err}


def test_similarity_measure():
    a, b = terms_of("Always run the tests before finishing."), terms_of("Please make sure you run the test suite before finishing")
    assert similarity(a, b) == pytest.approx(0.6)
    assert similarity(a, terms_of("Always run the linter before finishing.")) == pytest.approx(0.4)
    assert key_for("do", a) == "do:before+finish+run+test"
    assert polarity_of("Don't force-push to main") == "dont" and polarity_of("Use tabs") == "do"
    assert similarity(terms_of("Use tabs"), terms_of("Write docs")) == 0.0


def test_near_duplicate_lessons_merge_into_one_counted_pattern(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.")
    feedback(ledger, "You forgot again. Run tests before you finish!")
    feedback(ledger, {"lesson": "Please make sure you run the test suite before finishing"})
    feedback(ledger, {"do": "use tabs for indentation", "dont": "force-push to main"})
    out = reflect(reef, root)
    assert out["observations"] == 5 and out["written"] is True
    mem = memory(root)
    assert mem["do:before+finish+run+test"]["count"] == 3
    assert mem["do:before+finish+run+test"]["text"] == "Always run the tests before finishing."
    assert mem["dont:force+main+push"]["text"] == "Do not force-push to main."
    assert mem["do:indentation+tab+use"]["origins"] == {"do": 1}


def test_reflecting_twice_changes_nothing(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.", 2)
    first = reflect(reef, root)
    assert first["observations"] == 2
    path = root / "reef/memory/patterns.json"
    before_mem = path.read_bytes()
    before_ledger = ledger.path.read_bytes()
    second = reflect(reef, root)
    assert second["observations"] == 0 and second["written"] is False and second["changed"] is False
    assert path.read_bytes() == before_mem and ledger.path.read_bytes() == before_ledger
    feedback(ledger, "Always run the tests before finishing.")
    assert reflect(reef, root)["observations"] == 1
    assert memory(root)["do:before+finish+run+test"]["count"] == 3


def test_descriptions_are_not_turned_into_rules(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "The output was wrong. It took too long.")
    assert reflect(reef, root)["observations"] == 0 and memory(root) == {}


def test_failed_runs_and_routing_records_become_lessons(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    err = "Traceback (most recent call last):\n  File x\nModuleNotFoundError: No module named 'requests'\n"
    session(ledger, None, exit_code=1, stderr=err)
    session(ledger, None, exit_code=130, stderr="KeyboardInterrupt")  # interrupted by the user: no lesson
    ledger.append("routing", {"task": "refactor", "model": "small", "outcome": "failure"}, release_id=None,
                  content_id=None)
    ledger.append("routing", {"task": "docs", "model": "small", "outcome": "success"}, release_id=None,
                  content_id=None)
    out = reflect(reef, root)
    assert out["observations"] == 2
    texts = sorted(p["text"] for p in memory(root).values())
    assert texts[0].startswith("Avoid the routing choice model small, task refactor")
    assert "No module named 'requests'" in texts[1] and texts[1].startswith("Runs of agent failed with")
    kinds = sorted(o for p in memory(root).values() for o in p["origins"])
    assert kinds == ["failure", "routing"]


def test_a_report_on_observe_only_runs_is_observe_only(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.", 2, observe_only=True)
    reflect(reef, root)
    pat = memory(root)["do:before+finish+run+test"]
    assert pat["count"] == 2 and pat["observe_only"] == 2 and pat["origins"]["observe-only"] == 2


def test_a_replaced_ledger_is_read_from_its_start(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.", 3)
    reflect(reef, root)
    ledger.close()
    for suffix in ("", ".idx", ".lock", ".sync"):  # all of it: a fresh start, not a lost ledger
        p = ledger.path.with_name(ledger.path.name + suffix)
        if p.exists():
            p.unlink()
    from reef_cli.ledger import Ledger

    fresh = Ledger(ledger.path, "default")
    feedback(fresh, "Always run the tests before finishing.")
    out = reflect(reef, root)
    assert out["ledger_restarted"] is True and out["observations"] == 1
    assert memory(root)["do:before+finish+run+test"]["count"] == 4


# ------------------------------------------------------------------------------------------- llm backend


def _llm_args(fake_llm):
    return ("--backend", "llm", "--model-url", fake_llm.base_url, "--model", "fake-model")


def _answer(*lessons) -> str:
    return json.dumps({"lessons": list(lessons)})


def test_llm_lessons_are_accepted_when_grounded(reef, tmp_path, fake_llm, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    r1, r2 = feedback(ledger, "It broke the build because the imports were unsorted. Sort them next time.", 2)
    fake_llm.reply(text(_answer({"text": "Sort imports before committing.", "polarity": "do",
                                 "evidence": [r1, r2],
                                 "quotes": [{"record_id": r1, "text": "the imports were   unsorted"}]})))
    out = reflect(reef, root, *_llm_args(fake_llm))
    assert out["backend"] == "llm" and out["rejected"] == [] and out["observations"] == 2
    pat = memory(root)["do:before+commit+import+sort"]
    assert pat["count"] == 2 and pat["origins"] == {"llm": 2} and sorted(pat["evidence"]) == sorted([r1, r2])
    (req,) = fake_llm.calls
    assert req.headers.get("authorization") == "Bearer sk-test-123"
    body = req.json
    assert body["model"] == "fake-model" and r1 in body["messages"][1]["content"]
    assert reflect(reef, root, *_llm_args(fake_llm))["observations"] == 0 and len(fake_llm.calls) == 1


def test_fabricated_ids_and_quotes_are_refused_and_recorded(reef, tmp_path, fake_llm):
    root, ledger = init_project(reef, tmp_path)
    other = tmp_path / "proj"
    assert reef("-C", str(other), "init", "--scenario", "other").code == 0
    from reef_cli.ledger import Ledger

    foreign = Ledger(other / ".reef/scenarios/other/ledger.jsonl", "other").append(
        "report", {"score": 0, "feedback": "Use tabs.", "receipts": []}, release_id=None, content_id=None)
    (rid,) = feedback(ledger, "Keep functions short; long ones are hard to review.")
    fake_llm.reply(text(_answer(
        {"text": "Keep functions short.", "evidence": ["rec_DOESNOTEXIST"], "quotes": []},
        {"text": "Keep functions short.", "evidence": [rid],
         "quotes": [{"record_id": rid, "text": "functions must be under 20 lines"}]},
        {"text": "Use tabs.", "evidence": [foreign.record_id], "quotes": []},
        {"text": "Keep functions short.", "evidence": [], "quotes": []},
        {"evidence": [rid]},
        {"text": "Keep functions short.", "polarity": "do", "evidence": [rid],
         "quotes": [{"record_id": rid, "text": "long ones are hard to review"}]},
    )))
    out = reflect(reef, root, *_llm_args(fake_llm))
    reasons = [r["reason"] for r in out["rejected"]]
    assert reasons == [
        "a lesson has no text",
        "cites record 'rec_DOESNOTEXIST', which is not in scenario 'default''s ledger",
        "quotes 'functions must be under 20 lines', which does not appear in record " + rid,
        f"cites record '{foreign.record_id}', which is not in scenario 'default''s ledger",
        "cites no record",
    ]
    assert out["observations"] == 1 and list(memory(root)) == ["do:function+keep+short"]
    recorded = [r.payload["reason"] for r in ledger.iter_records(kind="rejection")]
    assert sorted(recorded) == sorted(reasons)


@pytest.mark.parametrize("bad, message", [
    (raw(b'{"choices": [{"mess'), "the answer is not valid JSON"),
    (truncated(b'{"id": "x", "choices": [{"message": {"content": "{\\"lessons\\": []}"}}]}', declared=400),
     "cut off"),
    (text("Sure! Here are some lessons: 1. Use tabs."), "the model's message is not a JSON object"),
    (text(json.dumps({"answer": []})), "has no 'lessons' list"),
])
def test_malformed_and_truncated_answers_are_recorded_and_fold_nothing(reef, tmp_path, fake_llm, bad, message):
    root, ledger = init_project(reef, tmp_path)
    (rid,) = feedback(ledger, "Always run the tests before finishing.")
    before = (root / "reef/memory/patterns.json").read_bytes()
    seq = sum(1 for _ in ledger.iter_records())
    fake_llm.reply(bad, bad)  # the first try and its one retry
    out = reflect(reef, root, *_llm_args(fake_llm), code=1)
    assert message in out["err"] and "nothing was reflected (the high-water mark did not move)" in out["err"]
    assert (root / "reef/memory/patterns.json").read_bytes() == before
    assert len(fake_llm.calls) == 2
    (rej,) = list(ledger.iter_records(from_seq=seq + 1))  # refused and recorded, never folded
    assert rej.kind == "rejection" and rej.payload["lesson"]["cites"] == [rid] and message in rej.payload["reason"]
    fake_llm.reply(text(_answer({"text": "Run the tests before finishing.", "evidence": [rid],
                                 "quotes": [{"record_id": rid, "text": "run the tests"}]})))
    out = reflect(reef, root, *_llm_args(fake_llm))
    assert out["observations"] == 1 and out["from_seq"] == 0


def test_llm_backend_needs_a_url_and_model(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.")
    r = reef("-C", str(root), "harness", "reflect", "--backend", "llm")
    # the base URL defaults to the provider's own (https://api.openai.com/v1); the model must be named
    assert r.code == 4 and "the openai reflector needs a model name: set reflector.model" in r.err


def test_feedback_text_that_looks_like_json_is_not_served_from_the_structured_cache():
    from reef_cli.reflect import feedback_lessons

    assert [x[3] for x in feedback_lessons({"do": "use tabs for indentation"})] == ["do"]
    assert feedback_lessons('{"do": "use tabs for indentation"}') == ()  # a description, not a directive


def test_a_private_memory_file_keeps_its_mode_when_reflect_rewrites_it(reef, tmp_path):
    """A patterns.json the user keeps private (0600) came back 0644 after a reflect: the rewrite went out with a
    fixed mode. Every atomic rewrite of a user's file keeps the file's own bits (durable.kept_mode)."""
    import stat

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.")
    reflect(reef, root)
    path = root / "reef/memory/patterns.json"
    path.chmod(0o600)
    feedback(ledger, "Never force-push to main.")
    assert reflect(reef, root)["written"] is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and "dont:force+main+push" in memory(root)


def test_fields_reef_does_not_know_survive_reflect_evolve_and_expiry(reef, tmp_path, monkeypatch):
    """A user's (or a newer reef's) extra keys in patterns.json vanished on the next reflect: PatternMemory read
    only its own fields and wrote only those. They now round-trip unchanged through reflect, the Curator's rewrite
    in evolve, and expiry (which drops a pattern with its own keys, not the file's)."""
    from datetime import datetime, timedelta, timezone

    from test_evolve import LINT, LINT_KEY, evolve

    from reef_cli.patterns import PATTERN_FIELDS, Pattern

    assert PATTERN_FIELDS == set(Pattern(key="k", id="i", text="t", polarity="do").to_json())
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 4)
    feedback(ledger, "Always use tabs for indentation.")
    reflect(reef, root)
    path = root / "reef/memory/patterns.json"
    doc = json.loads(path.read_text())
    doc["x_owner"] = {"team": "infra", "reviewed": [1, 2]}
    for p in doc["patterns"]:
        p["note"] = f"mine: {p['key']}"
    path.write_text(json.dumps(doc))
    feedback(ledger, LINT)
    assert reflect(reef, root)["written"] is True
    doc = json.loads(path.read_text())
    assert doc["x_owner"] == {"team": "infra", "reviewed": [1, 2]}
    assert {p["key"]: p["note"] for p in doc["patterns"]} == {p["key"]: f"mine: {p['key']}" for p in doc["patterns"]}
    assert memory(root)[LINT_KEY]["count"] == 5
    assert evolve(reef, root)["status"] == "published"
    assert memory(root)[LINT_KEY]["note"] == f"mine: {LINT_KEY}"
    assert json.loads(path.read_text())["x_owner"]["team"] == "infra"
    later = datetime.now(timezone.utc) + timedelta(days=91)
    monkeypatch.setenv("REEF_NOW", later.isoformat())
    assert evolve(reef, root)["expired"]
    doc = json.loads(path.read_text())
    assert doc["patterns"] == [] and doc["x_owner"] == {"team": "infra", "reviewed": [1, 2]}


def test_a_merge_of_two_memories_keeps_the_fields_reef_does_not_know():
    """`reef merge` rebuilt memory from the remote's: a top-level key only our copy had was dropped."""
    from reef_cli.gitstore import Entry
    from reef_cli.merge import _merge_memory

    def doc(extra, count, note, **more):
        pat = {"key": "do:run+test", "id": "abc123", "text": "Run the tests.", "polarity": "do", "count": count,
               "note": note, **more}
        return Entry((json.dumps({"version": 1, "through_seq": 1, "patterns": [pat], **extra}) + "\n").encode())

    merged = json.loads(_merge_memory(None, doc({"ours": 1}, 5, "ours"), doc({"theirs": 2}, 3, "theirs", seen=1)))
    assert merged["ours"] == 1 and merged["theirs"] == 2
    assert merged["patterns"][0]["note"] == "ours" and merged["patterns"][0]["seen"] == 1


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_a_memory_file_that_is_not_a_regular_file_is_refused_before_anything_changes(reef, tmp_path, kind):
    """patterns.json as a symlink to a file in the harness (or a FIFO, a directory): reflect folded into the head
    release's copy instead and then replaced the symlink (the FIFO) with a regular file, so the user's memory in
    the linked file was passed over and their link was gone. evolve refuses it; now reflect does too, up front."""
    import os
    import stat

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.")
    reflect(reef, root)
    path = root / "reef/memory/patterns.json"
    kept = root / "reef/memory/real.json"
    path.rename(kept)
    if kind == "symlink":
        path.symlink_to("real.json")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    feedback(ledger, "Never force-push to main.")
    before = ledger.path.read_bytes()
    err = reflect(reef, root, code=4)["err"]
    what = "is a symlink; reef never writes through symlinks" if kind == "symlink" else \
        "is not a regular file; reef will not replace it"
    assert err == (f"reef: error: {path} {what}; nothing was reflected — put the pattern memory back as a regular "
                   "file (or move it away) and run 'reef harness reflect' again\n")
    mode = os.lstat(path).st_mode
    assert {"symlink": stat.S_ISLNK, "fifo": stat.S_ISFIFO, "directory": stat.S_ISDIR}[kind](mode)
    assert ledger.path.read_bytes() == before


def test_a_memory_file_past_the_limit_is_refused_before_it_is_read(reef, tmp_path, monkeypatch):
    """A patterns.json of hundreds of megabytes (a log pasted over it) was read whole, hashed and parsed by every
    reflect (200 MB: 430 MB resident, 9 s). Past MEMORY_LIMIT it is refused up front, naming the file; the limit is
    lowered here so the test writes kilobytes."""
    from reef_cli import patterns

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.")
    path = root / "reef/memory/patterns.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b'{"version": 1, "patterns": []' + b" " * 5000 + b"}\n"
    path.write_bytes(data)
    monkeypatch.setattr(patterns, "MEMORY_LIMIT", 4096, raising=False)
    before = ledger.path.read_bytes()
    err = reflect(reef, root, code=4)["err"]
    assert err == (f"reef: error: {path}: pattern memory is {len(data)} bytes, more than reef reads as memory (4096 "
                   "bytes; a full one is about 2 MB); move it away or restore it with 'reef checkout' (nothing was "
                   "changed)\n")
    assert path.read_bytes() == data and ledger.path.read_bytes() == before
    assert reef("-C", str(root), "harness", "evolve").code == 4


def test_a_read_only_memory_file_is_refused_like_evolve_refuses_it(reef, tmp_path):
    """evolve refuses a file the user made read-only (their "do not touch"); reflect replaced a 0444 patterns.json
    all the same (a rename needs only the directory's write bit). Now it refuses up front, and --dry-run, which
    writes nothing, still runs."""
    import stat

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.")
    reflect(reef, root)
    path = root / "reef/memory/patterns.json"
    path.chmod(0o444)
    data = path.read_bytes()
    feedback(ledger, "Never force-push to main.")
    before = ledger.path.read_bytes()
    assert reflect(reef, root, "--dry-run")["observations"] == 1
    err = reflect(reef, root, code=4)["err"]
    assert err == (f"reef: error: {path} is read-only; reef does not write through a file a user made read-only — "
                   "make it writable (chmod u+w reef/memory/patterns.json) and run 'reef harness reflect' again "
                   "(nothing was reflected)\n")
    assert path.read_bytes() == data and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert ledger.path.read_bytes() == before
    path.chmod(0o644)
    assert reflect(reef, root)["written"] is True
