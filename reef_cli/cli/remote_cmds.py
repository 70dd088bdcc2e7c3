"""Releases through Git remotes: reef remote add|remove|list, reef push, reef pull, reef sync, reef merge."""

from __future__ import annotations

from typing import Optional

import typer

from .context import Env, console, emit_json, note

JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")
NAME = typer.Argument(None, help="Remote name (default: the only reef remote, else 'origin', also read from the "
                                 "project's own Git repository).")

app = typer.Typer(help="Git remotes that releases are pushed to and pulled from.", no_args_is_help=True)


def _project_for_pull(env: Env):
    """The project, or — in a fresh clone with no .reef/ yet — a new one at the root of the user's Git repository."""
    from ..errors import NotFound
    from ..gitstore import user_repo_root
    from ..project import Project

    try:
        return env.project(), False
    except NotFound:
        root = user_repo_root(env.cwd)
        if root is None:
            raise
        here = env.cwd.resolve()  # the project is the nearest directory holding harness.yaml, else the repo's root
        for candidate in (here, *here.parents):
            if (candidate / "harness.yaml").is_file() or candidate == root.resolve():
                return Project(candidate), True
        return Project(root), True


@app.command("add")
def remote_add(ctx: typer.Context, name: str = typer.Argument(..., help="Remote name."),
               url: str = typer.Argument(..., help="A bare repository path, file://, ssh or https URL.")) -> None:
    """Add a remote to push releases to and pull them from."""
    from ..remote import add_remote

    env: Env = ctx.obj
    add_remote(env.project(), name, url)
    print(f"Added remote '{name}'")


@app.command("remove")
def remote_remove(ctx: typer.Context, name: str = typer.Argument(..., help="Remote name.")) -> None:
    """Forget a remote and what we last saw of it."""
    from ..remote import remove_remote

    env: Env = ctx.obj
    remove_remote(env.project(), name)
    print(f"Removed remote '{name}'")


@app.command("list")
def remote_list(ctx: typer.Context, as_json: bool = JSON) -> None:
    """List the remotes."""
    from ..remote import public_remotes

    env: Env = ctx.obj
    known = public_remotes(env.project())
    if as_json:
        emit_json([{"name": n, "url": u} for n, u in sorted(known.items())])
        return
    if not known:
        print("no remotes (add one with: reef remote add NAME URL)")
        return
    from rich.table import Table

    table = Table("name", "url")
    for n, u in sorted(known.items()):
        table.add_row(n, u)
    console().print(table)


def _show(result, as_json: bool, verb: str) -> None:
    if as_json:
        emit_json(result.to_json())
        return
    if not result.scenarios:
        print(f"{verb} {result.remote} ({result.url}): no scenarios")
    for s in result.scenarios:
        extra = f", {s.releases} release(s)" if s.releases else ""
        print(f"{verb} {result.remote}: scenario {s.scenario} {s.state}{extra}"
              f" ({(s.local or '-')[:12]} → {(s.remote or '-')[:12]})" if verb == "pull"
              else f"{verb} {result.remote}: scenario {s.scenario} {s.state}{extra}")
        if s.note:
            note(s.note)


def push(ctx: typer.Context, name: Optional[str] = NAME,
         all_scenarios: bool = typer.Option(False, "--all", help="Push every scenario, not only the current one."),
         as_json: bool = JSON) -> None:
    """Push the scenario's release chain; only fast-forwards the remote from the head we last saw (else exit 3)."""
    from ..remote import push as do_push, resolve

    env: Env = ctx.obj
    project = env.project()
    rname, url = resolve(project, name)
    _show(do_push(project, rname, url, only=None if all_scenarios else env.scenario()), as_json, "push")


def pull(ctx: typer.Context, name: Optional[str] = NAME, as_json: bool = JSON) -> None:
    """Fetch every scenario's chain and fast-forward to it (works in a fresh clone); diverged heads → exit 3."""
    from ..remote import pull as do_pull, resolve

    env: Env = ctx.obj
    project, fresh = _project_for_pull(env)
    rname, url = resolve(project, name)
    result = do_pull(project, rname, url, current=None if fresh else env.scenario())
    if fresh:
        names = [s.scenario for s in result.scenarios if s.state == "created"]
        if not names:
            from ..errors import NotFound

            raise NotFound(f"remote '{rname}' ({result.url}) holds no reef scenario; nothing was created")
        default = "default" if "default" in names else names[0]
        project.create_state(env.scenario_name or default)
        from ..remote import _follow
        from ..store import HarnessStore

        msg = _follow(HarnessStore(project, env.scenario_name or default), None)
        if msg:
            note(msg)
    _show(result, as_json, "pull")


def sync(ctx: typer.Context, name: Optional[str] = NAME, as_json: bool = JSON) -> None:
    """Pull, then push (and publish a merged proposal branch: see 'reef publish --from-git')."""
    from ..remote import pull as do_pull, push as do_push, resolve

    from ..errors import NotFound

    env: Env = ctx.obj
    project = env.project()
    try:
        rname, url = resolve(project, name)
    except NotFound:
        if name is not None:
            raise
        rname = url = None
    pulled = do_pull(project, rname, url, current=env.scenario(), only=env.scenario()) if url else None
    published = _publish_merged_proposals(env.store())
    pushed = do_push(project, rname, url, only=env.scenario()) if url else None
    if as_json:
        emit_json({"pull": pulled.to_json() if pulled else None, "push": pushed.to_json() if pushed else None,
                   "published": published.to_json() if published else None})
        return
    if published is not None:
        print(f"Published release {published.release_id} (step {published.step}): {published.reason}")
    if pulled is None:
        note("no remote to pull from or push to (add one with 'reef remote add NAME URL')")
        return
    _show(pulled, False, "pull")
    _show(pushed, False, "push")


def _publish_merged_proposals(store):
    """A proposal of this project's own evolve, merged into the checked-out branch, published from HEAD
    (proposal_branch.merged_proposal); anything else is named on stderr and nothing is published."""
    from ..proposal_branch import merged_proposal

    res, why = merged_proposal(store)
    if why:
        note(why)
    return res.release if res is not None and res.created else None


def merge(ctx: typer.Context, name: Optional[str] = NAME,
          workers: Optional[int] = typer.Option(None, "--workers", help="Parallel canary episodes."),
          no_fetch: bool = typer.Option(False, "--no-fetch", help="Merge the remote's chain as last fetched (by pull, push or merge) without contacting it; an unreachable remote falls back to it too."),
          as_json: bool = JSON) -> None:
    """Merge a diverged remote chain: learned blocks joined by bullet id, then gated like any candidate."""
    from ..merge import merge_remote
    from ..remote import resolve

    env: Env = ctx.obj
    store = env.store()
    rname, url = resolve(store.project, name)
    out = merge_remote(store, rname, url=None if no_fetch else url, workers=workers, note=note)
    if as_json:
        emit_json(out.to_json())
    else:
        for line in out.lines():
            print(line)
    if out.exit_code:
        raise typer.Exit(out.exit_code)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="remote")
    root.command("push")(push)
    root.command("pull")(pull)
    root.command("sync")(sync)
    root.command("merge")(merge)
