"""The record format and its hash: one ledger line is the canonical JSON of a `Record`; `hash` is SHA-256 over the
record without `hash`, and `prev_hash` is the previous record's `hash` (64 zeros for the first).

Decoding is a measured fast path (`_loads`, `_decode`, `_quick_tail`): a line this package wrote is hashed from its
own bytes with the hash member cut out, so only a line in some other byte form pays for re-encoding.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..errors import InvalidInput
from ..ids import new_id

ZERO_HASH = "0" * 64

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
