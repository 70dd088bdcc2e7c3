"""The hot commands, `reef run -- CMD` and `reef report`, which run after every agent session: their bodies, and a
parser for their well-formed common case that needs no typer (~30 ms saved). The typer commands in loop_cmds.py
declare the same options (a test keeps the two in step) and call the same functions here; entry.py tries this
parser first. Typer-free on purpose."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .boundary import guarded

GLOBAL_VALUE_OPTIONS = {"-C": "directory", "--scenario": "scenario", "-s": "scenario"}


@dataclass(frozen=True)
class FastSpec:
    """The options of one hot command, as the typer command in loop_cmds.py declares them."""

    flags: dict  # option -> (key, value)
    values: dict  # option -> key
    multi: dict  # option -> key (repeatable)
    defaults: dict
    rest: bool  # takes `-- CMD...`
    required: tuple = ()


FAST = {
    "run": FastSpec(
        flags={"--observe-only": ("observe_only", True), "--store-content": ("store_content", True),
               "--digest-only": ("store_content", False)},
        values={"--adapter": "adapter"}, multi={},
        defaults={"observe_only": False, "adapter": None, "store_content": None}, rest=True),
    "report": FastSpec(
        flags={"--json": ("as_json", True)},
        values={"--score": "score", "--feedback": "feedback", "--feedback-json": "feedback_json", "--id": "record_id"},
        multi={"--receipt": "receipt"},
        defaults={"score": None, "feedback": None, "feedback_json": None, "record_id": None, "receipt": [],
                  "as_json": False}, rest=False, required=("score",)),
}


def _split(arg: str) -> tuple[str, str | None]:
    return tuple(arg.split("=", 1)) if arg.startswith("--") and "=" in arg else (arg, None)  # type: ignore[return-value]


def parse_fast(argv: list[str]) -> tuple[str, dict] | None:
    """`[-C DIR] [--scenario S] run|report OPTIONS...`, or None for anything this parser does not fully understand
    (help, a usage error, another command): the typer app then handles it and says what is wrong."""
    out: dict = {"directory": None, "scenario": None}
    i, n = 0, len(argv)
    while i < n and argv[i] not in FAST:
        arg, value = _split(argv[i])
        if arg not in GLOBAL_VALUE_OPTIONS:
            return None
        if value is None:
            if i + 1 >= n:
                return None
            value, i = argv[i + 1], i + 1
        out[GLOBAL_VALUE_OPTIONS[arg]] = value
        i += 1
    if i >= n:
        return None
    name, spec = argv[i], FAST[argv[i]]
    out.update({k: (list(v) if isinstance(v, list) else v) for k, v in spec.defaults.items()})
    i += 1
    while i < n and not (spec.rest and argv[i] == "--"):
        arg, value = _split(argv[i])
        if arg in spec.flags and value is None:
            key, flag = spec.flags[arg]
            out[key] = flag
        elif arg in spec.values or arg in spec.multi:
            if value is None:
                if i + 1 >= n:
                    return None
                value, i = argv[i + 1], i + 1
            if arg in spec.multi:
                out[spec.multi[arg]].append(value)
            else:
                out[spec.values[arg]] = value
        else:
            return None
        i += 1
    if spec.rest:
        if i + 1 >= n:
            return None  # no `--`, or nothing after it
        out["cmd"] = argv[i + 1 :]
    if any(out[k] is None for k in spec.required):
        return None
    return name, out


def record_run(env, cmd: list[str], *, observe_only: bool, adapter: str | None, store_content: bool | None) -> int:
    """Run CMD under the current release, print the receipt, return CMD's exit status."""
    from ..runs import run_recorded

    result = run_recorded(env.store(), list(cmd), adapter=adapter, observe_only=observe_only, cwd=env.cwd,
                          store_content=store_content)
    sys.stderr.write(f"reef: receipt {result.record.record_id} (release {result.release.release_id})\n")
    if result.stop_signal is not None:
        from ..errors import Stopped

        raise Stopped.after_run(result.stop_signal, result.record.record_id)
    return result.exit_code


def record_report(env, score: str, *, feedback: str | None, feedback_json: str | None, receipt: list[str],
                  record_id: str | None, as_json: bool) -> int:
    """Attach a score and feedback to the named receipts, or to this shell's unreported runs."""
    from ..errors import InvalidInput
    from ..reports import load_feedback_json, report
    from ..sessions import PendingReceipts, shell_key
    from .context import emit_json

    if feedback is not None and feedback_json is not None:
        raise InvalidInput("--feedback and --feedback-json are mutually exclusive")
    paths = env.paths()
    fb = feedback
    if feedback_json is not None:
        fb = load_feedback_json(Path(feedback_json) if feedback_json == "-" else env.cwd / feedback_json)
    if receipt:
        receipts = list(receipt)
        record = report(paths, score, feedback=fb, receipts=receipts, record_id=record_id)
    else:
        pending = PendingReceipts(paths.dir, shell_key(env.environ))
        with pending.claimed() as receipts:  # held until they are reported: a racing report finds none
            record = report(paths, score, feedback=fb, receipts=receipts, record_id=record_id)
            pending.done(receipts)
    if as_json:
        emit_json(record.to_json())
    else:
        print(report_line(record))
    return 0


def report_line(record, shown: int = 3) -> str:
    """`reported score 0 on receipt rec_A (report rec_B)`: the receipts a score went on, then the report's own
    record id labelled as such. The line used to end in the report's id alone ("...on 1 receipt(s): rec_B"), which
    read as the receipt; --json has the whole record."""
    receipts = list(record.payload.get("receipts") or [])
    if len(receipts) == 1:
        on = f"receipt {receipts[0]}"
    else:
        more = f" and {len(receipts) - shown} more" if len(receipts) > shown else ""
        on = f"{len(receipts)} receipts {', '.join(receipts[:shown])}{more}"
    return f"reported score {record.payload['score']:g} on {on} (report {record.record_id})"


def run_fast(name: str, opts: dict) -> int:
    from .context import Env

    def go() -> int:
        env = Env.at(opts["directory"], opts["scenario"])
        if name == "run":
            return record_run(env, opts["cmd"], observe_only=opts["observe_only"], adapter=opts["adapter"],
                              store_content=opts["store_content"])
        return record_report(env, opts["score"], feedback=opts["feedback"], feedback_json=opts["feedback_json"],
                             receipt=opts["receipt"], record_id=opts["record_id"], as_json=opts["as_json"])

    return guarded(go)
