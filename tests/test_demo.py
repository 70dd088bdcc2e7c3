"""`reef demo`: the main job end to end, offline — sessions, feedback, gated evolve, a better canary score."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import reef_exe


AGENT = """import os, pathlib
h = pathlib.Path(os.environ["REEF_HARNESS_DIR"])
text = "".join(p.read_text() for p in (h / "CLAUDE.md", h / "CLAUDE.local.md") if p.exists()).lower()
if "linter" in text:
    pathlib.Path("linted").write_text("yes")
if "changelog" in text:
    pathlib.Path("CHANGELOG").write_text("yes")
print("done")
"""

SUITE = """tasks:
  - {id: c1, prompt: "canary one", check: "test -f linted"}
  - {id: c2, prompt: "canary two", check: "test -f linted && test -f CHANGELOG"}
  - {id: c3, prompt: "canary three", check: "test -f CHANGELOG"}
  - {id: t1, split: train, prompt: "train one", check: "test -f linted",
     description: "Always run the linter before finishing."}
  - {id: t2, split: train, prompt: "train two", check: "test -f CHANGELOG",
     description: "Add a changelog entry for every change."}
"""


def own_agent_and_suite(tmp_path) -> tuple[str, ...]:
    """`reef demo` options for AGENT and SUITE, written under tmp_path."""
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "tasks.yaml").write_text(SUITE)
    return ("--agent", f"{sys.executable} {agent} {{prompt}}", "--suite", str(suite))


def test_demo_with_an_agent_and_suite_of_our_own(reef, tmp_path):
    r = reef("-C", str(tmp_path), "demo", "--json", *own_agent_and_suite(tmp_path))
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["baseline_score"] == 0.0 and out["final_score"] == 1.0 and out["improved"] is True
    steps = {rel["step"]: rel for rel in out["releases"]}
    assert steps[1]["operation"] == "init"
    gated = [rel for rel in out["releases"] if rel["gate"] == "publish"]
    assert gated and "CLAUDE.local.md" in gated[0]["reason"]
    assert sorted(line.split("]")[0] for line in out["diff"]) == ["+ [CLAUDE.local.md", "+ [CLAUDE.local.md"]
    assert any(s["feedback"] == "Always run the linter before finishing." for s in out["sessions"])
    assert out["project"] is None  # removed


def test_demo_text_output_shows_scores_verdicts_and_the_diff(reef, tmp_path):
    r = reef("-C", str(tmp_path), "demo", *own_agent_and_suite(tmp_path))
    assert r.code == 0, r.err
    assert "canary score of release 1: 0.00" in r.out and "(was 0.00)" in r.out
    assert "gate: publish" in r.out and "per-bullet diff, release 1 -> final:" in r.out
    assert "+ [CLAUDE.local.md] reef:" in r.out


def cpu_seconds() -> float:
    """CPU time of this process and of every child it has waited for (the agent runs, the checks, the gate's
    episodes): what the demo costs, which other processes on the machine do not inflate the way they do wall time."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


# reef demo's CPU time (self + children) on the 2-core reference machine: ~21 s. The default suite allows three
# times that: a wall-clock "under 30 s" there read 24 s under xdist on a loaded machine, one slow CI host from a
# false failure, while CPU time stays near 21 s however busy the machine is. The README's wall-clock promise is
# test_demo_keeps_the_readmes_promise_of_under_30_seconds, in the slow suite (run alone: -m slow -n 0).
DEMO_CPU_BUDGET = 60.0


def test_demo_on_embedded_defaults_is_offline_and_fast(reef, tmp_path):
    before = cpu_seconds()
    r = reef("-C", str(tmp_path), "demo", "--json")
    assert r.code == 0, r.err
    used = cpu_seconds() - before
    out = json.loads(r.out)
    assert used < DEMO_CPU_BUDGET, f"reef demo used {used:.1f} s of CPU (~21 s on the reference machine)"
    assert out["final_score"] > out["baseline_score"]
    assert out["releases"][0]["step"] == 1 and len(out["releases"]) >= 2
    assert any(rel["gate"] == "publish" for rel in out["releases"])
    # every one of the three helpful lessons is published: per-bullet admission must not drop a bullet that fixes
    # one canary task and hurts none (a stricter rule once took the demo to 0.60)
    assert (out["baseline_score"], out["final_score"]) == (0.2, 1.0)


@pytest.mark.slow  # wall-clock time means something only with the machine to itself
def test_demo_keeps_the_readmes_promise_of_under_30_seconds(tmp_path):
    """README: "offline, under 30 s". Timed as a user meets it: the console script, interpreter start-up included."""
    started = time.monotonic()
    r = subprocess.run([reef_exe(), "-C", str(tmp_path), "demo", "--json"], capture_output=True, text=True,
                       timeout=300)
    took = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    assert took < 30, f"reef demo took {took:.1f} s (the demo's own count: {json.loads(r.stdout)['seconds']} s)"


def test_demo_errors_are_one_line(reef, tmp_path):
    r = reef("-C", str(tmp_path), "demo", "--suite", str(tmp_path / "missing"))
    assert r.code == 4 and "--suite" in r.err and "not a directory" in r.err
