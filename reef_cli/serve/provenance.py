"""Weight provenance for `reef serve --upstream-api sglang`: which weights answered, and the tokens they saw.

Request hook (OpenAI chat completions only): a non-streaming request gains SGLang's own extensions `logprobs: true`,
`return_prompt_token_ids: true` and `return_meta_info: true`, so each choice comes back with `prompt_token_ids` and
a `meta_info` holding `weight_version` and `output_token_logprobs` ([logprob, token id, text] per output token). SGLang
rejects the two `return_*` flags on streams, so a stream is relayed as asked (plus `stream_options.include_usage`,
for its usage chunk) and carries no token data.

Response hook, before the record and receipt are written: the weight version that answered (the choice's
`meta_info`, the body's `metadata`, the final chunk's, or — when the answer does not say, as SGLang's streams do not —
the engine's `/get_model_info` read at the end of the answer) must equal the `runtime_load_id` of the release frozen
when the request arrived. On a mismatch the answer is refused and marked retryable: a non-streaming call gets one
fresh upstream call, then a 409; a stream (its tokens already sent) ends without a receipt. Either way the record's
outcome is `refused` and `provenance` says which version answered. A release that is not a weight release (no load
id) checks nothing but the record still names the version.

The fields written are the `inference` record shape `reef_cli.weights.records` consumes: `prompt`, `weight_version`,
`training {prompt_token_ids, output_token_ids, output_logprobs}`.
"""

from __future__ import annotations

import asyncio

from .recording import Exchange

CHAT = "openai.chat"
ASK = {"logprobs": True, "return_prompt_token_ids": True, "return_meta_info": True}


def engine_url(upstream: str) -> str:
    base = upstream.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def start_command(scenario: str, upstream: str, recipe: str | None = "sao") -> str:
    """The one command that makes a scenario servable in front of SGLang: its base weights as step 1."""
    return (f"reef -s {scenario} train" + (f" --recipe {recipe}" if recipe else "")
            + f" --engine {engine_url(upstream)} --init")


def require_servable(project, scenario: str, upstream: str):
    """The scenario `reef serve --upstream-api sglang` records into, or an error naming the command that starts it
    (serve freezes a release per request, and a weights scenario's first release comes from that command)."""
    from ..errors import NotFound
    from ..store import HarnessStore

    store = HarnessStore(project, scenario)
    if not store.exists():
        known = ", ".join(project.scenarios()) or "none"
        raise NotFound(f"scenario '{scenario}' does not exist in {project.root} (known: {known}); start it from the "
                       f"engine's base weights with '{start_command(scenario, upstream)}' (or another weights "
                       "recipe from 'reef recipes')")
    if store.head() is None:
        raise NotFound(f"scenario '{scenario}' has no release yet, so serve has no weight version to check; start it "
                       f"from the engine's base weights with '{start_command(scenario, upstream, None)}'")
    return store


class SGLangProvenance:
    def __init__(self, upstream_base: str, executor=None):
        self.engine_url = engine_url(upstream_base)
        self.executor = executor

    def install(self, recorder) -> None:
        recorder.missing_hint = lambda name: (f"start it from the engine's base weights with "
                                              f"'{start_command(name, self.engine_url)}'")
        recorder.request_hooks.append(self.sglang_meta_info)
        recorder.response_hooks.append(self.check)

    # -- request ----------------------------------------------------------------------------------------------------
    def sglang_meta_info(self, ex: Exchange, body: dict) -> bool:
        if ex.api != CHAT:
            return False
        if "messages" in body:
            ex.extra["prompt"] = body["messages"]
            ex.training_context = {key: value for key, value in body.items() if key != "messages"}
        if body.get("stream") is True:
            opts = body.get("stream_options")
            if isinstance(opts, dict) and opts.get("include_usage") is True:
                return False
            body["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
            return True
        changed = False
        for key, value in ASK.items():
            if body.get(key) is not True:
                body[key] = value
                changed = True
        return changed

    # -- response ---------------------------------------------------------------------------------------------------
    def check(self, ex: Exchange):
        if ex.api != CHAT:
            return None
        meta = ex.upstream_meta if isinstance(ex.upstream_meta, dict) else {}
        choices = meta.get("choices") if isinstance(meta.get("choices"), list) else []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        info = choice.get("meta_info") if isinstance(choice.get("meta_info"), dict) else {}
        from ..weights.sglang import _version_in

        answered = _version_in(info) or _version_in(meta)
        training = _training(choice, info)
        if training is not None:
            ex.extra["training"] = training
        if answered is not None:
            return self._verdict(ex, answered, "response")
        return self._ask_engine(ex)

    async def _ask_engine(self, ex: Exchange) -> None:
        from ..weights.sglang import Engine, EngineError

        loop = asyncio.get_running_loop()
        try:
            answered = await loop.run_in_executor(self.executor, Engine(self.engine_url, timeout=10).weight_version)
        except EngineError:
            answered = None
        self._verdict(ex, answered, "engine")

    def _verdict(self, ex: Exchange, answered: str | None, source: str) -> None:
        from ..weights.sglang import check_weight_version

        verdict = check_weight_version({"weight_version": answered} if answered is not None else {},
                                       ex.runtime_load_id)
        ex.provenance = {**verdict.to_json(), "source": source}
        if answered is not None:
            ex.extra["weight_version"] = answered
        if not verdict.ok:
            ex.retryable = True
            ex.refuse(verdict.reason)


def _training(choice: dict, info: dict) -> dict | None:
    """The token data of a choice, or None when SGLang did not return it (a stream, an older SGLang)."""
    prompt_ids = choice.get("prompt_token_ids")
    rows = info.get("output_token_logprobs")
    if not isinstance(prompt_ids, list) or not isinstance(rows, list) or not rows:
        return None
    out_ids, logprobs = [], []
    for row in rows:
        if not isinstance(row, (list, tuple)) or len(row) < 2 or type(row[1]) is not int:
            return None
        out_ids.append(row[1])
        logprobs.append(row[0])
    return {"prompt_token_ids": prompt_ids, "output_token_ids": out_ids, "output_logprobs": logprobs}
