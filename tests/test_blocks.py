"""Managed blocks: parse, edit bullet by bullet under budgets, and report damage (never guess)."""

from __future__ import annotations

import json

import pytest

from reef_cli.blocks import BudgetExceeded, bullet_lines, clean_text, outside_unchanged, parse, render_bullet
from reef_cli.errors import InvalidInput

DOC = """# Title

Human text above. <!-- not reef -->

<!-- reef:begin learned -->
- Always run the tests before finishing. <!-- reef:b3f2a1 -->
- Keep commits small. <!-- reef:c0ffee -->
<!-- reef:end learned -->

Human text below.
"""


def test_parse_and_render_round_trip_is_byte_identical():
    block = parse(DOC, source="CLAUDE.md")
    assert [b.id for b in block.bullets] == ["b3f2a1", "c0ffee"]
    assert block.bullets[0].line == 6 and block.bullets[0].text == "Always run the tests before finishing."
    assert block.render() == DOC


def test_add_update_remove_touch_only_the_inside():
    block = parse(DOC, source="CLAUDE.md")
    block.add("abc123", "Use tabs.")
    block.update("b3f2a1", "Always run the whole test suite before finishing.")
    assert block.remove("c0ffee") and not block.remove("c0ffee")
    new = block.render()
    assert outside_unchanged(DOC, new, source="CLAUDE.md")
    assert "- Use tabs. <!-- reef:abc123 -->\n<!-- reef:end learned -->" in new
    assert "Keep commits small" not in new
    assert new.startswith("# Title\n\nHuman text above. <!-- not reef -->\n")
    assert new.endswith("<!-- reef:end learned -->\n\nHuman text below.\n")


def test_add_of_an_existing_id_updates_instead_of_duplicating():
    block = parse(DOC, source="CLAUDE.md")
    block.add("b3f2a1", "Run tests.")
    assert [b.id for b in block.bullets] == ["b3f2a1", "c0ffee"]
    assert block.get("b3f2a1").text == "Run tests."


def test_budgets_are_checked_on_every_write_and_leave_the_block_unchanged():
    block = parse(DOC, source="CLAUDE.md")
    with pytest.raises(BudgetExceeded, match="max_bullets 2"):
        block.add("abc123", "Third.", max_bullets=2)
    assert len(block.bullets) == 2
    before = block.render()
    with pytest.raises(BudgetExceeded, match="max_chars 100"):
        block.update("c0ffee", "x " * 60, max_chars=100)
    assert block.render() == before
    assert block.chars() == len(block.inner_text())


def test_crlf_files_keep_their_line_endings():
    doc = DOC.replace("\n", "\r\n")
    block = parse(doc, source="AGENTS.md")
    block.add("abc123", "New.")
    out = block.render()
    assert "- New. <!-- reef:abc123 -->\r\n" in out
    assert outside_unchanged(doc, out, source="AGENTS.md")


def test_foreign_lines_inside_the_block_are_kept():
    doc = DOC.replace("- Keep commits small.", "A human note.\n- Keep commits small.")
    block = parse(doc, source="CLAUDE.md")
    block.remove("b3f2a1")
    assert "A human note.\n" in block.render()


def test_clean_text_cannot_break_the_id_comment():
    assert render_bullet("abc123", "a --> b <!-- c\nd") == "- a - -> b <!- - c d <!-- reef:abc123 -->"
    assert len(clean_text("word " * 200)) <= 300
    with pytest.raises(InvalidInput):
        render_bullet("XYZ", "t")


@pytest.mark.parametrize(
    "damage, line, message",
    [
        (lambda d: d.replace("<!-- reef:end learned -->\n", ""), 5, "has no end marker"),
        (lambda d: d.replace("<!-- reef:begin learned -->\n", ""), 7, "without a matching"),
        (lambda d: d.replace("<!-- reef:c0ffee -->", "<!-- reef:b3f2a1 -->"), 7, "duplicated"),
        (lambda d: d.replace("<!-- reef:c0ffee -->", "<!-- reef:zz -->"), 7, "malformed reef bullet id"),
        (lambda d: d + "<!-- reef:begin learned -->\n<!-- reef:end learned -->\n", 11, "second managed block"),
        (lambda d: d.replace("<!-- reef:end learned -->", "<!-- reef:end learned"), 8, "malformed reef marker"),
    ],
)
def test_damaged_blocks_are_reported_with_file_and_line(damage, line, message):
    with pytest.raises(InvalidInput, match=message) as exc:
        parse(damage(DOC), source="CLAUDE.md")
    assert f"CLAUDE.md:{line}:" in str(exc.value)


def test_bullet_lines_are_the_list_items_outside_reefs_blocks():
    doc = "- Human rule. <!-- reef:abc123 -->\r\n" + DOC + "1. Numbered rule.\n"
    assert bullet_lines(doc) == [(1, "Human rule."), (12, "Numbered rule.")]


def test_no_markers_is_not_damage():
    assert parse("# nothing here\n", source="x.md") is None


# ------------------------------------------------------------------------------------------- through the CLI


def test_evolve_reports_a_damaged_block_and_leaves_the_file_alone(reef, tmp_path):
    from test_evolve import feedback, init_project

    root, ledger = init_project(reef, tmp_path)
    claude = root / "CLAUDE.md"
    damaged = claude.read_text().replace("<!-- reef:end learned -->\n", "")
    claude.write_text(damaged)
    r = reef("-C", str(root), "publish", "-m", "human broke the block")
    assert r.code == 0, r.err
    feedback(ledger, {"lesson": "Run the linter before committing."}, 5)
    r = reef("-C", str(root), "harness", "evolve", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    blocked = [b for b in out["blocked"] if b["kind"] == "damaged"]
    assert blocked and blocked[0]["path"] == "CLAUDE.md"
    assert "CLAUDE.md:7: managed block 'learned' has no end marker" in blocked[0]["reason"]
    assert claude.read_text() == damaged
    assert not any(o["path"] == "CLAUDE.md" for o in out["ops"])


def test_evolve_refuses_duplicated_ids(reef, tmp_path):
    from test_evolve import feedback, init_project

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, {"lesson": "Run the linter before committing."}, 5)
    assert reef("-C", str(root), "harness", "evolve").code == 0
    claude = root / "CLAUDE.md"
    text = claude.read_text()
    line = next(ln for ln in text.splitlines() if "reef:" in ln and ln.startswith("- "))
    claude.write_text(text.replace(line, line + "\n" + line))
    assert reef("-C", str(root), "publish", "-m", "dup").code == 0
    feedback(ledger, {"lesson": "Never push to main."}, 5)
    out = json.loads(reef("-C", str(root), "harness", "evolve", "--json").out)
    reasons = [b["reason"] for b in out["blocked"]]
    assert any("is duplicated in managed block" in r for r in reasons)
    assert claude.read_text().count(line) == 2
