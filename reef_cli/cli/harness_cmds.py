"""`reef harness ...`: zones now; reflect/evolve/promote join here."""

from __future__ import annotations

from typing import List

import typer

from .context import Env, emit_json

app = typer.Typer(help="Work on the harness: zones, learning, promotion.", no_args_is_help=True)


@app.command("zone")
def zone(ctx: typer.Context, paths: List[str] = typer.Argument(..., help="Paths relative to the project root."),
         as_json: bool = typer.Option(False, "--json")) -> None:
    """Print each path's zone and whether an automatic write would be allowed."""
    from ..zones import classify_many

    env: Env = ctx.obj
    store = env.store()
    decisions = classify_many(store.project.root, store.worktree_config().zone_map(), paths)
    if as_json:
        emit_json([d.to_json() for d in decisions])
        return
    from rich.table import Table

    from .context import console

    table = Table()
    for col in ("path", "zone", "automatic write", "reason"):
        table.add_column(col)
    for d in decisions:
        table.add_row(d.path, d.zone, d.automatic_write, d.reason)
    console().print(table)


def _zone_change(ctx: typer.Context, path: str, target: str, operation: str, as_json: bool) -> None:
    from ..config import CONFIG_NAME, edit_zones
    from ..errors import ConflictError
    from ..gitstore import Entry

    env: Env = ctx.obj
    store = env.store()
    head = store.require_head()
    files = store.files_of(head)
    worktree_cfg = store.project.root / CONFIG_NAME
    if worktree_cfg.read_bytes() != files[CONFIG_NAME].data:
        raise ConflictError(f"{worktree_cfg} has unpublished edits; publish or revert them before changing zones")
    new_text = edit_zones(files[CONFIG_NAME].data.decode("utf-8"), path, target, source=str(worktree_cfg))
    files[CONFIG_NAME] = Entry(new_text.encode("utf-8"), files[CONFIG_NAME].mode)
    res = store.publish(reason=f"{operation} {path} -> {target}", operation=operation, files=files,
                        expected_head=head.release_id)
    if res.created:
        from ..project import write_atomic

        write_atomic(worktree_cfg, new_text.encode("utf-8"))
    if as_json:
        emit_json({"created": res.created, "release": res.release.to_json()})
    elif res.created:
        print(f"{path} is now {target}: release {res.release.release_id} (step {res.release.step})")
    else:
        print(f"{path} is already {target}; nothing published")


@app.command("freeze")
def freeze(ctx: typer.Context, path: str = typer.Argument(..., help="Path or glob to freeze."),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Put PATH in the Frozen zone (a human-only release)."""
    _zone_change(ctx, path, "frozen", "freeze", as_json)


@app.command("unfreeze")
def unfreeze(ctx: typer.Context, path: str = typer.Argument(..., help="Path or glob to unfreeze."),
             to: str = typer.Option("evolvable", "--to", help="Zone to move it to: evolvable, learned or managed."),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Move PATH out of the Frozen zone (a human-only release)."""
    from ..errors import InvalidInput

    if to not in ("evolvable", "learned", "managed"):
        raise InvalidInput(f"--to {to}: expected evolvable, learned or managed")
    _zone_change(ctx, path, to, "unfreeze", as_json)


from . import adapter_cmds  # noqa: E402  compile and install, registered on this sub-app

adapter_cmds.register(app)

from . import evolve_cmds  # noqa: E402  reflect/evolve/promote/reject/demote/proposals/patterns

evolve_cmds.register(app)
