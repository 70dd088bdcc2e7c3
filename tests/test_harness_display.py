"""Learned-zone text shown by `reef harness bullets|patterns|proposals|demote` comes from feedback and from a
hand-edited CLAUDE.md: a terminal escape in it is printed escaped (printable.py), and rich markup in it ('[/red]')
is text, not a style — it used to end in "unexpected error: MarkupError" (exit 1)."""

from __future__ import annotations

import json

from test_evolve import init_project

EVIL = "Use [/red] pnpm \x1b[2J\x1b]0;owned\x07 [bold]now."
SHOWN = "Use [/red] pnpm \\x1b[2J\\x1b]0;owned\\x07 [bold]now."


def _project(reef, tmp_path):
    root, _ = init_project(reef, tmp_path)
    claude = root / "CLAUDE.md"
    claude.write_text(claude.read_text().replace("<!-- reef:end learned -->",
                                                 f"- {EVIL} <!-- reef:b00001 -->\n<!-- reef:end learned -->"))
    mem = {"version": 1, "through_seq": 0, "patterns": [
        {"key": "do:pnpm+use", "id": "b00001", "text": EVIL, "polarity": "do", "count": 5, "evidence": ["rec_1"],
         "last_seen": "2026-11-01T00:00:00Z"}]}
    (root / "reef/memory/patterns.json").write_text(json.dumps(mem))
    r = reef("-C", str(root), "publish", "-m", "a hostile bullet")
    assert r.code == 0, r.err
    return root


def test_bullets_and_patterns_show_escapes_and_markup_as_text(reef, tmp_path):
    root = _project(reef, tmp_path)
    for args in (("harness", "bullets"), ("harness", "patterns")):
        r = reef("-C", str(root), *args)
        assert r.code == 0, (args, r.err)
        assert "\x1b" not in r.out and "\x07" not in r.out, args
        assert "".join(r.out.split()).count("".join(SHOWN.split())) == 1, (args, r.out)  # the table may fold it
    r = reef("-C", str(root), "harness", "bullets", "--json")
    assert json.loads(r.out)["bullets"][0]["text"] == EVIL  # JSON keeps the text as it is (escaped by JSON)


def test_demote_prints_the_bullet_escaped(reef, tmp_path):
    root = _project(reef, tmp_path)
    r = reef("-C", str(root), "harness", "demote", "reef:b00001")
    assert r.code == 0, r.err
    assert "\x1b" not in r.out and f"reef:b00001  {SHOWN}  (demoted by a human)" in r.out


def test_a_lesson_with_terminal_escapes_reaches_no_file_with_them(reef, tmp_path):
    """A lesson from feedback carrying ESC[31m, BEL and a U+202E override became a bullet in CLAUDE.md as it was
    (and a key with '31mlinter' in it): a `cat CLAUDE.md` ran the escapes, and the override showed the human other
    text than the agent reads. The Reflector and every bullet write drop them."""
    from test_evolve import evolve, feedback, memory

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, {"lesson": "Run the \x1b[31mlinter\x1b[0m before \u202ecommitting\x07."}, 5)
    evolve(reef, root)
    (key,) = memory(root)
    assert key == "do:before+commit+linter+run" and memory(root)[key]["text"] == "Run the linter before committing."
    text = (root / "CLAUDE.md").read_text()
    assert "- Run the linter before committing. <!-- reef:" in text
    assert not any(c in text for c in "\x1b\x07\u202e")


def test_a_damaged_proposal_file_is_left_out_of_listings_not_a_crash(reef, tmp_path):
    """A proposal file that is JSON but not what reef writes ('[1]', keys as a number) made 'harness proposals' and
    'reef page' end in "unexpected error: AttributeError" (exit 1); it is now left out, like one that is not JSON."""
    root, _ = init_project(reef, tmp_path)
    props = root / ".reef/scenarios/default/evolve/proposals"
    props.mkdir(parents=True, exist_ok=True)
    good = {"proposal_id": "prop_good", "status": "pending", "mode": "review", "created_at": "2026-12-01T10:00:00Z",
            "keys": ["do:pnpm+use"], "diff": ["+ [CLAUDE.md] reef:b00001  Use pnpm."]}
    (props / "prop_good.json").write_text(json.dumps(good))
    for n, bad in enumerate(([1], {"proposal_id": "prop_b", "status": "pending", "keys": 5},
                             {"proposal_id": 7, "status": "pending"}, {"proposal_id": "prop_c", "status": "pending",
                                                                       "ops": ["not an op"]})):
        (props / f"prop_bad{n}.json").write_text(json.dumps(bad))
    r = reef("-C", str(root), "harness", "proposals")
    assert r.code == 0, r.err
    assert r.out.splitlines() == ["prop_good  pending    review  2026-12-01T10:00:00  do:pnpm+use",
                                  "    + [CLAUDE.md] reef:b00001  Use pnpm."]
    r = reef("-C", str(root), "page")
    assert r.code == 0, r.err
    assert "prop_good" in (root / ".reef/page/default/index.html").read_text()
    r = reef("-C", str(root), "harness", "promote", "do:pnpm+use")
    assert "unexpected" not in r.err


def test_zone_commands_show_paths_as_text_and_refuse_control_characters(reef, tmp_path):
    """'reef harness zone "[/x]"' ended in "unexpected error: MarkupError"; 'harness freeze' with an ESC or newline
    in the path wrote it into harness.yaml and printed it raw (the guard keeps such a path Frozen anyway)."""
    root, _ = init_project(reef, tmp_path)
    r = reef("-C", str(root), "harness", "zone", "[/x]", "a\x1b[2Jb")
    assert r.code == 0, r.err
    assert "[/x]" in r.out and "a\\x1b[2Jb" in r.out and "\x1b" not in r.out
    config = (root / "harness.yaml").read_bytes()
    for path, shown, code in (("a\x1b[2Jb", "a\\x1b[2Jb", "001B"), ("x\ny", "x\\x0ay", "000A")):
        r = reef("-C", str(root), "harness", "freeze", path)
        assert r.code == 4, r.err
        assert r.err == (f"reef: error: {shown}: path contains control character U+{code}, which no zone may name; "
                         "nothing published\n")
    assert (root / "harness.yaml").read_bytes() == config


def test_an_edit_to_harness_yaml_saved_during_a_zone_change_is_kept(reef, tmp_path, monkeypatch):
    """'reef harness freeze' checked harness.yaml once, published, then wrote the new zones over the working-tree
    file: an edit saved while the release was being published was lost. The file is compared again right before
    it is replaced (exit 3, the edit kept, the release named)."""
    from reef_cli.store import HarnessStore

    root, _ = init_project(reef, tmp_path)
    cfg = root / "harness.yaml"
    publish = HarnessStore.publish

    def publish_then_edit(self, *args, **kwargs):
        res = publish(self, *args, **kwargs)
        cfg.write_text(cfg.read_text() + "# my edit, saved meanwhile\n")
        return res

    monkeypatch.setattr(HarnessStore, "publish", publish_then_edit)
    r = reef("-C", str(root), "harness", "freeze", "reef/notes.md")
    assert r.code == 3, r.err
    assert r.err.startswith("reef: error: reef/notes.md is now frozen in release rel_") and r.err.endswith(
        f"but {cfg} changed while reef was publishing it; your edit is kept and the file was not rewritten — bring "
        "the release's zones into it ('reef diff') before you publish it\n")
    assert cfg.read_text().endswith("# my edit, saved meanwhile\n") and "reef/notes.md" not in cfg.read_text()
