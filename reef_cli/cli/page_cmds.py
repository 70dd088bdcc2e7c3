"""`reef page`: the thin CLI over reef_cli/page.py."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .context import Env


def page(ctx: typer.Context,
         out: Optional[Path] = typer.Option(None, "--out", "-o", help="Directory to write index.html into "
                                            "(default: .reef/page/<scenario>/); an index.html there is replaced only "
                                            "when reef wrote it and it is unchanged."),
         open_: bool = typer.Option(False, "--open", help="Open the page in the default browser.")) -> None:
    """Write a static, offline HTML page: release timeline, canary score chart, bullets with their evidence and
    utility, gate verdicts with intervals, pending proposals."""
    from ..page import write_page

    env: Env = ctx.obj
    if out is not None and not out.is_absolute():
        out = env.cwd / out
    path = write_page(env.store(), out)
    print(path)
    if open_:
        import webbrowser

        if not webbrowser.open(path.as_uri()):
            from .context import note

            note(f"no browser found; open {path.as_uri()} yourself")


def register(app: typer.Typer) -> None:
    app.command("page")(page)
