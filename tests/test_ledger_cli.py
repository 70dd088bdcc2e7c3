"""`reef ledger` through the CLI: reading, verification of a tampered file, export, compaction."""

from __future__ import annotations

import json

import pytest

from conftest import reef_init, run_reef


@pytest.fixture
def project(tmp_path, reef, monkeypatch):
    """Four runs and four reports, made in-process (set-up: the `reef ledger` calls below use the console script)."""
    reef_init(tmp_path)
    with monkeypatch.context() as m:
        m.setenv("REEF_SESSION", "ledger-cli")
        for i in range(4):
            r = reef("-C", str(tmp_path), "run", "--", "sh", "-c", f"echo run {i}; exit {i % 2}")
            assert r.code == i % 2, r.err
            assert reef("-C", str(tmp_path), "report", "--score", str(i / 4), "--feedback", f"feedback {i}").code == 0
    return tmp_path


def jl(text: str) -> list[dict]:
    return [json.loads(l) for l in text.splitlines() if l.strip()]


def test_tail_show_query(project):
    tail = jl(run_reef("ledger", "tail", "-n", "3", "--json", cwd=project).stdout)
    assert [r["seq"] for r in tail] == [6, 7, 8]
    one = json.loads(run_reef("ledger", "show", tail[0]["record_id"], "--json", cwd=project).stdout)
    assert one == tail[0]
    reports = jl(run_reef("ledger", "query", "--kind", "report", "--json", cwd=project).stdout)
    assert [r["payload"]["score"] for r in reports] == [0, 0.25, 0.5, 0.75]
    head = json.loads(run_reef("status", "--json", cwd=project).stdout)["head"]
    by_release = jl(run_reef("ledger", "query", "--release", "1", "--json", cwd=project).stdout)
    assert len(by_release) == 8 and all(r["release_id"] == head["release_id"] for r in by_release)
    assert jl(run_reef("ledger", "query", "--since", "2999-01-01", "--json", cwd=project).stdout) == []
    r = run_reef("ledger", "query", "--since", "yesterday", cwd=project)
    assert r.returncode == 4 and "--since 'yesterday'" in r.stderr
    table = run_reef("ledger", "tail", cwd=project)
    assert table.returncode == 0 and "feedback 3" in table.stdout
    r = run_reef("ledger", "show", "rec_missing", cwd=project)
    assert r.returncode == 1 and "rec_missing" in r.stderr


def test_verify_names_the_edited_record(project):
    assert run_reef("ledger", "verify", cwd=project).stdout.startswith("ledger intact: 8 record(s)")
    path = project / ".reef/scenarios/default/ledger.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    victim = json.loads(lines[5])
    assert b"feedback 2" in lines[5]
    lines[5] = lines[5].replace(b"feedback 2", b"feedback X")
    path.write_bytes(b"".join(lines))
    r = run_reef("ledger", "verify", "--json", cwd=project)
    assert r.returncode == 4
    res = json.loads(r.stdout)
    assert res["ok"] is False and res["first_bad_record_id"] == victim["record_id"] and res["problem"] == "edited"
    r = run_reef("ledger", "verify", cwd=project)
    assert r.returncode == 4 and victim["record_id"] in r.stderr


def test_export_langfuse(project):
    r = run_reef("ledger", "export", "--format", "langfuse", cwd=project)
    scores = jl(r.stdout)
    interactions = jl(run_reef("ledger", "query", "--kind", "interaction", "--json", cwd=project).stdout)
    assert [s["traceId"] for s in scores] == [i["record_id"] for i in interactions]
    assert {s["name"] for s in scores} == {"reef.score"} and scores[1]["value"] == 0.25
    assert scores[1]["comment"] == "feedback 1" and scores[1]["dataType"] == "NUMERIC"
    full = jl(run_reef("ledger", "export", cwd=project).stdout)
    assert len(full) == 8
    r = run_reef("ledger", "export", "--format", "csv", cwd=project)
    assert r.returncode == 4 and "--format csv" in r.stderr


def test_compact_keeps_chain_verifiable(project):
    r = run_reef("ledger", "compact", "--keep", "2", "--json", cwd=project)
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["kind"] == "compaction" and rec["payload"]["removed_count"] == 6
    assert run_reef("ledger", "verify", cwd=project).returncode == 0
    assert len(jl(run_reef("ledger", "export", cwd=project).stdout)) == 3
    r = run_reef("ledger", "compact", cwd=project)
    assert r.returncode == 4 and "exactly one of --before" in r.stderr
