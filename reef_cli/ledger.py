"""The ledger: one append-only, hash-chained JSONL file per scenario recording every run and its feedback.

Why it is built this way:

* **Chain.** Each line is the canonical JSON of a `Record`; `hash` is SHA-256 over the record without `hash`, and
  `prev_hash` is the previous record's `hash` (64 zeros for the first), so an edited, deleted, inserted or reordered
  line shows up in `verify()`. `compact()` is the only path that removes records: it removes a prefix and appends a
  `compaction` record naming the last removed hash, which is what the first kept record chains to.
* **Durability and group commit.** `append` returns only after an fdatasync that began after its line was
  written. Writers write under the writer lock and sync after releasing it (threads sharing an instance too, outside
  its mutex), so concurrent syncs overlap. How they are shared depends on how long syncs take (a moving average):
  - fast syncs (under 1 ms, e.g. NVMe or a VM's virtio disk): each writer issues its own and the filesystem folds
    overlapping ones into shared journal commits. Waking sleepers costs more CPU than such a sync, so user-space
    coordination only slowed this case down (measured: 1.0x the raw rate with 8 writers against ~1.5x).
  - slow syncs (a disk or cloud volume taking milliseconds to flush): one writer leads a sync for everyone
    (`group_commit.SyncLeader`: a mapped durable-up-to page and generation locks). ext4 alone splits such writers
    into two groups that take turns, about half per commit; a leader with a short commit delay gathers nearly all
    of them (8 writers: 3.1x -> ~4.9x the raw rate).
  Only a durable size published after a real sync is trusted; cutting a torn line takes back any size beyond it,
  and a new or swapped-in file resets the page.
* **Cheap opens.** Opening never reads the whole file: the writer re-reads only the last line (for `seq` and
  `prev_hash`) and only when the file grew since it last looked. A crash's torn last line is truncated there. A
  file replaced under a writer (compaction renames a copy over it) is noticed by its descriptor's link count
  dropping to zero.
* **Id index.** `<ledger>.idx` holds "record_id offset" lines under a header naming the ledger's inode. It is a
  cache, never synced, and written only when a lookup needs it (`get()`, or an append with a client-supplied id,
  i.e. an idempotent resend): it is caught up from its last entry, or rebuilt when torn, stale or wrong. Generated
  ids are fresh ULIDs and need no lookup, so the common append never touches it.
* **Locks.** The writer lock is `flock(2)` on a kept-open descriptor, the primitive `filelock.FileLock` uses on
  the same path (a `FileLock("<ledger>.lock")` excludes ledger writers), but taken blocking: `FileLock` polls
  with sleeps and costs ~130 µs per acquire. POSIX only.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .durable import fsync_dir, last_lines, write_all
from .errors import ConflictError, InvalidInput, NotFound, StoreError
from . import group_commit
from .group_commit import SyncLeader
from .ids import new_id, new_id_at
from .times import format_ms, format_time

ZERO_HASH = "0" * 64
REMOVED_LIST_LIMIT = 1000
"""A compaction record lists removed ids and hashes up to this many; beyond it, only the span hash and ends."""

_KIND_RE = re.compile(r"[a-z_]{1,64}")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_REF_RE = re.compile(r"[^\x00-\x1f\x7f]{1,256}")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_HEX128_RE = re.compile(r"[0-9a-f]{128}")
_FIELDS = (
    "content_id", "created_at", "hash", "kind", "payload", "prev_hash", "record_id", "release_id", "scenario", "seq",
)
_FIELD_SET = frozenset(_FIELDS)
_TEXT_FIELDS = ("record_id", "kind", "scenario", "created_at", "prev_hash", "hash")
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_HASH_KEY = b'"hash":"'
_ID_KEY = b',"record_id":"'
_BLOCK = 64 * 1024
_fdatasync = getattr(os, "fdatasync", os.fsync)
_this_pid = [os.getpid()]
"""This process's id, kept current by a fork hook: asking the kernel on every append costs a system call."""
os.register_at_fork(after_in_child=lambda: _this_pid.__setitem__(0, os.getpid()))


def _c_encoder() -> Callable[[Any], str]:
    """`_ENCODER.encode` without its per-call set-up: the C encoder built once, used only when it agrees with the
    stdlib encoder on a sample (its constructor is private API). Without check_circular (a fresh markers dict per
    call would cost what this saves) a cycle surfaces as RecursionError, which callers treat as bad input."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    try:
        chunks = make(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, False)
        sample = {"b": [1, 2.5, None, True, "é\n"], "a": {"z": {}, "y": []}}
        if "".join(chunks(sample, 0)) != _ENCODER.encode(sample):
            return _ENCODER.encode
    except Exception:  # noqa: BLE001 - another interpreter's private signature: use the public path
        return _ENCODER.encode
    return lambda obj: "".join(chunks(obj, 0))


_encode = _c_encoder()
_scan_once = json.decoder.JSONDecoder().scan_once


def _loads(text: str) -> Any:
    """`json.loads` for a str, calling the scanner directly on the common case (a document with no surrounding
    whitespace); anything else goes through `json.loads`, which accepts or rejects it exactly as always."""
    try:
        obj, end = _scan_once(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)
    return obj if end == len(text) else json.loads(text)


def canonical_json(obj: Any) -> bytes:
    """The bytes that get hashed: sorted keys, compact separators, UTF-8, no NaN."""
    return _encode(obj).encode("utf-8")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- record ids -------------------------------------------------------------------------------------------------

def new_record_id(moment: datetime | None = None) -> str:
    """`rec_` + a 26-character ULID, strictly increasing within a process (see `ids.new_id`)."""
    return new_id("rec", moment)


# --- records ----------------------------------------------------------------------------------------------------


class _Payload:
    """`Record.payload`. A record this process has just appended keeps the canonical JSON it wrote and decodes it
    on first use (most callers of `append` want only the id, and decoding cost several µs per append); every other
    record holds the decoded dict. Only the dataclass's `__init__` sets it (the class is frozen)."""

    def __get__(self, record: Any, owner: Any = None) -> Any:
        if record is None:
            return self
        fields = record.__dict__
        try:
            return fields["payload"]
        except KeyError:
            return fields.setdefault("payload", _loads(fields["_payload_text"]))

    def __set__(self, record: Any, value: Any) -> None:
        record.__dict__["payload"] = value


@dataclass(frozen=True)
class Record:
    """One ledger line. `payload` is a plain dict decoded from canonical JSON; treat it as read-only."""

    record_id: str
    kind: str
    scenario: str
    release_id: str | None
    content_id: str | None
    created_at: str
    payload: dict
    seq: int
    prev_hash: str
    hash: str

    def to_json(self) -> dict:
        return {
            "content_id": self.content_id,
            "created_at": self.created_at,
            "hash": self.hash,
            "kind": self.kind,
            "payload": self.payload,
            "prev_hash": self.prev_hash,
            "record_id": self.record_id,
            "release_id": self.release_id,
            "scenario": self.scenario,
            "seq": self.seq,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Record:
        """Check the shape (not the hash); raises InvalidInput naming the first bad field."""
        if type(obj) is dict and obj.keys() == _FIELD_SET:
            seq, text, optional = obj["seq"], _TEXT_FIELDS, ("release_id", "content_id")
            if (
                all(type(obj[name]) is str for name in text)
                and all(obj[name] is None or type(obj[name]) is str for name in optional)
                and type(obj["payload"]) is dict
                and type(seq) is int
                and seq >= 1
                and _HEX128_RE.fullmatch(obj["prev_hash"] + obj["hash"])
            ):
                record = cls.__new__(cls)
                record.__dict__.update(obj)  # frozen: set the fields without __setattr__, as dataclass __init__ does
                return record
        raise InvalidInput(_shape_problem(obj))

    @property
    def created(self) -> datetime:
        return datetime.strptime(self.created_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)

    def compute_hash(self) -> str:
        body = self.to_json()
        del body["hash"]
        return hashlib.sha256(canonical_json(body)).hexdigest()

    def to_line(self) -> bytes:
        return canonical_json(self.to_json()) + b"\n"


Record.payload = _Payload()  # type: ignore[assignment]  # after @dataclass, which took `payload` as a field


@dataclass(frozen=True)
class NewRecord:
    """What a caller asks `append_many` to write; the ledger fills in id (unless given), time, seq and hashes."""

    kind: str
    payload: Mapping[str, Any]
    release_id: str | None
    content_id: str | None
    record_id: str | None = None


@dataclass(frozen=True)
class VerifyResult:
    """`first_bad_seq` is the chain position where the file first departs from a valid chain, `line` the file line
    there and `first_bad_record_id` the record found on it (for "deleted" that is the record after the gap).
    `head_hash` is the last record's hash: keep it elsewhere to detect a truncated tail, which no chain can."""

    ok: bool
    count: int
    first_bad_seq: int | None = None
    first_bad_record_id: str | None = None
    problem: str | None = None
    message: str = ""
    line: int | None = None
    head_hash: str | None = None
    torn_tail: bool = False

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "count": self.count,
            "first_bad_seq": self.first_bad_seq,
            "first_bad_record_id": self.first_bad_record_id,
            "problem": self.problem,
            "message": self.message,
            "line": self.line,
            "head_hash": self.head_hash,
            "torn_tail": self.torn_tail,
        }


def _shape_problem(obj: Any) -> str:
    """Why `obj` is not a record (the slow path of Record.from_json, for the message)."""
    if not isinstance(obj, dict):
        return f"a record must be a JSON object, not {type(obj).__name__}"
    if obj.keys() != _FIELD_SET:
        missing, extra = sorted(_FIELD_SET - obj.keys()), sorted(obj.keys() - _FIELD_SET)
        return f"record fields are wrong (missing {missing}, unexpected {extra})"
    for name in _TEXT_FIELDS:
        if not isinstance(obj[name], str):
            return f"record field '{name}' must be a string"
    for name in ("release_id", "content_id"):
        if obj[name] is not None and not isinstance(obj[name], str):
            return f"record field '{name}' must be a string or null"
    if not isinstance(obj["payload"], dict):
        return "record field 'payload' must be an object"
    if type(obj["seq"]) is not int or obj["seq"] < 1:
        return "record field 'seq' must be a positive integer"
    for name in ("prev_hash", "hash"):
        if not _HEX64_RE.fullmatch(obj[name]):
            return f"record field '{name}' must be 64 lowercase hex digits"
    return "record fields have the wrong types"


class _BadJSON(ValueError):
    pass


class _BadIndex(ValueError):
    pass


def _decode(raw: bytes) -> tuple[Record, bool]:
    """Parse one line (without its newline); returns the record and whether its hash checks out.

    The fast path hashes the line's own bytes with the hash member cut out, which equals the canonical form for
    every line this module wrote; only a line in some other byte form pays for re-encoding.
    """
    try:
        obj = _loads(raw.decode("utf-8"))  # text: json.loads would first sniff the encoding of bytes
    except ValueError as exc:  # UnicodeDecodeError included
        raise _BadJSON(f"not valid JSON ({exc})") from None
    try:
        record = Record.from_json(obj)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None
    cut = raw.find(_HASH_KEY)
    if cut > 0:
        end = cut + len(_HASH_KEY) + 64
        if raw[end : end + 2] == b'",' and raw[cut + len(_HASH_KEY) : end] == record.hash.encode("ascii"):
            if hashlib.sha256(raw[:cut] + raw[end + 2 :]).hexdigest() == record.hash:
                return record, True
    return record, record.compute_hash() == record.hash


@dataclass(slots=True)
class _Line:
    number: int
    offset: int
    raw: bytes  # without the newline
    record: Record | None
    hash_ok: bool
    error: str | None


def _lines(path: Path, start: int = 0, first_number: int = 1) -> Iterator[tuple[int, int, bytes, bool]]:
    """Stream (line number, offset, bytes without newline, complete?) without loading the file."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return
    with handle:
        handle.seek(start)
        offset, number = start, first_number
        for raw in handle:
            complete = raw.endswith(b"\n")
            yield number, offset, raw[:-1] if complete else raw, complete
            offset += len(raw)
            number += 1


def _scan(path: Path, start: int = 0, first_number: int = 1) -> Iterator[_Line]:
    """Decoded lines; a last line that is incomplete or not JSON is a torn write in progress or left by a crash,
    so it is left out (the next writer truncates it). Other bad lines come back with `error` set."""
    pending: _Line | None = None
    for number, offset, raw, complete in _lines(path, start, first_number):
        if pending is not None:
            yield pending
            pending = None
        if not complete:
            return
        try:
            record, ok = _decode(raw)
            line = _Line(number, offset, raw, record, ok, None)
        except _BadJSON as exc:
            line = _Line(number, offset, raw, None, False, str(exc))
            pending = line
            continue
        except ValueError as exc:
            line = _Line(number, offset, raw, None, False, str(exc))
        yield line
    # A pending line is the final one and not JSON: torn.


def _strict(path: Path, line: _Line) -> Record:
    if line.record is None:
        raise StoreError(
            f"{path}: line {line.number} is corrupt: {line.error}; fix or restore the file (nothing was changed)"
        )
    if not line.hash_ok:
        raise StoreError(
            f"{path}: line {line.number} (record {line.record.record_id}) does not match its hash: the record was "
            f"edited; run verify and restore the file (nothing was changed)"
        )
    return line.record


def _line_number(path: Path, offset: int) -> int:
    count = 1
    with open(path, "rb") as handle:
        left = offset
        while left > 0:
            block = handle.read(min(_BLOCK, left))
            if not block:
                break
            count += block.count(b"\n")
            left -= len(block)
    return count


def _read_line_at(fd: int, offset: int) -> bytes:
    """The line starting at `offset` (without newline); b"" if the offset is past the end."""
    chunks: list[bytes] = []
    while True:
        block = os.pread(fd, 4096, offset)
        if not block:
            return b"".join(chunks)  # no newline before the end: a torn line, which will not decode
        cut = block.find(b"\n")
        if cut >= 0:
            chunks.append(block[:cut])
            return b"".join(chunks)
        chunks.append(block)
        offset += len(block)


# --- the ledger -------------------------------------------------------------------------------------------------

_quote = json.encoder.encode_basestring  # the escaping the canonical encoder applies to str (non-ASCII kept)


def _json_str(value: str | None) -> str:
    return "null" if value is None else _quote(value)


@dataclass(slots=True)
class _Draft:
    kind: str
    payload_text: str  # canonical JSON (text: json.loads of text skips sniffing the encoding of bytes)
    release_id: str | None
    content_id: str | None
    record_id: str | None

    def key(self) -> tuple:
        return self.kind, self.payload_text, self.release_id, self.content_id

    def differences(self, record: Record) -> list[str]:
        """Fields in which an existing record differs (none: an identical resend)."""
        diffs = []
        if record.kind != self.kind:
            diffs.append("kind")
        if _encode(record.payload) != self.payload_text:
            diffs.append("payload")
        if record.release_id != self.release_id:
            diffs.append("release_id")
        if record.content_id != self.content_id:
            diffs.append("content_id")
        return diffs


_known_kinds: set[str] = set()
_known_refs: dict[str | None, str] = {None: "null"}
"""Kinds, and release/content ids with their JSON, already validated in this process (each is checked once, not
per append)."""


def _draft(kind: Any, payload: Any, release_id: Any, content_id: Any, record_id: Any) -> _Draft:
    if type(kind) is not str or kind not in _known_kinds:
        if type(kind) is not str or not _KIND_RE.fullmatch(kind):
            raise InvalidInput(f"record kind {kind!r} must be 1-64 characters of a-z and '_'")
        if len(_known_kinds) < 1024:
            _known_kinds.add(kind)
    if type(payload) is not dict:
        if not isinstance(payload, Mapping):
            raise InvalidInput(f"payload of a '{kind}' record must be a mapping, not {type(payload).__name__}")
        payload = dict(payload)
    try:
        payload_text = _encode(payload)
        payload_text.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        problem = "it contains itself" if isinstance(exc, RecursionError) else exc
        raise InvalidInput(f"payload of a '{kind}' record is not JSON-serialisable: {problem}") from None
    if not (
        (release_id is None or (type(release_id) is str and release_id in _known_refs))
        and (content_id is None or (type(content_id) is str and content_id in _known_refs))
    ):
        for name, value in (("release_id", release_id), ("content_id", content_id)):
            if value is not None and (type(value) is not str or not _REF_RE.fullmatch(value) or not _utf8(value)):
                raise InvalidInput(f"{name} {value!r} must be 1-256 characters without control characters, or None")
            if value is not None and len(_known_refs) < 4096:
                _known_refs[value] = _quote(value)
    if record_id is not None and (type(record_id) is not str or not _ID_RE.fullmatch(record_id)):
        raise InvalidInput(
            f"record_id {record_id!r} must be 1-128 characters of letters, digits and '_.:-', starting with a "
            f"letter or digit"
        )
    return _Draft(kind, payload_text, release_id, content_id, record_id)


def _draft_of(item: NewRecord | Mapping[str, Any]) -> _Draft:
    if isinstance(item, NewRecord):
        return _draft(item.kind, item.payload, item.release_id, item.content_id, item.record_id)
    if not isinstance(item, Mapping):
        raise InvalidInput(f"append_many takes NewRecord objects or mappings, not {type(item).__name__}")
    unknown = set(item) - {"kind", "payload", "release_id", "content_id", "record_id"}
    if unknown:
        raise InvalidInput(f"unknown record fields {sorted(unknown)}")
    try:
        return _draft(item["kind"], item["payload"], item["release_id"], item["content_id"], item.get("record_id"))
    except KeyError as exc:
        raise InvalidInput(f"record field {exc.args[0]!r} is required") from None


def _line_head(content_json: str, created_at: str, kind: str, payload_text: str) -> tuple[bytes, bytes]:
    """A record's canonical line is assembled around its already-encoded payload, keys in sorted order: these are
    the parts before "hash" (which sorts between "created_at" and "kind") and from "kind" to the opening quote of
    "prev_hash". Neither depends on the chain, so appends build and hash them before taking the writer lock."""
    return (
        f'{{"content_id":{content_json},"created_at":"{created_at}",'.encode(),
        f'"kind":"{kind}","payload":{payload_text},"prev_hash":"'.encode(),
    )


def _line_tail(prev: str, record_id: str, release_json: str, scenario_json: str, seq: int) -> bytes:
    """The rest of the line, from the previous hash on (record ids never need escaping: see _ID_RE)."""
    return (
        f'{prev}","record_id":"{record_id}","release_id":{release_json},"scenario":{scenario_json},"seq":{seq}}}\n'
    ).encode()


def _finish_line(hashed: Any, head: tuple[bytes, bytes], tail: bytes) -> tuple[str, bytes]:
    """The hash (over the record without "hash": `hashed` has taken both parts of `head`) and the line, which is
    the same bytes with "hash" spliced in."""
    hashed.update(tail[:-1])
    digest = hashed.hexdigest()
    return digest, b"".join((head[0], b'"hash":"', digest.encode(), b'",', head[1], tail))


def _new_record(record_id: str, kind: str, scenario: str, release_id: str | None, content_id: str | None,
                created_at: str, payload_text: str, seq: int, prev: str, digest: str) -> Record:
    """A Record for a line just written; its payload is decoded from `payload_text` on first use (`_Payload`)."""
    record = Record.__new__(Record)  # the fields are known good: skip the frozen __init__'s ten __setattr__s
    record.__dict__.update(
        record_id=record_id, kind=kind, scenario=scenario, release_id=release_id, content_id=content_id,
        created_at=created_at, _payload_text=payload_text, seq=seq, prev_hash=prev, hash=digest,
    )
    return record


class Ledger:
    """One scenario's ledger file. Cheap to construct; files are opened on first write and kept open.

    One instance may be shared by threads (its operations are serialised); processes coordinate through the lock
    files. Use it as a context manager, or call `close()`, to release descriptors promptly.
    """

    def __init__(self, path: str | os.PathLike[str], scenario: str, *, now: Callable[[], datetime] | None = None):
        if type(scenario) is not str or not _REF_RE.fullmatch(scenario) or not _utf8(scenario):
            raise InvalidInput(f"scenario name {scenario!r} must be a non-empty string without control characters")
        self.path = Path(path)
        self.scenario = scenario
        self._scenario_json = _quote(scenario)
        self._clock = now  # None: the system clock, read as time_ns (see _stamp)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.index_path = self.path.with_name(self.path.name + ".idx")
        self.sync_path = self.path.with_name(self.path.name + ".sync")
        self._leader = SyncLeader(str(self.sync_path))
        self._mutex = threading.Lock()
        self._pid: int | None = None
        self._fd = self._lock_fd = self._idx_fd = -1
        self._syncing = 0  # appends between their write and the end of their sync (they sync without the mutex)
        self._sync_ns = 0  # moving average of this instance's syncs
        self._reserved: set[str] = set()  # ids from reserve_id(), not yet appended
        self._retired: list[int] = []
        self._ino = 0
        self._size = -1  # ledger size when this process last held the writer lock; -1: unknown
        self._seq = 0
        self._hash = ZERO_HASH
        self.fsyncs = 0
        """Syncs this instance issued (one per append or batch; the kernel shares their commits)."""

    # -- lifecycle

    def close(self) -> None:
        with self._mutex:
            self._close_fds()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._close_fds()
        except Exception:  # noqa: BLE001 - at interpreter shutdown parts of os may already be gone
            pass

    def _close_fds(self) -> None:
        if self._pid == os.getpid():
            if self._fd >= 0:
                self._retire(self._fd)
            for fd in (self._lock_fd, self._idx_fd):
                if fd >= 0:
                    os.close(fd)
        else:  # a forked child: the parent's threads and their syncs did not come along
            self._syncing, self._retired = 0, []
        self._fd = self._lock_fd = self._idx_fd = -1
        self._pid = None
        self._ino = 0
        self._size = -1

    def _ensure_open(self) -> None:
        if self._pid == _this_pid[0]:
            return
        self._close_fds()  # after fork: inherited descriptors would share the parent's locks, so start over
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open the ledger files next to {self.path}: {exc.strerror}") from None
        self._pid = _this_pid[0]

    def _open_ledger(self) -> None:
        """(Re)open the file at `path`, creating it durably if missing. Called under the writer lock."""
        if self._fd >= 0:
            self._retire(self._fd)
            self._fd = -1
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            try:
                self._fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                fsync_dir(self.path.parent)
            except FileExistsError:
                self._fd = os.open(self.path, flags)
        except OSError as exc:
            raise StoreError(f"cannot open ledger {self.path}: {exc.strerror}") from None
        st = os.fstat(self._fd)
        self._ino, self._size = st.st_ino, -1
        # A sync page left from a file that had this inode number before (deleted and recreated, say) must not
        # vouch for this one: nothing in it is known durable beyond what its size allows.
        self._leader.correct(lambda current: current[0] == st.st_ino and current[1] > st.st_size,
                             lambda current: (st.st_ino, st.st_size))

    def _sync_outside(self, fd: int, ino: int, end: int, own: int) -> None:
        """Make the ledger (inode `ino`, descriptor `fd`) durable up to offset `end` (`own` bytes of it ours),
        without holding the mutex, so threads sharing this instance sync at the same time as processes do. The
        caller counted itself in `_syncing` under the mutex; while that is non-zero, replaced descriptors are kept
        open (`_retire`). Fast syncs are issued here and shared by the kernel; slow ones are led."""
        took = 0
        try:
            if max(self._sync_ns, self._leader.shared_average()) >= group_commit.COORDINATE_ABOVE_NS:
                self._leader.make_durable(fd, ino, end, own, _fdatasync, self._noted)
            else:
                started = time.monotonic_ns()
                _fdatasync(fd)
                took = time.monotonic_ns() - started
        except OSError as exc:
            raise StoreError(f"cannot sync {self.path}: {exc.strerror}; the last records may not be durable") from None
        finally:
            with self._mutex:
                if took:
                    self._note_sync(took)
                self._syncing -= 1
                if not self._syncing and self._retired:
                    for old in self._retired:
                        os.close(old)
                    self._retired.clear()

    def _note_sync(self, took: int) -> None:
        """Count a sync and fold its duration into this instance's moving average (under the mutex)."""
        self.fsyncs += 1
        self._sync_ns = took if not self._sync_ns else (7 * self._sync_ns + took) // 8

    def _noted(self, took: int) -> None:
        with self._mutex:
            self._note_sync(took)

    def _retire(self, fd: int) -> None:
        """Close a replaced ledger descriptor, or keep it until the syncs in flight on it are done."""
        if self._syncing:
            self._retired.append(fd)
        else:
            os.close(fd)

    def _sync_now(self) -> None:
        try:
            _fdatasync(self._fd)
        except OSError as exc:
            raise StoreError(f"cannot sync {self.path}: {exc.strerror}; the last records may not be durable") from None
        self.fsyncs += 1

    # -- the writer's view of the tail (under the writer lock)

    def _refresh(self) -> None:
        """Catch up with what other processes wrote since we last held the lock; repair a torn tail. A file
        replaced since (by compaction, under this lock, or from outside) has no links left: open the path again."""
        if self._fd < 0:
            self._open_ledger()
        st = os.fstat(self._fd)
        if st.st_nlink == 0:
            self._open_ledger()
            st = os.fstat(self._fd)
        if st.st_size != self._size:
            self._load_tail(st.st_size)

    def _load_tail(self, size: int, repaired: bool = False) -> None:
        if size == 0:
            self._size, self._seq, self._hash = 0, 0, ZERO_HASH
            return
        span = min(size, 4096)
        while True:
            start = size - span
            data = os.pread(self._fd, span, start)
            body_end = len(data) if data.endswith(b"\n") else data.rfind(b"\n") + 1
            cut = data.rfind(b"\n", 0, body_end - 1) if body_end else -1
            if start > 0 and (body_end == 0 or cut < 0):
                span = min(size, span * 4)  # the last line (or the torn part) is longer than this window
                continue
            break
        if body_end < len(data):
            if repaired:
                raise StoreError(f"{self.path}: the end of the file changed while a torn line was being removed")
            self._truncate(start + body_end)
            return self._load_tail(start + body_end, repaired=True)
        raw = data[cut + 1 : body_end - 1]
        offset = start + cut + 1
        quick = _quick_tail(raw)
        if quick is not None:
            self._size, (self._seq, self._hash) = size, quick
            return None
        try:
            record, ok = _decode(raw)
        except _BadJSON:
            if repaired:
                raise StoreError(
                    f"{self.path}: line {_line_number(self.path, offset)} is not valid JSON; the file is corrupt "
                    f"(nothing was changed)"
                ) from None
            self._truncate(offset)  # a complete last line that is not JSON is a torn write too (e.g. zero-filled)
            return self._load_tail(offset, repaired=True)
        except ValueError as exc:
            raise StoreError(f"{self.path}: line {_line_number(self.path, offset)} is corrupt: {exc}") from None
        if not ok:
            raise StoreError(
                f"{self.path}: line {_line_number(self.path, offset)} (record {record.record_id}) does not match "
                f"its hash; refusing to append (nothing was changed); run verify"
            )
        self._size, self._seq, self._hash = size, record.seq, record.hash
        return None

    def _truncate(self, size: int) -> None:
        """Drop a torn tail. It was never acknowledged (acks follow a complete write), so nothing is lost."""
        os.ftruncate(self._fd, size)
        self._sync_now()
        self._forget_durable_beyond(size)

    def _taken_back(self, fd: int, start: int, exc: OSError) -> StoreError:
        """After a failed append: cut the file back to `start`, so no partial line stays, and say what happened."""
        try:
            os.ftruncate(fd, start)
            self._forget_durable_beyond(start)
        except OSError:
            pass
        return StoreError(f"cannot append to {self.path}: {exc.strerror}; nothing was recorded")

    def _forget_durable_beyond(self, size: int) -> None:
        """The file shrank to `size` under the writer lock. A durable size published beyond it (a leader may have
        synced a torn or failed line) would vouch for whatever is appended there next: take it back."""
        self._leader.correct(lambda current: current[1] > size, lambda current: (current[0], size))

    # -- the id index (under the writer lock; written only when a lookup needs it)

    def _index_header(self) -> bytes:
        return b"reef-ledger-idx 1 %d\n" % self._ino

    def _catch_up_index(self) -> None:
        """Make the index cover every record: index what was appended since its last entry, or rebuild it when its
        header names another file or its last entry does not point at that record."""
        if self._idx_fd < 0:
            self._idx_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        header = self._index_header()
        size = os.fstat(self._idx_fd).st_size
        if size < len(header) or os.pread(self._idx_fd, len(header), 0) != header:
            return self._rebuild_index()
        tail = os.pread(self._idx_fd, min(size, 512), max(0, size - 512))
        if not tail.endswith(b"\n"):
            os.ftruncate(self._idx_fd, size - (len(tail) - tail.rfind(b"\n") - 1))  # a writer died mid-entry
            return self._catch_up_index()
        start = 0
        if size > len(header):
            last = tail[tail.rfind(b"\n", 0, len(tail) - 1) + 1 : -1]
            try:
                entry_id, entry_offset = last.split(b" ")
                raw = _read_line_at(self._fd, int(entry_offset))
                if _decode(raw)[0].record_id.encode("ascii") != entry_id:
                    return self._rebuild_index()
            except ValueError:
                return self._rebuild_index()
            start = int(entry_offset) + len(raw) + 1
        if start > self._size:
            return self._rebuild_index()
        if start < self._size:
            self._index_from(start)
        return None

    def _rebuild_index(self) -> None:
        os.ftruncate(self._idx_fd, 0)
        os.write(self._idx_fd, self._index_header())
        self._index_from(0)

    def _index_from(self, start: int) -> None:
        """Index the records from `start` on. Takes each id straight from the line's bytes (the top-level
        "record_id" is the last member of that name, since keys are sorted and strings cannot hold a bare quote);
        checking records is verify's and the readers' job, and a line with no id is reported here."""
        out: list[bytes] = []
        for number, offset, raw, complete in _lines(self.path, start):
            if not complete:
                break  # a torn write in progress
            at = raw.rfind(_ID_KEY) + len(_ID_KEY)
            end = raw.find(b'"', at)
            if at < len(_ID_KEY) or end < 0 or not _ID_RE.fullmatch(raw[at:end].decode("ascii", "replace")):
                line = number if start == 0 else _line_number(self.path, offset)
                raise StoreError(f"{self.path}: line {line} is corrupt: it has no record_id (nothing was changed)")
            out.append(b"%s %d\n" % (raw[at:end], offset))
            if len(out) >= 4096:
                os.write(self._idx_fd, b"".join(out))
                out.clear()
        if out:
            os.write(self._idx_fd, b"".join(out))

    def _lookup(self, ids: set[str], rebuilt: bool = False) -> dict[str, Record]:
        """Stored records for `ids`, through the (caught-up) index; an index that points at the wrong line is
        rebuilt once. Under the writer lock."""
        self._catch_up_index()
        found: dict[str, Record] = {}
        try:
            offsets = _search_index(self._idx_fd, ids)
        except _BadIndex:
            offsets = None
        for rid, offset in (offsets or {}).items():
            try:
                record, ok = _decode(_read_line_at(self._fd, offset))
            except ValueError:
                record, ok = None, False
            if record is None or record.record_id != rid:
                offsets = None
                break
            if not ok:
                raise StoreError(
                    f"{self.path}: line {_line_number(self.path, offset)} (record {rid}) does not match its hash; "
                    f"run verify (nothing was changed)"
                )
            found[rid] = record
        if offsets is None:
            if rebuilt:
                raise StoreError(f"{self.index_path} disagrees with {self.path} even after a rebuild")
            self._rebuild_index()
            return self._lookup(ids, rebuilt=True)
        return found

    # -- writing

    def append(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        release_id: str | None,
        content_id: str | None,
        record_id: str | None = None,
    ) -> Record:
        """Append one record and return it once it is durable. With `record_id`, an identical resend returns the
        stored record and different content under that id raises ConflictError."""
        if (
            (record_id is not None and record_id not in self._reserved)
            or self._clock is not None
            or type(kind) is not str
            or kind not in _known_kinds
            or type(payload) is not dict
            or (release_id is not None and type(release_id) is not str)
            or (content_id is not None and type(content_id) is not str)
            or (release_json := _known_refs.get(release_id)) is None
            or (content_json := _known_refs.get(content_id)) is None
        ):
            return self._append([_draft(kind, payload, release_id, content_id, record_id)])[0]
        # The common case, written out flat (fields already seen valid, generated id, system clock): it runs after
        # every agent session next to a ~150 µs sync, and on a VM each µs of Python here costs two or three once
        # the CPU has idled through the previous sync (bench/RESULTS.md). Everything up to "prev_hash" is built
        # and hashed before taking the writer lock.
        try:
            payload_text = _encode(payload)
            ms = time.time_ns() // 1_000_000
            created_at, record_id = format_ms(ms), record_id or new_id_at("rec", ms)
            head = _line_head(content_json, created_at, kind, payload_text)
        except (TypeError, ValueError, RecursionError):  # not JSON, or a lone surrogate: say so as _draft does
            return self._append([_draft(kind, payload, release_id, content_id, None)])[0]
        hashed = hashlib.sha256(head[0])
        hashed.update(head[1])
        with self._mutex:
            if self._pid != _this_pid[0]:
                self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                fd = self._fd
                if fd < 0 or (st := os.fstat(fd)).st_nlink == 0 or st.st_size != self._size:
                    self._refresh()
                    fd = self._fd
                seq, prev = self._seq + 1, self._hash
                digest, line = _finish_line(hashed, head, _line_tail(prev, record_id, release_json,
                                                                     self._scenario_json, seq))
                self._append_bytes(fd, line)
                self._seq, self._hash = seq, digest
                self._reserved.discard(record_id)  # stored now: a second append of it is a resend
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            self._syncing += 1
            end, ino = self._size, self._ino
        self._sync_outside(fd, ino, end, len(line))
        return _new_record(record_id, kind, self.scenario, release_id, content_id, created_at, payload_text, seq,
                           prev, digest)

    def reserve_id(self) -> str:
        """A fresh record id for a record appended later through this instance (`reef run` hands it to the agent
        as its receipt before the run). It is new by construction, so appending it skips the idempotency lookup
        that a client-supplied id costs (a pass over the id index)."""
        record_id = new_record_id()
        self._reserved.add(record_id)
        return record_id

    def append_many(self, items: Iterable[NewRecord | Mapping[str, Any]]) -> list[Record]:
        """Append several records (NewRecord or mappings with the same fields) under one lock, one write and at
        most one sync; all or none are written."""
        drafts = [_draft_of(item) for item in items]
        return self._append(drafts) if drafts else []

    def _stamp(self, supplied: list[str | None]) -> tuple[str, list[str]]:
        """The time to record and an id for each draft (generated where none was supplied). With the system clock
        this reads `time_ns` and builds neither a datetime nor a second id clock reading."""
        if self._clock is None:
            ms = time.time_ns() // 1_000_000
            return format_ms(ms), [rid or new_id_at("rec", ms) for rid in supplied]
        now = self._clock()
        return format_time(now), [rid or new_record_id(now) for rid in supplied]

    def _append(self, drafts: list[_Draft]) -> list[Record]:
        # Everything that does not depend on the chain happens outside the writer lock, so it is held briefly.
        created_at, ids = self._stamp([d.record_id for d in drafts])
        with self._mutex:
            self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                self._refresh()
                start = self._size
                existing = self._resolve_ids(drafts)
                written, _ = self._write(drafts, ids, created_at, existing)
                self._reserved.difference_update(ids)  # stored now: a second append of any is a resend
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            fd, ino, end = self._fd, self._ino, self._size
            self._syncing += 1
        # A resend syncs too: it must not be acknowledged before the original is durable.
        self._sync_outside(fd, ino, end, end - start)
        return [item if isinstance(item, Record) else self._record(*item) for item in written]

    def _resolve_ids(self, drafts: list[_Draft]) -> dict[int, Record]:
        """Records already stored or earlier in the batch under a draft's client-supplied id, by draft position;
        ConflictError if the content differs."""
        supplied = {d.record_id for d in drafts if d.record_id is not None and d.record_id not in self._reserved}
        if not supplied:
            return {}
        stored = self._lookup(supplied)
        existing: dict[int, Record] = {}
        first: dict[str, _Draft] = {}
        for position, draft in enumerate(drafts):
            rid = draft.record_id
            if rid is None:
                continue
            if rid in stored:
                diffs = draft.differences(stored[rid])
                if diffs:
                    raise ConflictError(
                        f"record id '{rid}' already exists in {self.path} with a different {', '.join(diffs)}; "
                        f"use a new id for new content"
                    )
                existing[position] = stored[rid]
            elif rid in first and first[rid].key() != draft.key():
                raise ConflictError(f"record id '{rid}' appears twice in one batch with different content")
            else:
                first.setdefault(rid, draft)
        return existing

    def _write(
        self, drafts: list[_Draft], ids: list[str], created_at: str, existing: dict[int, Record]
    ) -> tuple[list, int]:
        """Chain the new records and write them in one write. Returns, per draft, the stored Record or the fields
        to build one from, and the file offset that must become durable (0 if everything was stored already)."""
        written: list = []
        lines: list[bytes] = []
        in_batch: dict[str, tuple] = {}
        seq, prev = self._seq, self._hash
        for position, draft in enumerate(drafts):
            if position in existing:
                written.append(existing[position])
                continue
            if draft.record_id is not None and draft.record_id in in_batch:
                written.append(in_batch[draft.record_id])
                continue
            seq += 1
            digest, line = self._line(draft, ids[position], seq, prev, created_at)
            fields = (draft, ids[position], seq, prev, created_at, digest)
            prev = digest
            written.append(fields)
            lines.append(line)
            if draft.record_id is not None:
                in_batch[draft.record_id] = fields
        if not lines:
            return written, 0
        data = lines[0] if len(lines) == 1 else b"".join(lines)
        self._append_bytes(self._fd, data)
        self._seq, self._hash = seq, prev
        return written, self._size

    def _line(self, draft: _Draft, record_id: str, seq: int, prev: str, created_at: str) -> tuple[str, bytes]:
        """The record's hash and its line."""
        head = _line_head(_json_str(draft.content_id), created_at, draft.kind, draft.payload_text)
        hashed = hashlib.sha256(head[0])
        hashed.update(head[1])
        return _finish_line(hashed, head, _line_tail(prev, record_id, _json_str(draft.release_id),
                                                      self._scenario_json, seq))

    def _record(self, draft: _Draft, record_id: str, seq: int, prev: str, created_at: str, digest: str) -> Record:
        return _new_record(record_id, draft.kind, self.scenario, draft.release_id, draft.content_id, created_at,
                           draft.payload_text, seq, prev, digest)

    def _append_bytes(self, fd: int, data: bytes) -> None:
        """Write `data` at the end under the writer lock; on failure cut the file back so no partial line stays."""
        try:
            written = os.write(fd, data)
            if written != len(data):
                write_all(fd, data[written:])
        except OSError as exc:
            raise self._taken_back(fd, self._size, exc) from None
        self._size += len(data)

    # -- reading (no lock: a torn or in-flight last line is skipped)

    def iter_records(
        self,
        kind: str | None = None,
        since: datetime | None = None,
        release_id: str | None = None,
        from_seq: int | None = None,
    ) -> Iterator[Record]:
        """Stream records oldest first, line by line, filtered by kind, creation time (>= since, to the
        millisecond) and release; every line is hash-checked, and a corrupt one raises StoreError.
        `from_seq` starts at the first record whose seq is >= it, found by bisecting the file (seq grows with
        the offset), so a reader that resumes from a high-water mark reads only what is new."""
        since_text = format_time(since) if since is not None else None
        start, first_number = (0, 1) if not from_seq or from_seq <= 1 else self._offset_of_seq(from_seq)
        for line in _scan(self.path, start, first_number):
            record = _strict(self.path, line)
            if kind is not None and record.kind != kind:
                continue
            if since_text is not None and record.created_at < since_text:
                continue
            if release_id is not None and record.release_id != release_id:
                continue
            yield record

    def _offset_of_seq(self, seq: int) -> tuple[int, int]:
        """(offset, line number) of the first complete line whose record has seq >= `seq` (or the end)."""
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            return 0, 1
        with handle:
            size = os.fstat(handle.fileno()).st_size

            def line_at(pos: int) -> tuple[int, int | None]:
                """The first line starting at or after `pos`: (its offset, its seq or None past the end)."""
                if pos > 0:
                    handle.seek(pos - 1)
                    handle.readline()  # finish the line that `pos` falls in (a no-op when pos starts a line)
                else:
                    handle.seek(0)
                start = handle.tell()
                raw = handle.readline()
                if not raw.endswith(b"\n"):
                    return start, None
                try:
                    return start, int(json.loads(raw)["seq"])
                except (ValueError, KeyError, TypeError):
                    return start, None

            lo, hi = 0, size
            while lo < hi:
                mid = (lo + hi) // 2
                start, found = line_at(mid)
                if found is not None and found < seq:
                    handle.seek(start)
                    lo = start + len(handle.readline())
                else:
                    hi = mid
            start, _ = line_at(lo)
        return start, _line_number(self.path, start)

    def tail(self, n: int) -> list[Record]:
        """The last `n` records, oldest first, read backwards from the end in blocks."""
        if type(n) is not int or n < 0:
            raise InvalidInput(f"tail needs a count >= 0, not {n!r}")
        if n == 0:
            return []
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            return []
        with handle:
            found = last_lines(handle, n + 1, _BLOCK)  # one spare: the last may be a torn write, which is skipped
        records: list[Record] = []
        for index, (offset, raw) in enumerate(found):
            if len(records) == n:
                break
            try:
                record, ok = _decode(raw)
            except _BadJSON as exc:
                if index == 0:
                    continue  # a last line that is not JSON is a torn write
                raise StoreError(f"{self.path}: line {_line_number(self.path, offset)} is corrupt: {exc}") from None
            except ValueError as exc:
                raise StoreError(f"{self.path}: line {_line_number(self.path, offset)} is corrupt: {exc}") from None
            if not ok:
                raise StoreError(
                    f"{self.path}: line {_line_number(self.path, offset)} (record {record.record_id}) does not match "
                    f"its hash; run verify (nothing was changed)"
                )
            records.append(record)
        records.reverse()
        return records

    def get(self, record_id: str) -> Record:
        """One record by id through the index (caught up first, so this takes the writer lock briefly)."""
        if type(record_id) is not str or not _ID_RE.fullmatch(record_id):
            raise NotFound(f"no record {record_id!r} in {self.path} (not a valid record id)")
        if not self.path.exists():
            raise NotFound(f"no record '{record_id}' in {self.path} (the ledger does not exist yet)")
        with self._mutex:
            self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                self._refresh()
                found = self._lookup({record_id})
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        if record_id not in found:
            raise NotFound(f"no record '{record_id}' in {self.path}")
        return found[record_id]

    # -- verification

    def verify(self) -> VerifyResult:
        """Check every record's hash and every link of the chain, streaming; names the first break and its kind:
        "corrupt" (not a record), "edited", "deleted", "inserted", "reordered" or "foreign" (another scenario)."""
        return _Verifier(self.path, self.scenario).run()

    # -- compaction

    def compact(self, before: datetime | None = None, keep: int | None = None) -> Record | None:
        """Remove the oldest records (those created before `before`, and/or all but the last `keep`; with both,
        only records meeting both) and append a `compaction` record that lets `verify()` explain the new first
        record. Returns it, or None when nothing qualifies. Refuses (StoreError) a ledger that does not verify,
        so compaction never launders tampering."""
        if before is None and keep is None:
            raise InvalidInput("compact needs 'before' and/or 'keep'")
        if keep is not None and (type(keep) is not int or keep < 0):
            raise InvalidInput(f"keep must be an integer >= 0, not {keep!r}")
        before_text = format_time(before) if before is not None else None
        with self._mutex:
            self._ensure_open()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                self._refresh()
                result = self.verify()
                if not result.ok:
                    raise StoreError(f"refusing to compact: {result.message}")
                cut = result.count
                if keep is not None:
                    cut = min(cut, max(0, result.count - keep))
                if before_text is not None:
                    older = 0
                    for line in _scan(self.path):
                        if older >= cut or line.record is None or line.record.created_at >= before_text:
                            break
                        older += 1
                    cut = older
                if cut == 0:
                    return None
                return self._rewrite_without(cut, before_text, keep)
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _rewrite_without(self, cut: int, before_text: str | None, keep: int | None) -> Record:
        """Copy all but the first `cut` records to a temp file, add the compaction record, sync, swap it in."""
        temp = self.path.with_name(f".{self.path.name}.compact-{os.getpid()}")
        span = hashlib.sha256()
        removed: list[list[str]] = []
        first: Record | None = None
        last: Record | None = None
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            size = 0
            buffer: list[bytes] = []
            for count, line in enumerate(_scan(self.path), start=1):
                record = _strict(self.path, line)
                if count <= cut:
                    first = first or record
                    last = record
                    span.update(record.hash.encode("ascii") + b"\n")
                    if cut <= REMOVED_LIST_LIMIT:
                        removed.append([record.record_id, record.hash])
                    continue
                buffer.append(line.raw + b"\n")
                if len(buffer) >= 4096:
                    size += write_all(fd, b"".join(buffer))
                    buffer.clear()
            if buffer:
                size += write_all(fd, b"".join(buffer))
            if first is None or last is None:
                raise StoreError(f"{self.path} changed during compaction")
            payload: dict[str, Any] = {
                "removed_count": cut,
                "first_removed_seq": first.seq,
                "last_removed_seq": last.seq,
                "first_kept_seq": last.seq + 1,
                "first_removed_id": first.record_id,
                "last_removed_id": last.record_id,
                "last_removed_hash": last.hash,
                "removed_span_hash": span.hexdigest(),
                "before": before_text,
                "keep": keep,
            }
            if cut <= REMOVED_LIST_LIMIT:
                payload["removed"] = removed
            created_at, (record_id,) = self._stamp([None])
            draft = _Draft("compaction", _encode(payload), None, None, None)
            fields = (draft, record_id, self._seq + 1, self._hash, created_at)
            digest, line = self._line(*fields)
            record = self._record(*fields, digest)
            size += write_all(fd, line)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            temp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(temp, self.path)
        fsync_dir(self.path.parent)
        self._retire(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        self._ino = os.fstat(self._fd).st_ino
        ino = self._ino  # the copy was synced whole before the swap: durable to its end, whatever the page said
        self._leader.correct(lambda current: True, lambda current: (ino, size))
        self._size, self._seq, self._hash = size, record.seq, record.hash
        if self._idx_fd >= 0 or self.index_path.exists():
            self._catch_up_index()  # the header names the old inode, so this rebuilds
        return record


def _quick_tail(raw: bytes) -> tuple[int, str] | None:
    """(seq, hash) of a line as this module writes it, checked by hashing its bytes without the hash member;
    None for any other form, which the caller decodes in full."""
    cut = raw.find(_HASH_KEY)
    end = cut + len(_HASH_KEY) + 64
    if cut <= 0 or raw[end : end + 2] != b'",' or not raw.endswith(b"}"):
        return None
    digest = raw[cut + len(_HASH_KEY) : end]
    if hashlib.sha256(raw[:cut] + raw[end + 2 :]).hexdigest().encode("ascii") != digest:
        return None
    at = raw.rfind(b',"seq":')
    try:
        return int(raw[at + 7 : -1]), digest.decode("ascii")
    except ValueError:
        return None


def _search_index(fd: int, ids: set[str]) -> dict[str, int]:
    """Offsets of `ids` in an index file, reading blocks backwards from the end: the records asked for are
    usually recent (a receipt being reported on), so they are found in the first block; an id that is not there
    costs one pass over the index, whatever the number of ids."""
    wanted = {b"\n" + rid.encode("ascii") + b" ": rid for rid in ids}
    found: dict[str, int] = {}
    position = os.fstat(fd).st_size
    carry = b""  # the start of a line that began in the block before this one
    while wanted and position > 0:
        step = min(1 << 20, position)
        position -= step
        data = os.pread(fd, step, position) + carry
        for needle in list(wanted):
            at = data.rfind(needle)
            if at >= 0:
                end = data.find(b"\n", at + 1)
                digits = data[at + len(needle) : end if end >= 0 else len(data)]
                if not digits.isdigit():
                    raise _BadIndex(f"index entry for {wanted[needle]} has no offset")
                found[wanted.pop(needle)] = int(digits)
        first = data.find(b"\n")
        carry = data[:first] if first >= 0 else data
    return found


class _Verifier:
    """One streaming pass with one line of lookahead; a second pass over the rest of the file only to classify a
    break (was the missing record moved later, is an early record duplicated later, is the head explained by a
    compaction record further on)."""

    def __init__(self, path: Path, scenario: str):
        self.path = path
        self.scenario = scenario
        self.count = 0  # records verified before the first break

    def run(self) -> VerifyResult:
        lines = _scan(self.path)
        current = next(lines, None)
        torn = self._torn_tail()
        if current is None:
            note = f"{self.path}: empty ledger" + self._torn_note(torn)
            return VerifyResult(True, 0, message=note, torn_tail=bool(torn))
        expected_seq = expected_prev = None
        previous: _Line | None = None
        head: _Line | None = None
        anchors: set[tuple[int, str]] = set()
        while current is not None:
            upcoming = next(lines, None)
            record = current.record
            if record is None:
                return self._fail(head, anchors, current, expected_seq or 1, None, "corrupt",
                                  f"line {current.number} is not a ledger record: {current.error}")
            if head is None:
                head = current
                if current.hash_ok:
                    expected_seq, expected_prev = record.seq, record.prev_hash
                    if upcoming is not None and self._is_genesis(upcoming) and not self._chains(current, upcoming):
                        return self._fail(None, anchors, current, 1, record.record_id, "inserted",
                                          f"line 1 (record {record.record_id}) was inserted before the first record")
                else:
                    expected_seq, expected_prev = record.seq, ZERO_HASH
            if not (current.hash_ok and record.seq == expected_seq and record.prev_hash == expected_prev):
                return self._classify(head, anchors, previous, current, upcoming, expected_seq, expected_prev)
            if record.scenario != self.scenario:
                return self._fail(head, anchors, current, record.seq, record.record_id, "foreign",
                                  f"record {record.record_id} (line {current.number}) belongs to scenario "
                                  f"'{record.scenario}', not '{self.scenario}'")
            if record.kind == "compaction":
                anchor = _anchor_of(record)
                if anchor:
                    anchors.add(anchor)
            self.count += 1
            expected_seq, expected_prev = record.seq + 1, record.hash
            previous, current = current, upcoming
        assert head is not None and head.record is not None and previous is not None and previous.record is not None
        problem = self._head_problem(head, anchors)
        if problem:
            return problem
        return VerifyResult(
            True, self.count,
            message=f"{self.path}: {self.count} records, chain intact" + self._torn_note(torn),
            head_hash=previous.record.hash, torn_tail=bool(torn),
        )

    # -- helpers

    @staticmethod
    def _is_genesis(line: _Line) -> bool:
        return line.record is not None and line.hash_ok and line.record.seq == 1 and line.record.prev_hash == ZERO_HASH

    @staticmethod
    def _chains(first: _Line, second: _Line) -> bool:
        return (
            first.record is not None and second.record is not None
            and second.record.seq == first.record.seq + 1 and second.record.prev_hash == first.record.hash
        )

    def _classify(self, head, anchors, previous, current, upcoming, seq, prev) -> VerifyResult:
        record = current.record
        where = f"line {current.number} (record {record.record_id})"
        upcoming_fits = (
            upcoming is not None and upcoming.record is not None and upcoming.hash_ok
            and upcoming.record.seq == seq and upcoming.record.prev_hash == prev
        )
        if upcoming_fits:
            if current.hash_ok and record.seq > seq and not self._hash_later(current):
                return self._fail(head, anchors, current, seq, record.record_id, "reordered",
                                  f"{where} is seq {record.seq} but appears where seq {seq} belongs")
            return self._fail(head, anchors, current, seq, record.record_id, "inserted",
                              f"{where} was inserted: the next line continues the chain without it")
        if not current.hash_ok:
            return self._fail(head, anchors, current, seq, record.record_id, "edited",
                              f"{where} does not match its hash: it was edited")
        if record.seq > seq:
            if self._seq_later(current, seq, prev):
                return self._fail(head, anchors, current, seq, record.record_id, "reordered",
                                  f"{where} is seq {record.seq}; seq {seq} appears later in the file")
            missing = f"seq {seq}" if record.seq == seq + 1 else f"seq {seq}..{record.seq - 1}"
            return self._fail(head, anchors, current, seq, record.record_id, "deleted",
                              f"{missing} deleted before {where}")
        if record.seq < seq:
            return self._fail(head, anchors, current, seq, record.record_id, "inserted",
                              f"{where} repeats seq {record.seq} where seq {seq} belongs: it was inserted")
        if previous is not None and previous.record is not None:
            return self._fail(head, anchors, previous, seq - 1, previous.record.record_id, "edited",
                              f"line {previous.number} (record {previous.record.record_id}) was rewritten: its "
                              f"hash is not the prev_hash that seq {seq} recorded for it")
        return self._fail(head, anchors, current, seq, record.record_id, "edited", f"{where} breaks the chain")

    def _fail(self, head, anchors, line, seq, record_id, problem, message) -> VerifyResult:
        if head is not None and head is not line:
            explained = self._head_problem(head, anchors | self._anchors_after(line))
            if explained:
                return explained
        return VerifyResult(False, self.count, seq, record_id, problem, f"{self.path}: {message}", line.number)

    def _head_problem(self, head: _Line, anchors: set[tuple[int, str]]) -> VerifyResult | None:
        record = head.record
        if (record.seq, record.prev_hash) == (1, ZERO_HASH) or (record.seq, record.prev_hash) in anchors:
            return None
        boundary = max((kept for kept, _ in anchors if kept < record.seq), default=1)
        missing = f"seq {boundary}" if boundary == record.seq - 1 else f"seq {boundary}..{record.seq - 1}"
        return VerifyResult(
            False, self.count, boundary, record.record_id, "deleted",
            f"{self.path}: {missing} deleted before line 1 (record {record.record_id}); no compaction record "
            f"explains where the file starts",
            head.number,
        )

    def _rest(self, line: _Line) -> Iterator[_Line]:
        return _scan(self.path, line.offset + len(line.raw) + 1, line.number + 1)

    def _anchors_after(self, line: _Line) -> set[tuple[int, str]]:
        """Head explanations offered by compaction records from `line` on, even damaged ones: this only decides
        which of two breaks to report (an edited compaction record is the better answer than the head it no
        longer explains), never whether the ledger is intact."""
        anchors = set()
        for later in itertools.chain([line], self._rest(line)):
            if later.record is not None and later.record.kind == "compaction":
                anchor = _anchor_of(later.record)
                if anchor:
                    anchors.add(anchor)
        return anchors

    def _seq_later(self, line: _Line, seq: int, prev: str) -> bool:
        return any(
            later.record is not None and later.record.seq == seq and later.record.prev_hash == prev
            for later in self._rest(line)
        )

    def _hash_later(self, line: _Line) -> bool:
        return any(later.record is not None and later.record.hash == line.record.hash for later in self._rest(line))

    def _torn_tail(self) -> int:
        try:
            with open(self.path, "rb") as handle:
                end = handle.seek(0, os.SEEK_END)
                if end == 0:
                    return 0
                handle.seek(max(0, end - _BLOCK))
                data = handle.read()
        except FileNotFoundError:
            return 0
        if not data.endswith(b"\n"):
            return len(data) - data.rfind(b"\n") - 1
        last = data[data.rfind(b"\n", 0, len(data) - 1) + 1 : -1]
        try:
            json.loads(last)
        except (ValueError, UnicodeDecodeError):
            return len(last) + 1
        return 0

    @staticmethod
    def _torn_note(torn: int) -> str:
        return f"; a torn last line ({torn} bytes) left by a crash will be truncated by the next append" if torn else ""


def _anchor_of(record: Record) -> tuple[int, str] | None:
    kept, last = record.payload.get("first_kept_seq"), record.payload.get("last_removed_hash")
    if type(kept) is int and isinstance(last, str):
        return kept, last
    return None


# --- export -----------------------------------------------------------------------------------------------------


def to_langfuse_score(record: Record) -> list[dict]:
    """Langfuse score bodies for a `report` record, one per receipt (trace id): the score lands on every trace
    the feedback was about. Ids are derived from the record id and position, so re-exporting upserts."""
    if record.kind != "report":
        raise InvalidInput(f"record {record.record_id} is a '{record.kind}' record; only 'report' records carry scores")
    payload = record.payload
    score = payload.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise InvalidInput(f"report record {record.record_id} has no numeric 'score'")
    feedback = payload.get("feedback")
    if feedback is None or isinstance(feedback, str):
        comment = feedback
    else:
        comment = canonical_json(feedback).decode("utf-8")
    receipts = payload.get("receipts") or []
    if isinstance(receipts, (str, dict)):
        receipts = [receipts]
    scores = []
    for position, receipt in enumerate(receipts):
        observation = None
        if isinstance(receipt, dict):
            trace = receipt.get("trace_id") or receipt.get("traceId")
            observation = receipt.get("observation_id") or receipt.get("observationId")
        else:
            trace = receipt
        if not isinstance(trace, str) or not trace:
            raise InvalidInput(f"report record {record.record_id}: receipt {position} has no trace id")
        body: dict[str, Any] = {
            "id": f"{record.record_id}-{position}",
            "name": "reef.score",
            "value": float(score),
            "dataType": "NUMERIC",
            "comment": comment,
            "traceId": trace,
            "metadata": {
                "record_id": record.record_id,
                "scenario": record.scenario,
                "release_id": record.release_id,
                "content_id": record.content_id,
                "created_at": record.created_at,
                "seq": record.seq,
            },
        }
        if observation:
            body["observationId"] = observation
        scores.append(body)
    return scores
