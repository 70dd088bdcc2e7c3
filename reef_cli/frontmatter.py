"""YAML frontmatter of skills and agent files (`---` fenced at the top of a Markdown file)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Frontmatter:
    meta: dict | None  # None when absent or broken
    body: str
    error: str | None = None  # why the frontmatter could not be read, if it is present but broken


def parse(text: str) -> Frontmatter:
    if not text.startswith("---"):
        return Frontmatter(None, text, None)
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return Frontmatter(None, text, None)
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            head = "\n".join(lines[1:i])
            body = "\n".join(lines[i + 1 :])
            break
    else:
        return Frontmatter(None, text, "frontmatter has no closing '---'")
    from ruamel.yaml import YAML, YAMLError

    try:
        meta = YAML(typ="safe", pure=True).load(head)
    except YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        return Frontmatter(None, body, f"invalid YAML in frontmatter{where}: {problem}")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return Frontmatter(None, body, "frontmatter is not a mapping")
    return Frontmatter(meta, body, None)
