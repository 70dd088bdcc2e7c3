"""A stand-in agent CLI for wrapper tests: reports what it loaded like Claude Code and pi do, then exits as told.

Set as the wrapper's binary with REEF_<NAME>_BIN. It reads its config dir from the env var named by FAKE_AGENT_DIR_VAR
(default CLAUDE_CONFIG_DIR), prints one `init` event (JSON line) listing the files there and their first line, and
behaves per its arguments:
    --exit N           exit with status N
    --kill SIG         kill itself with that signal (e.g. TERM)
    --wait-signal F    write F once ready, then wait; on SIGTERM write F.got and die of SIGTERM
    --touch F          create F (proves the agent ran)
Every argument is echoed in the event, so tests see what the wrapper passed through.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def main(argv: list[str]) -> int:
    var = os.environ.get("FAKE_AGENT_DIR_VAR", "CLAUDE_CONFIG_DIR")
    cfg = os.environ.get(var, "")
    loaded = {}
    for dirpath, _dirs, files in os.walk(cfg) if cfg else ():
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                loaded[os.path.relpath(path, cfg)] = f.readline().decode("utf-8", "replace").strip()
    event = {"type": "system", "subtype": "init", "cwd": os.getcwd(), "argv": argv, "config_dir": cfg,
             "skills": sorted(p.split("/")[1] for p in loaded if p.startswith("skills/") and p.endswith("SKILL.md")),
             "loaded": loaded, "reef_release": os.environ.get("REEF_RELEASE_ID")}
    print(json.dumps(event), flush=True)
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False}), flush=True)
    it = iter(argv)
    for arg in it:
        if arg == "--touch":
            open(next(it), "w").close()
        elif arg == "--exit":
            return int(next(it))
        elif arg == "--kill":
            os.kill(os.getpid(), getattr(signal, "SIG" + next(it)))
            time.sleep(5)
        elif arg == "--wait-signal":
            ready = next(it)

            def on_term(signum, _frame):
                open(ready + ".got", "w").close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

            signal.signal(signal.SIGTERM, on_term)
            open(ready, "w").close()
            time.sleep(30)
            return 99
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
