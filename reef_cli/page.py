"""`reef page`: one static, offline HTML file about a scenario — the release timeline with each operation and reason,
the canary score per release as an inline SVG chart, every bullet in pattern memory with its evidence and measured
utility, the gate's verdicts with their intervals, and the proposals waiting for a human.

Two halves: `collect` reads the release log, the ledger's gate records, pattern memory and proposals into a
`PageData`; `render` turns that into HTML and does no I/O. The page has no scripts, fonts, images or links outside
itself, so it opens from a laptop on a plane and can be attached to a ticket. Every text from the store goes through
html.escape: reasons, feedback-derived bullet texts and task ids are user data.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from pathlib import Path

PAGE_NAME = "index.html"
# The page's last line: a digest of every byte before it. It is how a later `reef page --out` knows the index.html
# there is one it wrote and nobody has edited since, so it may replace it (anything else is the user's file).
_SEAL = b"<!-- written by reef page; sha256 of the bytes above: "
_SEAL_END = b" -->\n"


@dataclass(frozen=True)
class ScorePoint:
    step: int
    release_id: str
    score: float
    gate_record_id: str


@dataclass(frozen=True)
class PageData:
    project: str
    scenario: str
    generated_at: str
    releases: tuple[dict, ...]  # release log entries, oldest first (Release.to_json)
    gates: tuple[dict, ...]  # gate verdict payloads, oldest first, each with its record_id and release_id
    scores: tuple[ScorePoint, ...]  # canary score per release, by step
    bullets: tuple[dict, ...]  # pattern memory entries (Pattern.to_json)
    proposals: tuple[dict, ...] = ()  # pending proposals, without their memory copy
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def canary_scores(releases: list[dict], gates: list[dict]) -> list[ScorePoint]:
    """Each release whose content a gate measured gets the mean over canary tasks of that measurement: as the
    candidate (`candidate` per task) or as the baseline (`current`). The latest measurement of a content wins."""
    by_content: dict[str, tuple[float, str]] = {}
    for g in gates:
        tasks = g.get("per_task") or []
        rid = g.get("record_id") or ""
        base = _mean([t["current"] for t in tasks if isinstance(t.get("current"), (int, float))])
        cand = _mean([t["candidate"] for t in tasks if isinstance(t.get("candidate"), (int, float))])
        if base is not None and g.get("baseline_content_id"):
            by_content[g["baseline_content_id"]] = (base, rid)
        if cand is not None and g.get("candidate_content_id"):
            by_content[g["candidate_content_id"]] = (cand, rid)
    out = []
    for r in releases:
        hit = by_content.get(r.get("content_id", ""))
        if hit is not None:
            out.append(ScorePoint(int(r["step"]), r["release_id"], hit[0], hit[1]))
    return out


def collect(store, now: str | None = None) -> PageData:
    from .evolve import list_proposals, load_memory
    from .project import ScenarioPaths
    from .times import format_time, utc_now

    warnings: list[str] = []
    releases = [r.to_json() for r in store.releases()]
    gates = []
    ledger = ScenarioPaths(store.project, store.scenario).ledger()
    if ledger.path.exists():
        for rec in ledger.iter_records(kind="gate"):
            gates.append({**rec.payload, "record_id": rec.record_id, "release_id": rec.release_id,
                          "created_at": rec.created_at})
    bullets: list[dict] = []
    head = store.head()
    if head is not None:
        try:
            memory = load_memory(store, store.config_of(head), store.files_of(head))
            bullets = [memory.patterns[k].to_json() for k in sorted(memory.patterns)]
        except Exception as exc:  # a page about a damaged project still shows what it can
            warnings.append(f"pattern memory unreadable: {exc}")
    proposals = [{k: v for k, v in p.items() if k != "memory"} for p in list_proposals(store, "pending")]
    return PageData(project=str(store.project.root), scenario=store.scenario,
                    generated_at=now or format_time(utc_now()), releases=tuple(releases), gates=tuple(gates),
                    scores=tuple(canary_scores(releases, gates)), bullets=tuple(bullets),
                    proposals=tuple(proposals), warnings=tuple(warnings))


# -- rendering -------------------------------------------------------------------------------------------------------
def e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#1d2330;
padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #dde2ea;
padding-bottom:.3rem}.sub{color:#5b6577}table{border-collapse:collapse;width:100%}th,td{text-align:left;
vertical-align:top;padding:.35rem .5rem;border-bottom:1px solid #eef1f5}th{font-weight:600;color:#5b6577;
font-size:.85rem}code,.id{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.82rem}
.op{display:inline-block;padding:0 .4rem;border-radius:3px;background:#eef1f5}.publish{color:#17733a;font-weight:600}
.reject{color:#b42318;font-weight:600}.muted{color:#8a93a3}.warn{color:#9a6700}svg text{font-size:11px;fill:#5b6577}
ul.ev{margin:0;padding-left:1rem}
"""


def chart(scores: tuple[ScorePoint, ...], steps: int, width: int = 720, height: int = 220) -> str:
    """Canary score (0-1, or the observed range when outside it) against release step, as inline SVG."""
    if not scores:
        return '<p class="muted" id="chart-empty">No canary measurement yet: the gate has not run.</p>'
    left, right, top, bottom = 44, 16, 12, 30
    lo = min(0.0, min(p.score for p in scores))
    hi = max(1.0, max(p.score for p in scores))
    span_x = max(1, steps - 1)

    def x(step: int) -> float:
        return left + (width - left - right) * (step - 1) / span_x

    def y(score: float) -> float:
        return top + (height - top - bottom) * (hi - score) / (hi - lo)

    parts = [f'<svg id="score-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="canary score per release">']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eef1f5"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for s in range(1, steps + 1):
        if steps <= 20 or s % max(1, steps // 10) == 0 or s == 1:
            parts.append(f'<text x="{x(s):.1f}" y="{height - 10}" text-anchor="middle">{s}</text>')
    pts = " ".join(f"{x(p.step):.1f},{y(p.score):.1f}" for p in scores)
    parts.append(f'<polyline points="{pts}" fill="none" stroke="#2f6fde" stroke-width="2"/>')
    for p in scores:
        parts.append(f'<circle class="point" cx="{x(p.step):.1f}" cy="{y(p.score):.1f}" r="4" fill="#2f6fde" '
                     f'data-step="{p.step}" data-score="{p.score:.3f}"><title>step {p.step}: {p.score:.3f} '
                     f'({e(p.release_id)})</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _verdict_cell(meta: dict) -> str:
    gate = (meta or {}).get("gate") or {}
    if not gate:
        return '<span class="muted">not gated</span>' if (meta or {}).get("gated") is False else \
            '<span class="muted">-</span>'
    decision = gate.get("accepted_as") or gate.get("decision") or ""
    cls = "publish" if gate.get("decision") == "publish" or gate.get("accepted_as") else "reject"
    return f'<span class="{cls}">{e(decision)}</span>'


def _interval(iv) -> str:
    if not iv:
        return '<span class="muted">-</span>'
    return f"[{iv.get('lo', 0):+.3f}, {iv.get('hi', 0):+.3f}] at {float(iv.get('level', 0)):.0%}"


def _table(headers: tuple[str, ...], rows: list[str]) -> str:
    """One table of the page: a header row of `headers` (plain words, not escaped) over the already-rendered rows."""
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr>" + "".join(rows) + "</table>"


def _timeline(data: PageData) -> str:
    score = {p.release_id: p.score for p in data.scores}
    rows = []
    for r in reversed(data.releases):
        s = score.get(r["release_id"])
        rows.append(
            f'<tr class="release" id="{e(r["release_id"])}"><td>{e(r["step"])}</td><td><span class="op">'
            f'{e(r["operation"])}</span></td><td>{e(r["reason"])}</td><td>{_verdict_cell(r.get("meta") or {})}</td>'
            f'<td>{"" if s is None else f"{s:.2f}"}</td><td class="id">{e(r["release_id"])}<br>'
            f'<span class="muted">{e(r.get("created_at", ""))[:19]}</span></td></tr>')
    return _table(("step", "operation", "reason", "gate", "canary", "release"), rows)


def _gates(data: PageData) -> str:
    if not data.gates:
        return '<p class="muted">No gate verdicts yet.</p>'
    step_of = {r["release_id"]: r["step"] for r in data.releases}
    rows = []
    for g in reversed(data.gates):
        cls = "publish" if g.get("decision") == "publish" else "reject"
        tasks = ", ".join(f"{t.get('task_id')} {t.get('status')}" for t in g.get("per_task") or [])
        base = g.get("baseline_release_id") or g.get("release_id")
        rows.append(
            f'<tr class="gate"><td><span class="{cls}">{e(g.get("decision"))}</span></td><td>{e(g.get("policy"))}'
            f'</td><td>{_interval(g.get("interval"))}</td><td>{e(g.get("reason"))}</td>'
            f'<td>{e(g.get("episodes_spent"))} / {e(g.get("episodes_budget"))}</td>'
            f'<td>step {e(step_of.get(base, "?"))}</td><td>{e(tasks)}</td>'
            f'<td class="id">{e(g.get("record_id"))}</td></tr>')
    return _table(("verdict", "policy", "interval", "reason", "episodes", "against", "tasks", "record"), rows)


def _bullets(data: PageData) -> str:
    if not data.bullets:
        return '<p class="muted">Pattern memory is empty.</p>'
    measured: dict[str, float] = {}
    for g in data.gates:
        measured.update({k: float(v) for k, v in (g.get("bullet_utility") or {}).items()})
    rows = []
    for b in sorted(data.bullets, key=lambda b: (-int(b.get("count") or 0), b.get("id", ""))):
        utility = measured.get(b.get("id", ""), b.get("utility"))
        ev = "".join(f"<li class=\"id\">{e(x)}</li>" for x in (b.get("evidence") or [])[:8])
        more = len(b.get("evidence") or []) - 8
        if more > 0:
            ev += f'<li class="muted">and {more} more</li>'
        rows.append(
            f'<tr class="bullet" id="b-{e(b.get("id"))}"><td class="id">{e(b.get("id"))}</td><td>{e(b.get("polarity"))}'
            f'</td><td>{e(b.get("text"))}</td><td>{e(b.get("count"))}'
            f'{" (" + e(b.get("negatives")) + " against)" if b.get("negatives") else ""}</td>'
            f'<td>{"-" if utility is None else f"{float(utility):+.2f}"}</td><td><ul class="ev">{ev}</ul></td></tr>')
    return _table(("id", "kind", "bullet", "evidence", "utility", "records"), rows)


def _proposals(data: PageData) -> str:
    if not data.proposals:
        return '<p class="muted" id="no-proposals">No pending proposals.</p>'
    rows = []
    for p in data.proposals:
        diff = "<br>".join(e(line) for line in p.get("diff") or [])
        rows.append(f'<tr class="proposal"><td class="id">{e(p.get("proposal_id"))}</td><td>{e(p.get("mode"))}</td>'
                    f'<td>{e(", ".join(p.get("keys") or []))}</td><td><code>{diff}</code></td>'
                    f'<td>{e(p.get("created_at", ""))[:19]}</td></tr>')
    return (_table(("proposal", "mode", "keys", "change", "created"), rows)
            + "<p class=\"sub\">Decide with <code>reef harness promote ID</code> or "
              "<code>reef harness reject ID</code>.</p>")


def render(data: PageData) -> str:
    head = data.releases[-1] if data.releases else None
    steps = int(head["step"]) if head else 0
    summary = (f"head: step {e(head['step'])} ({e(head['release_id'])})" if head else "no release yet")
    warn = "".join(f'<p class="warn">{e(w)}</p>' for w in data.warnings)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>reef — {e(data.scenario)}</title><style>{CSS}</style></head><body>"
        f"<h1>reef: scenario {e(data.scenario)}</h1>"
        f"<p class=\"sub\">{e(data.project)} · {summary} · {len(data.releases)} release(s) · generated "
        f"{e(data.generated_at)}</p>{warn}"
        f"<h2>Canary score per release</h2>{chart(data.scores, steps)}"
        f"<h2>Releases</h2>{_timeline(data)}"
        f"<h2>Gate verdicts</h2>{_gates(data)}"
        f"<h2>Bullets</h2>{_bullets(data)}"
        f"<h2>Pending proposals</h2>{_proposals(data)}"
        "</body></html>\n"
    )


def seal(page: bytes) -> bytes:
    """`page` with its last line naming the sha256 of everything before it."""
    import hashlib

    return page + _SEAL + hashlib.sha256(page).hexdigest().encode("ascii") + _SEAL_END


def sealed(data: bytes) -> bool:
    """True when `data` is a page `reef page` wrote, byte for byte (its seal matches what precedes it)."""
    import hashlib

    if not data.endswith(_SEAL_END):
        return False
    at = data.rfind(_SEAL)
    if at < 0:
        return False
    digest = data[at + len(_SEAL): -len(_SEAL_END)]
    return digest == hashlib.sha256(data[:at]).hexdigest().encode("ascii")


def _check_replaceable(path: Path) -> None:
    """A --out outside .reef is the user's place: an index.html there is replaced only when reef wrote it and it is
    unchanged since (sealed); a hand-written file, an edited page or a symlink is refused, as `harness compile --out`
    refuses a directory it did not write."""
    from .errors import ConflictError, StoreError

    if not os.path.lexists(path):
        return
    if os.path.islink(path):
        raise ConflictError(f"{path} is a symlink that reef did not write; move it away or choose another --out")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise StoreError(f"cannot read {path} to check whether reef wrote it: {e.strerror or e}") from e
    if not sealed(data):
        raise ConflictError(f"{path} exists and was not written by 'reef page' (or was edited since); reef will not "
                            f"replace it — move it away or choose another --out")


def default_dir(store) -> Path:
    return store.project.state / "page" / store.scenario


def write_page(store, out: Path | None = None, now: str | None = None) -> Path:
    """Render the scenario's page into OUT/index.html (default .reef/page/<scenario>/) and return its path."""
    from .durable import STATE_FILE_MODE, make_dirs, write_atomic
    from .errors import InvalidInput, StoreError

    directory = Path(os.path.abspath(out)) if out is not None else default_dir(store)
    # --out names a directory; a file there is the user's and is never replaced by the page.
    if directory.exists() and not directory.is_dir():
        raise InvalidInput(f"--out {directory} is a file, not a directory; name a directory to write "
                           f"{PAGE_NAME} into")
    path = directory / PAGE_NAME
    if path.is_dir():
        raise InvalidInput(f"{path} is a directory; the page is written to that name, move it or choose another --out")
    # Under .reef the page is reef's state, the owner's alone like the ledger it shows; a --out elsewhere is the
    # user's place (0644 narrowed by their umask; a page already there keeps its mode).
    private = directory.is_relative_to(os.path.abspath(store.project.state))
    if not private:
        _check_replaceable(path)
    try:
        if private:
            make_dirs(directory)
        else:
            directory.mkdir(parents=True, exist_ok=True)
        write_atomic(path, seal(render(collect(store, now)).encode("utf-8")), STATE_FILE_MODE if private else None)
    except (FileExistsError, NotADirectoryError) as e:
        raise InvalidInput(f"cannot write the page into {directory}: a parent of it is a file ({e.strerror})") from e
    except OSError as e:
        raise StoreError(f"cannot write the page to {path}: {e.strerror or e}") from e
    return path
