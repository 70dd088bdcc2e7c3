"""harness.yaml: the frozen contract between a human and reef's automatic writers.

Read and written with ruamel.yaml round-trip so users' comments survive; validated against the JSON Schema shipped in
the package; an error names the file, the field and the line.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import InvalidInput

CONFIG_NAME = "harness.yaml"
DEFAULT_RECIPE = "harness-curate"
DEFAULT_TIERS = ((1, "memory"), (3, "notes"), (5, "block"), (10, "skill"))
DEFAULT_SURFACES = {
    "memory": "reef/memory/patterns.json",
    "notes": "CLAUDE.local.md",
    "block": "CLAUDE.md",
    "skill": ".claude/skills/{slug}/SKILL.md",
}


@dataclass(frozen=True)
class GateConfig:
    tasks: tuple[str, ...] = ("canary/*.yaml",)
    evaluators: tuple[str, ...] = ("evaluators/**",)
    policy: str = "sequential"  # issue 16: publishes about twice as many helpful changes as "paired" (by name)
    repeats: int = 3
    confidence: float = 0.9
    tolerance: float = 0.4
    seed: int = 0
    margin: int = 0
    floor: float = 1.0
    screen: float = 0.25
    screen_min: int = 3
    resamples: int = 2000
    executor: str = "local"  # where episodes run: local | ray (reef_cli/executors.py)
    ray_address: str | None = None  # with executor: ray, the cluster to join (None: a local Ray instance)
    max_repeats: int = 0  # policy sequential: pairs per task, probes included (0: six times `repeats`)
    drop_alpha: float = 0.1  # policy sequential: error budget of the drop veto (chance of vetoing a candidate that drops no task)
    extra_passes: int = 2  # policy sequential: passes past `repeats` for an undecided candidate, on its discordant tasks only
    looks_per_pass: int = 3  # policy sequential: looks of the mean test per pass over the tasks
    spend_shape: float = 1.0  # policy sequential: alpha spent by information fraction f is alpha * f ** spend_shape


@dataclass(frozen=True)
class ReflectorConfig:
    """`reflector:` in harness.yaml; the model backends' fields are documented in llm_reflector.py."""

    backend: str = "builtin"
    model_url: str | None = None  # the older name of base_url
    model: str | None = None
    api_key_env: str | None = None  # default: OPENAI_API_KEY or ANTHROPIC_API_KEY, by backend
    similarity: float = 0.6
    base_url: str | None = None
    batch_size: int | None = None
    max_tokens: int | None = None
    budget: dict = field(default_factory=dict)
    prices: dict = field(default_factory=dict)


@dataclass(frozen=True)
class HarnessConfig:
    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    recipe: str = DEFAULT_RECIPE
    zones: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tiers: tuple[tuple[int, str], ...] = DEFAULT_TIERS
    surfaces: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SURFACES))
    max_bullets: int = 20
    max_chars: int = 4000
    expiry_days: int = 90
    reearn: int | str = "tier"
    reflector: ReflectorConfig = ReflectorConfig()
    gate: GateConfig = GateConfig()
    agent: tuple[str, ...] = ()
    observe_only: tuple[dict[str, str], ...] = ()
    store_content: bool = False

    def zone_map(self):
        """Through ZoneMap.from_mapping, so the globs harness.yaml declares get its checks (no '..', each compiles)."""
        from .zones import ZoneMap

        return ZoneMap.from_mapping({**self.zones, "always_frozen": tuple(self.gate.tasks) + tuple(self.gate.evaluators)})


@lru_cache(maxsize=1)
def _schema() -> dict:
    return json.loads((Path(__file__).parent / "schemas" / "harness.schema.json").read_text())


def _yaml():
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    return y


def line_of(doc: Any, path: list) -> int | None:
    """1-based line of the deepest node on `path` that ruamel kept position info for."""
    line = None
    node = doc
    for part in path:
        lc = getattr(node, "lc", None)
        try:
            if lc is not None:
                if isinstance(part, int):
                    line = lc.item(part)[0] + 1
                else:
                    line = lc.key(part)[0] + 1
            node = node[part]
        except (KeyError, IndexError, TypeError, AttributeError):
            break
    return line


def plain_data(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): plain_data(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain_data(v) for v in obj]
    return obj


def _load_rt(text: str, source: str):
    from ruamel.yaml import YAMLError

    try:
        return _yaml().load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput(f"{source}:{where}: invalid YAML: {problem}") from None


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(_schema())


@lru_cache(maxsize=64)
def _parse_cached(raw: bytes, source: str, validate: bool = True) -> HarnessConfig:
    return from_data(config_data(raw, source, validate))


def config_data(raw: bytes, source: str = CONFIG_NAME, validate: bool = True) -> dict:
    """harness.yaml as plain, schema-checked data (what `from_data` turns into a HarnessConfig)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{source}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    from ruamel.yaml import YAML, YAMLError

    try:
        data = YAML(typ="safe").load(text)  # the C loader when ruamel.yaml.clib is present
    except YAMLError:
        data = _load_rt(text, source)  # re-parse only to report the line
    if not isinstance(data, dict):
        raise InvalidInput(f"{source}: expected a mapping at the top level")
    data = plain_data(data)
    if not validate:
        return data
    errors = sorted(_validator().iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        path = list(err.absolute_path)
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            if extra:
                path = path + [extra[0]]
        field_name = ".".join(str(p) for p in path) or "(top level)"
        line = line_of(_load_rt(text, source), path)
        where = f" line {line}" if line else ""
        message = err.message
        if err.validator == "additionalProperties" and path:
            message = f"unknown field '{path[-1]}'"
        raise InvalidInput(f"{source}:{where}: field '{field_name}': {message}")
    return data


def parse_config(text: str | bytes, source: str = CONFIG_NAME, *, validate: bool = True) -> HarnessConfig:
    """`validate=False` is for harness.yaml inside a published release: it was validated when published, and
    skipping the schema keeps jsonschema's import off the hot path of `reef run`."""
    raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return _parse_cached(raw, source, validate)


def from_data(data: dict) -> HarnessConfig:
    zones = {k: tuple(v) for k, v in (data.get("zones") or {}).items()}
    tiers = tuple((t["threshold"], t["surface"]) for t in data.get("tiers", [])) or DEFAULT_TIERS
    thresholds = [t for t, _ in tiers]
    if thresholds != sorted(set(thresholds)):
        raise InvalidInput(f"{CONFIG_NAME}: field 'tiers': thresholds must be strictly increasing, got {thresholds}")
    surfaces = dict(DEFAULT_SURFACES)
    surfaces.update(data.get("surfaces") or {})
    budgets = data.get("budgets") or {}
    gate = data.get("gate") or {}
    gate_cfg = GateConfig(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in gate.items()})
    refl = data.get("reflector") or {}
    return HarnessConfig(
        include=tuple(data["include"]),
        exclude=tuple(data.get("exclude") or ()),
        recipe=data.get("recipe", DEFAULT_RECIPE),
        zones=zones,
        tiers=tiers,
        surfaces=surfaces,
        max_bullets=budgets.get("max_bullets", 20),
        max_chars=budgets.get("max_chars", 4000),
        expiry_days=data.get("expiry_days", 90),
        reearn=(data.get("negative_evidence") or {}).get("reearn", "tier"),
        reflector=ReflectorConfig(**refl),
        gate=gate_cfg,
        agent=tuple(data.get("agent") or ()),
        observe_only=tuple(data.get("observe_only") or ()),
        store_content=bool((data.get("ledger") or {}).get("store_content", False)),
    )


def load_config(path: Path) -> HarnessConfig:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"{path}: missing; every reef harness needs a {CONFIG_NAME}") from None
    return parse_config(raw, source=str(path))


def _pop_keeping_comments(seq, i: int):
    """Remove item i; the comment after the last item (often the next section's heading) moves to the new last,
    or is returned when the sequence is now empty."""
    ca = seq.ca.items
    tail = ca.pop(len(seq) - 1, None) if i == len(seq) - 1 else None
    del seq[i]  # ruamel shifts the comments of the items after i
    if tail is not None and len(seq):
        ca[len(seq) - 1] = tail
        tail = None
    return tail


def _append_keeping_comments(seq, item: str) -> None:
    """Append after the last item, not after the comment that follows it."""
    tail = seq.ca.items.pop(len(seq) - 1, None) if len(seq) else None
    seq.append(item)
    if tail is not None:
        seq.ca.items[len(seq) - 1] = tail


def edit_zones(text: str, path_glob: str, target: str, *, source: str = CONFIG_NAME) -> str:
    """Move `path_glob` into zone `target` (removing it from the others), keeping comments and layout."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    y = _yaml()
    doc = y.load(text)
    zones = doc.get("zones")
    if zones is None:
        zones = CommentedMap()
        doc["zones"] = zones
    orphan = None
    for name in ("frozen", "evolvable", "learned", "managed"):
        seq = zones.get(name)
        if seq is None:
            continue
        while path_glob in seq:
            orphan = _pop_keeping_comments(seq, seq.index(path_glob)) or orphan
        if not seq and name != target:
            del zones[name]  # ruamel dumps an emptied, commented sequence as YAML that does not parse back
    seq = zones.get(target)
    if seq is None:
        seq = CommentedSeq()
        zones[target] = seq
    _append_keeping_comments(seq, path_glob)
    last = zones[list(zones)[-1]]
    if orphan is not None and isinstance(last, CommentedSeq) and len(last) and len(last) - 1 not in last.ca.items:
        last.ca.items[len(last) - 1] = orphan
    out = io.StringIO()
    y.dump(doc, out)
    new = out.getvalue()
    parse_config(new, source=source)
    return new
