"""`reef page`: collected from a real project (releases, gate records in the ledger, a pending proposal), rendered as
one offline HTML file, and checked in a real headless Chromium (Debian's `chromium`): the DOM it builds, and a
screenshot kept in the test's tmp dir. Skips the browser part cleanly when chromium is not installed."""

from __future__ import annotations

import json
import os
import re
import stat
import shutil
import subprocess
from pathlib import Path

import pytest

from reef_cli.page import PageData, ScorePoint, canary_scores, collect, render
from reef_cli.project import Project, ScenarioPaths
from reef_cli.releases import canonical
from reef_cli.store import HarnessStore

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EVIL = "<script>alert(1)</script>"


@pytest.fixture
def project(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    (root / "CLAUDE.md").write_text("# rules\n- be brief\n")
    assert reef("-C", str(root), "publish", "-m", f"second {EVIL}").code == 0
    store = HarnessStore(Project(root), "default")
    r1, r2 = store.releases()
    task = lambda tid, cur, cand: {"task_id": tid, "current": cur, "candidate": cand, "delta": cand - cur,  # noqa
                                   "status": "improved" if cand > cur else "same", "pairs": 2, "sentinel": False}
    ledger = ScenarioPaths(store.project, "default").ledger()
    ledger.append("gate", {"decision": "publish", "policy": "paired", "reason": "mean paired improvement +0.500",
                           "interval": {"lo": 0.25, "hi": 0.75, "level": 0.9}, "episodes_spent": 8,
                           "episodes_budget": 12, "baseline_release_id": r1.release_id,
                           "baseline_content_id": r1.content_id, "candidate_content_id": r2.content_id,
                           "per_task": [task("typo-fix", 0.0, 1.0), task("greeting", 0.5, 0.5)],
                           "bullet_utility": {"abc123": 0.4}},
                  release_id=r1.release_id, content_id=r1.content_id)
    ledger.append("gate", {"decision": "reject", "policy": "paired", "reason": "lower bound -0.100 <= 0",
                           "interval": {"lo": -0.1, "hi": 0.3, "level": 0.9}, "episodes_spent": 6,
                           "episodes_budget": 12, "baseline_release_id": r2.release_id,
                           "baseline_content_id": r2.content_id, "candidate_content_id": "f" * 40,
                           "per_task": [task("typo-fix", 1.0, 1.0)]},
                  release_id=r2.release_id, content_id=r2.content_id)
    from reef_cli.evolve.proposals import proposals_dir

    prop = {"proposal_id": "prop_0001", "status": "pending", "mode": "review", "created_at": "2026-12-01T10:00:00Z",
            "keys": ["do:run+test"], "diff": ["+ [CLAUDE.md] reef:abc123  Run the tests before finishing."]}
    (proposals_dir(store) / "prop_0001.json").write_bytes(canonical(prop) + b"\n")
    return root


def test_collect_reads_releases_gates_scores_and_pending_proposals(project):
    data = collect(HarnessStore(Project(project), "default"), now="2026-12-01T12:00:00Z")
    assert [r["step"] for r in data.releases] == [1, 2]
    assert [g["decision"] for g in data.gates] == ["publish", "reject"]
    # release 1 measured as the first gate's baseline (0.25), release 2 as its candidate (0.75), then as the second
    # gate's baseline (1.0): the latest measurement wins
    assert [(p.step, p.score) for p in data.scores] == [(1, 0.25), (2, 1.0)]
    assert [p["proposal_id"] for p in data.proposals] == ["prop_0001"]


def test_canary_scores_skip_unmeasured_releases():
    rels = [{"step": 1, "release_id": "r1", "content_id": "c1"}, {"step": 2, "release_id": "r2", "content_id": "c2"}]
    gates = [{"record_id": "g", "baseline_content_id": "c2", "candidate_content_id": "cx",
              "per_task": [{"current": 0.5, "candidate": 1.0}]}]
    assert canary_scores(rels, gates) == [ScorePoint(2, "r2", 0.5, "g")]


def test_render_is_offline_and_escapes_store_text():
    data = PageData(project="/p", scenario="default", generated_at="now",
                    releases=({"step": 1, "release_id": "r1", "content_id": "c", "operation": "init",
                               "reason": EVIL, "meta": {}},),
                    gates=(), scores=(), bullets=({"id": "b1", "text": EVIL, "evidence": ["rec_1"], "count": 2,
                                                   "polarity": "do", "utility": None},))
    page = render(data)
    assert EVIL not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "<script" not in page and "<link" not in page
    assert "default-src 'none'" in page
    assert 'id="chart-empty"' in page and 'id="no-proposals"' in page


def test_cli_writes_the_page(reef, project, tmp_path):
    r = reef("-C", str(project), "page", "--out", "site")
    assert r.code == 0, r.err
    path = project / "site" / "index.html"
    assert r.out.strip() == str(path)
    assert path.read_text().startswith("<!DOCTYPE html>")
    r = reef("-C", str(project), "page")
    assert r.out.strip() == str(project / ".reef" / "page" / "default" / "index.html")


def test_cli_outside_a_project_fails_with_one_line(reef, tmp_path):
    r = reef("-C", str(tmp_path), "page")
    assert r.code == 1 and r.err.startswith("reef: error: not a reef project")


def chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-extensions", f"--user-data-dir={cwd / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; install.sh --dev "
                                             "tries it as root)")
def test_page_renders_in_headless_chromium(reef, project, tmp_path):
    assert reef("-C", str(project), "page", "--out", str(tmp_path / "site")).code == 0
    url = (tmp_path / "site" / "index.html").as_uri()
    dom = chromium("--dump-dom", url, cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.count('class="release"') == 2 and html.count('class="gate"') == 2
    assert html.count('class="point"') == 2 and 'id="score-chart"' in html  # the SVG chart, one point per release
    assert "[+0.250, +0.750] at 90%" in html and "[-0.100, +0.300] at 90%" in html
    assert "prop_0001" in html and "Run the tests before finishing." in html
    assert "second &lt;script&gt;" in html and "<script>alert" not in html
    shot = tmp_path / "page.png"
    res = chromium(f"--screenshot={shot}", "--window-size=1200,1600", url, cwd=tmp_path)
    assert res.returncode == 0 and shot.stat().st_size > 10_000, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_out_pointing_at_a_file_fails_with_one_line_and_keeps_the_file(reef, project):
    """`reef page --out FILE` used to end in "unexpected error: FileExistsError"; the user's file must stay."""
    target = project / "notes.txt"
    target.write_bytes(b"my notes\n")
    r = reef("-C", str(project), "page", "--out", "notes.txt")
    assert r.code == 4, r.err
    assert r.err.strip() == (f"reef: error: --out {target} is a file, not a directory; "
                             "name a directory to write index.html into")
    assert target.read_bytes() == b"my notes\n"
    r = reef("-C", str(project), "page", "--out", "notes.txt/sub")
    assert r.code == 4 and r.err.startswith("reef: error: cannot write the page into") and "unexpected" not in r.err
    assert target.read_bytes() == b"my notes\n"
    (project / "site" / "index.html").mkdir(parents=True)
    r = reef("-C", str(project), "page", "--out", "site")
    assert r.code == 4 and "is a directory" in r.err


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["022", "000"])
def test_page_in_state_is_owner_only_and_out_of_it_keeps_the_umask(reef, tmp_path, umask):
    """The default page (.reef/page/<scenario>/) and a --out under .reef are reef's state: owner-only whatever the
    umask (reef doctor warned about a world-readable page). A --out elsewhere is the user's: 0644, narrowed by the
    umask, as before."""
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init").code == 0
    old = os.umask(umask)
    try:
        assert reef("-C", str(root), "page").code == 0
        assert reef("-C", str(root), "page", "--out", "site/reef").code == 0
        assert reef("-C", str(root), "page", "--out", ".reef/custom/page").code == 0
    finally:
        os.umask(old)
    for path, mode in ((".reef/page", 0o700), (".reef/page/default", 0o700), (".reef/page/default/index.html", 0o600)):
        assert stat.S_IMODE((root / path).stat().st_mode) == mode, path
    assert stat.S_IMODE((root / "site/reef/index.html").stat().st_mode) == 0o644 & ~umask
    assert stat.S_IMODE((root / "site/reef").stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((root / ".reef/custom/page/index.html").stat().st_mode) == 0o600
    assert stat.S_IMODE((root / ".reef/custom").stat().st_mode) == 0o700


def test_cli_out_refuses_an_index_html_reef_did_not_write_and_replaces_its_own(reef, project, tmp_path):
    """`reef page --out DIR` replaced a hand-written DIR/index.html (exit 0). Now it refuses like `harness compile
    --out` (exit 3, naming the file, the file kept) unless the page there is one reef wrote and nobody edited."""
    site = tmp_path / "site"
    site.mkdir()
    mine = site / "index.html"
    mine.write_bytes(b"<h1>my hand-written site</h1>\n")
    r = reef("-C", str(project), "page", "--out", str(site))
    assert r.code == 3, r.err
    assert r.err.strip() == (f"reef: error: {mine} exists and was not written by 'reef page' (or was edited "
                             "since); reef will not replace it \u2014 move it away or choose another --out")
    assert mine.read_bytes() == b"<h1>my hand-written site</h1>\n"
    mine.unlink()
    assert reef("-C", str(project), "page", "--out", str(site)).code == 0
    first = mine.read_bytes()
    assert first.startswith(b"<!DOCTYPE html>") and first.rstrip().endswith(b"-->")
    assert reef("-C", str(project), "page", "--out", str(site)).code == 0  # its own, unchanged page: replaced
    mine.write_bytes(mine.read_bytes().replace(b"<h1>", b"<h1>my note ", 1))  # the user edited reef's page
    edited = mine.read_bytes()
    r = reef("-C", str(project), "page", "--out", str(site))
    assert r.code == 3 and str(mine) in r.err and mine.read_bytes() == edited
    mine.unlink()
    mine.symlink_to(tmp_path / "elsewhere.html")
    r = reef("-C", str(project), "page", "--out", str(site))
    assert r.code == 3 and r.err.strip() == (f"reef: error: {mine} is a symlink that reef did not write; move it "
                                             "away or choose another --out")
    assert mine.is_symlink() and not (tmp_path / "elsewhere.html").exists()
    (project / ".reef" / "page" / "default").mkdir(parents=True, exist_ok=True)
    (project / ".reef" / "page" / "default" / "index.html").write_text("stale\n")
    assert reef("-C", str(project), "page").code == 0  # under .reef the page is reef's state: always rewritten
