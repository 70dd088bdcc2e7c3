"""The ledger against real files and real processes: chain, tamper evidence, crash safety, group commit."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import filelock
import pytest

import reef_cli.ledger.group_commit as group_commit
import reef_cli.ledger.compaction as compaction_mod
import reef_cli.ledger.reading as reading_mod
import reef_cli.ledger.record as record_mod
import reef_cli.ledger.writer as writer_mod
from reef_cli.errors import ConflictError, ExitCode, InvalidInput, NotFound, StoreError
from reef_cli.ledger import (
    ZERO_HASH,
    Ledger,
    NewRecord,
    Record,
    canonical_json,
    new_record_id,
    to_langfuse_score,
)

REPO = Path(__file__).resolve().parents[1]
ID_RE = re.compile(r"rec_[0-9A-HJKMNP-TV-Z]{26}")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "scenarios" / "demo" / "ledger.jsonl"


@pytest.fixture
def ledger(path: Path, clock: Clock):
    with Ledger(path, "demo", now=clock) as opened:
        yield opened


def fill(ledger: Ledger, count: int, clock: Clock | None = None, kind: str = "interaction") -> list[Record]:
    records = []
    for i in range(count):
        records.append(ledger.append(kind, {"i": i}, release_id="rel_1", content_id="c_1"))
        if clock is not None:
            clock.advance(minutes=1)
    return records


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


@contextlib.contextmanager
def syncs_held(monkeypatch: pytest.MonkeyPatch):
    """Every sync started inside the block waits until the block ends (a slow disk); yields the syncs started."""
    release, started, real = threading.Event(), [], writer_mod._fdatasync

    def slow(fd: int) -> None:
        started.append(fd)
        assert release.wait(60)
        real(fd)

    monkeypatch.setattr(writer_mod, "_fdatasync", slow)
    try:
        yield started
    finally:
        release.set()


def background(target, *args, **kwargs) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
    thread.start()
    return thread


def wait_for(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# --- records ----------------------------------------------------------------------------------------------------


def test_append_writes_one_canonical_hash_chained_line(ledger: Ledger, path: Path) -> None:
    record = ledger.append("interaction", {"b": [1, 2], "a": "é"}, release_id="rel_1", content_id="c_1")

    assert ID_RE.fullmatch(record.record_id)
    assert (record.kind, record.scenario) == ("interaction", "demo")
    assert (record.release_id, record.content_id) == ("rel_1", "c_1")
    assert record.created_at == "2026-01-02T03:04:05.678Z"
    assert (record.seq, record.prev_hash) == (1, ZERO_HASH)
    body = record.to_json()
    del body["hash"]
    assert record.hash == __import__("hashlib").sha256(canonical_json(body)).hexdigest() == record.compute_hash()
    assert path.read_bytes() == record.to_line() == canonical_json(record.to_json()) + b"\n"
    assert b'"a":"\xc3\xa9"' in path.read_bytes()  # UTF-8, not \u escapes


def test_records_chain_in_order_with_sortable_unique_ids(ledger: Ledger) -> None:
    records = fill(ledger, 40)
    assert [r.seq for r in records] == list(range(1, 41))
    assert all(b.prev_hash == a.hash for a, b in zip(records, records[1:]))
    ids = [r.record_id for r in records]
    assert ids == sorted(ids) and len(set(ids)) == 40  # same injected millisecond: monotonic increments


def test_record_round_trips_and_from_json_names_the_bad_field(ledger: Ledger) -> None:
    record = ledger.append("report", {"score": 1}, release_id=None, content_id=None)
    assert Record.from_json(json.loads(record.to_line())) == record
    assert record.created == datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    bad = record.to_json()
    bad["seq"] = "1"
    with pytest.raises(InvalidInput, match="'seq'"):
        Record.from_json(bad)
    bad = record.to_json()
    bad["extra"] = 1
    with pytest.raises(InvalidInput, match="unexpected \\['extra'\\]"):
        Record.from_json(bad)


def test_payload_is_a_normalised_copy(ledger: Ledger) -> None:
    payload = {"t": (1, 2), "n": {"k": "v"}}
    record = ledger.append("interaction", payload, release_id="r", content_id="c")
    payload["n"]["k"] = "changed"
    assert record.payload == {"t": [1, 2], "n": {"k": "v"}}
    assert ledger.get(record.record_id) == record


def test_new_record_id_is_a_ulid_that_increases_within_a_millisecond() -> None:
    moment = datetime(2200, 1, 1, tzinfo=timezone.utc)  # later than any id this process issued before
    ids = [new_record_id(moment) for _ in range(100)]
    assert ids == sorted(ids) and len(set(ids)) == 100
    assert all(ID_RE.fullmatch(i) for i in ids)
    later = new_record_id(moment + timedelta(milliseconds=1))
    assert later > ids[-1] and later[4:14] != ids[-1][4:14]  # the time prefix moved on


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "Bad-Kind"}, "record kind 'Bad-Kind'"),
        ({"kind": ""}, "record kind ''"),
        ({"payload": [1, 2]}, "must be a mapping, not list"),
        ({"payload": {"x": float("nan")}}, "not JSON-serialisable"),
        ({"payload": {"x": object()}}, "not JSON-serialisable"),
        ({"release_id": ""}, "release_id ''"),
        ({"content_id": "a\nb"}, "content_id 'a\\\\nb'"),
        ({"record_id": "has space"}, "record_id 'has space'"),
        ({"record_id": "-leading"}, "record_id '-leading'"),
    ],
)
def test_invalid_input_is_refused_before_anything_is_written(ledger: Ledger, path: Path, kwargs, message) -> None:
    args = {"kind": "interaction", "payload": {}, "release_id": "r", "content_id": "c"} | kwargs
    with pytest.raises(InvalidInput, match=message) as caught:
        ledger.append(args.pop("kind"), args.pop("payload"), **args)
    assert caught.value.exit_code == ExitCode.INVALID
    assert not path.exists() or path.read_bytes() == b""


# --- the common case: system clock, generated id, fields already seen (a flat path of its own in `append`) ----


def test_a_system_clock_append_writes_the_canonical_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path, "démo ✓") as ledger:
        first = ledger.append("fast_path_probe", {"b": [1, 2], "a": "é"}, release_id=None, content_id="c_fast")
        second = ledger.append("fast_path_probe", {"z": {"y": None}, "t": (1,)}, release_id=None,
                               content_id="c_fast")  # kind and ids now known: the flat path
        third = ledger.append("fast_path_probe", {}, release_id="r_fast", content_id=None)
        records = [first, second, third]
        assert lines_of(path) == [canonical_json(r.to_json()) + b"\n" for r in records]
        assert all(r.hash == r.compute_hash() for r in records)
        assert [r.prev_hash for r in records] == [ZERO_HASH, first.hash, second.hash]
        assert [r.seq for r in records] == [1, 2, 3] and all(ID_RE.fullmatch(r.record_id) for r in records)
        assert [r.record_id for r in records] == sorted(r.record_id for r in records)
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r.created_at) for r in records)
        assert second.payload == {"z": {"y": None}, "t": [1]}
        assert [ledger.get(r.record_id) for r in records] == records
        assert ledger.verify().ok


def test_the_common_case_still_refuses_bad_payloads(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    looped: dict = {}
    looped["self"] = looped
    with Ledger(path, "demo") as ledger:
        ledger.append("fast_path_probe", {}, release_id="r_fast", content_id="c_fast")
        before = path.read_bytes()
        for payload, message in (
            ({"x": object()}, "not JSON-serialisable"),
            ({"x": float("nan")}, "not JSON-serialisable"),
            ({"x": "\ud800"}, "not JSON-serialisable"),
            (looped, "it contains itself"),
        ):
            with pytest.raises(InvalidInput, match=message):
                ledger.append("fast_path_probe", payload, release_id="r_fast", content_id="c_fast")
        assert path.read_bytes() == before
        assert ledger.append("fast_path_probe", {"ok": 1}, release_id="r_fast", content_id="c_fast").seq == 2


@pytest.mark.parametrize("step", [0, 1], ids=["same millisecond", "next millisecond"])
def test_a_forked_child_never_repeats_the_parents_ids(step: int) -> None:
    """Parent and child each take the next id after a fork: the child starts from neither the parent's last id
    (same millisecond: an increment of it) nor its unused randomness (next millisecond: a fresh draw)."""
    from reef_cli.ids import new_id_at

    ms = 7_258_118_400_000 + 10 * step  # year 2200: later than any id this process issued before
    new_id_at("t", ms)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.write(write, new_id_at("t", ms + step).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 200).decode()
    os.close(read)
    assert child and child != new_id_at("t", ms + step)


def test_the_direct_json_scanner_accepts_and_rejects_what_json_loads_does() -> None:
    for text in ('{"a":1}', ' {"a": [1, 2]}\t', '"s"', "[]"):
        assert record_mod._loads(text) == json.loads(text)
    for text in ('{"a":1} x', "", "{", "nan", '{"a":1}{"b":2}'):
        with pytest.raises(ValueError):
            json.loads(text)
        with pytest.raises(ValueError):
            record_mod._loads(text)


def test_a_naive_clock_is_refused(path: Path) -> None:
    with Ledger(path, "demo", now=lambda: datetime(2026, 1, 1)) as ledger:
        with pytest.raises(InvalidInput, match="has no timezone"):
            ledger.append("interaction", {}, release_id="r", content_id="c")


def test_append_many_writes_a_chained_batch_with_one_sync(ledger: Ledger) -> None:
    fill(ledger, 1)
    before = ledger.fsyncs
    records = ledger.append_many(
        [NewRecord("interaction", {"i": 1}, "r", "c"), {"kind": "report", "payload": {"i": 2}, "release_id": "r",
                                                         "content_id": "c"}]
    )
    assert [r.seq for r in records] == [2, 3] and records[1].prev_hash == records[0].hash
    assert ledger.fsyncs - before == 1
    assert ledger.append_many([]) == []
    with pytest.raises(InvalidInput, match="unknown record fields \\['colour'\\]"):
        ledger.append_many([{"kind": "x", "payload": {}, "release_id": None, "content_id": None, "colour": 1}])


def test_opening_reads_only_the_tail(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "big.jsonl"
    with Ledger(path, "demo") as ledger:
        ledger.append_many([NewRecord("interaction", {"i": i, "pad": "x" * 200}, "r", "c") for i in range(3000)])
    read = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: read.append(n) or real_pread(fd, n, at))
    monkeypatch.setattr(reading_mod, "_scan", lambda *a, **k: pytest.fail("append scanned the file"))
    with Ledger(path, "demo") as ledger:
        assert ledger.append("report", {}, release_id="r", content_id="c").seq == 3001
    assert sum(read) <= 8192 < path.stat().st_size


# --- idempotency ------------------------------------------------------------------------------------------------


def test_identical_resend_returns_the_stored_record(ledger: Ledger, path: Path, clock: Clock) -> None:
    first = ledger.append("report", {"score": 1}, release_id="r", content_id="c", record_id="rep-1")
    fill(ledger, 3)
    clock.advance(hours=1)
    again = ledger.append("report", {"score": 1}, release_id="r", content_id="c", record_id="rep-1")
    assert again == first
    with Ledger(path, "demo", now=clock) as other:  # as another process would
        assert other.append("report", {"score": 1}, release_id="r", content_id="c", record_id="rep-1") == first
    assert len(lines_of(path)) == 4


def test_conflicting_resend_names_the_id_and_changes_nothing(ledger: Ledger, path: Path) -> None:
    ledger.append("report", {"score": 1}, release_id="r", content_id="c", record_id="rep-1")
    before = path.read_bytes()
    with pytest.raises(ConflictError, match="id 'rep-1' already exists .* different payload, content_id") as caught:
        ledger.append("report", {"score": 2}, release_id="r", content_id="other", record_id="rep-1")
    assert caught.value.exit_code == ExitCode.CONFLICT
    assert path.read_bytes() == before


def test_a_resend_waits_until_the_original_is_durable(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The original's writer may still be waiting for its sync; the resend must not acknowledge before it."""
    writer, resender = Ledger(path, "demo"), Ledger(path, "demo")
    writer.append("interaction", {}, release_id="r", content_id="c")
    resender.append("interaction", {}, release_id="r", content_id="c")
    acked = threading.Event()
    with syncs_held(monkeypatch):  # no sync can finish
        background(writer.append, "report", {"s": 1}, release_id="r", content_id="c", record_id="x")
        wait_for(lambda: b'"record_id":"x"' in path.read_bytes())
        background(lambda: (resender.append("report", {"s": 1}, release_id="r", content_id="c", record_id="x"),
                            acked.set()))
        assert not acked.wait(0.3)  # written, found, but not yet durable
    assert acked.wait(10)
    assert len(lines_of(path)) == 3
    writer.close()
    resender.close()


@pytest.mark.parametrize("clocked", [False, True], ids=["flat append", "batch path"])
def test_a_reserved_id_is_appended_without_the_idempotency_lookup(path: Path, clocked: bool) -> None:
    """`reef run` reserves its receipt before the run; appending it must not pay for a pass over the id index."""
    with Ledger(path, "demo", now=Clock() if clocked else None) as ledger:
        fill(ledger, 3)
        rid = ledger.reserve_id()
        assert ID_RE.fullmatch(rid)
        record = ledger.append("interaction", {"run": 1}, release_id="rel_1", content_id="c_1", record_id=rid)
        assert record.record_id == rid and record.seq == 4
        assert not ledger.index_path.exists()  # no lookup happened
        again = ledger.append("interaction", {"run": 1}, release_id="rel_1", content_id="c_1", record_id=rid)
        assert again == record and len(lines_of(path)) == 4  # afterwards it is an ordinary resend
        with pytest.raises(ConflictError):
            ledger.append("interaction", {"run": 2}, release_id="rel_1", content_id="c_1", record_id=rid)


def test_batch_with_a_repeated_id(ledger: Ledger) -> None:
    same = NewRecord("report", {"s": 1}, "r", "c", "dup")
    first, second = ledger.append_many([same, same])
    assert first == second and first.seq == 1
    with pytest.raises(ConflictError, match="'x' appears twice in one batch"):
        ledger.append_many([NewRecord("report", {"s": 1}, "r", "c", "x"), NewRecord("report", {"s": 2}, "r", "c", "x")])


def test_a_generated_id_can_be_resent(ledger: Ledger) -> None:
    record = ledger.append("report", {"s": 1}, release_id="r", content_id="c")
    assert ledger.append("report", {"s": 1}, release_id="r", content_id="c", record_id=record.record_id) == record


@pytest.mark.parametrize("damage", ["missing", "header_only", "garbage", "torn", "wrong_offsets", "other_inode"])
def test_idempotency_survives_a_lost_or_damaged_index(path: Path, damage: str) -> None:
    with Ledger(path, "demo") as ledger:
        fill(ledger, 5)
        kept = ledger.append("report", {"s": 1}, release_id="r", content_id="c", record_id="rep-1")
        fill(ledger, 5)
        ledger.get(kept.record_id)  # builds the index
    index = path.with_name(path.name + ".idx")
    text = index.read_bytes()
    header = text.splitlines(keepends=True)[0]
    if damage == "missing":
        index.unlink()
    elif damage == "header_only":
        index.write_bytes(header)
    elif damage == "garbage":
        index.write_bytes(header + b"no-space-here\n")
    elif damage == "torn":
        index.write_bytes(text[:-7])
    elif damage == "wrong_offsets":
        entries = [line.split(b" ")[0] + b" 5\n" for line in text.splitlines()[1:]]
        index.write_bytes(header + b"rep-1 0\n" + b"".join(entries))
    elif damage == "other_inode":
        index.write_bytes(b"reef-ledger-idx 1 1\nrep-1 0\n")
    with Ledger(path, "demo") as ledger:
        assert ledger.append("report", {"s": 1}, release_id="r", content_id="c", record_id="rep-1") == kept
        with pytest.raises(ConflictError, match="rep-1"):
            ledger.append("report", {"s": 9}, release_id="r", content_id="c", record_id="rep-1")
        assert ledger.get(kept.record_id) == kept
    assert len(lines_of(path)) == 11


def test_index_catches_up_with_records_appended_without_lookups(ledger: Ledger, path: Path) -> None:
    first = fill(ledger, 3)
    assert ledger.get(first[0].record_id) == first[0]
    later = fill(ledger, 3)
    assert ledger.get(later[-1].record_id) == later[-1]
    entries = path.with_name(path.name + ".idx").read_text().splitlines()[1:]
    assert [e.split()[0] for e in entries] == [r.record_id for r in first + later]



def _index_bytes_read(action) -> int:
    """Bytes the process read (every read syscall, /proc/self/io's rchar) while `action` ran."""
    def rchar() -> int:
        return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])

    before = rchar()
    action()
    return rchar() - before


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io")
def test_a_batch_of_new_client_ids_costs_the_batch_not_the_ledger(path: Path) -> None:
    """`reef ingest` appends batches of deterministic ids, none of them stored yet: the duplicate check used to read
    the whole id index for every batch (ingest slowed as the ledger grew); now the first such lookup loads the index
    and later ones read only what was appended since."""
    with Ledger(path, "demo") as ledger:
        for _ in range(6):
            ledger.append_many([NewRecord("run", {"argv": ["pytest"], "exit": 0}, None, None) for _ in range(5000)])
        index = path.with_name(path.name + ".idx")

        def batch(tag: str):
            return lambda: ledger.append_many([NewRecord("session", {"n": i}, None, None, f"ses-{tag}-{i}")
                                               for i in range(200)])

        _index_bytes_read(batch("a"))
        size = index.stat().st_size
        assert size > 1_000_000
        assert _index_bytes_read(batch("b")) < size / 10
        batch("b")()  # a resend: found in memory, read back and compared, not written again
    assert len(lines_of(path)) == 30_400


def test_the_in_memory_index_sees_ids_another_writer_appended(path: Path) -> None:
    with Ledger(path, "demo") as mine, Ledger(path, "demo") as theirs:
        fill(mine, 3)
        mine.append_many([NewRecord("session", {"n": i}, None, None, f"ses-a-{i}") for i in range(20)])  # loads it
        stored = theirs.append("report", {"s": 1}, release_id="r", content_id="c", record_id="rep-1")
        assert mine.append("report", {"s": 1}, release_id="r", content_id="c", record_id="rep-1") == stored
        with pytest.raises(ConflictError, match="rep-1"):
            mine.append_many([NewRecord("report", {"s": 2}, "r", "c", "rep-1")] +
                             [NewRecord("session", {"n": i}, None, None, f"ses-b-{i}") for i in range(20)])
    assert len(lines_of(path)) == 24


def test_the_in_memory_index_is_dropped_when_another_writer_rebuilt_the_index(path: Path) -> None:
    """The ledger cut back in place (a restore, a hand repair), then another writer's catch-up rebuilds the index
    and appends past the size this writer's map covered: the map must not read on from its old end (mid-entry in
    the new index, missing the entries before it), or an id the other writer stored looks new and goes in twice."""
    with Ledger(path, "demo") as mine, Ledger(path, "demo") as theirs:
        mine.append_many([NewRecord("session", {"n": i}, None, None, f"ses-a-{i}") for i in range(40)])
        mine.append_many([NewRecord("session", {"n": i}, None, None, f"ses-e-{i}") for i in range(10)])  # map: 40
        path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:5]))  # same inode, cut to 5
        assert theirs.accept_cut().kind == "ledger_cut"  # acknowledged records cut: writers refuse until it is said
        theirs.append_many([NewRecord("session", {"n": i}, None, None, f"ses-b-{i}") for i in range(60)])
        theirs.append_many([NewRecord("session", {"n": i}, None, None, f"ses-d-{i}") for i in range(10)])  # indexed
        again = [NewRecord("session", {"n": i}, None, None, f"ses-b-{i}") for i in range(10)]
        mine.append_many(again + [NewRecord("session", {"n": i}, None, None, f"ses-c-{i}") for i in range(10)])
    ids = [json.loads(line)["record_id"] for line in lines_of(path)]
    assert len(ids) == len(set(ids)) == 86


# --- reading ----------------------------------------------------------------------------------------------------


def test_get_and_not_found(ledger: Ledger, path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist yet"):
        ledger.get("rec_missing")
    records = fill(ledger, 5)
    assert ledger.get(records[2].record_id) == records[2]
    with pytest.raises(NotFound, match=f"no record 'nope' in {re.escape(str(path))}"):
        ledger.get("nope")
    with pytest.raises(NotFound, match="not a valid record id"):
        ledger.get("bad id")


def test_iter_records_streams_with_filters(ledger: Ledger, clock: Clock) -> None:
    fill(ledger, 3, clock)
    cut = clock.now
    ledger.append("report", {"score": 1}, release_id="rel_2", content_id="c_1")
    clock.advance(minutes=1)
    fill(ledger, 2, clock)
    stream = ledger.iter_records()
    assert iter(stream) is stream  # a generator, not a list
    assert [r.seq for r in stream] == [1, 2, 3, 4, 5, 6]
    assert [r.seq for r in ledger.iter_records(kind="report")] == [4]
    assert [r.seq for r in ledger.iter_records(since=cut)] == [4, 5, 6]
    assert [r.seq for r in ledger.iter_records(since=cut, kind="interaction")] == [5, 6]
    assert [r.seq for r in ledger.iter_records(release_id="rel_2")] == [4]
    assert list(Ledger(ledger.path.with_name("none.jsonl"), "demo").iter_records()) == []


def test_tail_reads_backwards(ledger: Ledger, path: Path) -> None:
    assert ledger.tail(3) == []
    records = fill(ledger, 10)
    big = ledger.append("interaction", {"blob": "y" * 150_000}, release_id="r", content_id="c")  # spans blocks
    records += [big] + fill(ledger, 2)
    assert ledger.tail(3) == records[-3:]
    assert ledger.tail(1) == records[-1:]
    assert ledger.tail(0) == []
    assert ledger.tail(100) == records
    with path.open("ab") as handle:
        handle.write(b'{"torn":')
    assert ledger.tail(2) == records[-2:]
    with pytest.raises(InvalidInput):
        ledger.tail(-1)


# --- crashes and corruption -------------------------------------------------------------------------------------


@pytest.mark.parametrize("torn", [b'{"content_id":"c","created_at":"2026-0', b"\x00" * 300 + b"\n", b"garbage\n"])
def test_torn_last_line_is_skipped_by_readers_and_truncated_by_the_next_writer(path: Path, torn: bytes) -> None:
    with Ledger(path, "demo") as ledger:
        records = fill(ledger, 3)
    intact = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(torn)
    with Ledger(path, "demo") as ledger:
        assert list(ledger.iter_records()) == records
        result = ledger.verify()
        assert result.ok and result.count == 3 and result.torn_tail and "torn last line" in result.message
        record = ledger.append("interaction", {"after": True}, release_id="r", content_id="c")
    assert record.seq == 4 and record.prev_hash == records[-1].hash
    assert path.read_bytes() == intact + record.to_line()
    assert Ledger(path, "demo").verify().ok


def test_a_torn_line_as_the_only_content_is_truncated(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"content_id":')
    with Ledger(path, "demo") as ledger:
        assert ledger.append("interaction", {}, release_id="r", content_id="c").seq == 1
    assert len(lines_of(path)) == 1


def test_corruption_in_the_middle_raises_naming_file_and_line(path: Path) -> None:
    with Ledger(path, "demo") as ledger:
        fill(ledger, 4)
    lines = lines_of(path)
    lines[1] = b'{"not": json\n'
    write_lines(path, lines)
    damaged = path.read_bytes()
    with Ledger(path, "demo") as ledger:
        with pytest.raises(StoreError, match=f"{re.escape(str(path))}: line 2 is corrupt: not valid JSON"):
            list(ledger.iter_records())
        with pytest.raises(StoreError, match="line 2"):
            ledger.tail(4)
        result = ledger.verify()
        assert (result.ok, result.problem, result.line, result.first_bad_seq) == (False, "corrupt", 2, 2)
        # a break before the last acknowledged record (it moved: one read) is walked and refused, never appended onto
        with pytest.raises(StoreError, match="line 2 is not a ledger record: .*so nothing is appended to it"):
            ledger.append("interaction", {}, release_id="r", content_id="c")
    assert path.read_bytes() == damaged  # nothing was dropped or added


def test_a_bad_hash_in_the_middle_raises(path: Path) -> None:
    with Ledger(path, "demo") as ledger:
        records = fill(ledger, 4)
    lines = lines_of(path)
    lines[2] = lines[2].replace(b'"i":2', b'"i":7')
    write_lines(path, lines)
    with Ledger(path, "demo") as ledger:
        with pytest.raises(StoreError, match=f"line 3 \\(record {records[2].record_id}\\) does not match its hash"):
            list(ledger.iter_records())
        with pytest.raises(StoreError, match="does not match its hash"):
            ledger.get(records[2].record_id)


def test_a_tampered_last_line_blocks_appends_and_is_kept(path: Path) -> None:
    with Ledger(path, "demo") as ledger:
        fill(ledger, 3)
    lines = lines_of(path)
    lines[-1] = lines[-1].replace(b'"i":2', b'"i":5')
    write_lines(path, lines)
    before = path.read_bytes()
    with Ledger(path, "demo") as ledger:
        with pytest.raises(StoreError, match="line 3 .* does not match its hash; refusing to append"):
            ledger.append("interaction", {}, release_id="r", content_id="c")
    assert path.read_bytes() == before


CHILD = textwrap.dedent(
    """
    import fcntl, os, signal, sys, time
    import reef_cli.ledger.group_commit as group_commit
    from reef_cli.ledger import Ledger

    if os.environ.get("LEAD_SYNCS"):
        group_commit.COORDINATE_ABOVE_NS = 0  # every sync led, as on a disk whose syncs take milliseconds

    path, tag = sys.argv[1], sys.argv[2]
    ledger = Ledger(path, "crash")
    if tag == "torn":  # a writer that dies inside its write: half a line, then SIGKILL with the lock held
        lock = os.open(ledger.lock_path, os.O_RDWR | os.O_CREAT)  # in round 0 it may be the first one here
        fcntl.flock(lock, fcntl.LOCK_EX)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, b'{"content_id":"c","created_at":"2026-01-01T00:00:00.000Z","hash":"TORN')
        print("torn", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    blob = "x" * 300_000
    i = 0
    while True:
        i += 1
        payload = {"tag": tag, "i": i}
        if i % 5 == 0:
            payload["blob"] = blob  # long writes, so some kills land in the middle of one
        record_id = f"{tag}-{i}" if i % 3 == 0 else None
        record = ledger.append("interaction", payload, release_id="r", content_id="c", record_id=record_id)
        sys.stdout.write(record.record_id + "\\n")
        sys.stdout.flush()
    """
)


@pytest.mark.parametrize("led", [False, True], ids=["kernel-shared syncs", "led syncs"])
def test_sigkill_never_loses_an_acknowledged_record_nor_keeps_a_partial_one(tmp_path: Path, led: bool) -> None:
    """Children are killed mid-write and mid-sync (with led syncs, also while leading one)."""
    path = tmp_path / "ledger.jsonl"
    env = child_env() | ({"LEAD_SYNCS": "1"} if led else {})
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    rng = random.Random(1234)
    acknowledged: list[str] = []
    for round_ in range(30):
        procs = [
            subprocess.Popen([sys.executable, str(child), str(path), f"r{round_}w{w}"], stdout=subprocess.PIPE,
                             env=env)
            for w in range(2)
        ]
        if round_ % 3 == 0:  # a third writer dies mid-line while these two run (it kills itself; wait for it)
            out, _ = subprocess.Popen([sys.executable, str(child), str(path), "torn"], stdout=subprocess.PIPE,
                                      env=child_env()).communicate(timeout=60)
            acknowledged += out.decode().splitlines()
        time.sleep(rng.uniform(0.08, 0.3))
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
        for proc in procs:
            out, _ = proc.communicate(timeout=10)
            acknowledged += out.decode().splitlines()
    torn = acknowledged.count("torn")
    acknowledged = [line for line in acknowledged if line != "torn"]
    assert len(acknowledged) > 100 and torn == 10
    with Ledger(path, "crash") as ledger:
        ledger.append("interaction", {"final": True}, release_id="r", content_id="c")  # repairs a torn tail
        result = ledger.verify()
        assert result.ok, result.message
        stored = Counter(record.record_id for record in ledger.iter_records())
    assert all(line.endswith(b"\n") and json.loads(line) for line in lines_of(path))
    assert b'"hash":"TORN' not in path.read_bytes()  # every half-written line was cut off (no hash has capitals)
    assert max(stored.values()) == 1
    assert not [rid for rid in acknowledged if stored[rid] != 1]
    assert result.count == sum(stored.values())


WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import reef_cli.ledger.group_commit as group_commit
    from reef_cli.ledger import Ledger

    if os.environ.get("LEAD_SYNCS"):
        group_commit.COORDINATE_ABOVE_NS = 0

    path, tag, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    ledger = Ledger(path, "demo")
    while not go.exists():
        time.sleep(0.001)
    for i in range(count):
        ledger.append("interaction", {"w": tag, "i": i}, release_id="r", content_id="c")
    print(ledger.fsyncs)
    """
)


@pytest.mark.parametrize("led", [False, True], ids=["kernel-shared syncs", "led syncs"])
def test_concurrent_writer_processes_keep_one_intact_chain(tmp_path: Path, led: bool) -> None:
    path = tmp_path / "ledger.jsonl"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    go = tmp_path / "go"
    writers, count = 4, 60
    procs = [
        subprocess.Popen([sys.executable, str(script), str(path), f"w{n}", str(count), str(go)], stdout=subprocess.PIPE,
                         env=child_env() | ({"LEAD_SYNCS": "1"} if led else {}), text=True)
        for n in range(writers)
    ]
    time.sleep(0.3)
    go.touch()
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    with Ledger(path, "demo") as ledger:
        result = ledger.verify()
        records = list(ledger.iter_records())
    assert result.ok and result.count == writers * count
    assert [r.seq for r in records] == list(range(1, writers * count + 1))
    assert Counter(r.payload["w"] for r in records) == {f"w{n}": count for n in range(writers)}
    assert len({r.record_id for r in records}) == writers * count


@pytest.fixture
def own_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each writer syncs for itself whatever syncs cost here (a loaded machine can average over the 1 ms above which
    syncs are led, and these tests are about the unled mode)."""
    monkeypatch.setattr(group_commit, "COORDINATE_ABOVE_NS", 10**18)


def test_a_writer_syncs_outside_the_writer_lock(path: Path, monkeypatch: pytest.MonkeyPatch, own_syncs: None) -> None:
    """While one writer waits for its sync, another can append and start its own, so the filesystem can fold both
    into one journal commit (group commit); neither is acknowledged before its sync ends."""
    first, second = Ledger(path, "demo"), Ledger(path, "demo")
    first.append("interaction", {}, release_id="r", content_id="c")
    second.append("interaction", {}, release_id="r", content_id="c")
    acked = []
    with syncs_held(monkeypatch) as started:
        threads = [background(lambda w=w, n=n: acked.append(w.append("interaction", {"n": n}, release_id="r",
                                                                      content_id="c")))
                   for n, w in enumerate((first, second))]
        wait_for(lambda: len(lines_of(path)) == 4 and len(started) == 2)
        time.sleep(0.05)
        assert acked == []  # both written and syncing at once, neither acknowledged
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(r.payload["n"] for r in acked) == [0, 1]
    assert first.verify().ok
    first.close()
    second.close()


def test_threads_sharing_one_ledger_sync_at_the_same_time(path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          own_syncs: None) -> None:
    """One instance shared by threads (a gateway's request threads) overlaps their syncs as processes do; closing it
    or compacting through it while syncs are in flight neither breaks them nor acknowledges them early."""
    shared = Ledger(path, "demo")
    fill(shared, 3)
    acked: list = []
    with syncs_held(monkeypatch) as started:
        threads = [background(lambda n=n: acked.append(shared.append("interaction", {"n": n}, release_id="r",
                                                                       content_id="c")))
                   for n in range(3)]
        threads.append(background(lambda: acked.extend(shared.append_many(
            [NewRecord("report", {"n": 3}, "r", "c", "client-3")]))))
        wait_for(lambda: len(lines_of(path)) == 7 and len(started) == 4)
        shared.compact(keep=2)  # swaps the file under the syncing threads; their records are in the copy
        shared.close()
        time.sleep(0.05)
        assert acked == []
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(r.payload["n"] for r in acked) == [0, 1, 2, 3]
    with Ledger(path, "demo") as reader:
        assert reader.verify().ok
        kept = list(reader.iter_records())
    assert len(kept) == 3 and kept[-1].kind == "compaction"  # the last two records, then the compaction record
    assert shared.append("interaction", {"after": 1}, release_id="r", content_id="c").seq == kept[-1].seq + 1


# --- led syncs: where syncs take milliseconds, one writer syncs for all (forced here by a zero threshold) --------


@pytest.fixture
def led(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_commit, "COORDINATE_ABOVE_NS", 0)


def sync_page(ledger: Ledger) -> group_commit.SyncPage:
    fd = os.open(ledger.sync_path, os.O_RDWR | os.O_CREAT)
    try:
        return group_commit.SyncPage(fd)
    finally:
        os.close(fd)


def counting_syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = writer_mod._fdatasync
    monkeypatch.setattr(writer_mod, "_fdatasync", lambda fd: (calls.append(fd), real(fd)))
    return calls


def test_a_led_sync_covers_every_line_written_before_it(path: Path, led: None) -> None:
    first, second = Ledger(path, "demo"), Ledger(path, "demo")
    first.append("interaction", {}, release_id="r", content_id="c")
    second.append("interaction", {}, release_id="r", content_id="c")
    before = first.fsyncs + second.fsyncs
    lead = os.open(first.sync_path, os.O_RDWR)
    try:
        __import__("fcntl").flock(lead, __import__("fcntl").LOCK_EX)  # a leader elsewhere, about to sync
        acked: list = []
        threads = [background(lambda w=w, n=n: acked.append(w.append("interaction", {"n": n}, release_id="r",
                                                                      content_id="c")))
                   for n, w in enumerate((first, second))]
        wait_for(lambda: len(lines_of(path)) == 4)
        time.sleep(0.05)
        assert acked == []  # written, waiting for a leader
    finally:
        os.close(lead)
    for thread in threads:
        thread.join(timeout=10)
    assert len(acked) == 2
    assert first.fsyncs + second.fsyncs - before == 1  # whoever led synced both lines
    state = sync_page(first).read()
    assert state is not None and state[1] == path.stat().st_size and state[3] == 0
    assert first.verify().ok
    first.close()
    second.close()


def test_a_sync_whose_leader_died_is_taken_over(path: Path, led: None) -> None:
    ledger = Ledger(path, "demo")
    ledger.append("interaction", {}, release_id="r", content_id="c")
    page = sync_page(ledger)
    page.write(path.stat().st_ino, 0, 7, 1, 5_000_000, 0)  # sync 7 "in flight"; nobody holds its lock
    done = background(ledger.append, "interaction", {"n": 1}, release_id="r", content_id="c")
    done.join(timeout=10)
    assert not done.is_alive()
    ino, synced, gen, syncing, _, _ = page.read()
    assert (ino, synced, gen, syncing) == (path.stat().st_ino, path.stat().st_size, 8, 0)
    ledger.close()


def test_a_torn_sync_page_is_ignored(path: Path, led: None) -> None:
    ledger = Ledger(path, "demo")
    ledger.append("interaction", {}, release_id="r", content_id="c")
    Path(ledger.sync_path).write_bytes(os.urandom(4096))
    assert ledger.append("interaction", {"n": 1}, release_id="r", content_id="c").seq == 2
    assert sync_page(ledger).read()[1] == path.stat().st_size
    ledger.close()


def test_cutting_a_torn_tail_takes_back_a_durable_size_beyond_it(path: Path, led: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader may have synced half a line that its writer never finished; once that is cut off, the durable size
    must not vouch for the record appended in its place."""
    with Ledger(path, "demo") as ledger:
        ledger.append("interaction", {}, release_id="r", content_id="c")
    good = path.stat().st_size
    with path.open("ab") as f:
        f.write(b'{"content_id":"c","created_at":"2026-01-01T00:00:00.000Z","hash":"TORN' + b"x" * 5000)
    sync_page(ledger).write(path.stat().st_ino, path.stat().st_size, 3, 0, 5_000_000, 0)  # torn bytes "durable"
    calls = counting_syncs(monkeypatch)
    with Ledger(path, "demo") as fresh:
        record = fresh.append("interaction", {"n": 1}, release_id="r", content_id="c")
    assert record.seq == 2 and path.stat().st_size < good + 5000
    assert len(calls) >= 2  # the cut itself, and the new record's own sync: nothing vouched for it
    assert sync_page(ledger).read()[1] == path.stat().st_size


def test_a_sync_page_vouching_past_the_files_end_is_not_trusted(path: Path, led: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A page left by an earlier file with the same inode number (deleted and recreated) is corrected on open."""
    with Ledger(path, "demo") as ledger:
        ledger.append("interaction", {}, release_id="r", content_id="c")
    sync_page(ledger).write(path.stat().st_ino, 10**9, 4, 0, 5_000_000, 0)
    calls = counting_syncs(monkeypatch)
    with Ledger(path, "demo") as fresh:
        fresh.append("interaction", {"n": 1}, release_id="r", content_id="c")
    assert len(calls) == 1  # not vouched for by the stale page
    assert sync_page(ledger).read()[1] == path.stat().st_size


def test_compaction_resets_the_sync_page_to_the_new_file(ledger: Ledger, path: Path, led: None) -> None:
    fill(ledger, 6)
    ledger.compact(keep=2)
    ino, synced, _, syncing, _, _ = sync_page(ledger).read()
    assert (ino, synced, syncing) == (path.stat().st_ino, path.stat().st_size, 0)
    fill(ledger, 1)
    assert ledger.verify().ok


def test_writers_respect_a_filelock_on_the_lock_file(ledger: Ledger) -> None:
    fill(ledger, 1)
    done = threading.Event()
    with filelock.FileLock(str(ledger.lock_path)):
        thread = threading.Thread(target=lambda: (fill(ledger, 1), done.set()))
        thread.start()
        assert not done.wait(0.3)
    assert done.wait(10)
    thread.join()


def test_a_forked_child_reopens_rather_than_sharing_the_parents_locks(ledger: Ledger) -> None:
    fill(ledger, 2)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            fill(ledger, 2)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    fill(ledger, 1)
    result = ledger.verify()
    assert result.ok and result.count == 5
    assert len({r.record_id for r in ledger.iter_records()}) == 5


# --- tamper evidence --------------------------------------------------------------------------------------------


def tamper(path: Path, how: str, records: list[Record]) -> None:
    lines = lines_of(path)
    if how == "edit_payload":
        lines[4] = lines[4].replace(b'"i":4', b'"i":40')
    elif how == "edit_hash":
        h = records[4].hash
        lines[4] = lines[4].replace(h.encode(), (("0" if h[0] != "0" else "1") + h[1:]).encode())
    elif how == "rehash":  # edit and recompute the hash: the next record's prev_hash exposes it
        obj = json.loads(lines[4])
        obj["payload"] = {"i": 40}
        del obj["hash"]
        obj["hash"] = __import__("hashlib").sha256(canonical_json(obj)).hexdigest()
        lines[4] = canonical_json(obj) + b"\n"
    elif how == "delete":
        del lines[4]
    elif how == "delete_two":
        del lines[4:6]
    elif how == "delete_first":
        del lines[0]
    elif how == "insert_copy":
        lines.insert(5, lines[1])
    elif how == "insert_forged":
        forged = Record.from_json(json.loads(lines[4]))
        obj = forged.to_json() | {"record_id": "rec_forged", "payload": {"evil": 1}}
        del obj["hash"]
        obj["hash"] = __import__("hashlib").sha256(canonical_json(obj)).hexdigest()
        lines.insert(5, canonical_json(obj) + b"\n")
    elif how == "insert_first":
        lines.insert(0, lines[3])
    elif how == "swap":
        lines[4], lines[5] = lines[5], lines[4]
    elif how == "swap_far":
        lines[2], lines[7] = lines[7], lines[2]
    write_lines(path, lines)


@pytest.mark.parametrize(
    ("how", "problem", "seq", "record_index"),
    [
        ("edit_payload", "edited", 5, 4),
        ("edit_hash", "edited", 5, 4),
        ("rehash", "edited", 5, 4),
        ("delete", "deleted", 5, 5),
        ("delete_two", "deleted", 5, 6),
        ("delete_first", "deleted", 1, 1),
        ("insert_copy", "inserted", 6, 1),
        ("insert_forged", "inserted", 6, None),
        ("insert_first", "inserted", 1, 3),
        ("swap", "reordered", 5, 5),
        ("swap_far", "reordered", 3, 7),
    ],
)
def test_verify_names_the_first_bad_record_and_the_kind_of_tampering(path, how, problem, seq, record_index) -> None:
    with Ledger(path, "demo") as ledger:
        records = fill(ledger, 10)
        assert ledger.verify().ok
    tamper(path, how, records)
    result = Ledger(path, "demo").verify()
    assert not result.ok
    assert (result.problem, result.first_bad_seq) == (problem, seq), result.message
    expected_id = "rec_forged" if record_index is None else records[record_index].record_id
    assert result.first_bad_record_id == expected_id
    assert expected_id in result.message and str(path) in result.message


def test_verify_reports_a_record_of_another_scenario(path: Path) -> None:
    with Ledger(path, "other") as ledger:
        fill(ledger, 2)
    result = Ledger(path, "demo").verify()
    assert (result.ok, result.problem, result.first_bad_seq) == (False, "foreign", 1)


def test_verify_result_on_empty_and_intact_ledgers(ledger: Ledger) -> None:
    assert ledger.verify().ok and ledger.verify().count == 0
    records = fill(ledger, 3)
    result = ledger.verify()
    assert (result.ok, result.count, result.head_hash, result.problem) == (True, 3, records[-1].hash, None)
    assert result.to_json()["ok"] is True


# --- compaction -------------------------------------------------------------------------------------------------


def test_compact_keep_removes_a_prefix_and_the_chain_still_verifies(ledger: Ledger, path: Path) -> None:
    records = fill(ledger, 10)
    compaction = ledger.compact(keep=4)
    assert compaction.kind == "compaction" and compaction.seq == 11 and compaction.prev_hash == records[-1].hash
    payload = compaction.payload
    assert payload["removed_count"] == 6 and payload["first_kept_seq"] == 7
    assert payload["last_removed_hash"] == records[5].hash == records[6].prev_hash
    assert payload["removed"] == [[r.record_id, r.hash] for r in records[:6]]
    assert (payload["first_removed_id"], payload["last_removed_id"]) == (records[0].record_id, records[5].record_id)
    assert [r.seq for r in ledger.iter_records()] == [7, 8, 9, 10, 11]
    result = ledger.verify()
    assert result.ok and result.count == 5
    with pytest.raises(NotFound):
        ledger.get(records[0].record_id)
    assert ledger.get(records[6].record_id) == records[6]
    after = ledger.append("interaction", {"after": 1}, release_id="r", content_id="c")
    assert after.seq == 12 and after.prev_hash == compaction.hash
    assert ledger.verify().ok


def test_compact_before_a_time(ledger: Ledger, clock: Clock) -> None:
    records = fill(ledger, 6, clock)
    compaction = ledger.compact(before=records[4].created)
    assert compaction.payload["removed_count"] == 4 and compaction.payload["before"] == records[4].created_at
    assert [r.seq for r in ledger.iter_records()] == [5, 6, 7]
    assert ledger.compact(before=records[4].created) is None  # nothing older is left
    assert ledger.verify().ok


def test_compact_with_both_limits_removes_only_what_both_allow(ledger: Ledger, clock: Clock) -> None:
    records = fill(ledger, 8, clock)
    assert ledger.compact(before=records[6].created, keep=5).payload["removed_count"] == 3
    assert ledger.compact(before=records[1].created, keep=0) is None
    with pytest.raises(InvalidInput, match="needs 'before' and/or 'keep'"):
        ledger.compact()
    with pytest.raises(InvalidInput, match="keep must be an integer"):
        ledger.compact(keep=-1)


def test_compact_everything_and_repeatedly(ledger: Ledger, monkeypatch) -> None:
    monkeypatch.setattr(compaction_mod, "REMOVED_LIST_LIMIT", 3)
    records = fill(ledger, 5)
    first = ledger.compact(keep=0)
    assert "removed" not in first.payload and len(first.payload["removed_span_hash"]) == 64
    assert [r.record_id for r in ledger.iter_records()] == [first.record_id]
    assert ledger.verify().ok
    fill(ledger, 4)
    second = ledger.compact(keep=2)
    assert second.payload["first_removed_id"] == first.record_id
    assert second.payload["removed"][0] == [first.record_id, first.hash]
    assert ledger.verify().ok and ledger.verify().count == 3
    assert not {r.record_id for r in records} & {r.record_id for r in ledger.iter_records()}


@pytest.mark.parametrize(
    ("how", "problem"),
    [("delete_first_kept", "deleted"), ("edit_compaction", "edited"), ("drop_compaction", "deleted")],
)
def test_tampering_after_compaction_is_still_detected(ledger: Ledger, path: Path, how: str, problem: str) -> None:
    records = fill(ledger, 10)
    ledger.compact(keep=5)
    fill(ledger, 2)
    lines = lines_of(path)
    if how == "delete_first_kept":
        del lines[0]
    elif how == "edit_compaction":
        lines[5] = lines[5].replace(b'"removed_count":5', b'"removed_count":4')
    elif how == "drop_compaction":  # and pretend the head was never cut: the head is then unexplained
        del lines[5]
        lines = lines[:5]
    write_lines(path, lines)
    result = Ledger(path, "demo").verify()
    assert (result.ok, result.problem) == (False, problem), result.message
    if how == "delete_first_kept":
        assert (result.first_bad_seq, result.first_bad_record_id) == (6, records[6].record_id)


def test_compaction_refuses_a_tampered_ledger(ledger: Ledger, path: Path) -> None:
    records = fill(ledger, 6)
    tamper(path, "delete", records)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="deleted before line 5 .*so nothing is appended to it"):
        ledger.compact(keep=1)  # the writer's first look refuses the break before compaction walks the chain
    assert path.read_bytes() == before


def test_a_long_lived_writer_follows_a_compaction_by_another(path: Path) -> None:
    with Ledger(path, "demo") as writer, Ledger(path, "demo") as compactor:
        fill(writer, 6)
        compaction = compactor.compact(keep=2)
        record = writer.append("interaction", {"after": 1}, release_id="r", content_id="c")
        assert record.prev_hash == compaction.hash and record.seq == compaction.seq + 1
        assert writer.verify().ok and writer.verify().count == 4


# --- export and hygiene -----------------------------------------------------------------------------------------


def test_langfuse_scores_one_per_receipt(ledger: Ledger) -> None:
    record = ledger.append(
        "report",
        {"score": 4, "feedback": {"text": "good", "tags": ["a"]}, "receipts": ["trace-1", {"trace_id": "trace-2",
                                                                                           "observation_id": "obs"}]},
        release_id="rel_1",
        content_id="c_1",
    )
    scores = to_langfuse_score(record)
    assert [s["traceId"] for s in scores] == ["trace-1", "trace-2"]
    first = scores[0]
    assert first["id"] == f"{record.record_id}-0" and first["name"] == "reef.score"
    assert (first["value"], first["dataType"]) == (4.0, "NUMERIC")
    assert json.loads(first["comment"]) == {"text": "good", "tags": ["a"]}
    assert first["metadata"]["release_id"] == "rel_1" and first["metadata"]["record_id"] == record.record_id
    assert scores[1]["observationId"] == "obs" and "observationId" not in first
    text = ledger.append("report", {"score": 1, "feedback": "meh", "receipts": "t"}, release_id="r", content_id="c")
    assert to_langfuse_score(text)[0]["comment"] == "meh"
    with pytest.raises(InvalidInput, match="only 'report' records"):
        to_langfuse_score(fill(ledger, 1)[0])
    no_score = ledger.append("report", {"feedback": "x", "receipts": ["t"]}, release_id="r", content_id="c")
    with pytest.raises(InvalidInput, match="no numeric 'score'"):
        to_langfuse_score(no_score)


def test_the_ledger_imports_no_cli_libraries() -> None:
    code = "import sys, reef_cli.ledger, reef_cli.redact; print(sorted({'typer', 'rich'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True)
    assert out.stdout.strip() == "[]"


def test_iter_records_from_seq_bisects_to_the_mark(tmp_path):
    """Resuming readers (the Reflector) start at a sequence number, also after compaction removed a prefix."""
    import random

    led = Ledger(tmp_path / "ledger.jsonl", "s")
    rng = random.Random(3)
    led.append_many([{"kind": "report", "payload": {"i": i, "pad": "x" * rng.randint(0, 300)}, "release_id": None,
                      "content_id": None} for i in range(400)])
    for start in (1, 2, 3, 199, 399, 400, 401, 10_000):
        assert [r.seq for r in led.iter_records(from_seq=start)] == list(range(start, 401))
    led.compact(keep=50)
    seqs = [r.seq for r in led.iter_records()]
    for start in (1, seqs[0], seqs[1], seqs[25], seqs[-1], seqs[-1] + 1):
        assert [r.seq for r in led.iter_records(from_seq=start)] == [s for s in seqs if s >= start]


# --- release anchors (issue 10: the ledger notices what is missing) ----------------------------------------------


def test_anchors_catch_a_cut_a_deletion_and_a_regrown_ledger(path: Path) -> None:
    from reef_cli.errors import DamagedState
    from reef_cli.ledger import Anchor

    with Ledger(path, "demo") as ledger:
        records = fill(ledger, 6)
        assert ledger.anchor() == {"seq": 6, "hash": records[-1].hash}
        anchors = [Anchor(0, "0" * 64, "rel_a", 1), Anchor(4, records[3].hash, "rel_b", 2),
                   Anchor(6, records[5].hash, "rel_c", 3)]
        ledger.check_anchors(anchors)
        result = ledger.verify(anchors)
        assert result.ok and result.anchors_checked == 3 and ledger.verify().ok  # cut or not, the chain is fine
    lines = path.read_bytes().splitlines(keepends=True)
    copy = path.with_name("restored.jsonl")  # an old copy put back: a new file, held to the acknowledged mark too
    copy.write_bytes(b"".join(lines[:5]))
    os.replace(copy, path)
    with Ledger(path, "demo") as ledger:
        result = ledger.verify()  # the chain alone says nothing about a cut; the mark does, whatever the inode
        assert not result.ok and result.problem == "cut" and "1 acknowledged record (seq 6) is missing" in result.message
        with pytest.raises(DamagedState, match="record seq 6"):
            fill(ledger, 1)  # and no append buries it
        with pytest.raises(DamagedState) as caught:
            ledger.check_anchors(anchors)
        assert caught.value.exit_code == ExitCode.INVALID
        assert str(caught.value) == (
            f"ledger {path} falls short of its anchor: release rel_c (step 3) anchors seq 6 hash "
            f"{records[5].hash[:16]}, but the ledger ends at seq 5; records are missing — restore the ledger from a "
            f"backup, or record the loss with 'reef repair ledger --accept-loss' (nothing was changed)"
        )
        result = ledger.verify(anchors)
        assert not result.ok and result.problem == "short" and result.first_bad_seq == 6
    path.with_name(path.name + ".sync").unlink()  # no mark (put back with a backup of ledger.jsonl alone)
    with Ledger(path, "demo") as ledger:
        assert ledger.verify().ok
        fill(ledger, 3)  # grown past the anchor again: another record sits at seq 6
        with pytest.raises(DamagedState, match=r"but seq 6 there is another record \(rec_"):
            ledger.check_anchors(anchors)
        assert ledger.verify().ok and not ledger.verify(anchors).ok
    path.unlink()
    with Ledger(path, "demo") as ledger:
        with pytest.raises(DamagedState, match="but the ledger file is gone"):
            ledger.check_anchors(anchors)
        ledger.check_anchors(anchors[:1])  # an anchor over an empty ledger asks for nothing
    assert not path.exists()  # checking never creates the file


def test_an_anchor_inside_a_compacted_prefix_still_holds(path: Path) -> None:
    from reef_cli.ledger import Anchor

    with Ledger(path, "demo") as ledger:
        records = fill(ledger, 6)
        anchors = [Anchor(3, records[2].hash, "rel_b", 2)]
        ledger.compact(keep=2)
        ledger.check_anchors(anchors)
        assert ledger.verify(anchors).ok


# -- `then`, and averages that one stalled sync does not swing ------------------------------------------------------
def test_then_runs_right_after_the_sync_and_never_for_a_record_not_durable(path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway sends a receipt from `then`: it must come after the record's sync, once, on every append path
    (the flat one, the general one, the led one), and not at all when the sync fails."""
    import reef_cli.ledger.writer as writer_mod

    events: list[str] = []
    real_sync = writer_mod._fdatasync
    monkeypatch.setattr(writer_mod, "_fdatasync", lambda fd: (real_sync(fd), events.append("sync")))
    ledger = Ledger(path, "demo")
    then = lambda: events.append("then")  # noqa: E731
    ledger.append("interaction", {"n": 1}, release_id="r", content_id="c", then=then)  # the flat path
    assert events == ["sync", "then"]
    events.clear()
    ledger.append("interaction", {"n": 2}, release_id="r", content_id="c", record_id="rec-given-2", then=then)
    assert events == ["sync", "then"]  # a client-supplied id takes the general path
    events.clear()
    monkeypatch.setattr(group_commit, "COORDINATE_ABOVE_NS", 0)  # every sync led
    ledger.append("interaction", {"n": 3}, release_id="r", content_id="c", then=then)
    assert events == ["sync", "then"]
    events.clear()

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(group_commit, "COORDINATE_ABOVE_NS", 10**18)
    monkeypatch.setattr(writer_mod, "_fdatasync", failing)
    with pytest.raises(StoreError, match="cannot sync"):
        ledger.append("interaction", {"n": 4}, release_id="r", content_id="c", then=then)
    assert events == []


def test_one_stalled_sync_does_not_turn_a_fast_disk_into_a_slow_one(path: Path) -> None:
    """Syncs averaging over 1 ms are led (group_commit). A single 80 ms stall among 0.2 ms syncs used to lift the
    moving averages to ~10 ms, so the next dozen syncs took the leader's path; it now moves them by at most a
    quarter of the threshold, and syncs that stay slow still cross it."""
    ledger = Ledger(path, "demo")
    ledger.append("interaction", {}, release_id="r", content_id="c")  # the ledger's files exist
    for _ in range(20):
        ledger._note_sync(200_000)
    ledger._note_sync(80_000_000)
    assert ledger._sync_ns < group_commit.COORDINATE_ABOVE_NS
    for _ in range(4):
        ledger._note_sync(5_000_000)
    assert ledger._sync_ns >= group_commit.COORDINATE_ABOVE_NS

    leader = group_commit.SyncLeader(str(path) + ".sync")
    page = leader.page()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        ino = os.fstat(fd).st_ino
        leader._lead(page, fd, ino, 10, (ino, 0, 0, 0, 200_000, 0), lambda fd: time.sleep(0.08), lambda took: None)
        assert page.read()[4] < group_commit.COORDINATE_ABOVE_NS  # the average leaders share
    finally:
        os.close(fd)


def test_after_a_failed_sync_this_writer_acknowledges_nothing_more(path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """After an fdatasync fails the kernel may drop the pages it could not write and report the next sync as good:
    a record appended after it would be acknowledged over a hole. The writer refuses from then on (both append
    paths); a new writer, as after a restart, reads the ledger as it is and goes on."""
    import reef_cli.ledger.writer as writer_mod

    ledger = Ledger(path, "demo")
    ledger.append("interaction", {"n": 1}, release_id="r", content_id="c")
    real = writer_mod._fdatasync
    monkeypatch.setattr(writer_mod, "_fdatasync", lambda fd: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(StoreError, match="cannot sync"):
        ledger.append("interaction", {"n": 2}, release_id="r", content_id="c")
    monkeypatch.setattr(writer_mod, "_fdatasync", real)
    size = path.stat().st_size
    for kw in ({}, {"record_id": "rec-given-3"}):
        with pytest.raises(StoreError) as caught:
            ledger.append("interaction", {"n": 3}, release_id="r", content_id="c", **kw)
        assert str(caught.value) == (f"an earlier sync of {path} failed (Input/output error); records written since "
                                     f"may not be on disk, so nothing more is appended by this process: check the "
                                     f"disk, then restart it (nothing was appended)")
    assert path.stat().st_size == size
    fresh = Ledger(path, "demo")
    assert fresh.append("interaction", {"n": 4}, release_id="r", content_id="c").seq == 3
    assert fresh.verify().ok


@pytest.mark.parametrize("led", [False, True])
def test_a_sync_told_0_beside_one_that_failed_acknowledges_nothing(path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   led: bool) -> None:
    """A writeback error is reported once per open file: of two threads syncing one instance's descriptor at the
    same time, one is told EIO and the other 0 (modelled here). The one told 0 acknowledged a record chained onto
    pages the kernel may have dropped; it now waits for the syncs it overlapped and refuses after a failure. Led
    syncs too: a waiter took the lead after the leader's failure and synced the same descriptor again."""
    import reef_cli.ledger.writer as writer_mod

    ledger = Ledger(path, "demo")
    ledger.append("interaction", {"n": 0}, release_id="r", content_id="c")
    monkeypatch.setattr(group_commit, "COORDINATE_ABOVE_NS", 0 if led else 10**18)
    calls: list[int] = []
    guard = threading.Lock()

    def once_per_file(fd: int) -> None:
        with guard:
            calls.append(fd)
            n = len(calls)
        if n == 1:
            time.sleep(0.2)
            raise OSError(5, "Input/output error")
        time.sleep(0.4)  # the error was already reported to the first caller

    monkeypatch.setattr(writer_mod, "_fdatasync", once_per_file)
    out: dict = {}

    def append(n: int) -> None:
        try:
            out[n] = ledger.append("interaction", {"n": n}, release_id="r", content_id="c")
        except StoreError as exc:
            out[n] = exc

    first = background(lambda: append(1))
    time.sleep(0.05)
    second = background(lambda: append(2))
    first.join(10)
    second.join(10)
    assert all(isinstance(out[n], StoreError) for n in (1, 2)), out
