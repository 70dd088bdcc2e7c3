"""End to end with the real agent CLIs: one harness, installed for claude, opencode and pi, run headless through the
reef-<agent> wrappers against the fake LLM on 127.0.0.1, from a code directory that holds no harness.

Each test asserts that a managed-block bullet and a skill's name and description reach the model (searching the whole
request body: Claude Code puts CLAUDE.md in the first user message), that the skill's body reaches it when the model
asks for it with the agent's own tool (so the agent really reads the install root), that the receipt names the
installed release, and that `reef-<agent> report` attaches to it. HOME, XDG dirs and agent config dirs are temp dirs; the agents talk
only to 127.0.0.1.

The CLIs come from `adapters/install-agents.sh` (pinned versions, into $REEF_AGENTS_DIR, default
~/.local/share/reef/agents; .ci/run runs it). A test skips, saying so, when its CLI is not installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes import tool
from reef_cli.adapters import find_binary, load

REAL_ENV = dict(os.environ)  # read at import, before fixtures point HOME at a temp dir
BINARIES = {name: find_binary(load(name), REAL_ENV) for name in ("claude", "opencode", "pi")}
NODE_DIR = os.path.dirname(shutil.which("node", path=REAL_ENV.get("PATH")) or "/usr/bin/node")
VENV_BIN = Path(sys.executable).parent
BULLET = "E2E-BULLET-7431: answer in one word"
SKILL_NAME = "e2e-greeter"
SKILL_DESC = "E2E-SKILL-5519 greets the user by name"
SKILL_BODY = "E2E-SKILL-BODY-8820 say hello twice"
TIMEOUT = 120


def need(name: str) -> str:
    binary = BINARIES[name]
    if not binary:
        pytest.skip(f"{name} CLI not installed: run adapters/install-agents.sh {name} "
                    f"(installs into $REEF_AGENTS_DIR, default ~/.local/share/reef/agents)")
    return binary


@pytest.fixture
def harness(reef, tmp_path):
    """One canonical harness (Claude layout, as `reef init` makes it) with a learned bullet and a skill."""
    project = tmp_path / "proj"
    project.mkdir()
    assert reef("-C", str(project), "init").code == 0
    claude_md = project / "CLAUDE.md"
    claude_md.write_text(claude_md.read_text().replace("<!-- reef:begin learned -->\n",
                                                       f"<!-- reef:begin learned -->\n- {BULLET}\n"))
    skill = project / ".claude" / "skills" / SKILL_NAME
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: {SKILL_NAME}\ndescription: {SKILL_DESC}\n---\n\n{SKILL_BODY}\n")
    assert reef("-C", str(project), "publish", "-m", "e2e harness").code == 0
    return project


def base_env(tmp_path: Path, home: Path) -> dict:
    return {"PATH": f"{NODE_DIR}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TERM": "dumb",
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local/state"),
            "REEF_SESSION": f"e2e-{tmp_path.name}", "LANG": "C.UTF-8",
            **({"PYTHONPATH": REAL_ENV["PYTHONPATH"]} if REAL_ENV.get("PYTHONPATH") else {})}


def install(project: Path, adapter: str, root: Path, bins: Path, env: dict) -> dict:
    r = subprocess.run([str(VENV_BIN / "reef"), "-C", str(project), "harness", "install", "--adapter", adapter,
                        "--dest", str(root), "--bin-dir", str(bins), "--json"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["record"]


def run_and_check(name: str, harness: Path, tmp_path: Path, fake_llm, extra_env: dict, extra_args: list[str] = (),
                  before_run=None, load_skill=None) -> dict:
    """`load_skill(agent_dir)` is the tool call with which the model asks for the skill's body (the agents send only
    its name and description up front): the next call must carry the body, read from the install root."""
    binary = need(name)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**base_env(tmp_path, home), f"REEF_{name.upper()}_BIN": binary, **extra_env}
    record = install(harness, name, tmp_path / "root", tmp_path / "bin", env)
    if before_run:
        before_run(Path(record["agent_dir"]))
    if load_skill:  # only the main turn lists the skills; opencode's title request must not take this reply
        fake_llm.reply(dataclasses.replace(load_skill(Path(record["agent_dir"])), match=SKILL_DESC))
    code = tmp_path / "code"  # where the user works: no CLAUDE.md, no AGENTS.md, no skills
    code.mkdir()
    wrapper = tmp_path / "bin" / f"reef-{name}"
    argv = [str(wrapper), *load(name).headless_argv("say hi"), *extra_args]
    started = time.monotonic()
    r = subprocess.run(argv, cwd=code, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    took = time.monotonic() - started
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-3000:]}"
    calls = fake_llm.calls
    assert calls, f"{name} sent no model call; stderr: {r.stderr[-2000:]}"
    assert any(c.contains(BULLET) for c in calls), f"the managed-block bullet did not reach the model ({name})"
    assert any(c.contains(SKILL_NAME) and c.contains(SKILL_DESC) for c in calls), \
        f"the skill's name and description did not reach the model ({name})"
    if load_skill:
        assert fake_llm.pending == 0, f"{name} never sent the turn that lists the skill"
        assert any(c.contains(SKILL_BODY) for c in calls), f"the skill's body did not reach the model ({name})"
    m = re.search(r"reef: receipt (\S+) \(release (\S+), step", r.stderr)
    assert m and m.group(2) == record["release_id"], r.stderr
    receipt = m.group(1)
    from reef_cli.ledger import Ledger

    ledger = Ledger(harness / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
    interaction = ledger.get(receipt)
    assert interaction.release_id == record["release_id"] and interaction.content_id == record["content_id"]
    assert interaction.payload["install"]["agent_dir"] == record["agent_dir"]
    rep = subprocess.run([str(wrapper), "report", "--score", "0", "--feedback", f"{name} e2e", "--json"], cwd=code,
                         env=env, capture_output=True, text=True, timeout=60)
    assert rep.returncode == 0, rep.stderr
    report = json.loads(rep.stdout)
    assert report["payload"]["receipts"] == [receipt] and report["release_id"] == record["release_id"]
    sys.stderr.write(f"[e2e] {name}: {took:.1f} s, {len(calls)} model call(s)\n")
    return {"interaction": interaction, "calls": calls, "stdout": r.stdout, "record": record}


def test_claude_through_reef_claude(harness, tmp_path, fake_llm):
    out = run_and_check("claude", harness, tmp_path, fake_llm,
                        {"ANTHROPIC_BASE_URL": fake_llm.url, "ANTHROPIC_API_KEY": "dummy"}, ["--model", "fake-model"],
                        load_skill=lambda _dir: tool("Skill", {"skill": SKILL_NAME}))
    first = out["calls"][0]
    assert first.route == "anthropic.messages" and first.headers.get("user-agent", "").startswith("claude-cli/")
    init = out["interaction"].payload["agent_reported"]["init"]
    assert SKILL_NAME in init["skills"] and init["model"] == "fake-model"
    assert init["claude_code_version"] == load("claude").npm_version


def test_opencode_through_reef_opencode(harness, tmp_path, fake_llm):
    provider = {"provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                                      "options": {"baseURL": fake_llm.base_url, "apiKey": "dummy"},
                                      "models": {"fake-model": {"name": "Fake"}}}},
                "model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": False, "share": "disabled"}
    out = run_and_check("opencode", harness, tmp_path, fake_llm, {
        "OPENCODE_CONFIG_CONTENT": json.dumps(provider), "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_PURE": "1"},
        # its `skill` tool lists the skill's files with a ripgrep that opencode downloads at run time (offline here);
        # `read` of the <location> the prompt gives is the same file
        load_skill=lambda d: tool("read", {"filePath": str(d / "skills" / SKILL_NAME / "SKILL.md")}))
    assert all(c.route == "openai.chat" for c in out["calls"])
    assert "sessionID" in out["interaction"].payload["agent_reported"]["session"]


def test_pi_through_reef_pi(harness, tmp_path, fake_llm):
    def provider_config(agent_dir: Path) -> None:
        """The user's own model config: agent state next to the installed harness, which reef leaves alone."""
        (agent_dir / "models.json").write_text(json.dumps({"providers": {"fake": {
            "baseUrl": fake_llm.base_url, "api": "openai-completions", "apiKey": "dummy",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "fake-model", "name": "Fake Model", "reasoning": False}]}}}))
        (agent_dir / "settings.json").write_text(json.dumps({"defaultProvider": "fake", "defaultModel": "fake-model"}))

    out = run_and_check("pi", harness, tmp_path, fake_llm, {"PI_OFFLINE": "1", "PI_TELEMETRY": "0"},
                        before_run=provider_config,
                        load_skill=lambda d: tool("read", {"path": str(d / "skills" / SKILL_NAME / "SKILL.md")}))
    session = out["interaction"].payload["agent_reported"]["session"]
    assert session["cwd"] == str(tmp_path / "code") and session["id"]


def test_claude_through_reef_serve(harness, tmp_path, fake_llm):
    """`reef-claude` with REEF_VIA_SERVE: every model call goes through `reef serve`, is recorded there with the
    wrapper run's receipt as its session, and the managed-block bullet reaches the upstream through it."""
    from gateway import Gateway

    need("claude")
    with Gateway(harness, fake_llm.url) as gw:
        out = run_and_check("claude", harness, tmp_path, fake_llm,
                            {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "dummy",
                             "REEF_VIA_SERVE": gw.url}, ["--model", "fake-model"])
        assert gw.stop() == 0, gw.log()
    receipt = out["interaction"].record_id
    assert out["interaction"].payload["via_serve"] == gw.url
    from reef_cli.ledger import Ledger

    ledger = Ledger(harness / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
    served = [r for r in ledger.iter_records() if r.kind == "inference" and r.payload.get("source") == "serve"]
    messages = [c for c in out["calls"] if c.route == "anthropic.messages"]
    assert len(served) == len(messages) >= 1  # every model call recorded, once
    assert all(r.payload["session"] == receipt and r.payload["outcome"] == "ok" for r in served)
    assert all(r.release_id == out["record"]["release_id"] for r in served)
    assert all("x-reef-session" not in c.headers and "x-api-key" not in c.headers for c in messages)
    assert "ledger of scenario 'default' verified" in gw.log()


@pytest.mark.slow  # opencode takes ~40 s a run on 2 cores; the mechanism is the same as the default suite's claude test
def test_opencode_through_reef_serve(harness, tmp_path, fake_llm):
    """opencode's own provider config reaches the gateway through {env:REEF_SERVE_BASE_URL}, which carries the
    wrapper run's receipt as the session in the path."""
    from gateway import Gateway

    need("opencode")
    provider = {"provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                                      "options": {"baseURL": "{env:REEF_SERVE_BASE_URL}", "apiKey": "dummy"},
                                      "models": {"fake-model": {"name": "Fake"}}}},
                "model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": False, "share": "disabled"}
    with Gateway(harness, fake_llm.url) as gw:
        out = run_and_check("opencode", harness, tmp_path, fake_llm, {
            "OPENCODE_CONFIG_CONTENT": json.dumps(provider), "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_PURE": "1", "REEF_VIA_SERVE": gw.url})
        assert gw.stop() == 0, gw.log()
    from reef_cli.ledger import Ledger

    ledger = Ledger(harness / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
    served = [r for r in ledger.iter_records() if r.kind == "inference" and r.payload.get("source") == "serve"]
    assert len(served) == len(out["calls"]) >= 1
    assert {r.payload["session"] for r in served} == {out["interaction"].record_id}


@pytest.mark.slow  # ~15 s; pi reads base URLs only from models.json, so this checks the documented set-up
def test_pi_through_reef_serve(harness, tmp_path, fake_llm):
    """pi's models.json points a provider at the gateway and names REEF_SERVE_SESSION as the x-reef-session header's
    value (pi resolves header values from the environment); the wrapper exports it as the run's receipt."""
    from gateway import Gateway

    need("pi")
    with Gateway(harness, fake_llm.url) as gw:
        def provider_config(agent_dir: Path) -> None:
            (agent_dir / "models.json").write_text(json.dumps({"providers": {"fake": {
                "baseUrl": gw.url + "/v1", "api": "openai-completions", "apiKey": "dummy",
                "headers": {"x-reef-session": "REEF_SERVE_SESSION"},
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": "fake-model", "name": "Fake Model", "reasoning": False}]}}}))
            (agent_dir / "settings.json").write_text(json.dumps({"defaultProvider": "fake", "defaultModel": "fake-model"}))

        out = run_and_check("pi", harness, tmp_path, fake_llm, {"PI_OFFLINE": "1", "PI_TELEMETRY": "0",
                                                                "REEF_VIA_SERVE": gw.url},
                            before_run=provider_config)
        assert gw.stop() == 0, gw.log()
    from reef_cli.ledger import Ledger

    ledger = Ledger(harness / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
    served = [r for r in ledger.iter_records() if r.kind == "inference" and r.payload.get("source") == "serve"]
    assert len(served) == len(out["calls"]) >= 1
    assert {r.payload["session"] for r in served} == {out["interaction"].record_id}
