"""The LLM Reflector's backends: a `ReflectorBackend` protocol and two implementations speaking the real protocols,
OpenAI-compatible chat completions and Anthropic Messages (stdlib urllib: no SDK import on any path), directly or
through `reef serve`.

Configured in harness.yaml, every field optional, each overridable by an env var (REEF_REFLECTOR_<FIELD>) and the
backend/model/URL by `--backend/--model/--model-url`:

    reflector:
      backend: openai            # builtin (offline) | openai (alias llm) | anthropic
      model: gpt-4o-mini         # a cheaper model can be named for reflection
      base_url: https://api.openai.com/v1   # (model_url is the older name)
      api_key_env: OPENAI_API_KEY           # the key is read from this variable at request time, never stored
      batch_size: 20             # records per call: N records cost ceil(N / batch_size) calls
      max_tokens: 1500           # output tokens asked for per call
      budget: {max_calls: 20, max_input_tokens: 200000, max_output_tokens: 30000, max_cost: 0.50}
      prices: {gpt-4o-mini: {input: 0.15, output: 0.60}}   # USD per million tokens, for max_cost and estimates

Privacy: what is sent is built by `request_body` only: each record's stored text (already redacted when written)
passes `redact()` again, and so do the current lessons; observe-only records are never queued (reflect.py).
`--show-prompt` prints those exact bodies and sends nothing. The API key is sent in a header and appears in no
message, record or log.

Cost: before each call the backend checks the budget against an estimate (input ≈ chars / 4, output = max_tokens,
clamped to what is left); when the next call would exceed it, `BudgetExhausted` stops the reflect cleanly (the
Reflector moves its mark only past records whose batch was answered). Actual usage from the answers (`usage`
fields) is summed into `usage` and lands in the `reflect` ledger record. `--dry-run` runs the fold with an
estimating backend that sends nothing and reports calls, tokens and cost it would spend.

An answer that is not our JSON (HTTP error, not JSON, cut off by max_tokens/length, wrong shape) is retried
`retries` times, then LLMError: nothing is folded and the mark does not move. A single malformed or fabricated
lesson inside a good answer is rejected (and recorded as a `rejection`) on its own by the verifier.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import InvalidInput, ReefError
from .patterns import dont_text, polarity_of, sentence
from .lessons import Lesson, record_text

SYSTEM_PROMPT = """You are the Reflector of reef, a tool that improves a coding agent's instructions from feedback.
You get records from the agent's sessions (user feedback reports, corrections the user made inside a session,
failed runs, routing decisions) and the lessons already learned. Extract short, general, actionable lessons for the
agent's instruction file: one imperative sentence each, under 200 characters. Turn a description of what went
wrong into the instruction it implies ("You forgot to run the tests" -> "Run the tests before saying you are
done"). Only state what the records support; skip lessons already learned.

Answer with one JSON object and nothing else:
{"lessons": [{"text": "Always run the tests before finishing.", "polarity": "do" or "dont",
  "evidence": ["<record_id>", ...],
  "quotes": [{"record_id": "<record_id>", "text": "<a span copied verbatim from that record>"}],
  "surface": null}]}
Cite only record ids you were given. Quote spans exactly as they appear. If nothing is worth learning, answer
{"lessons": []}."""

BACKENDS = ("builtin", "openai", "anthropic")
ALIASES = {"llm": "openai", "openai-compatible": "openai", "claude": "anthropic"}
DEFAULT_URL = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
ANTHROPIC_VERSION = "2023-06-01"


class LLMError(ReefError):
    """The model endpoint failed or answered something reef cannot use; nothing was reflected."""


class MalformedAnswer(LLMError):
    """The endpoint answered, but not with anything reef can read as lessons (not JSON, no message, cut off at
    max_tokens, no 'lessons' list): that batch is skipped and recorded; the run goes on with the next one."""


class BudgetExhausted(Exception):
    """The next call would exceed the reflect run's budget: stop cleanly before sending it."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class ReflectorBackend(Protocol):
    """What the Reflector asks of a model backend (reflect.py holds the fold and the verifier)."""

    name: str
    batch_size: int
    usage: "Usage"

    def lessons(self, records: list, *, bullets: list[str]) -> tuple[list[Lesson], list[tuple[Lesson, str]]]:
        """(lessons to verify, malformed lessons with why); MalformedAnswer when the answer is unreadable,
        LLMError when the endpoint cannot be reached, BudgetExhausted before a call the budget does not allow."""


# --------------------------------------------------------------------------------------------- budget and usage


@dataclass(frozen=True)
class Budget:
    max_calls: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_cost: float | None = None


@dataclass
class Usage:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    estimated: bool = False  # --dry-run: what it would spend
    stopped: str | None = None  # why the budget stopped the run
    prompts: list[dict] = field(default_factory=list)  # --show-prompt: the bodies that would be sent

    def to_json(self) -> dict:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost": None if self.cost is None else round(self.cost, 6), "estimated": self.estimated,
                "budget_stopped": self.stopped}


def estimate_tokens(text: str) -> int:
    """About four characters a token for English and JSON; the budget check uses this before a call."""
    return max(1, math.ceil(len(text) / 4))


# --------------------------------------------------------------------------------------------- answers


def _strip_fence(text: str) -> str:
    text = text.strip()
    m = re.match(r"^```(?:json)?\s*(.*?)\s*```$", text, re.S)
    return m.group(1) if m else text


def lessons_of(content: Any, source: str) -> list:
    """The lessons list in the model's message text; LLMError when it is not our JSON object."""
    if not isinstance(content, str):
        raise LLMError(f"{source}: the model's message is not text")
    try:
        obj = json.loads(_strip_fence(content))
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
        raise LLMError(f"{source}: the model's message is not a JSON object ({content[:80]!r})") from None
    lessons = obj.get("lessons", obj.get("patterns")) if isinstance(obj, Mapping) else obj
    if not isinstance(lessons, list):
        raise LLMError(f"{source}: the model's JSON has no 'lessons' list")
    return lessons


def _tokens(n: Any) -> int:
    """A usage count as the endpoint reported it; one that is not a whole non-negative number ("lots", 1e999, a
    list) counts as unreported (0), like a missing one: the lessons of the answer are still good."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n < 0:
        return 0
    return int(n)


def _json_doc(body: bytes, source: str) -> dict:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested deeper than the decoder goes
        raise LLMError(f"{source}: the answer is not valid JSON ({len(body)} bytes: {body[:80]!r})") from None
    if not isinstance(doc, dict):
        raise LLMError(f"{source}: the answer is not a JSON object")
    return doc


def parse_answer(body: bytes, source: str) -> list[dict]:
    """The lessons list of an OpenAI chat completion whose content is our JSON object; LLMError otherwise."""
    return lessons_of(_openai_content(_json_doc(body, source), source), source)


def _openai_content(doc: dict, source: str) -> str:
    try:
        choice = doc["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LLMError(f"{source}: the answer has no choices[0].message.content") from None
    if choice.get("finish_reason") == "length":
        raise LLMError(f"{source}: the answer was cut off at max_tokens (finish_reason 'length')")
    return content


def lesson_from_json(d: Any) -> tuple[Lesson | None, str | None]:
    """A Lesson from the model's JSON, or (a stand-in lesson, why it is malformed)."""
    if not isinstance(d, Mapping):
        return Lesson(str(d)[:200], "do", ()), "a lesson is not a JSON object"
    text = d.get("text") or d.get("lesson")
    cites = d.get("evidence", d.get("cites", d.get("record_ids", [])))
    if isinstance(cites, str):
        cites = [cites]
    cites = tuple(c for c in cites if isinstance(c, str)) if isinstance(cites, list) else ()
    quotes_raw = d.get("quotes") or []
    quotes = []
    if isinstance(quotes_raw, list):
        for q in quotes_raw:
            if isinstance(q, Mapping) and isinstance(q.get("record_id"), str):
                quotes.append((q["record_id"], str(q.get("text") or "")))
    if not isinstance(text, str) or not text.strip():
        return Lesson("", "do", cites, tuple(quotes), "llm"), "a lesson has no text"
    polarity = d.get("polarity")
    if polarity not in ("do", "dont"):
        polarity = polarity_of(text)
    hint = d.get("surface") if d.get("surface") in ("memory", "notes", "block", "skill") else None
    shown = dont_text(text) if polarity == "dont" else sentence(text)
    return Lesson(shown[:300], polarity, cites, tuple(quotes), "llm", hint), None


# --------------------------------------------------------------------------------------------- the backends


class ChatBackend:
    """What both protocols share: the redacted prompt, batching, the budget, retries and usage."""

    name = "llm"
    protocol = ""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, batch_size: int = 20,
                 timeout: float = 60.0, retries: int = 1, excerpt_chars: int = 1500, max_tokens: int = 1500,
                 budget: Budget | None = None, prices: Mapping | None = None, mode: str = "send"):
        if not base_url:
            raise InvalidInput(f"the {self.protocol} reflector needs a base URL: set reflector.base_url in "
                               "harness.yaml or pass --model-url")
        if not model:
            raise InvalidInput(f"the {self.protocol} reflector needs a model name: set reflector.model in "
                               "harness.yaml or pass --model")
        from .model_url import check_model_url

        check_model_url(base_url)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._key = api_key
        self.batch_size = max(1, int(batch_size))
        self.timeout = timeout
        self.retries = retries
        self.excerpt_chars = excerpt_chars
        self.max_tokens = max(64, int(max_tokens))
        self.budget = budget or Budget()
        self.price = None
        if prices and isinstance(prices.get(model), Mapping):
            p = prices[model]
            self.price = (float(p.get("input", 0)), float(p.get("output", 0)))
        if self.budget.max_cost is not None and self.price is None:
            raise InvalidInput(f"reflector.budget.max_cost needs a price for model '{model}': add "
                               f"reflector.prices.{model}: {{input: USD per 1M tokens, output: USD per 1M tokens}}")
        self.mode = mode  # send | estimate (--dry-run) | show (--show-prompt)
        self.usage = Usage(estimated=mode != "send", cost=0.0 if self.price else None)

    @property
    def calls(self) -> int:
        return self.usage.calls

    # -- the prompt
    def user_message(self, records: list, bullets: list[str]) -> str:
        from .redact import excerpt, redact

        items = [{"record_id": r.record_id, "kind": r.kind, "created_at": r.created_at,
                  "text": excerpt(record_text(r), self.excerpt_chars)[0]}
                 for r in records]  # redacted far enough past the cut that a secret straddling it goes whole
        lessons = [redact(b)[0] for b in bullets]
        return json.dumps({"records": items, "current_lessons": lessons}, ensure_ascii=False, indent=1)

    def request_body(self, records: list, bullets: list[str]) -> dict:
        raise NotImplementedError

    # -- the budget
    def _cost(self, tin: int, tout: int) -> float:
        if self.price is None:
            return 0.0
        return (tin * self.price[0] + tout * self.price[1]) / 1_000_000

    def _admit(self, body: dict) -> int:
        """Check the budget for one more call; the max_tokens to ask for (clamped to the output budget left)."""
        b, u = self.budget, self.usage
        tin = estimate_tokens(json.dumps(body, ensure_ascii=False))
        tout = self.max_tokens
        if b.max_output_tokens is not None:
            tout = min(tout, b.max_output_tokens - u.output_tokens)
            if tout < 64:
                raise BudgetExhausted(f"max_output_tokens {b.max_output_tokens} reached "
                                      f"({u.output_tokens} used)")
        if b.max_calls is not None and u.calls + 1 > b.max_calls:
            raise BudgetExhausted(f"max_calls {b.max_calls} reached")
        if b.max_input_tokens is not None and u.input_tokens + tin > b.max_input_tokens:
            raise BudgetExhausted(f"max_input_tokens {b.max_input_tokens} would be exceeded "
                                  f"({u.input_tokens} used, about {tin} more)")
        if b.max_cost is not None and (u.cost or 0.0) + self._cost(tin, tout) > b.max_cost:
            raise BudgetExhausted(f"max_cost {b.max_cost} would be exceeded ({u.cost or 0.0:.4f} spent)")
        return tout

    def _account(self, tin: int, tout: int) -> None:
        u = self.usage
        u.calls += 1
        u.input_tokens += tin
        u.output_tokens += tout
        if self.price is not None:
            u.cost = (u.cost or 0.0) + self._cost(tin, tout)

    # -- a call
    def lessons(self, records: list, *, bullets: list[str]) -> tuple[list[Lesson], list[tuple[Lesson, str]]]:
        body = self.request_body(records, bullets)
        try:
            tout = self._admit(body)
        except BudgetExhausted as exc:
            self.usage.stopped = exc.why
            raise
        body = self.with_max_tokens(body, tout)
        if self.mode != "send":
            if self.mode == "show":
                self.usage.prompts.append({"url": self.url, "body": body})
            self._account(estimate_tokens(json.dumps(body, ensure_ascii=False)), tout)
            return [], []
        last: LLMError | None = None
        for _ in range(self.retries + 1):
            try:
                raw = self._post(body)
                try:
                    items, tin, tout_used = self.parse(raw)
                except LLMError as exc:
                    raise MalformedAnswer(str(exc)) from None
                self._account(tin, tout_used)
                break
            except LLMError as exc:
                self._account(estimate_tokens(json.dumps(body, ensure_ascii=False)), 0)
                last = exc
        else:
            assert last is not None
            if isinstance(last, MalformedAnswer):
                raise last  # the caller skips this batch and goes on
            raise LLMError(f"reflector model failed: {last}; nothing was reflected (the high-water mark did not move)")
        out, bad = [], []
        for item in items:
            lesson, why = lesson_from_json(item)
            if why is None:
                out.append(lesson)
            else:
                bad.append((lesson, why))
        return out, bad

    def with_max_tokens(self, body: dict, n: int) -> dict:
        return {**body, "max_tokens": n}

    def headers(self) -> dict:
        raise NotImplementedError

    def parse(self, raw: bytes) -> tuple[list, int, int]:
        raise NotImplementedError

    def _post(self, body: dict) -> bytes:
        import http.client
        import urllib.error
        import urllib.request

        data = json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url, data=data, headers=self.headers(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace") if exc.fp else ""
            raise LLMError(f"{self.url}: HTTP {exc.code} {detail.strip()}") from None
        except http.client.IncompleteRead as exc:
            raise LLMError(f"{self.url}: the answer was cut off after {len(exc.partial)} bytes") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise LLMError(f"{self.url}: {reason}") from None


class OpenAIChat(ChatBackend):
    """`POST {base_url}/chat/completions` (OpenAI, vLLM, SGLang, LiteLLM, `reef serve`, …), Bearer auth."""

    protocol = "openai"

    @property
    def url(self) -> str:
        return self.base_url + "/chat/completions"

    def request_body(self, records: list, bullets: list[str]) -> dict:
        return {"model": self.model, "temperature": 0, "stream": False,
                "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                             {"role": "user", "content": self.user_message(records, bullets)}]}

    def headers(self) -> dict:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            h["Authorization"] = f"Bearer {self._key}"
        return h

    def parse(self, raw: bytes) -> tuple[list, int, int]:
        doc = _json_doc(raw, self.url)
        items = lessons_of(_openai_content(doc, self.url), self.url)
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        return items, _tokens(usage.get("prompt_tokens")), _tokens(usage.get("completion_tokens"))


class AnthropicMessages(ChatBackend):
    """`POST {base_url}/v1/messages` (Anthropic, or `reef serve`), `x-api-key` and `anthropic-version` headers."""

    protocol = "anthropic"

    @property
    def url(self) -> str:
        return self.base_url + ("/messages" if self.base_url.endswith("/v1") else "/v1/messages")

    def request_body(self, records: list, bullets: list[str]) -> dict:
        return {"model": self.model, "max_tokens": self.max_tokens, "temperature": 0, "system": SYSTEM_PROMPT,
                "messages": [{"role": "user", "content": self.user_message(records, bullets)}]}

    def headers(self) -> dict:
        h = {"Content-Type": "application/json", "Accept": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if self._key:
            h["x-api-key"] = self._key
        return h

    def parse(self, raw: bytes) -> tuple[list, int, int]:
        doc = _json_doc(raw, self.url)
        blocks = doc.get("content")
        if not isinstance(blocks, list):
            raise LLMError(f"{self.url}: the answer has no content blocks")
        if doc.get("stop_reason") == "max_tokens":
            raise LLMError(f"{self.url}: the answer was cut off at max_tokens (stop_reason 'max_tokens')")
        text = "".join(b["text"] for b in blocks
                       if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        return lessons_of(text, self.url), _tokens(usage.get("input_tokens")), _tokens(usage.get("output_tokens"))


LLMBackend = OpenAIChat  # the name reef used before there were two protocols


# --------------------------------------------------------------------------------------------- configuration


def _int(v, name: str) -> int | None:
    if v is None or v == "":
        return None
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise InvalidInput(f"reflector.{name}: expected a whole number, got {v!r}") from None
    if n < 0:
        raise InvalidInput(f"reflector.{name}: must not be negative, got {n}")
    return n


def _float(v, name: str) -> float | None:
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InvalidInput(f"reflector.{name}: expected a number, got {v!r}") from None
    if not math.isfinite(x) or x < 0:
        raise InvalidInput(f"reflector.{name}: expected a non-negative number, got {v!r}")
    return x


def resolve(cfg, *, backend: str | None = None, base_url: str | None = None, model: str | None = None,
            environ: Mapping | None = None, mode: str = "send"):
    """"builtin", or the configured model backend: flags over REEF_REFLECTOR_* env vars over harness.yaml."""
    env = os.environ if environ is None else environ
    name = backend or env.get("REEF_REFLECTOR_BACKEND") or cfg.backend or "builtin"
    name = ALIASES.get(name, name)
    if name == "builtin":
        return "builtin"
    if name not in BACKENDS:
        raise InvalidInput(f"--backend {name}: expected builtin, openai (or llm) or anthropic")
    url = (base_url or env.get("REEF_REFLECTOR_BASE_URL") or getattr(cfg, "base_url", None) or cfg.model_url
           or DEFAULT_URL[name])
    model = model or env.get("REEF_REFLECTOR_MODEL") or cfg.model or ""
    key_env = env.get("REEF_REFLECTOR_API_KEY_ENV") or cfg.api_key_env or DEFAULT_KEY_ENV[name]
    b = getattr(cfg, "budget", None) or {}
    budget = Budget(max_calls=_int(env.get("REEF_REFLECTOR_MAX_CALLS", b.get("max_calls")), "budget.max_calls"),
                    max_input_tokens=_int(env.get("REEF_REFLECTOR_MAX_INPUT_TOKENS", b.get("max_input_tokens")),
                                          "budget.max_input_tokens"),
                    max_output_tokens=_int(env.get("REEF_REFLECTOR_MAX_OUTPUT_TOKENS", b.get("max_output_tokens")),
                                           "budget.max_output_tokens"),
                    max_cost=_float(env.get("REEF_REFLECTOR_MAX_COST", b.get("max_cost")), "budget.max_cost"))
    cls = OpenAIChat if name == "openai" else AnthropicMessages
    return cls(url, model, api_key=env.get(key_env) if key_env else None,
               batch_size=_int(env.get("REEF_REFLECTOR_BATCH_SIZE", getattr(cfg, "batch_size", None)),
                               "batch_size") or 20,
               max_tokens=_int(getattr(cfg, "max_tokens", None), "max_tokens") or 1500,
               budget=budget, prices=getattr(cfg, "prices", None) or {}, mode=mode)
