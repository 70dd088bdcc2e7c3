"""A remote URL's credentials are never stored by reef nor printed: `reef remote add` refuses them (REEF_GIT_TOKEN
and git's credential helpers carry secrets instead), and every URL reef prints has its userinfo removed — also for
one stored before, and for the user's own `origin` that reef falls back to."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pygit2
import pytest

from reef_cli.gitstore import public_url, url_credentials

TOKEN = "ghp_tok3nSECRETabcdefghijklmnopqrstuvwx"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def secrets_under(path: Path, needle: str) -> list[str]:
    return [str(p) for p in path.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.fixture
def project(tmp_path, reef):
    p = tmp_path / "p"
    p.mkdir()
    git("init", "-q", cwd=p)
    assert reef("-C", str(p), "init").code == 0
    return p


@pytest.mark.parametrize("url", [f"https://alice:{TOKEN}@127.0.0.1:9/x.git",
                                 "https://glpat-Zz9Yy8Xx7Ww6Vv5Uu4Tt@127.0.0.1:9/x.git"])
def test_remote_add_refuses_a_url_with_a_password_or_token(reef, project, url):
    r = reef("-C", str(project), "remote", "add", "team", url)
    assert r.code == 4
    assert r.err.strip() == ("reef: error: remote 'team': the URL https://127.0.0.1:9/x.git carries a password or "
                             "token; reef never stores one — add the URL without it and set REEF_GIT_TOKEN, or let a "
                             "git credential helper supply it")
    assert secrets_under(project / ".reef", url.split("@")[0].rsplit(":", 1)[-1].lstrip("/")) == []


def test_plain_urls_are_kept_as_given(reef, project, tmp_path):
    for name, url in (("ssh", "ssh://git@example.com/x.git"), ("scp", "git@example.com:x/y.git"),
                      ("user", "https://alice@example.com/x.git")):
        assert reef("-C", str(project), "remote", "add", name, url).code == 0
    listed = json.loads(reef("-C", str(project), "remote", "list", "--json").out)
    assert listed == [{"name": "scp", "url": "git@example.com:x/y.git"},
                      {"name": "ssh", "url": "ssh://git@example.com/x.git"},
                      {"name": "user", "url": "https://example.com/x.git"}]


def test_a_url_stored_with_credentials_is_never_printed(reef, project):
    git("config", "--file", str(project / ".reef" / "git" / "config"), "remote.old.url",
        f"https://bob:{TOKEN}@127.0.0.1:9/y.git", cwd=project)
    r = reef("-C", str(project), "remote", "list", "--json")
    assert json.loads(r.out) == [{"name": "old", "url": "https://127.0.0.1:9/y.git"}]
    r = reef("-C", str(project), "remote", "list")
    assert TOKEN not in r.out and "https://127.0.0.1:9/y.git" in r.out
    for cmd in ("push", "pull", "sync"):
        r = reef("-C", str(project), cmd, "old", "--json")
        assert r.code == 1, (cmd, r.out, r.err)
        assert TOKEN not in r.out + r.err and "bob" not in r.err
        verb = "push" if cmd == "push" else "fetch"
        assert r.err.startswith(f"reef: error: https://127.0.0.1:9/y.git: {verb} failed ("), r.err


def test_the_users_origin_with_a_token_is_used_but_never_printed_or_stored(reef, project):
    git("remote", "add", "origin", f"https://ci:{TOKEN}@127.0.0.1:9/r.git", cwd=project)
    r = reef("-C", str(project), "pull")
    assert r.code == 1 and TOKEN not in r.err
    assert r.err.startswith("reef: error: https://127.0.0.1:9/r.git: fetch failed ("), r.err
    assert secrets_under(project / ".reef", TOKEN) == []


def test_a_fetch_leaves_no_fetch_head_holding_the_url(reef, project, tmp_path):
    bare = tmp_path / "remote.git"
    pygit2.init_repository(str(bare), bare=True)
    assert reef("-C", str(project), "remote", "add", "origin", str(bare)).code == 0
    assert reef("-C", str(project), "push").code == 0
    r = reef("-C", str(project), "pull", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["url"] == str(bare)
    assert not (project / ".reef" / "git" / "FETCH_HEAD").exists()


@pytest.mark.parametrize("url, shown, secret", [
    (f"https://a:{TOKEN}@h/x", "https://h/x", TOKEN),
    ("https://a@h/x", "https://h/x", None),
    ("ssh://git@h/x", "ssh://git@h/x", None),
    ("ssh://git:pw@h/x", "ssh://h/x", "pw"),
    ("git@h:x/y", "git@h:x/y", None),
    ("/srv/x.git", "/srv/x.git", None),
])
def test_public_url(url, shown, secret):
    assert public_url(url) == shown and url_credentials(url) == secret
