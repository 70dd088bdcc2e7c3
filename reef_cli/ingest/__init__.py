"""`reef ingest`: the agents' own session stores → `session` ledger records, with corrections as implicit reports.

Loop 0 input from where users already give feedback: inside the session. Sources (see each parser's docstring):

* Claude Code  `<CLAUDE_CONFIG_DIR or ~/.claude>/projects/<slug>/<session>.jsonl`
* pi           `<PI_CODING_AGENT_DIR or ~/.pi/agent>/sessions/--<slug>--/<time>_<session>.jsonl`
* Codex CLI    `<CODEX_HOME or ~/.codex>/sessions/YYYY/MM/DD/rollout-…-<session>.jsonl`
* opencode     `$XDG_DATA_HOME/opencode/opencode.db` (SQLite, read-only)

With no PATH, reef reads the config dirs its wrappers point the agents at (every install of this project's scenario:
all of their sessions are this scenario's) and the user's own dirs, keeping only sessions whose working directory
is inside this project (a plain `claude` started in the project). A PATH (file or folder) is read whole.

Each turn (a user prompt and what the agent did until the next prompt) becomes one `session` record with a
deterministic id (agent, session id, the agent's id for the prompt), so ingesting twice adds nothing; a state file
(`<scenario>/ingest.json`) skips unchanged files without parsing them. A record keeps digests of the user's and the
agent's words, redacted excerpts bounded in size (model.py), the tool calls with their outcome and, for a failed
call, a redacted excerpt of its output. A follow-up that corrects the previous turn (corrections.py) also writes an
implicit `report` on that turn: score 0, the user's redacted words as feedback; an acceptance, score 1; a turn the
user reverted (opencode's session revert), score 0 on that turn. The last turn of a live session is held back until
the agent has finished it, or until its session has been untouched for STALE_AFTER (the agent crashed or was killed
mid-turn): then it is recorded with `"unfinished": true`, and the file is not read again for it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ..errors import ConflictError, InvalidInput
from .model import AGENT_CHARS, MAX_TOOLS, TOOL_CHARS, USER_CHARS, Problems, Session, clip, digest, safe_key

AGENTS = ("claude", "opencode", "pi", "codex")
REVERTED = "The user reverted this turn's changes."
STATE_NAME = "ingest.json"
BATCH = 2000
STALE_AFTER = timedelta(hours=24)  # a last turn untouched this long is not waiting for its agent any more


@dataclass(frozen=True)
class Source:
    agent: str
    path: Path
    origin: str  # "wrapper" (a reef install's config dir), "user" (the user's own store) or "path" (named)
    release_id: str | None = None
    content_id: str | None = None
    within: str | None = None  # keep only sessions whose cwd is inside this directory
    only: frozenset[str] | None = None  # keep only these session ids (a wrapper's own session)


@dataclass
class IngestResult:
    sources: int = 0
    files_read: int = 0
    files_skipped: int = 0
    sessions: int = 0
    turns: int = 0
    corrections: int = 0
    acceptances: int = 0
    held: int = 0  # unfinished last turns, left for the next ingest
    unfinished: int = 0  # unfinished last turns recorded as such: their session untouched for STALE_AFTER
    existing: int = 0  # records the ledger already held (a re-ingest after the state file was lost)
    existing_turns: int = 0  # of which turns; `turns`, `corrections`, `acceptances` count only new records
    conflicts: int = 0
    errors: list[str] = field(default_factory=list)  # a file, source or record that could not be ingested
    warnings: list[str] = field(default_factory=list)  # lines skipped in a file that was otherwise ingested
    record_ids: list[str] = field(default_factory=list)
    # the files behind errors and warnings: absolute path -> (why, whether the whole file failed)
    failed: dict[str, tuple[str, bool]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"sources": self.sources, "files_read": self.files_read, "files_skipped": self.files_skipped,
                "sessions": self.sessions, "turns": self.turns, "corrections": self.corrections,
                "acceptances": self.acceptances, "held": self.held, "unfinished": self.unfinished,
                "existing": self.existing,
                "existing_turns": self.existing_turns,
                "conflicts": self.conflicts, "errors": self.errors, "warnings": self.warnings}


def parse_since(value: str | None, now: datetime | None = None) -> str | None:
    """`--since`: an ISO date/time, or a duration back from now (30m, 12h, 7d, 2w); the ISO-8601 UTC string."""
    if not value:
        return None
    now = now or datetime.now(timezone.utc)
    v = value.strip()
    units = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    if len(v) >= 2 and v[:-1].isdigit() and v[-1] in units:
        try:
            moment = now - timedelta(**{units[v[-1]]: int(v[:-1])})
        except OverflowError:  # before year 1, or past what timedelta holds
            raise InvalidInput(f"--since {value!r}: out of range (a date must fall in the years 1 to 9999)") from None
    else:
        try:
            moment = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(f"--since {value!r}: expected an ISO date (2026-01-31, 2026-01-31T12:00Z) or a "
                               "duration such as 30m, 12h, 7d, 2w") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
    try:
        return _iso(moment)
    except OverflowError:  # 0001-01-01T00:00+01:00 is in the year 0 in UTC, 9999-12-31T23:59-01:00 in 10000
        raise InvalidInput(f"--since {value!r}: out of range (a date must fall in the years 1 to 9999)") from None


def _iso(moment: datetime) -> str:
    """UTC, to the millisecond, zero-padded as the agents' timestamps are (even for the year 1): compared with
    them as strings."""
    m = moment.astimezone(timezone.utc)
    return (f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}."
            f"{m.microsecond // 1000:03d}Z")


# ------------------------------------------------------------------------------------------------ sources


def _home(environ: dict) -> Path:
    return Path(environ.get("HOME") or os.path.expanduser("~"))


def user_dir(agent: str, environ: dict) -> Path:
    """The agent's own store when it runs without reef (its documented env var, else its default)."""
    if agent == "claude":
        return Path(environ["CLAUDE_CONFIG_DIR"]) if environ.get("CLAUDE_CONFIG_DIR") else _home(environ) / ".claude"
    if agent == "pi":
        return (Path(environ["PI_CODING_AGENT_DIR"]) if environ.get("PI_CODING_AGENT_DIR")
                else _home(environ) / ".pi" / "agent")
    if agent == "codex":
        return Path(environ["CODEX_HOME"]) if environ.get("CODEX_HOME") else _home(environ) / ".codex"
    from .opencode import database

    return database(environ)


def _installs(project, scenario: str, agent: str) -> list[dict]:
    out = []
    for path in sorted((project.state / "installs").glob(f"{agent}-*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("scenario") == scenario and rec.get("agent_dir"):
            out.append(rec)
    return out


def default_sources(store, agents: tuple[str, ...], environ: dict) -> list[Source]:
    head = store.head()
    rel, cid = (head.release_id, head.content_id) if head else (None, None)
    root = os.path.realpath(store.project.root)
    out: list[Source] = []
    for agent in agents:
        seen = set()
        if agent != "opencode":  # opencode keeps its sessions in the user's data dir, wherever its config is
            for rec in _installs(store.project, store.scenario, agent):
                seen.add(os.path.realpath(rec["agent_dir"]))
                out.append(Source(agent, Path(rec["agent_dir"]), "wrapper", rec.get("release_id"),
                                  rec.get("content_id")))
        own = user_dir(agent, environ)
        if os.path.realpath(own) not in seen:
            out.append(Source(agent, own, "user", rel, cid, within=root))
    return out


def sniff(path: Path) -> str | None:
    """Which agent wrote this session file."""
    if path.suffix == ".db":
        return "opencode"
    try:
        with open(path, "rb") as fh:
            head = [fh.readline() for _ in range(5)]
    except OSError:
        return None
    for raw in head:
        try:
            d = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(d, dict):
            continue
        if d.get("type") == "session" and "cwd" in d and "payload" not in d:
            return "pi"
        if d.get("type") in ("session_meta", "response_item", "event_msg", "turn_context") and "payload" in d:
            return "codex"
        if "sessionId" in d:
            return "claude"
    return None


def path_sources(store, paths: list[Path], agent: str | None) -> list[Source]:
    head = store.head()
    rel, cid = (head.release_id, head.content_id) if head else (None, None)
    out = []
    for p in paths:
        if not p.exists():
            raise InvalidInput(f"reef ingest {p}: no such file or directory")
        if not (p.is_file() or p.is_dir()):  # never opened: reading a FIFO would wait for a writer
            raise InvalidInput(f"reef ingest {p}: not a regular file or folder (a FIFO, a socket or a device)")
        if p.is_file() and not agent and not sniff(p):
            raise InvalidInput(f"reef ingest {p}: not a session file reef recognises (a Claude Code, pi or Codex "
                               "transcript, or opencode.db); if it is one, name its agent with --agent")
        out.append(Source(agent or "", p, "path", rel, cid))
    return out


def _files(src: Source) -> list[tuple[str, Path]]:
    """(agent, file) pairs a source holds."""
    from . import claude, codex, pi

    p = src.path
    if p.is_file():
        agent = src.agent or sniff(p)
        return [(agent, p)] if agent else []
    if not p.is_dir():
        return []
    if src.origin != "path":
        if src.agent == "claude":
            return [("claude", f) for f in claude.files(p)]
        if src.agent == "pi":
            return [("pi", f) for f in pi.files(p)]
        if src.agent == "codex":
            return [("codex", f) for f in codex.files(p)]
    out = []
    for f in sorted(p.rglob("*")):
        if f.is_file() and (f.suffix == ".jsonl" or f.name == "opencode.db"):
            agent = src.agent or sniff(f)
            if agent:
                out.append((agent, f))
    return out


# ------------------------------------------------------------------------------------------------ records


def turn_id(session: Session, key: str, copies: dict[str, str] | None = None) -> str:
    """A turn's record id; for a turn copied from another session (`copies`: its key → that session's id), the
    id it was recorded under there."""
    sid = (copies or {}).get(key, session.session_id)
    return f"ses-{session.agent}-{safe_key(sid)}-{safe_key(key)}"


def _tool_json(use) -> dict:
    d = {"name": use.name[:80], "input": clip(use.input, TOOL_CHARS), "ok": use.ok}
    if use.ok is False:
        d["output"] = clip(use.output, TOOL_CHARS * 2)
    return d


def session_records(session: Session, start: int, src: Source, result: IngestResult,
                    observe_rules: tuple = (), stale: bool = False,
                    copies: dict[str, str] | None = None) -> tuple[list, int]:
    """The records for turns from `start` on, and how many turns are now done. A session that harness.yaml's
    `observe_only` rules match (model, adapter = the agent, command = its binary) is marked so: its turns and
    implicit reports are counted but never originate a bullet, and are never sent to a model Reflector. A turn in
    `copies` (history a resumed or forked session copied from another) is passed over: it was recorded there."""
    from ..corrections import classify
    from ..ledger import NewRecord
    from ..runs import matches_observe_only

    observe = bool(observe_rules) and matches_observe_only(observe_rules, model=session.model,
                                                           adapter=session.agent, argv=[session.agent])
    out = []
    done = start
    n = len(session.turns)
    for i in range(start, n):
        turn = session.turns[i]
        unfinished = i == n - 1 and not (turn.complete or turn.interrupted or turn.reverted)
        if unfinished and not stale:
            result.held += 1
            break
        if copies and turn.key in copies:
            done = i + 1
            continue
        rid = turn_id(session, turn.key)
        prev = session.turns[i - 1] if i else None
        verdict = classify(turn.user, prev.user if prev else None) if prev is not None else None
        errors = sum(1 for t in turn.tools if t.ok is False)
        payload = {
            "agent": session.agent, "session_id": session.session_id, "turn": i, "turn_key": turn.key,
            "at": turn.at, "cwd": session.cwd, "model": session.model, "origin": src.origin,
            "user": {"digest": digest(turn.user), "chars": len(turn.user), "excerpt": clip(turn.user, USER_CHARS)},
            "reply": {"digest": digest(turn.reply), "chars": len(turn.reply), "excerpt": clip(turn.reply, AGENT_CHARS),
                      "messages": len(turn.agent)},
            "tool_calls": len(turn.tools), "tool_errors": errors,
            "tools": [_tool_json(t) for t in turn.tools[:MAX_TOOLS]],
            "interrupted": turn.interrupted, "reverted": turn.reverted,
            "follows": turn_id(session, prev.key, copies) if prev is not None else None,
            "verdict": {"kind": verdict.kind, "cue": verdict.cue} if verdict and verdict.kind else None,
            "observe_only": observe,
        }
        if unfinished:  # only then: records ingested before this key existed keep their content (and ids)
            payload["unfinished"] = True
            result.unfinished += 1
        out.append(NewRecord("session", payload, src.release_id, src.content_id, rid))
        if verdict is not None and verdict.kind:
            report = {"score": verdict.score, "feedback": clip(turn.user, USER_CHARS),
                      "receipts": [turn_id(session, prev.key, copies)],
                      "implicit": {"kind": verdict.kind, "cue": verdict.cue, "from": rid, "agent": session.agent}}
            out.append(NewRecord("report", report, src.release_id, src.content_id, rid + ".fb"))
            if verdict.kind == "correction":
                result.corrections += 1
            else:
                result.acceptances += 1
        if turn.reverted:  # the user undid what the agent did: an implicit report on this very turn
            out.append(NewRecord("report", {"score": 0.0, "feedback": REVERTED, "receipts": [rid],
                                            "implicit": {"kind": "revert", "cue": "revert", "from": rid,
                                                         "agent": session.agent}},
                                 src.release_id, src.content_id, rid + ".rv"))
            result.corrections += 1
        result.turns += 1
        done = i + 1
    return out, done


# ------------------------------------------------------------------------------------------------ state


class _State:
    """`<scenario>/ingest.json`: per file its size+mtime when last read, per session the turns already written."""

    def __init__(self, path: Path):
        self.path = path
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            data = {}
        self.files: dict[str, str] = dict(data.get("files") or {})
        self.sessions: dict[str, list] = dict(data.get("sessions") or {})
        # Claude sessions by their first prompt's uuid: a fork or resume copy starts with the same one
        self.claude_roots: dict[str, dict[str, str]] = dict(data.get("claude_roots") or {})

    def save(self) -> None:
        from ..durable import STATE_FILE_MODE
        from ..project import write_atomic

        write_atomic(self.path, json.dumps({"version": 1, "files": self.files, "sessions": self.sessions,
                                            "claude_roots": self.claude_roots}).encode() + b"\n", STATE_FILE_MODE)


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


# ------------------------------------------------------------------------------------------------ the run


class _Writer:
    """Batches records into `append_many` (one lock and one sync per batch); counts the ones the ledger already
    held (its ids are deterministic: an identical resend returns the stored record). A batch the ledger refuses
    is written record by record, so one record it cannot take (changed since first ingested, or not storable)
    costs that record, named with its file, and not the batch."""

    def __init__(self, ledger, result: IngestResult):
        self.ledger = ledger
        self.result = result
        self.pending: list = []
        self.origins: list[str] = []
        tail = ledger.tail(1)
        self.mark = tail[0].seq if tail else 0

    def add(self, items: list, origin: str) -> None:
        self.pending.extend(items)
        self.origins.extend([origin] * len(items))
        if len(self.pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        items, origins, self.pending, self.origins = self.pending, self.origins, [], []
        if not items:
            return
        try:
            written = self.ledger.append_many(items)
        except (ConflictError, InvalidInput):
            written = []
            for item, origin in zip(items, origins):
                try:
                    written.append(self.ledger.append_many([item])[0])
                except ConflictError:  # changed since it was first ingested: the first stays
                    self.result.conflicts += 1
                except InvalidInput as exc:
                    why = f"turn {item.payload.get('turn', '?')} ({item.record_id}) not stored: {exc}"
                    self.result.errors.append(f"{origin}: {why}")
                    self.result.failed.setdefault(os.path.abspath(origin), (why, False))
        for rec in written:
            if rec.seq <= self.mark:
                self._already(rec)
            else:
                self.result.record_ids.append(rec.record_id)
        self.mark = max([self.mark, *(rec.seq for rec in written)])

    def _already(self, rec) -> None:
        """A record the ledger held before this run: counted as existing, not as new."""
        r = self.result
        r.existing += 1
        if rec.kind == "session":
            r.turns -= 1
            r.existing_turns += 1
        elif rec.kind == "report":
            kind = (rec.payload.get("implicit") or {}).get("kind")
            if kind == "acceptance":
                r.acceptances -= 1
            elif kind in ("correction", "revert"):
                r.corrections -= 1


def _inside(cwd: str, root: str) -> bool:
    if not cwd:
        return False
    real = os.path.realpath(cwd)
    return real == root or real.startswith(root.rstrip("/") + "/")


def ingest(store, *, agent: str | None = None, paths: list[Path] | None = None, since: str | None = None,
           environ: dict | None = None, sources: list[Source] | None = None,
           progress: Callable[[dict], None] | None = None, now: datetime | None = None) -> IngestResult:
    """Read the sources, write new turns (and implicit reports) to the scenario's ledger; see the module doc."""
    from ..project import ScenarioPaths
    from ..sessions import flocked

    if agent is not None and agent not in AGENTS:
        raise InvalidInput(f"--agent {agent}: expected one of {', '.join(AGENTS)}")
    env = dict(os.environ if environ is None else environ)
    since_iso = parse_since(since)
    if sources is None:
        sources = (path_sources(store, list(paths), agent) if paths
                   else default_sources(store, (agent,) if agent else AGENTS, env))
    state_path = ScenarioPaths(store.project, store.scenario).dir / STATE_NAME
    with flocked(f"{state_path}.lock"):  # a Stop hook, a wrapper and `reef ingest` may run at once
        return _ingest_locked(store, agent, sources, since_iso, state_path, progress,
                              now or datetime.now(timezone.utc))


def _ingest_locked(store, agent, sources, since_iso, state_path, progress, now: datetime) -> IngestResult:
    from . import failures

    head = store.head()
    # the materialised release's cached config: no YAML or Git on a wrapper's path (tests/test_wrapper.py)
    observe_rules = tuple(store.materialised_config(head)[1].observe_only) if head is not None else ()
    result = IngestResult(sources=len(sources))
    state = _State(state_path)
    ledger = store.ledger()
    writer = _Writer(ledger, result)
    started = time.monotonic()
    clean: set[str] = set()  # read whole, no line skipped: a failure recorded for it earlier is over
    scanned: set[str] = set()  # found in the user's own agent dirs: maybe another project's (failures.py)
    for src in sources:
        for file_agent, path in _files(src):
            if agent is not None and file_agent != agent:
                continue
            key = os.path.abspath(path)
            if src.origin == "user":
                scanned.add(key)
            unchanged = result.files_skipped
            try:
                records, files, sessions = _read_file(src, file_agent, path, state, result, since_iso,
                                                      observe_rules, now - STALE_AFTER)
            except Exception as exc:  # noqa: BLE001 - one file reef cannot read must not stop the others
                why = _unreadable(exc)
                result.errors.append(f"{path}: {why}")
                result.failed[key] = (why, True)
                continue
            if key not in result.failed and result.files_skipped == unchanged:  # not re-read: its entry stands
                clean.add(key)
            writer.add(records, str(path))  # outside the guard: a ledger that fails stops the run, state unsaved
            state.files.update(files)
            state.sessions.update(sessions)
            if progress is not None and result.files_read and result.files_read % 500 == 0:
                progress({"event": "ingest", "files": result.files_read, "turns": result.turns,
                          "seconds": round(time.monotonic() - started, 1)})
    writer.flush()
    state.save()
    failures.update(state_path.parent, {p: v for p, v in result.failed.items() if p not in scanned}, clean,
                    _iso(now))
    return result


def note_failure(store, path: Path, why: str, now: datetime | None = None) -> None:
    """Record that `path` could not be ingested at all for a reason outside any one file (the ledger, the lock, a
    bug): for the hook, whose output nobody sees. See failures.py."""
    from ..project import ScenarioPaths
    from ..sessions import flocked
    from . import failures

    state_path = ScenarioPaths(store.project, store.scenario).dir / STATE_NAME
    with flocked(f"{state_path}.lock"):
        failures.update(state_path.parent, {os.path.abspath(path): (why, True)}, set(),
                        _iso(now or datetime.now(timezone.utc)))


def _unreadable(exc: Exception) -> str:
    """Why a file could not be read: the reason as the OS, SQLite or the decoder gave it, else the exception's type
    too (what the parser met that it did not expect)."""
    if isinstance(exc, (OSError, ValueError)) or type(exc).__module__ == "sqlite3":
        return str(exc)
    return f"could not be read ({type(exc).__name__}: {str(exc)[:200]})"


def _read_file(src: Source, agent: str, path: Path, state: _State, result: IngestResult, since_iso: str | None,
               observe_rules: tuple = (), stale_before: datetime | None = None) -> tuple[list, dict, dict]:
    """The new records of one file, and the state entries (files, sessions) to set once they are queued: nothing
    of a file that fails half-way is marked read."""
    from . import claude, codex, opencode, pi

    fkey = os.path.abspath(path)
    stamp = _stamp(path)
    files: dict[str, str] = {}
    done_sessions: dict[str, list] = {}
    out: list = []
    if agent != "opencode" and state.files.get(fkey) == stamp and src.only is None:
        result.files_skipped += 1
        return out, files, done_sessions
    if agent == "opencode":
        stamps = opencode.session_stamps(path)
        want = {sid for sid, st in stamps.items()
                if (src.only is None or sid in src.only) and state.sessions.get(f"opencode:{sid}", [None])[0] != st}
        sessions = opencode.parse(path, only=want) if want else []
    else:
        problems = Problems()
        sessions = {"claude": claude.parse, "pi": pi.parse, "codex": codex.parse}[agent](path, problems)
        if problems.count:
            result.warnings.append(f"{path}: {problems.summary()}")
            result.failed[os.path.abspath(path)] = (str(problems.summary()), False)
        stamps = {}
    counts = IngestResult()
    roots: dict[str, str] = {}
    complete = True
    # untouched since: a transcript's last write (its mtime), an opencode session's time_updated
    stale_iso = _iso(stale_before) if stale_before is not None else ""
    file_stale = agent != "opencode" and stale_before is not None and path.stat().st_mtime < stale_before.timestamp()
    for s in sessions:
        if src.only is not None and s.session_id not in src.only:
            continue
        if src.within is not None and not _inside(s.cwd, src.within):
            continue
        if since_iso and s.updated and s.updated < since_iso:
            complete = False  # not marked read: a later ingest without --since still takes it
            continue
        skey = f"{agent}:{s.session_id}"
        start = int((state.sessions.get(skey) or [None, 0])[1])
        stale = file_stale or (agent == "opencode" and bool(s.updated) and s.updated < stale_iso)
        copies = _claude_copies(s, state) if agent == "claude" and s.turns else None
        records, done = session_records(s, start, src, counts, observe_rules, stale, copies)
        if agent == "claude" and s.turns:
            roots[s.turns[0].key] = s.session_id
        if records:
            counts.sessions += 1
            out.extend(records)
        done_sessions[skey] = [stamps.get(s.session_id, stamp), done]
        if done < len(s.turns):
            complete = False
    if complete and agent != "opencode":
        files[fkey] = stamp
    for root, sid in roots.items():  # known at once: a later file of this run may be a copy of this one
        state.claude_roots.setdefault(root, {}).setdefault(sid, fkey)
    result.files_read += 1
    for name in ("sessions", "turns", "corrections", "acceptances", "held", "unfinished"):
        setattr(result, name, getattr(result, name) + getattr(counts, name))
    return out, files, done_sessions


def _claude_copies(session: Session, state: _State) -> dict[str, str]:
    """The turns of a Claude session that are copies of turns already recorded under another session: key → that
    session's id. `claude --resume SID --fork-session` (and, in some versions, plain --resume) writes a new
    session file that starts with the old session's history, every line with the new sessionId but the same
    uuid; keyed by session, each copied turn would be recorded twice. A copy starts with the same first prompt,
    so only sessions sharing it are read again (rare: a fork)."""
    from . import claude

    out: dict[str, str] = {}
    for sid, path in state.claude_roots.get(session.turns[0].key, {}).items():  # in the order they were recorded
        if sid == session.session_id:
            continue
        done = int((state.sessions.get(f"claude:{sid}") or [None, 0])[1])
        try:
            others = claude.parse(Path(path))
        except OSError:
            continue
        for other in others:
            if other.session_id == sid:
                for t in other.turns[:done]:
                    out.setdefault(t.key, sid)
    return out


# ------------------------------------------------------------------------------------------------ after a wrapper run


def _session_id(adapter: str, reported: dict) -> str | None:
    """The agent's session id from what the wrapper captured of its output (descriptor.json `capture`)."""
    for name, key in (("init", "session_id"), ("result", "session_id"), ("session", "id"), ("session", "sessionID"),
                      ("thread", "thread_id")):
        v = (reported.get(name) or {}).get(key) if isinstance(reported.get(name), dict) else None
        if isinstance(v, str) and v:
            return v
    return None


def wrapper_sources(adapter: str, agent_dir: Path, reported: dict, release_id: str | None, content_id: str | None,
                    cwd: Path, environ: dict) -> list[Source]:
    """What a `reef-<agent>` run wrote: its own session when the agent named it, else the install's whole config
    dir (every session there is this scenario's; unchanged files are skipped by the state file)."""
    sid = _session_id(adapter, reported)
    only = frozenset({sid}) if sid else None
    if adapter == "opencode":  # its sessions are in the user's data dir, shared with plain `opencode` runs
        return [Source("opencode", user_dir("opencode", environ), "wrapper", release_id, content_id,
                       within=None if sid else os.path.realpath(cwd), only=only)]
    if sid:
        pattern = {"claude": f"projects/*/{sid}.jsonl", "pi": f"sessions/*/*_{sid}.jsonl",
                   "codex": f"sessions/**/rollout-*{sid}.jsonl"}.get(adapter)
        found = sorted(agent_dir.glob(pattern)) if pattern else []
        if found:
            return [Source(adapter, f, "wrapper", release_id, content_id, only=only) for f in found]
    return [Source(adapter, agent_dir, "wrapper", release_id, content_id)]
