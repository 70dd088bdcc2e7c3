"""Secrets on the paths around the redactor: excerpts cut from a redacted window (`reef run`, `reef ingest`, the
model Reflector's prompt), train and weight-gate records, the trainer's log, `reef train`'s options."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import reef_init, reef_read, run_reef
from fakes import text as llm_text
from test_evolve import init_project, session
from test_weights import SCEN, TRAINER, _failures, _prime, engine, ledger_of, train  # noqa: F401 - engine: a fixture

TOKEN = "ghp_0123456789abcdefghijABCDEFGHIJklmnop"  # a GitHub token's shape: 40 characters
PEM_LINE = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"


def straddling(limit: int, *, off: int = 20, head: str = "") -> str:
    """A text whose GitHub token starts `off` characters before the end of the window the excerpt of `limit`
    characters used to be redacted in (`limit + WINDOW`), after a PEM key that shrinks to a short marker: cut at
    `limit` characters of the redacted window, the excerpt reached that window's end and kept the token's head."""
    from reef_cli.redact import WINDOW

    start = limit + WINDOW - off - len(head)
    lines = (start - 132) // len(PEM_LINE)  # so that under 150 characters of filler follow the key
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + PEM_LINE * lines + "-----END OPENSSH PRIVATE KEY-----"
    return head + pem + " " + "w" * (start - len(pem) - 2) + " " + TOKEN + " tail\n"


def assert_no_token(data: str) -> None:
    assert TOKEN[:12] not in data and TOKEN[-12:] not in data


def test_excerpt_redacts_past_its_own_cut_whatever_shrank_before_it():
    from reef_cli.redact import EXCERPT_CHARS, content_fields

    for off in (1, 20, 39):
        fields = content_fields(straddling(EXCERPT_CHARS, off=off), store_content=False)
        assert fields["excerpt"].startswith("[REDACTED:private_key] ")
        assert_no_token(fields["excerpt"])


def test_excerpt_says_whether_it_cut_and_never_halves_a_marker():
    from reef_cli.redact import excerpt

    assert excerpt("short", 10) == ("short", False)
    assert excerpt("x" * 50, 10) == ("x" * 10, True)
    # a marker is never cut in half, and the cut still says so
    out, cut = excerpt("a" * 8 + " " + TOKEN + " " + "b" * 5000, 10)
    assert out == "a" * 8 + " [REDACTED:github_token]" and cut


def test_reef_run_output_excerpt_keeps_no_piece_of_a_token(tmp_path):
    from reef_cli.redact import EXCERPT_CHARS

    project = reef_init(tmp_path / "p")
    out = tmp_path / "out.txt"
    out.write_text(straddling(EXCERPT_CHARS))
    r = run_reef("run", "--", "cat", str(out), cwd=project, env={"REEF_SESSION": "t1"})
    assert r.returncode == 0, r.stderr
    ledger = (project / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_text()
    assert '"stdout"' in ledger and "[REDACTED:private_key]" in ledger
    assert_no_token(ledger)


def test_reef_ingest_excerpt_keeps_no_piece_of_a_token(reef, tmp_path):
    from reef_cli.ingest.model import USER_CHARS

    root, ledger = init_project(reef, tmp_path)
    cwd = str(tmp_path)

    def line(uuid, kind, content):
        msg = {"role": kind, "content": content, **({"model": "m", "stop_reason": "end_turn"}
                                                     if kind == "assistant" else {})}
        return json.dumps({"type": kind, "uuid": uuid, "sessionId": "s1", "cwd": cwd, "isSidechain": False,
                           "timestamp": "2026-12-01T10:00:00.000Z", "message": msg})

    path = tmp_path / "s1.jsonl"
    path.write_text(line("u1", "user", straddling(USER_CHARS)) + "\n"
                    + line("a1", "assistant", [{"type": "text", "text": "ok"}]) + "\n")
    r = reef("-C", str(root), "ingest", "--json", str(path))
    assert r.code == 0, r.err
    data = ledger.path.read_text()
    assert "[REDACTED:private_key]" in data
    assert_no_token(data)


def test_the_reflector_sends_no_piece_of_a_token(reef, tmp_path, fake_llm):
    from reef_cli.lessons import record_text

    root, ledger = init_project(reef, tmp_path)
    # written straight to the ledger, bypassing redaction (an old ledger, another writer); the default excerpt is
    # 1500 characters and the record's text starts with what `record_text` puts before the feedback
    rep = session(ledger, "x")
    head = record_text(rep)[: record_text(rep).index("x")]
    rep = session(ledger, straddling(1500, head=head))
    assert record_text(rep).index(TOKEN) == 1500 + 4096 - 20
    fake_llm.reply(llm_text(json.dumps({"lessons": []})))
    r = reef("-C", str(root), "harness", "reflect", "--json", "--backend", "openai", "--model-url",
             fake_llm.base_url, "--model", "cheap-model")
    assert r.code == 0, r.err
    body = fake_llm.calls[0].body.decode()
    assert rep.record_id in body and "[REDACTED:private_key]" in body
    assert_no_token(body)


# -- train and weight-gate records ----------------------------------------------------------------------------------
WANDB = "wandbsecret_tok3nSECRETxyz"
GHP = "ghp_tok3nSECRETabcdefghijklmnopqrstuvwxy"  # ghp_ and 36: a GitHub token


def stored_bytes(root: Path) -> str:
    """Every file reef wrote under .reef, git objects read through the store (release meta)."""
    from reef_cli.project import Project
    from reef_cli.store import HarnessStore

    metas = json.dumps([rel.meta for rel in HarnessStore(Project(root), SCEN).releases()]) \
        if (root / ".reef" / "scenarios" / SCEN / "ledger.jsonl").exists() else ""
    return metas + "".join(p.read_text(errors="replace") for p in (root / ".reef").rglob("*")
                           if p.is_file() and "objects" not in p.parts)


@pytest.fixture
def wproject(reef, tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    assert reef("-C", str(root), "init", "--template", "minimal").code == 0
    return root


def test_a_failing_trainers_last_line_is_stored_and_printed_redacted(reef, wproject, engine, tmp_path):
    led = ledger_of(wproject)
    _prime(led, engine)
    echo = tmp_path / "echo_args.sh"
    echo.write_text('#!/bin/sh\necho "args: $*"\nexit 3\n')
    echo.chmod(0o755)
    r = train(reef, wproject, "--engine", engine.url, "--trainer", f"{echo} --wandb-key {WANDB}")
    assert r.code == 1 and "trainer exited with status 3 (args: --wandb-key [REDACTED:" in r.err
    assert WANDB not in r.err + r.out
    (failure,) = _failures(led)
    assert failure["stage"] == "trainer" and "[REDACTED:" in failure["error"]
    assert WANDB not in (wproject / ".reef" / "scenarios" / SCEN / "ledger.jsonl").read_text()


def test_an_eval_commands_last_line_is_stored_and_printed_redacted(reef, wproject, engine, tmp_path):
    led = ledger_of(wproject)
    _prime(led, engine)
    ev = tmp_path / "ev.sh"
    ev.write_text(f'#!/bin/sh\necho "auth ok as {GHP}"\n')
    ev.chmod(0o755)
    r = train(reef, wproject, "--engine", engine.url, "--trainer", TRAINER, "--eval", str(ev))
    assert r.code == 1 and "last line 'auth ok as [REDACTED:github_token]' is not a number" in r.err
    assert GHP not in r.err + r.out
    assert [f["stage"] for f in _failures(led)] == ["gate"]
    gate = [x.payload for x in led.iter_records(kind="weight_gate")]
    assert gate and "[REDACTED:github_token]" in gate[0]["reason"]
    assert "tok3nSECRET" not in stored_bytes(wproject)


@pytest.mark.parametrize("url", ["http://alice:{tok}@127.0.0.1:{port}", "http://{tok}@127.0.0.1:{port}/"])
def test_an_engine_url_with_credentials_is_refused_before_anything_runs(reef, wproject, engine, url):
    led = ledger_of(wproject)
    _prime(led, engine)
    port = engine.url.rsplit(":", 1)[1]
    given = url.format(tok=GHP, port=port)
    r = train(reef, wproject, "--engine", given, "--trainer", TRAINER)
    assert r.code == 4 and r.err.count("\n") == 1
    assert r.err.startswith(f"reef: error: --engine http://127.0.0.1:{port}")
    assert "a user name or password in the URL is not supported" in r.err and "tok3n" not in r.err
    assert _failures(led) == [] and engine.loads == []
    assert "tok3n" not in stored_bytes(wproject)
    r = reef("-C", str(wproject), "-s", "fresh", "train", "--recipe", "sao", "--init", "--engine", given)
    assert r.code == 4 and "tok3n" not in r.err and not (wproject / ".reef" / "scenarios" / "fresh").exists()


@pytest.mark.parametrize("given, message", [
    ("http://[::1", "--engine: not a valid URL (Invalid IPv6 URL); expected an SGLang server's http(s) URL, such as "
                    "http://127.0.0.1:30000"),
    ("http://127.0.0.1:99999", "--engine: not a valid URL (Port out of range 0-65535); expected an SGLang server's "
                               "http(s) URL, such as http://127.0.0.1:30000"),
    ("ftp://127.0.0.1", "--engine ftp://127.0.0.1: expected an http:// or https:// URL of an SGLang server, such as "
                        "http://127.0.0.1:30000"),
])
def test_a_malformed_engine_url_is_invalid_input_naming_engine(reef, wproject, engine, given, message):
    _prime(ledger_of(wproject), engine)
    r = train(reef, wproject, "--engine", given, "--trainer", TRAINER)
    assert (r.code, r.err) == (4, f"reef: error: {message}\n")
    assert _failures(ledger_of(wproject)) == [] and engine.loads == []


# -- reef train's options -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "-inf"])
def test_a_timeout_that_is_not_a_positive_number_is_refused_before_the_trainer_runs(reef, wproject, engine, value):
    _prime(ledger_of(wproject), engine)
    r = train(reef, wproject, "--engine", engine.url, "--trainer", TRAINER, "--timeout", value)
    assert (r.code, r.err) == (4, f"reef: error: --timeout {value}: expected a number of seconds above 0\n")
    assert _failures(ledger_of(wproject)) == [] and engine.loads == []
    assert not list((wproject / ".reef" / "scenarios" / SCEN).glob("train/*"))


def test_a_bad_engine_url_creates_no_scenario(reef, wproject):
    r = reef("-C", str(wproject), "-s", "fresh", "train", "--recipe", "sao", "--engine", "http://[::1")
    assert r.code == 4 and r.err.startswith("reef: error: --engine: not a valid URL (Invalid IPv6 URL)")
    assert not (wproject / ".reef" / "scenarios" / "fresh").exists()


# -- trainer.log ----------------------------------------------------------------------------------------------------
HF = "hf_" + "k1Lm2Nq3" * 4 + "zz"
CHATTY = r'''
import os, runpy, sys
print("WANDB_API_KEY=" + os.environ["WANDB_API_KEY"])
print("HF_TOKEN=" + os.environ["HF_TOKEN"])
print("args:", " ".join(sys.argv[1:3]), flush=True)
pem = sys.argv[3]
for i in range(400):  # a continuous stream (no pause), the key in the middle of it, line by line
    print(f"step {i:04d} loss 0.{i:04d} " + "." * 40)
    if i == 200:
        for line in pem.splitlines():
            print(line)
sys.stdout.flush()
sys.argv = [sys.argv[0]] + sys.argv[4:]
runpy.run_path(sys.argv[0].replace("chatty.py", "slime_train.py"), run_name="__main__")
'''


def test_trainer_log_is_redacted_as_it_is_written(reef, wproject, engine, tmp_path, monkeypatch):
    import shutil

    from test_weights import FAKES

    led = ledger_of(wproject)
    _prime(led, engine)
    (tmp_path / "chatty.py").write_text(CHATTY)
    shutil.copy(FAKES / "slime_train.py", tmp_path / "slime_train.py")
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + PEM_LINE * 40 + "-----END OPENSSH PRIVATE KEY-----"
    monkeypatch.setenv("WANDB_API_KEY", WANDB)
    monkeypatch.setenv("HF_TOKEN", HF)
    trainer = f"{sys.executable} {tmp_path / 'chatty.py'} --wandb-key {WANDB} '{pem}'"
    r = train(reef, wproject, "--engine", engine.url, "--trainer", trainer, "--json")
    assert r.code == 0, r.err
    (log,) = (wproject / ".reef" / "scenarios" / SCEN).glob("train/*/trainer.log")
    data = log.read_bytes().decode()
    assert "step 0399 loss" in data and "fake slime: saved" in data  # the rest is all there, in order
    assert data.index("step 0200") < data.index("[REDACTED:private_key]") < data.index("step 0201")
    assert "WANDB_API_KEY=[REDACTED:" in data and "HF_TOKEN=[REDACTED:" in data
    for secret in (WANDB, HF, PEM_LINE.strip()[:20]):
        assert secret not in data
    assert WANDB not in stored_bytes(wproject) and HF not in stored_bytes(wproject)


def test_a_continuous_stream_is_written_in_blocks_that_never_split_a_secret(tmp_path):
    """Output that never pauses goes out in blocks cut at line ends with a window of context after them; a key
    printed line by line across a would-be cut is kept whole: the log reads as the whole stream redacted at once."""
    import os
    import threading
    import time

    from reef_cli.redact import redact
    from reef_cli.weights.trainer_log import RedactedLog

    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + PEM_LINE * 40 + "-----END OPENSSH PRIVATE KEY-----\n"
    lines = []
    for i in range(600):
        lines.append(f"step {i:04d} loss 0.{i:04d} {'.' * 50}\n")
        if i % 97 == 0:
            lines.append(pem if i % 2 else f"token {TOKEN} and HF_TOKEN={HF}\n")
    text = "".join(lines)
    out, into = os.pipe()
    path = tmp_path / "trainer.log"

    def feed():
        data = text.encode()
        for at in range(0, len(data), 997):  # odd-sized writes, never a pause long enough to flush everything
            os.write(into, data[at:at + 997])
            time.sleep(0.001)
        os.close(into)

    with open(path, "ab", buffering=0) as log:
        copier = RedactedLog(out, log).start()
        writer = threading.Thread(target=feed)
        writer.start()
        writer.join()
        copier.close()
    data = path.read_text()
    assert data == redact(text)[0]
    assert data.count("[REDACTED:private_key]") == 3 and TOKEN not in data and HF not in data
    assert PEM_LINE.strip()[:20] not in data


ANTHROPIC = "sk-ant-api03-" + "Q7vR2mX9kL4pZ8wT1nB6cY3hJ5fD0sGaE-" + "UuIiOoPpAaSsDdFfGgHhJjKkLlZzXxCcVvBbNnMm012345AA"
SHAPELESS = "hunter2-Zq9xW3vB7nM1kP5"  # a value only its name (HF_TOKEN=, password:) says is a secret


def copy_through(path: Path, steps, monkeypatch, **limits) -> list[str]:
    """Feed `steps` (text to write, seconds to wait, or None: wait for the log to grow, note what it holds) through a
    RedactedLog into `path`, with `PAUSE_S` short so a wait of 0.15 s is a pause; returns the notes."""
    import os
    import threading
    import time

    from reef_cli.weights import trainer_log

    monkeypatch.setattr(trainer_log, "PAUSE_S", 0.02)
    for name, value in limits.items():
        monkeypatch.setattr(trainer_log, name, value)
    out, into = os.pipe()
    notes: list[str] = []

    def feed():
        for step in steps:
            if step is None:
                grown = time.monotonic() + 10
                while path.stat().st_size == len("".join(notes[-1:]).encode()) and time.monotonic() < grown:
                    time.sleep(0.01)
                notes.append(path.read_bytes().decode())
            elif isinstance(step, float):
                time.sleep(step)
            else:
                os.write(into, step.encode())
        os.close(into)

    with open(path, "ab", buffering=0) as log:
        copier = trainer_log.RedactedLog(out, log).start()
        writer = threading.Thread(target=feed)
        writer.start()
        writer.join()
        copier.close()
    return notes


@pytest.mark.parametrize("first, rest", [
    ("using anthropic key " + ANTHROPIC[:20], ANTHROPIC[20:] + "\n"),  # a key in two writes
    ("HF_TOKEN=", SHAPELESS + "\n"),  # the name, then its value
], ids=["key-in-two-writes", "name-then-value"])
def test_a_pause_inside_a_line_does_not_split_a_secret(tmp_path, monkeypatch, first, rest):
    """A trainer that pauses in mid-line (`print(..., end="")`, then the rest): the complete lines go out on the
    pause, the line being written waits for its end and is redacted whole."""
    path = tmp_path / "trainer.log"
    notes = copy_through(path, ["step 1\n" + first, 0.15, None, rest, "step 2\n"], monkeypatch)
    assert notes == ["step 1\n"]  # the log keeps up with the lines that are complete
    data = path.read_text()
    assert data.startswith("step 1\n") and data.endswith("[REDACTED:anthropic_key]\nstep 2\n"
                                                           if "anthropic" in first else "=[REDACTED:token]\nstep 2\n")
    assert ANTHROPIC[13:33] not in data and ANTHROPIC[33:] not in data and SHAPELESS not in data


def test_a_progress_bar_shows_in_the_log_one_update_behind(tmp_path, monkeypatch):
    path = tmp_path / "trainer.log"
    notes = copy_through(path, ["\rstep 0 token=" + TOKEN, 0.15, "\rstep 1 token=" + TOKEN, 0.15, None, "\n"],
                         monkeypatch)
    assert notes == ["\rstep 0 token=[REDACTED:github_token]\r"]  # the update being drawn waits for the next
    data = path.read_bytes().decode()
    assert data == "\rstep 0 token=[REDACTED:github_token]\rstep 1 token=[REDACTED:github_token]\n"


def test_a_value_on_the_line_after_its_name_is_redacted_across_a_pause(tmp_path, monkeypatch):
    """`password: |` goes out on a pause; its value, on the next line, is redacted with that line as context."""
    path = tmp_path / "trainer.log"
    copy_through(path, ["config:\n  password: |\n", 0.15, f"    {SHAPELESS}\n  steps: 3\n"], monkeypatch)
    data = path.read_text()
    assert SHAPELESS not in data
    assert data == "config:\n  password: |\n    [REDACTED:password]\n  steps: 3\n"


def test_a_line_cut_at_max_pending_keeps_a_name_with_its_value(tmp_path, monkeypatch):
    """A line longer than MAX_PENDING is written up to a window before its end: `HF_TOKEN=` at the end of the first
    megabyte (here 64 KiB) still has its value after it when that arrives."""
    path = tmp_path / "trainer.log"
    head = " HF_TOKEN="
    pad = ("word " * 20000)[: (1 << 16) - len(head)]
    notes = copy_through(path, [pad + head, 0.15, None, SHAPELESS + " end\n"], monkeypatch, MAX_PENDING=1 << 16)
    assert 0 < len(notes[0]) <= (1 << 16) - 4096 and notes[0].endswith("word ")  # written up to a space
    assert path.read_text() == pad + " HF_TOKEN=[REDACTED:token] end\n"


# -- reef publish -----------------------------------------------------------------------------------------------------
def git_objects(root: Path) -> str:
    """Every loose Git object under .reef, inflated: where a published file's bytes go."""
    import zlib

    return "".join(zlib.decompress(p.read_bytes()).decode("utf-8", "replace")
                   for p in (root / ".reef").rglob("*") if p.is_file() and "objects" in p.parts
                   and len(p.parent.name) == 2)


def test_publish_refuses_a_secret_typed_into_a_harness_file(tmp_path):
    project = reef_init(tmp_path / "p")
    claude = project / "CLAUDE.md"
    lines = claude.read_text().splitlines()
    claude.write_text("\n".join(lines + ["", f"Deploy with `gh auth login --with-token {TOKEN}`."]) + "\n")
    r = run_reef("publish", "-m", "deploy notes", cwd=project)
    assert (r.returncode, r.stderr) == (4, f"reef: error: CLAUDE.md:{len(lines) + 2} (github token): looks like a "
                                           "secret; a release is stored in Git, pushed and compiled into the agent's "
                                           "files, so nothing was published — remove it (use an environment "
                                           "variable), or publish anyway with --allow-secret\n")
    assert json.loads(reef_read("log", "--json", cwd=project).out)[0]["step"] == 1
    assert TOKEN not in git_objects(project) and TOKEN not in stored_bytes_all(project)
    r = run_reef("publish", "-m", "deploy notes", "--allow-secret", cwd=project)
    assert r.returncode == 0 and json.loads(reef_read("log", "--json", cwd=project).out)[0]["step"] == 2
    assert TOKEN in git_objects(project)  # what --allow-secret means, and what the check above would have seen


def stored_bytes_all(root: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in (root / ".reef").rglob("*")
                   if p.is_file() and "objects" not in p.parts)
