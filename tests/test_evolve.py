"""`reef harness evolve/promote/reject/demote` end to end: releases, negative evidence, rollback, crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import reef_exe


# ------------------------------------------------------------------------------------------- helpers (shared)


def init_project(reef, tmp_path: Path, *init_args: str):
    """A project (`reef init` with `init_args`, default the claude template) and its default scenario's ledger."""
    from reef_cli.ledger import Ledger

    root = tmp_path / "proj"
    root.mkdir()
    r = reef("-C", str(root), "init", *(init_args or ("--template", "claude")))
    assert r.code == 0, r.err
    return root, Ledger(root / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")


def session(ledger, fb, *, observe_only: bool = False, exit_code: int = 0, stderr: str = "", score: float = 0.0):
    """One recorded run and a report on it; returns the report record."""
    run = ledger.append("interaction", {"argv": ["agent", "-p", "task"], "exit_code": exit_code,
                                        "observe_only": observe_only, "routing": [],
                                        "stderr": {"excerpt": stderr, "length": len(stderr)}},
                        release_id=None, content_id=None)
    if fb is None:
        return run
    return ledger.append("report", {"score": score, "feedback": fb, "receipts": [run.record_id]},
                         release_id=None, content_id=None)


def feedback(ledger, fb, n: int = 1, **kw) -> list[str]:
    return [session(ledger, fb, **kw).record_id for _ in range(n)]


def evolve(reef, root: Path, *args: str, code: int = 0) -> dict:
    r = reef("-C", str(root), "harness", "evolve", "--json", *args)
    assert r.code == code, r.err
    return json.loads(r.out) if r.out.strip() else {}


def block_ids(path: Path) -> list[str]:
    from reef_cli.blocks import parse

    if not path.exists():
        return []
    block = parse(path.read_text(), source=str(path))
    return [b.id for b in block.bullets] if block else []


def memory(root: Path) -> dict:
    doc = json.loads((root / "reef/memory/patterns.json").read_text())
    return {p["key"]: p for p in doc["patterns"]}


def releases(reef, root: Path) -> list[dict]:
    return json.loads(reef("-C", str(root), "log", "--json").out)


LINT = {"lesson": "Run the linter before committing."}
LINT_KEY = "do:before+commit+linter+run"


def reearn(reef, root: Path, n: int) -> None:
    """Publish harness.yaml with `negative_evidence.reearn: n`."""
    cfg = root / "harness.yaml"
    cfg.write_text(cfg.read_text() + f"negative_evidence:\n  reearn: {n}\n")
    assert reef("-C", str(root), "publish", "-m", f"reearn {n}").code == 0


# ------------------------------------------------------------------------------------------- release shape


def test_evolve_publishes_one_release_with_evidence_and_bullet_ops(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    ids = feedback(ledger, LINT, 5)
    out = evolve(reef, root)
    assert out["status"] == "published" and out["gated"] is False
    assert out["warnings"] and "not gated" in out["warnings"][0]
    rel = out["release"]
    assert rel["operation"] == "evolve" and rel["step"] == 2
    assert set(ids) <= set(rel["evidence"])
    pat = memory(root)[LINT_KEY]
    assert f"+{pat['id']} CLAUDE.md" in rel["reason"] and "not gated" in rel["reason"]
    assert rel["meta"]["bullets"][0]["op"] == "add" and rel["meta"]["patterns"] == [LINT_KEY]
    assert block_ids(root / "CLAUDE.md") == [pat["id"]]
    st = json.loads(reef("-C", str(root), "status", "--json").out)
    assert st["clean"] is True  # the working tree follows the release
    again = evolve(reef, root)
    assert again["status"] == "nothing" and len(releases(reef, root)) == 2


def test_dry_run_and_review_publish_nothing(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    before = (root / "CLAUDE.md").read_text()
    dry = evolve(reef, root, "--dry-run")
    assert dry["status"] == "dry-run" and any("CLAUDE.md" in line for line in dry["diff"])
    review = evolve(reef, root, "--review")
    assert review["status"] == "review" and review["pending"]["status"] == "pending"
    assert len(releases(reef, root)) == 1 and (root / "CLAUDE.md").read_text() == before
    pid = review["pending"]["proposal_id"]
    listed = json.loads(reef("-C", str(root), "harness", "proposals", "--json").out)
    assert [p["proposal_id"] for p in listed] == [pid]
    assert any(line.startswith("+ [CLAUDE.md]") for line in listed[0]["diff"])
    r = reef("-C", str(root), "harness", "promote", pid, "--json")
    assert r.code == 0, r.err
    promoted = json.loads(r.out)
    assert promoted["release"]["operation"] == "promote" and promoted["pending"]["status"] == "promoted"
    assert block_ids(root / "CLAUDE.md") == [memory(root)[LINT_KEY]["id"]]
    r = reef("-C", str(root), "harness", "promote", pid)
    assert r.code == 3 and "is promoted, not pending" in r.err


def test_review_text_output_shows_a_per_bullet_diff(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    r = reef("-C", str(root), "harness", "evolve", "--review")
    assert r.code == 0, r.err
    assert "proposed:" in r.out and "+ [CLAUDE.md] reef:" in r.out and "Run the linter" in r.out
    assert "reef harness promote prop_" in r.out


# ------------------------------------------------------------------------------------------- negative evidence


def test_rejected_proposal_is_suppressed_until_reearned(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    pid = evolve(reef, root, "--review")["pending"]["proposal_id"]
    r = reef("-C", str(root), "harness", "reject", pid, "--reason", "not our style", "--json")
    assert r.code == 0, r.err
    neg = json.loads(r.out)["negatives"]
    assert [(n["key"], n["origin"], n["needed"]) for n in neg] == [(LINT_KEY, "human", 5)]
    r = reef("-C", str(root), "harness", "reject", pid)
    assert r.code == 3 and f"proposal {pid} is rejected, not pending" in r.err
    r = reef("-C", str(root), "harness", "reject", "prop_nope")
    assert r.code == 1 and "no proposal 'prop_nope'" in r.err
    out = evolve(reef, root)
    assert out["status"] in ("published", "nothing") and not any(o["op"] == "add" for o in out["ops"])
    sup = memory(root)[LINT_KEY]["suppressed"]
    assert sup["needed"] == 5 and sup["earned"] == 0 and sup["reason"] == "not our style"
    feedback(ledger, LINT, 4)
    out = evolve(reef, root)
    assert not any(o["op"] == "add" for o in out["ops"])
    assert memory(root)[LINT_KEY]["suppressed"]["earned"] == 4  # the counter really counts
    feedback(ledger, LINT, 1)
    out = evolve(reef, root)  # re-earned; with count 10 it now aims at the skill tier (Evolvable: a human decides)
    assert memory(root)[LINT_KEY]["suppressed"] is None and memory(root)[LINT_KEY]["count"] == 10
    assert out["pending"]["keys"] == [LINT_KEY]
    assert out["pending"]["ops"][0]["path"].startswith(".claude/skills/") and out["pending"]["ops"][0]["op"] == "add"


def test_reearn_count_is_configurable(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    reearn(reef, root, 2)
    feedback(ledger, LINT, 5)
    pid = evolve(reef, root, "--review")["pending"]["proposal_id"]
    assert reef("-C", str(root), "harness", "reject", pid).code == 0
    feedback(ledger, LINT, 1)
    assert not evolve(reef, root)["ops"]
    feedback(ledger, LINT, 1)
    assert [o["op"] for o in evolve(reef, root)["ops"]] == ["add"]


def test_rollback_is_negative_evidence_and_reearning_restores(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    reearn(reef, root, 2)
    feedback(ledger, LINT, 5)
    pub = evolve(reef, root)
    bid = memory(root)[LINT_KEY]["id"]
    assert block_ids(root / "CLAUDE.md") == [bid]
    r = reef("-C", str(root), "rollback", "2")
    assert r.code == 0, r.err
    assert block_ids(root / "CLAUDE.md") == []
    out = evolve(reef, root)
    assert not any(o["op"] == "add" for o in out["ops"])
    assert any(n["origin"] == "rollback" and n["key"] == LINT_KEY for n in out["negatives"])
    mem = memory(root)[LINT_KEY]
    assert mem["count"] == 5 and mem["suppressed"]["origin"] == "rollback"
    assert pub["release"]["release_id"] in mem["suppressed"]["reason"] and "rolled back" in mem["suppressed"]["reason"]
    again = evolve(reef, root)  # recorded once, however often evolve looks at the rollback
    assert not again["negatives"]
    feedback(ledger, LINT, 1)
    assert not any(o["op"] == "add" for o in evolve(reef, root)["ops"])
    feedback(ledger, LINT, 1)
    out = evolve(reef, root)
    assert [o["op"] for o in out["ops"]] == ["add"] and block_ids(root / "CLAUDE.md") == [bid]


def test_demote_removes_the_bullet_and_resets_the_pattern(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    evolve(reef, root)
    bid = memory(root)[LINT_KEY]["id"]
    r = reef("-C", str(root), "harness", "demote", f"reef:{bid}", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["release"]["meta"]["action"] == "demote"
    assert [(o["op"], o["path"]) for o in out["ops"]] == [("remove", "CLAUDE.md")]
    assert block_ids(root / "CLAUDE.md") == []
    mem = memory(root)[LINT_KEY]
    assert mem["count"] == 0 and mem["suppressed"]["needed"] == 5
    again = json.loads(reef("-C", str(root), "harness", "demote", LINT_KEY, "--json").out)
    assert again["status"] == "nothing" and not again["negatives"] and releases(reef, root)[0]["step"] == 3
    feedback(ledger, LINT, 4)
    assert not evolve(reef, root)["ops"]  # count 4 would reach the notes tier, but it has not re-earned 5 yet
    assert block_ids(root / "CLAUDE.md") == [] and (root / "CLAUDE.local.md").exists() is False
    r = reef("-C", str(root), "harness", "demote", "nope:nothing")
    assert r.code == 1 and "neither a pattern key nor a bullet id" in r.err


def test_human_promote_by_key_moves_a_pattern_up_one_surface(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 1)
    assert evolve(reef, root)["status"] == "published"  # memory only
    r = reef("-C", str(root), "harness", "promote", LINT_KEY, "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert [(o["op"], o["path"]) for o in out["ops"]] == [("add", "CLAUDE.local.md")]
    assert out["release"]["meta"]["by"] == "human"
    r = reef("-C", str(root), "harness", "promote", LINT_KEY, "--json")
    ops = json.loads(r.out)["ops"]
    assert sorted((o["op"], o["path"]) for o in ops) == [("add", "CLAUDE.md"), ("remove", "CLAUDE.local.md")]


# ------------------------------------------------------------------------------------------- crash safety


def _evolve_proc(root: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([reef_exe(), "-C", str(root), "harness", "evolve", "--json"], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60)


@pytest.mark.parametrize("point", ["planned", "published"])
def test_sigkill_during_evolve_then_a_clean_resume(reef, tmp_path, point):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    feedback(ledger, {"lesson": "Use tabs for indentation."}, 3)
    killed = _evolve_proc(root, {"REEF_FAULT": f"evolve:{point}"})
    assert killed.returncode == -signal.SIGKILL
    rels = releases(reef, root)
    assert len(rels) == (2 if point == "published" else 1)  # a complete release or none
    assert (root / ".reef/scenarios/default/evolve/journal.json").exists()
    done = _evolve_proc(root, {})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["resumed"] is True and out["status"] == "published"
    rels = releases(reef, root)
    assert len(rels) == 2 and rels[0]["meta"]["evolve_id"] == out["evolve_id"]
    assert not (root / ".reef/scenarios/default/evolve/journal.json").exists()
    assert len(block_ids(root / "CLAUDE.md")) == 1 and len(block_ids(root / "CLAUDE.local.md")) == 1
    assert evolve(reef, root)["status"] == "nothing"
    assert json.loads(reef("-C", str(root), "status", "--json").out)["clean"] is True
    props = [r for r in ledger.iter_records(kind="proposal")]
    assert len({r.record_id for r in props}) == len(props) == 1


def test_a_stale_journal_is_dropped_when_the_head_moved(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    assert _evolve_proc(root, {"REEF_FAULT": "evolve:planned"}).returncode == -signal.SIGKILL
    (root / "notes.txt").write_text("x")
    (root / "CLAUDE.local.md").write_text("# mine\n")
    assert reef("-C", str(root), "publish", "-m", "human edit").code == 0
    out = evolve(reef, root)
    assert out["resumed"] is False and out["status"] == "published"
    assert len(block_ids(root / "CLAUDE.md")) == 1


def test_unpublished_edits_on_a_target_are_refused(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    claude = root / "CLAUDE.md"
    claude.write_text(claude.read_text() + "\nmy unpublished line\n")
    r = reef("-C", str(root), "harness", "evolve")
    assert r.code == 3 and "CLAUDE.md has unpublished edits" in r.err
    assert "my unpublished line" in claude.read_text() and len(releases(reef, root)) == 1


# ------------------------------------------------------------------------------------------- with a canary gate

AGENT = """import os, pathlib, sys
text = (pathlib.Path(os.environ["REEF_HARNESS_DIR"]) / "CLAUDE.md").read_text()
if "linter" in text.lower():
    pathlib.Path("linted").write_text("yes")
if "tabs" in text.lower():
    pathlib.Path("broken").write_text("yes")
print("done")
"""


def _gated_project(reef, tmp_path, *, check: str):
    root, ledger = init_project(reef, tmp_path)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    (root / "canary").mkdir()
    tasks = "\n".join(f"  - {{id: t{i}, prompt: 'task {i}', check: '{check}'}}" for i in range(3))
    (root / "canary" / "suite.yaml").write_text(f"tasks:\n{tasks}\n")
    cfg = root / "harness.yaml"
    text = cfg.read_text().replace('agent: [reef-claude, -p, "{prompt}"]', f'agent: ["{{python}}", "{agent}", "{{prompt}}"]')
    cfg.write_text(text.replace("  evaluators: [evaluators/**]", "  evaluators: [evaluators/**]\n  repeats: 1"))
    r = reef("-C", str(root), "publish", "-m", "canary suite and agent")
    assert r.code == 0, r.err
    return root, ledger


def test_gated_evolve_publishes_on_the_verdict_with_attribution(reef, tmp_path):
    root, ledger = _gated_project(reef, tmp_path, check="test -f linted")
    feedback(ledger, LINT, 5)
    out = evolve(reef, root)
    assert out["status"] == "published" and out["gated"] is True and not out["warnings"]
    assert out["verdict"]["decision"] == "publish"
    rel = out["release"]
    assert rel["meta"]["gate"]["decision"] == "publish" and out["verdict"]["record_id"] in rel["evidence"]
    assert "not gated" not in rel["reason"]
    bid = memory(root)[LINT_KEY]["id"]
    assert out["verdict"]["bullet_utility"][bid] == pytest.approx(1.0)
    evolve(reef, root)  # the next reflect folds the gate's measured utility into memory
    assert memory(root)[LINT_KEY]["utility"] == pytest.approx(1.0)


def test_gate_rejection_is_negative_evidence(reef, tmp_path):
    root, ledger = _gated_project(reef, tmp_path, check="test ! -f broken")
    feedback(ledger, {"lesson": "Use tabs for indentation."}, 5)
    out = evolve(reef, root)
    assert out["status"] == "rejected" and out["verdict"]["decision"] == "reject"
    assert [(n["key"], n["origin"]) for n in out["negatives"]] == [("do:indentation+tab+use", "gate")]
    assert block_ids(root / "CLAUDE.md") == []
    rel = releases(reef, root)[0]
    assert rel["meta"]["bullets"] == [] and "gate rejected" in rel["reason"]  # pattern memory only
    out = evolve(reef, root)
    assert out["status"] == "published" and not out["ops"]
    assert memory(root)["do:indentation+tab+use"]["suppressed"]["origin"] == "gate"


def test_sigkill_in_the_middle_of_the_gate_resumes_its_episodes(reef, tmp_path):
    import time

    root, ledger = _gated_project(reef, tmp_path, check="test -f linted")
    agent = tmp_path / "agent.py"
    agent.write_text("import time\ntime.sleep(0.3)\n" + AGENT)
    feedback(ledger, LINT, 5)
    proc = subprocess.Popen([reef_exe(), "-C", str(root), "harness", "evolve", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    evdir = root / ".reef/scenarios/default/evolve"
    deadline = time.time() + 30
    while time.time() < deadline:
        journals = list(evdir.glob("evo_*/gate/journal.jsonl"))
        if journals and journals[0].read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the gate never journaled an episode")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(releases(reef, root)) == 2  # init + config: no release from the killed evolve
    done_before = journals[0].read_text().count("\n")
    out = evolve(reef, root)
    assert out["resumed"] is True and out["status"] == "published" and out["verdict"]["decision"] == "publish"
    assert len(block_ids(root / "CLAUDE.md")) == 1 and len(releases(reef, root)) == 3
    keys = [r.payload["key"] for r in ledger.iter_records(kind="episode")]
    assert len(keys) == len(set(keys)) and len(keys) >= done_before  # resumed episodes are not run or logged twice


def test_a_gated_move_up_the_ladder_needs_no_regression_not_an_improvement(reef, tmp_path):
    root, ledger = _gated_project(reef, tmp_path, check="test -f linted")
    (tmp_path / "agent.py").write_text(AGENT.replace('/ "CLAUDE.md").read_text()',
                                                     '/ "CLAUDE.md").read_text() + (pathlib.Path(os.environ["REEF_HARNESS_DIR"]) / "CLAUDE.local.md").read_text() if (pathlib.Path(os.environ["REEF_HARNESS_DIR"]) / "CLAUDE.local.md").exists() else (pathlib.Path(os.environ["REEF_HARNESS_DIR"]) / "CLAUDE.md").read_text()'))
    feedback(ledger, LINT, 3)
    first = evolve(reef, root)
    assert first["verdict"]["decision"] == "publish" and len(block_ids(root / "CLAUDE.local.md")) == 1
    feedback(ledger, LINT, 2)
    out = evolve(reef, root)
    assert out["verdict"]["decision"] == "reject" and out["verdict"]["accepted_as"] == "non-regressing move"
    assert out["status"] == "published" and not out["negatives"]
    assert "non-regressing move" in out["release"]["reason"] and out["warnings"]
    assert block_ids(root / "CLAUDE.local.md") == [] and len(block_ids(root / "CLAUDE.md")) == 1


def test_the_whole_loop_through_reef_run_and_reef_report(reef, tmp_path):
    import re

    root, ledger = init_project(reef, tmp_path)
    receipts = []
    for i in range(5):
        r = reef("-C", str(root), "run", "--", sys.executable, "-c", "import sys; sys.stderr.write('Error: lint failed\\n'); sys.exit(1)")
        assert r.code == 1
        receipts.append(re.search(r"receipt (\S+)", r.err).group(1))
        r = reef("-C", str(root), "report", "--score", "0", "--feedback",
                 "It did not lint. Always run the linter before committing.", "--receipt", receipts[-1])
        assert r.code == 0, r.err
    out = evolve(reef, root)
    assert out["status"] == "published"
    texts = {p["text"]: p for p in memory(root).values()}
    lint = texts["Always run the linter before committing."]
    failure = next(p for t, p in texts.items() if "Error: lint failed" in t)
    assert failure["count"] == 5 and failure["origins"] == {"failure": 5}
    assert lint["count"] == 5 and sorted(block_ids(root / "CLAUDE.md")) == sorted([lint["id"], failure["id"]])
    assert set(out["release"]["evidence"]) >= set(lint["evidence"])


def test_harness_review_recipe_always_proposes(reef, tmp_path):
    """A scenario bound to recipes/harness-review.yaml never publishes from evolve: every change waits for promote."""
    root, ledger = init_project(reef, tmp_path, "--recipe", "harness-review")
    feedback(ledger, LINT, 5)
    out = evolve(reef, root)
    assert out["status"] == "review" and out["pending"]["status"] == "pending"
    assert len(releases(reef, root)) == 1
    r = reef("-C", str(root), "harness", "promote", out["pending"]["proposal_id"], "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["release"]["operation"] == "promote" and len(releases(reef, root)) == 2
