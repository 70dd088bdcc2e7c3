"""What a human's change to the harness touches, for `reef ci`: the measuring stick, or the human's own rules.

Frozen means "never changed automatically", not "never changed by a human in review". A pull request that edits
CLAUDE.md outside reef's block, a rule file or a skill is a harness change like any other and is gated (paired
against the head). Only a change to what does the judging — the canary tasks, the evaluators, and the `gate` and
`zones` sections of harness.yaml — cannot be vouched for by the gate it changes; `reef ci` refuses it (exit 4)
unless `--suite-change` asks for both sides to be evaluated on the new suite (`suite_baseline`).

A link into the stick (stick_links.py) is refused by ci whatever `--suite-change` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .config import CONFIG_NAME
from .stick_links import stick_links

STICK_SECTIONS = ("gate", "zones")


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
    from .harness_diff import Violation

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

