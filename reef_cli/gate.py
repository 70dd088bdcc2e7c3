"""The canary gate: publish a candidate harness only if it beats the current one on held-out tasks.

This module runs the gate on real episodes: it reads the tasks, evaluators, agent and settings from the baseline's
harness.yaml, materialises both trees read-only, runs the episodes through a resumable journal, asks the policy
engine (reef_cli.gate_policies, where the policies and their statistics are described) for a decision, attributes
new bullets by leave-one-out, records every episode and the `Verdict` in the ledger, and publishes only on a
publish verdict for exactly the judged bytes (`publish_gated`). What the candidate changes (new bullets, frozen
changes) is reef_cli.harness_diff.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import InvalidInput, PolicyError
from .gate_policies import (CANDIDATE, CURRENT, PUBLISH, GateSettings, Outcome, TaskScore, TaskSpec, estimate,
                            evaluate, rounded)
from .harness_diff import new_bullets

Progress = Callable[[dict], None]


@dataclass(frozen=True)
class Verdict:
    """What the gate decided about one real candidate: the engine's Outcome plus what only a real run knows (its
    budget, the ids of both sides, bullet utilities); its `to_json` is the ledger's `gate` record."""

    decision: str
    reason: str
    policy: str
    per_task: tuple[TaskScore, ...]
    interval: tuple[float, float, float] | None
    episodes_spent: int
    episodes_budget: int
    bullet_utility: dict = field(default_factory=dict)
    record_id: str | None = None
    stage: str = ""
    repeats: int = 0
    run: str = ""
    baseline_release_id: str | None = None
    baseline_content_id: str = ""
    candidate_content_id: str = ""
    suite_digest: str = ""
    attribution_episodes: int = 0
    errors: tuple[str, ...] = ()
    tally: dict = field(default_factory=dict)
    trace: dict = field(default_factory=dict)

    @classmethod
    def of(cls, outcome: Outcome, **run: Any) -> "Verdict":
        """The engine's outcome, field for field, plus what only a real run knows (`run`: budget, ids, utilities)."""
        return cls(**{f.name: getattr(outcome, f.name) for f in fields(Outcome)}, **run)

    @property
    def published(self) -> bool:
        return self.decision == PUBLISH

    def to_json(self) -> dict:
        return {
            "decision": self.decision, "reason": self.reason, "policy": self.policy, "stage": self.stage,
            "per_task": [t.to_json() for t in self.per_task],
            "interval": None if self.interval is None else
            {"lo": rounded(self.interval[0]), "hi": rounded(self.interval[1]), "level": self.interval[2]},
            "episodes_spent": self.episodes_spent, "episodes_budget": self.episodes_budget,
            "attribution_episodes": self.attribution_episodes, "repeats": self.repeats,
            "bullet_utility": {k: rounded(v) for k, v in self.bullet_utility.items()},
            "record_id": self.record_id, "run": self.run, "baseline_release_id": self.baseline_release_id,
            "baseline_content_id": self.baseline_content_id, "candidate_content_id": self.candidate_content_id,
            "suite_digest": self.suite_digest, "errors": list(self.errors), "tally": dict(self.tally),
            **({"trace": self.trace} if self.trace else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping) -> "Verdict":
        iv = d.get("interval")
        return cls(
            decision=d["decision"], reason=d.get("reason", ""), policy=d["policy"],
            per_task=tuple(TaskScore.from_json(t) for t in d.get("per_task") or ()),
            interval=None if not iv else (iv["lo"], iv["hi"], iv["level"]),
            episodes_spent=int(d.get("episodes_spent", 0)), episodes_budget=int(d.get("episodes_budget", 0)),
            bullet_utility=dict(d.get("bullet_utility") or {}), record_id=d.get("record_id"),
            stage=d.get("stage", ""), repeats=int(d.get("repeats", 0)), run=d.get("run", ""),
            baseline_release_id=d.get("baseline_release_id"), baseline_content_id=d.get("baseline_content_id", ""),
            candidate_content_id=d.get("candidate_content_id", ""), suite_digest=d.get("suite_digest", ""),
            attribution_episodes=int(d.get("attribution_episodes", 0)), errors=tuple(d.get("errors") or ()),
            tally=dict(d.get("tally") or {}), trace=dict(d.get("trace") or {}),
        )

    def release_meta(self) -> dict:
        """The compact form a release carries in `meta["gate"]` (the full verdict is the ledger record)."""
        return {
            "decision": self.decision, "policy": self.policy, "record_id": self.record_id,
            "interval": self.to_json()["interval"], "episodes_spent": self.episodes_spent,
            "tasks": {t.task_id: rounded(t.delta) for t in self.per_task}, "run": self.run,
        }


def _content_id(files: Mapping) -> str:
    """The tree id of `files`, hashed without writing to the object store: a candidate that is never published
    (a rejected one, one holding a secret) leaves nothing behind in `.reef/git`; a publish writes its own tree."""
    from .gitstore import tree_id

    return tree_id(dict(files))


def _run_key(parts: dict) -> str:
    return "gate_" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def _ledger_append(ledger, kind: str, payload: dict, *, release_id, content_id, record_id=None) -> str | None:
    if ledger is None:
        return None
    rec = ledger.append(kind, payload, release_id=release_id, content_id=content_id, record_id=record_id)
    return getattr(rec, "record_id", None)


def _interactions(ledger) -> Iterable[Any]:
    if ledger is None:
        return ()
    return ledger.iter_records(kind="interaction")


def gate_candidate(
    store,
    candidate_files: Mapping,
    *,
    ledger,
    baseline=None,
    workers: int | None = None,
    policy: str | None = None,
    max_episodes: int | None = None,
    attribute: Mapping[str, Mapping] | None = None,
    progress: Progress | None = None,
    journal_dir: Path | None = None,
    repeats: int | None = None,
    environ: Mapping[str, str] | None = None,
    executor=None,
) -> Verdict | None:
    """Run the canary gate of `candidate_files` against `baseline` (default: the head release).

    `baseline` is a Release, a files dict, or None. Tasks, evaluators, the agent command and the gate settings all
    come from the baseline's harness.yaml, so a candidate cannot change how it is judged. Returns None when the
    baseline has no canary tasks. Every episode is recorded in `ledger` as kind "episode" and the verdict as kind
    "gate" (whose record id the Verdict carries). `attribute` maps new-bullet ids to candidate files without that
    bullet; each bullet's utility (candidate mean score minus the ablated one's, over the canary set) lands in
    `Verdict.bullet_utility`. Publishing is the caller's move (`publish_gated`).
    """
    from .config import CONFIG_NAME, parse_config
    from .durable import make_dirs
    from .episodes import EpisodeRequest, EpisodeRunner, Journal, materialise_readonly, rmtree
    from .executors import ExecutorSpec
    from .tasks import check_held_out, load_suite

    if baseline is None:
        baseline = store.require_head()
    if isinstance(baseline, Mapping):
        base_files, base_release = dict(baseline), None
    else:
        base_files, base_release = store.files_of(baseline), baseline
    if CONFIG_NAME not in base_files:
        raise InvalidInput(f"the baseline harness has no {CONFIG_NAME}")
    config = parse_config(base_files[CONFIG_NAME].data, source=f"{CONFIG_NAME} (baseline)")
    suite = load_suite(base_files, config.gate.tasks)
    canary = suite.canary
    if not canary:
        return None
    check_held_out(canary, _interactions(ledger))
    settings = GateSettings.from_config(config.gate, policy=policy, max_episodes=max_episodes, repeats=repeats)
    if settings.policy != "always" and not config.agent:
        raise InvalidInput(f"{CONFIG_NAME} has no 'agent' to run the canary tasks with; "
                           "set e.g. agent: [reef-claude, -p, \"{prompt}\"]")
    cand_files = dict(candidate_files)
    base_cid = base_release.content_id if base_release is not None else _content_id(base_files)
    cand_cid = _content_id(cand_files)
    # The baseline's release is part of the run: its episodes are recorded under it, so the same content judged as a
    # release and as a plain tree (`reef ci --base DIR`) must not share a journal whose record ids then collide.
    run = _run_key({"v": 1, "baseline": base_cid, "candidate": cand_cid, "suite": suite.digest,
                    "agent": list(config.agent), "seed": settings.seed,
                    "baseline_release": base_release.release_id if base_release is not None else None})
    run_dir = Path(journal_dir) if journal_dir is not None else store.dir / "gate" / run
    make_dirs(run_dir)  # reef's state: owner-only whatever the umask
    journal = Journal(run_dir / "journal.jsonl")
    trees = run_dir / "trees"
    make_dirs(trees)
    # The agent is given each side's harness without the measuring stick (stick_links.agent_view); the tasks and
    # their checks are read from the whole baseline tree, which no agent is pointed at.
    view = partial(_agent_tree, trees, config)
    dirs = {CURRENT: view(base_cid, base_files), CANDIDATE: view(cand_cid, cand_files)}
    cids = {CURRENT: base_cid, CANDIDATE: cand_cid}
    runner = EpisodeRunner(config.agent, suite_dir=materialise_readonly(trees / base_cid, base_files),
                           seed=settings.seed, workers=workers,
                           environ=environ, store_content=config.store_content,
                           executor=executor or ExecutorSpec.of(environ=environ, config=config.gate))
    by_id = {t.id: t for t in canary}
    specs = [TaskSpec(t.id, t.sentinel) for t in canary]
    base_rid = base_release.release_id if base_release is not None else None
    errors: list[str] = []
    counter = {"done": 0}
    emit = progress or (lambda _e: None)

    def on_result(res, resumed: bool) -> None:
        counter["done"] += 1
        if res.error and len(errors) < 20:
            errors.append(f"{res.task_id} [{res.side} #{res.repeat + 1}]: {res.error}")
        # The record id was journaled with the episode, so the resend after a resume is idempotent.
        rec_id = res.record_id or f"ep.{run[5:]}.{hashlib.sha256(res.key.encode()).hexdigest()[:20]}"
        _ledger_append(ledger, "episode", {"key": res.key, **res.ledger_payload(run)},
                       release_id=base_rid if res.side == CURRENT else None, content_id=res.content_id,
                       record_id=rec_id)
        emit({"event": "episode", "task_id": res.task_id, "side": res.side, "repeat": res.repeat,
              "score": res.score, "resumed": resumed, "done": counter["done"], "error": res.error})

    def sample(reqs: list) -> dict:
        eps = [EpisodeRequest(by_id[tid], side, r, dirs[side], cids[side]) for tid, side, r in reqs]
        got = runner.run_many(eps, journal=journal, on_result=on_result)
        return {(ep.task.id, ep.side, ep.repeat): got[ep.key].score for ep in eps}

    est = estimate(settings, specs)
    emit({"event": "plan", **est, "run": run, "resumable": len(journal)})
    history = (current_history(ledger, base_cid, suite.digest, {t.id for t in specs}, exclude_run=run)
               if settings.policy == "sequential" else None)
    outcome = evaluate(settings, specs, sample, history)
    utilities: dict[str, float | None] = {}
    tests: dict[str, dict] = {}
    attribution_spent = 0
    if attribute:
        emit({"event": "stage", "stage": "attribution", "bullets": len(attribute)})
        before = counter["done"]
        utilities, tests = _attribute(settings, canary, attribute, store, view, dirs, cids, runner, journal, on_result)
        outcome = replace(outcome, trace={**outcome.trace, "bullets": tests})
        attribution_spent = counter["done"] - before
    verdict = Verdict.of(
        outcome,
        episodes_budget=est["max"],  # the plan's ceiling: sequential may pass the full tally (probes, extra passes)
        bullet_utility=utilities, repeats=settings.repeats, run=run,
        baseline_release_id=base_rid, baseline_content_id=base_cid, candidate_content_id=cand_cid,
        suite_digest=suite.digest, attribution_episodes=attribution_spent, errors=tuple(errors),
    )
    payload = verdict.to_json()
    payload.pop("record_id")
    from .redact import redact_text  # a human's working-tree bullet may hold a secret (--allow-secret): never stored

    payload["new_bullets"] = [{"id": b.id, "path": b.path, "text": redact_text(b.text)}
                              for b in new_bullets(base_files, cand_files)]
    record_id = _ledger_append(ledger, "gate", payload, release_id=base_rid, content_id=cand_cid)
    verdict = replace(verdict, record_id=record_id)
    rmtree(trees)
    emit({"event": "done", "decision": verdict.decision, "episodes_spent": verdict.episodes_spent})
    return verdict


def current_history(ledger, content_id: str, suite_digest: str, task_ids: set[str], *,
                    exclude_run: str | None = None) -> dict[str, list[float]]:
    """The scores the harness with `content_id` got on each task in earlier finished gate runs of the same canary
    suite (as either side: a published candidate is the next run's current harness), oldest first.

    Only runs whose gate verdict was recorded count (an interrupted run's episodes may be resent), and only on a
    suite with the same digest (a task edited since then is another task). The sequential policy uses it to order its
    passes and to know which tasks the current harness passes reliably, never in a test's sums."""
    if ledger is None or not content_id:
        return {}
    def text(payload: Mapping, key: str) -> str | None:  # a record from an older or foreign writer may hold anything
        value = payload.get(key)
        return value if isinstance(value, str) else None

    # One pass over the ledger (every line is parsed and hash-checked): a run's gate record follows its episodes,
    # so the episodes are kept with their run and filtered once the finished runs are known.
    runs: set[str | None] = set()
    episodes: list[tuple[str, str, float]] = []
    for r in ledger.iter_records():
        p = r.payload
        if r.kind == "gate":
            if text(p, "suite_digest") == suite_digest:
                runs.add(text(p, "run"))
        elif r.kind == "episode":
            score, tid, run = p.get("score"), text(p, "task_id"), text(p, "run")
            if (run is not None and run != exclude_run and text(p, "content_id") == content_id and tid in task_ids
                    and isinstance(score, (int, float)) and not isinstance(score, bool) and 0.0 <= score <= 1.0):
                episodes.append((run, tid, float(score)))
    out: dict[str, list[float]] = {}
    for run, tid, score in episodes:
        if run in runs:
            out.setdefault(tid, []).append(score)
    return out


def bullet_test(diffs: Sequence[float], settings: GateSettings) -> dict:
    """A bullet's marginal effect tested like a candidate's: the exact sign-flip test of reef_cli.sequential at the
    gate's false-accept budget (1 - confidence), one look over the leave-one-out pairs (candidate minus the candidate
    without that bullet). `admitted`: the bullet's own contribution is positive at that level."""
    from .sequential import group_sequential

    diffs = list(diffs)
    if not diffs:
        return {"utility": None, "pairs": 0, "needed_mean": None, "admitted": False, "up": 0, "down": 0}
    look = group_sequential([diffs], [1.0], 1 - settings.confidence, 1.0)[0]
    return {"utility": rounded(look.mean), "pairs": look.pairs, "admitted": look.crossed,
            "up": sum(1 for d in diffs if d > 0), "down": sum(1 for d in diffs if d < 0),
            "needed_mean": None if look.needed is None else rounded(look.needed / look.pairs)}


def _agent_tree(trees: Path, config, cid: str, files: Mapping) -> Path:
    """The read-only harness a canary episode's agent gets as $REEF_HARNESS_DIR: the side's files without the
    canary tasks and evaluators of the baseline's config (an agent that read `canary/` there scored 1.00)."""
    from .episodes import materialise_readonly
    from .stick_links import agent_view

    return materialise_readonly(trees / f"{cid}.agent", agent_view(files, (config,)))


def _attribute(settings, canary, attribute, store, view, dirs, cids, runner, journal, on_result) -> tuple[dict, dict]:
    """Leave-one-out: utility(b) = mean over tasks and repeats of candidate score minus ablated score, and its
    `bullet_test` (returned as the verdict's trace["bullets"])."""
    from .episodes import EpisodeRequest

    out: dict[str, float | None] = {}
    tests: dict[str, dict] = {}
    cand_reqs = [EpisodeRequest(t, CANDIDATE, r, dirs[CANDIDATE], cids[CANDIDATE])
                 for r in range(settings.repeats) for t in canary]
    for bid, files in attribute.items():
        side = f"ablate:{bid}"
        cid = _content_id(files)
        tree = view(cid, files)
        abl_reqs = [EpisodeRequest(q.task, side, q.repeat, tree, cid) for q in cand_reqs]
        pairs = [q for pair in zip(cand_reqs, abl_reqs) for q in pair]  # interleaved, as the gate runs its sides
        got = runner.run_many(pairs, journal=journal, on_result=on_result)
        cand = [got[q.key].score for q in cand_reqs]
        abl = [got[q.key].score for q in abl_reqs]
        out[bid] = (sum(cand) - sum(abl)) / len(cand) if cand else None
        tests[bid] = bullet_test([c - a for c, a in zip(cand, abl)], settings)
    return out, tests


def publish_gated(store, files: Mapping, verdict: Verdict, *, reason: str, operation: str = "evolve",
                  meta: Mapping | None = None):
    """Publish `files` on the strength of `verdict`: only a publish verdict for exactly these bytes, and only
    while the head is still the release it was judged against (compare-and-swap)."""
    if verdict.decision != PUBLISH:
        raise PolicyError(f"the canary gate rejected this candidate ({verdict.reason}); nothing was published")
    cid = _content_id(files)
    if cid != verdict.candidate_content_id:
        raise PolicyError(f"the verdict {verdict.record_id or verdict.run} was for content "
                          f"{verdict.candidate_content_id[:12]}, not {cid[:12]}; run the gate on these files")
    return store.publish(
        reason=reason, operation=operation, files=dict(files), expected_head=verdict.baseline_release_id,
        evidence=tuple(x for x in (verdict.record_id,) if x), meta={**dict(meta or {}), "gate": verdict.release_meta()},
    )
