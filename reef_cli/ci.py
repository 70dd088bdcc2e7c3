"""`reef ci`: gate a pull request's harness against the published head (or a base checkout), and report it the way a
CI job page wants — a status, a Markdown summary, JUnit XML. The CLI (cli/gate_cmds.py) only parses options, shows
progress and prints; everything a CI run decides lives here.

The summary lists every bullet the change adds or removes with its evidence: the pattern behind it in the pattern
memory (how many distinct records saw it, which ones) and, when the gate attributed it, its measured utility. A
reviewer can then judge a learned rule by what taught it, not by its wording alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import InvalidInput

EVIDENCE_SHOWN = 5  # record ids listed per bullet in the summary; the count says how many there are


# ------------------------------------------------------------------------------------------------ where it runs


def head_baseline(store):
    """(store, baseline, base_files, label) for a run against the published head."""
    head = store.require_head()
    return store, head, store.files_of(head), f"release {head.step} ({head.release_id})"


def base_checkout(cwd: Path, scenario: str | None, base_dir: Path):
    """(store, baseline, base_files, label) for `--base DIR`, a checkout of the base branch; a project without
    `.reef/` gets a private one (a CI workspace is thrown away after the job)."""
    from .config import CONFIG_NAME, load_config
    from .errors import NotFound
    from .project import Project, find_project
    from .store import HarnessStore, collect_files

    base_dir = base_dir if base_dir.is_absolute() else cwd / base_dir
    if not base_dir.is_dir():
        raise InvalidInput(f"--base {base_dir}: not a directory; pass a checkout of the base branch")
    if not (base_dir / CONFIG_NAME).is_file():
        raise InvalidInput(f"--base {base_dir}: no {CONFIG_NAME} there; pass a checkout of the base branch")
    cfg = load_config(base_dir / CONFIG_NAME)
    base_files = collect_files(base_dir, tuple(cfg.include) + (CONFIG_NAME,), cfg.exclude)
    try:
        project = find_project(cwd)
    except NotFound:
        project = Project(cwd)
        project.create_state("default")
    store = HarnessStore(project, scenario or project.default_scenario())
    if not store.exists():
        store.create(cfg.recipe)
    return store, base_files, base_files, f"{base_dir}"


def check_output(path: Path, option: str) -> Path:
    """Refuse an output path that cannot be written, before the gate spends its episodes: a directory, a path under
    a file, an unwritable directory."""
    import os

    if path.is_dir():
        raise InvalidInput(f"{option} {path}: is a directory; give a file path")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InvalidInput(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InvalidInput(f"{option} {path}: not writable")
    return path


def write_output(path: Path, text: str) -> None:
    from .durable import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"))


# ------------------------------------------------------------------------------------------------ bullets


@dataclass(frozen=True)
class BulletChange:
    """One bullet the change adds or removes, with what the pattern memory knows about it."""

    change: str  # added | removed
    id: str
    path: str
    text: str
    count: int | None = None  # distinct observations behind it (None: no pattern in memory)
    evidence: tuple[str, ...] = ()
    utility: float | None = None
    suppressed: bool = False

    def to_json(self) -> dict:
        return {"change": self.change, "id": self.id, "path": self.path, "text": self.text, "count": self.count,
                "evidence": list(self.evidence), "utility": self.utility, "suppressed": self.suppressed}

    def evidence_text(self) -> str:
        if self.count is None:
            why = ("no pattern in memory (written by hand)" if self.id.startswith("b_") else
                   f"reef:{self.id} is not in the pattern memory")
        else:
            shown = ", ".join(f"`{e}`" for e in self.evidence[:EVIDENCE_SHOWN])
            more = f" and {len(self.evidence) - EVIDENCE_SHOWN} more" if len(self.evidence) > EVIDENCE_SHOWN else ""
            why = f"seen {self.count}x" + (f": {shown}{more}" if shown else "")
            if self.suppressed:
                why += " (suppressed)"
        if self.utility is not None:
            why += f"; utility {self.utility:+.2f}"
        return why


def _memory(files: Mapping, config) -> Any:
    from .patterns import PatternMemory

    path = (getattr(config, "surfaces", None) or {}).get("memory")
    entry = files.get(path) if path else None
    try:
        return PatternMemory.loads(entry.data if entry is not None else None, f"{path}")
    except InvalidInput:
        return PatternMemory.loads(None, f"{path}")  # a damaged memory shows as "not in memory", not a crash


def bullet_changes(base_files: Mapping, cand_files: Mapping, config, utility: Mapping | None = None) -> list[BulletChange]:
    """Bullets added and removed between the two trees, each with its evidence (the candidate's memory first for
    an added bullet, since the change that adds it brings its pattern; the base's for a removed one). The text is
    redacted: it goes to the CI job page and the terminal, and either tree may hold a secret published or judged
    with --allow-secret."""
    from .harness_diff import new_bullets
    from .redact import redact_text

    mem_base, mem_cand = _memory(base_files, config), _memory(cand_files, config)
    utility = utility or {}
    out = []
    for change, old, new, memories in (("added", base_files, cand_files, (mem_cand, mem_base)),
                                       ("removed", cand_files, base_files, (mem_base, mem_cand))):
        for b in new_bullets(old, new):
            p = next((m.by_id(b.id) for m in memories if m.by_id(b.id) is not None), None)
            out.append(BulletChange(
                change=change, id=b.id, path=b.path, text=redact_text(b.text),  # the CI job page is public
                count=None if p is None else p.count, evidence=() if p is None else tuple(p.evidence),
                utility=utility.get(b.id) if change == "added" else None,
                suppressed=bool(p is not None and p.suppressed)))
    return out


# ------------------------------------------------------------------------------------------------ the run


@dataclass
class CiReport:
    base_label: str
    status: str = "pass"  # pass | fail | blocked
    reason: str = ""
    verdict: Any = None
    violations: list = field(default_factory=list)
    bullets: list = field(default_factory=list)
    suite_change: list = field(default_factory=list)  # measuring-stick changes judged under --suite-change

    def to_json(self) -> dict:
        return {"status": self.status, "reason": self.reason, "baseline": self.base_label,
                "suite_change": [c.to_json() for c in self.suite_change],
                "violations": [v.to_json() for v in self.violations],
                "bullets": [b.to_json() for b in self.bullets],
                "verdict": self.verdict.to_json() if self.verdict is not None else None}

    def markdown(self) -> str:
        icon = {"pass": "✅ pass", "fail": "❌ not published", "blocked": "⛔ blocked by policy"}[self.status]
        lines = [f"## reef canary gate: {icon}", "", f"**{self.reason}**", "", f"Baseline: {self.base_label}", ""]
        if self.violations:
            lines += ["| path | change | zone | why |", "|---|---|---|---|"]
            lines += [f"| `{v.path}` | {v.change} | {v.zone} | {_md(v.reason)} |" for v in self.violations]
            lines += ["", "The measuring stick (canary tasks, evaluators, harness.yaml `gate`/`zones`) cannot be "
                          "vouched for by the gate it changes; pass `--suite-change` to judge both sides on the new "
                          "suite.", ""]
        if self.suite_change and self.status != "blocked":
            what = ", ".join(f"`{c.path}` ({c.what} {c.change})" for c in self.suite_change)
            lines += [f"**--suite-change:** both sides were evaluated on the new suite ({what}); the scores are not "
                      "comparable with earlier runs on the old suite.", ""]
        if self.bullets:
            lines += ["### Bullets", ""]
            for b in self.bullets:
                sign = "+" if b.change == "added" else "-"
                lines.append(f"- {sign} {b.change} `{b.path}` (`{b.id}`): {_md(b.text)} — {_md(b.evidence_text())}")
            lines.append("")
        v = self.verdict
        if v is not None:
            lines += [f"Policy `{v.policy}`, decision **{v.decision}** at stage `{v.stage}`; "
                      f"episodes spent: {v.episodes_spent} of up to {v.episodes_budget}.", ""]
            if v.interval is not None:
                lo, hi, level = v.interval
                lines += [f"Mean paired improvement: [{lo:+.3f}, {hi:+.3f}] ({level:.0%} one-sided bootstrap bounds "
                          "over tasks; publish needs the lower bound above 0).", ""]
            lines += ["| task | current | candidate | delta | status |", "|---|---:|---:|---:|---|"]
            for t in v.per_task:
                name = f"`{t.task_id}`" + (" (sentinel)" if t.sentinel else "")
                lines.append(f"| {name} | {fmt(t.current)} | {fmt(t.candidate)} | {delta(t.delta)} | {t.status} |")
            if v.errors:
                lines += ["", "<details><summary>episode errors</summary>", ""]
                lines += [f"- {_md(e)}" for e in v.errors]
                lines += ["", "</details>"]
            if v.record_id:
                lines += ["", f"Gate record: `{v.record_id}`"]
        return "\n".join(lines) + "\n"

    def junit(self) -> str:
        import xml.etree.ElementTree as ET

        suites = ET.Element("testsuites", name="reef ci")
        suite = ET.SubElement(suites, "testsuite", name="reef canary gate")
        cases = []
        decision = ET.Element("testcase", classname="reef.gate", name="decision")
        if self.status != "pass":
            ET.SubElement(decision, "failure", message=self.reason, type=self.status).text = self.reason
        cases.append(decision)
        for v in self.violations:
            case = ET.Element("testcase", classname="reef.frozen", name=v.path)
            ET.SubElement(case, "failure", message=f"{v.change}: {v.reason}", type="policy").text = v.reason
            cases.append(case)
        if self.verdict is not None:
            for t in self.verdict.per_task:
                case = ET.Element("testcase", classname="reef.canary", name=t.task_id)
                if t.status in ("regressed", "sentinel-failed"):
                    msg = f"{t.status}: current {fmt(t.current)}, candidate {fmt(t.candidate)}"
                    ET.SubElement(case, "failure", message=msg, type=t.status).text = msg
                elif t.status == "not-run":
                    ET.SubElement(case, "skipped", message="not run: the gate decided before reaching this task")
                ET.SubElement(case, "system-out").text = (
                    f"current {fmt(t.current)} candidate {fmt(t.candidate)} delta {delta(t.delta)} "
                    f"pairs {t.pairs} status {t.status}")
                cases.append(case)
        failures = sum(1 for c in cases if c.find("failure") is not None)
        skipped = sum(1 for c in cases if c.find("skipped") is not None)
        for el in (suites, suite):
            el.set("tests", str(len(cases)))
            el.set("failures", str(failures))
        suite.set("skipped", str(skipped))
        suite.extend(cases)
        ET.indent(suites)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def run_ci(store, baseline, base_files: Mapping, base_label: str, *, workers: int | None = None,
           policy: str | None = None, max_episodes: int | None = None,
           progress: Callable[[dict], None] | None = None, environ: Mapping[str, str] | None = None,
           executor=None, suite_change: bool = False, allow_secret: bool = False) -> CiReport:
    """Judge the working tree against the baseline: blocked when it touches a Frozen path or, unless `allow_secret`,
    a changed file holds what publish refuses as a secret (nothing runs); pass when it changes nothing, else the
    canary gate's verdict."""
    from .config import CONFIG_NAME, parse_config
    from .edits import ci_policy
    from .gate import gate_candidate
    from .harness_secrets import changed, find, gate_refusal

    config = parse_config(base_files[CONFIG_NAME].data, source=f"{CONFIG_NAME} ({base_label})")
    files = store.worktree_files(config)
    report = CiReport(base_label=base_label)
    # Frozen means "never changed automatically": a human's own rules are judged like any change; only the
    # measuring stick is refused (edits.py), or with --suite-change judged on the new suite by both sides.
    violations, suite_base, report.suite_change = ci_policy(base_files, files, config, suite_change=suite_change,
                                                            root=store.project.root)
    if suite_base is not None:
        baseline = suite_base
    if violations and violations[0].change == "link":  # a link into the stick: its own sentence, whatever changed
        report.status, report.violations = "blocked", violations
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        report.reason = f"{violations[0].reason}{more}; nothing was run"
    elif violations:
        report.status, report.violations = "blocked", violations
        report.reason = (f"the change touches the measuring stick ({len(violations)} change(s), first: "
                         f"{violations[0].path}: {violations[0].reason})")
    elif files == base_files:
        report.status, report.reason = "pass", "no harness changes; nothing to gate"
    elif not allow_secret and (refusal := gate_refusal(find(files, changed(base_files, files)))):
        report.status, report.reason = "blocked", refusal
    else:
        verdict = gate_candidate(store, files, ledger=store.ledger(), baseline=baseline, workers=workers,
                                 policy=policy, max_episodes=max_episodes, progress=progress, environ=environ,
                                 executor=executor)
        if verdict is None:
            report.status, report.reason = "pass", "no canary tasks (harness.yaml gate.tasks); nothing to gate"
        else:
            report.verdict = verdict
            report.status = "pass" if verdict.published else "fail"
            report.reason = verdict.reason
    utility = report.verdict.bullet_utility if report.verdict is not None else None
    report.bullets = bullet_changes(base_files, files, config, utility)
    return report


def fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def delta(x) -> str:
    return "-" if x is None else f"{x:+.2f}"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
