"""`reef harness compile` and `reef harness install`: one harness, compiled and installed for each agent."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .context import Env, emit_json, note


def _release(store, ref: str | None):
    return store.find(ref) if ref else store.require_head()


def compile_cmd(
    ctx: typer.Context,
    agent: str = typer.Option(..., "--agent", "-a", help="claude, opencode, pi or codex."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the compiled tree here (default: only list it)."),
    release: Optional[str] = typer.Option(None, "--release", help="Release to compile (default: the head)."),
    worktree: bool = typer.Option(False, "--worktree", help="Compile the working tree instead of a release."),
    layout: str = typer.Option("project", "--layout", help="project (CLAUDE.md, .claude/...) or config (the agent's config dir)."),
    force: bool = typer.Option(False, "--force", help="With --out: overwrite or remove files in DIR that differ from "
                               "what reef last wrote there (your edits), after copying them to .reef/backups/."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Compile the harness for one agent, honouring its file precedence, size caps and frontmatter rules."""
    from ..adapters import load
    from ..compile import compile_harness
    from ..errors import InvalidInput

    env: Env = ctx.obj
    store = env.store()
    if worktree and release:
        raise InvalidInput("--worktree and --release are mutually exclusive")
    adapter = load(agent)
    rel = None if worktree else _release(store, release)
    files = store.worktree_files() if worktree else store.files_of(rel)
    result = compile_harness(files, adapter, layout=layout)
    written = removed = kept = ()
    backup = None
    if out is not None:
        from ..compile_out import write_out

        res = write_out(out if out.is_absolute() else env.cwd / out, result, rel.release_id if rel else None,
                        force=force, backup_root=store.project.state / "backups")
        written, removed, backup, kept = res.written, res.removed, res.backup, res.kept
    if as_json:
        emit_json({**result.to_json(), "release": rel.to_json() if rel else None, "out": str(out) if out else None,
                   "written": list(written), "removed": list(removed),
                   "backup": str(backup) if backup else None, "backed_up": list(kept)})
        return
    for w in result.warnings:
        note(f"warning: {w}")
    from ..printable import printable  # harness paths are anyone's names: a newline or ESC in one is shown escaped

    what = "the working tree" if rel is None else f"release {rel.release_id} (step {rel.step})"
    print(f"{adapter.title} ({adapter.name}, {layout} layout) from {what}:")
    for path, entry in result.files.items():
        print(printable(f"  {len(entry.data):8d}  {path}  <- {', '.join(result.sources.get(path, ()))}"))
    if out is not None:
        print(printable(f"wrote {len(written)} file(s), removed {len(removed)} stale file(s) in {out}"))
    if backup is not None:
        print(printable(f"kept a backup of {len(kept)} file(s) you had changed in {out}: {backup}"))


def install_cmd(
    ctx: typer.Context,
    adapter_name: str = typer.Option(..., "--adapter", help="claude, opencode or pi."),
    dest: Optional[Path] = typer.Option(None, "--dest", help="Install root (default: under your data directory)."),
    bin_dir: Optional[Path] = typer.Option(None, "--bin-dir", help="Where to put the reef-<adapter> wrapper (default: ~/.local/bin; env REEF_BIN_DIR)."),
    release: Optional[str] = typer.Option(None, "--release", help="Release to install (default: the head)."),
    print_script: bool = typer.Option(False, "--print", help="Print a self-contained shell script instead (pipe it to bash)."),
    force: bool = typer.Option(False, "--force", help="Overwrite files in the install root (and a wrapper script) that reef did not install."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    no_hook: bool = typer.Option(False, "--no-hook", help="claude: do not add reef's SessionEnd/Stop hook to your "
                                 "Claude Code settings (it ingests plain `claude` sessions in this project)."),
) -> None:
    """Install the compiled harness and the reef-<adapter> wrapper, bound to this project and scenario."""
    from ..adapters import find_binary, install_hint, load
    from ..install import install, shell_script

    env: Env = ctx.obj
    store = env.store()
    adapter = load(adapter_name)
    rel = _release(store, release)
    root = None if dest is None else (dest if dest.is_absolute() else env.cwd / dest)
    bins = None if bin_dir is None else (bin_dir if bin_dir.is_absolute() else env.cwd / bin_dir)
    if print_script:
        sys.stdout.write(shell_script(store, adapter, release=rel, root=root, bin_dir=bins, environ=env.environ))
        return
    res = install(store, adapter, release=rel, root=root, bin_dir=bins, environ=env.environ, force=force)
    binary = find_binary(adapter, env.environ)
    hook = None
    if adapter.name == "claude" and not no_hook:
        from ..hook import install_claude_hook

        path, changed = install_claude_hook(env.environ)
        hook = {"settings": str(path), "changed": changed}
    if as_json:
        emit_json({**res.to_json(), "agent_binary": binary, "hook": hook})
        return
    r = res.record
    for w in res.warnings:
        note(f"warning: {w}")
    if res.current:
        print(f"already current: {adapter.name} harness at release {r.release_id} (step {r.step}) in {r.agent_dir}")
    else:
        print(f"installed release {r.release_id} (step {r.step}) for {adapter.title} in {r.agent_dir}: "
              f"{len(res.written)} written, {len(res.removed)} removed")
    for link in res.replaced_links:
        note(f"replaced a symlink at {link} (reef never writes through links)")
    if r.wrapper:
        print(f"wrapper: {r.wrapper} (run it from any directory: reef-{adapter.name} [{adapter.binary} args...])")
    if hook and hook["changed"]:
        print(f"hook: reef ingests Claude Code sessions in this project when they end ({hook['settings']}, "
              "SessionEnd/Stop; --no-hook to skip)")
    if binary is None:
        note(f"warning: {install_hint(adapter)}")


def register(app: typer.Typer) -> None:
    app.command("compile")(compile_cmd)
    app.command("install")(install_cmd)
