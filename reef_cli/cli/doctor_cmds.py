"""`reef doctor`: the thin CLI over reef_cli/doctor.py."""

from __future__ import annotations

import typer

from .context import Env, emit_json


def doctor(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """Check this machine and project: Python and reef, the agents' CLIs against their pinned versions, wrappers
    first on PATH, the store, ledger, state permissions and installed harnesses, configured endpoints. Each line is
    ok, warn or fail with its fix; exits 1 when anything fails (warnings alone exit 0)."""
    from ..doctor import diagnose, render

    env: Env = ctx.obj
    report = diagnose(env.cwd, env.scenario_name, env.environ)
    if as_json:
        emit_json(report.to_json())
    else:
        print(render(report.checks))
        c = report.counts()
        print(f"\n{c['ok']} ok, {c['warn']} warning(s), {c['fail']} failure(s)")
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
