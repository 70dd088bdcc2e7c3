"""The `reef` console script. The hot commands' well-formed common case (`reef run -- CMD`, `reef report`) is parsed
and run by hot.py without importing typer; anything else — help, a usage error, every other command — goes to the
typer app in main.py."""

from __future__ import annotations

import sys

from .hot import parse_fast, run_fast


def main() -> None:
    import os  # already loaded by the interpreter: free

    argv = sys.argv[1:]
    parsed = None if "_REEF_COMPLETE" in os.environ else parse_fast(argv)
    if parsed is not None:
        sys.exit(run_fast(*parsed))
    from .main import run

    sys.exit(run(argv))
