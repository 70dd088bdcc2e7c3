"""Relaying a recorded stream (SSE): events forwarded as they come, the final one held back until the record is
durable and then sent with the in-band receipt (sse.py), in the same send as the stream's end.

How a stream can end, and what its record and its client get:
- the final event, then the upstream's end (or no end within AFTER_FINAL_S): recorded ok, the receipt sent;
- the client hung up: recorded `client_disconnected`, nothing more sent;
- the upstream streamed an error event and ended without a final event: recorded `upstream_error` with its
  message, the stream relayed as it came;
- the upstream stopped or broke off before the final event: recorded `timeout` (504) or `upstream_died` (502);
  while nothing but the stream's head was written (still held, answers.py) a JSON error with that status takes
  its place, else the client sees a broken stream (never a clean end);
- a response hook refused the answer: the stream as it came, with no receipt.
"""

from __future__ import annotations

import asyncio
from functools import partial

from .answers import Response, StreamResponse
from .recording import Exchange
from .keys import Decoder, KeyScreen, Undecodable, decoder_for
from .relay import failure_response, response_headers
from .sse import EventSplitter, StreamWatch
from .upstream_http import UpstreamError

AFTER_FINAL_S = 0.2
"""How long a stream's upstream may take to end its answer once the final event is in: past it the answer, complete
as far as its protocol goes, is recorded and its receipt sent (an upstream that kept the stream open held the
receipt until the read timeout, then failed a whole answer as a timeout)."""
ENDING_S = 10.0
"""How long an upstream slow to end a complete stream keeps its connection, waiting for that end, before it is
closed instead of pooled again."""


class _ClientGone(Exception):
    pass


class StreamRelay:
    """The Gateway's stream relay (a mixin: it uses the gateway's config, recorder, _record and _receipt)."""

    async def _stream(self, request, api, resp, ex: Exchange | None, extra) -> StreamResponse | None:
        decoder = None
        if self.hidden:  # keys.py: compressed although identity was asked for, it is decompressed to be screened
            try:
                decoder = decoder_for(resp.headers)
            except Undecodable as exc:
                resp.close()
                if ex is not None:
                    ex.fail("upstream_undecodable", str(exc), 502)
                    await self._record(ex)
                return failure_response(api, 502, str(exc), extra)
        out = StreamResponse(resp.status, response_headers(resp.headers, self.hidden, decoded=decoder is not None)
                             + extra)
        try:
            await out.prepare(request)
        except ConnectionError:  # the client left before the answer began
            resp.close()
            if ex is not None:
                ex.fail("client_disconnected", "the client hung up before the answer began")
                await self._record(ex)
            return None

        async def send(data: bytes, last: bool = False, hold: bool = False) -> None:
            """Write to the client; `last` ends the stream in the same write (one send fewer); `hold`: see
            StreamResponse (the end is near: these go out with it, unless it is late)."""
            try:
                if last:
                    await out.write_eof(data)
                else:
                    await out.write(data, hold)
            except (ConnectionError, RuntimeError) as exc:
                raise _ClientGone() from exc

        if ex is None:  # not recorded: a plain byte relay
            try:
                async for chunk in self._body(resp, decoder):
                    await send(chunk)
                await out.write_eof()
            except _ClientGone:
                out.cut()
            except asyncio.TimeoutError:
                return self._instead(out, api, 504, f"the upstream sent nothing for {self.config.timeout:g} s "
                                     "mid-stream", extra)
            except UpstreamError as exc:
                return self._instead(out, api, 502, f"the upstream's stream broke off ({exc})", extra)
            return out
        watch = StreamWatch(api)
        splitter = EventSplitter()
        terminal = None
        after: list[bytes] = []
        t = self.config.timeout
        ended = False  # the upstream ended the stream (within AFTER_FINAL_S of its final event, if one came)
        try:
            async for chunk in self._body(resp, decoder):
                ex.add_response(chunk)
                ready = []
                for event in splitter.feed(chunk):
                    if terminal is not None:
                        after.append(event)
                    elif watch.observe(event):
                        terminal = event
                        resp.end_within(AFTER_FINAL_S)
                    else:
                        ready.append(event)
                if watch.first_token and ex.ttft is None:
                    ex.first_token()
                if ready:
                    await send(b"".join(ready), hold=terminal is not None)
            ended = True
        except _ClientGone:
            ex.fail("client_disconnected", "the client hung up mid-stream")
        except asyncio.TimeoutError:  # after the final event: an upstream slow to end what is complete (its
            if terminal is None:  # connection waits for that end in the background, see below)
                ex.fail("timeout", f"the upstream sent nothing for {t:g} s mid-stream", 504)
        except UpstreamError as exc:
            if terminal is None:  # after the final event the answer is whole: only its framing's end is missing
                ex.fail("upstream_died", f"the upstream's stream broke off ({exc})", 502)
        if terminal is None and ex.outcome == "ok":
            if watch.error:  # the upstream streamed its own error and ended: that is what happened
                ex.fail("upstream_error", watch.error)
            else:
                ex.fail("upstream_died", "the upstream closed the stream before its final event", 502)
        ex.model = watch.model or ex.model
        if watch.usage is not None:
            ex.usage = watch.usage
        ex.upstream_meta = watch.final
        if watch.error and ex.outcome == "ok":
            ex.fail("upstream_error", watch.error)
        if ex.outcome == "ok":
            await self.recorder.inspect(ex)
        ending = None  # built before the record's sync: after it, only the send is left, made the moment the
        if terminal is not None and ex.outcome in ("ok", "upstream_error"):  # record is durable
            ending = watch.receipt(terminal, self._receipt(ex)) + b"".join(after)
        # Without a receipt the client gets the stream as it came (a refused answer; an upstream's error event and
        # its end) or, for one that broke, an error answer in its place while none of it has left: taken back now,
        # before the record's sync gives the head's hold time to run out.
        as_came = ending is None and ((terminal is not None and ex.refused) or
                                      (terminal is None and ended and ex.outcome == "upstream_error"))
        withdrawn = ending is None and not as_came and ex.outcome != "client_disconnected" and out.withdraw()
        if terminal is not None and not ended:
            resp.release_later(ENDING_S)  # pooled again if its end comes, unless more bytes do
        await self._record(ex, then=None if ending is None else partial(out.end_now, ending))
        if ex.outcome == "client_disconnected":
            resp.close()
            return out
        if withdrawn:
            status = ex.status or 502
            return failure_response(api, status, ex.error or "the stream broke off", extra)
        try:
            if ending is not None:
                await send(ending, last=True)
            elif as_came:
                await send((terminal or b"") + b"".join(after), last=True)  # no receipt
            else:
                out.cut()  # the client must see a broken stream, not a clean end
        except _ClientGone:
            pass
        return out

    def _body(self, resp, decoder: Decoder | None):
        """The answer's bytes as they arrive, decompressed if they must be and the gateway's own upstream keys
        screened out (keys.py)."""
        return _screened(resp, KeyScreen(self.hidden), decoder) if self.hidden else resp.iter_any()

    def _instead(self, out: StreamResponse, api: str, status: int, message: str, extra) -> StreamResponse | Response:
        """A stream that failed: while none of it has left (its head still held, see StreamResponse), a plain error
        answer with the status the record holds takes its place; once some has, the client must see a broken
        stream, not a clean end."""
        if out.withdraw():
            return failure_response(api, status, message, extra)
        out.cut()
        return out


async def _screened(resp, keys: KeyScreen, decoder: Decoder | None):
    async for chunk in resp.iter_any():
        for piece in decoder.feed(chunk) if decoder is not None else (chunk,):
            piece = keys.feed(piece)
            if piece:
                yield piece
    rest = keys.end()
    if rest:
        yield rest
