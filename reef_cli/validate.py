"""What a release must hold to be usable, checked at publish: a release that breaks every later command (the gate
cannot load its canary suite, the compiler cannot read a skill) is refused with one line naming the file, instead
of being published and discovered later.

Checked: every canary/held-out task file under harness.yaml `gate.tasks` parses against the task schema (so each
task has its `check`, and ids are unique), and the YAML frontmatter of every SKILL.md and agent file, where present,
is a readable mapping, and pattern memory (harness.yaml `surfaces.memory`) has the shape of
schemas/patterns.schema.json.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import InvalidInput


def _is_frontmatter_file(path: str) -> bool:
    """Only the files the compiler reads as skills or agents: a SKILL.md elsewhere (a monorepo's test fixture of
    broken skills, say) breaks nothing, and refusing it would make such a repository impossible to import."""
    from .compile import AGENT_DIRS, SKILL_ROOTS

    name = path.rsplit("/", 1)[-1]
    if name == "SKILL.md":
        return any(path.startswith(root + "/") for root in SKILL_ROOTS)
    return path.endswith(".md") and any(path.startswith(f"{d}/agents/") for d in (*AGENT_DIRS, ".agents"))


def check_release(files: Mapping[str, Any], config) -> None:
    """Raise InvalidInput naming the first file that would break later commands; return None when usable."""
    from .frontmatter import parse
    from .tasks import load_suite

    for path in sorted(files):
        if not _is_frontmatter_file(path):
            continue
        data = getattr(files[path], "data", files[path])
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else str(data)
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start}); nothing was published") from None
        fm = parse(text)
        if fm.error is not None:
            raise InvalidInput(f"{path}: {fm.error}; nothing was published")
    try:
        load_suite(files, config.gate.tasks)
    except InvalidInput as exc:
        raise InvalidInput(f"{exc}; nothing was published") from None
    _check_memory(files, config)
    from .stick_links import refuse_stick_links

    refuse_stick_links(files, (config,), done="nothing was published")  # a link handing the agent its exam


def _learned(config, path: str) -> bool:
    """`surfaces.memory` names a Learned path (a learned glob, no stricter one). Pointed anywhere else (harness.yaml,
    a human's file) it is a configuration mistake that reflect refuses by the zone guard before writing anything;
    that file is then not pattern memory, and its shape is none of this check's business."""
    from .zones import glob_match

    zones = config.zone_map()
    stricter = zones.frozen + zones.always_frozen + zones.managed + zones.evolvable
    return any(glob_match(g, path) for g in zones.learned) and not any(glob_match(g, path) for g in stricter)


def _check_memory(files: Mapping[str, Any], config) -> None:
    """Pattern memory is read by every harness command of everyone who pulls the release: its shape is checked
    here so a malformed copy never travels."""
    from .patterns import PatternMemory

    path = (getattr(config, "surfaces", None) or {}).get("memory")
    if not path or path not in files or not _learned(config, path):
        return
    data = getattr(files[path], "data", files[path])
    try:
        PatternMemory.loads(data, path)
    except InvalidInput as exc:
        raise InvalidInput(f"{exc}; nothing was published") from None
