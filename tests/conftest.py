"""Shared fixtures. No test may touch the real home directory: HOME points into tmp_path and an audit hook turns
any open() under the real home (outside the Python installation itself) into an error."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["fakes.llm_plugin"]  # the `fake_llm` fixture: a fake Anthropic/OpenAI server

REPO = Path(__file__).resolve().parent.parent
REAL_HOME = os.path.realpath(os.path.expanduser("~"))
_ALLOWED = tuple(
    os.path.realpath(p)
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, *[p for p in sys.path if p]}
    if p
)
_guard = {"on": False}


def _audit(event: str, args: tuple) -> None:
    if not _guard["on"] or event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    path = os.fsdecode(args[0])
    if not os.path.isabs(path):
        return
    real = os.path.realpath(path)
    if (real == REAL_HOME or real.startswith(REAL_HOME + os.sep)) and not real.startswith(_ALLOWED):
        raise PermissionError(f"test touched the real home directory: {real}")


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def no_real_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for var, sub in (("XDG_DATA_HOME", ".local/share"), ("XDG_STATE_HOME", ".local/state"),
                     ("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.delenv("REEF_SCENARIO", raising=False)
    _guard["on"] = True
    yield home
    _guard["on"] = False


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def reef(capsys, monkeypatch):
    """Run the CLI in-process: reef(args..., cwd=DIR) -> Result(code, out, err)."""
    from reef_cli.cli.main import run

    def call(*args: str, cwd: Path | None = None) -> Result:
        capsys.readouterr()
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = run(list(args))
        cap = capsys.readouterr()
        return Result(code, cap.out, cap.err)

    return call


def reef_exe() -> str:
    return str(Path(sys.executable).parent / "reef")


def run_reef(*args: str, cwd: Path, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The installed `reef` console script in a real subprocess."""
    return subprocess.run([reef_exe(), *args], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)


def reef_init(root: Path, *args: str) -> Path:
    """`reef -C root init ARGS` in-process, for set-up where the console script is not what the test is about: the
    same command and checks as through `run_reef`, without a fresh interpreter's ~0.3 s CPU of imports each time."""
    from reef_cli.cli.main import run

    root.mkdir(parents=True, exist_ok=True)
    code = run(["-C", str(root), "init", *args])
    assert code == 0, f"reef init {' '.join(args)} exited {code}"
    return root


def reef_read(*args: str, cwd: Path) -> Result:
    """`reef -C cwd ARGS` in-process with its output captured here, for the read-only look-ups (ledger query,
    status) a console-script test makes about what it just did, where no `reef` fixture is at hand."""
    import contextlib
    import io

    from reef_cli.cli.main import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["-C", str(cwd), *args])
    return Result(code, out.getvalue(), err.getvalue())


def set_block(root: Path, *bullets: str) -> None:
    """Replace the learned block of root/CLAUDE.md with `bullets`, one a line (a candidate in the working tree)."""
    path = root / "CLAUDE.md"
    text = path.read_text()
    start = text.index("<!-- reef:begin learned -->") + len("<!-- reef:begin learned -->")
    end = text.index("<!-- reef:end learned -->")
    path.write_text(text[:start] + "\n" + "".join(b + "\n" for b in bullets) + text[end:])


def example_suite_project(reef, root: Path, agent: str | None = None) -> Path:
    """`reef init` in root (made if missing) with the example canary suite, repeats 2, and the example agent (or the
    command `agent`) in harness.yaml; not published, so each caller publishes with its own message."""
    from reef_cli.example_agent import suite_files

    root.mkdir(exist_ok=True)
    assert reef("-C", str(root), "init").code == 0
    (root / "canary").mkdir()
    (root / "canary" / "example.yaml").write_text(suite_files()["example.yaml"])
    cfg = root / "harness.yaml"
    lines = [ln for ln in cfg.read_text().splitlines() if not ln.startswith("agent:")]
    text = "\n".join(lines).replace("  evaluators: [evaluators/**]", "  evaluators: [evaluators/**]\n  repeats: 2")
    cmd = f'["{agent}", -p, "{{prompt}}"]' if agent else '["{python}", -m, reef_cli.example_agent, -p, "{prompt}"]'
    cfg.write_text(text + f"\nagent: {cmd}\n")
    return root


def fixed(text: str, want: str | None) -> None:
    """Redaction tests: `want` is the redacted text; None: the text comes through untouched. Redacting twice changes
    nothing."""
    from reef_cli.redact import redact

    out, count = redact(text)
    assert out == (text if want is None else want)
    assert count == 0 if want is None else count >= 1
    assert redact(out) == (out, 0)


@contextlib.contextmanager
def planted_fifo(path: Path, after: float = 5.0):
    """A FIFO at `path`, for tests that reef never waits on one. Should reef open it for reading anyway (the bug), a
    writer opens and closes it after `after` seconds, so the reader gets EOF instead of hanging the suite, and the
    test fails here, on leaving the block, saying reef waited."""
    import stat
    import threading

    os.mkfifo(path)
    done = threading.Event()
    waited: list[bool] = []

    def release() -> None:
        while not done.wait(after):  # each open that waits is released, however many there are
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # on a FIFO, succeeds only while a reader waits
            except OSError:
                continue
            if stat.S_ISFIFO(os.fstat(fd).st_mode):  # not the regular file reef may have replaced it with
                waited.append(True)
            os.close(fd)

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join()
    assert not waited, f"reef waited on the FIFO at {path}"
