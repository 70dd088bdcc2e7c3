"""Codex CLI's sessions: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl` (default
CODEX_HOME ~/.codex), one `{"timestamp", "type", "payload"}` object a line.

`session_meta` names the session (`id`, `cwd`); `event_msg` lines carry what the user and the agent said
(Codex 0.171: `item_completed` with an item of type UserMessage/AgentMessage and text `content`; older versions
`user_message`/`agent_message` with `message`) and `task_complete`/`turn_aborted`; `response_item`
lines the model's items: `function_call`/`custom_tool_call` (`name`, `arguments`/`input`, `call_id`) and their
`…_output` (`output`, a string or `{content, success}`). The user's prompts are read from `user_message` events,
not from `response_item` messages, which also hold the instructions Codex injects (AGENTS.md, environment).
"""

from __future__ import annotations

import json
from pathlib import Path

from .model import SHAPE_ERRORS, Problems, Session, ToolUse, Turn, numbered_lines, loads


def _output(value) -> tuple[str, bool | None]:
    if isinstance(value, str):
        try:
            inner = loads(value)
        except (ValueError, RecursionError):
            return value, None
        value = inner
    if isinstance(value, dict):
        text = value.get("output", value.get("content", ""))
        meta = value.get("metadata") if isinstance(value.get("metadata"), dict) else {}
        ok = value.get("success")
        if ok is None and isinstance(meta.get("exit_code"), int):
            ok = meta["exit_code"] == 0
        return (text if isinstance(text, str) else json.dumps(text)), ok
    return str(value), None


def _item_text(item: dict) -> str:
    """The text of an `item_completed` event's UserMessage/AgentMessage (Codex ≥ 0.17x)."""
    parts = item.get("content") if isinstance(item.get("content"), list) else []
    return "\n".join(str(c.get("text") or "") for c in parts if isinstance(c, dict)
                     and c.get("type") in ("text", "Text")).strip()


def _args(value) -> str:
    if isinstance(value, str):
        try:
            value = loads(value)
        except (ValueError, RecursionError):
            return value
    from .model import tool_input_text

    return tool_input_text(value)


def parse(path: Path, problems: Problems | None = None) -> list[Session]:
    """The sessions in one file; a line of a shape this parser does not expect is skipped and counted in `problems`."""
    problems = problems if problems is not None else Problems()
    s = Session("codex", path.stem, str(path))
    turn: Turn | None = None
    pending: dict[str, ToolUse] = {}
    for n, d in numbered_lines(path, problems):
        try:
            if not isinstance(d.get("payload"), dict):
                continue
            p = d["payload"]
            kind, ts = d.get("type"), str(d.get("timestamp") or "")
            s.updated = max(s.updated, ts)
            if kind == "session_meta":
                s.session_id = str(p.get("id") or s.session_id)
                s.cwd = str(p.get("cwd") or s.cwd)
            elif kind == "turn_context" and p.get("model"):
                s.model = str(p["model"])
            elif kind == "event_msg":
                t = p.get("type")
                item = p.get("item") if isinstance(p.get("item"), dict) else {}
                said = _item_text(item) if t == "item_completed" else str(p.get("message") or "").strip()
                if (t == "user_message" or item.get("type") == "UserMessage") and said:
                    turn = Turn(key=str(item.get("id") or len(s.turns)), user=said, at=ts)
                    s.turns.append(turn)
                elif turn is None:
                    continue
                elif (t == "agent_message" or item.get("type") == "AgentMessage") and said:
                    turn.agent.append(said)
                elif t == "task_complete":
                    turn.complete = True
                elif t == "turn_aborted":
                    turn.interrupted = turn.complete = True
            elif kind == "response_item" and turn is not None:
                t = p.get("type")
                if t in ("function_call", "custom_tool_call", "local_shell_call"):
                    use = ToolUse(str(p.get("name") or t), _args(p.get("arguments", p.get("input", p.get("action")))),
                                  call_id=str(p.get("call_id") or ""))
                    turn.tools.append(use)
                    pending[use.call_id] = use
                elif t in ("function_call_output", "custom_tool_call_output"):
                    use = pending.pop(str(p.get("call_id")), None)
                    if use is not None:
                        use.output, use.ok = _output(p.get("output"))
                        if use.ok is None:
                            use.ok = True
        except SHAPE_ERRORS as exc:
            problems.skipped(n, exc)
    return [s] if s.turns or s.session_id != path.stem else []


def files(codex_home: Path) -> list[Path]:
    root = codex_home / "sessions"
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("**/rollout-*.jsonl") if p.is_file())
