"""What reef keeps of an agent session: turns (a user prompt and what the agent did until the next one), their tool
calls with outcomes, as digests plus redacted, bounded excerpts.

Every agent's parser (claude.py, opencode.py, pi.py, codex.py) turns its own session store into `Session`s of
`Turn`s; `ingest/__init__.py` writes them to the ledger. A turn is keyed by an id the agent gave it (the prompt
message's id), so a session re-read after it grew, or copied into a resumed session's file, yields the same keys.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

USER_CHARS = 1000  # the user's words are the signal: keep more of them than of the agent's
AGENT_CHARS = 400
TOOL_CHARS = 160
MAX_TOOLS = 20  # tool calls kept per turn (the count is always exact)
_KEY_OK = re.compile(r"[^A-Za-z0-9_.:-]")


@dataclass
class ToolUse:
    name: str
    input: str = ""
    ok: bool | None = None  # None: no result seen
    output: str = ""
    call_id: str = ""


@dataclass
class Turn:
    key: str  # the agent's id for the prompt message, unique within the session
    user: str
    at: str = ""
    agent: list[str] = field(default_factory=list)  # the agent's text messages, in order
    tools: list[ToolUse] = field(default_factory=list)
    complete: bool = False  # the agent finished answering (a final message, no tool call awaiting its result)
    interrupted: bool = False  # the user stopped the agent mid-turn
    reverted: bool = False  # the user undid this turn (opencode's session revert)

    @property
    def reply(self) -> str:
        return self.agent[-1] if self.agent else ""


@dataclass
class Session:
    agent: str
    session_id: str
    source: str
    cwd: str = ""
    model: str = ""
    turns: list[Turn] = field(default_factory=list)
    updated: str = ""  # the last activity, ISO-8601

    def last(self) -> Turn | None:
        return self.turns[-1] if self.turns else None


# A line an agent wrote that reef cannot read (damaged, not an object, or of a shape its parser does not expect) is
# skipped, and counted for one warning per file: the rest of the file, and every other file, is still read.
SHAPE_ERRORS = (TypeError, AttributeError, KeyError, ValueError, IndexError, RecursionError)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_JSON_TYPE = {int: "a number", float: "a number", bool: "a boolean", dict: "an object", type(None): "null"}


def _no_lone_surrogates(value):
    """`value` with every lone UTF-16 surrogate in its strings replaced by U+FFFD. Node's JSON.stringify writes one as
    an escape (`"\\ud83d"`, an emoji cut in half) and Python decodes it to a str that cannot be encoded to UTF-8,
    so no record holding it could be stored; a pair decodes to its one character and never reaches here."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_no_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_no_lone_surrogates(k): _no_lone_surrogates(v) for k, v in value.items()}
    return value


def loads(raw: bytes | str):
    """json.loads with lone surrogates replaced (see _no_lone_surrogates); ValueError or RecursionError (a line
    nested deeper than Python's stack) for what is not JSON."""
    value = json.loads(raw)
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if _SURROGATE_ESCAPE.search(raw):  # only an escape can make a lone surrogate: skip the walk for all other lines
        value = _no_lone_surrogates(value)
    return value


class Problems:
    """The lines of one file a parser skipped: how many, and the first one's number and reason, for one warning."""

    def __init__(self) -> None:
        self.count = 0
        self.first = ""

    def add(self, line: int, why: str) -> None:
        self.count += 1
        if not self.first:
            self.first = f"line {line}: {why}"

    def skipped(self, line: int, exc: BaseException) -> None:
        if isinstance(exc, RecursionError):
            self.add(line, "nested too deeply")
        else:
            self.add(line, f"unexpected shape ({type(exc).__name__}: {str(exc)[:120]})")

    def summary(self) -> str | None:
        if not self.count:
            return None
        more = f"; {self.count - 1} more" if self.count > 1 else ""
        return f"skipped {self.count} line(s) reef could not read ({self.first}{more})"


def numbered_lines(path, problems: Problems | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each JSON object of a JSONL transcript, one a line. A damaged line, one nested too
    deeply or one that is not an object is skipped (and counted in `problems`); a last line without its newline is
    skipped silently, since an agent may be appending to the file while we read it."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                d = loads(raw)
            except (ValueError, RecursionError) as exc:
                if problems is not None and raw.endswith(b"\n") and raw.strip():
                    problems.add(n, "nested too deeply" if isinstance(exc, RecursionError) else "not JSON")
                continue
            if isinstance(d, dict):
                yield n, d
            elif problems is not None:
                problems.add(n, f"a JSON {type(d).__name__}, not an object")


def json_lines(path) -> Iterator[dict]:
    """The JSON objects of a JSONL file (numbered_lines without the numbers or the count of skipped lines)."""
    for _, d in numbered_lines(path):
        yield d


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@functools.lru_cache(maxsize=8192)
def clip(text: str, limit: int) -> str:
    """A redacted excerpt of at most about `limit` characters, `…` where cut: see `redact.excerpt` (redacted before
    cutting, from far enough past the cut that a secret across it is seen whole; a marker never cut in half).
    Memoised: sessions repeat commands and replies."""
    from ..redact import excerpt

    out, cut = excerpt(text.replace("\x00", ""), limit)
    return out + "…" if cut else out


def safe_key(text: str) -> str:
    """A ledger-id-safe form of an agent's id (letters, digits, '_.:-'); hashed when long."""
    cleaned = _KEY_OK.sub("_", text)
    if len(cleaned) > 48:
        return hashlib.sha256(text.encode()).hexdigest()[:32]
    return cleaned


def tool_input_text(value) -> str:
    """A tool call's input as one line: the command for shell tools, else compact JSON."""
    import json

    if isinstance(value, dict):
        for k in ("command", "cmd", "filePath", "file_path", "path", "pattern", "url", "skill"):
            v = value.get(k)
            if isinstance(v, str):
                return v
            if isinstance(v, list) and all(isinstance(x, str) for x in v):
                return " ".join(v)
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def text_of(content) -> str:
    """Text blocks of a message's content (a string, or a list of {type: text, text: ...} blocks)."""
    if isinstance(content, str):
        return content
    out = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text") \
                    and isinstance(block.get("text"), str):
                out.append(block["text"])
            elif isinstance(block, str):
                out.append(block)
    return "\n".join(out)


def take_blocks(turn: Turn, blocks, pending: dict[str, ToolUse], tool_type: str, args_key: str) -> bool:
    """Add an assistant message's content blocks to `turn`: its non-blank `text` blocks as what the agent said,
    its tool-call blocks (`tool_type`, arguments under `args_key`) as tool uses, kept in `pending` by call id until
    their result arrives. Claude Code and pi share this shape and differ in those two names. True when a tool was
    called, so the turn is not complete yet."""
    if isinstance(blocks, str):
        blocks = [{"type": "text", "text": blocks}]
    elif not isinstance(blocks, list):
        raise TypeError(f"message content is {_JSON_TYPE.get(type(blocks), type(blocks).__name__)}, "
                        "not a list of blocks")
    tool_called = False
    for b in blocks:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text" and str(b.get("text") or "").strip():
            turn.agent.append(str(b["text"]))
        elif b.get("type") == tool_type:
            use = ToolUse(str(b.get("name") or "?"), tool_input_text(b.get(args_key)), call_id=str(b.get("id") or ""))
            turn.tools.append(use)
            pending[use.call_id] = use
            tool_called = True
    return tool_called
