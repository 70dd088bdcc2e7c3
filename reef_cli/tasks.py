"""Task suites: the held-out tasks the canary gate runs, loaded from YAML in the Frozen zone.

A task file (default `canary/*.yaml`, harness.yaml `gate.tasks`) holds one task or a suite (`tasks: [...]`),
validated against `schemas/task.schema.json`. Tasks are always read from the *baseline* harness, never from the
candidate under test, so a candidate cannot grade itself. Only the `canary` split gates; a canary task the Reflector
has already seen (an interaction in the ledger with its id or its prompt digest) is no longer held out and is refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from .config import line_of, plain_data
from .errors import InvalidInput, PolicyError
from .releases import canonical

CANARY = "canary"
TRAIN = "train"
SENTINEL = "sentinel"
SKILL_TRIGGER = "skill-trigger"
DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True)
class Setup:
    files: tuple[tuple[str, str], ...] = ()
    command: str | tuple[str, ...] | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        if self.files:
            out["files"] = dict(self.files)
        if self.command is not None:
            out["command"] = self.command if isinstance(self.command, str) else list(self.command)
        return out


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    check: str | tuple[str, ...]
    source: str
    setup: Setup | None = None
    timeout: float = DEFAULT_TIMEOUT
    split: str = CANARY
    tags: tuple[str, ...] = ()
    skill: str | None = None
    description: str = ""

    @property
    def sentinel(self) -> bool:
        return SENTINEL in self.tags

    @property
    def skill_trigger(self) -> bool:
        return SKILL_TRIGGER in self.tags

    @property
    def prompt_digest(self) -> str:
        return prompt_digest(self.prompt)

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "id": self.id,
            "prompt": self.prompt,
            "check": self.check if isinstance(self.check, str) else list(self.check),
            "timeout": self.timeout,
            "split": self.split,
            "tags": list(self.tags),
        }
        if self.setup is not None:
            out["setup"] = self.setup.to_json()
        if self.skill is not None:
            out["skill"] = self.skill
        return out

    @property
    def digest(self) -> str:
        """Identity of what the task asks and how it is scored (not where it is written down)."""
        return "sha256:" + hashlib.sha256(canonical(self.to_json())).hexdigest()


@dataclass(frozen=True)
class Suite:
    tasks: tuple[Task, ...] = field(default_factory=tuple)
    files: tuple[str, ...] = ()

    @property
    def canary(self) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.split == CANARY)

    @property
    def train(self) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.split == TRAIN)

    def get(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(task_id)

    @property
    def digest(self) -> str:
        body = [t.digest for t in sorted(self.canary, key=lambda t: t.id)]
        return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def prompt_digest(prompt: str) -> str:
    return "sha256:" + hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def _digest_of(arg: Any) -> str | None:
    return prompt_digest(arg) if isinstance(arg, str) else None


@lru_cache(maxsize=1)
def _schema() -> dict:
    return json.loads((Path(__file__).parent / "schemas" / "task.schema.json").read_text())


def _validator(kind: str):
    import jsonschema

    schema = _schema()
    if kind == "task":
        sub = {"$ref": "#/$defs/task", "$defs": schema["$defs"]}
    else:
        sub = {**schema["oneOf"][1], "$defs": schema["$defs"]}
    return jsonschema.Draft202012Validator(sub)


def parse_task_file(text: str | bytes, source: str) -> list[Task]:
    """Tasks of one YAML file; an error names the file, the line, the task and the field."""
    from jsonschema.exceptions import best_match
    from ruamel.yaml import YAML, YAMLError

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{source}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        doc = YAML(typ="rt").load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput(f"{source}:{where} invalid YAML: {problem}") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{source}: expected a task (a mapping with 'id') or a suite (a mapping with 'tasks')")
    data = plain_data(doc)
    kind = "suite" if "tasks" in data else "task"
    err = best_match(_validator(kind).iter_errors(data))
    if err is not None:
        path = list(err.absolute_path)
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            message = f"unknown field '{extra[0]}'" if extra else err.message
            if extra:
                path = path + [extra[0]]
        else:
            message = err.message
        where = line_of(doc, path)
        task_hint = ""
        if kind == "suite" and len(path) >= 2 and path[0] == "tasks" and isinstance(path[1], int):
            tid = data["tasks"][path[1]].get("id") if isinstance(data["tasks"][path[1]], dict) else None
            task_hint = f" task {tid!r}" if isinstance(tid, str) else f" task #{path[1] + 1}"
        field_name = ".".join(str(p) for p in path) or "(top level)"
        line = f" line {where}:" if where else ""
        raise InvalidInput(f"{source}:{line}{task_hint} field '{field_name}': {message}")
    items = data["tasks"] if kind == "suite" else [data]
    return [_task_from(item, source) for item in items]


def _command(value) -> str | tuple[str, ...]:
    return value if isinstance(value, str) else tuple(value)


def _task_from(d: Mapping, source: str) -> Task:
    setup = None
    raw = d.get("setup")
    if isinstance(raw, str):
        setup = Setup(command=raw)
    elif isinstance(raw, dict):
        files = tuple(sorted((raw.get("files") or {}).items()))
        cmd = raw.get("command")
        setup = Setup(files=files, command=_command(cmd) if cmd is not None else None)
    return Task(
        id=d["id"],
        prompt=d["prompt"],
        check=_command(d["check"]),
        source=source,
        setup=setup,
        timeout=float(d.get("timeout", DEFAULT_TIMEOUT)),
        split=d.get("split", CANARY),
        tags=tuple(d.get("tags") or ()),
        skill=d.get("skill"),
        description=d.get("description", ""),
    )


def load_suite(files: Mapping[str, Any], globs: Iterable[str]) -> Suite:
    """The suite held by a harness `files` dict ({path: Entry}) under `globs` (harness.yaml `gate.tasks`)."""
    from .zones import glob_match

    globs = tuple(globs)
    picked = sorted(p for p in files if any(glob_match(g, p) for g in globs))
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for path in picked:
        entry = files[path]
        data = getattr(entry, "data", entry)
        for task in parse_task_file(data, path):
            if task.id in seen:
                raise InvalidInput(f"{path}: task id '{task.id}' is already used in {seen[task.id]}; task ids must be unique")
            seen[task.id] = path
            tasks.append(task)
    return Suite(tuple(tasks), tuple(picked))


def check_held_out(tasks: Iterable[Task], records: Iterable[Any]) -> None:
    """Refuse canary tasks whose id or prompt the Reflector has already seen as an interaction.

    `records` are ledger records (objects with `.kind`, `.payload`, `.record_id`) or plain dicts.
    """
    canary = [t for t in tasks if t.split == CANARY]
    if not canary:
        return
    by_id = {t.id: t for t in canary}
    by_digest = {t.prompt_digest: t for t in canary}
    for rec in records:
        kind = rec.get("kind") if isinstance(rec, dict) else getattr(rec, "kind", None)
        if kind != "interaction":
            continue
        payload = (rec.get("payload") if isinstance(rec, dict) else getattr(rec, "payload", None)) or {}
        rid = rec.get("record_id") if isinstance(rec, dict) else getattr(rec, "record_id", "?")
        task = by_id.get(payload.get("task_id")) if isinstance(payload.get("task_id"), str) else None
        how = "its id"
        if task is None:
            prompt = payload.get("prompt")
            digest = prompt.get("digest") if isinstance(prompt, dict) else None
            task = by_digest.get(digest) if isinstance(digest, str) else None
            how = "its prompt"
        if task is None and isinstance(payload.get("argv"), list):
            # `reef run -- agent -p PROMPT` records the command line: the prompt is one of its arguments
            task = next((by_digest[d] for d in map(_digest_of, payload["argv"]) if d in by_digest), None)
            how = "its prompt in a command line"
        if task is not None:
            raise PolicyError(
                f"canary task '{task.id}' ({task.source}) is no longer held out: the Reflector has seen {how} in "
                f"interaction {rid}; move it to 'split: train' or write a new canary task"
            )
