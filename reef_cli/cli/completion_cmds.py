"""Shell completion for bash, zsh and fish: `reef completion show SHELL`, `reef completion install [--shell S]`.

Completion rides on click's machinery (typer's scripts and `_REEF_COMPLETE=complete_<shell>` protocol). Commands and
options come from the command tree itself; dynamic values (scenario names, release ids, adapters) come from the
callbacks below, which `attach` sets on the parameters by name when — and only when — a completion request is being
answered, so neither the command modules nor the start-up of `reef run` / `reef report` pay anything for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_REEF_COMPLETE"
PROG = "reef"
RC_MARK = "# reef shell completion"

app = typer.Typer(help="Shell completion for bash, zsh and fish.", no_args_is_help=True)


# -- dynamic values --------------------------------------------------------------------------------------------------
def _env(ctx):
    """The project and scenario the command line being completed names (-C, --scenario), or the current ones."""
    from .context import Env

    root = ctx.find_root()
    scenario = ctx.params.get("scenario") if ctx.info_name == "init" else None
    return Env.at(root.params.get("directory"), root.params.get("scenario") or scenario)


def _items(values, incomplete: str):
    from typer._click.shell_completion import CompletionItem

    return [CompletionItem(v, help=h) for v, h in values if v.startswith(incomplete)]


def complete_scenarios(ctx, param, incomplete: str):
    try:
        return _items(((s, None) for s in _env(ctx).project().scenarios()), incomplete)
    except Exception:  # completion never prints a traceback into the user's prompt
        return []


def complete_releases(ctx, param, incomplete: str):
    """Release ids, newest first, each with its step and reason as help (zsh and fish show it)."""
    try:
        store = _env(ctx).store()
        rels = list(reversed(store.releases()))
    except Exception:
        return []
    return _items(((r.release_id, f"step {r.step}: {r.reason}") for r in rels), incomplete)


def complete_adapters(ctx, param, incomplete: str):
    try:
        from ..adapters import load, names

        return _items(((n, load(n).title) for n in names()), incomplete)
    except Exception:
        return []


def complete_executors(ctx, param, incomplete: str):
    from ..executors import KINDS

    return _items(((k, None) for k in KINDS), incomplete)


# parameter name -> completer; `diff` names its two releases a and b
BY_NAME = {"scenario": complete_scenarios, "release": complete_releases, "expect_head": complete_releases,
           "candidate": complete_releases, "baseline": complete_releases, "adapter": complete_adapters,
           "adapter_name": complete_adapters, "executor": complete_executors}
BY_COMMAND = {("diff", "a"): complete_releases, ("diff", "b"): complete_releases,
              ("compile", "agent"): complete_adapters}


def attach(command) -> None:
    """Set the dynamic completers on every parameter of the click command tree that takes such a value."""
    stack = [command]
    while stack:
        cmd = stack.pop()
        for param in cmd.params:
            fn = BY_COMMAND.get((cmd.name, param.name)) or BY_NAME.get(param.name)
            if fn is not None:
                param._custom_shell_complete = fn  # what click's `shell_complete=` argument sets
        stack.extend(getattr(cmd, "commands", {}).values())


def prepare(command) -> None:
    """Called by main.run when $_REEF_COMPLETE asks for completions: register the shells, attach the values."""
    from typer._completion_classes import completion_init

    completion_init()
    attach(command)


# -- scripts and where they go ---------------------------------------------------------------------------------------
def script(shell: str) -> str:
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell) + "\n"


def detect_shell(environ: dict) -> str:
    from ..errors import InvalidInput

    name = Path(environ.get("SHELL") or "").name
    if name not in SHELLS:
        raise InvalidInput(f"cannot tell the shell from SHELL='{environ.get('SHELL', '')}'; "
                           f"pass --shell {'|'.join(SHELLS)}")
    return name


def target(shell: str, environ: dict) -> tuple[Path, Path | None, str | None]:
    """(script path, rc file to source it from or None, line to add there or None)."""
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    data = Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    config = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    if shell == "bash":
        # bash-completion loads this directory lazily; the rc line covers a bash without that package
        path = data / "bash-completion" / "completions" / PROG
        return path, home / ".bashrc", f"[ -f {path} ] && . {path}  {RC_MARK}"
    if shell == "zsh":
        path = home / ".zfunc" / f"_{PROG}"
        return path, home / ".zshrc", f"fpath+=({path.parent}); autoload -Uz compinit && compinit  {RC_MARK}"
    return config / "fish" / "completions" / f"{PROG}.fish", None, None  # fish autoloads this directory


def install(shell: str, environ: dict) -> list[str]:
    """Write the script and, once, the rc line; idempotent. Returns what was done, one sentence each."""
    from ..durable import write_atomic

    path, rc, line = target(shell, environ)
    done = []
    data = script(shell).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not (path.is_file() and path.read_bytes() == data):
        write_atomic(path, data)
        done.append(f"wrote {path}")
    if rc is not None and line is not None:
        try:
            text = rc.read_text()
        except FileNotFoundError:
            text = ""
        if RC_MARK not in text:
            with open(rc, "a") as f:
                f.write(("" if not text or text.endswith("\n") else "\n") + line + "\n")
            done.append(f"added a line to {rc}")
    return done or [f"{shell} completion already installed in {path}"]


# -- commands --------------------------------------------------------------------------------------------------------
SHELL_HELP = "bash, zsh or fish (default: from $SHELL)."


@app.command("show")
def show(shell: str = typer.Argument(..., help="bash, zsh or fish.")) -> None:
    """Print the completion script for SHELL (e.g. `reef completion show bash > /etc/bash_completion.d/reef`)."""
    from ..errors import InvalidInput

    if shell not in SHELLS:
        raise InvalidInput(f"unknown shell '{shell}'; use one of: {', '.join(SHELLS)}")
    typer.echo(script(shell), nl=False)


@app.command("install")
def install_cmd(ctx: typer.Context, shell: Optional[str] = typer.Option(None, "--shell", help=SHELL_HELP)) -> None:
    """Install completion for your shell (idempotent); it takes effect in new shells."""
    from ..errors import InvalidInput

    environ = ctx.obj.environ
    shell = shell or detect_shell(environ)
    if shell not in SHELLS:
        raise InvalidInput(f"unknown shell '{shell}'; use one of: {', '.join(SHELLS)}")
    for sentence in install(shell, environ):
        print(sentence)
    print(f"{shell} completion for reef takes effect in new shells")


def register(app_: typer.Typer) -> None:
    app_.add_typer(app, name="completion")
