"""Creating a reef project: from a starter template, or by adopting a harness as found in a real repository."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .config import CONFIG_NAME, DEFAULT_RECIPE, load_config, parse_config
from .errors import ConflictError, InvalidInput, NotFound
from .gitstore import Entry, mode_of
from .project import PROJECT_FILE, Project, check_scenario_name, shipped
from .harness_files import collect_files, write_files
from .store import HarnessStore, PublishResult

TEMPLATES_DIR = shipped("harness_templates")

# Where agents keep their harness; everything under these directories is adopted byte-for-byte, understood or not.
HARNESS_DIRS = (".claude", ".agents", ".opencode", ".pi", ".codex", ".cursor", ".gemini",
                ".claude-plugin", ".codex-plugin", ".cursor-plugin")
INSTRUCTION_FILES = ("CLAUDE.md", "CLAUDE.local.md", "AGENTS.md", "AGENTS.override.md", "GEMINI.md")
ROOT_FILES = ("gemini-extension.json", ".mcp.json")
PRUNE = {".git", ".reef", "node_modules", ".venv", "venv", "__pycache__", "dist", "build", ".next", "target"}


@dataclass(frozen=True)
class InitResult:
    project: Project
    scenario: str
    recipe: str
    publish: PublishResult
    created_project: bool
    source: str  # template:<name> | import:<path> | existing
    warnings: tuple[str, ...] = field(default_factory=tuple)


def templates() -> list[str]:
    return sorted(p.name for p in TEMPLATES_DIR.iterdir() if (p / CONFIG_NAME).is_file())


def template_files(name: str) -> dict[str, Entry]:
    base = TEMPLATES_DIR / name
    if not (base / CONFIG_NAME).is_file():
        raise NotFound(f"no harness template '{name}' (available: {', '.join(templates())})")
    return collect_files(base, ("**",))


def discover(src: Path) -> tuple[dict[str, Entry], list[str]]:
    """Harness files of a repository: instruction files at any depth, agent dot-directories, skill directories."""
    src = Path(src)
    if not src.is_dir():
        raise InvalidInput(f"--import {src}: not a directory")
    picked: dict[str, Entry] = {}
    warnings: list[str] = []
    skill_dirs: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if d not in PRUNE)
        if "SKILL.md" in filenames:
            skill_dirs.add(rel_dir)
        for name in filenames:
            rel = rel_dir + name
            parts = rel.split("/")
            in_harness_dir = any(p in HARNESS_DIRS for p in parts[:-1])
            in_skill = any(rel.startswith(d) for d in skill_dirs) or "skills" in parts[:-1]
            root_hooks = parts[0] == "hooks" and len(parts) > 1
            if name in INSTRUCTION_FILES or in_harness_dir or in_skill or root_hooks or (rel in ROOT_FILES):
                path = Path(dirpath) / name
                if path.is_symlink():
                    warnings.append(f"{rel}: symlink not imported (reef imports file contents only)")
                    continue
                if not path.is_file():
                    continue
                picked[rel] = Entry(path.read_bytes(), mode_of(path.stat().st_mode))
    from .frontmatter import parse

    for rel, entry in picked.items():
        if rel.endswith("SKILL.md"):
            try:
                fm = parse(entry.data.decode("utf-8"))
            except UnicodeDecodeError:
                warnings.append(f"{rel}: not UTF-8; kept as-is")
                continue
            if fm.error:
                warnings.append(f"{rel}: {fm.error}; kept as-is")
            elif fm.meta is None:
                warnings.append(f"{rel}: no frontmatter (name/description); kept as-is")
            elif not fm.meta.get("description"):
                warnings.append(f"{rel}: frontmatter has no 'description'; kept as-is")
    return picked, warnings


def _glob_for(rel: str) -> str:
    parts = rel.split("/")
    for i, p in enumerate(parts[:-1]):
        if p in HARNESS_DIRS or p in ("skills", "hooks"):
            return "/".join(parts[: i + 1]) + "/**"
    return rel


def _yaml_list(key: str, items: list[str]) -> list[str]:
    if not items:
        return [f"{key}: []"]
    return [f"{key}:", *[f"  {key[: len(key) - len(key.lstrip())]}- {json.dumps(g)}" for g in items]]


def config_for_import(files: dict[str, Entry]) -> str:
    """A harness.yaml for an adopted tree: instructions managed, skills/agents evolvable, settings/hooks frozen."""
    include = sorted({_glob_for(rel) for rel in files} | {"reef/**", "canary/**", "evaluators/**"})
    instr = sorted(rel for rel in files if rel.rsplit("/", 1)[-1] in ("CLAUDE.md", "AGENTS.md"))
    has_claude = any(rel.split("/")[0] == ".claude" or rel == "CLAUDE.md" for rel in files)
    block = "CLAUDE.md" if "CLAUDE.md" in files or (has_claude and "AGENTS.md" not in files) else "AGENTS.md"
    notes = "CLAUDE.local.md" if block == "CLAUDE.md" else "reef/notes.md"
    if notes == "CLAUDE.local.md":
        include.append("CLAUDE.local.md")
    skill_root = ".claude/skills" if block == "CLAUDE.md" else ".agents/skills"
    evolvable = sorted({g for g in include if g.endswith("skills/**") or g.endswith("agents/**") and "/." not in g}
                       | {f"{skill_root}/**"})
    frozen = sorted({g for g in include if g.endswith("hooks/**") or g.endswith("rules/**") or g.endswith("commands/**")
                     or g.split("/")[-2:-1] and g.split("/")[-2] in (".claude-plugin", ".codex-plugin", ".cursor-plugin")}
                    | {rel for rel in files if rel.endswith("settings.json") or rel.endswith("settings.local.json")})
    lines = [
        "# reef harness configuration, generated by `reef init --import`. This file is Frozen.",
        "# Change zones only with `reef harness freeze PATH` / `reef harness unfreeze PATH`.",
        "version: 1",
        f"recipe: {DEFAULT_RECIPE}",
        "include:",
        *[f"  - {json.dumps(g)}" for g in sorted(set(include))],
        "zones:",
        *_yaml_list("  frozen", frozen),
        *_yaml_list("  evolvable", evolvable),
        *_yaml_list("  managed", instr or [block]),
        "  learned:",
        f"    - {json.dumps(notes)}",
        "    - reef/**",
        "surfaces:",
        "  memory: reef/memory/patterns.json",
        f"  notes: {notes}",
        f"  block: {block}",
        f"  skill: {skill_root}/{{slug}}/SKILL.md",
        "gate:",
        "  tasks: [canary/*.yaml]",
        "  evaluators: [evaluators/**]",
        "",
    ]
    text = "\n".join(lines)
    parse_config(text, source="generated harness.yaml")
    return text


def _place(root: Path, files: dict[str, Entry]) -> list[str]:
    """Copy files into the working tree; never overwrite a different existing file."""
    clashes = []
    to_write = {}
    for rel, entry in files.items():
        path = root / rel
        if path.is_symlink():
            clashes.append(rel)
        elif path.exists():
            if path.read_bytes() != entry.data:
                clashes.append(rel)
        else:
            to_write[rel] = entry
    if clashes:
        raise ConflictError(
            f"{root / clashes[0]} already exists with other content"
            + (f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else "")
            + "; reef init never overwrites your files — move it away or use --import ."
        )
    write_files(root, to_write)
    return sorted(to_write)


def init_project(
    root: Path,
    *,
    template: str | None = None,
    import_path: Path | None = None,
    scenario: str | None = None,
    recipe: str | None = None,
) -> InitResult:
    if template and import_path:
        raise InvalidInput("--template and --import are mutually exclusive")
    from .recipes import load as load_recipe

    if recipe is not None and load_recipe(recipe).kind == "weights":  # refuse before anything is written
        raise InvalidInput(f"recipe '{recipe}' trains model weights, not a harness; its scenario is created by "
                           f"'reef -s NAME train --recipe {recipe} --engine URL --init'")
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise InvalidInput(f"{root}: not a directory")
    project = Project(root)
    created_project = not (project.state / PROJECT_FILE).is_file()
    scenario = check_scenario_name(scenario or (project.default_scenario() if not created_project else "default"))
    warnings: list[str] = []
    source = "existing"
    if (root / CONFIG_NAME).exists():
        if template or import_path:
            raise ConflictError(
                f"{root / CONFIG_NAME} already exists; this directory already has a harness — drop --template/--import"
            )
    elif import_path is not None:
        files, warnings = discover(import_path)
        if not files:
            raise InvalidInput(f"--import {import_path}: no harness files found (CLAUDE.md, AGENTS.md, .claude/, skills/)")
        files[CONFIG_NAME] = Entry(config_for_import(files).encode())
        same = os.path.realpath(import_path) == os.path.realpath(root)
        _place(root, {CONFIG_NAME: files[CONFIG_NAME]} if same else files)
        source = f"import:{import_path}"
    else:
        name = template or "claude"
        _place(root, template_files(name))
        source = f"template:{name}"
    config = load_config(root / CONFIG_NAME)
    recipe = recipe or config.recipe
    load_recipe(recipe)
    if created_project:
        project.create_state(scenario)
    else:
        project.secure_state()
    store = HarnessStore(project, scenario)
    store.create(recipe)
    head = store.head()
    store.check_integrity(head)  # "Already initialised" only over a chain that lost nothing
    if head is not None:
        return InitResult(project, scenario, recipe, PublishResult(head, False, ()), created_project, source,
                          tuple(warnings))
    result = store.publish(reason=f"init from {source}", operation="init", expected_head=None)
    # The first `reef run` would otherwise materialise the release itself and pay pygit2's import (~100 ms) on the
    # path agents wait on; init has the store open already. The copy is the same content-addressed, read-only
    # cache any run builds (written to a temporary name, then renamed), so writing it here changes nothing else.
    store.materialised_config(result.release)
    return InitResult(project, scenario, recipe, result, created_project, source, tuple(warnings))
