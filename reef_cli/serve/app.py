"""The gateway's HTTP side: routes, auth, body cap, one log line per request, and a bounded drain on SIGTERM.

Model routes relay to the upstream and record (see recording.py); reef routes read the store and take reports
with the same rules as `reef report`. Every failure a client can cause or meet has one status and one sentence:
401 bad or missing token, 404 unknown scenario or a protocol the upstream does not speak, 413 body over the cap,
502 upstream unreachable or gone, 504 upstream too slow.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..errors import ConflictError, DamagedState, InvalidInput, NotFound, PolicyError, ReefError, StoreError
from ..times import format_ms
from .auth import TokenFile, check_bind, presented_token
from .keys import Undecodable, client_keys, decoder_for, screen
from .http_server import BodyTooLarge, HttpServer, Request, Response, StreamResponse
from .recording import Exchange, Recorder
from .reef_routes import ReefRoutes
from .relay import (RECORDED, ROUTE_API, Upstream, error_body, failure_response, json_response as _json_response,
                    response_headers)
from .streams import StreamRelay
from .upstream_http import AnswerTooLarge, UpstreamClient, UpstreamError

SESSION_PREFIX = "/session/"  # /session/ID/v1/...: for agents that can set a base URL but no header
MAX_TAGS = 32
# A non-streamed answer is held whole (its usage is read and its digest recorded before the receipt): an upstream
# that sends without end must not take the gateway's memory with it. Model answers are KiB to a few MiB.
MAX_ANSWER = 256 * 2**20
TAG_MAX_CHARS = 256


@dataclass(frozen=True)
class ServeConfig:
    project: object  # reef_cli.project.Project
    scenario: str
    upstream: str
    upstream_api: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8900
    token_file: Path | None = None
    inject: str = "none"
    store_content: bool = False
    pass_client_key: bool = False
    json_logs: bool = False
    timeout: float = 300.0
    max_body: int = 32 * 1024 * 1024
    drain_timeout: float = 10.0
    loop: str = "auto"  # auto (uvloop where installed) | uvloop | asyncio
    low_latency: bool = False  # hold the CPUs' wake-up latency at 0 while serving (cpu_latency.py)


class Gateway(StreamRelay, ReefRoutes):
    """The gateway: routes, auth, the model routes' relay and record (streams: streams.py; reef's own routes:
    reef_routes.py), the run and its drain."""

    def __init__(self, config: ServeConfig, environ: dict, *, log=None, out=None):
        if config.inject not in ("system", "none"):
            raise InvalidInput(f"--inject {config.inject}: expected system or none")
        # Checked before binding: the socket layer answers an out-of-range port with an OverflowError.
        if not 0 <= config.port <= 65535:
            raise InvalidInput(f"--port {config.port}: expected 0-65535 (0 picks a free port)")
        if config.max_body <= 0:
            raise InvalidInput(f"--max-body {config.max_body}: expected a positive number of bytes")
        if not config.timeout > 0:
            raise InvalidInput(f"--timeout {config.timeout}: expected a positive number of seconds")
        if not config.drain_timeout >= 0:
            raise InvalidInput(f"--drain-timeout {config.drain_timeout}: expected zero or more seconds")
        if config.loop not in ("auto", "uvloop", "asyncio"):
            raise InvalidInput(f"--loop {config.loop}: expected auto, uvloop or asyncio")
        self.config = config
        self.tokens = TokenFile(config.token_file, lambda line: self._note(line)) if config.token_file else None
        check_bind(config.host, self.tokens.tokens if self.tokens is not None else None)
        self.upstream = Upstream.parse(config.upstream, "openai" if config.upstream_api == "sglang"
                                       else config.upstream_api, environ)
        self.hidden = self.upstream.hidden(config.pass_client_key)  # keys no answer may carry back (relay.py)
        self.executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="reef-ledger")
        self.recorder = Recorder(config.project, config.scenario, store_content=config.store_content,
                                 executor=self.executor)
        self.recorder.scenario(None)  # fail at start, not on the first request, when the scenario is missing
        self.recorder.scenario(None).release()
        cut = self.recorder.scenario(None).ledger.acknowledged_cut()
        if cut is not None:  # every record would be refused: say so now, not as a 503 on each call
            raise DamagedState(cut[1])
        if config.upstream_api == "sglang":
            from .provenance import SGLangProvenance

            SGLangProvenance(self.upstream.base, self.executor).install(self.recorder)
        self.log = log or sys.stderr
        self.out = out or sys.stdout
        self.client: UpstreamClient | None = None
        self.in_flight: set[asyncio.Task] = set()
        self.targets: dict = {}
        self.started = time.time()
        self.url = ""
        self.cpu_hold = None  # cpu_latency.Hold under --low-latency, while running
        # path -> (methods, handler); GET routes answer HEAD too, as aiohttp's router did
        self.routes: dict = {path: (("GET", "HEAD") if api == "openai.models" else ("POST",), self._model_route)
                             for path, api in ROUTE_API.items()}
        self.routes.update({"/reef/report": (("POST",), self._report),
                            "/reef/releases": (("GET", "HEAD"), self._releases),
                            "/reef/status": (("GET", "HEAD"), self._status),
                            "/healthz": (("GET", "HEAD"), self._healthz)})

    # -- the server --------------------------------------------------------------------------------------------
    def server(self) -> HttpServer:
        """The HTTP/1.1 server (http_server.py says why not aiohttp's) with the gateway's route table."""
        return HttpServer(self._dispatch, max_body=self.config.max_body,
                          error=lambda status, message: _json_response(
                              error_body("reef", status, message, "invalid_request_error"), status),
                          access=self._log, note=lambda text: self._note(_shown(text)))

    async def _dispatch(self, request: Request) -> Response | StreamResponse:
        """Route, auth and error translation (the log line is written by the server once the response is out)."""
        path, session = request.route = _split_session(request.path)
        api = ROUTE_API.get(path, "reef")
        if self.tokens is not None and request.path != "/healthz":
            if not self.tokens.current().accepts(presented_token(request.headers, self.config.pass_client_key)):
                missing = presented_token(request.headers, self.config.pass_client_key) is None
                how = "x-reef-token" if self.config.pass_client_key else "Authorization: Bearer TOKEN or x-api-key"
                msg = (f"no reef token: send {how}" if missing else "the reef token is not valid for this gateway")
                return _json_response(error_body(api, 401, msg, "authentication_error"), 401)
        route = self.routes.get(path) if session is None or path in ROUTE_API else None
        if route is None:
            return _json_response(error_body(api, 404, "Not Found", "invalid_request_error"), 404)
        methods, handler = route
        if request.method not in methods:
            return _json_response(error_body(api, 405, "Method Not Allowed", "invalid_request_error"), 405,
                                  headers={"Allow": ",".join(methods)})
        if "Expect" in request.headers:
            refused = await self._expect(request, api)
            if refused is not None:
                return refused
        try:
            task = asyncio.current_task(request.conn.loop)  # given the loop: Python 3.11 asks getpid() otherwise
            self.in_flight.add(task)
            try:
                resp = await handler(request)
            finally:
                self.in_flight.discard(task)
        except BodyTooLarge:
            resp = self._too_large(api)
        except ReefError as exc:
            status = (404 if isinstance(exc, NotFound) else 409 if isinstance(exc, ConflictError)
                      else 400 if isinstance(exc, (InvalidInput, PolicyError))
                      else 503 if isinstance(exc, StoreError) else 500)  # 503: this call's record could not be kept
            resp = _json_response(error_body(api, status, str(exc), "invalid_request_error" if status == 400
                                             else "not_found_error" if status == 404 else "api_error"), status)
        return resp

    async def _expect(self, request: Request, api: str) -> Response | None:
        """`Expect: 100-continue` (curl sends it before a large body and waits up to a second): invite the body once
        auth and route passed, unless its declared length is over the cap (then the 413 comes at once)."""
        if not request.http11:
            return None
        expect = request.headers["Expect"]
        if expect.lower() != "100-continue":
            return _json_response(error_body(api, 417, f"unknown Expect: {expect[:100]}", "invalid_request_error"), 417)
        length = request.content_length
        if length is not None and length > self.config.max_body:
            return self._too_large(api)
        request.send_continue()
        return None

    def _too_large(self, api: str) -> Response:
        cap = self.config.max_body
        return _json_response(error_body(api, 413, f"request body is over the gateway's cap of {cap} bytes "
                                         "(reef serve --max-body)", "request_too_large"), 413)

    def _log(self, request: Request, resp) -> None:
        """The request's log line, written once the response has gone out (None: the client hung up first)."""
        ms = (time.perf_counter() - request.t0) * 1000
        rid = resp.header("x-reef-agent-record-id") if resp is not None else None
        ex = request.exchange
        lost = ex is not None and ex.record is None  # its receipt's record was never kept (a failed sync)
        if lost:
            rid = None
        status = resp.status if resp is not None else 0
        path = request.path if request.path in self.routes else _shown(request.path)
        if self.config.json_logs:
            line = json.dumps({"t": format_ms(int(time.time() * 1000)), "method": request.method, "path": path,
                               "status": status, "ms": round(ms, 3), "record_id": rid, "recorded": not lost,
                               "release_id": resp.header("x-reef-release-id") if resp is not None else None},
                              sort_keys=True)
        else:
            line = f"reef: {request.method} {path} {status} {ms:.1f}ms" + (f" {rid}" if rid else "") + \
                (" (no record kept)" if lost else "")
        try:
            self.log.write(line + "\n")
            self.log.flush()
        except (OSError, ValueError):
            pass

    # -- model routes -----------------------------------------------------------------------------------------
    async def _model_route(self, request: Request) -> Response | StreamResponse:
        path, session = request.route
        api = ROUTE_API[path]
        if not self.upstream.speaks(api):
            return _json_response(error_body(api, 404, f"this gateway's upstream speaks {self.upstream.api} only "
                                             f"(--upstream-api {self.upstream.api}); {path} is not relayed",
                                             "not_found_error"), 404)
        length = request.content_length
        if length is not None and length > self.config.max_body:
            return self._too_large(api)
        started = time.perf_counter()
        body = await request.read() if request.method == "POST" else b""
        headers = request.headers
        capture = api in RECORDED and headers.get("x-reef-capture", "").strip().lower() not in ("false", "0", "no")
        state = self.recorder.scenario(headers.get("x-reef-scenario"))
        if capture and (state.ledger.sync_failure is not None or state.damaged is not None
                        or state.misplaced is not None) and state.refusal() is not None:
            return self._unrecordable(api, state)  # nothing more can be recorded: no upstream call
        release = state.release()  # frozen here: a publish during the request does not re-attribute it
        target = self._target(path, request.raw_path)
        extra = [("x-reef-release-id", release.release_id)]
        edits = bool(body) and ((self.config.inject == "system" and api != "openai.models")
                                or (capture and bool(self.recorder.request_hooks)))
        ex = None
        call = None
        try:
            if edits:  # the body may change: describe and edit it, then send it
                parsed = _parse(body)
                if capture:
                    ex = self._begin(state, release, api, path, started, headers, parsed, session)
                body = await self._edit(state, release, api, ex, parsed, body)
                if ex is not None:
                    self.recorder.describe_request(ex, body)
                call = self._send(request, target, headers, api, body)
            else:
                # The body goes upstream as it came, so it goes first (written on this loop turn when a pooled
                # connection is free); describing it (parse, record id, digests, ~0.15 ms on a small VM) then
                # overlaps the upstream's work instead of adding to the latency.
                call = self._send(request, target, headers, api, body)
                if capture:
                    ex = self._begin(state, release, api, path, started, headers, _parse(body) if body else None,
                                     session)
                    self.recorder.describe_request(ex, body)
        except BaseException as exc:
            if call is not None:
                call.cancel()
                if ex is not None and isinstance(exc, asyncio.CancelledError):
                    ex.fail("interrupted", "the gateway stopped before the exchange finished")
                    await self._record(ex)
            raise
        if ex is None:
            return await self._relay(request, api, target, headers, body, None, extra, call)
        request.exchange = ex
        extra.append(("x-reef-agent-record-id", ex.record_id))
        try:
            return await self._relay(request, api, target, headers, body, ex, extra, call)
        except asyncio.CancelledError:
            ex.fail("interrupted", "the gateway stopped before the exchange finished")
            await self._record(ex)
            raise
        except Exception as exc:
            ex.fail("gateway_error", f"{type(exc).__name__} in the gateway")
            await self._record(ex)
            raise

    @staticmethod
    def _unrecordable(api: str, state) -> Response:
        return _json_response(error_body(api, 503, f"the gateway cannot record this call: {state.refusal()}",
                                         "api_error"), 503)

    def _begin(self, state, release, api, path, started, headers, parsed, session) -> Exchange:
        ex = self.recorder.begin(state, release, api, path, started)
        _describe(ex, headers, parsed, session)
        if self.config.pass_client_key and self.config.store_content:
            ex.private = client_keys(headers)  # the client's own key stays out of the stored text (keys.py)
        return ex

    async def _edit(self, state, release, api, ex: Exchange | None, parsed: dict | None, body: bytes) -> bytes:
        """The body to send: with --inject system, the release's instructions prepended; request hooks applied."""
        changed = False
        if parsed is not None and self.config.inject == "system" and api != "openai.models":
            text, problem = await self.recorder.instructions(state, release.content_id, release)
            if problem and ex is not None:
                ex.injected = {"mode": "system", "release_id": release.release_id, "error": problem}
            if text:
                from .inject import inject

                if inject(api, parsed, text):
                    changed = True
                    if ex is not None:
                        ex.injected = {"mode": "system", "release_id": release.release_id, "chars": len(text),
                                       "digest": "sha256:" + hashlib.sha256(text.encode()).hexdigest()}
        if parsed is not None and ex is not None and self.recorder.request_hooks:
            changed = self.recorder.apply_request_hooks(ex, parsed) or changed
        return json.dumps(parsed, ensure_ascii=False).encode("utf-8") if changed else body

    def _send(self, request: Request, target: str, headers, api: str, body: bytes):
        """The upstream call, started now (its answer is awaited in _relay)."""
        up_headers = self.upstream.request_headers(headers, api, self.config.pass_client_key)
        return self.client.start(request.method, target, up_headers, body)

    def _target(self, path: str, raw_path: str) -> str:
        """The upstream request target (path and query as the client sent the query), built once per route for
        calls without a query string (most calls)."""
        query = raw_path.partition("?")[2]
        if not query:
            target = self.targets.get(path)
            if target is None:
                target = self.targets[path] = self.upstream.target_for(path, "")
            return target
        return self.upstream.target_for(path, query)

    async def _record(self, ex: Exchange, then=None):
        return await self.recorder.finish(ex, alone=len(self.in_flight) <= 1, then=then)

    def _receipt(self, ex: Exchange) -> dict:
        return {"agent_record_id": ex.record_id, "release_id": ex.release_id, "content_id": ex.content_id,
                "scenario": ex.scenario}

    async def _relay(self, request, api, target, headers, body, ex: Exchange | None, extra,
                     call) -> Response | StreamResponse:
        t = self.config.timeout
        try:
            resp = await call
        except asyncio.CancelledError:
            call.cancel()
            raise
        except asyncio.TimeoutError:
            call.cancel()
            return await self._failed(api, ex, extra, 504, "timeout",
                                      f"the upstream did not answer within {t:g} s")
        except UpstreamError as exc:
            call.cancel()
            return await self._failed(api, ex, extra, 502, "unreachable",
                                      f"the upstream {self.upstream.shown()} is unreachable ({exc})")
        try:
            if ex is not None:
                ex.status = resp.status
            if resp.status < 400 and "text/event-stream" in resp.headers.get("Content-Type", ""):
                return await self._stream(request, api, resp, ex, extra)
            try:
                data = await resp.read(MAX_ANSWER)
            except AnswerTooLarge:
                return await self._failed(api, ex, extra, 502, "upstream_too_large",
                                          f"the upstream's answer is over {MAX_ANSWER // 2**20} MiB, the most the "
                                          "gateway holds whole (a streamed answer has no such limit)")
            except asyncio.TimeoutError:
                return await self._failed(api, ex, extra, 504, "timeout",
                                          f"the upstream stopped sending its answer for {t:g} s")
            except UpstreamError as exc:
                return await self._failed(api, ex, extra, 502, "upstream_died",
                                          f"the upstream's answer was cut off ({exc})")
            decoder = None
            if self.hidden:  # keys.py: the gateway's own key never goes back, even from an upstream that echoes it
                try:
                    decoder = decoder_for(resp.headers)
                    data = screen(decoder.whole(data, MAX_ANSWER) if decoder else data, self.hidden)
                except Undecodable as exc:
                    return await self._failed(api, ex, extra, 502, "upstream_undecodable", str(exc))
            out_headers = response_headers(resp.headers, self.hidden, decoded=decoder is not None) + extra
            if ex is None:  # a HEAD's answer keeps the upstream's length (relayed headers drop Content-Length)
                length = resp.headers.get("Content-Length") if request.method == "HEAD" else None
                return Response(data, resp.status, out_headers, head_length=length)
            ex.add_response(data)
            ex.first_token()
            if resp.status >= 400:
                ex.fail("upstream_error", f"the upstream answered {resp.status}")
            else:
                _read_answer(ex, data)
                await self.recorder.inspect(ex)
                if ex.refused and ex.retryable and not ex.retries:
                    ex.reset_for_retry()
                    resp.release()
                    return await self._relay(request, api, target, headers, body, ex, extra,
                                             self._send(request, target, headers, api, body))
            transport = request.transport
            if transport is None or transport.is_closing():
                ex.fail("client_disconnected", "the client hung up before the answer came")
            if ex.refused:
                ex.status = 409  # what the client got; the upstream's status was 2xx
                await self._record(ex)
                return _json_response(error_body(api, 409, f"the upstream's answer was refused: {ex.refused}",
                                                 "api_error"), 409, headers=extra)
            out = Response(data, resp.status, out_headers)
            out.render(request)  # ready before the record's sync: after it, only the send is left,
            await self._record(ex, then=partial(out.send_now, request))  # made the moment the record is durable
            return out
        finally:
            resp.release()

    async def _failed(self, api, ex, extra, status, outcome, message) -> Response:
        if ex is not None:
            ex.fail(outcome, message, status)
            await self._record(ex)
        return failure_response(api, status, message, extra)

    # -- running ----------------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event | None = None, on_ready=None) -> int:
        """Serve until `stop` is set (SIGTERM / SIGINT when not given); then stop accepting, drain in-flight
        requests for up to drain_timeout, record the ones cut short, and verify the ledgers used."""
        loop = asyncio.get_running_loop()
        own_stop = stop is None
        stop = stop or asyncio.Event()
        if own_stop:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        # One pool of keep-alive upstream connections for every call (upstream_http.py says why not aiohttp's
        # ClientSession). It keeps no cookies: a Set-Cookie from the upstream reaches the client that got it only.
        self.client = UpstreamClient(self.upstream.base, connect_timeout=min(self.config.timeout, 30.0),
                                     read_timeout=self.config.timeout)
        server = self.server()
        try:
            host, port = (await server.start(self.config.host, self.config.port))[:2]
        except OSError as exc:
            self.client.close()
            raise ReefError(f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror}") from None
        if self.config.low_latency:
            from . import cpu_latency

            self.cpu_hold = cpu_latency.hold()
            if not self.cpu_hold.held:
                self._note(f"--low-latency not in effect: {self.cpu_hold.why}; serving without it")
        try:
            return await self._serve(server, host, port, stop, loop, on_ready)
        finally:
            if self.cpu_hold is not None:
                self.cpu_hold.release()

    async def _serve(self, server, host, port, stop: asyncio.Event, loop, on_ready) -> int:
        shown_host = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown_host}:{port}"
        release = self.recorder.scenario(None).release()
        if self.config.json_logs:
            self.out.write(json.dumps({"event": "listening", "url": self.url, "upstream": self.upstream.shown(),
                                       "scenario": self.config.scenario, "release_id": release.release_id,
                                       "low_latency": self._low_latency()}) + "\n")
        else:
            held = ", idle CPUs kept polling (--low-latency)" if self._low_latency() else ""
            self.out.write(f"reef: serving {self.url} -> {self.upstream.shown()} (scenario {self.config.scenario}, "
                           f"release {release.release_id}{held}); SIGTERM or Ctrl-C stops it\n")
        self.out.flush()
        if on_ready is not None:
            on_ready(self.url)
        await stop.wait()
        server.stop_accepting()
        pending = set(self.in_flight)
        if pending:
            self._note(f"draining {len(pending)} request(s) for up to {self.config.drain_timeout:g} s")
            _done, late = await asyncio.wait(pending, timeout=self.config.drain_timeout)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=5.0)
        await server.close()
        self.client.close()
        await loop.run_in_executor(None, self.executor.shutdown, True)
        return self._verify()

    def _low_latency(self) -> bool:
        return self.cpu_hold is not None and self.cpu_hold.held

    def _verify(self) -> int:
        code = 0
        for line in self._failed_ledgers():
            self._note(f"stopped; {line}")
            code = 1
        for name, state in sorted(self.recorder.scenarios.items()):
            result = state.ledger.verify_since(state.start, state.last)  # big: only what came after the start
            if result.ok and result.since_seq is not None:
                self._note(f"stopped; ledger of scenario '{name}' verified: the {result.count} records after record "
                           f"{result.since_seq} chain onto it (the older ones: reef ledger verify)")
            elif result.ok:
                self._note(f"stopped; ledger of scenario '{name}' verified ({result.count} records)")
            else:
                self._note(f"stopped; ledger of scenario '{name}' FAILED verification: {result.message}")
                code = 1
        self.recorder.close()
        return code

    def _note(self, message: str) -> None:
        if self.config.json_logs:
            line = json.dumps({"event": "note", "message": message})
        else:
            line = f"reef: {message}"
        self.log.write(line + "\n")
        self.log.flush()


def _split_session(path: str) -> tuple[str, str | None]:
    """(the route without a /session/ID prefix, the ID or None); an ID is one non-empty path segment."""
    if not path.startswith(SESSION_PREFIX):
        return path, None
    session, slash, rest = path[len(SESSION_PREFIX):].partition("/")
    if not session or not slash or "{" in session or "}" in session:
        return path, None
    return "/" + rest, session


def _shown(text: str) -> str:
    """Text from a request as the log shows it: redacted (an agent that put its key where the /session/ID goes, in a
    path by mistake or in a malformed header must not find it in the log) and with control characters escaped (a path
    is percent-decoded: %1b would write a terminal escape into the log)."""
    from ..redact import redact_text

    shown = redact_text(text)
    from ..printable import printable

    return printable(shown)


def _parse(body: bytes) -> dict | None:
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past the stack: relayed as it came, undescribed
        return None
    return parsed if isinstance(parsed, dict) else None


def _describe(ex: Exchange, headers, parsed: dict | None, path_session: str | None = None) -> None:
    tags = {}
    for name, value in headers.items():
        if name[:11].lower() == "x-reef-tag-" and len(tags) < MAX_TAGS:
            tags[name[11:]] = value[:TAG_MAX_CHARS]  # the name as sent until redacted: AKIA..., AIza... lowercased
    session = headers.get("x-reef-session") or path_session  # are no longer those keys' shapes
    if tags or session:
        from ..redact import redact_obj

        shown, _ = redact_obj(tags)  # names too: a token sent as a tag's name is stored redacted
        tags = {key.lower() if key in tags else key: value for key, value in shown.items()}  # a name redaction
        session = redact_obj(session[:TAG_MAX_CHARS])[0] if session else None  # changed keeps its marker's case
    ex.tags, ex.session = tags, session
    if parsed is not None:
        model = parsed.get("model")
        ex.model = model if isinstance(model, str) else None
        ex.stream = parsed.get("stream") is True


def _read_answer(ex: Exchange, data: bytes) -> None:
    try:
        obj = json.loads(data)
    except ValueError:
        return
    if not isinstance(obj, dict):
        return
    ex.upstream_meta = obj
    if isinstance(obj.get("model"), str):
        ex.model = obj["model"]
    usage = obj.get("usage")
    if isinstance(usage, dict):
        ex.usage = usage


def serve(config: ServeConfig, environ: dict) -> int:
    """Run the gateway in the foreground until SIGTERM or Ctrl-C; the exit code says whether the ledgers verified."""
    gateway = Gateway(config, environ)
    try:
        with asyncio.Runner(loop_factory=loop_factory(config.loop)) as runner:
            return runner.run(gateway.run())
    except KeyboardInterrupt:
        return 130


def loop_factory(kind: str):
    """The event loop to serve on. uvloop (libuv, in C) where installed: bench/serve_bench.py measured 7-9% less
    CPU per call and ~0.1 ms less added latency than asyncio's own loop; asyncio elsewhere or when asked."""
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise InvalidInput("--loop uvloop: uvloop is not installed (pip install uvloop; Linux and macOS)") from None
        return None
    return uvloop.new_event_loop
