"""`reef ingest`: real Claude Code and pi transcripts (tests/golden/transcripts, written by the real CLIs against
tests/fakes/llm_server.py), opencode's SQLite store and Codex rollouts → `session` records and implicit reports;
idempotence, redaction, bounds, --since, the default sources and their cwd filter, and reflect on the result."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

from test_evolve import init_project, memory

GOLDEN = Path(__file__).parent / "golden" / "transcripts"
SECRET = "sk-ant-api03-" + "Zq7" * 30 + "AA"


def ingest(reef, root: Path, *args: str, code: int = 0) -> dict:
    r = reef("-C", str(root), "ingest", "--json", *args)
    assert r.code == code, r.err
    return json.loads(r.out) if code == 0 else {"err": r.err}


def records(ledger, kind: str | None = None) -> list:
    return [r for r in ledger.iter_records() if kind is None or r.kind == kind]


def claude_line(sid: str, uuid: str, kind: str, content, cwd: str, **kw) -> str:
    msg = {"role": kind, "content": content, **({"model": "m", "stop_reason": kw.pop("stop", "end_turn")}
                                                 if kind == "assistant" else {})}
    return json.dumps({"type": kind, "uuid": uuid, "sessionId": sid, "cwd": cwd, "isSidechain": False,
                       "timestamp": kw.pop("ts", "2026-12-01T10:00:00.000Z"), "message": msg, **kw})


def test_claude_transcript_turns_tools_and_a_correction(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    out = ingest(reef, root, str(GOLDEN / "claude.jsonl"))
    assert out["turns"] == 2 and out["sessions"] == 1 and out["corrections"] == 1
    first, second = records(ledger, "session")
    assert first.record_id == "ses-claude-27afa82b-71ef-4a2b-a9c2-2776c6f477ec-ef8059ec-95e8-47ba-92e2-04f381a7abda"
    p = first.payload
    assert p["agent"] == "claude" and p["turn"] == 0 and p["user"]["excerpt"] == "list the files"
    assert p["tools"] == [{"name": "Bash", "input": "ls", "ok": True}] and p["tool_errors"] == 0
    assert p["reply"]["excerpt"] == "I listed files. Done." and p["user"]["digest"].startswith("sha256:")
    assert second.payload["follows"] == first.record_id
    assert second.payload["verdict"] == {"kind": "correction", "cue": "forgot"}
    (rep,) = records(ledger, "report")
    assert rep.record_id == second.record_id + ".fb"
    assert rep.payload["score"] == 0.0 and rep.payload["receipts"] == [first.record_id]
    assert rep.payload["feedback"] == "You forgot to run the tests before saying you were done"
    head = json.loads(reef("-C", str(root), "log", "--json").out)[0]
    assert first.release_id == head["release_id"]


def test_ingest_twice_adds_nothing_even_without_its_state_file(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    ingest(reef, root, str(GOLDEN))
    before = ledger.path.read_bytes()
    again = ingest(reef, root, str(GOLDEN))
    assert again["turns"] == 0 and again["files_skipped"] == 3 and ledger.path.read_bytes() == before
    (root / ".reef/scenarios/default/ingest.json").unlink()
    third = ingest(reef, root, str(GOLDEN))
    assert third["existing"] == 9 and ledger.path.read_bytes() == before  # same ids, same content: resends


def test_pi_transcript(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    out = ingest(reef, root, "--agent", "pi", str(GOLDEN / "pi.jsonl"))
    assert out["turns"] == 2 and out["corrections"] == 1
    first = records(ledger, "session")[0]
    assert first.record_id == "ses-pi-01a23224-338f-7bcf-a21d-00752e31d392-31c027a2"
    assert first.payload["tools"] == [{"name": "bash", "input": "ls", "ok": True}]
    assert first.payload["model"] == "fake-model" and first.payload["cwd"] == "/tmp/sx/run/code"


def test_secrets_never_stored_and_excerpts_bounded(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    cwd = str(tmp_path)
    long = "word " * 20000
    lines = [
        claude_line("s1", "u1", "user", f"deploy with key {SECRET} please {long}", cwd),
        claude_line("s1", "a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                               "input": {"command": f"curl -H 'Authorization: Bearer {SECRET}'"}}],
                    cwd, stop="tool_use"),
        claude_line("s1", "r1", "user", [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                          "content": f"401 for token {SECRET}"}], cwd),
        claude_line("s1", "a2", "assistant", [{"type": "text", "text": f"Used {SECRET}. " + long}], cwd),
        claude_line("s1", "u2", "user", f"no, never paste the key {SECRET} into commands", cwd),
        claude_line("s1", "a3", "assistant", [{"type": "text", "text": "Understood."}], cwd),
    ]
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = ingest(reef, root, str(path))
    assert out["turns"] == 2 and out["corrections"] == 1
    data = ledger.path.read_text()
    assert SECRET not in data and SECRET[:30] not in data and "[REDACTED:" in data
    first = records(ledger, "session")[0].payload
    assert first["tools"][0]["ok"] is False and "[REDACTED:" in first["tools"][0]["output"]
    assert first["tool_errors"] == 1 and first["user"]["chars"] > 100_000
    assert all(len(json.dumps(r.payload)) < 6000 for r in records(ledger))


def test_the_last_turn_of_a_live_session_is_held_until_it_ends(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    cwd = str(tmp_path)
    path = tmp_path / "live.jsonl"
    path.write_text(claude_line("s2", "u1", "user", "fix the bug", cwd) + "\n" +
                    claude_line("s2", "a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Read",
                                                           "input": {"file_path": "a.py"}}], cwd, stop="tool_use")
                    + "\n")
    out = ingest(reef, root, str(path))
    assert out["turns"] == 0 and out["held"] == 1
    with path.open("a") as fh:
        fh.write(claude_line("s2", "r1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}], cwd)
                 + "\n" + claude_line("s2", "a2", "assistant", [{"type": "text", "text": "Fixed."}], cwd) + "\n")
    out = ingest(reef, root, str(path))
    assert out["turns"] == 1 and records(ledger, "session")[0].payload["tools"][0]["ok"] is True


def test_since_skips_old_sessions_without_marking_them_read(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    assert ingest(reef, root, "--since", "2027-01-01", str(GOLDEN / "pi.jsonl"))["turns"] == 0
    assert ingest(reef, root, "--since", "2026-11-30", str(GOLDEN / "pi.jsonl"))["turns"] == 2
    r = ingest(reef, root, "--since", "yesterday", str(GOLDEN), code=4)
    assert "--since 'yesterday': expected an ISO date" in r["err"]


def test_errors_name_the_flag_and_path(reef, tmp_path):
    root, _ = init_project(reef, tmp_path)
    assert "--agent cursor: expected one of claude, opencode, pi, codex" in ingest(reef, root, "--agent", "cursor",
                                                                                    code=4)["err"]
    assert "no such file or directory" in ingest(reef, root, str(tmp_path / "nope.jsonl"), code=4)["err"]


def opencode_db(path: Path, cwd: str, *, revert: str | None = None) -> None:
    """The three tables reef reads, with the columns opencode 1.18 gives them."""
    db = sqlite3.connect(path)
    db.executescript("""
      create table session (id text primary key, project_id text, parent_id text, directory text, title text,
        version text, model text, revert text, time_created integer, time_updated integer);
      create table message (id text primary key, session_id text, time_created integer, time_updated integer,
        data text);
      create table part (id text primary key, message_id text, session_id text, time_created integer,
        time_updated integer, data text);""")
    db.execute("insert into session values ('ses_1','p',null,?,'t','1.18.33',?,?,1796137530000,1796137560000)",
               (cwd, json.dumps({"id": "fake-model", "providerID": "fake"}),
                json.dumps({"messageID": revert}) if revert else None))
    msgs = [("msg_1", "user", [{"type": "text", "text": '"run the build"'}]),
            ("msg_2", "assistant", [{"type": "tool", "tool": "bash", "callID": "c1",
                                     "state": {"status": "error", "input": {"command": "make"},
                                               "error": "make: *** No rule to make target"}},
                                    {"type": "text", "text": "The build failed."},
                                    {"type": "step-finish", "reason": "stop"}]),
            ("msg_3", "user", [{"type": "text", "text": "that's wrong, use ninja"}]),
            ("msg_4", "assistant", [{"type": "text", "text": "ok"}, {"type": "step-finish", "reason": "stop"}]),
            ("msg_5", "user", [{"type": "text", "text": "thanks!"}]),
            ("msg_6", "assistant", [{"type": "text", "text": "welcome"}, {"type": "step-finish", "reason": "stop"}])]
    for i, (mid, role, parts) in enumerate(msgs):
        db.execute("insert into message values (?,?,?,?,?)", (mid, "ses_1", 1796137530000 + i, 0,
                                                               json.dumps({"role": role})))
        for j, part in enumerate(parts):
            db.execute("insert into part values (?,?,?,?,?,?)", (f"prt_{i}_{j}", mid, "ses_1", 1796137530000 + i,
                                                                 0, json.dumps(part)))
    db.commit()
    db.close()


def test_opencode_database(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    db = tmp_path / "opencode.db"
    opencode_db(db, str(tmp_path))
    out = ingest(reef, root, str(db))
    assert out["turns"] == 3 and out["corrections"] == 1 and out["acceptances"] == 1
    first = records(ledger, "session")[0].payload
    assert first["user"]["excerpt"] == "run the build"  # `opencode run` stores the prompt as a JSON literal
    assert first["tools"] == [{"name": "bash", "input": "make", "ok": False,
                               "output": "make: *** No rule to make target"}]
    reports = records(ledger, "report")
    assert [r.payload["score"] for r in reports] == [0.0, 1.0]
    assert ingest(reef, root, str(db))["turns"] == 0  # unchanged sessions are skipped by their time_updated


def test_an_opencode_revert_is_an_implicit_report_on_the_reverted_turns(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    db = tmp_path / "opencode.db"
    opencode_db(db, str(tmp_path), revert="msg_5")  # the user undid the last turn ("thanks!" and its answer)
    out = ingest(reef, root, str(db))
    assert out["turns"] == 3
    last = records(ledger, "session")[-1]
    assert last.payload["reverted"] is True
    rv = [r for r in records(ledger, "report") if r.payload["implicit"]["kind"] == "revert"]
    assert [(r.payload["score"], r.payload["receipts"]) for r in rv] == [(0.0, [last.record_id])]


def test_codex_rollout(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    day = tmp_path / "codex" / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    ev = lambda t, p, ts="2026-12-01T10:00:00.000Z": json.dumps({"timestamp": ts, "type": t, "payload": p})
    (day / "rollout-2026-12-01T10-00-00-abc.jsonl").write_text("\n".join([
        ev("session_meta", {"id": "0199-abc", "cwd": str(tmp_path)}),
        ev("response_item", {"type": "message", "role": "user",
                             "content": [{"type": "input_text", "text": "<environment_context>…"}]}),
        ev("event_msg", {"type": "user_message", "message": "add a test"}),
        ev("response_item", {"type": "function_call", "name": "shell", "call_id": "c1",
                             "arguments": json.dumps({"command": ["bash", "-lc", "pytest"]})}),
        ev("response_item", {"type": "function_call_output", "call_id": "c1",
                             "output": json.dumps({"output": "1 failed", "metadata": {"exit_code": 1}})}),
        ev("event_msg", {"type": "agent_message", "message": "Added; one test fails."}),
        ev("event_msg", {"type": "task_complete"}),
        ev("event_msg", {"type": "user_message", "message": "you didn't run the whole suite"}),
        ev("event_msg", {"type": "agent_message", "message": "Ran it."}),
        ev("event_msg", {"type": "task_complete"}),
    ]) + "\n")
    out = ingest(reef, root, str(tmp_path / "codex"))
    assert out["turns"] == 2 and out["corrections"] == 1
    first = records(ledger, "session")[0]
    assert first.record_id == "ses-codex-0199-abc-0"
    assert first.payload["tools"] == [{"name": "shell", "input": "bash -lc pytest", "ok": False, "output": "1 failed"}]


def test_codex_rollout_from_the_real_cli(reef, tmp_path):
    """Written by Codex 0.171 (`codex exec --json`, then `exec resume --last`) against the fake Responses server:
    its prompts come as item_completed UserMessage events, not as the response_item messages that also carry
    the injected AGENTS.md."""
    root, ledger = init_project(reef, tmp_path)
    out = ingest(reef, root, str(GOLDEN / "codex.jsonl"))
    assert out["turns"] == 2 and out["corrections"] == 1
    first, second = records(ledger, "session")
    assert first.payload["user"]["excerpt"] == "list the files" and "AGENTS.md" not in json.dumps(first.payload)
    assert first.payload["tools"][0]["name"] == "shell" and first.payload["reply"]["excerpt"] == "I listed files. Done."
    assert second.payload["verdict"] == {"kind": "correction", "cue": "forgot"}


def test_default_sources_wrapper_dir_and_own_dir_filtered_by_cwd(reef, tmp_path, monkeypatch):
    root, ledger = init_project(reef, tmp_path)
    home = Path(os.environ["HOME"])
    inside, outside = home / ".claude/projects/in", home / ".claude/projects/out"
    inside.mkdir(parents=True)
    outside.mkdir(parents=True)
    for d, cwd, sid in ((inside, str(root / "src"), "in1"), (outside, str(tmp_path / "elsewhere"), "out1")):
        (d / f"{sid}.jsonl").write_text(claude_line(sid, f"{sid}-u", "user", "hello", cwd) + "\n" +
                                        claude_line(sid, f"{sid}-a", "assistant", [{"type": "text", "text": "hi"}],
                                                    cwd) + "\n")
    out = ingest(reef, root, "--agent", "claude")
    assert out["turns"] == 1
    assert [r.payload["session_id"] for r in records(ledger, "session")] == ["in1"]
    # an install's config dir: every session there is this scenario's, wherever the user ran the wrapper
    r = reef("-C", str(root), "harness", "install", "--adapter", "claude", "--dest", str(tmp_path / "inst"),
             "--bin-dir", str(tmp_path / "bin"), "--json")
    assert r.code == 0, r.err
    agent_dir = Path(json.loads(r.out)["record"]["agent_dir"])
    (agent_dir / "projects" / "x").mkdir(parents=True)
    shutil.copy(GOLDEN / "claude.jsonl", agent_dir / "projects" / "x" / "s.jsonl")
    out = ingest(reef, root)
    assert out["turns"] == 2 and out["corrections"] == 1
    assert records(ledger, "session")[-1].payload["origin"] == "wrapper"


def test_ingested_corrections_reach_pattern_memory(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    ingest(reef, root, str(GOLDEN))
    r = reef("-C", str(root), "harness", "reflect", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["observations"] == 3 and not out["rejected"]  # claude, pi, codex
    (pat,) = [p for p in memory(root).values() if p["text"] == "Run the tests before saying you are done."]
    assert pat["count"] == 3


def test_observe_only_sessions_are_marked_and_never_reach_a_model(reef, tmp_path, fake_llm):
    from fakes import text

    root, ledger = init_project(reef, tmp_path)
    cfg = root / "harness.yaml"
    cfg.write_text(cfg.read_text() + "observe_only:\n  - {adapter: pi}\n")
    assert reef("-C", str(root), "publish", "-m", "pi is observe-only").code == 0
    ingest(reef, root, str(GOLDEN / "pi.jsonl"), str(GOLDEN / "claude.jsonl"))
    by_agent = {r.payload["agent"]: r.payload["observe_only"] for r in records(ledger, "session")}
    assert by_agent == {"pi": True, "claude": False}
    fake_llm.reply(text('{"lessons": []}'))
    r = reef("-C", str(root), "harness", "reflect", "--json", "--backend", "openai", "--model-url",
             fake_llm.base_url, "--model", "m")
    assert r.code == 0, r.err
    body = fake_llm.calls[0].body.decode()
    pi_report = next(x for x in records(ledger, "report") if x.payload["implicit"]["agent"] == "pi")
    claude_report = next(x for x in records(ledger, "report") if x.payload["implicit"]["agent"] == "claude")
    assert claude_report.record_id in body and pi_report.record_id not in body
    (pat,) = [p for p in memory(root).values() if p["text"] == "Run the tests before saying you are done."]
    # the model saw claude's correction (and answered nothing); pi's stays with the builtin, counted observe-only
    assert pat["count"] == 1 and pat["observe_only"] == 1 and pat["origins"] == {"correction": 1, "observe-only": 1}
