"""The one room that speaks SGLang's HTTP API (stdlib urllib only, so reef needs no HTTP client to train).

Endpoints used, as SGLang's `http_server.py` defines them:

* `GET /health` — 200 once the engine answers a one-token generate, 503 while starting or unhealthy.
* `GET /get_model_info` — `{model_path, tokenizer_path, is_generation, weight_version, ...}`; newer SGLang also
  serves it as `/model_info` (the old name stays as an alias), so a 404 on one falls back to the other.
* `POST /pause_generation` `{}` then `GET|POST /flush_cache`, which answers 400 while requests are still running or
  waiting ("the operation will not be performed") — the caller retries, as slime's engine wrapper does.
* `POST /update_weights_from_disk` `{model_path, weight_version, ...}` → `{success, message, num_paused_requests}`
  (400 when `success` is false; the engine commits `weight_version` only on success).
* `POST /continue_generation` `{}`.
* Responses carry the version that answered: `/generate` in `meta_info.weight_version` (every streamed chunk too),
  `/v1/chat/completions` in `metadata.weight_version` (non-streaming only).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ExitCode, ReefError

DEFAULT_VERSION = "default"  # what SGLang reports before any weight update names a version
INTERRUPTED_RESUME_S = 10.0  # how long an interrupted swap waits for /continue_generation: the user wants out


class EngineError(ReefError):
    """The engine is down, refused an operation, or answered something reef cannot trust."""


class EngineDown(EngineError):
    pass


class EngineRefused(EngineError):
    pass


@dataclass(frozen=True)
class VersionCheck:
    """Whether a response was produced by the weights a request was frozen against."""

    ok: bool
    answered: str | None
    expected: str | None
    reason: str

    def to_json(self) -> dict:
        return {"ok": self.ok, "answered": self.answered, "expected": self.expected, "reason": self.reason}


def check_weight_version(meta_info: Any, expected: str | None) -> VersionCheck:
    """Compare the weight version a response reports with the runtime load id frozen at request start.

    `meta_info` is `/generate`'s `meta_info`, a chat completion's `metadata`, or a whole response body holding
    either. `expected=None` means the frozen release is not a weight release (nothing to check). A response that
    does not say which weights answered fails: provenance that cannot be shown is not assumed.
    """
    if expected is None:
        return VersionCheck(True, _version_in(meta_info), None, "no weight release to check against")
    answered = _version_in(meta_info)
    if answered is None:
        return VersionCheck(False, None, expected, "the response does not say which weight version answered")
    if answered != expected:
        return VersionCheck(False, answered, expected, f"answered by weight version {answered}, expected {expected}")
    return VersionCheck(True, answered, expected, "weight version matches")


def _version_in(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("weight_version"), (str, int)) and not isinstance(obj.get("weight_version"), bool):
        return str(obj["weight_version"])
    for key in ("meta_info", "metadata"):
        inner = obj.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("weight_version"), (str, int)):
            return str(inner["weight_version"])
    return None


@dataclass(frozen=True)
class SwapResult:
    weight_version: str
    previous_version: str | None
    flush_attempts: int
    model_info: dict
    message: str

    def to_json(self) -> dict:
        return {"weight_version": self.weight_version, "previous_version": self.previous_version,
                "flush_attempts": self.flush_attempts, "message": self.message,
                "model_path": self.model_info.get("model_path")}


class SwapFailed(EngineError):
    """A hot swap that failed after the engine was touched: its weights are in an unknown state. `stage` names the
    step that failed (pause, flush_cache, update, read_back, continue), `touched` whether the engine was paused."""

    def __init__(self, message: str, *, stage: str, touched: bool, answered_version: str | None = None):
        super().__init__(message)
        self.stage = stage
        self.touched = touched
        self.answered_version = answered_version


class SwapInterrupted(SwapFailed):
    """Ctrl-C (or SIGTERM) while the engine was paused or loading: it may finish loading the new weights after reef
    stopped waiting, so they are as unknown as after any other failed swap."""

    exit_code = ExitCode.INTERRUPTED


def checked_url(url: str) -> str:
    """The engine's URL as reef uses, prints and stores it (no trailing slash), or InvalidInput naming --engine.

    A user name or password in it is refused, not stripped: reef sends no credentials to SGLang (urllib would not
    send these either, it looked the whole `user:pass@host` up as a host name), and every weight release, train
    record and lock names the engine's URL, so one holding a token would store the token. A URL that cannot be
    parsed is not echoed (it may hold a key); the reason says what is wrong."""
    from urllib.parse import urlsplit

    from ..errors import InvalidInput

    example = "such as http://127.0.0.1:30000"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError as exc:
        raise InvalidInput(f"--engine: not a valid URL ({exc}); expected an SGLang server's http(s) URL, "
                           f"{example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        from ..redact import redact

        raise InvalidInput(f"--engine {redact(url)[0]}: expected an http:// or https:// URL of an SGLang server, "
                           f"{example}")
    if "@" in parts.netloc:
        host = parts.netloc.rsplit("@", 1)[1]
        raise InvalidInput(f"--engine {parts.scheme}://{host}{parts.path}: a user name or password in the URL is "
                           "not supported (reef sends no credentials to the engine, and would store the URL with "
                           "every weight release); reach the engine without them (e.g. through an SSH tunnel)")
    return url.rstrip("/")


class Engine:
    """A client of one SGLang engine. `sleep` and the retry budget are injectable so tests stay fast."""

    def __init__(self, url: str, *, timeout: float = 60.0, flush_retries: int = 60, flush_wait: float = 1.0,
                 update_timeout: float = 1800.0, sleep: Callable[[float], None] = time.sleep):
        self.url = checked_url(url)
        self.timeout = timeout
        self.flush_retries = flush_retries
        self.flush_wait = flush_wait
        self.update_timeout = update_timeout
        self.sleep = sleep

    # -- transport ------------------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read())
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EngineDown(f"SGLang engine at {self.url} is unreachable ({path}: {reason})") from None

    # -- reads ----------------------------------------------------------------------------------------------------
    def health(self) -> bool:
        try:
            status, _ = self._call("GET", "/health")
        except EngineDown:
            return False
        return status == 200

    def model_info(self) -> dict:
        status, body = self._call("GET", "/get_model_info")
        if status == 404:
            status, body = self._call("GET", "/model_info")
        if status != 200 or not isinstance(body, dict):
            raise EngineRefused(f"SGLang engine at {self.url}: /get_model_info answered HTTP {status}")
        return body

    def weight_version(self) -> str | None:
        version = self.model_info().get("weight_version")
        return None if version is None else str(version)

    def generate(self, body: dict) -> dict:
        status, out = self._call("POST", "/generate", body)
        if status != 200 or not isinstance(out, dict):
            raise EngineRefused(f"SGLang engine at {self.url}: /generate answered HTTP {status}: {_brief(out)}")
        return out

    # -- weight control -------------------------------------------------------------------------------------------
    def pause(self) -> None:
        status, body = self._call("POST", "/pause_generation", {})
        if status != 200:
            raise EngineRefused(f"SGLang engine at {self.url}: /pause_generation answered HTTP {status}: {_brief(body)}")

    def resume(self, timeout: float | None = None) -> None:
        status, body = self._call("POST", "/continue_generation", {}, timeout=timeout)
        if status != 200:
            raise EngineRefused(f"SGLang engine at {self.url}: /continue_generation answered HTTP {status}: {_brief(body)}")

    def flush_cache(self) -> int:
        """Flush the radix cache, retrying while the engine is busy; returns how many attempts it took."""
        for attempt in range(1, self.flush_retries + 1):
            status, body = self._call("POST", "/flush_cache", {})
            if status == 200:
                return attempt
            if attempt < self.flush_retries:
                self.sleep(self.flush_wait)
        raise EngineRefused(
            f"SGLang engine at {self.url}: /flush_cache still busy after {self.flush_retries} attempts "
            f"(last HTTP {status}: {_brief(body)})"
        )

    def update_weights_from_disk(self, model_path: str, weight_version: str) -> dict:
        status, body = self._call("POST", "/update_weights_from_disk",
                                  {"model_path": model_path, "weight_version": weight_version},
                                  timeout=self.update_timeout)
        if status != 200 or not isinstance(body, dict) or body.get("success") is not True:
            message = body.get("message") if isinstance(body, dict) else _brief(body)
            raise EngineRefused(f"SGLang engine at {self.url} refused the weights in {model_path}: {message}")
        return body

    def hot_swap(self, model_path: str, weight_version: str) -> SwapResult:
        """pause → flush (retry while busy) → update with the new version → read it back → continue.

        Every failure after the pause is a SwapFailed(touched=True); the engine is asked to continue generating
        either way, so serving resumes and reef serve's provenance check guards what answers next. A KeyboardInterrupt
        (Ctrl-C, or SIGTERM where the caller maps it) from the pause on is one too, SwapInterrupted: an engine left
        paused serves nobody, and one still loading may commit the new version after reef stopped waiting.
        """
        try:
            previous = self.weight_version()
        except EngineError as exc:
            raise SwapFailed(str(exc), stage="model_info", touched=False) from None
        except KeyboardInterrupt:
            raise SwapInterrupted(f"interrupted before the hot swap of {weight_version!r} began; the SGLang engine at "
                                  f"{self.url} was not touched", stage="model_info", touched=False) from None
        stage = "pause"
        try:
            self.pause()
            stage = "flush_cache"
            attempts = self.flush_cache()
            stage = "update"
            update = self.update_weights_from_disk(model_path, weight_version)
            stage = "read_back"
            info = self.model_info()
            answered = info.get("weight_version")
            if answered is None or str(answered) != weight_version:
                raise SwapFailed(
                    f"SGLang engine at {self.url} reports weight version {answered!r} after loading "
                    f"{weight_version!r}; its weights are unknown",
                    stage="read_back", touched=True, answered_version=None if answered is None else str(answered))
            stage = "continue"
            self.resume()
        except SwapFailed:
            self._resume_quietly()
            raise
        except EngineError as exc:
            if stage != "continue":
                self._resume_quietly()
            raise SwapFailed(str(exc), stage=stage, touched=True) from None
        except KeyboardInterrupt:
            try:
                resumed = self._resume_quietly(timeout=INTERRUPTED_RESUME_S)
            except KeyboardInterrupt:  # a second Ctrl-C: stop asking, still say what state it is in
                resumed = False
            raise SwapInterrupted(
                f"interrupted during the hot swap of {weight_version!r} into the SGLang engine at {self.url} "
                f"(at {stage}); it may still load those weights, so which weights it serves is unknown"
                + ("" if resumed else " (and it did not answer /continue_generation: it may still be paused)"),
                stage=stage, touched=True) from None
        return SwapResult(weight_version, previous, attempts, info, str(update.get("message", "")))

    def _resume_quietly(self, timeout: float | None = None) -> bool:
        try:
            self.resume(timeout)
        except EngineError:
            return False
        return True


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def _brief(body: Any) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    text = " ".join(str(text).split())
    return text[:200] + ("…" if len(text) > 200 else "")
