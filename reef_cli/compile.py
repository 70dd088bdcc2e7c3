"""One harness, compiled for each agent: a release's files -> the files a given agent reads, in its own layout.

The canonical harness may be written for any agent (CLAUDE.md or AGENTS.md; skills under .claude/skills,
.agents/skills, skills/ or reef's skill surface; rules under .claude/rules or .agents/rules; notes). Each agent then
gets what it actually reads:
- one instruction file, chosen by the agent's own precedence (Claude Code reads only CLAUDE.md; opencode, pi and
  Codex prefer AGENTS.md and fall back to CLAUDE.md), with reef's notes file appended, and for agents without a rules
  directory the rules appended too, so nothing reef learns is lost on the way;
- every skill directory under the agent's skill directory, checked for the frontmatter the agent needs, and every
  command (Claude's .claude/commands, opencode's .opencode/command, pi's .pi/prompts, Codex's prompts) under the
  agent's command directory; where the same skill or command is kept in several places, the agent's own copy wins;
- nested instruction files (packages/x/AGENTS.md) in the project layout, under the agent's file name;
- Claude's settings, and each agent's own directory (.claude/, .opencode/, .pi/, .codex/), to that agent only.

Two layouts: `project` (as in a repository: CLAUDE.md, .claude/skills/...) and `config` (as in the agent's config
directory that the wrapper points CLAUDE_CONFIG_DIR / OPENCODE_CONFIG_DIR / PI_CODING_AGENT_DIR at: the agent's
own directory prefix dropped). Size caps and frontmatter are checked here, so a harness an agent would truncate or
ignore fails at compile time with a message naming the file.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from .adapters import Adapter
from .config import CONFIG_NAME, HarnessConfig, parse_config
from .errors import InvalidInput
from .gitstore import MODE_LINK, Entry

LAYOUTS = ("project", "config")
INSTRUCTION_FILES = ("CLAUDE.md", "AGENTS.md")
SKILL_ROOTS = (".claude/skills", ".agents/skills", ".opencode/skills", ".opencode/skill", ".pi/skills",
               ".codex/skills", "skills")
RULE_ROOTS = (".claude/rules", ".agents/rules")
COMMAND_ROOTS = (".claude/commands", ".opencode/command", ".opencode/commands", ".pi/prompts", ".codex/prompts")
CLAUDE_SETTINGS = ".claude/settings.json"
REEF_DIRS = (CONFIG_NAME, "reef", "canary", "evaluators")  # reef's own files: never an agent's
AGENT_DIRS = (".claude", ".opencode", ".pi", ".codex")
SKILL_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclass(frozen=True)
class Compiled:
    agent: str
    layout: str
    files: dict[str, Entry]
    sources: dict[str, tuple[str, ...]]  # output path -> the canonical files it was built from
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {"agent": self.agent, "layout": self.layout, "warnings": list(self.warnings),
                "files": {p: {"bytes": len(e.data), "mode": f"{e.mode:o}", "sources": list(self.sources.get(p, ()))}
                          for p, e in self.files.items()}}


def compile_harness(files: dict[str, Entry], adapter: Adapter, *, layout: str = "project") -> Compiled:
    """Compile a canonical harness (a release's files) for one agent; raises InvalidInput listing every problem."""
    if layout not in LAYOUTS:
        raise InvalidInput(f"--layout {layout}: expected one of {', '.join(LAYOUTS)}")
    from .stick_links import refuse_stick_links

    refuse_stick_links(files, (_config(_resolve_links(files)),), done="nothing was compiled")
    files = _resolve_links(files)
    config = _config(files)
    lay = adapter.layout
    out: dict[str, Entry] = {}
    sources: dict[str, tuple[str, ...]] = {}
    warnings: list[str] = []
    problems: list[str] = []
    used: set[str] = {CONFIG_NAME}

    # Instructions: the agent's own precedence, then rules (if it has no rules dir) and notes appended.
    order = list(lay.reads) + [f for f in INSTRUCTION_FILES if f not in lay.reads]  # one harness reaches every agent
    present = [f for f in order if f in files]
    parts: list[tuple[str, bytes]] = []
    if present:
        parts.append((present[0], files[present[0]].data))
        used.add(present[0])
        for other in INSTRUCTION_FILES:
            if other in files and other != present[0]:
                warnings.append(f"{other} is not compiled for {adapter.name}: {adapter.title} reads {present[0]} instead")
                used.add(other)
    rules = _under(files, RULE_ROOTS)
    if lay.rules is None:
        for src, rel in rules:
            parts.append((src, files[src].data))
            used.add(src)
    else:
        for src, rel in rules:
            _put(out, sources, f"{lay.rules}/{rel}", files[src], (src,), problems)
            used.add(src)
    notes = config.surfaces.get("notes") if config else None
    if notes and notes in files and notes not in INSTRUCTION_FILES:
        used.add(notes)
        if files[notes].data.strip():
            parts.append((notes, files[notes].data))
    if parts:
        text = _join(parts, primary=bool(present))
        _put(out, sources, lay.instructions, Entry(text), tuple(src for src, _ in parts), problems)
        _check_instruction_caps(adapter, lay.instructions, text, sources[lay.instructions], problems)
    else:
        warnings.append(f"no instruction file ({' or '.join(order)}) in the harness; {adapter.title} gets none")

    # Skills: every <root>/<name>/... directory by name; commands: every <root>/<path>.md by path.
    roots = list(SKILL_ROOTS)
    surface = (config.surfaces.get("skill") if config else None) or ""
    if "/{slug}/" in surface:
        roots.append(surface.split("/{slug}/")[0])
    skills = _units(files, list(dict.fromkeys(roots)), lay.skills, "skill", used, warnings, problems)
    for name, members in skills.items():
        for inner, src in sorted(members.items()):
            _put(out, sources, f"{lay.skills}/{name}/{inner}", files[src], (src,), problems)
    for path in [p for p in out if p.startswith(lay.skills + "/") and p.endswith("/SKILL.md")]:
        _check_skill(adapter, path, out[path], sources[path][0], problems)
    commands = _units(files, list(COMMAND_ROOTS), lay.commands, "command", used, warnings, problems)
    if lay.commands:
        for name, members in commands.items():
            _put(out, sources, f"{lay.commands}/{name}", files[members[""]], (members[""],), problems)

    # Settings and the agent's own directory (to this agent only; other agents' directories are skipped).
    if CLAUDE_SETTINGS in files:
        used.add(CLAUDE_SETTINGS)
        if lay.settings:
            _check_json(CLAUDE_SETTINGS, files[CLAUDE_SETTINGS].data, problems)
            _put(out, sources, lay.settings, files[CLAUDE_SETTINGS], (CLAUDE_SETTINGS,), problems)
    for src in sorted(files):
        if src in used or "/" not in src:
            continue
        top = src.split("/", 1)[0]
        if top == lay.own_dir:
            _put(out, sources, src, files[src], (src,), problems)
            used.add(src)
        elif top in AGENT_DIRS:
            used.add(src)
    nested = sorted(p for p in files if p not in used and "/" in p and p.rsplit("/", 1)[1] in INSTRUCTION_FILES
                    and not any(d.startswith(".") or d == "skills" for d in p.split("/")[:-1]))  # not a skill's doc
    if nested and layout == "project":
        for directory in sorted({p.rsplit("/", 1)[0] for p in nested}):
            pick = next(f"{directory}/{f}" for f in order if f"{directory}/{f}" in files)
            _put(out, sources, f"{directory}/{lay.instructions}", files[pick], (pick,), problems)
            _check_instruction_caps(adapter, f"{directory}/{lay.instructions}", files[pick].data, (pick,), problems)
        used.update(nested)
    dropped = sorted(p for p in files if p not in used and p != notes and p.split("/", 1)[0] not in REEF_DIRS)
    if dropped:
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        warnings.append(f"{len(dropped)} file(s) not compiled for {adapter.name} ({layout} layout): {shown}")
    for pattern, required in adapter.frontmatter.items():
        if pattern == "skills":
            continue
        from .zones import glob_match

        for path in sorted(out):
            if glob_match(pattern, path) and path.endswith(".md"):
                _check_frontmatter(adapter, path, out[path], sources[path][0], required, problems)

    if problems:
        more = f" ({len(problems) - 1} more: " + "; ".join(problems[1:]) + ")" if len(problems) > 1 else ""
        raise InvalidInput(f"cannot compile the harness for {adapter.name}: {problems[0]}{more}")
    if layout == "config":
        out, sources = _to_config_layout(out, sources, adapter)
    return Compiled(adapter.name, layout, dict(sorted(out.items())), sources, tuple(warnings))


def _config(files: dict[str, Entry]) -> HarnessConfig | None:
    if CONFIG_NAME not in files:
        return None
    return parse_config(files[CONFIG_NAME].data, source=CONFIG_NAME)


def _units(files: dict[str, Entry], roots: list[str], own: str | None, kind: str, used: set[str],
           warnings: list[str], problems: list[str]) -> dict[str, dict[str, str]]:
    """Skills (a directory per name) or commands (a file per path) found under any of `roots`: name -> {inner path ->
    canonical path}. The agent's own copy wins; otherwise copies kept in several places must agree."""
    found: dict[str, dict[str, dict[str, str]]] = {}
    for src, rel in _under(files, tuple(roots)):
        used.add(src)
        if kind == "skill":
            if "/" not in rel:
                warnings.append(f"{src} is not inside a skill directory (<skills>/<name>/SKILL.md); not compiled")
                continue
            name, inner = rel.split("/", 1)
        else:
            name, inner = rel, ""
        found.setdefault(name, {}).setdefault(src[: -len(rel) - 1], {})[inner] = src
    chosen: dict[str, dict[str, str]] = {}
    for name, by_root in sorted(found.items()):
        first, *others = sorted(by_root, key=lambda r: (r != own, roots.index(r)))
        if first != own:
            for other in others:
                if {i: files[p] for i, p in by_root[other].items()} != {i: files[p] for i, p in by_root[first].items()}:
                    where = f"{name}/" if kind == "skill" else name
                    problems.append(f"{other}/{where}: {kind} '{name}' is also in {first}/{where} with other content; "
                                    "keep one")
        chosen[name] = by_root[first]
    return chosen


def _resolve_links(files: dict[str, Entry]) -> dict[str, Entry]:
    """Agents get file contents, never links: an in-tree link (file or directory) becomes a copy of its target."""
    out = {p: e for p, e in files.items() if e.mode != MODE_LINK}
    for path, entry in files.items():
        if entry.mode != MODE_LINK:
            continue
        target = posixpath.normpath(posixpath.join(posixpath.dirname(path), entry.data.decode("utf-8", "replace")))
        if target in out:
            out[path] = out[target]
            continue
        for p, e in files.items():
            if p.startswith(target + "/") and e.mode != MODE_LINK:
                out.setdefault(path + p[len(target):], e)
    return dict(sorted(out.items()))


def _under(files: dict[str, Entry], roots: tuple[str, ...]) -> list[tuple[str, str]]:
    """(path, path below its root) for files under any of `roots`, first matching root wins."""
    out = []
    for path in sorted(files):
        for root in roots:
            if path.startswith(root + "/"):
                out.append((path, path[len(root) + 1:]))
                break
    return out


def _put(out: dict, sources: dict, path: str, entry: Entry, src: tuple[str, ...], problems: list[str]) -> None:
    if path in out and out[path] != entry:
        problems.append(f"{src[0]} and {sources[path][0]} both compile to {path} with different content")
        return
    out[path] = entry
    sources[path] = src


def _join(parts: list[tuple[str, bytes]], *, primary: bool) -> bytes:
    """The primary instruction file verbatim, then each appended file under a marker naming its source."""
    chunks: list[bytes] = []
    for i, (src, data) in enumerate(parts):
        if i == 0 and primary:
            chunks.append(data)
            continue
        if chunks and not chunks[-1].endswith(b"\n"):
            chunks.append(b"\n")
        if chunks:
            chunks.append(b"\n")
        chunks.append(f"<!-- reef: from {src} -->\n".encode())
        chunks.append(data)
    text = b"".join(chunks)
    return text if text.endswith(b"\n") else text + b"\n"


def _check_instruction_caps(adapter: Adapter, path: str, data: bytes, srcs: tuple[str, ...], problems: list[str]) -> None:
    lim = adapter.limits
    why = lim.get("instructions_why") or f"{adapter.title}'s limit"
    made = f"compiled from {', '.join(srcs)}" if len(srcs) > 1 else f"from {srcs[0]}"
    if lim.get("instructions_max_bytes") and len(data) > lim["instructions_max_bytes"]:
        problems.append(f"{path} ({made}) is {len(data):,} bytes, over the {lim['instructions_max_bytes']:,}-byte cap "
                        f"for {adapter.name} ({why}); move detail into skills or shorten it")
    if lim.get("instructions_max_chars"):
        chars = len(data.decode("utf-8", "replace"))
        if chars > lim["instructions_max_chars"]:
            problems.append(f"{path} ({made}) is {chars:,} characters, over the {lim['instructions_max_chars']:,}-"
                            f"character cap for {adapter.name} ({why}); move detail into skills or shorten it")


def _check_frontmatter(adapter: Adapter, path: str, entry: Entry, src: str, required: tuple[str, ...],
                       problems: list[str]) -> dict | None:
    from .frontmatter import parse

    try:
        fm = parse(entry.data.decode("utf-8"))
    except UnicodeDecodeError:
        problems.append(f"{src}: not UTF-8 text")
        return None
    if fm.error:
        problems.append(f"{src}: {fm.error}")
        return None
    if fm.meta is None:
        problems.append(f"{src}: no frontmatter; {adapter.name} needs {', '.join(required)} between '---' lines")
        return None
    missing = [k for k in required if not isinstance(fm.meta.get(k), str) or not fm.meta[k].strip()]
    if missing:
        problems.append(f"{src}: frontmatter has no '{missing[0]}'"
                        + (f" (nor {', '.join(repr(m) for m in missing[1:])})" if len(missing) > 1 else "")
                        + f"; {adapter.name} requires {', '.join(required)}")
        return None
    return fm.meta


def _check_skill(adapter: Adapter, path: str, entry: Entry, src: str, problems: list[str]) -> None:
    meta = _check_frontmatter(adapter, path, entry, src, adapter.frontmatter.get("skills", ()), problems)
    if not meta:
        return
    dir_name = path.rsplit("/", 2)[-2]
    name = meta.get("name")
    if isinstance(name, str):
        max_name = adapter.limits.get("skill_name_max_chars")
        if name != dir_name:
            problems.append(f"{src}: frontmatter name '{name}' differs from its directory '{dir_name}'; "
                            f"{adapter.name} expects them equal")
        elif not set(name) <= SKILL_NAME_CHARS or name.startswith("-") or name.endswith("-") or "--" in name:
            problems.append(f"{src}: skill name '{name}' must be lowercase letters, digits and single hyphens")
        elif max_name and len(name) > max_name:
            problems.append(f"{src}: skill name '{name}' is {len(name)} characters; {adapter.name} allows {max_name}")
    desc = meta.get("description")
    max_desc = adapter.limits.get("skill_description_max_chars")
    if isinstance(desc, str) and max_desc and len(desc) > max_desc:
        problems.append(f"{src}: description is {len(desc):,} characters; {adapter.name} allows {max_desc:,}")


def _check_json(path: str, data: bytes, problems: list[str]) -> None:
    import json

    try:
        json.loads(data)
    except ValueError as exc:
        problems.append(f"{path}: not valid JSON ({exc})")


def _to_config_layout(out: dict[str, Entry], sources: dict, adapter: Adapter) -> tuple[dict, dict]:
    new: dict[str, Entry] = {}
    new_src: dict[str, tuple[str, ...]] = {}
    for path, entry in out.items():
        target = path
        for prefix in adapter.layout.config_strip:
            if path.startswith(prefix):
                target = path[len(prefix):]
                break
        if target in new:
            raise InvalidInput(f"cannot compile the harness for {adapter.name}: {sources[path][0]} and "
                               f"{new_src[target][0]} both land on {target} in its config directory")
        new[target] = entry
        new_src[target] = sources[path]
    return new, new_src
