"""The canary gate: statistics and policies on simulated scores, the episode runner on real processes, and
`reef eval` / `reef ci` end to end with the example agent."""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import example_suite_project, reef_exe, set_block
from reef_cli.episodes import EpisodeRequest, EpisodeRunner, Journal, parse_score, run_command
from reef_cli.errors import InvalidInput, PolicyError
from reef_cli.gate import Verdict
from reef_cli.gate_policies import (
    CANDIDATE, CURRENT, PUBLISH, REJECT, GateSettings, TaskSpec, _pair_reqs, _Paired, _Book, bootstrap_interval,
    estimate, evaluate, screen_tasks,
)
from reef_cli.harness_diff import ablations, new_bullets
from reef_cli.gitstore import Entry
from reef_cli.tasks import parse_task_file

PAIRED = GateSettings(policy="paired")  # the policy these tests pin down (the default is sequential)

# ------------------------------------------------------------------------------------------------ statistics


def table_sampler(table: dict, log: list | None = None):
    """Scores from {(task, side): [score per repeat]}."""
    def sample(reqs):
        if log is not None:
            log.extend(reqs)
        return {r: table[(r[0], r[1])][r[2]] for r in reqs}
    return sample


def tasks(n, sentinels=()):
    return [TaskSpec(f"t{i}", f"t{i}" in sentinels) for i in range(n)]


def fill(n, k, cand, cur):
    """cand/cur: per-task lists of per-repeat scores, or a float for every task and repeat."""
    table = {}
    for i in range(n):
        for side, v in ((CANDIDATE, cand), (CURRENT, cur)):
            table[(f"t{i}", side)] = v[i] if isinstance(v, list) else [v] * k
    return table


def test_bootstrap_is_seeded_and_monotone():
    vals = [0.0, 1.0, 0.5, -0.2, 0.3]
    a = bootstrap_interval(vals, 0.9, 2000, 7)
    assert a == bootstrap_interval(vals, 0.9, 2000, 7)
    assert a[0] < sum(vals) / len(vals) < a[1]
    for i in range(len(vals)):
        higher = list(vals)
        higher[i] += 0.4
        b = bootstrap_interval(higher, 0.9, 2000, 7)
        assert b[0] >= a[0] and b[1] >= a[1]
    assert bootstrap_interval([0.0] * 4, 0.9, 2000, 0) == (0.0, 0.0)
    assert bootstrap_interval([0.2] * 4, 0.9, 2000, 0) == pytest.approx((0.2, 0.2))


def test_a_clear_improvement_publishes_and_equal_is_rejected():
    n, k = 6, 3
    better = fill(n, k, [[1.0] * k] * 4 + [[0.0] * k] * 2, 0.0)
    out = evaluate(PAIRED, tasks(n), table_sampler(better))
    assert out.decision == PUBLISH and out.interval[0] > 0 and out.interval[2] == 0.9
    assert out.episodes_spent == 2 * n * k and "lower bound" in out.reason
    same = fill(n, k, 1.0, 1.0)
    out = evaluate(PAIRED, tasks(n), table_sampler(same))
    assert out.decision == REJECT and out.stage == "pass 1" and out.episodes_spent == 2 * n
    assert {t.status for t in out.per_task} == {"same"}


def test_a_regression_on_one_task_is_refused_even_when_the_mean_improves():
    n, k = 6, 3
    cand = [[1.0] * k] * 5 + [[0.0] * k]
    cur = [[0.0] * k] * 5 + [[1.0] * k]
    out = evaluate(PAIRED, tasks(n), table_sampler(fill(n, k, cand, cur)))
    assert out.decision == REJECT and "task 't5' regressed by 1.00 (tolerance 0.4)" in out.reason
    assert [t.status for t in out.per_task][-1] == "regressed"
    tally = evaluate(GateSettings(policy="tally"), tasks(n), table_sampler(fill(n, k, cand, cur)))
    assert tally.decision == PUBLISH and tally.tally == {"wins": 15, "losses": 3, "ties": 0, "margin": 0}


def test_a_failing_sentinel_blocks_and_stops_early():
    n, k = 6, 3
    cand = [[0.0] * k] + [[1.0] * k] * 5
    cur = [[1.0] * k] + [[0.0] * k] * 5
    log = []
    out = evaluate(PAIRED, tasks(n, sentinels=("t0",)), table_sampler(fill(n, k, cand, cur), log))
    assert out.decision == REJECT and "sentinel task 't0' failed" in out.reason
    assert out.stage == "early-stop" and out.episodes_spent < 2 * n * k
    assert out.per_task[0].status == "sentinel-failed"
    assert log[:2] == [("t0", CANDIDATE, 0), ("t0", CURRENT, 0)]  # sentinels are screened first


def test_the_screen_rejects_a_candidate_that_is_behind_cheaply():
    n, k = 12, 3
    out = evaluate(PAIRED, tasks(n), table_sampler(fill(n, k, 0.0, 1.0)))
    assert out.decision == REJECT and out.stage == "screen" and out.episodes_spent == 6
    assert sum(t.status == "not-run" for t in out.per_task) == n - 3


def test_early_stop_never_changes_the_decision():
    """Whenever the paired run stops because the decision is certain, judging all the episodes agrees."""
    rng = random.Random(3)
    checked = 0
    for trial in range(150):
        n, k = rng.choice((3, 5, 8)), rng.choice((1, 2, 3))
        specs = tasks(n, sentinels=("t0",) if trial % 3 == 0 else ())
        table = {(t.id, side): [float(rng.random() < p) for _ in range(k)]
                 for t in specs for side, p in ((CANDIDATE, rng.random()), (CURRENT, rng.random()))}
        settings = GateSettings(policy="paired", repeats=k, seed=trial)
        out = evaluate(settings, specs, table_sampler(table))
        if out.stage not in ("early-stop", "complete"):
            continue
        book = _Book(settings, table_sampler(table))
        book.run([(t.id, s, r) for t in specs for s in (CANDIDATE, CURRENT) for r in range(k)])
        engine = _Paired(settings, specs, book)
        assert engine.judge(*engine._filled("worst"))[0] == out.decision, (trial, out)
        checked += 1
    assert checked > 30


def test_budget_is_respected_and_an_undecided_gate_rejects():
    n, k = 6, 3
    better = fill(n, k, [[1.0] * k] * 4 + [[0.0] * k] * 2, 0.0)
    out = evaluate(GateSettings(policy="paired", max_episodes=20), tasks(n), table_sampler(better))
    assert out.decision == REJECT and out.stage == "budget" and out.episodes_spent <= 20
    assert "budget of 20 episodes" in out.reason


def test_floor_and_always_policies():
    n, k = 4, 2
    table = fill(n, k, [[1.0, 1.0]] * 3 + [[1.0, 0.0]], 0.0)
    log = []
    out = evaluate(GateSettings(policy="floor", repeats=k), tasks(n), table_sampler(table, log))
    assert out.decision == REJECT and "task 't3' cannot reach the floor 1" in out.reason
    assert all(side == CANDIDATE for _, side, _ in log)
    out = evaluate(GateSettings(policy="floor", repeats=k, floor=0.5), tasks(n), table_sampler(table))
    assert out.decision == PUBLISH and {t.status for t in out.per_task} == {"passed"}
    out = evaluate(GateSettings(policy="always"), tasks(n), table_sampler(table))
    assert out.decision == PUBLISH and out.episodes_spent == 0


def test_settings_come_from_config_with_overrides():
    from reef_cli.config import GateConfig

    s = GateSettings.from_config(GateConfig(repeats=5, tolerance=0.3), policy="tally", max_episodes=None)
    assert (s.policy, s.repeats, s.tolerance, s.confidence, s.max_episodes) == ("tally", 5, 0.3, 0.9, None)
    with pytest.raises(InvalidInput, match="gate policy 'best' is unknown"):
        GateSettings(policy="best")


def test_screen_and_estimate():
    specs = tasks(12, sentinels=("t5",))
    screen = screen_tasks(specs, PAIRED)
    assert len(screen) == 3 and TaskSpec("t5", True) in screen
    assert estimate(PAIRED, specs) == {"policy": "paired", "tasks": 12, "repeats": 3, "max": 72, "min": 6,
                                               "full_tally": 72, "budget": None}
    assert estimate(GateSettings(max_episodes=10), specs)["max"] == 10
    assert _pair_reqs(specs[:2], 1) == [("t0", CANDIDATE, 1), ("t0", CURRENT, 1), ("t1", CANDIDATE, 1),
                                        ("t1", CURRENT, 1)]


def test_verdict_round_trips():
    out = evaluate(PAIRED, tasks(3), table_sampler(fill(3, 3, 1.0, 0.0)))
    v = Verdict.of(out, episodes_budget=18, bullet_utility={"b_1": 0.25}, record_id="rec_x", repeats=3)
    assert (v.decision, v.stage, v.per_task, v.interval) == (out.decision, out.stage, out.per_task, out.interval)
    assert Verdict.from_json(json.loads(json.dumps(v.to_json()))).to_json() == v.to_json()
    assert v.release_meta()["record_id"] == "rec_x" and v.published


def test_new_bullets_and_ablations():
    base = {"CLAUDE.md": Entry(b"# x\n- old rule\n")}
    cand = {"CLAUDE.md": Entry(b"# x\n- old rule\n- new one\n* another\n", 0o100644), "a.txt": Entry(b"- no\n")}
    found = new_bullets(base, cand)
    assert [(b.path, b.text) for b in found] == [("CLAUDE.md", "new one"), ("CLAUDE.md", "another")]
    abl = ablations(base, cand)
    assert abl[found[0].id]["CLAUDE.md"].data == b"# x\n- old rule\n* another\n"
    assert abl[found[1].id]["a.txt"] == cand["a.txt"]


def test_new_bullets_use_the_reef_id_so_the_reflector_can_credit_them():
    base = {"CLAUDE.md": Entry(b"<!-- reef:begin learned -->\n- kept <!-- reef:aaaaaa -->\n<!-- reef:end learned -->\n")}
    cand = {"CLAUDE.md": Entry(b"<!-- reef:begin learned -->\n- kept <!-- reef:aaaaaa -->\n"
                               b"- fresh rule <!-- reef:b3f2a1 -->\n<!-- reef:end learned -->\n")}
    (b,) = new_bullets(base, cand)
    assert (b.id, b.text) == ("b3f2a1", "fresh rule")
    assert ablations(base, cand)["b3f2a1"]["CLAUDE.md"] == base["CLAUDE.md"]


def test_frozen_changes_allow_edits_inside_the_managed_block_only(tmp_path):
    from reef_cli.config import parse_config
    from reef_cli.harness_diff import frozen_changes

    config = parse_config("version: 1\ninclude: ['**']\nzones: {managed: [CLAUDE.md], learned: [notes.md], "
                          "evolvable: [skills/**]}\n")
    base = {"CLAUDE.md": Entry(b"# Mine\n<!--  reef:begin learned -->\n<!-- reef:end learned -->\n"),
            "notes.md": Entry(b""), "canary/a.yaml": Entry(b"x"), "rules.md": Entry(b"r")}
    inside = {**base, "CLAUDE.md": Entry(b"# Mine\n<!--  reef:begin learned -->\n- new\n<!-- reef:end learned -->\n"),
              "notes.md": Entry(b"- n\n"), "skills/s/SKILL.md": Entry(b"s")}
    assert frozen_changes(tmp_path, config, base, inside) == []
    outside = {**inside, "CLAUDE.md": Entry(b"# Yours\n<!--  reef:begin learned -->\n<!-- reef:end learned -->\n"),
               "canary/a.yaml": Entry(b"y")}
    del outside["rules.md"]
    found = {v.path: (v.change, v.zone) for v in frozen_changes(tmp_path, config, base, outside)}
    assert found == {"CLAUDE.md": ("modified", "managed"), "canary/a.yaml": ("modified", "frozen"),
                     "rules.md": ("deleted", "frozen")}
    # Only reef's own block is writable: a rule wrapped in markers of another name stays the human's, and damaged
    # markers vouch for nothing (the Curator writes under the same contract: blocks.outside_unchanged).
    other = b"# Mine\n<!-- reef:begin x -->\n- keep tests green\n<!-- reef:end x -->\n"
    wrapped = {**base, "CLAUDE.md": Entry(other)}
    edited = {**base, "CLAUDE.md": Entry(other.replace(b"keep tests green", b"skip tests"))}
    assert [v.path for v in frozen_changes(tmp_path, config, wrapped, edited)] == ["CLAUDE.md"]
    damaged = {**base, "CLAUDE.md": Entry(b"# Mine\n<!--  reef:begin learned -->\n- new\n")}
    assert [v.reason for v in frozen_changes(tmp_path, config, base, damaged)] == [
        "text outside reef's managed block changed"]


def test_frozen_changes_compare_bytes_that_are_not_utf8_exactly(tmp_path):
    """Two different invalid byte sequences once both decoded to U+FFFD, so a candidate that swapped the human's
    Latin-1 "café" for "cafè" outside the block passed as "outside unchanged"."""
    from reef_cli.config import parse_config
    from reef_cli.harness_diff import frozen_changes

    config = parse_config("version: 1\ninclude: ['**']\nzones: {managed: [CLAUDE.md]}\n")
    block = b"<!-- reef:begin learned -->\n<!-- reef:end learned -->\n"
    base = {"CLAUDE.md": Entry(b"# caf\xe9\n" + block)}
    swapped = {"CLAUDE.md": Entry(b"# caf\xe8\n" + block)}
    assert [(v.path, v.change, v.reason) for v in frozen_changes(tmp_path, config, base, swapped)] == [
        ("CLAUDE.md", "modified", "text outside reef's managed block changed")]
    inside = {"CLAUDE.md": Entry(b"# caf\xe9\n" + block.replace(b"-->\n<", b"-->\n- new <!-- reef:b3f2a1 -->\n<"))}
    assert frozen_changes(tmp_path, config, base, inside) == []


def test_ablations_keep_bytes_that_are_not_utf8(tmp_path):
    """A leave-one-out candidate is the user's file minus one line: every other byte, Latin-1 included, stays."""
    base = {"CLAUDE.md": Entry(b"# caf\xe9\n- old \xff rule\n")}
    cand = {"CLAUDE.md": Entry(b"# caf\xe9\n- old \xff rule\n- new \xe8 one\n- plain\n", 0o100644)}
    found = new_bullets(base, cand)
    assert [b.text for b in found] == ["new \ufffd one", "plain"]  # shown (and hashed) as before
    json.dumps([b.text for b in found], ensure_ascii=False).encode("utf-8")  # a report can carry them
    abl = ablations(base, cand)
    assert abl[found[0].id]["CLAUDE.md"].data == b"# caf\xe9\n- old \xff rule\n- plain\n"
    assert abl[found[1].id]["CLAUDE.md"].data == b"# caf\xe9\n- old \xff rule\n- new \xe8 one\n"


# ------------------------------------------------------------------------------------------------ episodes


def make_task(text: str):
    return parse_task_file(text, "canary/t.yaml")[0]


def runner_for(agent, tmp_path, **kw):
    return EpisodeRunner(agent, suite_dir=tmp_path, seed=1, workers=2, work_root=tmp_path, kill_grace=0.5, **kw)


def test_check_output_scores_the_episode():
    assert parse_score("noise\nscore: 0.25\n", 1) == (0.25, None)
    assert parse_score("score: 1.5\n", 0) == (0.0, "check printed score 1.5, outside [0, 1]")
    assert parse_score("score: lots", 0)[1] == "check printed an unreadable score 'lots'"
    assert parse_score("", 0) == (1.0, None) and parse_score("", 3) == (0.0, None)


def test_an_episode_runs_setup_agent_and_check_in_a_fresh_dir(tmp_path):
    task = make_task("""id: t
prompt: hello there
setup: {files: {in.txt: "x\\n"}, command: "echo prepared > prep"}
check: |
  test -f prep && test -f in.txt && grep -q 'hello there' out && echo "score: 0.75"
""")
    harness = tmp_path / "h"
    harness.mkdir()
    agent = ["sh", "-c", 'echo "$1" > out; test "$REEF_HARNESS_DIR" = "$2"; echo done', "agent", "{prompt}",
             str(harness)]
    res = runner_for(agent, tmp_path).run_one(EpisodeRequest(task, CANDIDATE, 0, harness, "c" * 40))
    assert res.score == 0.75 and res.exit == 0 and res.check_exit == 0 and not res.timed_out and res.error is None
    assert res.stdout["digest"].startswith("sha256:") and res.stdout["length"] == 5
    assert not list(tmp_path.glob("reef-episode-*"))  # the work dir is gone


def test_the_prompt_goes_to_stdin_when_the_agent_has_no_placeholder(tmp_path):
    task = make_task("id: t\nprompt: via stdin\ncheck: grep -q 'via stdin' got\n")
    res = runner_for(["sh", "-c", "cat > got"], tmp_path).run_one(EpisodeRequest(task, CURRENT, 0, tmp_path, "c" * 40))
    assert res.score == 1.0


def test_a_hung_episode_is_killed_at_its_timeout_with_its_process_group(tmp_path):
    late = tmp_path / "late"
    task = make_task("id: hang\nprompt: p\ncheck: 'true'\ntimeout: 0.5\n")
    agent = ["sh", "-c", f"(sleep 1.5; touch {late}) & sleep 30"]
    start = time.monotonic()
    res = runner_for(agent, tmp_path).run_one(EpisodeRequest(task, CANDIDATE, 0, tmp_path, "c" * 40))
    assert time.monotonic() - start < 5
    assert res.timed_out and res.score == 0.0 and "timed out after 0.5s" in res.error
    time.sleep(1.5)
    assert not late.exists()  # the grandchild died with the group


GH_TOKEN = "ghp_" + "q" * 36


def test_an_episodes_output_tail_and_error_are_redacted_before_the_journal_keeps_them(tmp_path):
    """The journal (kept after the run) held a failing check's raw stderr tail: a token printed by the check, or its
    last characters when the 600-character tail was cut inside it; and a check's unreadable score line verbatim."""
    from reef_cli.episodes import TAIL_CHARS

    loud = make_task(f"id: loud\nprompt: p\ncheck: 'echo token {GH_TOKEN} >&2; exit 1'\n")
    pad = "x" * (TAIL_CHARS - 20)  # the raw tail began inside the token: its last characters were kept
    cut = make_task(f"id: cut\nprompt: p\ncheck: 'echo {GH_TOKEN}; echo {pad}; exit 1'\n")
    score = make_task(f"id: score\nprompt: p\ncheck: 'echo score: {GH_TOKEN}'\n")
    journal = Journal(tmp_path / "j" / "journal.jsonl")
    reqs = [EpisodeRequest(t, CANDIDATE, 0, tmp_path, "c" * 40) for t in (loud, cut, score)]
    got = runner_for(["true"], tmp_path).run_many(reqs, journal=journal)
    by_task = {r.task_id: r for r in got.values()}
    assert by_task["loud"].tail == "token [REDACTED:github_token]\n"
    assert by_task["cut"].tail == f"[REDACTED:github_token]\n{pad}\n"
    assert by_task["score"].error == "check printed an unreadable score '[REDACTED:github_token]'"
    stored = (tmp_path / "j" / "journal.jsonl").read_text()
    assert "[REDACTED:github_token]" in stored and "ghp_" not in stored and GH_TOKEN[-12:] not in stored


def test_leftover_background_processes_are_killed_after_a_normal_exit(tmp_path):
    late = tmp_path / "late"
    out, err = tmp_path / "o", tmp_path / "e"
    oc = run_command(f"(sleep 0.8; touch {late}) & exit 3", cwd=tmp_path, env=os.environ, timeout=10, stdout=out,
                     stderr=err)
    assert oc.exit == 3 and not oc.timed_out
    time.sleep(1.2)
    assert not late.exists()


def test_an_agent_that_cannot_start_scores_zero(tmp_path):
    task = make_task("id: t\nprompt: p\ncheck: 'true'\n")
    res = runner_for(["/nonexistent/agent"], tmp_path).run_one(EpisodeRequest(task, CANDIDATE, 0, tmp_path, "c" * 40))
    assert res.score == 0.0 and "cannot start '/nonexistent/agent'" in res.error


def test_a_skill_trigger_task_needs_the_skill_to_be_used(tmp_path):
    task = make_task("id: s\nprompt: p\ncheck: 'true'\ntags: [skill-trigger]\nskill: notes\n")
    used = ["sh", "-c", 'echo \'{"decision":"skill_used","skill":"notes"}\' >> "$REEF_ROUTING_FILE"']
    assert runner_for(used, tmp_path).run_one(EpisodeRequest(task, CANDIDATE, 0, tmp_path, "c" * 40)).score == 1.0
    res = runner_for(["true"], tmp_path).run_one(EpisodeRequest(task, CANDIDATE, 0, tmp_path, "c" * 40))
    assert res.score == 0.0 and "skill 'notes' was not used" in res.error


def test_journal_drops_a_torn_tail_and_serves_finished_episodes(tmp_path):
    task = make_task("id: t\nprompt: p\ncheck: 'true'\n")
    path = tmp_path / "j.jsonl"
    runner = runner_for(["true"], tmp_path)
    reqs = [EpisodeRequest(task, side, r, tmp_path, "c" * 40) for r in range(2) for side in (CANDIDATE, CURRENT)]
    got = runner.run_many(reqs, journal=Journal(path))
    assert len(got) == 4
    with open(path, "ab") as f:
        f.write(b'{"key": "torn')
    journal = Journal(path)
    assert len(journal) == 4 and path.read_bytes().endswith(b"}\n")
    seen = []
    runner2 = runner_for(["false"], tmp_path)  # would score differently if anything ran again
    again = runner2.run_many(reqs, journal=journal, on_result=lambda r, resumed: seen.append(resumed))
    assert seen == [True] * 4 and {k: v.score for k, v in again.items()} == {k: v.score for k, v in got.items()}


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores read-only permissions")
def test_the_harness_is_materialised_read_only(tmp_path):
    from reef_cli.episodes import materialise_readonly

    tree = materialise_readonly(tmp_path / "tree", {"CLAUDE.md": Entry(b"x\n")})
    with pytest.raises(PermissionError):
        (tree / "CLAUDE.md").write_text("changed")
    with pytest.raises(PermissionError):
        (tree / "new.md").write_text("added")


# ------------------------------------------------------------------------------------------------ end to end

NEWLINE = "- Always end files with a trailing newline."
TABS = "- Use tabs for indentation in Makefiles."
SPACES = "- Indent with four spaces."


@pytest.fixture
def project(reef, tmp_path):
    """A claude-template project with the example suite and agent, published as release 2 (repeats 2)."""
    root = example_suite_project(reef, tmp_path / "proj")
    r = reef("-C", str(root), "publish", "-m", "canary suite and the example agent")
    assert r.code == 0, r.err
    return root


def ledger_records(root: Path, kind: str) -> list[dict]:
    from reef_cli.ledger import Ledger

    path = root / ".reef" / "scenarios" / "default" / "ledger.jsonl"
    return [r.to_json() for r in Ledger(path, "default").iter_records(kind=kind)]


def test_eval_a_better_candidate_would_publish_and_is_recorded(reef, project):
    set_block(project, NEWLINE, TABS)
    r = reef("-C", str(project), "eval", "--json", "--policy", "paired")
    assert r.code == 0, r.err
    v = json.loads(r.out)
    assert v["decision"] == "publish" and v["policy"] == "paired" and v["interval"]["lo"] > 0
    assert {t["task_id"]: t["status"] for t in v["per_task"]} == {
        "greeting": "same", "notes-newline": "improved", "typo-fix": "improved", "makefile-build": "improved",
        "script-ok": "same"}
    gates = ledger_records(project, "gate")
    assert [g["record_id"] for g in gates] == [v["record_id"]]
    assert gates[0]["payload"]["decision"] == "publish" and gates[0]["content_id"] == v["candidate_content_id"]
    import pygit2

    assert v["candidate_content_id"] not in pygit2.Repository(str(project / ".reef" / "git"))  # judged, not stored
    episodes = ledger_records(project, "episode")
    assert len(episodes) == v["episodes_spent"] == 20
    ep = episodes[0]["payload"]
    assert {"task_id", "side", "repeat", "score", "exit", "duration_s", "timed_out", "stdout", "stderr"} <= set(ep)
    assert ep["stdout"]["digest"].startswith("sha256:")
    assert "gate: policy paired" in r.err or r.err == ""


def test_eval_runs_the_sequential_policy_by_default_and_shows_an_interval(reef, project):
    """The default policy is sequential; its verdict carries the bootstrap interval of the per-task mean differences
    over the pairs it ran (descriptive: the sign-flip test decided), as paired's does."""
    set_block(project, NEWLINE, TABS)
    r = reef("-C", str(project), "eval", "--json")
    assert r.code == 0, r.err
    v = json.loads(r.out)
    assert v["policy"] == "sequential" and v["decision"] == "publish" and v["trace"]["looks"][-1]["crossed"]
    assert v["interval"]["lo"] > 0 and v["interval"]["hi"] >= v["interval"]["lo"]
    # "episodes spent: N of up to M" named the full paired tally (20), which sequential's probes and extra passes
    # may pass ("10 of up to 6" on a 3-task, 1-repeat suite): M is now the ceiling printed before the run
    assert v["episodes_budget"] == 120 and v["episodes_spent"] <= 120  # 2 sides x 5 tasks x 6k repeats


def test_a_gated_publish_carries_the_verdict(reef, project):
    from reef_cli.gate import gate_candidate, publish_gated
    from reef_cli.ledger import Ledger
    from reef_cli.project import Project
    from reef_cli.store import HarnessStore

    set_block(project, NEWLINE, TABS)
    store = HarnessStore(Project(project), "default")
    files = store.worktree_files()
    with pytest.raises(PolicyError, match="the canary gate rejected this candidate"):
        verdict_same = gate_candidate(store, store.files_of(store.require_head()), ledger=None)
        publish_gated(store, store.files_of(store.require_head()), verdict_same, reason="nothing new")
    verdict = gate_candidate(store, files, ledger=Ledger(store.ledger_path, "default"), workers=2)
    res = publish_gated(store, files, verdict, reason="gated edit")
    assert res.created and res.release.evidence == (verdict.record_id,)
    assert res.release.meta["gate"]["decision"] == "publish" and res.release.meta["gate"]["record_id"]
    with pytest.raises(PolicyError, match="was for content"):
        publish_gated(store, {**files, "CLAUDE.local.md": Entry(b"x\n")}, verdict, reason="other bytes")


def test_eval_an_equal_or_worse_candidate_is_rejected(reef, project):
    r = reef("-C", str(project), "eval")
    assert r.code == 0 and "nothing to evaluate" in r.out
    set_block(project, "- Write clean code.")  # a rule the agent does not act on: equal
    r = reef("-C", str(project), "eval")
    assert r.code == 1 and "decision: reject" in r.out and "not better" in r.out
    set_block(project, NEWLINE, TABS)
    assert reef("-C", str(project), "publish", "-m", "good rules").code == 0
    set_block(project, NEWLINE, TABS, SPACES)  # the later, bad rule breaks the Makefile task
    r = reef("-C", str(project), "eval", "--json")
    v = json.loads(r.out)
    assert r.code == 1 and v["decision"] == "reject"
    assert {t["task_id"]: t["status"] for t in v["per_task"]}["makefile-build"] == "regressed"
    assert v["stage"] in ("screen", "pass 1") and v["episodes_spent"] < 20  # stopped early, cheaply


def test_eval_policies_reuse_the_journal(reef, project):
    set_block(project, NEWLINE, TABS)
    first = json.loads(reef("-C", str(project), "eval", "--json", "--policy", "paired").out)
    r = reef("-C", str(project), "eval", "--json", "--policy", "tally")
    v = json.loads(r.out)
    assert r.code == 0 and v["tally"] == {"wins": 6, "losses": 0, "ties": 4, "margin": 0}
    assert len(ledger_records(project, "episode")) == first["episodes_spent"]  # idempotent resends, no new records
    r = reef("-C", str(project), "eval", "--max-episodes", "4", "--policy", "paired")
    assert r.code == 1 and "budget of 4 episodes" in r.out
    for journal in glob.glob(str(project / ".reef/scenarios/default/gate/*/journal.jsonl")):
        os.unlink(journal)  # a lost journal means running again, with fresh records (never a conflict)
    r = reef("-C", str(project), "eval", "--json", "--policy", "paired")
    assert r.code == 0 and len(ledger_records(project, "episode")) == 2 * first["episodes_spent"]


def test_eval_attribution_measures_each_new_bullet(reef, project):
    set_block(project, NEWLINE, TABS)
    r = reef("-C", str(project), "eval", "--json", "--attribute")
    v = json.loads(r.out)
    utilities = sorted(v["bullet_utility"].values())
    assert utilities == [pytest.approx(0.2), pytest.approx(0.4)]  # tabs fixes 1 of 5 tasks, newline 2 of 5
    assert v["attribution_episodes"] > 0
    tests = v["trace"]["bullets"]  # each bullet's marginal effect through the sequential test (issue 16)
    assert sorted((t["pairs"], t["utility"], t["admitted"]) for t in tests.values()) == [(10, 0.2, False),
                                                                                         (10, 0.4, True)]


def test_eval_refuses_a_canary_task_the_reflector_has_seen(reef, project):
    from reef_cli.ledger import Ledger

    Ledger(project / ".reef/scenarios/default/ledger.jsonl", "default").append(
        "interaction", {"task_id": "typo-fix"}, release_id=None, content_id=None)
    set_block(project, NEWLINE)
    r = reef("-C", str(project), "eval")
    assert r.code == 4 and "canary task 'typo-fix' (canary/example.yaml) is no longer held out" in r.err


def test_eval_usage_errors(reef, project):
    r = reef("-C", str(project), "eval", "--candidate", "1", "--working-tree")
    assert r.code == 2 and "mutually exclusive" in r.err
    r = reef("-C", str(project), "eval", "--policy", "best")
    assert r.code == 4 and "gate policy 'best' is unknown" in r.err


def test_eval_candidate_release_and_no_canary(reef, project, tmp_path):
    set_block(project, NEWLINE, TABS)
    assert reef("-C", str(project), "publish", "-m", "rules").code == 0
    r = reef("-C", str(project), "eval", "--candidate", "3", "--baseline", "2", "--json")
    assert r.code == 0 and json.loads(r.out)["candidate"] == "release 3"
    bare = tmp_path / "bare"
    bare.mkdir()
    reef("-C", str(bare), "init")
    (bare / "CLAUDE.local.md").write_text("- x\n")
    r = reef("-C", str(bare), "eval")
    assert r.code == 1 and "has no canary tasks" in r.err


def test_ci_passes_a_better_change_and_writes_summary_and_junit(reef, project):
    set_block(project, NEWLINE, TABS)
    r = reef("-C", str(project), "ci", "--summary", "out/summary.md", "--junit", "out/junit.xml")
    assert r.code == 0, r.err
    md = (project / "out/summary.md").read_text()
    assert md.startswith("## reef canary gate: ✅ pass") and "| `notes-newline` | 0.00 | 1.00 | +1.00 | improved |" in md
    import xml.etree.ElementTree as ET

    root = ET.parse(project / "out/junit.xml").getroot()
    assert root.get("failures") == "0" and root.get("tests") == "6"
    assert {c.get("name") for c in root.iter("testcase")} >= {"decision", "greeting", "makefile-build"}


def test_ci_fails_a_change_that_is_not_better(reef, project):
    set_block(project, "- Write clean code.")
    r = reef("-C", str(project), "ci", "--json", "--junit", "j.xml", "--summary", "s.md")
    assert r.code == 1
    out = json.loads(r.out)
    assert out["status"] == "fail" and out["verdict"]["decision"] == "reject"
    assert "❌ not published" in (project / "s.md").read_text()
    assert 'name="decision"' in (project / "j.xml").read_text() and "<failure" in (project / "j.xml").read_text()


def test_ci_without_harness_changes_passes(reef, project):
    r = reef("-C", str(project), "ci")
    assert r.code == 0 and "no harness changes" in r.out


@pytest.mark.parametrize("path, text", [
    ("canary/example.yaml", "tasks:\n  - {id: easy, prompt: p, check: 'true'}\n"),
    ("evaluators/check.sh", "exit 0\n"),
    ("harness.yaml", None),
])  # CLAUDE.md outside the block is a human edit, evaluated since issue 14 (tests/test_ci_human_edits.py)
def test_ci_blocks_a_change_to_a_frozen_path(reef, project, path, text):
    target = project / path
    if path == "harness.yaml":
        target.write_text(target.read_text().replace("repeats: 2", "repeats: 1"))
    elif path == "CLAUDE.md":
        target.write_text(target.read_text().replace("# Project instructions", "# My rules, edited by a bot"))
    else:
        target.parent.mkdir(exist_ok=True)
        target.write_text(text)
    set_block(project, NEWLINE, TABS)  # a real improvement rides along: still blocked
    r = reef("-C", str(project), "ci", "--summary", "s.md", "--junit", "j.xml")
    assert r.code == 4 and f"first: {path}" in r.err and r.err.startswith("reef: error: ")
    assert "⛔ blocked by policy" in (project / "s.md").read_text()
    assert f'classname="reef.frozen" name="{path}"' in (project / "j.xml").read_text()
    assert not ledger_records(project, "episode")  # nothing ran


def test_ci_against_a_base_checkout_without_a_store(reef, project, tmp_path):
    import shutil

    base = tmp_path / "base"
    shutil.copytree(project, base, ignore=shutil.ignore_patterns(".reef"))
    pr = tmp_path / "pr"
    shutil.copytree(project, pr, ignore=shutil.ignore_patterns(".reef"))
    set_block(pr, NEWLINE, TABS)
    r = reef("-C", str(pr), "ci", "--base", str(base), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["verdict"]["decision"] == "publish"


def test_an_eval_killed_mid_run_resumes_without_rerunning_finished_episodes(reef, project, tmp_path):
    log = tmp_path / "invocations.log"
    agent = tmp_path / "slow_agent.sh"
    agent.write_text(f'#!/bin/sh\necho "$REEF_HARNESS_DIR $REEF_EPISODE_SEED" >> {log}\nsleep 0.2\n'
                     f'exec {sys.executable} -m reef_cli.example_agent "$@"\n')
    agent.chmod(0o755)
    cfg = project / "harness.yaml"
    cfg.write_text(cfg.read_text().replace('agent: ["{python}", -m, reef_cli.example_agent, -p, "{prompt}"]',
                                           f'agent: ["{agent}", -p, "{{prompt}}"]'))
    assert reef("-C", str(project), "publish", "-m", "slow agent").code == 0
    set_block(project, NEWLINE, TABS)
    proc = subprocess.Popen([reef_exe(), "-C", str(project), "eval", "--workers", "2", "--json", "--policy", "paired"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    journal = []
    while time.monotonic() < deadline:
        journal = glob.glob(str(project / ".reef/scenarios/default/gate/*/journal.jsonl"))
        if journal and len(Path(journal[0]).read_text().splitlines()) >= 6:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    done_before = [json.loads(line)["key"] for line in Path(journal[0]).read_text().splitlines()]
    assert 6 <= len(done_before) < 20
    time.sleep(0.5)  # let the episodes that were in flight finish writing the log
    r = reef("-C", str(project), "eval", "--json", "--policy", "paired")
    assert r.code == 0 and json.loads(r.out)["decision"] == "publish"
    entries = [json.loads(line) for line in Path(journal[0]).read_text().splitlines()]
    assert len(entries) == 20 and len({e["key"] for e in entries}) == 20
    trees = Path(journal[0]).parent / "trees"
    runs = log.read_text().splitlines()
    for e in entries:
        if e["key"] in done_before:  # one agent run per finished episode, even across the kill and the resume
            assert runs.count(f"{trees / (e['content_id'] + '.agent')} 0:{e['task_id']}:{e['repeat']}") == 1, e["key"]
    assert len(runs) <= 20 + 2  # the only reruns are episodes in flight at the kill (at most one per worker)


def test_the_example_ci_workflow_parses_and_calls_real_options():
    from ruamel.yaml import YAML

    from conftest import REPO

    wf = YAML(typ="safe").load((REPO / "adapters/ci/reef-canary.yml").read_text())
    runs = [step.get("run", "") for step in wf["jobs"]["gate"]["steps"]]
    (line,) = [r for r in runs if r.startswith("reef ci")]
    help_text = subprocess.run([reef_exe(), "ci", "--help"], capture_output=True, text=True, timeout=60).stdout
    for opt in (w for w in line.split() if w.startswith("--")):
        assert opt in help_text, opt


def test_eval_explain_prints_the_sequential_policys_trace(reef, project):
    set_block(project, NEWLINE, TABS)
    r = reef("-C", str(project), "eval", "--policy", "sequential", "--explain")
    assert r.code == 0, r.out + r.err
    assert "decision: publish (sequential" in r.out and "mean test: sign-flip, alpha 0.1" in r.out
    assert "task notes-newline: [+1 +1" in r.out and "drop veto: wealth 1 of 10 needed (error budget 0.1" in r.out
    v = json.loads(reef("-C", str(project), "eval", "--policy", "sequential", "--json").out)
    assert v["policy"] == "sequential" and v["trace"]["looks"][-1]["crossed"]
    assert v["trace"]["tasks"]["makefile-build"]["diffs"][0] == 1.0
    assert reef("-C", str(project), "publish", "-m", "good rules").code == 0
    set_block(project, NEWLINE, TABS, SPACES)  # the later, bad rule breaks the Makefile task
    r = reef("-C", str(project), "eval", "--policy", "sequential", "--explain")
    assert r.code == 1 and "decision: reject" in r.out, r.out
    # the published release is the harness the first eval ran as its candidate: its episodes there are the current
    # harness's history now, so the pass starts on the task it fails (script-ok), and a candidate that wins nothing
    # there is stopped at the first look
    assert "task script-ok: [0] mean +0.00  drop evidence 1  current's history 0.00 over" in r.out, r.out
    assert "current's history 1.00 over" in r.out and "stopped early" in r.out, r.out


def test_the_current_harnesss_history_comes_from_finished_runs_of_the_same_suite(tmp_path):
    """current_history: the episodes of that content (either side) in runs whose gate verdict was recorded on a suite
    with the same digest; an unfinished run, another suite, another harness, the run being judged and unreadable
    scores are left out."""
    from reef_cli.gate import current_history
    from reef_cli.ledger import Ledger

    led = Ledger(tmp_path / "ledger.jsonl", "default")

    def ep(run, tid, score, cid="cur", side=CURRENT):
        led.append("episode", {"run": run, "task_id": tid, "side": side, "repeat": 0, "score": score,
                               "content_id": cid}, release_id=None, content_id=cid)

    for run, digest in (("gate_a", "S"), ("gate_b", "S"), ("gate_other", "T"), ("gate_now", "S")):
        led.append("gate", {"run": run, "suite_digest": digest, "decision": "reject"}, release_id=None,
                   content_id="x")
    ep("gate_a", "t1", 1.0)
    ep("gate_a", "t1", 0.0, side=CANDIDATE)  # published later: it is the current harness now (same content id)
    ep("gate_b", "t2", 0.5)
    ep("gate_b", "t2", 1.0, cid="cand")  # another harness
    ep("gate_other", "t1", 0.0)  # another suite digest: the task may have changed
    ep("gate_unfinished", "t1", 0.0)  # no verdict recorded
    ep("gate_now", "t1", 0.0)  # the run being judged (a resume re-sends its episodes)
    ep("gate_a", "t9", 1.0)  # not in the suite now
    ep("gate_a", "t2", True)  # not a score
    ep("gate_a", ["t1"], 1.0)  # not a task id (a foreign writer): skipped, not a TypeError
    led.append("gate", {"run": ["gate_x"], "suite_digest": "S"}, release_id=None, content_id="x")
    assert current_history(led, "cur", "S", {"t1", "t2"}, exclude_run="gate_now") == {"t1": [1.0, 0.0],
                                                                                     "t2": [0.5]}
    assert current_history(None, "cur", "S", {"t1"}) == {} and current_history(led, "nobody", "S", {"t1"}) == {}
