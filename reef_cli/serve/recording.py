"""One ledger record per model exchange, durable before any receipt leaves the gateway.

An `Exchange` is created when a request arrives: it freezes the scenario's current release then (a publish during
the request does not re-attribute it) and reserves the record id. Whatever happens next (an answer, an upstream
error, a timeout, an unreachable upstream, a client that hangs up, a shutdown) ends in exactly one `finish()`,
which appends the record through the scenario's shared `Ledger` (commit.py: one committer thread that writes and
syncs whatever is queued as one batch, so concurrent requests share syncs; a lone request's fast append runs on the
loop, where it holds up no one).

The provenance seam: before a record is written, every hook in `Recorder.response_hooks` is called with the
exchange. A hook reads what the upstream said about itself (`exchange.upstream_meta`: the parsed non-streaming
body, or the stream's terminal event) and may add fields under `exchange.provenance` (or top-level payload fields
in `exchange.extra`, e.g. the weight_version and training data `reef_cli.weights.records` reads) or refuse it with
`exchange.refuse(reason)`; a refused non-streaming answer becomes a 409 for the client and a failed record, a
refused stream gets no in-band receipt. `Recorder.request_hooks` may edit the parsed request body before it goes
upstream (e.g. ask an engine for its meta info); the record notes each hook that changed it. A hook that refuses
with `exchange.retryable = True` gets one fresh upstream call for a non-streaming answer (the record lists the
refusal under `retried`); a stream cannot be retried once its tokens went out.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import DamagedState, InvalidInput, MisplacedState, NotFound
from ..ledger import NewRecord
from .commit import INLINE_MAX_CONTENT, Committer
from .keys import screen
from .sse import tokens_of

RECORD_KIND = "inference"  # as the reference names a model exchange; `reef run`'s records are "interaction"
RequestHook = Callable[["Exchange", dict], bool]
ResponseHook = Callable[["Exchange"], None]


@dataclass
class Exchange:
    """What the gateway knows about one model call; turned into the record payload by `payload()`."""

    record_id: str
    scenario: str
    release_id: str
    content_id: str
    api: str
    route: str
    started: float  # perf_counter at arrival
    tags: dict = field(default_factory=dict)
    session: str | None = None
    stream: bool = False
    model: str | None = None
    request: dict = field(default_factory=dict)  # digest/length
    request_body: bytes | None = None  # kept for --store-content, redacted off the event loop
    response_sha: object = field(default_factory=hashlib.sha256)
    response_len: int = 0
    response_text: bytearray | None = None
    status: int | None = None
    usage: dict | None = None
    ttft: float | None = None
    outcome: str = "ok"
    error: str | None = None
    injected: dict | None = None
    upstream_meta: dict | None = None
    provenance: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # top-level payload fields a hook adds (weight_version, training)
    refused: str | None = None
    runtime_load_id: str | None = None  # the frozen release's weight version (None: not a weight release)
    retryable: bool = False  # a hook's refusal that one fresh upstream call may cure (a weight swap mid-request)
    retries: list = field(default_factory=list)  # the refusals that were retried
    hooks_applied: list = field(default_factory=list)
    ended: float | None = None
    record: object = None  # the durable ledger record, once finish() has written it
    pending: object = None  # the append in flight (a handler cancelled while waiting for it must not append again)
    training_context: dict | None = None  # the request's fields besides the messages, which token ids also encode
    append_error: BaseException | None = None  # the append failed (a sync that failed): not tried again
    private: tuple = ()  # keys screened out of the stored text (the client's own, with --pass-client-key)

    def add_response(self, data: bytes) -> None:
        self.response_sha.update(data)
        self.response_len += len(data)
        if self.response_text is not None and len(self.response_text) < 16 * 1024 * 1024:
            self.response_text += data

    def content_size(self) -> int:
        """Bytes of stored content this exchange's record would redact (0 without --store-content and without a
        prompt kept for training)."""
        return (len(self.response_text) if self.response_text is not None else 0) + \
            (len(self.request_body) if self.request_body is not None else 0) + \
            (self.request.get("length", 0) + self.response_len if "prompt" in self.extra else 0)

    def first_token(self) -> None:
        if self.ttft is None:
            self.ttft = time.perf_counter() - self.started

    def fail(self, outcome: str, error: str, status: int | None = None) -> None:
        """Mark the exchange failed; the first failure wins (a disconnect after a timeout stays a timeout)."""
        if self.outcome == "ok":
            self.outcome, self.error = outcome, error
            if status is not None:
                self.status = status

    def refuse(self, reason: str) -> None:
        """A response hook's verdict: this answer must not get a receipt as a good one."""
        self.refused = reason
        self.fail("refused", reason)

    def reset_for_retry(self) -> None:
        """Forget the refused answer before the one retry: the record describes the answer the client got."""
        self.retries.append(self.refused)
        self.response_sha, self.response_len = hashlib.sha256(), 0
        if self.response_text is not None:
            self.response_text = bytearray()
        self.status = self.usage = self.error = self.refused = self.upstream_meta = None
        self.outcome, self.retryable, self.ttft = "ok", False, None
        self.provenance = {}

    def payload(self, store_content: bool) -> dict:
        """The record's payload. Redacting stored text costs ~0.5 s/MB: the recorder calls this in a worker thread."""
        inp, out = tokens_of(self.usage)
        response = {"digest": "sha256:" + self.response_sha.hexdigest(), "length": self.response_len}
        request = dict(self.request)
        if store_content:
            from ..redact import redact

            if self.response_text is not None:
                text = screen(bytes(self.response_text), self.private)
                response["text"] = redact(text.decode("utf-8", "replace"))[0]
            if self.request_body is not None:
                request["text"] = redact(screen(self.request_body, self.private).decode("utf-8", "replace"))[0]
        ended = self.ended if self.ended is not None else time.perf_counter()
        p = {
            "source": "serve",
            "api": self.api,
            "route": self.route,
            "model": self.model,
            "stream": self.stream,
            "status": self.status,
            "outcome": self.outcome,
            "error": self.error,
            "usage": self.usage,
            "tokens": {"input": inp, "output": out},
            "latency_ms": round((ended - self.started) * 1000, 3),
            "ttft_ms": None if self.ttft is None else round(self.ttft * 1000, 3),
            "tags": self.tags,
            "session": self.session,
            "request": request,
            "response": response,
        }
        p["duration_s"] = round(p["latency_ms"] / 1000, 6)
        if self.injected:
            p["injected"] = self.injected
        if self.provenance:
            p["provenance"] = self.provenance
        if self.hooks_applied:
            p["request_hooks"] = self.hooks_applied
        if self.retries:
            p["retried"] = list(self.retries)
        if self.extra:
            p.update(self.extra)
            if "prompt" in p or "training" in p:
                _redact_training(p, self.upstream_meta, self.training_context)
        return p


def _redact_training(p: dict, answer, context=None) -> None:
    """The weights path keeps the client's messages (`prompt`) and the call's token ids (`training`) without
    --store-content: the messages are redacted like stored content, and when a secret was found in them or in the
    answer, the token ids (which decode back to the text) are not kept at all."""
    from ..redact import redact_obj

    found = 0
    if "prompt" in p:
        try:
            p["prompt"], found = redact_obj(_data_urls_digested(p["prompt"]))
        except RecursionError:  # messages nested past the stack: neither they nor their token ids are kept
            p["prompt"], found = None, 1
    if "training" in p:
        try:
            # what else the token ids encode: the request's other fields (tools and their descriptions, a
            # response format...) and the whole answer message (text, tool-call arguments, reasoning), not its
            # logprobs, whose "token" fields are text tokens, not secrets
            found += redact_obj(context)[1] if context else 0
            choices = answer.get("choices") if isinstance(answer, dict) else None
            for choice in choices if isinstance(choices, list) else ():
                message = choice.get("message") if isinstance(choice, dict) else None
                found += redact_obj(message)[1] if isinstance(message, dict) else 0
        except RecursionError:
            found += 1
        if found:
            del p["training"]
            p["training_withheld"] = "a secret was found in the prompt or the answer: their token ids are not kept"


def _data_urls_digested(obj):
    """Inline files in the messages (an image as a `data:` URL, megabytes of base64) as their media type, length and
    digest: the training record needs the conversation, not the file, and redacting megabytes of base64 held up
    every record behind it in the committer thread."""
    return _leaves(obj, _digested_if_data_url)


def _digested_if_data_url(value):
    if isinstance(value, str) and len(value) > 1024 and value.startswith("data:"):
        media = value[5:value.find(",", 5, 200)].split(";")[0] if "," in value[5:200] else "unknown"
        return f"data:{media};length={len(value)};sha256={hashlib.sha256(value.encode('utf-8', 'replace')).hexdigest()}"
    return value


def _leaves(obj, leaf):
    """`obj` (JSON-shaped) with `leaf` applied to every key and value that is not a dict or a list."""
    if isinstance(obj, dict):
        return {_leaves(k, leaf): _leaves(v, leaf) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_leaves(v, leaf) for v in obj]
    return leaf(obj)


class _Scenario:
    """One scenario's store, shared ledger, and the release read at most once per change of its log."""

    def __init__(self, project, name: str, hint=None):
        from ..store import HarnessStore

        self.store = HarnessStore(project, name)
        if not self.store.exists():
            known = ", ".join(project.scenarios()) or "none"
            raise NotFound(f"scenario '{name}' does not exist in {project.root} (known: {known})"
                           + (f"; {hint(name)}" if hint else ""))
        self.ledger = self.store.ledger()
        self.start = self.ledger.position()  # where the chain ended when first used: the drain's check starts here
        self.last = None
        self.damaged: str | None = None  # why the ledger takes no more records (found by an append), or None
        self.misplaced: tuple | None = None  # (MisplacedState, what its path was then): refused until it changes
        self.log_path = self.store.dir / "releases.jsonl"
        self._key = None
        self._release = None
        self.instructions: dict[str, tuple[str | None, str | None]] = {}  # content_id -> (compiled text, problem)

    def refusal(self) -> str | None:
        """Why this scenario's ledger takes no more records until the gateway restarts (as a clause), or None."""
        if self.ledger.sync_failure is not None:
            return f"its ledger failed a sync ({self.ledger.sync_failure}); restart the gateway once the disk is checked"
        if self.damaged is not None:
            return f"its ledger changed under it ({self.damaged}); run reef ledger verify, then restart the gateway"
        if self.misplaced is not None:
            exc, then = self.misplaced
            if _lstat(exc.path) != then:  # moved away or replaced: the next append finds out whether it is right
                self.misplaced = None
                return None
            return f"{exc.what}; move it away (the gateway goes on once it is)"
        return None

    def release(self):
        """The head, re-read only when the release log's file changed (one stat per request)."""
        try:
            st = os.stat(self.log_path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            key = None
        if key != self._key or self._release is None:
            self._release = self.store.require_head()
            self._key = key
        return self._release


def _lstat(path) -> tuple | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mode, st.st_mtime_ns


class Recorder:
    def __init__(self, project, default_scenario: str, *, store_content: bool = False, executor=None):
        self.project = project
        self.default_scenario = default_scenario
        self.store_content = store_content
        self.executor = executor
        self._scenarios: dict[str, _Scenario] = {}
        self.request_hooks: list[RequestHook] = []
        self.response_hooks: list[ResponseHook] = []
        self.missing_hint = None  # name -> how to create it (set by the SGLang hook: a weights scenario's command)
        self.committer = Committer()
        self.recorded = 0
        self.failed = 0

    def scenario(self, name: str | None) -> _Scenario:
        name = name or self.default_scenario
        state = self._scenarios.get(name)
        if state is None:
            from ..project import check_scenario_name

            check_scenario_name(name)
            state = self._scenarios[name] = _Scenario(self.project, name, self.missing_hint)
        return state

    @property
    def scenarios(self) -> dict:
        return self._scenarios

    def begin(self, state: _Scenario, release, api: str, route: str, started: float) -> Exchange:
        """A new exchange on `release`, the scenario's head read when the request arrived."""
        ex = Exchange(record_id=state.ledger.reserve_id(), scenario=state.store.scenario,
                      release_id=release.release_id, content_id=release.content_id, api=api, route=route,
                      started=started, runtime_load_id=getattr(release, "runtime_load_id", None))
        if self.store_content:
            ex.response_text = bytearray()
        return ex

    async def instructions(self, state: _Scenario, content_id: str, release) -> tuple[str | None, str | None]:
        """(text, problem): a release whose harness does not compile injects nothing, and its records say why."""
        if content_id not in state.instructions:
            from ..errors import ReefError
            from .inject import compiled_instructions

            loop = asyncio.get_running_loop()
            try:
                text = await loop.run_in_executor(self.executor, compiled_instructions, state.store, release)
                state.instructions[content_id] = (text, None)
            except ReefError as exc:
                state.instructions[content_id] = (None, str(exc))
        return state.instructions[content_id]

    def describe_request(self, ex: Exchange, body: bytes) -> None:
        ex.request = {"digest": "sha256:" + hashlib.sha256(body).hexdigest(), "length": len(body)}
        if self.store_content:
            ex.request_body = body

    def apply_request_hooks(self, ex: Exchange, body: dict) -> bool:
        changed = False
        for hook in self.request_hooks:
            if hook(ex, body):
                ex.hooks_applied.append(getattr(hook, "__name__", "hook"))
                changed = True
        return changed

    async def inspect(self, ex: Exchange) -> None:
        """Run the response hooks; a hook may return an awaitable (e.g. to ask the engine which weights serve)."""
        for hook in self.response_hooks:
            result = hook(ex)
            if inspect.isawaitable(result):
                await result

    async def finish(self, ex: Exchange, alone: bool = False, then: Callable[[], object] | None = None):
        """Append the record once; returns it when durable. Shielded: a cancelled handler still gets its record.
        `alone`: no other request is in flight, so a fast append may run on the loop (commit.py says when).
        `then` (on the loop, must not raise) runs the moment the record is durable, before this returns: the
        gateway sends the answer carrying the receipt there (`Ledger.append`'s `then`)."""
        if ex.record is not None:
            return ex.record
        if ex.pending is not None:
            return await asyncio.shield(ex.pending)
        if ex.append_error is not None:  # its line may be in the ledger, unsynced: appending again would clash
            raise ex.append_error
        state = self._scenarios[ex.scenario]
        ex.ended = time.perf_counter()
        store_content = self.store_content
        ledger = state.ledger

        def append(then=None):
            payload = ex.payload(store_content)
            try:
                return ledger.append(RECORD_KIND, payload, release_id=ex.release_id, content_id=ex.content_id,
                                     record_id=ex.record_id, then=then)
            except InvalidInput:  # text the client sent that is not UTF-8 (a header's bytes, %ff in a path, a
                # lone \ud800 in its JSON), or NaN/Infinity in the upstream's usage: the call reached the upstream,
                # so it is recorded, with U+FFFD and null there
                try:
                    fixed = _storable(payload)
                except RecursionError:  # nested past Python's stack: keep the call, not those fields
                    fixed = _bare(payload)
                try:
                    return ledger.append(RECORD_KIND, fixed, release_id=ex.release_id, content_id=ex.content_id,
                                         record_id=ex.record_id, then=then)
                except InvalidInput:
                    return ledger.append(RECORD_KIND, _bare(payload), release_id=ex.release_id,
                                         content_id=ex.content_id, record_id=ex.record_id, then=then)

        def item():
            return NewRecord(RECORD_KIND, ex.payload(store_content), ex.release_id, ex.content_id, ex.record_id)

        committer = self.committer
        try:
            if alone and committer.may_inline() and ex.content_size() <= INLINE_MAX_CONTENT:
                record = ex.record = committer.run_inline(append, then)
            else:
                fut = ex.pending = committer.submit(ledger, item, append)
                record = ex.record = await asyncio.shield(fut)
                if then is not None:
                    then()
        except Exception as exc:
            ex.append_error = exc
            if isinstance(exc, DamagedState) and state.damaged is None:
                state.damaged = str(exc)  # records lost under the gateway: no more upstream calls
            elif isinstance(exc, MisplacedState):  # until the thing in the way is moved
                state.misplaced = (exc, _lstat(exc.path))
            raise
        if state.last is None or record.seq > state.last.seq:
            state.last = record  # the newest this gateway appended: still in the file when it stops (app._verify)
        if ex.outcome == "ok":
            self.recorded += 1
        else:
            self.failed += 1
        return record

    def close(self) -> None:
        self.committer.close()
        for state in self._scenarios.values():
            state.ledger.close()


def _bare(payload: dict) -> dict:
    """The record of a call whose upstream usage, prompt or hook fields cannot be stored at all (nested past the
    stack): the fields the gateway itself builds, each forced to its own type, made storable, and a note. The call
    is recorded either way; nothing here can nest."""
    def of(key, kind):
        value = payload.get(key)
        return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else None

    out = {key: of(key, str) for key in ("source", "api", "route", "model", "outcome", "error", "session")}
    out.update(status=of("status", int), stream=payload.get("stream") is True,
               latency_ms=of("latency_ms", float), ttft_ms=of("ttft_ms", float), duration_s=of("duration_s", float))
    tokens = payload.get("tokens") if isinstance(payload.get("tokens"), dict) else {}
    out["tokens"] = {key: tokens.get(key) if type(tokens.get(key)) is int else None for key in ("input", "output")}
    tags = payload.get("tags") if isinstance(payload.get("tags"), dict) else {}
    out["tags"] = {k: v for k, v in list(tags.items())[:64] if isinstance(k, str) and isinstance(v, str)}
    for key in ("request", "response"):  # the gateway's digests (and, with --store-content, redacted text)
        part = payload.get(key) if isinstance(payload.get(key), dict) else {}
        out[key] = {k: v for k, v in part.items() if isinstance(v, (str, int)) and not isinstance(v, bool)}
    out = _storable(out)
    out["usage"] = None
    out["unstorable"] = "the upstream's usage or a hook's fields could not be stored as JSON; they are left out"
    return out


def _storable(obj):
    """`obj` made storable as canonical JSON: every string encodable (bytes smuggled in as surrogates by
    surrogateescape, or lone surrogates from JSON escapes, become U+FFFD) and NaN or Infinity (which Python's JSON
    parser accepts from an upstream) null."""
    return _leaves(obj, _storable_leaf)


def _storable_leaf(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            out = bytearray()  # bytes smuggled as \udc80-\udcff go back to bytes; other lone surrogates are U+FFFD
            for ch in value:
                code = ord(ch)
                out += bytes((code - 0xDC00,)) if 0xDC80 <= code <= 0xDCFF else \
                    ("\ufffd" if 0xD800 <= code <= 0xDFFF else ch).encode("utf-8")
            return out.decode("utf-8", "replace")
    return value
