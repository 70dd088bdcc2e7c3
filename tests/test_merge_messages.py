"""`reef merge` and `reef push` name the true next step: merge looks at the remote as it is now, a push whose head
the remote already holds is up to date, and a both-sided conflict says how to get past it (pull cannot)."""

from __future__ import annotations

import subprocess

from test_pull_admission import pair  # noqa: F401  (fixture: A pushed, B a Git clone that pulled step 1)
from test_remote import git, ok


def append(path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line)


def both_published(reef, pair) -> tuple:  # noqa: F811
    """A and B each published over step 1, and B pushed: A's next merge has B's chain to fold in."""
    _, _, a, b = pair
    append(b / "CLAUDE.md", "\n- B's rule\n")
    ok(reef("-C", str(b), "publish", "-m", "b"))
    ok(reef("-C", str(b), "push"))
    append(a / "CLAUDE.local.md", "A's note\n")
    ok(reef("-C", str(a), "publish", "-m", "a"))
    return a, b


def test_merge_fetches_first_so_nothing_to_merge_is_never_stale(reef, pair):  # noqa: F811
    a, _b = both_published(reef, pair)
    # A has not pulled since B pushed: its tracking ref still says the remote is at step 1
    r = reef("-C", str(a), "merge")
    assert r.code == 0, (r.out, r.err)
    assert r.out.startswith("merge origin into scenario default: published as rel_")
    r = ok(reef("-C", str(a), "push"))
    assert "push origin: scenario default pushed" in r.out
    assert "- B's rule" in (a / "CLAUDE.md").read_text() and "A's note" in (a / "CLAUDE.local.md").read_text()


def test_a_push_the_remote_already_holds_is_up_to_date_not_a_conflict(reef, pair):  # noqa: F811
    _, bare, a, _ = pair
    append(a / "CLAUDE.md", "\n- another rule\n")
    ok(reef("-C", str(a), "publish", "-m", "a"))
    # a push killed after the remote moved and before reef noted it: the remote holds our head, our tracking ref not
    git("--git-dir", str(a / ".reef" / "git"), "push", "-q", str(bare),
        "refs/reef/scenarios/default:refs/reef/scenarios/default", cwd=a)
    r = reef("-C", str(a), "push")
    assert r.code == 0, r.err
    assert "push origin: scenario default up-to-date" in r.out
    assert r.err.strip() == "reef: the remote already held this head (an earlier push sent it)"
    assert "up-to-date" in ok(reef("-C", str(a), "push")).out and ok(reef("-C", str(a), "push")).err == ""


def test_a_both_sided_conflict_names_the_way_through_and_it_works(reef, pair):  # noqa: F811
    _, _, a, b = pair
    for side, who in ((a, "A"), (b, "B")):
        text = (side / "CLAUDE.md").read_text()
        (side / "CLAUDE.md").write_text(f"# {who}'s title\n" + text)
        ok(reef("-C", str(side), "publish", "-m", who))
    ok(reef("-C", str(b), "push"))
    assert reef("-C", str(a), "pull").code == 3  # diverged: pull cannot bring the two together
    r = reef("-C", str(a), "merge")
    assert r.code == 3
    ref = "refs/reef/remotes/origin/scenarios/default"
    assert r.err.strip() == (
        "reef: error: both sides changed CLAUDE.md outside reef's learned blocks; reef will not choose — take the "
        f"remote's version of each (git --git-dir .reef/git show {ref}:CLAUDE.md > CLAUDE.md), publish it, run "
        "'reef merge origin' again, then re-apply your edit and publish")
    theirs = subprocess.run(["git", "--git-dir", ".reef/git", "show", f"{ref}:CLAUDE.md"], cwd=a, check=True,
                            capture_output=True).stdout
    (a / "CLAUDE.md").write_bytes(theirs)
    ok(reef("-C", str(a), "publish", "-m", "take B's CLAUDE.md"))
    r = ok(reef("-C", str(a), "merge", "origin"))
    assert "published" in r.out
    ok(reef("-C", str(a), "push"))


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: a connection to it is refused at once, as offline."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def diverged_then_offline(reef, pair) -> tuple:  # noqa: F811
    """A and B published over step 1, B pushed, A's pull fetched B's chain (and refused: diverged); then the remote's
    URL in A points where nothing answers."""
    a, _b = both_published(reef, pair)
    assert reef("-C", str(a), "pull").code == 3
    url = f"http://127.0.0.1:{closed_port()}/hub.git"
    git("--git-dir", str(a / ".reef" / "git"), "remote", "set-url", "origin", url, cwd=a)
    return a, url


def test_merge_offline_merges_the_chain_already_fetched_and_says_so(reef, pair):  # noqa: F811
    a, url = diverged_then_offline(reef, pair)
    r = reef("-C", str(a), "merge")
    assert r.code == 0, r.err
    assert r.out.startswith("merge origin into scenario default: published as rel_")
    assert r.err == (f"reef: remote 'origin' cannot be reached ({url}: fetch failed (failed to connect to 127.0.0.1: "
                     f"Connection refused)); merging its chain as last fetched\n"), r.err
    assert "- B's rule" in (a / "CLAUDE.md").read_text() and "A's note" in (a / "CLAUDE.local.md").read_text()


def test_merge_no_fetch_never_contacts_the_remote(reef, pair):  # noqa: F811
    a, _ = diverged_then_offline(reef, pair)
    r = reef("-C", str(a), "merge", "--no-fetch")
    assert (r.code, r.err) == (0, "")
    assert r.out.startswith("merge origin into scenario default: published as rel_")


def test_merge_that_truly_needs_the_remote_says_so_in_one_line(reef, tmp_path):
    from conftest import reef_init

    p = reef_init(tmp_path / "p", "--template", "claude")
    url = f"http://127.0.0.1:{closed_port()}/hub.git"
    ok(reef("-C", str(p), "remote", "add", "origin", url))
    r = reef("-C", str(p), "merge")
    assert (r.code, r.err) == (1, f"reef: error: reef merge needs remote 'origin': it cannot be reached ({url}: fetch "
                                  "failed (failed to connect to 127.0.0.1: Connection refused)) and no chain of "
                                  "scenario 'default' was fetched from it before; nothing was merged — retry when it "
                                  "is reachable\n")
    r = reef("-C", str(p), "merge", "--no-fetch")
    assert (r.code, r.err) == (1, "reef: error: no chain of scenario 'default' fetched from remote 'origin'; run "
                                  "'reef pull origin'\n")
