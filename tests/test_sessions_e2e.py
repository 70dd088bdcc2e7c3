"""Learning from corrections inside real Claude Code sessions, end to end: the real `claude` CLI (through
`reef-claude`, and plain with reef's SessionEnd/Stop hook) against the fake model server on 127.0.0.1.

Five two-turn sessions (`-p`, then `-c -p` with a correction), no `reef report`: the wrapper ingests each session
when it ends, `reef harness evolve` publishes a bullet carrying the user's lesson into CLAUDE.md's managed block
citing the session records, and a sixth session's model request contains it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from fakes import text
from test_agents_e2e import TIMEOUT, VENV_BIN, base_env, install, need

from reef_cli.ledger import Ledger

CORRECTION = "You forgot to run the tests before saying you were done"
LESSON = "Run the tests before saying you are done."


def ledger_of(project: Path) -> Ledger:
    return Ledger(project / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")


def claude_turn(argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    r = subprocess.run([*argv, "--output-format", "stream-json", "--verbose", "--model", "fake-model"], cwd=cwd,
                       env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-3000:]}"
    return r


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    return root


def test_five_corrected_claude_sessions_teach_the_sixth(project, tmp_path, fake_llm):
    binary = need("claude")
    home = tmp_path / "home"
    home.mkdir()
    env = {**base_env(tmp_path, home), "REEF_CLAUDE_BIN": binary, "ANTHROPIC_BASE_URL": fake_llm.url,
           "ANTHROPIC_API_KEY": "dummy"}
    install(project, "claude", tmp_path / "root", tmp_path / "bin", env)
    wrapper = str(tmp_path / "bin" / "reef-claude")
    for n in range(5):
        code = tmp_path / f"code{n}"  # -c continues the latest session of its directory: one directory a session
        code.mkdir()
        claude_turn([wrapper, "-p", f"add feature {n}"], code, env)
        r = claude_turn([wrapper, "-c", "-p", CORRECTION], code, env)
        assert "heard 1 correction(s)" in r.stderr
    ledger = ledger_of(project)
    turns = [r for r in ledger.iter_records() if r.kind == "session"]
    reports = [r for r in ledger.iter_records() if r.kind == "report"]
    assert len(turns) == 10 and len({t.payload["session_id"] for t in turns}) == 5
    assert len(reports) == 5 and all(r.payload["implicit"]["kind"] == "correction" for r in reports)
    assert all(r.payload["receipts"][0] in {t.record_id for t in turns} for r in reports)

    r = subprocess.run([str(VENV_BIN / "reef"), "-C", str(project), "harness", "evolve", "--json"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "published", out
    evidence = out["release"]["evidence"]
    assert {r.record_id for r in reports} <= set(evidence)
    assert all(e.startswith("ses-claude-") for e in evidence)
    claude_md = (project / "CLAUDE.md").read_text()
    block = claude_md.split("<!-- reef:begin learned -->", 1)[1].split("<!-- reef:end learned -->", 1)[0]
    assert LESSON in block

    fake_llm.clear()
    code = tmp_path / "code6"
    code.mkdir()
    claude_turn([wrapper, "-p", "add feature 6"], code, env)
    assert any(c.contains(LESSON) for c in fake_llm.calls), "the learned bullet did not reach the model"


def test_plain_claude_in_the_project_is_heard_through_the_hook(project, tmp_path, fake_llm):
    binary = need("claude")
    home = tmp_path / "home"
    home.mkdir()
    env = {**base_env(tmp_path, home), "ANTHROPIC_BASE_URL": fake_llm.url, "ANTHROPIC_API_KEY": "dummy"}
    r = subprocess.run([str(VENV_BIN / "reef"), "-C", str(project), "harness", "install", "--adapter", "claude",
                        "--dest", str(tmp_path / "root"), "--bin-dir", str(tmp_path / "bin"), "--json"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert {"SessionEnd", "Stop"} <= set(settings["hooks"])
    claude_turn([binary, "-p", "add a feature"], project, env)
    claude_turn([binary, "-c", "-p", CORRECTION], project, env)
    ledger = ledger_of(project)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the hook hands the work to a detached child and returns at once
        reports = [r for r in ledger.iter_records() if r.kind == "report"]
        if reports:
            break
        time.sleep(0.3)
    turns = [r for r in ledger.iter_records() if r.kind == "session"]
    assert len(turns) == 2 and {t.payload["origin"] for t in turns} == {"hook"}
    assert reports and reports[0].payload["feedback"] == CORRECTION


def test_reef_codex_against_a_fake_responses_server(reef, tmp_path, fake_llm):
    """`reef-codex` like the other wrappers: the real Codex CLI (`codex exec --json`) reads the installed AGENTS.md
    from its CODEX_HOME, talks OpenAI Responses to the fake server, and its session is ingested when it ends."""
    from test_agents_e2e import BULLET, REAL_ENV

    from reef_cli.adapters import find_binary, load

    binary = find_binary(load("codex"), REAL_ENV)
    if not binary:
        pytest.skip("codex CLI not installed: run adapters/install-agents.sh codex")
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    claude_md = root / "CLAUDE.md"
    claude_md.write_text(claude_md.read_text().replace("<!-- reef:begin learned -->\n",
                                                       f"<!-- reef:begin learned -->\n- {BULLET}\n"))
    assert reef("-C", str(root), "publish", "-m", "codex e2e").code == 0
    home = tmp_path / "home"
    home.mkdir()
    env = {**base_env(tmp_path, home), "REEF_CODEX_BIN": binary, "FAKE_API_KEY": "dummy"}
    record = install(root, "codex", tmp_path / "root", tmp_path / "bin", env)
    agent_dir = Path(record["agent_dir"])
    # the user's own Codex config next to the installed harness (reef leaves it alone): the fake provider
    (agent_dir / "config.toml").write_text(
        f'model = "fake-model"\nmodel_provider = "fake"\n\n[model_providers.fake]\nname = "Fake"\n'
        f'base_url = "{fake_llm.base_url}"\nwire_api = "responses"\nenv_key = "FAKE_API_KEY"\n')
    code = tmp_path / "code"
    code.mkdir()
    wrapper = str(tmp_path / "bin" / "reef-codex")
    fake_llm.reply(text("Added the feature."))
    r = subprocess.run([wrapper, *load("codex").headless_argv("add a feature")], cwd=code, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, f"stdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-3000:]}"
    assert fake_llm.calls and all(c.route == "openai.responses" for c in fake_llm.calls)
    assert any(c.contains(BULLET) for c in fake_llm.calls), "the installed AGENTS.md did not reach the model"
    r2 = subprocess.run([wrapper, "exec", "--json", "--skip-git-repo-check", "resume", "--last", CORRECTION],
                        cwd=code, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "heard 1 correction(s)" in r2.stderr
    ledger = ledger_of(root)
    runs = [x for x in ledger.iter_records() if x.kind == "interaction"]
    assert runs[0].release_id == record["release_id"] and runs[0].payload["agent_reported"]["thread"]["thread_id"]
    turns = [x for x in ledger.iter_records() if x.kind == "session"]
    assert [t.payload["agent"] for t in turns] == ["codex", "codex"]
    assert turns[0].payload["user"]["excerpt"] == "add a feature"
    (rep,) = [x for x in ledger.iter_records() if x.kind == "report"]
    assert rep.payload["feedback"] == CORRECTION and rep.payload["receipts"] == [turns[0].record_id]


def test_pi_and_opencode_wrappers_ingest_their_sessions(reef, tmp_path, fake_llm):
    """The other wrappers hear a correction too: pi's session file under its agent dir, opencode's SQLite store
    in the user's data dir (read-only), both continued with `-c`."""
    from test_agents_e2e import BINARIES

    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    home = tmp_path / "home"
    home.mkdir()
    provider = {"provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                                      "options": {"baseURL": fake_llm.base_url, "apiKey": "dummy"},
                                      "models": {"fake-model": {"name": "Fake"}}}},
                "model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": False, "share": "disabled"}
    env = {**base_env(tmp_path, home), "PI_OFFLINE": "1", "PI_TELEMETRY": "0",
           "OPENCODE_CONFIG_CONTENT": json.dumps(provider), "OPENCODE_DISABLE_MODELS_FETCH": "1",
           "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_PURE": "1"}
    ran = []
    for name in ("pi", "opencode"):
        if not BINARIES[name]:
            continue
        env[f"REEF_{name.upper()}_BIN"] = BINARIES[name]
        record = install(root, name, tmp_path / "root", tmp_path / "bin", env)
        if name == "pi":
            agent_dir = Path(record["agent_dir"])
            (agent_dir / "models.json").write_text(json.dumps({"providers": {"fake": {
                "baseUrl": fake_llm.base_url, "api": "openai-completions", "apiKey": "dummy",
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": "fake-model", "name": "Fake Model", "reasoning": False}]}}}))
            (agent_dir / "settings.json").write_text(json.dumps({"defaultProvider": "fake",
                                                                 "defaultModel": "fake-model"}))
            first, second = ["--mode", "json", "-p", "add a feature"], ["--mode", "json", "-c", "-p", CORRECTION]
        else:
            first, second = ["run", "--format", "json", "add a feature"], ["run", "--format", "json", "-c", CORRECTION]
        code = tmp_path / f"code-{name}"
        code.mkdir()
        wrapper = str(tmp_path / "bin" / f"reef-{name}")
        for argv in (first, second):
            r = subprocess.run([wrapper, *argv], cwd=code, env=env, capture_output=True, text=True, timeout=TIMEOUT)
            assert r.returncode == 0, f"{name}: {r.stderr[-3000:]}"
        assert "heard 1 correction(s)" in r.stderr, r.stderr[-2000:]
        ran.append(name)
    if not ran:
        pytest.skip("neither pi nor opencode is installed: run adapters/install-agents.sh pi opencode")
    ledger = ledger_of(root)
    turns = [x for x in ledger.iter_records() if x.kind == "session"]
    assert sorted(t.payload["agent"] for t in turns) == sorted(ran * 2)
    reports = [x for x in ledger.iter_records() if x.kind == "report"]
    assert len(reports) == len(ran) and all(r.payload["feedback"] == CORRECTION for r in reports)
