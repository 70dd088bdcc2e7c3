"""Learning recipes: what a scenario's loop does with what it learns. Bound to a scenario once, at creation.

The catalog is data: one YAML file per recipe in `recipes/`, each checked against `schemas/recipe.schema.json`
(the surface it changes, what qualifies a record, how rewards are formed, its trainer settings).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InvalidInput
from .project import shipped

RECIPES_DIR = shipped("recipes")
PUBLISH_MODES = ("gated", "review", "always")
SCHEMA_PATH = Path(__file__).parent / "schemas" / "recipe.schema.json"


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str  # the surface it changes: harness | weights
    description: str
    publish: str  # gated | review | always
    engine: str = "curate"  # curate | skillclaw | slime
    select: dict = field(default_factory=dict)
    reward: dict = field(default_factory=dict)
    trainer: dict = field(default_factory=dict)
    skillclaw: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "description": self.description, "publish": self.publish,
                "engine": self.engine, "select": dict(self.select), "reward": dict(self.reward),
                "trainer": dict(self.trainer), "skillclaw": dict(self.skillclaw)}


def available() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


@functools.lru_cache(maxsize=64)
def load(name: str) -> Recipe:
    """A shipped recipe by name; cached, since evolve and init ask for the same one several times a process."""
    path = RECIPES_DIR / f"{name}.yaml"
    if "/" in name or not path.is_file():
        raise InvalidInput(f"unknown recipe '{name}' (available: {', '.join(available())})")
    return parse(path.read_text(), source=str(path), expected_name=name)


def parse(text: str, *, source: str, expected_name: str | None = None) -> Recipe:
    """A recipe from YAML text, validated by the shipped schema; the first problem is named with its field."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise InvalidInput(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{source}: a recipe must be a mapping of fields")
    _validate(data, source)
    if expected_name is not None and data["name"] != expected_name:
        raise InvalidInput(f"{source}: field 'name' is '{data['name']}', expected '{expected_name}'")
    default_engine = "slime" if data["kind"] == "weights" else "curate"
    return Recipe(data["name"], data["kind"], data["description"], data["publish"], data.get("engine", default_engine),
                  dict(data.get("select") or {}), dict(data.get("reward") or {}), dict(data.get("trainer") or {}),
                  dict(data.get("skillclaw") or {}))


def _validate(data: dict, source: str) -> None:
    import jsonschema
    from jsonschema.exceptions import best_match

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    err = best_match(validator.iter_errors(data))
    if err is None:
        return
    where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
    if err.validator == "additionalProperties":
        known = set((err.schema.get("properties") or {}))
        extra = sorted(set(err.instance) - known)
        raise InvalidInput(f"{source}: unknown field '{extra[0]}' at {where}")
    if err.validator == "required":
        missing = [k for k in err.validator_value if k not in err.instance]
        raise InvalidInput(f"{source}: field '{missing[0]}' is required at {where}")
    raise InvalidInput(f"{source}: field '{where}': {err.message}")


def catalog() -> list[Recipe]:
    return [load(name) for name in available()]
