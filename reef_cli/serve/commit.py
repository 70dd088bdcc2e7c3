"""Making the gateway's records durable: before any receipt, without the event loop waiting on a busy disk.

Finished exchanges go to one committer thread through a queue. The thread takes everything queued while it was
busy and appends it per ledger in one write and one sync (`Ledger.append_many`; a batch of one takes the ledger's
flat `append`), so concurrent requests share syncs and the loop never blocks on flock, write or fdatasync. Each
batch wakes the loop once (`call_soon_threadsafe`), which resolves a plain loop future per record: no
`concurrent.futures` chaining per record.

One exception, measured in bench/serve_bench.py: a record whose request was alone in the gateway (no other request
in flight, nothing queued for the thread) while recent appends were fast (moving average under 1 ms) is appended on
the loop itself. There the hand-off to a thread and back costs two wake-ups, about as much as the sync itself on a
shared VM, and blocking the loop for one fast sync holds up no other request, because there is none. Once appends
turn slow (the average crosses 1 ms, e.g. a disk flushing other work), every record goes to the thread until they
are fast again; large --store-content records (redaction costs ~0.5 s/MB) always do.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Callable

from ..errors import ConflictError, InvalidInput

INLINE_BELOW_NS = 1_000_000  # appends averaging under this run on the loop when the gateway is otherwise idle
INLINE_MAX_CONTENT = 64 * 1024  # stored content above this is redacted in the thread, never on the loop

Append = Callable[[], object]  # builds the payload and appends it; returns the durable record


class Committer:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.queued = 0  # records handed to the thread and not yet resolved (loop thread only)
        self.average_ns = 0  # moving average of recent appends, inline and batched
        self.batches = 0
        self.inline = 0

    # -- on the loop ----------------------------------------------------------------------------------------------
    def may_inline(self) -> bool:
        return self.queued == 0 and self.average_ns < INLINE_BELOW_NS

    def run_inline(self, append: Callable[..., object], then: Callable[[], object] | None = None):
        """Append on the caller's thread (the loop), timing it for the average; `then` is the append's (what it
        does, sending an answer, is not the append's time)."""
        started = time.monotonic_ns()
        durable = [0]
        if then is not None:
            def timed_then() -> None:
                durable[0] = time.monotonic_ns()
                then()
        try:
            return append() if then is None else append(timed_then)
        finally:
            self._note((durable[0] or time.monotonic_ns()) - started)
            self.inline += 1

    def submit(self, ledger, make_item: Callable[[], object], append: Append) -> asyncio.Future:
        """Queue one record for the thread; the future resolves to the durable record (or its error) on the loop.
        `make_item` builds the ledger's NewRecord (in the thread); `append` is the single-record path."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.queued += 1
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="reef-ledger", daemon=True)
                    self._thread.start()
        self._queue.put((loop, fut, ledger, make_item, append))
        return fut

    def close(self) -> None:
        """Finish what is queued and stop the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _note(self, took_ns: int) -> None:
        # One sample moves the average by at most a quarter of the threshold: a lone stall (a neighbour's I/O, a
        # descheduled vCPU) no longer sends the next few calls to the thread, at two wake-ups each; appends that
        # stay slow still cross it within four.
        took_ns = min(took_ns, 2 * INLINE_BELOW_NS)
        self.average_ns = took_ns if not self.average_ns else (7 * self.average_ns + took_ns) // 8

    # -- in the thread --------------------------------------------------------------------------------------------
    def _run(self) -> None:
        q = self._queue
        while True:
            item = q.get()
            batch = []
            stop = False
            while item is not None:
                batch.append(item)
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
            else:
                stop = True
            if batch:
                self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list) -> None:
        started = time.monotonic_ns()
        results: list[tuple] = []  # (loop, future, record, error)
        by_ledger: dict[int, list] = {}
        for entry in batch:
            by_ledger.setdefault(id(entry[2]), []).append(entry)
        for entries in by_ledger.values():
            if len(entries) == 1:
                results.append(_call(entries[0]))
                continue
            items, ready = [], []
            for entry in entries:
                try:
                    items.append(entry[3]())
                    ready.append(entry)
                except BaseException as exc:  # noqa: BLE001 - handed to the handler that waits for it
                    results.append((entry[0], entry[1], None, exc))
            if not ready:
                continue
            try:
                records = entries[0][2].append_many(items)
            except (InvalidInput, ConflictError):  # one bad record must not fail the batch: append one by one
                results.extend(_call(entry) for entry in ready)
            except BaseException as exc:  # noqa: BLE001 - the ledger failed (a sync, a write): no record of the
                # batch may be acknowledged, and appending them again would sync over what may not be on disk
                results.extend((entry[0], entry[1], None, exc) for entry in ready)
            else:
                results.extend((entry[0], entry[1], record, None) for entry, record in zip(ready, records))
        took = time.monotonic_ns() - started
        by_loop: dict[int, list] = {}
        for result in results:
            by_loop.setdefault(id(result[0]), []).append(result)
        for done in by_loop.values():
            try:
                done[0][0].call_soon_threadsafe(self._resolve, done, took if len(batch) == 1 else 0)
            except RuntimeError:  # the loop is closed: nobody waits for these any more
                pass

    def _resolve(self, done: list, took_ns: int) -> None:
        if took_ns:  # a batch of one: what an inline append would have cost the loop
            self._note(took_ns)
        self.batches += 1
        self.queued -= len(done)
        for _loop, fut, record, exc in done:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(record)


def _call(entry: tuple) -> tuple:
    loop, fut, _ledger, _make, append = entry
    try:
        return loop, fut, append(), None
    except BaseException as exc:  # noqa: BLE001 - handed to the handler that waits for it
        return loop, fut, None, exc
