"""Task suites: YAML in the Frozen zone, validated by the shipped schema, canary tasks held out from the Reflector."""

from __future__ import annotations

import pytest

from reef_cli.errors import InvalidInput, PolicyError
from reef_cli.gitstore import Entry
from reef_cli.tasks import Setup, check_held_out, load_suite, parse_task_file, prompt_digest

SUITE = """\
version: 1
tasks:
  - id: hello
    prompt: 'Write the text "hi" to hi.txt.'
    check: grep -qx hi hi.txt
    tags: [sentinel]
  - id: fix
    prompt: Fix it.
    setup:
      files: {README.md: "teh\\n"}
      command: touch prepared
    check: [sh, -c, "test -f prepared"]
    timeout: 5
  - id: learn
    split: train
    description: The rule it needs.
    prompt: Learn from me.
    check: "true"
    skill: release-notes
    tags: [skill-trigger]
"""


def test_suite_parses_with_defaults():
    tasks = parse_task_file(SUITE, "canary/a.yaml")
    hello, fix, learn = tasks
    assert hello.split == "canary" and hello.timeout == 300 and hello.sentinel and hello.setup is None
    assert hello.check == "grep -qx hi hi.txt" and hello.source == "canary/a.yaml"
    assert fix.check == ("sh", "-c", "test -f prepared") and fix.timeout == 5.0
    assert fix.setup == Setup(files=(("README.md", "teh\n"),), command="touch prepared")
    assert learn.split == "train" and learn.skill_trigger and learn.skill == "release-notes"
    assert learn.description == "The rule it needs."


def test_single_task_file_and_setup_command_string():
    (task,) = parse_task_file("id: one\nprompt: p\ncheck: 'true'\nsetup: make prepare\n", "canary/one.yaml")
    assert task.id == "one" and task.setup == Setup(command="make prepare")


def test_digest_follows_what_is_asked_not_where_it_is_written():
    a = parse_task_file("id: one\nprompt: p\ncheck: 'true'\n", "canary/a.yaml")[0]
    b = parse_task_file("id: one\nprompt: p\ncheck: 'true'\n", "canary/b.yaml")[0]
    c = parse_task_file("id: one\nprompt: q\ncheck: 'true'\n", "canary/a.yaml")[0]
    assert a.digest == b.digest != c.digest
    assert a.prompt_digest == prompt_digest("p") and a.prompt_digest.startswith("sha256:")


@pytest.mark.parametrize("text, expected", [
    ("tasks:\n  - id: a\n    prompt: p\n", "canary/x.yaml: line 2: task 'a' field 'tasks.0': 'check' is a required property"),
    ("tasks:\n  - id: a\n    prompt: p\n    check: 'true'\n    colour: red\n",
     "canary/x.yaml: line 5: task 'a' field 'tasks.0.colour': unknown field 'colour'"),
    ("id: a\nprompt: p\ncheck: 'true'\nsplit: test\n", "canary/x.yaml: line 4: field 'split': 'test' is not one of"),
    ("id: a b\nprompt: p\ncheck: 'true'\n", "field 'id': 'a b' does not match"),
    ("id: a\nprompt: p\ncheck: 'true'\nsetup: {files: {../escape: x}}\n", "field 'setup"),
    ("id: a\nprompt: p\ncheck: 'true'\ntimeout: 0\n", "field 'timeout'"),
    ("- just\n- a list\n", "expected a task (a mapping with 'id') or a suite"),
    ("id: [unclosed\n", "canary/x.yaml: line 2: invalid YAML"),
])
def test_invalid_files_name_file_line_task_and_field(text, expected):
    with pytest.raises(InvalidInput) as err:
        parse_task_file(text, "canary/x.yaml")
    assert expected in str(err.value)


def test_load_suite_uses_the_globs_and_refuses_duplicate_ids():
    files = {
        "canary/a.yaml": Entry(b"id: one\nprompt: p\ncheck: 'true'\n"),
        "canary/deep/b.yaml": Entry(b"id: two\nprompt: p\ncheck: 'true'\n"),
        "notes.yaml": Entry(b"not: a task\n"),
    }
    suite = load_suite(files, ("canary/*.yaml",))
    assert [t.id for t in suite.canary] == ["one"] and suite.files == ("canary/a.yaml",)
    assert [t.id for t in load_suite(files, ("canary/**",)).tasks] == ["one", "two"]
    files["canary/c.yaml"] = Entry(b"id: one\nprompt: q\ncheck: 'false'\n")
    with pytest.raises(InvalidInput, match=r"canary/c.yaml: task id 'one' is already used in canary/a.yaml"):
        load_suite(files, ("canary/*.yaml",))


def test_suite_digest_covers_only_the_canary_split():
    base = parse_task_file(SUITE, "canary/a.yaml")
    from reef_cli.tasks import Suite

    d1 = Suite(tuple(base)).digest
    changed_train = [t if t.split == "canary" else parse_task_file(
        "id: learn\nsplit: train\nprompt: other\ncheck: 'true'\n", "x")[0] for t in base]
    assert Suite(tuple(changed_train)).digest == d1
    changed_canary = [parse_task_file("id: hello\nprompt: other\ncheck: 'true'\n", "x")[0] if t.id == "hello" else t
                      for t in base]
    assert Suite(tuple(changed_canary)).digest != d1


class Rec:
    def __init__(self, kind, payload, record_id="rec_1"):
        self.kind, self.payload, self.record_id = kind, payload, record_id


def test_a_canary_task_the_reflector_has_seen_is_refused():
    tasks = parse_task_file(SUITE, "canary/a.yaml")
    check_held_out(tasks, [Rec("episode", {"task_id": "hello"}), Rec("interaction", {"task_id": "other"})])
    with pytest.raises(PolicyError) as err:
        check_held_out(tasks, [Rec("interaction", {"task_id": "hello"}, "rec_SEEN")])
    msg = str(err.value)
    assert "canary task 'hello' (canary/a.yaml) is no longer held out" in msg and "rec_SEEN" in msg
    assert "split: train" in msg
    seen_prompt = {"prompt": {"digest": prompt_digest('Write the text "hi" to hi.txt.')}}
    with pytest.raises(PolicyError, match="the Reflector has seen its prompt in interaction"):
        check_held_out(tasks, [{"kind": "interaction", "payload": seen_prompt, "record_id": "r"}])
    check_held_out(tasks, [Rec("interaction", {"argv": ["claude", "-p", "Write hi."]})])
    with pytest.raises(PolicyError, match="seen its prompt in a command line in interaction rec_RUN"):
        check_held_out(tasks, [Rec("interaction", {"argv": ["claude", "-p", 'Write the text "hi" to hi.txt.']},
                                   "rec_RUN")])


def test_train_tasks_may_have_been_seen():
    tasks = parse_task_file(SUITE, "canary/a.yaml")
    check_held_out(tasks, [Rec("interaction", {"task_id": "learn"}),
                           Rec("interaction", {"prompt": {"digest": prompt_digest("Learn from me.")}})])
