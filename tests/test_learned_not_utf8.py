"""A byte that is not UTF-8 in a file reef edits (a Latin-1 "café" in the human's part of CLAUDE.md) used to hide the
whole file from the Curator: `reef harness demote` exited 0 ("pattern memory only") while the bullet stayed in
CLAUDE.md and every later release. The block is now found and edited with every byte outside it kept; such a byte
inside the block is damage, refused with exit 4 naming file and line."""

from __future__ import annotations

import json

import pytest

from reef_cli.project import Project
from reef_cli.store import HarnessStore
from test_evolve import LINT, LINT_KEY, block_ids, evolve, feedback, init_project, memory, releases

CAFE = b"Notes from the caf\xe9 meeting\n"  # Latin-1, not UTF-8


def _add_cafe(reef, root) -> bytes:
    claude = root / "CLAUDE.md"
    claude.write_bytes(claude.read_bytes() + CAFE)
    assert reef("-C", str(root), "publish", "-m", "a Latin-1 note").code == 0
    return claude.read_bytes()


def _outside(data: bytes) -> tuple[bytes, bytes]:
    begin, end = data.index(b"<!-- reef:begin learned -->"), data.index(b"<!-- reef:end learned -->")
    return data[:begin], data[end:]


def test_a_latin1_byte_outside_the_block_neither_hides_it_nor_changes(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    claude = root / "CLAUDE.md"
    before = _add_cafe(reef, root)
    feedback(ledger, LINT, 5)
    out = evolve(reef, root)
    bid = memory(root)[LINT_KEY]["id"]
    assert [(o["op"], o["path"]) for o in out["ops"]] == [("add", "CLAUDE.md")]
    after = claude.read_bytes()
    assert f"reef:{bid}".encode() in after and _outside(after) == _outside(before) and after.endswith(CAFE)
    r = reef("-C", str(root), "harness", "bullets", "--json")
    assert r.code == 0, r.err
    assert [b["id"] for b in json.loads(r.out)["bullets"]] == [bid]
    r = reef("-C", str(root), "harness", "demote", f"reef:{bid}", "--json")
    assert r.code == 0, r.err
    assert [(o["op"], o["path"]) for o in json.loads(r.out)["ops"]] == [("remove", "CLAUDE.md")]
    assert claude.read_bytes() == before  # the bullet gone, every other byte as the human left it
    store = HarnessStore(Project(root), "default")
    assert store.files_of(store.head())["CLAUDE.md"].data == before  # and so does the head release


def test_a_latin1_byte_inside_the_block_refuses_demote_with_exit_4(reef, tmp_path):
    root, ledger = init_project(reef, tmp_path)
    claude = root / "CLAUDE.md"
    feedback(ledger, LINT, 5)
    evolve(reef, root)
    bid = memory(root)[LINT_KEY]["id"]
    claude.write_bytes(claude.read_bytes().replace(b"<!-- reef:end learned -->", CAFE + b"<!-- reef:end learned -->"))
    assert reef("-C", str(root), "publish", "-m", "a Latin-1 note in the block").code == 0
    data, steps = claude.read_bytes(), len(releases(reef, root))
    line = data[: data.index(CAFE)].count(b"\n") + 1
    r = reef("-C", str(root), "harness", "demote", f"reef:{bid}")
    assert r.code == 4, r.err
    assert r.err.strip() == (f"reef: error: cannot demote reef:{bid}: it is in CLAUDE.md, whose reef block reef "
                             f"cannot edit (CLAUDE.md:{line}: bytes that are not UTF-8 inside managed block 'learned'; "
                             f"save the file as UTF-8 or fix the line by hand); nothing changed")
    assert claude.read_bytes() == data and len(releases(reef, root)) == steps
    assert block_ids(root / "CLAUDE.local.md") == []


@pytest.mark.parametrize(("rule", "lesson", "kind"), [
    ("Never use tabs for indentation.", "Always use tabs for indentation.", "contradiction"),
    ("Always use tabs for indentation.", "Use tabs for indentation.", "covered"),
])
def test_a_human_rule_in_a_file_with_a_latin1_byte_still_counts(reef, tmp_path, rule, lesson, kind):
    """It blocks a lesson contradicting it, and covers one it already states."""
    root, ledger = init_project(reef, tmp_path)
    claude = root / "CLAUDE.md"
    claude.write_bytes(claude.read_bytes().replace(b"## Learned by reef",
                                                   f"- {rule}\n\n## Learned by reef".encode()) + CAFE)
    assert reef("-C", str(root), "publish", "-m", "a human rule").code == 0
    feedback(ledger, {"lesson": lesson}, 3)
    (b,) = evolve(reef, root)["blocked"]
    assert b["kind"] == kind and b["path"] == "CLAUDE.md:5"
    if kind == "covered":
        assert not b["negative"]
    else:
        assert block_ids(root / "CLAUDE.local.md") == []
    assert block_ids(root / "CLAUDE.local.md") == []
