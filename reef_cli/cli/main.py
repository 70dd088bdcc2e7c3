"""The `reef` entry point and the one place that turns exceptions into messages and exit codes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import ExitCode, ReefError
from .context import Env


def _new_app() -> typer.Typer:
    return typer.Typer(
        name="reef",
        help="reef: make coding agents better the more they are used — a Git-backed, gated, self-improving harness.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


app = _new_app()


def _print_version() -> None:
    from .. import __version__

    print(f"reef {__version__}")
    raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", help="Print reef's version and exit.", is_eager=True,
                                 callback=lambda v: _print_version() if v else None),
    directory: Optional[Path] = typer.Option(None, "-C", help="Run as if reef was started in DIR."),
    scenario: Optional[str] = typer.Option(None, "--scenario", "-s", help="Scenario to use (default: the project's default; env REEF_SCENARIO)."),
) -> None:
    cwd = Path.cwd()
    if directory is not None:
        cwd = (cwd / directory).resolve()
        if not cwd.is_dir():
            raise ReefError(f"-C {directory}: not a directory")
    ctx.obj = Env(cwd=cwd, scenario_name=scenario)


# Commands run after every agent session: building only their own module keeps start-up lean.
HOT_COMMANDS = {"run", "report"}


def _register(app: typer.Typer) -> None:
    from . import gate_cmds, harness_cmds, ledger_cmds, loop_cmds, store_cmds

    store_cmds.register(app)
    gate_cmds.register(app)
    loop_cmds.register(app)
    app.add_typer(harness_cmds.app, name="harness")
    from . import evolve_cmds

    evolve_cmds.register_root(app)
    app.add_typer(ledger_cmds.app, name="ledger")


_apps: dict[str | None, typer.Typer] = {}


def _first_command(argv: list[str]) -> str | None:
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-C", "--scenario", "-s"):
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg
    return None


def build_app(argv: list[str]) -> typer.Typer:
    """The full command tree, or for a hot command just that command (same options, same callback)."""
    name = _first_command(argv)
    key = name if name in HOT_COMMANDS else None
    if key not in _apps:
        if key is None:
            _register(app)
            _apps[None] = app
        else:
            from . import loop_cmds

            hot = _new_app()
            hot.callback()(_root)
            loop_cmds.register(hot)
            _apps[key] = hot
    return _apps[key]


def _crash_log(exc: BaseException) -> Path:
    import traceback  # only on a crash: it pulls in linecache and tokenize (~8 ms)

    base = Path(os.environ.get("XDG_STATE_HOME") or (Path.home() / ".local" / "state")) / "reef"
    try:
        base.mkdir(parents=True, exist_ok=True)
        path = base / "crash.log"
        with open(path, "a") as f:
            f.write("".join(traceback.format_exception(exc)))
        return path
    except OSError:
        import tempfile

        path = Path(tempfile.gettempdir()) / "reef-crash.log"
        with open(path, "a") as f:
            f.write("".join(traceback.format_exception(exc)))
        return path


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (tests call this in-process)."""
    from typer import main as typer_main

    argv = sys.argv[1:] if argv is None else list(argv)
    click_cmd = typer_main.get_command(build_app(argv))
    try:  # typer >= 0.20 vendors click; older typer uses the click package (the one shim for that internal)
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover
        import click.exceptions as click_exc
    try:
        rv = click_cmd.main(args=argv, prog_name="reef", standalone_mode=False)
        return int(rv) if isinstance(rv, int) else 0
    except ReefError as exc:
        sys.stderr.write(f"reef: error: {exc}\n")
        return int(exc.exit_code)
    except (getattr(click_exc, "Exit", typer.Exit), typer.Exit) as exc:
        return int(exc.exit_code)
    except (getattr(click_exc, "Abort", typer.Abort), typer.Abort):
        sys.stderr.write("reef: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except click_exc.ClickException as exc:
        exc.show()
        return int(ExitCode.USAGE) if isinstance(exc, click_exc.UsageError) else int(ExitCode.ERROR)
    except KeyboardInterrupt:
        sys.stderr.write("reef: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:  # a bug, not a user error: short line here, traceback in a file
        path = _crash_log(exc)
        sys.stderr.write(f"reef: unexpected error: {type(exc).__name__}: {exc} (traceback in {path})\n")
        return int(ExitCode.ERROR)


def main() -> None:
    sys.exit(run())
