"""The shape of pattern memory, checked wherever it is read or published.

Pattern memory travels: it is published with the harness and pulled by teammates, so a hand-edited or damaged copy
(`"through_seq": "abc"`, `origins` as a list, a `last_seen` that is no date) must be one line naming the file and the
first bad field, never a crash in a later command. The shape is `schemas/patterns.schema.json`; this module also
checks what a schema cannot say (real dates, unique keys and bullet ids).

Why not jsonschema here: a full memory (500 patterns, each with up to 74 evidence and source ids) took jsonschema
0.5-1.3 s to walk on the CI machine, and every evolve reads memory several times. `check` walks the same schema file
with the few keywords it uses (type, const, enum, minimum, pattern, properties, additionalProperties, items, required,
a local $ref) in a few milliseconds, with jsonschema's wording; a keyword it does not know is an error, so the schema
cannot grow past it unnoticed. tests/test_pattern_memory_shape.py holds it to jsonschema's verdicts.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from .errors import InvalidInput

SCHEMA_PATH = Path(__file__).parent / "schemas" / "patterns.schema.json"
_NOTES = frozenset({"$schema", "$id", "$defs", "title", "description"})
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
}


@lru_cache(maxsize=1)
def schema() -> dict:
    """The schema file, once; a keyword `_walk` does not know is refused here, not skipped at every check."""
    doc = json.loads(SCHEMA_PATH.read_text())
    for node in [doc, *doc.get("$defs", {}).values()]:
        _known(node)
    return doc


def _known(node: dict) -> None:
    unknown = set(node) - _KNOWN
    if unknown:
        raise ValueError(f"{SCHEMA_PATH.name}: keyword {sorted(unknown)[0]!r} is not supported by memory_shape")
    ref = node.get("$ref")
    if ref is not None and not ref.startswith("#/$defs/"):
        raise ValueError(f"{SCHEMA_PATH.name}: $ref {ref!r}: only local #/$defs/ references are supported")
    for sub in [*node.get("properties", {}).values(), node.get("items"), node.get("additionalProperties")]:
        if isinstance(sub, dict):
            _known(sub)


@lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern:
    return re.compile(pattern)


class _Bad(Exception):
    def __init__(self, path: tuple, message: str):
        self.path, self.message = path, message


def _walk(node: dict, value, path: tuple, root: dict) -> None:
    """Raise _Bad at the first place (in document order) where `value` breaks `node`."""
    if "$ref" in node:
        _walk(root["$defs"][node["$ref"][len("#/$defs/"):]], value, path, root)
    if "type" in node:
        types = [node["type"]] if isinstance(node["type"], str) else node["type"]
        if not any(_TYPES[t](value) for t in types):
            raise _Bad(path, f"{value!r} is not of type {', '.join(repr(t) for t in types)}")
    if isinstance(value, float) and not math.isfinite(value):  # Python's json reads NaN/Infinity; JSON has none
        raise _Bad(path, f"{value!r} is not a finite number")
    if "const" in node and value != node["const"]:
        raise _Bad(path, f"{node['const']!r} was expected")
    if "enum" in node and value not in node["enum"]:
        raise _Bad(path, f"{value!r} is not one of {node['enum']!r}")
    if "minimum" in node and _TYPES["number"](value) and value < node["minimum"]:
        raise _Bad(path, f"{value!r} is less than the minimum of {node['minimum']!r}")
    if isinstance(value, str):
        if "minLength" in node and len(value) < node["minLength"]:
            raise _Bad(path, f"{value!r} should be non-empty" if node["minLength"] == 1 else
                       f"{value!r} is too short")
        if "pattern" in node and not _regex(node["pattern"]).search(value):
            raise _Bad(path, f"{value!r} does not match {node['pattern']!r}")
    if isinstance(value, dict):
        for name in node.get("required", ()):
            if name not in value:
                raise _Bad(path, f"{name!r} is a required property")
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        for name, item in value.items():
            if name in props:
                _walk(props[name], item, path + (name,), root)
            elif isinstance(extra, dict):
                _walk(extra, item, path + (name,), root)
    if isinstance(value, list) and "items" in node:
        items = node["items"]
        if items.keys() == {"type"} and isinstance(items["type"], str):  # ids: one pass, no call per item
            ok = _TYPES[items["type"]]
            if all(ok(item) for item in value):
                return
        for n, item in enumerate(value):
            _walk(items, item, path + (n,), root)


_KNOWN = _NOTES | {"$ref", "type", "const", "enum", "minimum", "minLength", "pattern", "properties",
                   "additionalProperties", "items", "required"}


def field_name(path) -> str:
    """`patterns[0].origins` for the path ("patterns", 0, "origins")."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _fail(source: str, where: str, problem: str) -> InvalidInput:
    from .printable import printable

    problem = problem if len(problem) <= 160 else problem[:159] + "…"
    return InvalidInput(f"{source}: field '{printable(where)}': {printable(problem)}; fix it, or restore the file "
                        f"with 'reef checkout'")


def check(doc, source: str) -> None:
    """InvalidInput naming `source` and the first bad field when `doc` (parsed JSON) is not pattern memory."""
    root = schema()
    try:
        _walk(root, doc, (), root)
    except _Bad as bad:
        raise _fail(source, field_name(bad.path), bad.message) from None
    keys: dict[str, int] = {}
    ids: dict[str, int] = {}
    for n, d in enumerate(doc.get("patterns") or []):
        for name in ("first_seen", "last_seen"):
            value = d.get(name)
            if value:
                try:
                    datetime.fromisoformat(value[:19])  # the schema's pattern has the form; this the calendar
                except ValueError:
                    raise _fail(source, f"patterns[{n}].{name}", f"{value!r} is not a date and time") from None
        if d["key"] in keys:
            raise _fail(source, f"patterns[{n}].key", f"{d['key']!r} is also patterns[{keys[d['key']]}]'s key")
        if d["id"] in ids:
            raise _fail(source, f"patterns[{n}].id", f"bullet id {d['id']!r} is also patterns[{ids[d['id']]}]'s")
        keys[d["key"]], ids[d["id"]] = n, n
