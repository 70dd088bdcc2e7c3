"""The id index: `<ledger>.idx` holds "record_id offset" lines under a header naming the ledger's inode. It is a
cache, never synced, and written only when a lookup needs it (`get()`, or an append with a client-supplied id): it
is caught up from its last entry, or rebuilt when torn, stale or wrong.

A lookup of a few ids reads the index backwards (a receipt being reported on is near the end). A lookup that must
look everywhere — an id the ledger does not hold, or many ids at once, as every batch of `reef ingest` asks —
loads the index once into memory (~100 bytes per record) and from then on reads only the entries appended since,
so a long-running writer's duplicate check costs the batch, not the ledger's size."""

from __future__ import annotations

import os

from ..durable import open_state
from ..errors import StoreError
from .reading import _line_number, _lines, _read_line_at
from .record import _ID_KEY, _ID_RE, Record, _decode


class _BadIndex(ValueError):
    pass


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


_FEW_IDS = 8  # up to this many ids are first searched for backwards; more, or one not found, load the map


class IdIndex:
    """The index half of `Ledger` (a mixin over the writer's descriptors; every method runs under the writer lock)."""

    _idmap: dict[bytes, bytes] | None = None  # the index in memory (id -> offset digits), once a lookup needed it
    _idmap_end = 0  # the index file's size it covers
    _idmap_ino = 0  # the ledger inode its offsets point into
    _idmap_last = b""  # the last entry it read, which must still end at _idmap_end (else the index was rebuilt)

    def _index_header(self) -> bytes:
        return b"reef-ledger-idx 1 %d\n" % self._ino

    def _catch_up_index(self) -> None:
        """Make the index cover every record: index what was appended since its last entry, or rebuild it when its
        header names another file or its last entry does not point at that record."""
        if self._idx_fd < 0:
            self._idx_fd = open_state(self.index_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
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
        self._idmap = None
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
            offsets = self._offsets(ids)
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
            self._idmap = None
            if rebuilt:
                raise StoreError(f"{self.index_path} disagrees with {self.path} even after a rebuild")
            self._rebuild_index()
            return self._lookup(ids, rebuilt=True)
        return found

    def _offsets(self, ids: set[str]) -> dict[str, int]:
        """Offsets of those of `ids` the (caught-up) index holds."""
        if self._idmap is None or self._idmap_ino != self._ino:
            if len(ids) <= _FEW_IDS:
                found = _search_index(self._idx_fd, ids)
                if len(found) == len(ids):
                    return found  # all recent: the backward search read a block or two
            self._idmap, self._idmap_end, self._idmap_ino = {}, len(self._index_header()), self._ino
            self._idmap_last = b""
        self._extend_idmap()
        out = {}
        for rid in ids:
            digits = self._idmap.get(rid.encode("ascii"))
            if digits is not None:
                if not digits.isdigit():
                    raise _BadIndex(f"index entry for {rid} has no offset")
                out[rid] = int(digits)
        return out

    def _extend_idmap(self) -> None:
        """Add the index entries written since the map last read it (by this writer or another process)."""
        size = os.fstat(self._idx_fd).st_size
        if size < self._idmap_end:
            raise _BadIndex("the index shrank under the map")  # rebuilt by another process: start again
        last = self._idmap_last
        if last and os.pread(self._idx_fd, len(last), self._idmap_end - len(last)) != last:
            # Rebuilt by another process (the ledger was cut back in place, say) and grown past the map's end since:
            # reading on from there would start mid-entry and miss every entry before it.
            raise _BadIndex("the index was rebuilt under the map")
        chunks = []
        position = self._idmap_end
        while position < size:
            chunk = os.pread(self._idx_fd, min(size - position, 1 << 24), position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
        data = b"".join(chunks)
        data = data[: data.rfind(b"\n") + 1]  # whole entries only
        try:
            self._idmap.update(line.split(b" ", 1) for line in data.splitlines())
        except ValueError:
            raise _BadIndex("an index entry has no offset") from None
        self._idmap_end += len(data)
        if data:
            self._idmap_last = data[data.rfind(b"\n", 0, len(data) - 1) + 1 :]
