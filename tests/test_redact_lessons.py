"""No secret becomes a lesson: feedback holding a secret in each shape that once leaked (issue 10) goes through
`reef report` and `reef harness evolve`, and neither pattern memory nor CLAUDE.md holds any of it — also when the
record reached the ledger unredacted (a ledger written by an older reef, or an ingest path that forgot to redact)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import reef_init, run_reef
from redact_corpus import DOCKER_AUTH, PW_AT, V
from test_redact_corpus import leaked

ESC = "\x1b"
# (lesson text holding a secret, the secret)
LEAKED_SHAPES = [
    (f"Export {ESC}[32m{V['ghp']}{ESC}[0m as GH_TOKEN before pushing tags.", V["ghp"]),
    (f"Log in to the staging database with mysql --password {V['pw1']} before migrating.", V["pw1"]),
    (f"Dump the staging tables with mysqldump -uroot -p{V['pw2']} before migrating.", V["pw2"]),
    (f"Call the deploy tool with --token={V['pw3'][::-1]} when releasing builds.", V["pw3"][::-1]),
    (f"Keep machine api.example.com login bob password {V['pw4']} in the netrc file for uploads.", V["pw4"]),
    (f'Write {{"auths": {{"ghcr.io": {{"auth": "{DOCKER_AUTH}"}}}}}} into the docker config for pulls.',
     DOCKER_AUTH),
    (f"Clone the mirror from https://bob:{PW_AT}@git.example.com/r.git for vendored code.", PW_AT),
    (f"Query the model through the Groq key {V['groq']} for cheap summaries.", V["groq"]),
    (f"Post release notes through the SendGrid key {V['sendgrid']} after tagging.", V["sendgrid"]),
]


def _init(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    return reef_init(root, "--template", "claude")


def _published(root: Path) -> str:
    return (root / "CLAUDE.md").read_text() + (root / "reef/memory/patterns.json").read_text()


def _evolve(root: Path) -> dict:
    r = run_reef("harness", "evolve", "--json", cwd=root, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _assert_no_secret(text: str) -> None:
    for lesson, secret in LEAKED_SHAPES:
        assert leaked(secret, text) is None, f"{leaked(secret, text)!r} from {lesson!r}"


def test_secrets_in_reported_feedback_never_reach_memory_or_claude_md(tmp_path):
    root = _init(tmp_path)
    env = {"REEF_SESSION": "redact-e2e"}
    fb = tmp_path / "feedback.json"
    fb.write_text(json.dumps({"lesson": [lesson for lesson, _ in LEAKED_SHAPES]}))
    for _ in range(5):
        assert run_reef("run", "--", "true", cwd=root, env=env).returncode == 0
        r = run_reef("report", "--score", "0", "--feedback-json", str(fb), cwd=root, env=env)
        assert r.returncode == 0, r.stderr
    ledger = (root / ".reef/scenarios/default/ledger.jsonl").read_text()
    _assert_no_secret(ledger)  # redacted as it was reported
    out = _evolve(root)
    assert out["status"] == "published", out
    published = _published(root)
    _assert_no_secret(published)
    assert published.count("[REDACTED:") >= len(LEAKED_SHAPES)  # the lessons were learned, their secrets were not


def test_secrets_in_unredacted_ledger_records_never_reach_memory_or_claude_md(tmp_path):
    from reef_cli.ledger import Ledger

    root = _init(tmp_path)
    ledger = Ledger(root / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
    for _ in range(5):  # as a reef before this fix stored them: the secrets in the feedback as given
        run = ledger.append("interaction", {"argv": ["agent"], "exit_code": 0, "routing": []},
                            release_id=None, content_id=None)
        ledger.append("report", {"score": 0, "feedback": {"lesson": [lesson for lesson, _ in LEAKED_SHAPES]},
                                 "receipts": [run.record_id]}, release_id=None, content_id=None)
    out = _evolve(root)
    assert out["status"] == "published", out
    published = _published(root)
    _assert_no_secret(published)
    assert published.count("[REDACTED:") >= len(LEAKED_SHAPES)
    reflect_records = [json.loads(line) for line in
                       (root / ".reef/scenarios/default/ledger.jsonl").read_text().splitlines()[-30:]]
    _assert_no_secret(json.dumps([r for r in reflect_records if r.get("kind") in ("reflect", "proposal")]))


def test_a_failed_runs_stderr_becomes_a_lesson_without_its_secret(tmp_path):
    from reef_cli.ledger import Ledger
    from reef_cli.reflect import reflect
    from reef_cli.patterns import PatternMemory

    ledger = Ledger(tmp_path / "ledger.jsonl", "default")
    stderr = f"fatal: could not read from https://bob:{PW_AT}@git.example.com/r.git: auth failed"
    for _ in range(3):
        ledger.append("interaction", {"argv": ["agent"], "exit_code": 1, "stderr": {"excerpt": stderr}},
                      release_id=None, content_id=None)
    memory = PatternMemory()
    result = reflect(ledger, "default", memory, threshold=0.6)
    assert result.observations == 3
    dumped = memory.dumps().decode()
    assert leaked(PW_AT, dumped) is None and "[REDACTED:url_password]" in dumped


def test_the_llm_reflector_is_sent_no_secret(tmp_path):
    from reef_cli.ledger import Ledger
    from reef_cli.reflect import LLMBackend

    ledger = Ledger(tmp_path / "ledger.jsonl", "default")
    rec = ledger.append("report", {"score": 0, "feedback": "\n".join(lesson for lesson, _ in LEAKED_SHAPES)},
                        release_id=None, content_id=None)
    body = LLMBackend("http://127.0.0.1:9/v1", "m", excerpt_chars=4000).request_body([rec], ["Run the tests."])
    sent = json.dumps(body)
    for _, secret in LEAKED_SHAPES:
        assert leaked(secret, sent) is None and leaked(json.dumps(secret)[1:-1], sent) is None
    assert "Run the tests." in sent


def test_a_memory_written_before_the_fix_publishes_no_secret() -> None:
    from reef_cli.patterns import PatternMemory

    lesson, secret = LEAKED_SHAPES[1]
    doc = {"version": 1, "through_seq": 3, "through_hash": None, "patterns": [
        {"key": "do:database+log+mysql", "id": "a1b2c3", "text": lesson, "polarity": "do", "count": 5}]}
    memory = PatternMemory.loads(json.dumps(doc), "patterns.json")
    assert leaked(secret, memory.dumps().decode()) is None
    assert "[REDACTED:password]" in memory.patterns["do:database+log+mysql"].text


def test_a_secret_in_a_demote_reason_or_a_users_memory_field_is_never_stored(reef, tmp_path):
    """`reef harness demote KEY -m "...token..."` put the token into the ledger's negative record and, folded, into
    patterns.json's suppression reason, which the demote published at once; a secret in a field of patterns.json
    reef does not know (kept since fields round-trip) would reach the next automated release the same way."""
    from test_evolve import feedback, init_project

    root, ledger = init_project(reef, tmp_path)
    feedback(ledger, "Always run the tests before finishing.")
    assert reef("-C", str(root), "harness", "reflect").code == 0
    path = root / "reef/memory/patterns.json"
    doc = json.loads(path.read_text())
    doc["x_note"] = f"deploy with {V['ghp']}"
    doc["patterns"][0]["note"] = {"token": V["ghp"]}
    path.write_text(json.dumps(doc))
    r = reef("-C", str(root), "harness", "demote", "do:before+finish+run+test", "-m", f"wrong, see {V['ghp']}")
    assert r.code == 0, r.err
    assert reef("-C", str(root), "harness", "reflect").code == 0
    out = tmp_path / "release"
    assert reef("-C", str(root), "checkout", "HEAD", str(out)).code == 0
    for where in (ledger.path, path, out / "reef/memory/patterns.json"):
        assert V["ghp"] not in where.read_text(), where
    doc = json.loads(path.read_text())
    assert doc["x_note"].startswith("deploy with [REDACTED") and doc["patterns"][0]["suppressed"]["reason"]
