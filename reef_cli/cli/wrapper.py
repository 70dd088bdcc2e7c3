"""`reef-claude`, `reef-opencode`, `reef-pi`, `reef-codex`: the agent's own command with `reef-` in front.

A wrapper is bound to a reef project and scenario (by the script `reef harness install` writes, through
REEF_PROJECT / REEF_SCENARIO / REEF_INSTALL_ROOT; unbound, it uses the reef project around the current directory), so
it runs from inside whatever code project the user is working on; the harness comes from the install root, never
from that directory. On each start it:
1. refuses to run when an installed file was changed in place, and says how to restore it;
2. brings the install root up to the current release when the head moved (materialise, then run);
3. runs the real agent binary with the user's arguments and the adapter's env pointing it at the install root,
   through `runs.run_recorded`, so the interaction is recorded with its frozen release exactly as `reef run` does,
   signals are forwarded and the exit status is mirrored (128+signal);
4. adds what the agent said it loaded, where it says so (Claude Code's `init` event, pi's `session` event, Codex's
   `thread.started`), and ingests the agent's own session transcript (reef_cli/ingest).
`reef-<agent> report --score S [--feedback TEXT]` reports on this shell's last wrapper session.

`reef-<agent> --via-serve URL ...` (or REEF_VIA_SERVE=URL) sends the agent's model traffic through a running
`reef serve`, so each model call gets its own receipt, grouped under the wrapper run's receipt as x-reef-session.
How depends on what each agent lets the environment set (see `via_serve_env`).

Under reef itself (a gate episode or `reef run -- reef-claude ...`), REEF_HARNESS_DIR names the canonical harness
to run (the candidate, in a gate): the wrapper then compiles that tree into a throwaway config directory, runs the
agent on it and records nothing, since its caller records.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..errors import ConflictError, ExitCode, InvalidInput, NotFound

LAST_KEEP = 50


class Binding:
    """Which project, scenario and install root this wrapper serves."""

    def __init__(self, adapter_name: str, environ: dict | None = None, cwd: Path | None = None):
        from ..adapters import load
        from ..install import default_root
        from ..project import Project, find_project

        self.environ = dict(os.environ if environ is None else environ)
        self.adapter = load(adapter_name)
        if self.environ.get("REEF_PROJECT"):
            self.project = Project(Path(self.environ["REEF_PROJECT"]))
            if not (self.project.state / "project.json").is_file():
                raise NotFound(f"reef-{adapter_name} is bound to {self.project.root}, which is no longer a reef "
                               "project; re-run 'reef harness install' in the project you want")
        else:
            try:
                self.project = find_project(cwd or Path.cwd())
            except NotFound:
                self._adopt(adapter_name)  # the unbound console script: the user's one installation, if one
        self.scenario = self.environ.get("REEF_SCENARIO") or self.project.default_scenario()
        root = self.environ.get("REEF_INSTALL_ROOT")
        self.root = Path(root) if root else default_root(self.project, self.scenario, self.environ)
        self.agent_dir = self.root / self.adapter.config_dir

    def _adopt(self, adapter_name: str) -> None:
        """Outside any reef project and unbound (the venv's reef-<agent> earlier on PATH than the wrapper `reef
        harness install` wrote): run as that wrapper when this user has exactly one installation of the agent."""
        from ..errors import UsageError
        from ..install import installations
        from ..project import Project

        found = installations(adapter_name, self.environ)
        if not found:
            raise NotFound(f"reef-{adapter_name} is not bound to a reef project: run 'reef harness install "
                           f"--adapter {adapter_name}' in your reef project, or run it inside one")
        if len(found) > 1:
            picks = "; ".join(f"{d['project']} (scenario {d['scenario']}, " +
                              (f"wrapper {d['wrapper']})" if d.get("wrapper") else f"install root {d['root']})")
                              for d in found)
            raise UsageError(f"reef-{adapter_name} is not bound and {len(found)} installations of {adapter_name} "
                             f"exist: {picks}; run the wrapper of the one you mean, or run reef-{adapter_name} "
                             "inside its project")
        d = found[0]
        self.project = Project(Path(d["project"]))
        self.environ.setdefault("REEF_SCENARIO", d["scenario"])
        self.environ.setdefault("REEF_INSTALL_ROOT", d["root"])

    def store(self):
        from ..store import HarnessStore

        store = HarnessStore(self.project, self.scenario)
        if not store.exists():
            raise NotFound(f"scenario '{self.scenario}' does not exist in {self.project.root}")
        return store

    def reef_hint(self, command: str) -> str:
        """`reef COMMAND` as the user would type it for this binding's project (and scenario, unless the default)."""
        import shlex

        from ..printable import printable

        scenario = "" if self.scenario == self.project.default_scenario() else f" --scenario {self.scenario}"
        return printable(f"reef -C {shlex.quote(str(self.project.root))}{scenario} {command}")

    def restore_hint(self) -> str:
        return (f"reef -C {self.project.root} --scenario {self.scenario} harness install --adapter {self.adapter.name}"
                f" --dest {self.root}")

    def last_path(self) -> Path:
        from ..install import record_path

        rec = record_path(self.project, self.adapter.name, self.agent_dir)
        return rec.with_name(rec.stem + ".sessions.json")


def prepare(binding: Binding, store):
    """Verify the install root, bring it to the head release, and return its record and the head as read here."""
    from ..install import install, load_record, record_path, verify
    from ..sessions import flocked

    adapter = binding.adapter
    lock_path = record_path(binding.project, adapter.name, binding.agent_dir).with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with flocked(lock_path):
        record = load_record(binding.project, adapter, binding.root)
        head = store.require_head()
        if record is not None:
            problems = verify(record)
            if problems:
                shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
                raise ConflictError(f"the installed {adapter.name} harness was changed in place ({shown}); reef will not "
                                    f"run an unreviewed harness. Restore it with: {binding.restore_hint()} — or make "
                                    "the change in the reef project and publish it")
            if record.content_id == head.content_id and os.path.isdir(binding.agent_dir):
                return record, head
        wrapper = Path(record.wrapper) if record and record.wrapper else None
        result = install(store, adapter, release=head, root=binding.root, bin_dir=wrapper.parent if wrapper else None,
                         write_wrapper=wrapper is not None, environ=binding.environ)
        if record is not None and not result.current:
            _note(f"updated the {adapter.name} harness to release {head.release_id} (step {head.step})")
        return result.record, head


def split_via_serve(args: list[str], environ: dict) -> tuple[str | None, list[str]]:
    """`--via-serve URL` / `--via-serve=URL` as the wrapper's first arguments (the rest are the agent's), else
    REEF_VIA_SERVE."""
    if args and args[0] == "--via-serve":
        if len(args) < 2 or not args[1].startswith(("http://", "https://")):
            raise InvalidInput("--via-serve needs the gateway's URL, e.g. --via-serve http://127.0.0.1:8900")
        return args[1].rstrip("/"), args[2:]
    if args and args[0].startswith("--via-serve="):
        url = args[0].split("=", 1)[1]
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(f"--via-serve {url}: expected the gateway's http(s) URL")
        return url.rstrip("/"), args[1:]
    url = environ.get("REEF_VIA_SERVE")
    if url and not url.startswith(("http://", "https://")):
        raise InvalidInput(f"REEF_VIA_SERVE={url}: expected the gateway's http(s) URL")
    return (url.rstrip("/") if url else None), args


def via_serve_env(adapter_name: str, url: str, receipt: str, environ: dict) -> dict:
    """The agent's environment for sending its model calls through `reef serve` at `url`, session = `receipt`.

    - claude: ANTHROPIC_BASE_URL, and the session (and REEF_SERVE_TOKEN as x-reef-token) in
      ANTHROPIC_CUSTOM_HEADERS, added to the user's own headers;
    - opencode: ANTHROPIC_BASE_URL / OPENAI_BASE_URL for its built-in providers, with the session in the path
      (/session/RECEIPT/v1); a provider of the user's config reaches it with "baseURL": "{env:REEF_SERVE_BASE_URL}";
    - pi: reads base URLs only from its models.json: a provider's "baseUrl" set to the gateway's /v1 URL and
      "headers": {"x-reef-session": "REEF_SERVE_SESSION"} (pi resolves header values from the environment).
    Every agent also gets REEF_SERVE_URL, REEF_SERVE_BASE_URL (session path, ending in /v1) and REEF_SERVE_SESSION.
    """
    session_base = f"{url}/session/{receipt}"
    env = {"REEF_SERVE_URL": url, "REEF_SERVE_BASE_URL": session_base + "/v1", "REEF_SERVE_SESSION": receipt}
    if adapter_name == "claude":
        headers = [h for h in environ.get("ANTHROPIC_CUSTOM_HEADERS", "").splitlines()
                   if h.strip() and not h.lower().startswith(("x-reef-session:", "x-reef-token:"))]
        headers.append(f"x-reef-session: {receipt}")
        if environ.get("REEF_SERVE_TOKEN"):
            headers.append(f"x-reef-token: {environ['REEF_SERVE_TOKEN']}")
        env["ANTHROPIC_BASE_URL"] = url
        env["ANTHROPIC_CUSTOM_HEADERS"] = "\n".join(headers)
    elif adapter_name == "opencode":
        env["ANTHROPIC_BASE_URL"] = session_base + "/v1"
        env["OPENAI_BASE_URL"] = session_base + "/v1"
    return env


def _pi_via_serve_hint(agent_dir: Path, url: str) -> str | None:
    try:
        models = (agent_dir / "models.json").read_text()
    except OSError:
        models = ""
    if url in models or "REEF_SERVE" in models:
        return None
    return (f"pi takes its base URL only from {agent_dir / 'models.json'}: set a provider's \"baseUrl\" to {url}/v1 "
            "and \"headers\": {\"x-reef-session\": \"REEF_SERVE_SESSION\"} to record its calls through reef serve")


def run(adapter_name: str, args: list[str], *, environ: dict | None = None, cwd: Path | None = None) -> int:
    from ..adapters import captured_events, find_binary, install_hint
    from ..runs import run_recorded

    binding = Binding(adapter_name, environ, cwd)
    via, args = split_via_serve(args, binding.environ)
    adapter = binding.adapter
    store = binding.store()
    record, head = prepare(binding, store)
    # the record's release is the head read by prepare, unless a rollback republished the same content since
    release = head if record.release_id == head.release_id else store.find(record.release_id)
    binary = find_binary(adapter, binding.environ)
    if binary is None:
        raise NotFound(install_hint(adapter))
    child_env = {**binding.environ, **adapter.agent_env(Path(record.agent_dir))}
    installed = {"release_id": record.release_id, "content_id": record.content_id, "step": record.step,
                 "root": record.root, "agent_dir": record.agent_dir, "binary": binary}

    def on_output(stdout: bytes, _stderr: bytes) -> dict:
        events = captured_events(adapter, stdout)
        return {"agent_reported": events} if events else {}

    extra = {"install": installed}
    env_for_receipt = None
    if via:
        extra["via_serve"] = via
        env_for_receipt = lambda receipt: via_serve_env(adapter.name, via, receipt, child_env)  # noqa: E731
        if adapter.name == "pi":
            hint = _pi_via_serve_hint(Path(record.agent_dir), via)
            if hint:
                _note(hint)
    result = run_recorded(store, [binary, *args], env=child_env, adapter=adapter.name,
                          harness_dir=Path(record.agent_dir), extra_payload=extra,
                          cwd=cwd or Path.cwd(), on_output=on_output, release=release,
                          env_for_receipt=env_for_receipt,
                          after_record=lambda rec: _remember(binding, rec.record_id))
    receipt = result.record.record_id
    if result.stop_signal is not None:  # asked to stop once the agent was gone: the record is kept, stop now
        from ..errors import Stopped

        if binding.environ.get("REEF_INGEST", "1") != "0":
            _note("this session's transcript was not ingested: `reef ingest` reads it when you want")
        raise Stopped.after_run(result.stop_signal, receipt)
    _ingest_session(binding, store, record, result.record, cwd or Path.cwd())
    if not binding.environ.get("REEF_QUIET"):
        _note(f"receipt {receipt} (release {record.release_id}, step {record.step}); "
              f"rate it: reef-{adapter.name} report --score S --feedback TEXT")
    return result.exit_code


def _ingest_session(binding: Binding, store, record, interaction, cwd: Path) -> None:
    """This run's session transcript into the ledger (reef_cli/ingest: turns, tool outcomes, corrections as implicit
    reports), after the agent exited; REEF_INGEST=0 turns it off. A transcript it could not read, whole or in part,
    is one line on stderr (never a traceback) and stays listed by `reef status`. It never changes the run's exit
    status: that is the agent's own, which scripts and CI read as the agent's verdict on its task; learning is
    reef's business, and a transcript reef cannot parse is not a failed task."""
    if binding.environ.get("REEF_INGEST", "1") == "0":
        return
    try:
        from ..ingest import failures, ingest, wrapper_sources

        reported = interaction.payload.get("agent_reported") or {}
        sources = wrapper_sources(binding.adapter.name, Path(record.agent_dir), reported, record.release_id,
                                  record.content_id, cwd, binding.environ)
        res = ingest(store, sources=sources, environ=binding.environ)
        if res.corrections and not binding.environ.get("REEF_QUIET"):
            _note(f"heard {res.corrections} correction(s) in this session; reef harness evolve learns from them")
        if line := failures.notice(res.failed):  # also in `reef status` (failures.py): this terminal may be gone
            _note(f"{line}; '{binding.reef_hint('status')}' lists them")
    except Exception as exc:  # noqa: BLE001 - the run is over and recorded: a transcript reef cannot read must not fail it
        from ..printable import printable

        _note(f"could not ingest this session's transcript: {printable(str(exc))}")


# -- under reef: a gate episode, or `reef run -- reef-<agent>` ----------------------------------------------------
def episode_harness(environ: dict) -> Path | None:
    """The canonical harness reef asked for (it has a harness.yaml; compiled install dirs never do)."""
    from ..config import CONFIG_NAME

    value = environ.get("REEF_HARNESS_DIR")
    if value and (Path(value) / CONFIG_NAME).is_file():
        return Path(value)
    return None


def run_episode(adapter_name: str, harness_dir: Path, args: list[str], *, environ: dict,
                cwd: Path | None = None) -> int:
    """Compile `harness_dir` for the agent into a temp config dir and run the agent on it; record nothing."""
    import shutil
    import tempfile

    from ..adapters import find_binary, install_hint, load
    from ..compile import compile_harness
    from ..install import MARKER
    from ..harness_files import collect_files, write_files

    adapter = load(adapter_name)
    binary = find_binary(adapter, environ)
    if binary is None:
        raise NotFound(install_hint(adapter))
    via, args = split_via_serve(args, environ)
    compiled = compile_harness(collect_files(harness_dir, ("**",)), adapter, layout="config")
    tmp = Path(tempfile.mkdtemp(prefix=f"reef-{adapter.name}-episode-"))
    try:
        agent_dir = tmp / adapter.config_dir
        write_files(agent_dir, compiled.files)
        _carry_client_state(adapter, environ, agent_dir, set(compiled.files) | {MARKER})
        env = {**environ, **adapter.agent_env(agent_dir)}
        if via:  # the episode's caller holds the receipt
            env.update(via_serve_env(adapter.name, via, environ.get("REEF_RECORD_ID") or "episode", env))
        return run_plain([binary, *args], env=env, cwd=cwd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _carry_client_state(adapter, environ: dict, agent_dir: Path, ours: set[str]) -> None:
    """The user's own agent settings next to the installed harness (pi's models.json, a login): top-level files only."""
    import shutil

    root = environ.get("REEF_INSTALL_ROOT")
    if not root:
        return
    installed = Path(root) / adapter.config_dir
    try:
        entries = list(os.scandir(installed))
    except OSError:
        return
    for e in entries:
        if e.name not in ours and e.is_file(follow_symlinks=False):
            shutil.copy2(e.path, agent_dir / e.name)


def run_plain(argv: list[str], *, env: dict, cwd: Path | None = None) -> int:
    """Run a command with our stdio, forwarding signals; its exit status, or 128+signal."""
    import signal
    import subprocess

    from ..runs import exit_status, forwarding

    try:
        proc = subprocess.Popen(argv, env=env, cwd=cwd)
    except OSError as exc:
        raise InvalidInput(f"cannot run {argv[0]}: {exc.strerror}") from None
    with forwarding(proc, (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1,
                           signal.SIGUSR2)):
        status = proc.wait()
    return exit_status(status)


# -- the last session of this shell ----------------------------------------------------------------------------------
def _shell(binding: Binding) -> str:
    from ..sessions import shell_key

    return shell_key(binding.environ)


def _remember(binding: Binding, receipt: str) -> None:
    from ..project import write_atomic
    from ..sessions import flocked

    path = binding.last_path()
    with flocked(f"{path}.lock"):
        sessions = _read_sessions(path)
        sessions[_shell(binding)] = {"receipts": [receipt], "at": time.time()}
        keep = dict(sorted(sessions.items(), key=lambda kv: kv[1].get("at", 0))[-LAST_KEEP:])
        write_atomic(path, json.dumps({"sessions": keep}, sort_keys=True).encode() + b"\n")


def _read_sessions(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return dict(data.get("sessions") or {})
    except (FileNotFoundError, ValueError, AttributeError):
        return {}


def _forget_locked(binding: Binding, receipts: list[str]) -> None:
    """Drop this shell's last session once reported; the caller holds the sessions file's lock."""
    from ..project import write_atomic

    path = binding.last_path()
    sessions = _read_sessions(path)
    mine = sessions.get(_shell(binding))
    if mine and set(mine.get("receipts", [])) <= set(receipts):
        del sessions[_shell(binding)]
        write_atomic(path, json.dumps({"sessions": sessions}, sort_keys=True).encode() + b"\n")


def report(adapter_name: str, args: list[str], *, environ: dict | None = None, cwd: Path | None = None) -> int:
    """`reef-<agent> report ...`: `reef report` for the bound project, on this shell's last wrapper session."""
    from .main import run as reef_run
    from ..project import ScenarioPaths
    from ..sessions import PendingReceipts

    from ..sessions import flocked

    binding = Binding(adapter_name, environ, cwd)
    explicit = any(a == "--receipt" or a.startswith("--receipt=") for a in args)
    if any(a in ("-h", "--help") for a in args):
        return reef_run(["report", "--help"])
    argv = ["-C", str(binding.project.root), "--scenario", binding.scenario, "report", *args]
    if explicit:
        return reef_run(argv)
    path = binding.last_path()
    nothing = InvalidInput(f"no reef-{adapter_name} session to report on in this shell: run reef-{adapter_name} "
                           "first, or pass --receipt ID")
    if not path.parent.is_dir():
        raise nothing
    with flocked(f"{path}.lock"):  # held until reported: two reports racing in one shell attach once
        receipts = list((_read_sessions(path).get(_shell(binding)) or {}).get("receipts") or [])
        if not receipts:
            raise nothing
        for r in receipts:
            argv += ["--receipt", r]
        code = reef_run(argv)
        if code == 0:
            _forget_locked(binding, receipts)
            PendingReceipts(ScenarioPaths(binding.project, binding.scenario).dir, _shell(binding)).clear(receipts)
    return code


# -- entry points ----------------------------------------------------------------------------------------------------
def _note(message: str) -> None:
    from ..printable import printable

    sys.stderr.write(f"reef: {printable(message)}\n")


def main_for(adapter_name: str, argv: list[str] | None = None) -> int:
    from .boundary import guarded

    args = list(sys.argv[1:] if argv is None else argv)

    def go() -> int:
        if args and args[0] == "report":
            return report(adapter_name, args[1:])
        harness = episode_harness(dict(os.environ))
        if harness is not None:
            return run_episode(adapter_name, harness, args, environ=dict(os.environ))
        return run(adapter_name, args)

    return guarded(go, prog=f"reef-{adapter_name}")


def claude_main() -> None:
    sys.exit(main_for("claude"))


def opencode_main() -> None:
    sys.exit(main_for("opencode"))


def pi_main() -> None:
    sys.exit(main_for("pi"))


def codex_main() -> None:
    sys.exit(main_for("codex"))


def main() -> None:
    """`python -m reef_cli.cli.wrapper ADAPTER [args...]`."""
    if len(sys.argv) < 2:
        sys.stderr.write("usage: python -m reef_cli.cli.wrapper claude|opencode|pi|codex [args...]\n")
        sys.exit(int(ExitCode.USAGE))
    sys.exit(main_for(sys.argv[1], sys.argv[2:]))


if __name__ == "__main__":
    main()
