"""A fake SGLang engine on 127.0.0.1 speaking the HTTP API reef uses (shapes as in SGLang's http_server.py).

What a loaded "checkpoint" is: a directory with config.json (as an HF checkpoint has) and, optionally, a
`fake_weights.json` whose `bias` shifts the token ids it generates, so a test can see that new weights answer.
Faults are switches on the instance: `busy_flushes` (that many 400s from /flush_cache first), `refuse_update`,
`wrong_version` (commit a different version than asked), `refuse_after_loads` (refuse every update once that many
loads succeeded), `down` (close the listener), `signal_on` (a signal sent to this process once, when the named call
has been handled and before its answer: a Ctrl-C while reef waits for the engine, with the call done regardless).
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class FakeSGLang:
    def __init__(self, model_path: str = "/models/base", *, busy_flushes: int = 0):
        self.model_path = model_path
        self.weight_version = "default"
        self.bias = 0
        self.paused = False
        self.busy_flushes = busy_flushes
        self.refuse_update = False
        self.refuse_after_loads: int | None = None
        self.wrong_version = False
        self.calls: list[str] = []
        self.answer_versions: list[str] = []  # chat answers claim these versions first (a swap behind reef's back)
        self.swap_mid_stream: str | None = None  # a stream's engine switches to this version while it streams
        self.chat_bodies: list[dict] = []
        self.loads: list[dict] = []
        self.signal_on: dict[str, int] = {}  # "POST /update_weights_from_disk" -> signal.SIGINT
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        # a short poll: shutdown() waits out one poll interval (the default 0.5 s was paid at every teardown)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeSGLang":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- behaviour ----------------------------------------------------------------------------------------------
    def tokens_for(self, prompt_ids: list[int], n: int) -> list[int]:
        base = sum(prompt_ids) % 97
        return [(base + i + self.bias) % 1000 + 1 for i in range(n)]

    def load(self, body: dict) -> tuple[int, dict]:
        path = Path(str(body.get("model_path", "")))
        refuse = self.refuse_update or (self.refuse_after_loads is not None and len(self.loads) >= self.refuse_after_loads)
        if refuse or not (path / "config.json").is_file():
            why = "refused by test" if refuse else f"no config.json in {path}"
            return 400, {"success": False, "message": f"Failed to update weights: {why}.", "num_paused_requests": 0}
        weights = path / "fake_weights.json"
        self.bias = json.loads(weights.read_text()).get("bias", 0) if weights.is_file() else 0
        self.model_path = str(path)
        version = body.get("weight_version")
        self.loads.append({"model_path": str(path), "weight_version": version})
        message = "Succeeded to update model weights."
        if version is not None:
            self.weight_version = "stale-" + version if self.wrong_version else version
            message += f" Weight version updated to {version}."
        return 200, {"success": True, "message": message, "num_paused_requests": 0}

    def generate(self, body: dict) -> dict:
        ids = body.get("input_ids") or [ord(c) % 256 for c in str(body.get("text", ""))]
        n = int((body.get("sampling_params") or {}).get("max_new_tokens", 4))
        out = self.tokens_for(ids, n)
        meta = {"id": "req-1", "finish_reason": {"type": "length", "length": n}, "prompt_tokens": len(ids),
                "completion_tokens": n, "cached_tokens": 0, "weight_version": self.weight_version}
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = [[None if i == 0 else -1.0, t, None] for i, t in enumerate(ids)]
            meta["output_token_logprobs"] = [[-0.5 - 0.01 * i, t, None] for i, t in enumerate(out)]
        return {"text": " ".join(f"t{t}" for t in out), "output_ids": out, "meta_info": meta}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, status: int, body, content_type: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                sig = fake.signal_on.pop(getattr(self, "call", ""), None)
                if sig is not None:
                    os.kill(os.getpid(), sig)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client stopped waiting (signal_on)
                    pass

            def _body(self) -> dict:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                return json.loads(raw) if raw else {}

            def do_GET(self):
                self.call = f"GET {self.path}"
                fake.calls.append(self.call)
                if self.path in ("/health", "/health_generate"):
                    return self._send(200, b"", "text/plain")
                if self.path in ("/get_model_info", "/model_info"):
                    return self._send(200, {"model_path": fake.model_path, "tokenizer_path": fake.model_path,
                                            "is_generation": True, "preferred_sampling_params": None,
                                            "weight_version": fake.weight_version})
                if self.path == "/get_weight_version":
                    return self._send(200, {"weight_version": fake.weight_version})
                if self.path == "/flush_cache":
                    return self._flush()
                self._send(404, {"detail": "Not Found"})

            def _flush(self):
                if fake.busy_flushes > 0:
                    fake.busy_flushes -= 1
                    return self._send(400, b"Cache flushed.\nPlease check backend logs for more details. (When there "
                                           b"are running or waiting requests, the operation will not be performed.)\n",
                                      "text/plain")
                self._send(200, b"Cache flushed.\n", "text/plain")

            def do_POST(self):
                self.call = f"POST {self.path}"
                fake.calls.append(self.call)
                body = self._body()
                if self.path == "/flush_cache":
                    return self._flush()
                if self.path == "/pause_generation":
                    fake.paused = True
                    return self._send(200, {"message": "Generation paused successfully.", "status": "ok"})
                if self.path == "/continue_generation":
                    fake.paused = False
                    return self._send(200, {"message": "Generation continued successfully.", "status": "ok"})
                if self.path == "/update_weights_from_disk":
                    return self._send(*fake.load(body))
                if self.path == "/generate":
                    if fake.paused:
                        return self._send(503, {"error": {"message": "generation is paused"}})
                    return self._send(200, fake.generate(body))
                if self.path == "/v1/chat/completions":
                    return self._chat(body)
                self._send(404, {"detail": "Not Found"})

            def _chat(self, body: dict):
                """OpenAI chat as SGLang serves it: `logprobs` + `return_prompt_token_ids` + `return_meta_info`
                put `prompt_token_ids` and `meta_info` on each choice; the two return_* flags are 400 on a stream."""
                stream = body.get("stream") is True
                if stream and (body.get("return_meta_info") or body.get("return_prompt_token_ids")):
                    return self._send(400, {"object": "error", "message": "return_meta_info is not supported with "
                                            "streaming. Please set stream=false when using return_meta_info=true.",
                                            "type": "BadRequestError", "param": None, "code": 400})
                text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
                gen = fake.generate({"text": text, "sampling_params": {"max_new_tokens": body.get("max_tokens", 4)},
                                     "return_logprob": True})
                version = fake.answer_versions.pop(0) if fake.answer_versions else fake.weight_version
                fake.chat_bodies.append(body)
                mi = gen["meta_info"]
                usage = {"prompt_tokens": mi["prompt_tokens"], "completion_tokens": mi["completion_tokens"],
                         "total_tokens": mi["prompt_tokens"] + mi["completion_tokens"]}
                model = body.get("model", "m")
                if stream:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    if fake.swap_mid_stream is not None:
                        fake.weight_version = fake.swap_mid_stream
                    for word in gen["text"].split():
                        chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": model,
                                 "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    if (body.get("stream_options") or {}).get("include_usage"):
                        chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": model,
                                 "choices": [], "usage": usage}
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                choice = {"index": 0, "message": {"role": "assistant", "content": gen["text"]},
                          "finish_reason": "length"}
                if body.get("logprobs"):
                    choice["logprobs"] = {"content": [{"token": f"t{t}", "logprob": lp, "bytes": None,
                                                       "top_logprobs": []}
                                                      for lp, t, _ in mi["output_token_logprobs"]]}
                if body.get("return_prompt_token_ids"):
                    choice["prompt_token_ids"] = [ord(c) % 256 for c in text]
                if body.get("return_meta_info"):
                    choice["meta_info"] = {**mi, "weight_version": version}
                    if not body.get("logprobs"):
                        choice["meta_info"].pop("output_token_logprobs", None)
                return self._send(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
                                        "choices": [choice], "usage": usage, "metadata": {"weight_version": version}})

        return Handler
