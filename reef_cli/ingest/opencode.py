"""opencode's sessions: the SQLite database `$XDG_DATA_HOME/opencode/opencode.db` (opencode ≥ 1.x), read-only.

Tables used: `session` (id, directory, time_updated, model, revert), `message` (id, session_id, time_created, data
JSON with `role`) and `part` (message_id, data JSON: `{"type": "text", "text"}`, `{"type": "tool", "tool",
"callID", "state": {"status": completed|error|…, "input", "output"|"error"}}`, `step-finish` with a `reason`).
`session.revert` set means the user reverted the session from a message on: that turn is marked reverted.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from .model import Session, ToolUse, Turn, loads, tool_input_text


def _iso(ms) -> str:
    try:
        return datetime.fromtimestamp(int(ms) / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def _unquote(text: str) -> str:
    """`opencode run` stores the prompt as a JSON string literal ("\"fix it\""): its text is inside."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] == '"':
        try:
            v = loads(t)
            if isinstance(v, str):
                return v
        except (ValueError, RecursionError):
            pass
    return text


def _json(text) -> dict:
    try:
        v = loads(text)
        return v if isinstance(v, dict) else {}
    except (TypeError, ValueError, RecursionError):
        return {}


def connect(path: Path) -> sqlite3.Connection:
    # mode=ro: never write to the agent's database (no WAL checkpoint, no journal)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    # text that is not UTF-8 (a lone surrogate a JavaScript string kept, written as WTF-8) read with U+FFFD in its
    # place, not an error that stops the whole database being read
    db.text_factory = lambda b: b.decode("utf-8", "replace")
    return db


def session_stamps(path: Path) -> dict[str, str]:
    """Each session's id → its last update (ms), to skip unchanged sessions without reading their parts."""
    with connect(path) as db:
        return {str(r[0]): str(r[1]) for r in db.execute("select id, time_updated from session")}


def parse(path: Path, only: set[str] | None = None) -> list[Session]:
    out = []
    db = connect(path)
    try:
        rows = db.execute("select id, directory, time_updated, model, revert, parent_id from session "
                          "order by time_created").fetchall()
        for sid, directory, updated, model, revert, parent in rows:
            if parent or (only is not None and sid not in only):
                continue  # a child session is a subagent's, not the user's conversation
            s = Session("opencode", str(sid), str(path), cwd=str(directory or ""), updated=_iso(updated))
            m = _json(model)
            s.model = str(m.get("id") or "") if m else str(model or "")
            reverted_from = _json(revert).get("messageID")
            parts: dict[str, list[dict]] = {}
            for mid, data in db.execute("select message_id, data from part where session_id = ? "
                                        "order by time_created, id", (sid,)):
                parts.setdefault(mid, []).append(_json(data))
            turn: Turn | None = None
            for mid, created, data in db.execute("select id, time_created, data from message where session_id = ? "
                                                 "order by time_created, id", (sid,)):
                role = _json(data).get("role")
                if role == "user":
                    text = "\n".join(_unquote(str(p.get("text") or "")) for p in parts.get(mid, ())
                                     if p.get("type") == "text" and not p.get("synthetic")).strip()
                    if not text:
                        continue
                    turn = Turn(key=str(mid), user=text, at=_iso(created))
                    s.turns.append(turn)
                elif role == "assistant" and turn is not None:
                    for p in parts.get(mid, ()):
                        kind = p.get("type")
                        if kind == "text" and str(p.get("text") or "").strip():
                            turn.agent.append(str(p["text"]))
                        elif kind == "tool":
                            state = p.get("state") if isinstance(p.get("state"), dict) else {}
                            status = state.get("status")
                            turn.tools.append(ToolUse(str(p.get("tool") or "?"), tool_input_text(state.get("input")),
                                                      ok=None if status not in ("completed", "error") else
                                                      status == "completed",
                                                      output=str(state.get("output") or state.get("error") or ""),
                                                      call_id=str(p.get("callID") or "")))
                        elif kind == "step-finish":
                            turn.complete = p.get("reason") != "tool-calls"
            if reverted_from:  # undone from that message on
                keys = [t.key for t in s.turns]
                if reverted_from in keys:
                    for t in s.turns[keys.index(reverted_from):]:
                        t.reverted = True
            out.append(s)
    finally:
        db.close()
    return out


def database(environ: dict) -> Path:
    import os

    base = environ.get("XDG_DATA_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"),
                                                        ".local", "share")
    return Path(base) / "opencode" / "opencode.db"
