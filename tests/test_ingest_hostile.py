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
