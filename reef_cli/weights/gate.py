"""The weight gate: after a hot swap, new weights keep the head only if they do not lose to the previous weights.

Two ways to judge, chosen before the trainer starts (`plan`):

* canary tasks (the default whenever there are some). A weights release holds a checkpoint manifest only, so the
  tasks, the agent that runs them and the gate settings come from a harness scenario's published head (harness.yaml
  `agent`, `gate.*`, `gate.tasks`, Frozen like every canary task): `reef train --canary-scenario NAME` (env
  REEF_CANARY_SCENARIO), else the project's default scenario. Where there are none (or `gate.policy: always`, or
  `--no-gate`) every successful step publishes, as the reference's weight path does.
  The agent runs every canary task `gate.repeats` times with its model calls going through `reef serve
  --upstream-api sglang` in front of the engine (REEF_SERVE_URL when that gateway fronts this scenario through SGLang,
  else one started on 127.0.0.1 for the measurement, `gateway.py`): every answer is checked against the load id of the
  head release, so a stale answer is a refused call, never a silent score. Episodes are seeded per task and repeat
  (the harness gate's common random numbers), so the new weights' episode (t, r) pairs with the stored one.
* `--eval CMD` (env REEF_WEIGHT_EVAL): a command printing one score; lose = a lower score than the stored one.

Deciding (the harness gate's statistics turned round: a weight step is small and the reference publishes every one,
so it is kept unless it loses): the candidate loses if a sentinel task the previous weights passed now scores below
0.5, if a task's mean paired difference is below -gate.tolerance, or if the seeded bootstrap's one-sided upper bound
(gate.confidence) of the mean paired difference over tasks is below 0 — worse with confidence.

The baseline is the previous weight release's stored verdict (train/verdicts.json, by release id; a rollback release
inherits its target's). When there is none to compare with (the first gated step, or the suite, agent, seed or
repeats changed since), the previous weights are measured first, before the trainer runs (so a gate that cannot
judge stops the step before any GPU time is spent), while the engine still serves them.
Only a scenario's very first weight release (no earlier weights: `reef train` without `--init`) publishes on its own
verdict, which becomes the next step's baseline.

Canary traffic is held out of training: the agent's base URL carries the session `reef-weight-gate-<run>`, and the
record ids the gate's own gateway logged are listed in its `weight_canary` ledger record; `records.select` skips both.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import InvalidInput, NotFound, ReefError, StoreError
from ..releases import canonical

ENV_CANARY = "REEF_CANARY_SCENARIO"
ENV_EVAL = "REEF_WEIGHT_EVAL"
ENV_GATE = "REEF_WEIGHT_GATE"  # off: as --no-gate, for a project whose canary agent cannot judge weights
GATE_SESSION_PREFIX = "reef-weight-gate-"
CANARY_RECORD = "weight_canary"
KEEP, ROLLBACK = "keep", "rollback"


class GateCannotRun(ReefError):
    pass


@dataclass(frozen=True)
class CanarySuite:
    """The canary tasks that judge weights, read from a harness scenario's published head."""

    scenario: str
    release: object
    files: dict
    config: object
    tasks: tuple
    settings: object  # reef_cli.gate_policies.GateSettings
    digest: str

    def key(self) -> dict:
        """What two verdicts must share to be compared episode by episode."""
        return {"suite_digest": self.digest, "agent": list(self.config.agent), "seed": self.settings.seed,
                "repeats": self.settings.repeats}

    def describe(self) -> str:
        return (f"{len(self.tasks)} canary task(s) x {self.settings.repeats} of scenario '{self.scenario}' "
                f"(release {self.release.step})")


@dataclass(frozen=True)
class GatePlan:
    kind: str  # canary | eval
    suite: CanarySuite | None = None
    command: str | None = None

    @property
    def shown(self) -> str:
        """The --eval command as reef stores and prints it: a key typed on it redacted (it runs with the key)."""
        return shown_command(self.command or "")


def shown_command(cmd: str) -> str:
    from ..redact import redact

    return redact(cmd)[0]


def plan(project, scenario: str, *, eval_cmd: str | None, canary_scenario: str | None, enabled: bool,
         environ: dict) -> GatePlan | None:
    """How this step's weights will be judged, or None (publish every step). Checked before the trainer runs, so a
    gate that cannot run fails before any GPU time is spent."""
    if not enabled or environ.get(ENV_GATE, "").strip().lower() in ("off", "0", "no", "false"):
        return None
    cmd = eval_cmd or environ.get(ENV_EVAL)
    if cmd:
        return GatePlan("eval", command=cmd)
    suite = find_suite(project, scenario, canary_scenario or environ.get(ENV_CANARY))
    return GatePlan("canary", suite=suite) if suite is not None else None


def find_suite(project, weights_scenario: str, name: str | None) -> CanarySuite | None:
    """The canary suite of harness scenario `name` (an error when it has none), else of the project's default
    scenario (None when it has none: that project simply has no weight gate)."""
    from ..config import CONFIG_NAME, parse_config
    from ..gate_policies import GateSettings
    from ..store import HarnessStore
    from ..tasks import load_suite

    explicit = name is not None
    name = name or project.default_scenario()

    def none(why: str) -> None:
        if explicit:
            raise InvalidInput(f"--canary-scenario {name}: {why}")
        return None

    if name == weights_scenario:
        return none("that is the weights scenario itself; name the harness scenario whose canary tasks judge it")
    store = HarnessStore(project, name)
    if not store.exists():
        if explicit:
            raise NotFound(f"--canary-scenario {name}: no such scenario (known: {', '.join(project.scenarios())})")
        return None
    head = store.head()
    if head is None:
        return none("it has no release yet; publish its harness with the canary tasks first")
    files = store.files_of(head)
    if CONFIG_NAME not in files:
        return none(f"its head release {head.release_id} is not a harness (no {CONFIG_NAME})")
    config = parse_config(files[CONFIG_NAME].data, source=f"{CONFIG_NAME} (scenario {name}, release {head.step})")
    suite = load_suite(files, config.gate.tasks)
    if not suite.canary:
        return none(f"release {head.step} has no canary tasks (harness.yaml gate.tasks)")
    settings = GateSettings.from_config(config.gate)
    if settings.policy == "always":
        return None
    if not config.agent:
        raise InvalidInput(f"harness.yaml of scenario '{name}' (release {head.step}) has canary tasks but no 'agent' "
                           "to run them with, so new weights cannot be judged; set e.g. agent: [my-agent, -p, "
                           "\"{prompt}\"] and publish it, or pass --no-gate to publish every step")
    return CanarySuite(name, head, dict(files), config, tuple(suite.canary), settings, suite.digest)


# -- verdicts --------------------------------------------------------------------------------------------------------
def verdicts_path(store) -> Path:
    return store.dir / "train" / "verdicts.json"


def _verdicts(path: Path) -> dict | None:
    """The stored verdicts; {} when there are none, None when the file is damaged (not a JSON object). Something
    that is not a readable file there (a directory, no permission) is refused with one line naming it: reef did
    not put it there, so it is neither damaged state to set aside nor to be replaced."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except IsADirectoryError:
        raise InvalidInput(f"{path} is a directory, not the weight gate's verdicts file; move it away "
                           "(nothing was changed)") from None
    except OSError as exc:
        raise StoreError(f"cannot read the weight gate's verdicts {path}: {exc.strerror or exc} "
                         "(nothing was changed)") from None
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def stored_verdict(store, release) -> dict | None:
    """A damaged file counts as no stored verdict: the gate then measures the previous weights again."""
    return (_verdicts(verdicts_path(store)) or {}).get(release.release_id)


def store_verdict(store, release, verdict: dict) -> None:
    """The verdict of a kept release, beside the chain (releases are immutable): the next gate's baseline. A damaged
    file is kept aside as verdicts.json.damaged (an earlier one moves to .damaged.N: never overwritten in silence);
    the ledger's weight_gate records hold the same verdicts."""
    from ..durable import write_atomic

    path = verdicts_path(store)
    data = _verdicts(path)
    if data is None:
        aside = path.with_name(path.name + ".damaged")
        if aside.exists():  # an earlier damaged copy is kept too, as .damaged.N
            n = 1
            while aside.with_name(f"{aside.name}.{n}").exists():
                n += 1
            os.replace(aside, aside.with_name(f"{aside.name}.{n}"))
        os.replace(path, aside)
        data = {}
    data[release.release_id] = verdict
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, canonical(data) + b"\n")


def comparable(suite: CanarySuite, verdict: dict | None) -> bool:
    return (isinstance(verdict, dict) and verdict.get("kind") == "canary"
            and all(verdict.get(k) == v for k, v in suite.key().items()))


# -- measuring -------------------------------------------------------------------------------------------------------
def measure(store, suite: CanarySuite, *, engine_url: str, release, run_dir: Path, run_id: str, environ: dict,
            emit: Callable[[dict], None], warnings: list[str]) -> dict:
    """Run every canary task `repeats` times against the weights the engine serves now (those of `release`, the
    head), through a gateway; returns the verdict to store, and records it (with the held-out record ids)."""
    from ..episodes import materialise_readonly, rmtree
    from ..stick_links import agent_view

    version = release.runtime_load_id
    tag = f"{run_id[-8:].lower()}-{release.step}"
    session = f"{GATE_SESSION_PREFIX}{tag}"
    out = run_dir / "gate" / f"step-{release.step}"
    out.mkdir(parents=True, exist_ok=True)
    harness = materialise_readonly(out / "harness", suite.files)  # the tasks and checks are read from here
    # the agent is given the harness without them (stick_links.agent_view): it must not read its own exam
    view = materialise_readonly(out / "harness.agent", agent_view(suite.files, (suite.config,)))
    k = suite.settings.repeats
    emit({"event": "gate", "weight_version": version, "episodes": k * len(suite.tasks)})
    try:
        got, reqs, gw = _episodes(store, suite, engine_url, (harness, view), out, session, version, environ, emit,
                                  warnings)
    finally:  # read-only copies left in .reef/ would make a plain `rm -rf` of a run directory fail
        for tree in (harness, view):
            rmtree(tree)
            tree.with_name(tree.name + ".complete").unlink(missing_ok=True)
    episodes = {f"{q.task.id}#{q.repeat}": got[q.key].score for q in reqs}
    from ..redact import redact

    # an episode's error is the agent's own words (a traceback may hold a key it was given): stored redacted
    errors = [redact(f"{got[q.key].task_id} #{q.repeat + 1}: {got[q.key].error}")[0]
              for q in reqs if got[q.key].error]
    fix = (f"check the 'agent' in harness.yaml of scenario '{suite.scenario}' (it must call the model at "
           "$OPENAI_BASE_URL), or pass --canary-scenario NAME or --no-gate (env REEF_WEIGHT_GATE=off)")
    if reqs and len(errors) == len(reqs):  # nothing was measured: the agent, not the weights, is what failed
        raise GateCannotRun(f"every canary episode failed ({len(errors)}), e.g. {errors[0]}; {fix}")
    if not gw.external and gw.answered == 0:  # scores that no model answer produced say nothing about weights
        raise GateCannotRun(f"the agent made no model call that the gate's reef serve answered in {len(reqs)} canary "
                            f"episode(s) (log: {gw.log_path}); {fix}")
    errors = errors[:20]
    per_task = {t.id: _mean([episodes[f"{t.id}#{r}"] for r in range(k)]) for t in suite.tasks}
    verdict = {"kind": "canary", **suite.key(), "canary_scenario": suite.scenario,
               "canary_release_id": suite.release.release_id, "release_id": release.release_id,
               "runtime_load_id": version, "episodes": episodes, "per_task": per_task,
               "score": _mean(list(episodes.values())), "errors": errors}
    held_out = sorted(gw.record_ids)
    store.ledger().append(CANARY_RECORD, {"run_id": run_id, "session": session, "held_out": held_out,
                                          "gateway": "external" if gw.external else "own", **verdict},
                          release_id=release.release_id, content_id=release.content_id)
    return verdict


def _episodes(store, suite: CanarySuite, engine_url: str, trees: tuple[Path, Path], out: Path, session: str, version,
              environ: dict, emit, warnings: list[str]):
    """Every canary task x repeat on the weights served now, the agent's model calls through a gateway; `trees`:
    (the whole harness, for the tasks' checks; the agent's view of it)."""
    from ..episodes import EpisodeRequest, EpisodeRunner, Journal
    from ..executors import ExecutorSpec
    from .gateway import Gateway

    harness, view = trees
    k = suite.settings.repeats
    with Gateway(store.project, store.scenario, engine_url, out / "serve.log", environ, warnings) as gw:
        base = f"{gw.url}/session/{session}/v1"
        # REEF_VIA_SERVE routes a reef-<agent> wrapper's model calls through the same gateway
        agent_env = {**environ, "REEF_SERVE_URL": gw.url, "REEF_SERVE_BASE_URL": base, "OPENAI_BASE_URL": base,
                     "REEF_SERVE_SESSION": session, "REEF_VIA_SERVE": gw.url, "REEF_WEIGHT_VERSION": str(version)}
        runner = EpisodeRunner(suite.config.agent, suite_dir=harness, seed=suite.settings.seed, environ=agent_env,
                               store_content=suite.config.store_content,
                               executor=ExecutorSpec.of(environ=environ, config=suite.config.gate))
        side = f"weights:{version}"
        reqs = [EpisodeRequest(t, side, r, view, suite.release.content_id) for r in range(k) for t in suite.tasks]
        got = runner.run_many(reqs, journal=Journal(out / "journal.jsonl"),
                              on_result=lambda res, _resumed: emit({"event": "episode", "task_id": res.task_id,
                                                                     "score": res.score}))
    return got, reqs, gw


def _mean(xs: list[float]) -> float:
    return round(sum(xs) / len(xs), 6) if xs else 0.0


# -- deciding --------------------------------------------------------------------------------------------------------
def judge(suite: CanarySuite, new: dict, old: dict | None) -> dict:
    """Keep or roll back `new` against `old` (see the module docstring); `old` None keeps (nothing to lose to)."""
    from ..gate_policies import SENTINEL_PASS, bootstrap_interval

    s = suite.settings
    out = {"kind": "canary", "score": new["score"], "baseline": old["score"] if old else None,
           "baseline_release_id": old.get("release_id") if old else None, "per_task": [], "interval": None}
    if old is None:
        return {**out, "decision": KEEP, "passed": True,
                "reason": f"first weight verdict: mean canary score {new['score']:.3f} (no earlier weights)"}
    diffs, losses = [], []
    for t in suite.tasks:
        pairs = [(new["episodes"][key], old["episodes"][key]) for r in range(s.repeats)
                 if (key := f"{t.id}#{r}") in new["episodes"] and key in old["episodes"]]
        if not pairs:
            continue
        d = sum(a - b for a, b in pairs) / len(pairs)
        cand, prev = (sum(a for a, _ in pairs) / len(pairs), sum(b for _, b in pairs) / len(pairs))
        diffs.append(d)
        status = "improved" if d > 0 else "worse" if d < 0 else "same"
        if t.sentinel and cand < SENTINEL_PASS <= prev:
            status = "sentinel-failed"
            losses.append(f"sentinel task '{t.id}' failed (mean {cand:.2f}, was {prev:.2f})")
        elif d < -s.tolerance - 1e-9:
            status = "regressed"
            losses.append(f"task '{t.id}' regressed by {-d:.2f} (tolerance {s.tolerance:g})")
        out["per_task"].append({"task_id": t.id, "sentinel": t.sentinel, "candidate": round(cand, 6),
                                "current": round(prev, 6), "delta": round(d, 6), "status": status})
    lo, hi = bootstrap_interval(diffs, s.confidence, s.resamples, s.seed)
    out["interval"] = {"lo": round(lo, 6), "hi": round(hi, 6), "level": s.confidence}
    mean = sum(diffs) / len(diffs) if diffs else 0.0
    level = f"{s.confidence:.0%}"
    if not losses and diffs and hi < -1e-12:
        losses.append(f"worse: mean paired difference {mean:+.3f}, {level} upper bound {hi:+.3f} < 0")
    if losses:
        return {**out, "decision": ROLLBACK, "passed": False, "reason": "; ".join(losses)}
    return {**out, "decision": KEEP, "passed": True,
            "reason": f"not worse: mean paired difference {mean:+.3f} ({level} bounds {lo:+.3f}..{hi:+.3f})"}


def judge_score(score: float, old: dict | None, command: str) -> dict:
    """`--eval CMD`: lose = a lower score than the previous release's stored one."""
    baseline = old.get("score") if old else None
    passed = baseline is None or score >= baseline
    reason = (f"first verdict {score:g}" if baseline is None else
              f"{score:g} {'>=' if passed else '<'} {baseline:g}")
    return {"kind": "eval", "score": score, "baseline": baseline, "command": command, "passed": passed,
            "decision": KEEP if passed else ROLLBACK, "reason": reason,
            "baseline_release_id": old.get("release_id") if old else None}


def run_eval(cmd: str, url: str, version: str, environ: dict, timeout_s: float = 3600, cwd: Path | None = None) -> float:
    """Run the evaluation command against the engine; its last stdout line is a number or {"score": number}."""
    from ..redact import excerpt

    shown = shown_command(cmd)
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise InvalidInput(f"--eval {shown!r}: cannot split it like a shell ({exc})") from None
    env = {**environ, "REEF_ENGINE_URL": url, "REEF_WEIGHT_VERSION": version}
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=cwd)
    except FileNotFoundError:
        raise InvalidInput(f"--eval: command not found: {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise ReefError(f"--eval {shown!r} timed out after {timeout_s:g} s") from None
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        raise ReefError(f"--eval {shown!r} exited {done.returncode} without a score")
    last = lines[-1].strip()
    # the line is the command's own output (a log line may hold a token it printed): shown redacted
    not_a_score = ReefError(f"--eval {shown!r}: last line {excerpt(last, 80)[0]!r} is not a number or "
                            "{\"score\": N}")
    try:
        value = json.loads(last)
    except ValueError:
        raise not_a_score from None
    if isinstance(value, dict):
        value = value.get("score")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise not_a_score
    return float(value)
