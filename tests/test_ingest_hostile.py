"""`reef ingest` against transcripts that are valid as agents write them but hostile to a parser: a lone surrogate
escape, a line nested past Python's stack, a message of the wrong shape, synthetic user messages, a FIFO. One bad
file or line costs that file or line, named once; every other session is still ingested."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from test_evolve import init_project
from test_ingest import claude_line, ingest, opencode_db, records


def claude_session(path: Path, sid: str, prompt: str, cwd: str) -> Path:
    path.write_text(claude_line(sid, f"{sid}-u", "user", prompt, cwd) + "\n" +
                    claude_line(sid, f"{sid}-a", "assistant", [{"type": "text", "text": "done"}], cwd) + "\n")
    return path


def test_a_lone_surrogate_escape_is_replaced_and_every_session_ingested(reef, tmp_path):
    """Node's JSON.stringify writes half an emoji as `"\\ud83d"`: valid JSON that decodes to a str no UTF-8
    record can hold. It used to fail the whole ingest, every time (exit 4, no file named)."""
    root, ledger = init_project(reef, tmp_path)
    folder = tmp_path / "t"
    folder.mkdir()
    claude_session(folder / "good.jsonl", "good", "fine", str(tmp_path))
    bad = claude_session(folder / "bad.jsonl", "bad", "emoji cut PLACEHOLDER here", str(tmp_path))
    bad.write_text(bad.read_text().replace("PLACEHOLDER", "\\ud83d"))
    assert "\\ud83d" in bad.read_text()
    out = ingest(reef, root, str(folder))
    assert out["turns"] == 2 and out["errors"] == []
    by_sid = {r.payload["session_id"]: r.payload for r in records(ledger, "session")}
    assert by_sid["bad"]["user"]["excerpt"] == "emoji cut \ufffd here"


def test_an_opencode_database_with_text_that_is_not_utf8_is_read(reef, tmp_path):
    """A JavaScript string with a lone surrogate kept by SQLite as WTF-8 bytes: Python's decoder refused the whole
    database ("Could not decode to UTF-8 column")."""
    root, ledger = init_project(reef, tmp_path)
    db = tmp_path / "opencode.db"
    opencode_db(db, str(tmp_path))
    con = sqlite3.connect(db)
    part = json.dumps({"type": "text", "text": "thanks SURR"}).encode().replace(b"SURR", b"\xed\xa0\xbd")
    con.execute("update part set data = cast(? as text) where id = 'prt_4_0'", (part,))
    con.commit()
    con.close()
    out = ingest(reef, root, str(db))
    assert out["turns"] == 3 and out["errors"] == []
    assert records(ledger, "session")[-1].payload["user"]["excerpt"].startswith("thanks \ufffd")


def test_a_record_the_ledger_refuses_costs_that_record_named_with_its_file(tmp_path):
    """The writer's per-record fallback: a batch the ledger refuses whole is written record by record."""
    from reef_cli.ingest import IngestResult, _Writer
    from reef_cli.ledger import Ledger, NewRecord

    ledger = Ledger(tmp_path / "ledger.jsonl", "default")
    result = IngestResult()
    writer = _Writer(ledger, result)
    writer.add([NewRecord("session", {"turn": 0, "user": "fine"}, None, None, "ses-a-0"),
                NewRecord("session", {"turn": 1, "user": "bad \udc00"}, None, None, "ses-a-1")], "/x/a.jsonl")
    writer.flush()
    assert [r.record_id for r in ledger.iter_records()] == ["ses-a-0"]
    (err,) = result.errors
    assert err.startswith("/x/a.jsonl: turn 1 (ses-a-1) not stored: ") and "JSON-serialisable" in err


def test_a_line_nested_past_the_stack_is_skipped_with_one_warning(reef, tmp_path):
    """json.loads raises RecursionError (not ValueError) for it: it used to escape as "unexpected error", exit 1,
    and nothing else was ingested, on every run."""
    root, ledger = init_project(reef, tmp_path)
    folder = tmp_path / "t"
    folder.mkdir()
    deep = claude_session(folder / "deep.jsonl", "deep", "hello", str(tmp_path))
    with deep.open("a") as fh:
        fh.write('{"type": "assistant", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
        fh.write("not json either\n")
    claude_session(folder / "good.jsonl", "good", "fine", str(tmp_path))
    r = reef("-C", str(root), "ingest", str(folder))
    assert r.code == 0, r.err
    assert r.err == (f"reef: ingest: warning: {deep}: skipped 2 line(s) reef could not read "
                     "(line 3: nested too deeply; 1 more)\n")
    assert r.out.startswith("ingested 2 turn(s) from 2 session(s)")
    assert len(records(ledger, "session")) == 2
    out = ingest(reef, root, str(folder), "-q")
    assert out["warnings"] == [] and out["files_skipped"] == 2  # the file was read: not warned about again


def test_a_message_of_the_wrong_shape_costs_that_line(reef, tmp_path):
    """A pi assistant message whose content is a number raised TypeError out of the whole ingest."""
    root, ledger = init_project(reef, tmp_path)
    folder = tmp_path / "pi" / "--x--"
    folder.mkdir(parents=True)
    lines = [{"type": "session", "id": "s1", "cwd": str(tmp_path), "timestamp": "2026-12-01T10:00:00Z"},
             {"type": "message", "id": "m1", "timestamp": "2026-12-01T10:00:01Z",
              "message": {"role": "user", "content": "hi"}},
             {"type": "message", "id": "m2", "timestamp": "2026-12-01T10:00:02Z",
              "message": {"role": "assistant", "content": 5, "stopReason": "stop"}},
             {"type": "message", "id": "m3", "timestamp": "2026-12-01T10:00:03Z",
              "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}], "stopReason": "stop"}},
             {"type": "message", "id": "m4", "timestamp": "2026-12-01T10:00:04Z",
              "message": {"role": "user", "content": {"not": "text"}}}]
    bad = folder / "2026_s1.jsonl"
    bad.write_text("".join(json.dumps(x) + "\n" for x in lines))
    claude_session(tmp_path / "pi" / "good.jsonl", "good", "fine", str(tmp_path))
    r = reef("-C", str(root), "ingest", str(tmp_path / "pi"))
    assert r.code == 0, r.err
    assert r.err == (f"reef: ingest: warning: {bad}: skipped 1 line(s) reef could not read (line 3: unexpected "
                     "shape (TypeError: message content is a number, not a list of blocks))\n")
    assert sorted(x.payload["user"]["excerpt"] for x in records(ledger, "session")) == ["fine", "hi"]


SUMMARY = ("This session is being continued from a previous conversation that ran out of context. The summary below "
           "covers the earlier portion of the conversation.\n\nAnalysis:\nI updated vite.config.ts instead of the "
           "old webpack config; the tests are still failing.\nPlease continue the conversation from where we left it.")


def test_synthetic_user_messages_are_not_turns_or_corrections(reef, tmp_path):
    """Claude Code writes a /compact summary as a `user` line (isCompactSummary, not isMeta): it was ingested as
    the user's words and, holding "instead of", became a score-0 report whose feedback was a model's summary."""
    root, ledger = init_project(reef, tmp_path)
    cwd = str(tmp_path)
    said = lambda uuid, content, **kw: claude_line("s", uuid, "user", content, cwd, **kw)
    answer = lambda uuid: claude_line("s", uuid, "assistant", [{"type": "text", "text": "done"}], cwd)
    lines = [said("u0", "migrate the build to vite"), answer("a0"),
             said("c0", SUMMARY, isCompactSummary=True, isVisibleInTranscriptOnly=True), answer("a1"),
             said("c1", SUMMARY.replace("ran out", "that ran out again")), answer("a2"),  # an older Claude: no flag
             said("v0", "Compacted. ctrl+o to see the summary, instead of this", isVisibleInTranscriptOnly=True),
             said("b0", "<bash-input>git stash</bash-input>"),
             said("b1", "<bash-stdout>No local changes to save</bash-stdout><bash-stderr></bash-stderr>"),
             said("t0", "<task-notification>Background command failed; still failing</task-notification>"),
             said("m0", "<command-name>/compact</command-name>"),
             said("m1", "<local-command-stdout>Compacted</local-command-stdout>"),
             said("u1", [{"type": "text", "text": "<system-reminder>Use pnpm instead of npm.</system-reminder>"},
                         {"type": "text", "text": "thanks, looks good"}]), answer("a3")]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = ingest(reef, root, str(path))
    assert [r.payload["user"]["excerpt"] for r in records(ledger, "session")] == ["migrate the build to vite",
                                                                                "thanks, looks good"]
    assert out["corrections"] == 0 and out["acceptances"] == 1
    assert [r.payload["implicit"]["kind"] for r in records(ledger, "report")] == ["acceptance"]


def test_ordinary_prompts_are_not_ingested_as_corrections(reef, tmp_path):
    """Each of these became a score-0 report, then a pattern, then (low tier threshold) a CLAUDE.md bullet."""
    root, ledger = init_project(reef, tmp_path)
    prompts = ["add a login page", "I ran the deploy and got: Error: you must specify a region",
               "Never mind the docs, implement the cache layer now",
               "Stop words should be filtered in the tokenizer, please add that",
               "Undo/redo support is the next feature: implement it",
               "Here is the CI log:\nerror: you didn't provide a value for 'x'", "no, use pnpm"]
    lines = []
    for i, p in enumerate(prompts):
        lines += [claude_line("s", f"u{i}", "user", p, str(tmp_path)),
                  claude_line("s", f"a{i}", "assistant", [{"type": "text", "text": "done"}], str(tmp_path))]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = ingest(reef, root, str(path))
    assert out["turns"] == 7 and out["corrections"] == 1
    (rep,) = records(ledger, "report")
    assert rep.payload["feedback"] == "no, use pnpm"


def test_since_out_of_range_is_invalid_input_naming_the_flag(reef, tmp_path):
    root, _ = init_project(reef, tmp_path)
    for value in ("1000000d", "99999999999d", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        r = ingest(reef, root, "--since", value, code=4)
        assert r["err"] == f"reef: error: --since {value!r}: out of range (a date must fall in the years 1 to 9999)\n"
    assert ingest(reef, root, "--since", "0001-01-01")["turns"] == 0


def test_a_source_that_fails_is_named_and_exits_1_after_the_others_are_ingested(reef, tmp_path, monkeypatch):
    """An opencode.db that is not a database used to leave `reef ingest` at exit 0: a hook or script never knew."""
    root, ledger = init_project(reef, tmp_path)
    home = Path(__import__("os").environ["HOME"])
    (home / ".claude/projects/p").mkdir(parents=True)
    claude_session(home / ".claude/projects/p/s.jsonl", "s", "hello", str(root))
    data = tmp_path / "data"
    (data / "opencode").mkdir(parents=True)
    (data / "opencode/opencode.db").write_text("not sqlite at all, but long enough to have a header " * 4)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    r = reef("-C", str(root), "ingest")
    assert r.code == 1
    assert r.err == f"reef: ingest: {data}/opencode/opencode.db: file is not a database\n"
    assert r.out.startswith("ingested 1 turn(s) from 1 session(s)")
    assert len(records(ledger, "session")) == 1
    r = reef("-C", str(root), "ingest", "--json")
    assert r.code == 1 and json.loads(r.out)["errors"] == [f"{data}/opencode/opencode.db: file is not a database"]


def test_a_named_path_reef_cannot_read_says_why(reef, tmp_path):
    import os

    root, _ = init_project(reef, tmp_path)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    r = ingest(reef, root, str(fifo), code=4)
    assert r["err"] == f"reef: error: reef ingest {fifo}: not a regular file or folder (a FIFO, a socket or a device)\n"
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes\n")
    r = ingest(reef, root, str(notes), code=4)
    assert r["err"] == (f"reef: error: reef ingest {notes}: not a session file reef recognises (a Claude Code, pi or "
                        "Codex transcript, or opencode.db); if it is one, name its agent with --agent\n")


def test_counts_say_new_turns_apart_from_turns_already_in_the_ledger(reef, tmp_path):
    from test_ingest import GOLDEN

    root, ledger = init_project(reef, tmp_path)
    first = ingest(reef, root, str(GOLDEN))
    assert (first["turns"], first["corrections"], first["existing"], first["existing_turns"]) == (6, 3, 0, 0)
    (root / ".reef/scenarios/default/ingest.json").unlink()  # the state file lost: every turn is read again
    again = ingest(reef, root, str(GOLDEN))
    assert (again["turns"], again["corrections"], again["existing"], again["existing_turns"]) == (0, 0, 9, 6)
    (root / ".reef/scenarios/default/ingest.json").unlink()
    r = reef("-C", str(root), "ingest", str(GOLDEN))
    assert r.code == 0 and r.out == ("ingested 0 turn(s) from 3 session(s) (3 file(s) read, 0 unchanged): "
                                     "0 correction(s), 0 acceptance(s), 6 turn(s) already in the ledger\n")


def test_a_crashed_sessions_last_turn_is_recorded_unfinished_once_untouched_for_a_day(reef, tmp_path):
    """A session whose agent died mid-turn (its last message a tool call never answered) was held back on every
    ingest, forever, and its file re-read each time."""
    import os
    import time

    root, ledger = init_project(reef, tmp_path)
    cwd = str(tmp_path)
    path = tmp_path / "crashed.jsonl"
    path.write_text(claude_line("s", "u1", "user", "fix the bug", cwd) + "\n" +
                    claude_line("s", "a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                          "input": {"command": "make"}}], cwd, stop="tool_use") + "\n")
    out = ingest(reef, root, str(path))
    assert (out["turns"], out["held"], out["unfinished"]) == (0, 1, 0)  # written a minute ago: maybe still running
    day_ago = time.time() - 25 * 3600
    os.utime(path, (day_ago, day_ago))
    r = reef("-C", str(root), "ingest", str(path))
    assert r.code == 0 and r.out == ("ingested 1 turn(s) from 1 session(s) (1 file(s) read, 0 unchanged): "
                                     "0 correction(s), 0 acceptance(s), 1 unfinished turn(s) recorded "
                                     "(untouched for a day)\n")
    (rec,) = records(ledger, "session")
    assert rec.payload["unfinished"] is True and rec.payload["tools"] == [{"name": "Bash", "input": "make",
                                                                           "ok": None}]
    assert ingest(reef, root, str(path))["files_skipped"] == 1  # the file is done with


def test_a_finished_turn_has_no_unfinished_key(reef, tmp_path):
    """Records ingested before the key existed keep the same content, so a re-ingest still finds them equal."""
    from test_ingest import GOLDEN

    root, ledger = init_project(reef, tmp_path)
    ingest(reef, root, str(GOLDEN))
    assert all("unfinished" not in r.payload for r in records(ledger, "session"))


def test_an_opencode_session_untouched_for_a_day_has_its_last_turn_recorded(reef, tmp_path):
    import time

    root, ledger = init_project(reef, tmp_path)
    db = tmp_path / "opencode.db"
    opencode_db(db, str(tmp_path))
    con = sqlite3.connect(db)
    con.execute("update part set data = ? where id = 'prt_5_1'", (json.dumps({"type": "step-finish",
                                                                              "reason": "tool-calls"}),))
    con.execute("update session set time_updated = ?", (int(time.time() * 1000),))
    con.commit()
    out = ingest(reef, root, str(db))
    assert (out["turns"], out["held"], out["unfinished"]) == (2, 1, 0)
    con.execute("update session set time_updated = ?", (int((time.time() - 25 * 3600) * 1000),))
    con.commit()
    con.close()
    out = ingest(reef, root, str(db))
    assert (out["turns"], out["held"], out["unfinished"]) == (1, 0, 1)
    assert records(ledger, "session")[-1].payload["unfinished"] is True


def forked_transcripts(folder: Path, cwd: str, parent_name: str, fork_name: str) -> tuple[Path, Path]:
    """What the real `claude --resume SID --fork-session -p` wrote (2.x, probed against the fake server): a new
    file whose copied history has the new sessionId and the same uuids, then the new prompt."""
    def turns(sid: str, prompts: list[tuple[str, str]]) -> str:
        out = []
        for uuid, prompt in prompts:
            out += [claude_line(sid, uuid, "user", prompt, cwd),
                    claude_line(sid, uuid + "-a", "assistant", [{"type": "text", "text": "DONE"}], cwd)]
        return "\n".join(out) + "\n"

    history = [("u1", "first prompt"), ("u2", "second prompt"), ("u3", "third prompt")]
    parent, fork = folder / parent_name, folder / fork_name
    parent.write_text(turns("A", history))
    fork.write_text(turns("B", history + [("u4", "no, use pnpm")]))
    return parent, fork


def test_a_forked_claude_session_records_its_copied_history_once(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    folder = tmp_path / "p"
    folder.mkdir()
    parent, fork = forked_transcripts(folder, str(tmp_path), "a-parent.jsonl", "b-fork.jsonl")
    fork_text = fork.read_text()
    fork.unlink()
    assert ingest(reef, root, str(folder))["turns"] == 3
    fork.write_text(fork_text)  # the user forks the session later
    out = ingest(reef, root, str(folder))
    assert out["turns"] == 1 and out["corrections"] == 1
    by_id = {r.record_id: r for r in records(ledger, "session")}
    assert sorted(by_id) == ["ses-claude-A-u1", "ses-claude-A-u2", "ses-claude-A-u3", "ses-claude-B-u4"]
    assert by_id["ses-claude-B-u4"].payload["follows"] == "ses-claude-A-u3"
    (rep,) = records(ledger, "report")
    assert rep.payload["receipts"] == ["ses-claude-A-u3"]


def test_a_fork_read_before_its_parent_in_one_run_still_counts_each_turn_once(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    folder = tmp_path / "p"
    folder.mkdir()
    forked_transcripts(folder, str(tmp_path), "z-parent.jsonl", "a-fork.jsonl")  # the fork sorts first
    out = ingest(reef, root, str(folder))
    assert out["turns"] == 4 and out["corrections"] == 1
    assert sorted(r.record_id for r in records(ledger, "session")) == [
        "ses-claude-B-u1", "ses-claude-B-u2", "ses-claude-B-u3", "ses-claude-B-u4"]
    with (folder / "z-parent.jsonl").open("a") as fh:  # the parent goes on after the fork point
        fh.write(claude_line("A", "u5", "user", "add a README", str(tmp_path)) + "\n" +
                 claude_line("A", "u5-a", "assistant", [{"type": "text", "text": "DONE"}], str(tmp_path)) + "\n")
    assert ingest(reef, root, str(folder))["turns"] == 1
    assert records(ledger, "session")[-1].payload["follows"] == "ses-claude-B-u3"
