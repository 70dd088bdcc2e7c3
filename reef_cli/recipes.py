"""Learning recipes: what a scenario's loop does with what it learns. Bound to a scenario once, at creation."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidInput
from .project import shipped

RECIPES_DIR = shipped("recipes")
PUBLISH_MODES = ("gated", "review")


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str  # harness
    description: str
    publish: str  # gated | review


def available() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def load(name: str) -> Recipe:
    path = RECIPES_DIR / f"{name}.yaml"
    if "/" in name or not path.is_file():
        raise InvalidInput(f"unknown recipe '{name}' (available: {', '.join(available())})")
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load(path.read_text())
    for key in ("name", "kind", "description", "publish"):
        if not isinstance(data.get(key), str):
            raise InvalidInput(f"{path}: field '{key}' must be a string")
    if data["name"] != name:
        raise InvalidInput(f"{path}: field 'name' is '{data['name']}', expected '{name}'")
    if data["publish"] not in PUBLISH_MODES:
        raise InvalidInput(f"{path}: field 'publish' must be one of {', '.join(PUBLISH_MODES)}")
    return Recipe(data["name"], data["kind"], data["description"], data["publish"])
