"""`Ledger.verify_since`: a long-running appender (the gateway) checks on exit only what followed its start once the
ledger is big, and anything but plain appends still gets the full verify that names it."""

from __future__ import annotations

import io
import json
import os
import time
import urllib.request
from pathlib import Path

import pytest

from gateway import in_process, init_project
from reef_cli import ledger as ledger_mod
from reef_cli.ledger import Ledger
from reef_cli.ledger.since import appended_since, position


def filled(path: Path, n: int) -> Ledger:
    ledger = Ledger(path, "default")
    ledger.append_many([{"kind": "run", "payload": {"i": i}, "release_id": None, "content_id": None} for i in range(n)])
    return ledger


@pytest.fixture
def small_threshold(monkeypatch):
    monkeypatch.setattr(ledger_mod, "SINCE_ABOVE_BYTES", 0)  # every ledger counts as big


def test_appends_after_the_start_chain_onto_it(tmp_path):
    ledger = filled(tmp_path / "l.jsonl", 5)
    start = position(ledger.path)
    assert (start.seq, start.end) == (5, os.path.getsize(ledger.path))
    assert appended_since(ledger.path, "default", start) == 0
    ledger.append_many([{"kind": "run", "payload": {"i": i}, "release_id": None, "content_id": None} for i in range(3)])
    assert appended_since(ledger.path, "default", start) == 3
    assert position(tmp_path / "missing.jsonl") is None


@pytest.mark.parametrize("damage", ["edited", "torn", "replaced", "foreign", "shorter"])
def test_anything_but_plain_appends_is_not_judged_here(tmp_path, damage):
    ledger = filled(tmp_path / "l.jsonl", 5)
    start = position(ledger.path)
    ledger.append_many([{"kind": "run", "payload": {"i": i}, "release_id": None, "content_id": None} for i in range(3)])
    data = ledger.path.read_bytes()
    if damage == "edited":
        at = data.rindex(b'"i":1}')  # in a record after the start
        ledger.path.write_bytes(data[:at] + b'"i":7}' + data[at + 6:])
    elif damage == "torn":
        with open(ledger.path, "ab") as handle:
            handle.write(b'{"kind": "run", "pay')
    elif damage == "replaced":
        copy = tmp_path / "copy"
        copy.write_bytes(data)
        copy.replace(ledger.path)
    elif damage == "foreign":
        assert appended_since(ledger.path, "other", start) is None
        return
    else:
        ledger.path.write_bytes(data[:start.end - 1])
    assert appended_since(ledger.path, "default", start) is None


def test_verify_since_falls_back_to_the_full_verify_which_names_the_problem(tmp_path, small_threshold):
    ledger = filled(tmp_path / "l.jsonl", 5)
    start = ledger.position()
    ledger.append_many([{"kind": "run", "payload": {"i": i}, "release_id": None, "content_id": None} for i in range(3)])
    result = ledger.verify_since(start)
    assert (result.ok, result.count, result.since_seq) == (True, 3, 5)
    lines = ledger.path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[6])
    record["payload"]["i"] = 99
    lines[6] = json.dumps(record).encode() + b"\n"
    ledger.path.write_bytes(b"".join(lines))
    result = ledger.verify_since(start)
    assert not result.ok and result.problem == "edited" and result.since_seq is None and "line 7" in result.message
    assert not Ledger(ledger.path, "default").verify_since(None).ok  # no start known: the full verify


def test_verify_since_leaves_a_small_ledger_to_the_full_verify(tmp_path):
    ledger = filled(tmp_path / "l.jsonl", 5)
    start = ledger.position()
    ledger.append("run", {}, release_id=None, content_id=None)
    result = ledger.verify_since(start)
    assert result.ok and result.since_seq is None and result.count == 6


def test_an_acknowledged_cut_is_never_read_as_intact(tmp_path, small_threshold):
    ledger = filled(tmp_path / "l.jsonl", 5)
    start = ledger.position()
    ledger.append_many([{"kind": "run", "payload": {"i": i}, "release_id": None, "content_id": None} for i in range(3)])
    ledger.close()
    size = os.path.getsize(ledger.path)
    lines = ledger.path.read_bytes().splitlines(keepends=True)
    os.truncate(ledger.path, size - len(lines[-1]))  # an acknowledged record cut off, in place
    result = Ledger(ledger.path, "default").verify_since(start)
    assert not result.ok and result.problem == "cut"


def test_the_gateway_checks_what_it_appended_on_a_big_ledger(tmp_path, small_threshold):
    from reef_cli.project import Project
    from reef_cli.serve.app import Gateway, ServeConfig

    from fakes import FakeLLM

    project = init_project(tmp_path / "proj")
    filled(project / ".reef" / "scenarios" / "default" / "ledger.jsonl", 4).close()  # there before the gateway
    with FakeLLM() as llm:
        log = io.StringIO()
        gw = Gateway(ServeConfig(project=Project(project), scenario="default", upstream=llm.url, port=0),
                     {}, log=log, out=io.StringIO())
        with in_process(gw) as url:
            for _ in range(3):
                req = urllib.request.Request(url + "/v1/chat/completions", method="POST", data=json.dumps(
                    {"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode(),
                    headers={"content-type": "application/json"})
                urllib.request.urlopen(req, timeout=30).read()
    before = Ledger(project / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
    total = sum(1 for _ in before.iter_records())
    assert (f"ledger of scenario 'default' verified: the 3 records after record {total - 3} chain onto it "
            "(the older ones: reef ledger verify)") in log.getvalue(), log.getvalue()


@pytest.mark.slow
def test_a_big_ledgers_exit_check_is_bounded(tmp_path):
    """The point of it, measured: 300,000 records (~190 MB), then 100 more; the whole chain against the appends."""
    ledger = Ledger(tmp_path / "big.jsonl", "default")
    for _ in range(30):
        ledger.append_many([{"kind": "run", "payload": {"text": "x" * 400, "i": i}, "release_id": None, "content_id": None} for i in range(10_000)])
    start = ledger.position()
    ledger.append_many([{"kind": "run", "payload": {"i": i}, "release_id": None, "content_id": None} for i in range(100)])
    t0 = time.perf_counter()
    since = ledger.verify_since(start)
    t1 = time.perf_counter()
    full = ledger.verify()
    t2 = time.perf_counter()
    assert since.ok and since.count == 100 and full.ok and full.count == 300_100
    print(f"verify_since {1000 * (t1 - t0):.1f} ms, verify {1000 * (t2 - t1):.1f} ms")
    assert t1 - t0 < (t2 - t1) / 20


def test_the_start_record_edited_in_place_is_not_read_as_intact(tmp_path, small_threshold):
    ledger = filled(tmp_path / "l.jsonl", 5)
    start = ledger.position()
    ledger.append_many([{"kind": "run", "payload": {"i": i}, "release_id": None, "content_id": None}
                        for i in range(2)])
    data = ledger.path.read_bytes()
    at = data.rindex(b'"i":4}', 0, start.end)  # the start record, same length
    ledger.path.write_bytes(data[:at] + b'"i":9}' + data[at + 6:])
    assert appended_since(ledger.path, "default", start) is None
    result = ledger.verify_since(start)
    assert not result.ok and result.problem == "edited" and "line 5" in result.message


@pytest.mark.parametrize("how", ["older copy", "deleted", "cut"])
@pytest.mark.parametrize("threshold", [0, None])
def test_records_this_process_appended_must_still_be_there(tmp_path, monkeypatch, how, threshold):
    """A ledger put back from an older copy, deleted or cut while the gateway ran verifies as a chain: the newest
    record the gateway appended (or, when it appended none, where the file ended at its start) says it lost some."""
    if threshold is not None:
        monkeypatch.setattr(ledger_mod, "SINCE_ABOVE_BYTES", threshold)
    ledger = filled(tmp_path / "l.jsonl", 5)
    copy = ledger.path.read_bytes()
    start = ledger.position()
    mine = ledger.append_many([{"kind": "run", "payload": {"i": i}, "release_id": None, "content_id": None}
                               for i in range(3)])[-1]
    ledger.close()
    if how == "older copy":
        (tmp_path / "copy").write_bytes(copy)
        (tmp_path / "copy").replace(ledger.path)
        (tmp_path / "l.jsonl.sync").unlink()  # the acknowledged mark gone too: only this process remembers
    elif how == "deleted":
        ledger.path.unlink()
        (tmp_path / "l.jsonl.sync").unlink()
    else:
        os.truncate(ledger.path, len(copy))
        (tmp_path / "l.jsonl.sync").unlink()
    result = Ledger(ledger.path, "default").verify_since(start, mine)
    assert not result.ok and result.problem == "lost", result
    assert f"record {mine.record_id} (seq 8), the newest this process appended, is not in the file any more" \
        in result.message
    assert Ledger(ledger.path, "default").verify_since(start).ok is (how != "deleted")  # appended nothing
    assert Ledger(ledger.path, "default").verify_since(start, None).problem in (None, "lost")


def test_the_gateway_says_so_when_its_records_were_lost_while_it_ran(tmp_path):
    from reef_cli.project import Project
    from reef_cli.serve.app import Gateway, ServeConfig

    from fakes import FakeLLM

    project = init_project(tmp_path / "proj")
    path = project / ".reef" / "scenarios" / "default" / "ledger.jsonl"
    filled(path, 4).close()
    before = path.read_bytes()
    with FakeLLM() as llm:
        log = io.StringIO()
        gw = Gateway(ServeConfig(project=Project(project), scenario="default", upstream=llm.url, port=0),
                     {}, log=log, out=io.StringIO())
        with in_process(gw, code=1) as url:
            req = urllib.request.Request(url + "/v1/chat/completions", method="POST", data=json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode(),
                headers={"content-type": "application/json"})
            receipt = urllib.request.urlopen(req, timeout=30).headers["x-reef-agent-record-id"]
            (tmp_path / "copy").write_bytes(before)  # an older copy put back by a backup tool, mark and all gone
            (tmp_path / "copy").replace(path)
            path.with_name("ledger.jsonl.sync").unlink()
    assert (f"FAILED verification: {path}: record {receipt} (seq 5), the newest this process appended, is not in "
            "the file any more") in log.getvalue(), log.getvalue()
