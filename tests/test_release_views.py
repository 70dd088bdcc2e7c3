"""`reef log` and `reef show` print release fields (which arrive from teammates by `reef pull`) with control
characters escaped and no rich markup taken from them."""

from __future__ import annotations

import subprocess

REASON = "innocent\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2K\rHIDDEN\x1b[8mconcealed [/bold] [link=x]y"
SHOWN = "innocent\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2K\\x0dHIDDEN\\x1b[8mconcealed [/bold] [link=x]y"


def test_log_and_show_escape_a_reasons_control_characters(reef, tmp_path):
    p = tmp_path / "p"
    p.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=p, check=True)
    assert reef("-C", str(p), "init").code == 0
    with open(p / "CLAUDE.md", "a") as f:
        f.write("- y\n")
    assert reef("-C", str(p), "publish", "-m", REASON).code == 0
    for args in (("log",), ("show", "HEAD")):
        r = reef("-C", str(p), *args)
        assert r.code == 0, r.err
        assert "\x1b" not in r.out and "\x07" not in r.out and "\r" not in r.out, args
        assert SHOWN in r.out, (args, r.out)
