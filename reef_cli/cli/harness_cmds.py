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

    from .context import cell, console

    table = Table()
    for col in ("path", "zone", "automatic write", "reason"):
        table.add_column(col)
    for d in decisions:
        table.add_row(cell(d.path), d.zone, d.automatic_write, cell(d.reason))
    console().print(table)


def _zone_path(root, path: str) -> str:
    """Zones name paths relative to the project root: an absolute path inside it is made relative, one outside it
    (or the root itself) is refused rather than written into harness.yaml as a glob that can never match."""
    import os

    from ..errors import InvalidInput
    from ..printable import printable

    from ..zones import _bad_char

    bad = _bad_char(path)
    if bad is not None:  # the guard keeps such a path Frozen anyway; harness.yaml gets no escape in it
        raise InvalidInput(f"{printable(path)}: {bad}, which no zone may name; nothing published")
    if not os.path.isabs(path):
        return path
    real_root = os.path.realpath(root)
    for candidate in (os.path.abspath(path), os.path.realpath(path)):
        rel = os.path.relpath(candidate, real_root if candidate.startswith(real_root) else root)
        if rel != "." and not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    raise InvalidInput(f"{path} is outside the project {root}; zones name paths inside it")


def _zone_change(ctx: typer.Context, path: str, target: str, operation: str, as_json: bool) -> None:
    from ..config import CONFIG_NAME, edit_zones, parse_config
    from ..durable import read_nofollow
    from ..errors import ConflictError, PolicyError
    from ..gitstore import Entry
    from ..printable import printable
    from ..zones import FROZEN, decide

    env: Env = ctx.obj
    store = env.store()
    head = store.require_head()
    files = store.files_of(head)
    worktree_cfg = store.project.root / CONFIG_NAME
    published = files[CONFIG_NAME].data
    if read_nofollow(worktree_cfg) != published:
        raise ConflictError(f"{worktree_cfg} has unpublished edits; publish or revert them before changing zones")
    path = _zone_path(store.project.root, path)
    new_text = edit_zones(files[CONFIG_NAME].data.decode("utf-8"), path, target, source=str(worktree_cfg))
    if target != FROZEN:  # a path the guard keeps Frozen whatever the zones say would publish a no-op
        after = decide(store.project.root, parse_config(new_text, source=str(worktree_cfg)).zone_map(), path)
        if after.zone == FROZEN:
            raise PolicyError(f"{path} stays Frozen whatever the zones say ({after.reason}); nothing published")
    files[CONFIG_NAME] = Entry(new_text.encode("utf-8"), files[CONFIG_NAME].mode)
    res = store.publish(reason=f"{operation} {path} -> {target}", operation=operation, files=files,
                        expected_head=head.release_id)
    if res.created:
        from ..project import write_atomic

        if read_nofollow(worktree_cfg) != published:  # the compare-and-swap: an edit saved during the publish is kept
            raise ConflictError(
                f"{printable(path)} is now {target} in release {res.release.release_id} (step {res.release.step}), "
                f"but {worktree_cfg} changed while reef was publishing it; your edit is kept and the file was not "
                f"rewritten — bring the release's zones into it ('reef diff') before you publish it")
        write_atomic(worktree_cfg, new_text.encode("utf-8"))
    if as_json:
        emit_json({"created": res.created, "release": res.release.to_json()})
    elif res.created:
        print(f"{printable(path)} is now {target}: release {res.release.release_id} (step {res.release.step})")
    else:
        print(f"{printable(path)} is already {target}; nothing published")


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
