"""Commands over the harness store: init, status, publish, log, show, diff, checkout, rollback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .context import Env, console, emit_json, note

JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")


def init(
    ctx: typer.Context,
    template: Optional[str] = typer.Option(None, "--template", "-t", help="Starter harness: claude, agents or minimal."),
    import_path: Optional[Path] = typer.Option(None, "--import", help="Adopt the harness found in PATH (CLAUDE.md, AGENTS.md, .claude/, skills)."),
    scenario: Optional[str] = typer.Option(None, "--scenario", "-s", help="Scenario to create (default: 'default')."),
    recipe: Optional[str] = typer.Option(None, "--recipe", help="Learning recipe bound to the scenario (default: harness.yaml's)."),
    as_json: bool = JSON,
) -> None:
    """Create .reef/ here and publish release 1 of the harness (idempotent)."""
    from ..bootstrap import init_project

    env: Env = ctx.obj
    if import_path is not None and not import_path.is_absolute():
        import_path = env.cwd / import_path
    res = init_project(env.cwd, template=template, import_path=import_path, scenario=scenario or env.scenario_name, recipe=recipe)
    rel = res.publish.release
    if as_json:
        emit_json({"project": str(res.project.root), "scenario": res.scenario, "recipe": res.recipe,
                   "created": res.publish.created, "source": res.source, "release": rel.to_json(),
                   "warnings": list(res.warnings)})
        return
    for w in res.warnings:
        note(f"warning: {w}")
    if res.publish.created:
        print(f"Initialised reef in {res.project.state} (scenario '{res.scenario}', recipe '{res.recipe}', from {res.source})")
        print(f"Published release {rel.release_id} (step {rel.step}, content {rel.content_id[:12]})")
    else:
        print(f"Already initialised: scenario '{res.scenario}' (recipe '{res.recipe}') is at step {rel.step} ({rel.release_id})")


def status(ctx: typer.Context, as_json: bool = JSON) -> None:
    """Show the head release and working-tree changes to the harness, like `git status`."""
    env: Env = ctx.obj
    store = env.store()
    info = store.info()
    weights = store.head()
    if weights is not None and weights.runtime_load_id:  # a weights scenario: its working tree is not its content
        from ..weights.state import weights_status

        lock, gate = weights_status(store, env.environ)
        if as_json:
            emit_json({"project": str(store.project.root), "scenario": store.scenario, "recipe": info.recipe,
                       "head": weights.to_json(), "ledger_path": str(store.ledger_path), "weights": True,
                       "lock": lock, "weight_gate": gate})
        else:
            print(f"scenario {store.scenario} (recipe {info.recipe}) holds weight releases: step {weights.step} "
                  f"{weights.release_id} [{weights.operation}], runtime load id {weights.runtime_load_id}")
            if lock is not None:
                print(f"weight updates LOCKED since {lock.get('at')} ({lock.get('reason')}); check the engine, "
                      "then run 'reef train --unlock'")
            print(f"weight gate: {gate}")
        return
    head, changes = store.status()
    from ..ingest import failures  # what the hook and the wrappers could not ingest: their output reaches no one

    failed = failures.load(store.dir)
    if as_json:
        emit_json({"project": str(store.project.root), "scenario": store.scenario, "recipe": info.recipe,
                   "head": head.to_json(), "ledger_path": str(store.ledger_path), "clean": not changes,
                   "changes": [c.to_json() for c in changes], "ingest_failures": [f.to_json() for f in failed]})
        return
    print(f"scenario {store.scenario} (recipe {info.recipe}) at step {head.step}: {head.release_id} [{head.operation}]")
    if failed:
        print(f"ingest: {failures.summary(failed)}; 'reef status --json' lists them")
    if not changes:
        print("harness clean: working tree matches the head release")
        return
    from ..evolve import in_flight  # evolve's hook: an interrupted evolve is finished, not published over
    from ..rollback_journal import pending

    if interrupted := in_flight(store):
        print(interrupted)
    if rolling := pending(store):
        print(f"A {rolling.sentence()}")
        print("Not yet written by the rollback (or edited since):")
    else:
        print("Unpublished changes (publish with: reef publish -m MESSAGE):")
    for c in changes:
        print(f"  {c.change:9} {c.path}  [{c.zone}]")


def publish(
    ctx: typer.Context,
    message: Optional[str] = typer.Option(None, "-m", "--message", help="Why this change is published."),
    expect_head: Optional[str] = typer.Option(None, "--expect-head", help="Publish only if the head is still this release id."),
    from_git: Optional[str] = typer.Option(None, "--from-git", metavar="REF", help="Publish the harness as committed at REF of your Git repository (a merged 'evolve --branch' proposal keeps its link)."),
    allow_secret: bool = typer.Option(False, "--allow-secret", help="Publish even when a changed file holds what looks like a secret (by default that is refused, naming the file and line)."),
    as_json: bool = JSON,
) -> None:
    """Publish the working tree's harness changes as a new release (a human publish)."""
    env: Env = ctx.obj
    store = env.store()
    if message is None and from_git is None:
        from ..errors import UsageError

        raise UsageError("publish needs -m MESSAGE (or --from-git REF)")
    expected = ...
    if expect_head is not None:
        expected = store.find(expect_head).release_id if expect_head else None
        head = store.head()
        if head is not None and expected != head.release_id:
            from ..errors import ConflictError

            raise ConflictError(
                f"--expect-head {expect_head} is not the head of scenario '{store.scenario}' (the head is "
                f"{head.release_id}, step {head.step}); nothing was published"
            )
    if from_git is not None:
        from ..proposal_branch import publish_from_git

        res = publish_from_git(store, from_git, reason=message, expected_head=expected, allow_secret=allow_secret)
    else:
        config = store.worktree_config()
        files = store.worktree_files(config)  # what is checked is what is published
        if not allow_secret:
            from ..harness_secrets import in_changes, refuse

            refuse(in_changes(store, files, config))
        res = store.publish(reason=message, expected_head=expected, files=files)
    if as_json:
        emit_json({"created": res.created, "release": res.release.to_json(), "changes": [c.to_json() for c in res.changes]})
        return
    if not res.created:
        print(f"nothing to publish: the working tree matches release {res.release.release_id} (step {res.release.step})")
        return
    print(f"Published release {res.release.release_id} (step {res.release.step}): {len(res.changes)} file(s) changed")
    for c in res.changes:
        print(f"  {c.change:9} {c.path}  [{c.zone}]")


def log(ctx: typer.Context, limit: int = typer.Option(0, "-n", help="Show at most N releases (0: all)."), as_json: bool = JSON) -> None:
    """List releases, newest first."""
    store = ctx.obj.store()
    releases = list(reversed(store.releases()))
    if limit:
        releases = releases[:limit]
    if as_json:
        emit_json([r.to_json() for r in releases])
        return
    from rich.table import Table

    table = Table(title=f"releases of scenario '{store.scenario}'", show_lines=False)
    table.add_column("step", justify="right")
    table.add_column("release", no_wrap=True)
    table.add_column("operation")
    table.add_column("content", no_wrap=True)
    loads = any(r.runtime_load_id for r in releases)
    if loads:  # weight releases: the engine load that serves them
        table.add_column("load id", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("reason", overflow="fold")
    from rich.text import Text

    from ..printable import printable

    def cell(text: str) -> Text:  # a pulled release's fields are anyone's text: no escapes, no rich markup
        return Text(printable(text))

    for r in releases:
        load = (cell(r.runtime_load_id or "-"),) if loads else ()
        table.add_row(str(r.step), cell(r.release_id), cell(r.operation), cell(r.content_id[:12]), *load,
                      cell(r.created_at[:19].replace("T", " ")), cell(r.reason))
    console().print(table)


def show(ctx: typer.Context, release: str = typer.Argument(..., help="Release id, unique prefix, step number, or HEAD~N."), as_json: bool = JSON) -> None:
    """Show one release and the files it holds."""
    store = ctx.obj.store()
    rel = store.find(release)
    files = store.files_of(rel)
    if as_json:
        emit_json({**rel.to_json(), "files": {p: {"bytes": len(e.data), "mode": f"{e.mode:o}"} for p, e in files.items()}})
        return
    from ..printable import printable

    for k, v in rel.to_json().items():  # a pulled release's reason, meta and paths are anyone's text
        print(f"{k:18} {printable(str(v))}")
    print("files:")
    for p, e in files.items():
        print(f"  {e.mode:o} {len(e.data):8d}  {printable(p)}")


def diff(ctx: typer.Context, a: str = typer.Argument(...), b: str = typer.Argument(...)) -> None:
    """Unified diff per file between two releases (control characters shown escaped: use `reef checkout` for bytes)."""
    from ..printable import printable_lines

    store = ctx.obj.store()
    sys.stdout.write(printable_lines(store.diff(store.find(a), store.find(b))))


def checkout(
    ctx: typer.Context,
    release: str = typer.Argument(...),
    dest: Path = typer.Argument(..., help="Directory to write the release into."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files that hold other content."),
) -> None:
    """Write a release byte-for-byte into DIR (never through symlinks; never over other files without --force)."""
    from ..checkout import checkout as write_release

    store = ctx.obj.store()
    rel = store.find(release)
    files = store.files_of(rel)
    head = store.head()
    target = dest if dest.is_absolute() else ctx.obj.cwd / dest
    written = write_release(target, files, project_root=store.project.root, force=force,
                            head_files=store.files_of(head) if head is not None else None,
                            label=f"release {rel.release_id} (step {rel.step})")
    print(f"Wrote {written} of {len(files)} file(s) of release {rel.release_id} (step {rel.step}) to {dest}")


def rollback(
    ctx: typer.Context,
    release: str = typer.Argument(..., help="Release to return to (id, prefix, step or HEAD~N)."),
    force: bool = typer.Option(False, "--force", help="Overwrite unpublished working-tree changes."),
    as_json: bool = JSON,
) -> None:
    """Publish an earlier release's content as a new release; history is never rewritten."""
    store = ctx.obj.store()
    head = store.head()
    if head is not None and head.runtime_load_id:  # a weight release: the engine must reload the checkpoint too
        from ..errors import InvalidInput

        raise InvalidInput(f"scenario '{store.scenario}' holds weight releases; roll it back with "
                           f"'reef -s {store.scenario} train --rollback {release} --engine URL'")
    res = store.rollback(release, force=force)
    if as_json:
        emit_json({"created": res.created, "release": res.release.to_json()})
        return
    if res.finished:
        print(f"Finished the interrupted rollback: the working tree now holds release {res.release.release_id} "
              f"(step {res.release.step})")
        return
    if not res.created:
        print(f"nothing to do: the head (step {res.release.step}) already has that content")
        return
    r = res.release
    print(f"Rolled back: release {r.release_id} (step {r.step}) republishes {r.meta['rollback_target_release_id']}")


def register(app: typer.Typer) -> None:
    for fn in (init, status, publish, log, show, diff, checkout, rollback):
        app.command(fn.__name__)(fn)
