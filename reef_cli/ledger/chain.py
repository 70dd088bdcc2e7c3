"""New records: validating what a caller asks to append (`_Draft`) and assembling its canonical line around the
already-encoded payload, hashing it on the way (the chain link is the previous hash and the next seq).

These are the building blocks of the flat append (`writer.Writer.append`): everything up to "prev_hash" is built
and hashed before the writer lock is taken, and kinds and ids already seen valid are not checked again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from .record import _ID_RE, _KIND_RE, _REF_RE, NewRecord, Record, _encode, _utf8

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
