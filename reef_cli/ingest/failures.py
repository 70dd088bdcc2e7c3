"""`<scenario>/ingest-failed.json`: the transcripts reef could not learn from, whole or in part, so that paths whose
output nobody reads (Claude Code's hook, a wrapper run in another terminal) still reach the user: `reef status`
and `reef doctor` show them until they clear.

An entry is per file: why (the error that stopped the file, or the summary of the lines skipped in it), whether the
whole file failed, and when it was first and last seen. Ingest keeps it under its own lock (reef_cli/ingest): a file
read whole and clean drops its entry, a file that is gone drops its entry, a file that fails again keeps its first
`since`. Files found by scanning the user's own agent dirs (`reef ingest` with no PATH) are not recorded: they may
belong to other projects, and that command prints its errors itself. The file is small (at most KEEP entries) and
written atomically and only when it changes, so `reef status` reads it for free.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

NAME = "ingest-failed.json"
KEEP = 100
LIMIT = 4 << 20  # bytes read of the file: KEEP entries of a path and a short reason fit many times over


@dataclass(frozen=True)
class Failure:
    path: str
    why: str
    whole: bool  # the file was not ingested at all (else lines of it were skipped)
    since: str  # first seen, ISO-8601 UTC
    at: str  # last seen

    def to_json(self) -> dict:
        return {"path": self.path, "why": self.why, "whole": self.whole, "since": self.since, "at": self.at}


def load(scenario_dir: Path) -> list[Failure]:
    """The recorded failures, newest first; none when the file is absent or unreadable (this is a notice, never a
    reason for a command to fail)."""
    from ..durable import read_state

    try:  # read_state: never waiting on a FIFO (read_nofollow's open did, hanging `reef status`), never read whole
        data = json.loads(read_state(scenario_dir / NAME, LIMIT) or b"{}")
        out = [Failure(str(p), str(e["why"]), bool(e.get("whole")), str(e["since"]), str(e["at"]))
               for p, e in dict(data.get("files") or {}).items()]
    except Exception:  # noqa: BLE001 - damaged or misplaced: doctor's state checks name such files
        return []
    return sorted(out, key=lambda f: (f.at, f.path), reverse=True)


def update(scenario_dir: Path, failed: dict[str, tuple[str, bool]], clean: set[str], now: str) -> None:
    """Record `failed` (path -> (why, whole)) and drop `clean` paths and paths that no longer exist. The caller
    holds the ingest lock."""
    from ..durable import STATE_FILE_MODE, write_atomic

    before = {f.path: f for f in load(scenario_dir)}
    after = {p: f for p, f in before.items() if p not in clean and p not in failed and os.path.lexists(p)}
    for path, (why, whole) in failed.items():
        old = before.get(path)
        after[path] = Failure(path, why, whole, old.since if old else now, now)
    if after == before:
        return
    kept = sorted(after.values(), key=lambda f: (f.at, f.path), reverse=True)[:KEEP]
    doc = {"version": 1, "files": {f.path: {k: v for k, v in f.to_json().items() if k != "path"} for f in kept}}
    write_atomic(scenario_dir / NAME, json.dumps(doc, sort_keys=True).encode() + b"\n", STATE_FILE_MODE)


def summary(failures: list[Failure]) -> str | None:
    """One line for `reef status` / `reef doctor`, control characters escaped; None when there is nothing."""
    from ..printable import printable

    if not failures:
        return None
    since = min(f.since for f in failures)
    latest = failures[0]
    return (f"{len(failures)} transcript(s) not fully ingested since {since[:16].replace('T', ' ')} UTC "
            f"(latest: {printable(latest.path)}: {printable(latest.why)})")


def notice(failed: dict[str, tuple[str, bool]]) -> str | None:
    """The one short line a wrapper prints after its run when its transcripts did not ingest whole, control
    characters escaped: "ingest skipped 1 transcript(s) (PATH: why; and 1 more)"; None when they did."""
    from ..printable import printable

    if not failed:
        return None
    whole = sorted(p for p, (_, w) in failed.items() if w)
    partial = sorted(p for p, (_, w) in failed.items() if not w)
    what = " and ".join(([f"skipped {len(whole)} transcript(s)"] if whole else [])
                        + ([f"read {len(partial)} transcript(s) only in part"] if partial else []))
    first = (whole or partial)[0]
    more = f"; and {len(failed) - 1} more" if len(failed) > 1 else ""
    return f"ingest {what} ({printable(first)}: {printable(failed[first][0])}{more})"
