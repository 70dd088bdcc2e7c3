"""Links into the measuring stick: `.claude/skills/answers -> ../../canary` changes no canary file, yet compile would
copy the held-out tasks (prompts and checks) into the agent's skills, and an agent in the checkout reads them
through it. `stick_links` finds every link (chains, and links in a path's directories, followed) that lands on,
inside or above the canary suite or the evaluators; compile, publish, ci and eval refuse them (exit 4).

Kept apart from edits.py (ci's policy) so that compile and validate, which the gate itself imports, can use it.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Mapping

STICK_DIRS = {"canary": "the canary suite", "evaluators": "the evaluators"}  # reef's own, whatever the globs say
MAX_HOPS = 40  # links followed in one resolution (the kernel's own limit): a loop lands nowhere


@dataclass(frozen=True)
class StickLink:
    path: str  # the link
    target: str  # as written
    lands: str  # the path it resolves to inside the harness ("" = its root)
    what: str  # the canary suite | the evaluators

    def sentence(self) -> str:
        from .printable import printable

        where = f"'{self.lands}'" if self.lands else "the harness root"
        return printable(f"{self.path} is a link to '{self.target}', which reaches {self.what} ({where}); the agent "
                         "would read the held-out measuring stick through it — remove the link")


def _stick(configs) -> tuple[dict, dict]:
    """(directory -> what, what -> matcher) of the measuring stick under `configs` (reef's own directories too)."""
    from .zones import glob_matcher

    globs = {"the canary suite": [], "the evaluators": []}
    for config in configs:
        if config is not None:
            globs["the canary suite"] += list(config.gate.tasks)
            globs["the evaluators"] += list(config.gate.evaluators)
    dirs = dict(STICK_DIRS)
    for what, patterns in globs.items():
        for pattern in patterns:
            if (top := _literal_dir(pattern)):
                dirs.setdefault(top, what)
    return dirs, {what: glob_matcher(tuple(patterns)) for what, patterns in globs.items()}


def agent_view(files: Mapping, configs=()) -> dict:
    """`files` without the measuring stick: the harness a canary episode's agent is given ($REEF_HARNESS_DIR). The
    gate reads its tasks and checks from the whole baseline tree; the agent under test must not find its exam (the
    prompts' checks, the evaluators) one `ls` away in the harness it is told to follow."""
    dirs, matchers = _stick(configs)

    def stick(path: str) -> bool:
        return (any(path == d or path.startswith(d + "/") for d in dirs)
                or any(m(path) for m in matchers.values()))

    return {path: entry for path, entry in files.items() if not stick(path)}


def stick_links(files: Mapping, configs=(), *, root=None) -> list[StickLink]:
    """Every link in `files` that lands on, inside or above the canary tasks or the evaluators (the globs of each of
    `configs`, and reef's canary/ and evaluators/ directories whatever they say). A link's target is resolved as
    compile copies it (against `files`, links in any directory on the way followed); with `root` (a checkout on
    disk) also as the filesystem resolves it there, an absolute target included."""
    from .gitstore import MODE_LINK

    links = sorted(p for p, e in files.items() if getattr(e, "mode", None) == MODE_LINK)
    if not links:
        return []
    dirs, matchers = _stick(configs)
    stick_files = {p: what for p in files for what, m in matchers.items() if m(p)}

    def reaches(lands: str) -> str | None:
        if lands in stick_files:
            return stick_files[lands]
        for d, what in dirs.items():
            if lands == d or lands.startswith(d + "/") or d.startswith(lands + "/") or lands == "":
                return what
        return next((what for p, what in stick_files.items() if p.startswith(lands + "/") or lands == ""), None)

    out = []
    for link in links:
        target = os.fsdecode(files[link].data)
        landings = [resolve(files, link)]
        if root is not None:
            landings.append(_on_disk(root, link))
        for lands in landings:
            what = None if lands is None else reaches(lands)
            if what is not None:
                out.append(StickLink(link, target, lands, what))
                break
    return out


def refuse_stick_links(files: Mapping, configs=(), *, root=None, done: str) -> None:
    """PolicyError (exit 4), one line naming the first such link and where it points (and how many more)."""
    found = stick_links(files, configs, root=root)
    if found:
        from .errors import PolicyError

        more = f" (and {len(found) - 1} more: {', '.join(s.path for s in found[1:4])}" \
               f"{'...' if len(found) > 4 else ''})" if len(found) > 1 else ""
        raise PolicyError(f"{found[0].sentence()}{more}; {done}")


def resolve(files: Mapping, link: str, hops: int = 0) -> str | None:
    """Where the link at `link` lands inside `files`, or None when it leaves the harness, is absolute or loops."""
    target = os.fsdecode(files[link].data)
    if target.startswith("/") or hops > MAX_HOPS:
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
    if joined == ".." or joined.startswith("../"):
        return None
    return _follow(files, "" if joined == "." else joined, hops + 1)


def _follow(files: Mapping, rel: str, hops: int) -> str | None:
    """`rel` with any link among its leading components replaced by where that link lands."""
    from .gitstore import MODE_LINK

    parts = rel.split("/") if rel else []
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        entry = files.get(prefix)
        if entry is not None and getattr(entry, "mode", None) == MODE_LINK:
            landed = resolve(files, prefix, hops)
            if landed is None:
                return None
            rest = "/".join(parts[i:])
            joined = posixpath.normpath(posixpath.join(landed, rest)) if rest else landed
            return _follow(files, "" if joined == "." else joined, hops + 1)
    return rel


def _on_disk(root, link: str) -> str | None:
    real_root = os.path.realpath(root)
    lands = os.path.realpath(os.path.join(root, link))
    if lands == real_root:
        return ""
    if not lands.startswith(real_root + os.sep):
        return None
    return os.path.relpath(lands, real_root).replace(os.sep, "/")


def _literal_dir(pattern: str) -> str:
    """The directory a glob's matches live under, its leading components free of wildcards ('canary/*.yaml' ->
    'canary'; a plain path -> its directory); '' when the glob floats from the root."""
    parts = [p for p in pattern.strip("/").split("/") if p not in ("", ".")]
    lead = []
    for part in parts:
        if any(c in part for c in "*?[\\"):
            break
        lead.append(part)
    if len(lead) == len(parts):
        lead = lead[:-1]
    return "/".join(lead)
