"""reef's example CHAT agent: the compiled harness as the system prompt, the task as the user message, sent to any
OpenAI-compatible endpoint — a real model where the example agent (example_agent.py) is a simulation.

    REEF_CHAT_URL=http://127.0.0.1:8900/v1 python -m reef_cli.chat_agent -p "What is the capital of Peru?"

Point REEF_CHAT_URL at `reef serve` (whose upstream is `reef model serve-local`, or a provider) and every call is
recorded with a receipt; the gate runs it like any agent (harness.yaml `agent: ["{python}", "-m",
"reef_cli.chat_agent", "-p", "{prompt}"]`), reading the harness under test from $REEF_HARNESS_DIR. The answer goes
to stdout and to `answer.txt` in the working directory, where a task's check reads it.

System prompt: the harness compiled the way `reef serve --inject system` compiles a release (one instruction file,
AGENTS.md before CLAUDE.md, rules and notes appended), without reef's HTML markers — they are for reef, and a small
model reads them as text.

Sessions (`--session FILE`): a conversation kept in pi's session format (a `session` line, then `message` lines
with role user/assistant), so `reef ingest FILE` reads it unchanged: a follow-up that corrects an answer becomes an
implicit report on it. Each call appends the user's message and the answer, and sends the whole history.

Settings (flag, else environment): --url/REEF_CHAT_URL (default reef serve's http://127.0.0.1:8900/v1),
--model/REEF_CHAT_MODEL, --max-tokens/REEF_CHAT_MAX_TOKENS (64), --temperature/REEF_CHAT_TEMPERATURE (0: greedy),
REEF_CHAT_SEED (the request's seed; by default one derived from $REEF_EPISODE_SEED, so candidate and current meet
the same sampling luck when temperature > 0). OPENAI_API_KEY, when set, is sent as the bearer token. Headers for
reef serve: x-reef-session (the session id, or $REEF_SERVE_SESSION) and x-reef-tag-task ($REEF_TASK_ID).
Only the standard library is imported, so an episode costs one Python start and one HTTP call.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8900/v1"
DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_MAX_TOKENS = 64
ANSWER_FILE = "answer.txt"
INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
NOTES_FALLBACK = ("CLAUDE.local.md", "reef/notes.md")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
TIMEOUT = 120.0
MAX_BODY = 16 << 20  # an answer of max_tokens tokens is kilobytes: a larger body is not a chat completion


class AgentError(Exception):
    pass


def system_prompt(harness: Path | None) -> str:
    """The harness's instructions as one text, compiled like `reef serve --inject system` (reef's compiler when
    the directory is a reef harness; else the instruction files and notes read directly), markers removed."""
    if harness is None or not harness.is_dir():
        return ""
    text = None
    if (harness / "harness.yaml").is_file():
        text = _compiled(harness)
    if text is None:
        parts = []
        for name in (*INSTRUCTION_FILES[:1], *NOTES_FALLBACK):
            path = harness / name
            if name == "AGENTS.md" and not path.is_file():
                path = harness / "CLAUDE.md"
            if path.is_file():
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
        text = "\n\n".join(parts)
    text = "\n".join(line.rstrip() for line in _COMMENT.sub("", text).splitlines())
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _harness_files(harness: Path) -> dict[str, bytes]:
    files = {}
    for dirpath, dirs, names in os.walk(harness):
        dirs.sort()
        for name in sorted(names):
            full = Path(dirpath) / name
            rel = full.relative_to(harness).as_posix()
            if rel.split("/", 1)[0] in ("canary", "evaluators"):
                continue  # held-out tasks never reach the model
            files[rel] = full.read_bytes()
    return files


def _compiled(harness: Path) -> str | None:
    """reef's compiler on the directory, cached by content under the temp dir: the gate runs many episodes on one
    harness, and compiling validates harness.yaml (jsonschema: ~0.3 s of CPU an episode would otherwise pay)."""
    files = _harness_files(harness)
    h = hashlib.sha256()
    for rel, data in files.items():
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    cache = Path(tempfile.gettempdir()) / f"reef-chat-prompts-{os.getuid()}" / f"{h.hexdigest()[:32]}.txt"
    owned = _private_dir(cache.parent)
    if owned:
        try:
            return cache.read_text(encoding="utf-8")
        except OSError:
            pass
    from .gitstore import Entry
    from .serve.inject import instructions_of

    try:
        text = instructions_of({k: Entry(v) for k, v in files.items()}) or ""
    except Exception:  # a harness the compiler refuses: fall back to reading its files directly
        return None
    if not owned:
        return text  # a cache directory someone else made (or a symlink) in the shared temp dir is never trusted
    try:
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass  # no cache: the next episode compiles again
    return text


def _private_dir(path: Path) -> bool:
    """Create `path` 0700 if missing; True only when it is a real directory owned by us and closed to others."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


# ---------------------------------------------------------------------------------------------- sessions


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


def read_session(path: Path) -> tuple[str | None, list[dict], str | None]:
    """(session id, [{role, content}], id of the last message) from a pi-format session file; lines of another
    shape are skipped. A path that cannot be a session file is refused before the model is called: the answer
    would be lost when it is appended."""
    if path.is_dir():
        raise AgentError(f"--session {path}: is a directory, not a session file")
    if not path.exists():
        return None, [], None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise AgentError(f"--session {path}: cannot be read as a session file ({why})") from None
    sid, history, last = None, [], None
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if not isinstance(d, dict):
            continue
        if d.get("type") == "session":
            sid = str(d.get("id"))
        elif d.get("type") == "message" and isinstance(d.get("message"), dict):
            msg = d["message"]
            text = "".join(b.get("text", "") for b in msg.get("content") or () if isinstance(b, dict))
            history.append({"role": msg.get("role"), "content": text})
            last = d.get("id")
    return sid, history, last


def _append(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for d in lines:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")


def _message(role: str, text: str, parent: str | None, **extra) -> dict:
    return {"type": "message", "id": uuid.uuid4().hex[:8], "parentId": parent, "timestamp": _now(),
            "message": {"role": role, "content": [{"type": "text", "text": text}], **extra}}


# ---------------------------------------------------------------------------------------------- the call


def seed_of(environ) -> int:
    if environ.get("REEF_CHAT_SEED"):
        return int(environ["REEF_CHAT_SEED"])
    return int.from_bytes(hashlib.sha256(environ.get("REEF_EPISODE_SEED", "").encode()).digest()[:4], "big")


def chat(url: str, messages: list[dict], *, model: str, max_tokens: int, temperature: float, seed: int,
         headers: dict[str, str], timeout: float = TIMEOUT) -> str:
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature,
                       "seed": seed, "stream": False}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read(MAX_BODY + 1)
            missing = resp.length  # bytes its Content-Length promised that never came (read(n) does not raise)
        if len(raw) > MAX_BODY:
            raise AgentError(f"{url}: the answer is larger than {MAX_BODY >> 20} MiB; not a chat completion")
        if missing:
            raise AgentError(f"{url}: the answer was cut off after {len(raw)} of {len(raw) + missing} bytes "
                             "(the connection closed early)")
        data = json.loads(raw)
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        raise AgentError(f"{url}: HTTP {exc.code}" + (f": {detail}" if detail else "")) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AgentError(f"{url}: cannot reach the model endpoint ({reason}); start one with "
                         f"`reef model serve-local` (and `reef serve --upstream ...` to record calls)") from None
    except http.client.HTTPException as exc:  # not HTTP at all (BadStatusLine) or a broken framing
        raise AgentError(f"{url}: not a valid HTTP answer ({type(exc).__name__})") from None
    except ValueError:
        raise AgentError(f"{url}: the answer is not JSON") from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise AgentError(f"{url}: no choices[0].message.content in the answer") from None
    return content if isinstance(content, str) else ""


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    ap = argparse.ArgumentParser(
        prog="python -m reef_cli.chat_agent",
        description="reef's example chat agent: the harness in $REEF_HARNESS_DIR as the system prompt, the prompt "
                    "as the user message, to an OpenAI-compatible endpoint; prints the answer and writes answer.txt.")
    ap.add_argument("-p", "--prompt", help="the user message (default: read from stdin)")
    ap.add_argument("--harness", type=Path, help="harness directory (default: $REEF_HARNESS_DIR)")
    ap.add_argument("--session", type=Path, help="continue (or start) a conversation kept in this pi-format file")
    ap.add_argument("--url", default=env.get("REEF_CHAT_URL") or DEFAULT_URL, help="OpenAI base URL, ending in /v1")
    ap.add_argument("--model", default=env.get("REEF_CHAT_MODEL") or DEFAULT_MODEL)
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    args = ap.parse_args(argv)
    try:
        max_tokens = args.max_tokens if args.max_tokens is not None else int(env.get("REEF_CHAT_MAX_TOKENS")
                                                                              or DEFAULT_MAX_TOKENS)
        temperature = args.temperature if args.temperature is not None else float(env.get("REEF_CHAT_TEMPERATURE")
                                                                                   or 0)
        seed = seed_of(env)
    except ValueError as exc:
        ap.error(f"a REEF_CHAT_* setting is not a number ({exc})")
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    if not prompt.strip():
        ap.error("empty prompt")
    root = args.harness or (Path(env["REEF_HARNESS_DIR"]) if env.get("REEF_HARNESS_DIR") else None)
    system = system_prompt(root)
    try:
        sid, history, last = read_session(args.session) if args.session else (None, [], None)
    except AgentError as exc:
        print(f"chat-agent: {exc}", file=sys.stderr)
        return 1
    messages = ([{"role": "system", "content": system}] if system else []) + history + \
        [{"role": "user", "content": prompt}]
    headers = {}
    if env.get("OPENAI_API_KEY"):
        headers["authorization"] = f"Bearer {env['OPENAI_API_KEY']}"
    if args.session and sid is None:
        sid = str(uuid.uuid4())
    session = sid or env.get("REEF_SERVE_SESSION")
    if session:
        headers["x-reef-session"] = session
    if env.get("REEF_TASK_ID"):
        headers["x-reef-tag-task"] = env["REEF_TASK_ID"]
    try:
        answer = chat(args.url, messages, model=args.model, max_tokens=max_tokens, temperature=temperature,
                      seed=seed, headers=headers)
    except AgentError as exc:
        print(f"chat-agent: {exc}", file=sys.stderr)
        return 1
    answer = answer.strip()
    if args.session:
        lines = [] if history else [{"type": "session", "version": 3, "id": sid, "timestamp": _now(),
                                     "cwd": os.getcwd()}]
        user = _message("user", prompt, last)
        lines += [user, _message("assistant", answer, user["id"], model=args.model, stopReason="stop")]
        _append(args.session, lines)
    Path(ANSWER_FILE).write_text(answer + "\n", encoding="utf-8")
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
