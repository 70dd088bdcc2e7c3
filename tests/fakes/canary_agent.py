"""A canary agent whose model is whatever serves $OPENAI_BASE_URL (the weight gate's `reef serve`): it sends the task
prompt as one chat completion with the real OpenAI client shape (urllib, no SDK needed) and prints the answer.
`canary_agent.py check LO HI` is the task's check: score 1 when the answer's first token tN has LO <= N < HI."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request


def ask(prompt: str) -> int:
    # what the weight gate hands every agent: a reef-<agent> wrapper would route through the same gateway
    assert os.environ["REEF_VIA_SERVE"] == os.environ["REEF_SERVE_URL"], "REEF_VIA_SERVE not set by the weight gate"
    body = {"model": "fake", "messages": [{"role": "user", "content": prompt}], "max_tokens": 3}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            answer = json.loads(resp.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        print(f"model call failed: {exc.code} {exc.read()[:200]!r}", file=sys.stderr)
        return 1
    print(answer)
    return 0


def check(lo: int, hi: int) -> int:
    text = open(os.environ["REEF_AGENT_STDOUT"]).read().split()
    n = int(text[0][1:]) if text and text[0].startswith("t") else -1
    print(f"first token {n}")
    print(f"score: {1 if lo <= n < hi else 0}")
    return 0


if __name__ == "__main__":
    if os.environ.get("CANARY_AGENT_HANG"):  # a step caught mid-gate: say so (a file named by our pid), then hang
        open(os.path.join(os.environ["CANARY_AGENT_HANG"], str(os.getpid())), "w").close()
        import time

        time.sleep(30)
    if sys.argv[1] == "check":
        sys.exit(check(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(ask(sys.argv[1]))
