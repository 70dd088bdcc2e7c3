"""Claude Code's project transcripts: `<config dir>/projects/<cwd slug>/<session id>.jsonl`, one JSON object a line.

Lines with `type` user/assistant carry `message` (Anthropic Messages shape), `uuid`, `sessionId`, `cwd`,
`timestamp`; `isSidechain` marks a subagent's messages (not the user's conversation) and `isMeta` lines Claude Code
injected itself. Other `user` lines the user did not type are skipped too: tool_result blocks (a tool's outcome);
the summary /compact and auto-compact write (`isCompactSummary`, a model's words: "This session is being
continued…"); what only the transcript view shows (`isVisibleInTranscriptOnly`); a slash command's bookkeeping
(`<command-…>`, `<local-command-…>`), a `!` shell command and its output (`<bash-…>`), a background task's notice
(`<task-notification>`); `<system-reminder>` blocks are cut from a prompt. `-c`/`--resume` append
to the session's file; `--fork-session` copies its history into a new one under the new sessionId, each line
keeping its uuid (ingest._claude_copies records those turns once).
"""

from __future__ import annotations

import re
from pathlib import Path

from .model import SHAPE_ERRORS, Problems, Session, ToolUse, Turn, numbered_lines, take_blocks, text_of

INTERRUPTED = "[Request interrupted by user"
SYNTHETIC = ("<command-", "<local-command-", "<bash-input>", "<bash-stdout>", "<bash-stderr>", "<task-notification>",
             "<user-memory-input>", "This session is being continued from a previous conversation")
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


def _result_text(content) -> str:
    if isinstance(content, str):
        return content
    return text_of(content)


def parse(path: Path, problems: Problems | None = None) -> list[Session]:
    """The sessions in one file; a line of a shape this parser does not expect is skipped and counted in `problems`."""
    problems = problems if problems is not None else Problems()
    sessions: dict[str, Session] = {}
    current: dict[str, Turn] = {}
    pending: dict[str, ToolUse] = {}
    for n, d in numbered_lines(path, problems):
        try:
            if d.get("type") not in ("user", "assistant") or d.get("isSidechain"):
                continue
            sid = d.get("sessionId")
            msg = d.get("message")
            if not isinstance(sid, str) or not isinstance(msg, dict):
                continue
            s = sessions.get(sid)
            if s is None:
                s = sessions[sid] = Session("claude", sid, str(path), cwd=str(d.get("cwd") or ""))
            s.updated = max(s.updated, str(d.get("timestamp") or ""))
            content = msg.get("content")
            if d["type"] == "user":
                if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                                     for b in content):
                    for b in content:
                        if isinstance(b, dict) and b.get("type") == "tool_result":
                            use = pending.pop(str(b.get("tool_use_id")), None)
                            if use is not None:
                                use.ok = not b.get("is_error")
                                use.output = _result_text(b.get("content"))
                    continue
                if d.get("isMeta") or d.get("isCompactSummary") or d.get("isVisibleInTranscriptOnly"):
                    continue
                text = _REMINDER.sub("", text_of(content)).strip()
                if not text:
                    continue
                turn = current.get(sid)
                if text.startswith(INTERRUPTED):
                    if turn is not None:
                        turn.interrupted = True
                    continue
                if text.startswith(SYNTHETIC):
                    continue
                turn = Turn(key=str(d.get("uuid") or f"{sid}-{len(s.turns)}"), user=text,
                            at=str(d.get("timestamp") or ""))
                s.turns.append(turn)
                current[sid] = turn
                continue
            turn = current.get(sid)
            if turn is None:
                continue
            if msg.get("model") and not s.model and msg.get("model") != "<synthetic>":
                s.model = str(msg["model"])
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            tool_called = take_blocks(turn, blocks, pending, "tool_use", "input")
            turn.complete = not tool_called and msg.get("stop_reason") != "tool_use"
        except SHAPE_ERRORS as exc:
            problems.skipped(n, exc)
    return list(sessions.values())


def files(config_dir: Path) -> list[Path]:
    """Every transcript under `<config dir>/projects/` (subagents' own files under …/subagents/ are skipped)."""
    root = config_dir / "projects"
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("*/*.jsonl") if p.is_file())
