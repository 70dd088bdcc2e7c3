"""The typer app behind `reef`: every command but the hot common case (hot.py), with typer's own exceptions turned
into exit codes here and everything else in boundary.guarded."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import ExitCode
from .context import Env
from .boundary import guarded
from .hot import GLOBAL_VALUE_OPTIONS


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
    ctx.obj = Env.at(directory, scenario)


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
    app.add_typer(ledger_cmds.repair_app, name="repair")
    from . import ingest_cmds

    ingest_cmds.register(app, harness_cmds.app)
    from . import doctor_cmds

    doctor_cmds.register(app)
    from . import completion_cmds

    completion_cmds.register(app)
    from . import page_cmds

    page_cmds.register(app)
    from . import train_cmds

    train_cmds.register(app)
    from . import remote_cmds

    remote_cmds.register(app)
    from . import serve_cmds

    serve_cmds.register(app)
    from . import model_cmds

    model_cmds.register(app)


_apps: dict[str | None, typer.Typer] = {}


def _first_command(argv: list[str]) -> str | None:
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in GLOBAL_VALUE_OPTIONS:
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


def _optional_value(argv: list[str], option: str, command: str) -> list[str]:
    """`reef harness evolve --branch [NAME]`: an option whose value may be left out (typer has no such option), so a
    bare `--branch` gets an empty value."""
    if command not in argv or option not in argv:
        return argv
    i = argv.index(option)
    if i + 1 == len(argv) or argv[i + 1].startswith("-"):
        return [*argv[:i + 1], "", *argv[i + 1:]]
    return argv


class _Interrupted(BaseException):
    """A Ctrl-C carried past typer, which (>= 0.20) turns a KeyboardInterrupt into a bare exit 130 with nothing said;
    main.run hands it back to boundary.guarded as the KeyboardInterrupt it was, for its one line."""


def _carry_interrupts(click_cmd) -> None:
    """Make a Ctrl-C inside any command leave typer as _Interrupted (not caught there as KeyboardInterrupt is)."""
    invoke = click_cmd.invoke

    def carried(ctx):
        try:
            return invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted() from exc

    click_cmd.invoke = carried


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (tests call this in-process)."""
    from typer import main as typer_main

    argv = sys.argv[1:] if argv is None else list(argv)
    argv = _optional_value(argv, "--branch", "evolve")
    click_cmd = typer_main.get_command(build_app(argv))
    _carry_interrupts(click_cmd)
    if os.environ.get("_REEF_COMPLETE"):  # a shell asks for completions: only then load that machinery
        from .completion_cmds import prepare

        prepare(click_cmd)
    try:  # typer >= 0.20 vendors click; older typer uses the click package (the one shim for that internal)
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover
        import click.exceptions as click_exc
    def invoke() -> int:
        try:
            rv = click_cmd.main(args=argv, prog_name="reef", standalone_mode=False)
            return int(rv) if isinstance(rv, int) else 0
        except (getattr(click_exc, "Exit", typer.Exit), typer.Exit) as exc:
            return int(exc.exit_code)
        except _Interrupted:
            raise KeyboardInterrupt from None  # guarded says so: `reef: interrupted`, exit 130
        except (getattr(click_exc, "Abort", typer.Abort), typer.Abort):
            sys.stderr.write("reef: interrupted\n")
            return int(ExitCode.INTERRUPTED)
        except click_exc.ClickException as exc:
            exc.show()
            return int(ExitCode.USAGE) if isinstance(exc, click_exc.UsageError) else int(ExitCode.ERROR)

    return guarded(invoke)
