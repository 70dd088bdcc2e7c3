"""The `reef` console script. `reef run -- CMD` runs after every agent session, so its well-formed common case is
parsed here without importing typer (~30 ms); anything else — help, a usage error, every other command — goes to
the typer app in `main.py`, which defines the same options (a test keeps the two in step)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import ExitCode, ReefError

GLOBAL_VALUE_OPTIONS = {"-C": "directory", "--scenario": "scenario", "-s": "scenario"}
RUN_FLAGS = {"--observe-only": ("observe_only", True), "--store-content": ("store_content", True),
             "--digest-only": ("store_content", False)}
RUN_VALUE_OPTIONS = {"--adapter": "adapter"}


def parse_fast_run(argv: list[str]) -> dict | None:
    """`[-C DIR] [--scenario S] run [--observe-only] [--adapter A] [--store-content|--digest-only] -- CMD...`,
    or None for anything this parser does not fully understand (the typer app then handles it)."""
    out = {"directory": None, "scenario": None, "observe_only": False, "adapter": None, "store_content": None}
    i, n = 0, len(argv)
    while i < n and argv[i] != "run":
        arg, value = argv[i].split("=", 1) if argv[i].startswith("--") and "=" in argv[i] else (argv[i], None)
        if arg not in GLOBAL_VALUE_OPTIONS:
            return None
        if value is None:
            if i + 1 >= n:
                return None
            value, i = argv[i + 1], i + 1
        out[GLOBAL_VALUE_OPTIONS[arg]] = value
        i += 1
    i += 1
    while i < n and argv[i] != "--":
        arg, value = argv[i].split("=", 1) if argv[i].startswith("--") and "=" in argv[i] else (argv[i], None)
        if arg in RUN_FLAGS and value is None:
            key, flag = RUN_FLAGS[arg]
            out[key] = flag
        elif arg in RUN_VALUE_OPTIONS:
            if value is None:
                if i + 1 >= n:
                    return None
                value, i = argv[i + 1], i + 1
            out[RUN_VALUE_OPTIONS[arg]] = value
        else:
            return None
        i += 1
    if i >= n or i + 1 >= n:
        return None  # no `--`, or nothing after it: let typer say what is missing
    out["cmd"] = argv[i + 1 :]
    return out


def record_run(env, cmd: list[str], *, observe_only: bool, adapter: str | None, store_content: bool | None) -> int:
    """Run CMD under the current release, print the receipt, return CMD's exit status."""
    from ..runs import run_recorded

    result = run_recorded(env.store(), list(cmd), adapter=adapter, observe_only=observe_only, cwd=env.cwd,
                          store_content=store_content)
    sys.stderr.write(f"reef: receipt {result.record.record_id} (release {result.release.release_id})\n")
    return result.exit_code


def crash_log(exc: BaseException) -> Path:
    import traceback  # only on a crash: it pulls in linecache and tokenize (~8 ms)

    text = "".join(traceback.format_exception(exc))
    base = Path(os.environ.get("XDG_STATE_HOME") or (Path.home() / ".local" / "state")) / "reef"
    try:
        base.mkdir(parents=True, exist_ok=True)
        path = base / "crash.log"
    except OSError:
        import tempfile

        path = Path(tempfile.gettempdir()) / "reef-crash.log"
    with open(path, "a") as f:
        f.write(text)
    return path


def guarded(fn) -> int:
    """The one place exceptions become messages and exit codes (typer's own exceptions are handled in main.run)."""
    try:
        return fn()
    except ReefError as exc:
        sys.stderr.write(f"reef: error: {exc}\n")
        return int(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("reef: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:  # a bug, not a user error: short line here, traceback in a file
        path = crash_log(exc)
        sys.stderr.write(f"reef: unexpected error: {type(exc).__name__}: {exc} (traceback in {path})\n")
        return int(ExitCode.ERROR)


def run_fast(opts: dict) -> int:
    from .context import Env

    def go() -> int:
        cwd = Path.cwd()
        if opts["directory"] is not None:
            cwd = (cwd / opts["directory"]).resolve()
            if not cwd.is_dir():
                raise ReefError(f"-C {opts['directory']}: not a directory")
        env = Env(cwd=cwd, scenario_name=opts["scenario"])
        return record_run(env, opts["cmd"], observe_only=opts["observe_only"], adapter=opts["adapter"],
                          store_content=opts["store_content"])

    return guarded(go)


def main() -> None:
    argv = sys.argv[1:]
    opts = parse_fast_run(argv)
    if opts is not None:
        sys.exit(run_fast(opts))
    from .main import run

    sys.exit(run(argv))
