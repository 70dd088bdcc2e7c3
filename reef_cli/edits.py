"""What a human's change to the harness touches, for `reef ci`: the measuring stick, or the human's own rules.

Frozen means "never changed automatically", not "never changed by a human in review". A pull request that edits
CLAUDE.md outside reef's block, a rule file or a skill is a harness change like any other and is gated (paired
against the head). Only a change to what does the judging — the canary tasks, the evaluators, and the `gate` and
`zones` sections of harness.yaml — cannot be vouched for by the gate it changes; `reef ci` refuses it (exit 4)
unless `--suite-change` asks for both sides to be evaluated on the new suite (`suite_baseline`).

A link is the other way to touch the stick: `.claude/skills/answers -> ../../canary` changes no canary file, yet
compile copies the held-out tasks into the agent's skills and an agent in the checkout reads them through it.
`stick_links` finds every link (chains and links in a path's directories followed) that lands on, inside or above
the canary suite or the evaluators; compile, publish and ci refuse them whatever `--suite-change` says.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Mapping

from .config import CONFIG_NAME

STICK_SECTIONS = ("gate", "zones")
STICK_DIRS = {"canary": "the canary suite", "evaluators": "the evaluators"}  # reef's own, whatever the globs say
MAX_HOPS = 40  # links followed in one resolution (the kernel's own limit): a loop lands nowhere


@dataclass(frozen=True)
class StickChange:
    path: str
    change: str  # added | modified | deleted
    what: str  # canary task | evaluator | harness.yaml gate | harness.yaml zones

    def to_json(self) -> dict:
        return {"path": self.path, "change": self.change, "what": self.what}

    @property
    def reason(self) -> str:
        return f"{self.what} {self.change}"


def _yaml(data: bytes | None) -> dict:
    if data is None:
        return {}
    from ruamel.yaml import YAML

    try:
        doc = YAML(typ="safe").load(data)
    except Exception:  # noqa: BLE001 - an unparsable harness.yaml is reported by the config parser
        return {}
    return doc if isinstance(doc, dict) else {}


def _globs(config) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(config.gate.tasks), tuple(config.gate.evaluators)


def stick_changes(base: Mapping, cand: Mapping, base_config, cand_config) -> list[StickChange]:
    """Changes to the measuring stick, judged by the globs of both sides (moving tasks out of the glob counts)."""
    from .zones import glob_matcher

    tasks = glob_matcher(_globs(base_config)[0] + _globs(cand_config)[0])
    evaluators = glob_matcher(_globs(base_config)[1] + _globs(cand_config)[1])
    out: list[StickChange] = []
    for rel in sorted(set(base) | set(cand)):
        a, b = base.get(rel), cand.get(rel)
        if a == b:
            continue
        change = "deleted" if b is None else "added" if a is None else "modified"
        if rel == CONFIG_NAME:
            old, new = _yaml(a.data if a else None), _yaml(b.data if b else None)
            for section in STICK_SECTIONS:
                if old.get(section) != new.get(section):
                    out.append(StickChange(rel, change, f"harness.yaml {section}"))
        elif tasks(rel):
            out.append(StickChange(rel, change, "canary task"))
        elif evaluators(rel):
            out.append(StickChange(rel, change, "evaluator"))
    return out


def suite_baseline(base: Mapping, cand: Mapping, base_config, cand_config) -> dict:
    """The baseline judged on the new suite (`--suite-change`): the base harness with the candidate's canary tasks,
    evaluators and harness.yaml `gate`/`zones` sections — everything else, the human's rules included, stays the
    base's, so the comparison still measures the rest of the change."""
    from .gitstore import Entry
    from .zones import glob_matcher

    stick = glob_matcher(_globs(base_config)[0] + _globs(base_config)[1] + _globs(cand_config)[0]
                         + _globs(cand_config)[1])
    out = {rel: e for rel, e in base.items() if not stick(rel) or rel == CONFIG_NAME}
    out.update({rel: e for rel, e in cand.items() if stick(rel) and rel != CONFIG_NAME})
    if CONFIG_NAME in base and CONFIG_NAME in cand and base[CONFIG_NAME] != cand[CONFIG_NAME]:
        out[CONFIG_NAME] = Entry(_with_sections(base[CONFIG_NAME].data, cand[CONFIG_NAME].data),
                                 base[CONFIG_NAME].mode)
    return dict(sorted(out.items()))


def _with_sections(base_yaml: bytes, cand_yaml: bytes) -> bytes:
    """The base harness.yaml with the candidate's stick sections (comments and order kept by round-tripping)."""
    import io

    from ruamel.yaml import YAML

    rt = YAML()
    rt.preserve_quotes = True
    doc = rt.load(base_yaml)
    new = rt.load(cand_yaml)
    for section in STICK_SECTIONS:
        if section in new:
            doc[section] = new[section]
        elif section in doc:
            del doc[section]
    buf = io.StringIO()
    rt.dump(doc, buf)
    return buf.getvalue().encode("utf-8")


def ci_policy(base_files: Mapping, files: Mapping, base_config, *, suite_change: bool, root=None):
    """What `reef ci` does with a change: (violations that block it, the baseline files to judge it against —
    None for the usual baseline —, the measuring-stick changes). Without `suite_change` any stick change blocks
    (exit 4); with it, both sides are judged on the new suite. A link into the stick (`stick_links`; `root`: the
    checkout the files were read from) blocks either way: no suite makes reading its own tasks fair."""
    from .config import parse_config
    from .gate import Violation

    cand_config = base_config
    if CONFIG_NAME in files and files.get(CONFIG_NAME) != base_files.get(CONFIG_NAME):
        cand_config = parse_config(files[CONFIG_NAME].data, source=f"{CONFIG_NAME} (the change)", validate=False)
    stick = stick_changes(base_files, files, base_config, cand_config)
    links = stick_links(files, (base_config, cand_config), root=root)
    if links:
        return [Violation(s.path, "link", "measuring stick", s.sentence()) for s in links], None, stick
    if not stick:
        return [], None, []
    if not suite_change:
        return [Violation(s.path, s.change, "measuring stick",
                          f"{s.what}: the gate cannot vouch for a change to its own tasks; pass --suite-change to "
                          "judge both sides on the new suite") for s in stick], None, stick
    return [], suite_baseline(base_files, files, base_config, cand_config), stick


# -- links into the measuring stick ----------------------------------------------------------------------------------
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


def stick_links(files: Mapping, configs=(), *, root=None) -> list[StickLink]:
    """Every link in `files` that lands on, inside or above the canary tasks or the evaluators (the globs of each of
    `configs`, and reef's canary/ and evaluators/ directories whatever they say). A link's target is resolved as
    compile copies it (against `files`, links in any directory on the way followed); with `root` (a checkout on
    disk) also as the filesystem resolves it there, an absolute target included."""
    from .gitstore import MODE_LINK
    from .zones import glob_matcher

    links = sorted(p for p, e in files.items() if getattr(e, "mode", None) == MODE_LINK)
    if not links:
        return []
    globs = {"the canary suite": [], "the evaluators": []}
    for config in configs:
        if config is not None:
            globs["the canary suite"] += list(config.gate.tasks)
            globs["the evaluators"] += list(config.gate.evaluators)
    dirs = dict((d, w) for d, w in STICK_DIRS.items())
    for what, patterns in globs.items():
        for pattern in patterns:
            if (top := _literal_dir(pattern)):
                dirs.setdefault(top, what)
    matchers = {what: glob_matcher(tuple(patterns)) for what, patterns in globs.items()}
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
