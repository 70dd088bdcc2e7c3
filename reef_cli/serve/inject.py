"""`--inject system`: put the current release's compiled instructions in front of the request's system prompt.

The instructions are what an agent reading the release would get as its one instruction file (AGENTS.md or
CLAUDE.md, with rules and notes appended), compiled for an agent without a rules directory so nothing is left out.
The body is re-encoded only when something is injected; the record names the release and the injected text's
digest, so a reader can tell exactly what the model saw.
"""

from __future__ import annotations

INJECT_ADAPTER = "opencode"  # AGENTS.md first, CLAUDE.md as fallback, rules and notes appended, no size cap


def compiled_instructions(store, release) -> str | None:
    """The release's instruction text, or None when the harness has none. Blocking (reads the object store)."""
    return instructions_of(store.files_of(release))


def instructions_of(files) -> str | None:
    """A harness's ({path: Entry}) one instruction text as an agent without a rules directory reads it; shared with
    the example chat agent (reef_cli/chat_agent.py), which sends the same text as its system prompt."""
    from ..adapters import load
    from ..compile import compile_harness

    adapter = load(INJECT_ADAPTER)
    compiled = compile_harness(files, adapter, layout="project")
    entry = compiled.files.get(adapter.layout.instructions)
    if entry is None:
        return None
    text = entry.data.decode("utf-8", "replace").strip()
    return text or None


def _prepend_content(content, text: str):
    if isinstance(content, str):
        return f"{text}\n\n{content}" if content else text
    if isinstance(content, list):
        return [{"type": "text", "text": text}, *content]
    return text


def inject(api: str, body: dict, text: str) -> bool:
    """Prepend `text` to the system prompt of a parsed request body, in place; False when the body has no shape
    we know (then nothing is changed)."""
    if api == "openai.chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        first = messages[0] if messages else None
        if isinstance(first, dict) and first.get("role") in ("system", "developer"):
            first["content"] = _prepend_content(first.get("content"), text)
        else:
            messages.insert(0, {"role": "system", "content": text})
        return True
    if api == "openai.responses":
        current = body.get("instructions")
        body["instructions"] = f"{text}\n\n{current}" if isinstance(current, str) and current else text
        return True
    if api in ("anthropic.messages", "anthropic.count_tokens"):
        system = body.get("system")
        if system is None:
            body["system"] = text
        elif isinstance(system, (str, list)):
            body["system"] = _prepend_content(system, text)
        else:
            return False
        return True
    return False
