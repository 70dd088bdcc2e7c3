"""One harness compiled for every agent: golden trees, precedence, caps and frontmatter errors, and the CLI.

Golden trees live in tests/golden/<agent>/<layout>/, compiled from tests/golden/canonical/. After an intended change,
regenerate them with `REEF_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_compile.py` and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from reef_cli.adapters import load, names
from reef_cli.compile import compile_harness
from reef_cli.errors import InvalidInput, NotFound
from reef_cli.gitstore import MODE_EXEC, MODE_LINK, Entry
from reef_cli.install import sha256
from reef_cli.store import collect_files, write_files

GOLDEN = Path(__file__).parent / "golden"
CANONICAL = GOLDEN / "canonical"


def canonical() -> dict[str, Entry]:
    return collect_files(CANONICAL, ("**",))


def text(files: dict[str, Entry], path: str) -> str:
    return files[path].data.decode()


@pytest.mark.parametrize("layout", ["project", "config"])
@pytest.mark.parametrize("agent", ["claude", "opencode", "pi", "codex"])
def test_golden_tree(agent, layout):
    result = compile_harness(canonical(), load(agent), layout=layout)
    golden = GOLDEN / agent / layout
    if os.environ.get("REEF_UPDATE_GOLDEN"):
        shutil.rmtree(golden, ignore_errors=True)
        write_files(golden, result.files)
    assert result.files == collect_files(golden, ("**",)), f"compiled tree differs from {golden}"


def test_every_agent_gets_the_bullet_the_notes_and_both_skills():
    for agent in ("claude", "opencode", "pi", "codex"):
        result = compile_harness(canonical(), load(agent))
        lay = load(agent).layout
        instructions = text(result.files, lay.instructions)
        assert "GOLDEN-BULLET-1" in instructions and "GOLDEN-NOTE-1" in instructions, agent
        assert "<!-- reef: from CLAUDE.local.md -->" in instructions
        assert f"{lay.skills}/demo/SKILL.md" in result.files and f"{lay.skills}/review/SKILL.md" in result.files
        assert result.files[f"{lay.skills}/demo/scripts/hello.sh"].mode == MODE_EXEC
        assert "CLAUDE.local.md" not in result.files and "harness.yaml" not in result.files
        assert not any(p.startswith(("reef/", "canary/")) for p in result.files)


def test_claude_keeps_rules_and_settings_as_files_others_inline_rules():
    claude = compile_harness(canonical(), load("claude"))
    assert ".claude/rules/safety.md" in claude.files and ".claude/settings.json" in claude.files
    assert "Never commit secrets" not in text(claude.files, "CLAUDE.md")
    assert ".claude/agents/helper.md" in claude.files
    pi = compile_harness(canonical(), load("pi"))
    agents_md = text(pi.files, "AGENTS.md")
    assert "<!-- reef: from .claude/rules/safety.md -->\n# Safety (Frozen)" in agents_md
    assert pi.sources["AGENTS.md"] == ("CLAUDE.md", ".claude/rules/safety.md", "CLAUDE.local.md")
    assert ".pi/prompts/fix.md" in pi.files and not any(p.startswith((".claude", ".opencode")) for p in pi.files)
    oc = compile_harness(canonical(), load("opencode"))
    assert ".opencode/command/ship.md" in oc.files and ".pi/prompts/fix.md" not in oc.files


def test_config_layout_drops_the_agent_directory_prefix():
    files = compile_harness(canonical(), load("claude"), layout="config").files
    assert {"CLAUDE.md", "settings.json", "rules/safety.md", "skills/demo/SKILL.md", "agents/helper.md"} <= set(files)
    assert set(compile_harness(canonical(), load("pi"), layout="config").files) == {
        "AGENTS.md", "prompts/fix.md", "prompts/ship.md", "skills/demo/SKILL.md", "skills/demo/scripts/hello.sh",
        "skills/review/SKILL.md"}


def test_commands_reach_every_agent_and_its_own_copy_wins():
    files = {".claude/commands/ship.md": Entry(b"Ship $ARGUMENTS\n"), ".pi/prompts/ship.md": Entry(b"Ship $@\n"),
             ".opencode/command/deploy/prod.md": Entry(b"Deploy\n")}
    assert compile_harness(files, load("pi")).files == {".pi/prompts/ship.md": Entry(b"Ship $@\n"),
                                                        ".pi/prompts/deploy/prod.md": Entry(b"Deploy\n")}
    claude = compile_harness(files, load("claude"), layout="config")
    assert claude.files == {"commands/ship.md": Entry(b"Ship $ARGUMENTS\n"), "commands/deploy/prod.md": Entry(b"Deploy\n")}
    msg = errors_of(files, "opencode")  # neither ship.md is opencode's own, and they differ
    assert msg == ("cannot compile the harness for opencode: .pi/prompts/ship.md: command 'ship.md' is also in "
                   ".claude/commands/ship.md with other content; keep one")


def test_nested_instruction_files_follow_precedence_in_the_project_layout_only():
    files = {"AGENTS.md": Entry(b"top\n"), "web/AGENTS.md": Entry(b"web agents\n"), "web/CLAUDE.md": Entry(b"web claude\n"),
             "api/AGENTS.md": Entry(b"api\n"), "web/skills/s/AGENTS.md": Entry(b"a skill's reference doc\n")}
    claude = compile_harness(files, load("claude"))
    assert claude.files == {"CLAUDE.md": Entry(b"top\n"), "web/CLAUDE.md": Entry(b"web claude\n"),
                            "api/CLAUDE.md": Entry(b"api\n")}
    pi = compile_harness(files, load("pi"))
    assert pi.files["web/AGENTS.md"] == Entry(b"web agents\n") and pi.files["api/AGENTS.md"] == Entry(b"api\n")
    assert "web/skills/s/CLAUDE.md" not in claude.files and "web/skills/s/AGENTS.md" not in pi.files
    files.pop("web/skills/s/AGENTS.md")
    config = compile_harness(files, load("pi"), layout="config")
    assert set(config.files) == {"AGENTS.md"}
    assert config.warnings == ("3 file(s) not compiled for pi (config layout): api/AGENTS.md, web/AGENTS.md, web/CLAUDE.md",)


def test_files_no_agent_reads_are_named_in_a_warning():
    files = {"AGENTS.md": Entry(b"x\n"), "GEMINI.md": Entry(b"g\n"), "hooks/h.json": Entry(b"{}"),
             "reef/memory/patterns.json": Entry(b"{}"), "canary/t.yaml": Entry(b"")}
    assert compile_harness(files, load("codex")).warnings == (
        "2 file(s) not compiled for codex (project layout): GEMINI.md, hooks/h.json",)


def test_precedence_when_both_instruction_files_exist():
    files = {"CLAUDE.md": Entry(b"CLAUDE-TEXT\n"), "AGENTS.md": Entry(b"AGENTS-TEXT\n")}
    claude = compile_harness(files, load("claude"))
    assert text(claude.files, "CLAUDE.md") == "CLAUDE-TEXT\n" and "AGENTS.md" not in claude.files
    assert claude.warnings == ("AGENTS.md is not compiled for claude: Claude Code reads CLAUDE.md instead",)
    for agent in ("opencode", "pi", "codex"):
        res = compile_harness(files, load(agent))
        assert set(res.files) == {"AGENTS.md"} and text(res.files, "AGENTS.md") == "AGENTS-TEXT\n"
        assert res.warnings[0].startswith("CLAUDE.md is not compiled for")


def test_an_agents_only_harness_reaches_claude_as_claude_md():
    files = {"AGENTS.md": Entry(b"A\n"), ".agents/skills/x/SKILL.md": Entry(b"---\nname: x\ndescription: d\n---\n")}
    res = compile_harness(files, load("claude"))
    assert set(res.files) == {"CLAUDE.md", ".claude/skills/x/SKILL.md"} and res.warnings == ()


def test_in_tree_links_become_copies_and_identical_skill_copies_merge():
    skill = Entry(b"---\nname: x\ndescription: d\n---\n")
    files = {"CLAUDE.md": Entry(b"hi\n"), "AGENTS.md": Entry(b"CLAUDE.md", MODE_LINK),
             ".claude/skills/x/SKILL.md": skill, ".agents/skills": Entry(b"../.claude/skills", MODE_LINK)}
    res = compile_harness(files, load("pi"))
    assert res.files == {"AGENTS.md": Entry(b"hi\n"), ".pi/skills/x/SKILL.md": skill}


# -- errors: each names the file and the rule -------------------------------------------------------------------------
def errors_of(files: dict[str, Entry], agent: str) -> str:
    with pytest.raises(InvalidInput) as exc:
        compile_harness(files, load(agent))
    return str(exc.value)


def test_codex_size_cap_error_names_file_and_sources():
    files = {"AGENTS.md": Entry(b"x" * 32000 + b"\n"), ".agents/rules/long.md": Entry(b"y" * 1000 + b"\n")}
    assert errors_of(files, "codex") == (
        "cannot compile the harness for codex: AGENTS.md (compiled from AGENTS.md, .agents/rules/long.md) is 33,045 "
        "bytes, over the 32,768-byte cap for codex (Codex stops reading AGENTS.md after project_doc_max_bytes (32 KiB "
        "by default)); move detail into skills or shorten it")
    compile_harness(files, load("pi"))  # pi has no such cap


def test_claude_size_cap_counts_characters():
    files = {"CLAUDE.md": Entry(("é" * 40001).encode())}
    assert errors_of(files, "claude") == (
        "cannot compile the harness for claude: CLAUDE.md (from CLAUDE.md) is 40,002 characters, over the 40,000-"
        "character cap for claude (Claude Code warns that a CLAUDE.md over 40,000 characters hurts performance); "
        "move detail into skills or shorten it")
    compile_harness({"CLAUDE.md": Entry(("é" * 39000).encode())}, load("claude"))  # 78 KB, but 39,001 characters


@pytest.mark.parametrize("skill, message", [
    (b"# no frontmatter\n",
     ".claude/skills/s/SKILL.md: no frontmatter; pi needs name, description between '---' lines"),
    (b"---\nname: s\n---\nbody\n",
     ".claude/skills/s/SKILL.md: frontmatter has no 'description'; pi requires name, description"),
    (b"---\ndescription: d\n---\n",
     ".claude/skills/s/SKILL.md: frontmatter has no 'name'; pi requires name, description"),
    (b"---\n---\n",
     ".claude/skills/s/SKILL.md: frontmatter has no 'name' (nor 'description'); pi requires name, description"),
    (b"---\nname: other\ndescription: d\n---\n",
     ".claude/skills/s/SKILL.md: frontmatter name 'other' differs from its directory 's'; pi expects them equal"),
    (b"---\nname: s\ndescription: [unclosed\n---\n",
     ".claude/skills/s/SKILL.md: invalid YAML in frontmatter (line 3): expected ',' or ']', but got '<stream end>'"),
    (b"---\nname: s\ndescription: " + b"d" * 1025 + b"\n---\n",
     ".claude/skills/s/SKILL.md: description is 1,025 characters; pi allows 1,024"),
])
def test_skill_frontmatter_errors(skill, message):
    assert errors_of({".claude/skills/s/SKILL.md": Entry(skill)}, "pi") == f"cannot compile the harness for pi: {message}"


def test_claude_subagents_need_frontmatter_but_other_agents_never_see_them():
    files = {".claude/agents/a.md": Entry(b"---\nname: a\n---\nbody\n")}
    assert errors_of(files, "claude") == ("cannot compile the harness for claude: .claude/agents/a.md: frontmatter has "
                                          "no 'description'; claude requires name, description")
    assert compile_harness(files, load("opencode")).files == {}


def test_every_problem_is_listed_and_bad_settings_json_is_caught():
    files = {".claude/settings.json": Entry(b"{nope"), ".claude/skills/a/SKILL.md": Entry(b"x\n")}
    msg = errors_of(files, "claude")
    assert msg.startswith("cannot compile the harness for claude: .claude/skills/a/SKILL.md: no frontmatter")
    assert "(1 more: .claude/settings.json: not valid JSON (Expecting property name" in msg


def test_conflicting_skill_copies_are_an_error():
    a = Entry(b"---\nname: x\ndescription: one\n---\n")
    b = Entry(b"---\nname: x\ndescription: two\n---\n")
    msg = errors_of({".claude/skills/x/SKILL.md": a, ".agents/skills/x/SKILL.md": b}, "opencode")
    assert msg == ("cannot compile the harness for opencode: .agents/skills/x/: skill 'x' is also in .claude/skills/x/ "
                   "with other content; keep one")


def test_unknown_agent_and_layout():
    with pytest.raises(NotFound, match=r"no agent adapter 'vim' \(known: claude, codex, opencode, pi\)"):
        load("vim")
    with pytest.raises(InvalidInput, match="--layout flat: expected one of project, config"):
        compile_harness({}, load("pi"), layout="flat")


def test_descriptors_are_complete():
    for name in names():
        a = load(name)
        assert a.name == name and a.binary and a.config_dir and a.headless_argv("hi").count("hi") == 1
        assert a.layout.instructions in ("CLAUDE.md", "AGENTS.md")
        if a.wrapper:
            assert a.npm_package and a.npm_version and any(v == "{dir}" for v in a.env.values())


# -- the CLI ----------------------------------------------------------------------------------------------------------
@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(CANONICAL, root)
    assert reef("-C", str(root), "init").code == 0
    return root


def test_cli_compile_writes_the_golden_tree_and_prunes_on_rerun(reef, project, tmp_path):
    out = tmp_path / "out"
    r = reef("-C", str(project), "harness", "compile", "--agent", "opencode", "--out", str(out), "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["release"]["step"] == 1 and data["agent"] == "opencode" and data["removed"] == []
    got = collect_files(out, ("**",))
    assert json.loads(got.pop(".reef-compiled.json").data)["files"] == {p: sha256(e.data) for p, e in got.items()}
    assert got == collect_files(GOLDEN / "opencode" / "project", ("**",))
    # a skill removed from the harness disappears from DIR on the next compile; nothing else is touched
    (out / "mine.txt").write_text("keep me")
    shutil.rmtree(project / ".agents")
    assert reef("-C", str(project), "publish", "-m", "drop review").code == 0
    r = reef("-C", str(project), "harness", "compile", "--agent", "opencode", "--out", str(out))
    assert r.code == 0, r.err
    assert not (out / ".opencode" / "skills" / "review").exists() and (out / "mine.txt").read_text() == "keep me"
    assert "removed 1 stale file(s)" in r.out
    again = reef("-C", str(project), "harness", "compile", "--agent", "opencode", "--out", str(out), "--json")
    assert json.loads(again.out)["written"] == [] and json.loads(again.out)["removed"] == []


def test_cli_compile_refuses_a_foreign_nonempty_dir_and_reports_errors(reef, project, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x").write_text("x")
    r = reef("-C", str(project), "harness", "compile", "--agent", "pi", "--out", str(foreign))
    assert r.code == 3 and "was not written by 'reef harness compile'" in r.err
    (project / ".claude" / "skills" / "demo" / "SKILL.md").write_text("no frontmatter\n")
    r = reef("-C", str(project), "harness", "compile", "--agent", "pi", "--worktree")
    assert r.code == 4
    assert r.err == ("reef: error: cannot compile the harness for pi: .claude/skills/demo/SKILL.md: no frontmatter; "
                     "pi needs name, description between '---' lines\n")
    assert reef("-C", str(project), "harness", "compile", "--agent", "pi").code == 0  # the release is still fine
    r = reef("-C", str(project), "harness", "compile", "--agent", "vim")
    assert r.code == 1 and "no agent adapter 'vim'" in r.err


def test_cli_compile_lists_files_with_sources(reef, project):
    r = reef("-C", str(project), "harness", "compile", "--agent", "claude", "--layout", "config")
    assert r.code == 0, r.err
    assert "Claude Code (claude, config layout) from release" in r.out
    assert "rules/safety.md  <- .claude/rules/safety.md" in r.out
    assert "CLAUDE.md  <- CLAUDE.md, CLAUDE.local.md" in r.out


def test_cli_compile_listing_escapes_a_path_with_a_newline_or_escape(reef, project):
    # a name is anyone's text: one listed file is one line, and its ESC never repaints the terminal
    (project / ".claude" / "commands").mkdir(exist_ok=True)
    (project / ".claude" / "commands" / "a\nb.md").write_text("hi\n")
    (project / ".claude" / "commands" / "c\x1b[2J.md").write_text("hi\n")
    r = reef("-C", str(project), "harness", "compile", "--agent", "claude", "--worktree")
    assert r.code == 0, r.err
    assert "     3  .claude/commands/a\\x0ab.md  <- .claude/commands/a\\x0ab.md\n" in r.out
    assert "     3  .claude/commands/c\\x1b[2J.md  <- .claude/commands/c\\x1b[2J.md\n" in r.out
    assert "\x1b" not in r.out


REAL = Path(os.environ.get("REEF_SHARED", Path(__file__).resolve().parent.parent.parent / "shared")) / "data" / "real-harnesses"


@pytest.mark.skipif(not REAL.is_dir(), reason="shared/data/real-harnesses not present")
def test_real_harnesses_compile_for_every_agent_or_fail_naming_the_file():
    from reef_cli.bootstrap import config_for_import, discover

    outcomes = {}
    for repo in sorted(p for p in REAL.iterdir() if p.is_dir()):
        files, _ = discover(repo)
        files["harness.yaml"] = Entry(config_for_import(files).encode())
        for agent in names():
            for layout in ("project", "config"):
                try:
                    result = compile_harness(files, load(agent), layout=layout)
                    assert result.files, (repo.name, agent, layout)
                    outcomes[repo.name, agent, layout] = "ok"
                except InvalidInput as exc:
                    outcomes[repo.name, agent, layout] = str(exc)
    errors = {k: v for k, v in outcomes.items() if v != "ok"}
    assert set(errors) == {("openai__openai-agents-python", "codex", "project"),
                           ("openai__openai-agents-python", "codex", "config")}
    assert all(v.startswith("cannot compile the harness for codex: AGENTS.md (from AGENTS.md) is 34,566 bytes")
               for v in errors.values())
