"""A malformed pattern memory (`"through_seq": "abc"`, `origins` as a list) used to be published without complaint,
travel to teammates, and make every later `reef harness bullets|reflect` end in "unexpected error" (exit 1). Its
shape (schemas/patterns.schema.json, plus real dates and unique keys/ids) is now checked at publish and at every read:
one line naming the file and the field, exit 4."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from test_evolve import LINT, evolve, feedback, init_project, releases

GOOD = {"key": "do:pnpm+use", "id": "b00001", "text": "Use pnpm.", "polarity": "do", "count": 5,
        "first_seen": "2026-11-01T10:00:00.000000Z", "last_seen": "2026-11-02T10:00:00Z", "evidence": ["rec_1"],
        "origins": {"feedback": 5}, "suppressed": None, "utility": None}
FIX = "; fix it, or restore the file with 'reef checkout'"


def doc(**top) -> dict:
    return {"version": 1, "through_seq": 0, "patterns": [GOOD], **top}


def pattern(**fields) -> dict:
    return doc(patterns=[{**GOOD, **fields}])


BAD = [
    (doc(through_seq="abc"), "through_seq", "'abc' is not of type 'integer', 'null'"),
    (doc(through_seq=-1), "through_seq", "-1 is less than the minimum of 0"),
    (pattern(origins=["x"]), "patterns[0].origins", "['x'] is not of type 'object', 'null'"),
    (pattern(origins={"feedback": "many"}), "patterns[0].origins.feedback", "'many' is not of type 'integer'"),
    (pattern(count="5"), "patterns[0].count", "'5' is not of type 'integer'"),
    (pattern(count=True), "patterns[0].count", "True is not of type 'integer'"),
    (pattern(id="zz"), "patterns[0].id", "'zz' does not match '^[0-9a-f]{6,16}$'"),
    (pattern(polarity="maybe"), "patterns[0].polarity", "'maybe' is not one of ['do', 'dont']"),
    (pattern(last_seen="last tuesday"), "patterns[0].last_seen", "'last tuesday' does not match"),
    (pattern(last_seen="2026-13-45T00:00:00Z"), "patterns[0].last_seen",
     "'2026-13-45T00:00:00Z' is not a date and time"),
    (pattern(evidence="rec_1"), "patterns[0].evidence", "'rec_1' is not of type 'array', 'null'"),
    (pattern(utility="high"), "patterns[0].utility", "'high' is not of type 'number', 'null'"),
    (pattern(utility=float("nan")), "patterns[0].utility", "nan is not a finite number"),
    (pattern(suppressed="yes"), "patterns[0].suppressed", "'yes' is not of type 'object', 'null'"),
    (pattern(suppressed={"needed": "2"}), "patterns[0].suppressed.needed", "'2' is not of type 'integer'"),
    (pattern(text="\x1b[2Jhi", key=7), "patterns[0].key", "7 is not of type 'string'"),
    (doc(patterns=[GOOD, {**GOOD, "key": "do:other"}]), "patterns[1].id", "bullet id 'b00001' is also patterns[0]'s"),
    (doc(patterns=[GOOD, {**GOOD, "id": "b00002"}]), "patterns[1].key", "'do:pnpm+use' is also patterns[0]'s key"),
]


_TEMPLATE: list[Path] = []


def copied_project(reef, tmp_path: Path) -> Path:
    """init_project's project, copied from one made by the first caller in this process (in its own tmp_path, with
    its HOME isolated): the BAD cases only replace the memory file, so `reef init` need not run 18 times."""
    if not _TEMPLATE:
        (tmp_path / "template").mkdir()
        _TEMPLATE.append(init_project(reef, tmp_path / "template")[0])
    root = tmp_path / "proj"
    shutil.copytree(_TEMPLATE[0], root, symlinks=True)
    return root


@pytest.mark.parametrize("memory,field,problem", BAD, ids=[f"{b[1]}-{n}" for n, b in enumerate(BAD)])
def test_every_harness_command_names_the_bad_field_with_exit_4(reef, tmp_path, memory, field, problem):
    root = copied_project(reef, tmp_path)
    path = root / "reef/memory/patterns.json"
    path.write_text(json.dumps(memory))
    for args in (("harness", "bullets"), ("harness", "patterns"), ("harness", "reflect"), ("harness", "evolve")):
        r = reef("-C", str(root), *args)
        assert r.code == 4, (args, r.err)
        assert r.err.startswith(f"reef: error: {path}: field '{field}': {problem}"), (args, r.err)
        assert r.err.endswith(FIX + "\n") and r.err.count("\n") == 1 and "unexpected" not in r.err


def test_publish_refuses_a_malformed_memory_and_keeps_the_head(reef, tmp_path):
    root, _ = init_project(reef, tmp_path)
    steps = len(releases(reef, root))
    (root / "reef/memory/patterns.json").write_text(json.dumps(doc(through_seq="abc")))
    r = reef("-C", str(root), "publish", "-m", "memory")
    assert r.code == 4, r.err
    assert r.err == (f"reef: error: reef/memory/patterns.json: field 'through_seq': 'abc' is not of type 'integer', "
                     f"'null'{FIX}; nothing was published\n")
    assert len(releases(reef, root)) == steps
    (root / "reef/memory/patterns.json").write_text(json.dumps(doc()))
    assert reef("-C", str(root), "publish", "-m", "memory").code == 0


def test_the_memory_reef_writes_passes_its_own_check(reef, tmp_path):
    """Evolve writes memory with suppression, origins and evidence; a later publish and read accept it."""
    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, LINT, 5)
    evolve(reef, root)
    bid = next(iter(json.loads((root / "reef/memory/patterns.json").read_text())["patterns"]))["id"]
    assert reef("-C", str(root), "harness", "demote", f"reef:{bid}").code == 0
    assert reef("-C", str(root), "harness", "bullets").code == 0
    mem = root / "reef/memory/patterns.json"
    data = json.loads(mem.read_text())
    assert data["patterns"][0]["suppressed"]["origin"] == "human"
    mem.write_text(json.dumps(data, indent=4))  # the same memory, other bytes: publish checks it again
    r = reef("-C", str(root), "publish", "-m", "reformatted memory")
    assert r.code == 0, r.err


@pytest.mark.parametrize("memory,field,problem", [(doc(), None, None), (doc(patterns=[]), None, None),
                                                  *[b for b in BAD if "also" not in b[2] and "date" not in b[2]
                                                    and "finite" not in b[2]]])
def test_the_fast_check_agrees_with_jsonschema(memory, field, problem):
    """memory_shape walks schemas/patterns.schema.json itself (jsonschema took over a second on a full memory);
    on every case here jsonschema gives the same verdict, field and wording."""
    import jsonschema

    from reef_cli.errors import InvalidInput
    from reef_cli.memory_shape import SCHEMA_PATH, check, field_name

    errors = list(jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text())).iter_errors(memory))
    if field is None:
        assert errors == []
        check(memory, "m.json")
        return
    (err,) = errors
    assert field_name(err.absolute_path) == field and err.message.startswith(problem)
    with pytest.raises(InvalidInput) as exc:
        check(memory, "m.json")
    assert str(exc.value) == f"m.json: field '{field}': {err.message}{FIX}"
