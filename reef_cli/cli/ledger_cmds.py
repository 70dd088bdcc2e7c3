"""`reef ledger ...`: read, verify, export and compact the append-only ledger."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Optional

import typer

from .boundary import error_line
from .context import console, emit_json

app = typer.Typer(help="The append-only, hash-chained ledger of runs, reports and decisions.", no_args_is_help=True)


def _ledger(ctx: typer.Context):
    return ctx.obj.store().ledger()


def _parse_time(value: str, flag: str) -> datetime:
    from ..errors import InvalidInput

    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{flag} {value!r}: expected an ISO date or time, e.g. 2026-11-30 or 2026-11-30T12:00:00Z") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def _summary(rec) -> str:
    from ..printable import printable

    return printable(_summary_text(rec))


def _summary_text(rec) -> str:
    p = rec.payload
    if rec.kind == "inference" and p.get("source") == "serve":  # a model call recorded by reef serve
        return f"{p.get('api')} {p.get('model')} {p.get('status')} {p.get('outcome')} in {p.get('latency_ms', 0):.0f}ms"
    if rec.kind == "interaction":
        return f"exit {p.get('exit_code')} in {p.get('duration_s', 0):.2f}s: {' '.join(p.get('argv', []))[:80]}"
    if rec.kind == "report":
        fb = p.get("feedback")
        fb = fb if isinstance(fb, str) else json.dumps(fb, ensure_ascii=False) if fb else ""
        return f"score {p.get('score')} on {len(p.get('receipts', []))} receipt(s): {fb[:80]}"
    return json.dumps(p, ensure_ascii=False, sort_keys=True)[:100]


def _render(records, as_json: bool, title: str) -> None:
    if as_json:
        for rec in records:
            sys.stdout.write(json.dumps(rec.to_json(), sort_keys=True, ensure_ascii=False) + "\n")
        return
    from rich.table import Table

    table = Table(title=title)
    table.add_column("seq", justify="right")
    table.add_column("record", no_wrap=True)
    table.add_column("kind")
    table.add_column("created", no_wrap=True)
    table.add_column("release", no_wrap=True)
    table.add_column("summary", overflow="fold")
    for rec in records:
        table.add_row(str(rec.seq), rec.record_id, rec.kind, rec.created_at[:19].replace("T", " "), rec.release_id, _summary(rec))
    console().print(table)


@app.command("tail")
def tail(ctx: typer.Context, n: int = typer.Option(10, "-n", help="How many records."), as_json: bool = typer.Option(False, "--json", help="JSON lines.")) -> None:
    """The last N records, oldest first."""
    _render(_ledger(ctx).tail(n), as_json, "ledger tail")


@app.command("show")
def show(ctx: typer.Context, record_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """One record, whole."""
    from ..printable import printable

    rec = _ledger(ctx).get(record_id)
    if as_json:
        emit_json(rec.to_json())
    else:
        for k, v in rec.to_json().items():
            text = json.dumps(v, ensure_ascii=False, indent=2) if isinstance(v, (dict, list)) else str(v)
            print(f"{k:11} " + "\n".join(map(printable, text.split("\n"))))  # indented JSON keeps its lines


@app.command("query")
def query(
    ctx: typer.Context,
    kind: Optional[str] = typer.Option(None, "--kind"),
    since: Optional[str] = typer.Option(None, "--since", help="ISO date/time (UTC if no zone)."),
    release: Optional[str] = typer.Option(None, "--release", help="Release id, prefix or step."),
    as_json: bool = typer.Option(False, "--json", help="JSON lines (streams: flat memory on any size)."),
) -> None:
    """Records matching every filter, oldest first (streams)."""
    store = ctx.obj.store()
    release_id = store.find(release).release_id if release else None
    since_ts = _parse_time(since, "--since") if since else None
    it = store.ledger().iter_records(kind=kind, since=since_ts, release_id=release_id)
    if as_json:
        _render(it, True, "")
    else:
        _render(list(it), False, "ledger query")


@app.command("verify")
def verify(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")) -> None:
    """Re-check the hash chain and the releases' anchors; exit 4 naming the first record edited, deleted, inserted
    or reordered, the release whose anchor the ledger falls short of (records cut off the end, or the file gone), or
    the acknowledged records the file at the ledger's path lost (cut off its end, the file gone, an older or other
    file put in its place); a crash's unacknowledged torn line is only noted."""
    store = ctx.obj.store()
    res = store.ledger().verify(anchors=store.ledger_anchors())
    if as_json:
        emit_json(res.to_json())
    elif res.ok:
        anchored = f", {res.anchors_checked} release anchor(s) held" if res.anchors_checked else ""
        print(f"ledger intact: {res.count} record(s) verified{anchored}")
    else:
        sys.stderr.write(error_line("reef", res.message))
    if not as_json:
        for repair in res.repairs:
            sys.stderr.write(
                f"reef: warning: a torn last line ({repair.get('bytes')} bytes after seq {repair.get('after_seq')}) "
                f"was cut off at {repair.get('at')}; it was never acknowledged\n"
            )
    if not res.ok:
        raise typer.Exit(4)


@app.command("export")
def export(ctx: typer.Context, fmt: str = typer.Option("jsonl", "--format", help="jsonl or langfuse.")) -> None:
    """Stream the ledger as JSON lines, or reports as Langfuse scores."""
    from ..errors import InvalidInput
    from ..ledger import to_langfuse_score

    led = _ledger(ctx)
    if fmt == "jsonl":
        for rec in led.iter_records():
            sys.stdout.write(json.dumps(rec.to_json(), sort_keys=True, ensure_ascii=False) + "\n")
    elif fmt == "langfuse":
        for rec in led.iter_records(kind="report"):
            for score in to_langfuse_score(rec):
                sys.stdout.write(json.dumps(score, sort_keys=True, ensure_ascii=False) + "\n")
    else:
        raise InvalidInput(f"--format {fmt}: expected jsonl or langfuse")


@app.command("compact")
def compact(
    ctx: typer.Context,
    before: Optional[str] = typer.Option(None, "--before", help="Remove records created before this ISO date/time."),
    keep: Optional[int] = typer.Option(None, "--keep", help="Keep only the newest N records."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The only way records leave the ledger: writes a compaction record that keeps the chain verifiable."""
    from ..errors import InvalidInput

    if (before is None) == (keep is None):
        raise InvalidInput("give exactly one of --before DATE or --keep N")
    if keep is not None and keep < 0:
        raise InvalidInput(f"--keep {keep}: must be 0 or more")
    rec = _ledger(ctx).compact(before=_parse_time(before, "--before") if before else None, keep=keep)
    if as_json:
        emit_json(rec.to_json() if rec else None)
    elif rec is None:
        print("nothing to compact")
    else:
        print(f"compacted: {rec.payload['removed_count']} record(s) removed; {rec.record_id} records it")


repair_app = typer.Typer(help="Rebuild reef's state from what it can be rebuilt from.", no_args_is_help=True)


@repair_app.command("releases")
def repair_releases(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")) -> None:
    """Rebuild the release log from the store's commits (each carries its release); the old log is kept beside it."""
    res = ctx.obj.store().rebuild_releases()
    if as_json:
        emit_json(res.to_json())
        return
    head = res.releases[-1]
    if not res.rebuilt:
        print(f"release log intact: {len(res.releases)} release(s) match the store's commits (head step {head.step})")
        return
    print(f"rebuilt the release log: {len(res.releases)} release(s) from commit {res.tip[:12]} "
          f"(head step {head.step}, {head.release_id})")
    if res.kept:
        print(f"the old log is kept as {res.kept}")


@repair_app.command("ledger")
def repair_ledger(
    ctx: typer.Context,
    accept_loss: bool = typer.Option(False, "--accept-loss", help="Record the missing records as lost and go on."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Check the ledger against every release anchor and its acknowledged end; with --accept-loss, record in the
    ledger that the records behind the anchors it falls short of, or cut off its end, are lost (a cut line's bytes
    are kept in ledger.jsonl.cut-*), so appends, reflect and evolve go on (restore a backup instead if you can).
    --json prints one object whatever the outcome (intact, loss_found, loss_recorded, damaged), same exit code."""
    from ..ledger import anchors as ledger_anchors

    store = ctx.obj.store()
    led = store.ledger()
    anchors = store.ledger_anchors()
    report = _RepairReport(as_json, len(anchors))
    with led:
        checked = None
        if led.acknowledged_cut(thorough=True) is None:
            # a chain broken inside (not records cut off its end) is not mended by recording a loss: say so before
            # anything is judged or written (a damaged line also reads as a missing anchor)
            checked = led.verify()
            report.refuse_damage(checked)
        found = ledger_anchors.problems(led, anchors, every=True)
        if not accept_loss:
            cut = led.acknowledged_cut(thorough=True)
            if found or cut:
                message = ledger_anchors.message(led, *found[0]) if found else cut[1]
                report.fail("loss_found", "short" if found else "cut", message)
            rec = cut_rec = None
        else:
            # the anchors are judged before the cut is recorded: the `ledger_cut` record takes the missing seq
            cut_rec = led.accept_cut()
            rec = led.accept_loss(anchors, found=found)
        # what --accept-loss cannot mend: a record edited, deleted or damaged in place (the chain walked once more
        # only when something was appended or it was not walked above)
        damage = checked if checked is not None and cut_rec is None and rec is None else led.verify()
    lines = []
    if cut_rec is not None:
        p = cut_rec.payload
        kept = f"the {p['kept_bytes']} bytes of the cut line are kept in {p['kept_in']}; " if p["kept_in"] else ""
        # the cut record takes the first missing seq: what was lost runs from it to the last acknowledged one
        first, last = cut_rec.seq, p["acknowledged"]["seq"]
        lost = f"record seq {last} is" if first >= last else f"records seq {first}-{last} are"
        if p.get("why") == "replaced":
            lost = f"acknowledged record seq {last} was replaced by another and is"
        gone = "the ledger file was gone (a new one holds this record); " if p.get("why") == "gone" else ""
        lines.append(f"recorded the cut as {cut_rec.record_id} (seq {cut_rec.seq}): {gone}{kept}{lost} lost "
                     f"(acknowledged up to offset {p['acknowledged']['end']})")
    if rec is not None:
        lost = ", ".join(f"step {a['step']} (seq {a['seq']})" for a in rec.payload["anchors"])
        lines.append(f"recorded the loss as {rec.record_id} (seq {rec.seq}): anchors of {lost} are given up")
    report.recorded = [r for r in (cut_rec, rec) if r is not None]
    report.refuse_damage(damage, said=lines)
    if not report.recorded:
        lines.append(f"ledger holds all {len(anchors)} release anchor(s): nothing is lost")
    report.done("loss_recorded" if report.recorded else "intact", lines)


class _RepairReport:
    """What `reef repair ledger` says, as lines or (--json) as one object, and the exit code that goes with it: with
    --json, stdout holds the object in every outcome (it printed `null` when nothing was lost, and nothing at all on
    a refusal), and a refusal still writes its one error line to stderr and exits 4."""

    def __init__(self, as_json: bool, anchors: int) -> None:
        self.as_json, self.anchors, self.recorded = as_json, anchors, []

    def _emit(self, outcome: str, ok: bool, problem: str | None, message: str) -> None:
        emit_json({"outcome": outcome, "ok": ok, "problem": problem, "message": message,
                   "anchors_checked": self.anchors, "recorded": [r.to_json() for r in self.recorded]})

    def fail(self, outcome: str, problem: str | None, message: str, said: list[str] = ()) -> None:
        if self.as_json:
            self._emit(outcome, False, problem, message)
        else:
            for line in said:
                print(line)
        sys.stderr.write(error_line("reef", message))
        raise typer.Exit(4)

    def refuse_damage(self, result, said: list[str] = ()) -> None:
        """A ledger whose chain breaks inside (not at its end) is not repaired by recording a loss: the break stays
        where it is. Said plainly, exit 4, instead of "nothing is lost"."""
        if not result.ok:
            self.fail("damaged", result.problem,
                      f"{result.message}; 'reef repair ledger' cannot mend a record damaged inside the ledger: restore "
                      f"the file from a backup (nothing was changed by this check)", said)

    def done(self, outcome: str, lines: list[str]) -> None:
        if self.as_json:
            self._emit(outcome, True, None, "; ".join(lines))
        else:
            for line in lines:
                print(line)
