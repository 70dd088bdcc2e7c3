"""pi's sessions: `<agent dir>/sessions/--<cwd slug>--/<timestamp>_<session id>.jsonl`.

The first line is `{"type": "session", "id", "cwd", "timestamp"}`; `message` lines carry `id` (8 hex, unique in
the file), `parentId` and `message` with `role` user / assistant / toolResult. Assistant content holds `text` and
`toolCall` blocks (`id`, `name`, `arguments`); a toolResult names its `toolCallId` and says `isError`.
"""

from __future__ import annotations

from pathlib import Path

from .model import SHAPE_ERRORS, Problems, Session, ToolUse, Turn, numbered_lines, take_blocks, text_of


def parse(path: Path, problems: Problems | None = None) -> list[Session]:
    """The sessions in one file; a line of a shape this parser does not expect is skipped and counted in `problems`."""
    problems = problems if problems is not None else Problems()
    s: Session | None = None
    turn: Turn | None = None
    pending: dict[str, ToolUse] = {}
    for n, d in numbered_lines(path, problems):
        try:
            if d.get("type") == "session" and s is None:
                s = Session("pi", str(d.get("id") or path.stem), str(path), cwd=str(d.get("cwd") or ""),
                            updated=str(d.get("timestamp") or ""))
                continue
            if s is None:
                s = Session("pi", path.stem, str(path))
            if d.get("timestamp"):
                s.updated = max(s.updated, str(d["timestamp"]))
            if d.get("type") == "model_change" and d.get("modelId"):
                s.model = str(d["modelId"])
            if d.get("type") != "message" or not isinstance(d.get("message"), dict):
                continue
            msg = d["message"]
            role = msg.get("role")
            if role == "user":
                text = text_of(msg.get("content")).strip()
                if text:
                    turn = Turn(key=str(d.get("id") or len(s.turns)), user=text, at=str(d.get("timestamp") or ""))
                    s.turns.append(turn)
            elif role == "assistant" and turn is not None:
                tool_called = take_blocks(turn, msg.get("content") or [], pending, "toolCall", "arguments")
                if msg.get("model") and not s.model:
                    s.model = str(msg["model"])
                turn.complete = not tool_called and msg.get("stopReason") != "toolUse"
                if msg.get("stopReason") == "aborted":
                    turn.interrupted = True
            elif role == "toolResult":
                use = pending.pop(str(msg.get("toolCallId")), None)
                if use is not None:
                    use.ok = not msg.get("isError")
                    use.output = text_of(msg.get("content"))
        except SHAPE_ERRORS as exc:
            problems.skipped(n, exc)
    return [s] if s is not None else []


def files(agent_dir: Path) -> list[Path]:
    root = agent_dir / "sessions"
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("*/*.jsonl") if p.is_file())
