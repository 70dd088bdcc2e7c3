"""Claude Code's `SessionEnd`/`Stop` hook: ingest the session that just ended (or paused) into the reef project
around its working directory, so interactive sessions started with plain `claude` inside the project are heard.

`reef harness install --adapter claude` adds to the user's Claude Code settings (`$CLAUDE_CONFIG_DIR` or
`~/.claude/settings.json`, merged, everything else kept):

    {"hooks": {"SessionEnd": [{"hooks": [{"type": "command", "command": "<python> -m reef_cli.hook claude",
                                          "timeout": 10}]}], "Stop": [...the same...]}}

The hook must never slow, block or fail the agent: it reads the hook's JSON from stdin (`session_id`,
`transcript_path`, `cwd`), hands it to a detached child and exits 0 at once, whatever happens. The child ingests
that one transcript (reef_cli/ingest) under the ingest lock. It never recurses: reef runs no agent from it, and a
hook started inside a reef process (REEF_HOOK_ACTIVE) or a gate episode (REEF_HARNESS_DIR) does nothing. Outside a
reef project it does nothing. Failures go to `<scenario>/ingest-hook.log` and to `<scenario>/ingest-failed.json`
(a transcript it could not read, whole or in part: reef_cli/ingest/failures.py), which `reef status` and `reef
doctor` show; never to the agent. It always exits 0: to Claude Code a Stop hook's exit 2 means "do not stop", and
any other status shows its stderr to the user as a hook error, after every session.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

MARK = "-m reef_cli.hook"
EVENTS = ("SessionEnd", "Stop")
INPUT_MAX = 1 << 20
LINE_MAX = 1000  # characters of one failure as the log and ingest-failed.json keep it
LOG_MAX = 256 * 1024  # bytes of ingest-hook.log before it is rotated to ingest-hook.log.1 (one old log kept)


def command(python: str | None = None) -> str:
    return f"{shlex.quote(python or sys.executable)} {MARK} claude"


def settings_path(environ: dict) -> Path:
    from .ingest import user_dir

    return user_dir("claude", environ) / "settings.json"


def install_claude_hook(environ: dict, python: str | None = None) -> tuple[Path, bool]:
    """Add (or update) reef's SessionEnd and Stop hooks in the user's Claude Code settings; (path, changed).
    Other settings and hooks are kept as they are; a settings file that is not a JSON object is refused.

    The settings are the user's: a settings.json that is a symlink (a dotfiles repository) is updated where it
    points and stays a link; its mode is kept (it may hold an API key under "env", 0600); and it is re-read right
    before the replace, so a change Claude Code or the user saved meanwhile is merged again, never overwritten."""
    from .errors import ConflictError

    path = settings_path(environ)
    target = Path(os.path.realpath(path))
    for _ in range(5):
        original = _read_settings(target)
        changed = _merge_hooks(path, original, python)
        if changed is None:
            return path, False
        if _write_if_unchanged(target, original, changed):
            return path, True
    raise ConflictError(f"{path} kept changing while reef added its hook; run the command again")


def _read_settings(target: Path) -> bytes | None:
    try:
        return target.read_bytes()
    except FileNotFoundError:
        return None


def _write_if_unchanged(target: Path, original: bytes | None, data: bytes) -> bool:
    """Replace `target` with `data` unless it no longer holds `original`; keeps the file's mode (write_atomic)."""
    from .durable import write_atomic

    target.parent.mkdir(parents=True, exist_ok=True)
    if _read_settings(target) != original:
        return False
    write_atomic(target, data)
    return True


def _merge_hooks(path: Path, original: bytes | None, python: str | None) -> bytes | None:
    """The settings with reef's hooks merged in, or None when they are there already."""
    from .errors import InvalidInput

    try:
        doc = {} if original is None else json.loads(original.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path} is not valid JSON ({exc}); fix it or pass --no-hook") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("hooks", {}), dict):
        raise InvalidInput(f"{path}: expected a JSON object with an object under 'hooks'; fix it or pass --no-hook")
    before = json.dumps(doc, sort_keys=True)
    hooks = doc.setdefault("hooks", {})
    ours = {"type": "command", "command": command(python), "timeout": 10}
    for event in EVENTS:
        groups = hooks.get(event)
        groups = [g for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []
        kept = []
        for g in groups:  # drop reef's earlier entries (another python, an older form); keep everyone else's
            inner = [h for h in g.get("hooks", []) if not (isinstance(h, dict) and MARK in str(h.get("command")))]
            if inner:
                kept.append({**g, "hooks": inner})
            elif not g.get("hooks"):
                kept.append(g)
        kept.append({"hooks": [ours]})
        hooks[event] = kept
    if json.dumps(doc, sort_keys=True) == before:
        return None
    return (json.dumps(doc, indent=2) + "\n").encode()


def _detach(data: bytes) -> None:
    import subprocess

    env = {**os.environ, "REEF_HOOK_ACTIVE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reef_cli.hook", "claude", "--now"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                            close_fds=True)
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except OSError:
        pass


def ingest_now(data: bytes, environ: dict) -> int:
    """Ingest the session the hook input names; the number of turns written (0 when there is nothing to do)."""
    from .errors import NotFound
    from .ingest import Source, ingest
    from .project import find_project
    from .store import HarnessStore

    try:
        event = json.loads(data)
    except ValueError:
        return 0
    if not isinstance(event, dict):
        return 0
    cwd, transcript, sid = event.get("cwd"), event.get("transcript_path"), event.get("session_id")
    if not (isinstance(cwd, str) and isinstance(transcript, str) and os.path.isfile(transcript)):
        return 0
    try:
        project = find_project(Path(cwd))
    except NotFound:
        return 0
    store = HarnessStore(project, environ.get("REEF_SCENARIO") or project.default_scenario())
    if not store.exists():
        return 0
    head = store.head()
    source = Source("claude", Path(transcript), "hook", head.release_id if head else None,
                    head.content_id if head else None, only=frozenset({sid}) if isinstance(sid, str) else None)
    try:
        return ingest(store, sources=[source], environ=environ).turns  # a file it cannot read: ingest records it
    except Exception as exc:  # noqa: BLE001 - recorded for the user (`reef status`), never surfaced to the agent
        why = safe_text(f"{type(exc).__name__}: {exc}")
        try:
            from .ingest import note_failure

            note_failure(store, Path(transcript), f"not ingested: {why}")
        except Exception:  # noqa: BLE001 - the log below still has it
            pass
        try:
            log_failure(store.dir / "ingest-hook.log", safe_text(f"{event.get('hook_event_name')} {sid}: {why}"))
        except Exception:  # noqa: BLE001 - a misplaced log (MisplacedState) must not fail the hook either
            pass
        return 0


def safe_text(text: str) -> str:
    """An exception's text as the hook stores it: redacted (a path, a URL with credentials or a transcript's token
    can be in it; reef never stores a secret), on one line (a newline in a session id or a path cannot forge a log
    line) and at most about LINE_MAX characters (cut after redacting, so a secret across the cut is still caught)."""
    from .printable import printable
    from .redact import excerpt

    cut, more = excerpt(text, LINE_MAX)
    return printable(cut) + (" [...]" if more else "")


def log_failure(path: Path, line: str) -> None:
    """Append one line to the hook's log (state: owner-only, never through a symlink); past LOG_MAX bytes the log
    is first rotated to PATH.1, so a hook failing after every session cannot fill the disk."""
    from .durable import append_durable

    try:
        if os.lstat(path).st_size > LOG_MAX:
            os.replace(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    append_durable(path, (line + "\n").encode())


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        data = sys.stdin.buffer.read(INPUT_MAX)
    except (OSError, ValueError):
        return 0
    try:
        if "--now" in args:
            ingest_now(data, dict(os.environ))
        elif not os.environ.get("REEF_HOOK_ACTIVE") and not os.environ.get("REEF_HARNESS_DIR"):
            _detach(data)
    except Exception:  # noqa: BLE001 - a hook must never fail the agent
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
