"""Where canary episodes run: a local thread pool (the default) or Ray tasks (`--executor ray`, `reef[ray]`).

The seam is deliberately small. `EpisodeRunner.run_many` asks an executor for futures, one per episode, and keeps
everything else on the driver: the journal, the ledger writes, the budget and the early stop (the gate decides
which episodes to ask for next only from results it has), so a Ray run writes the same journal and reaches the same
verdict as a local one for the same seed. An episode's score depends on its task, side, repeat and seed, not on
where it ran.

Ray: each episode is one task running `EpisodeRunner.run_one` in a Ray worker with the runner's settings (not the
runner object: its process-group registry stays on the driver). A worker that dies mid-episode (OOM, a node lost,
`kill -9`) is retried by Ray up to `RAY_RETRIES` times; an episode that fails inside reef (agent exit, timeout) is
a result, not a retry. Harness trees travel through Ray's object store, put once per content id, and each worker
rebuilds a read-only copy once, so workers need no access to the driver's `.reef/`.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import InvalidInput

KINDS = ("local", "ray")
RAY_RETRIES = 3
ENV_EXECUTOR = "REEF_EXECUTOR"
ENV_RAY_ADDRESS = "REEF_RAY_ADDRESS"


@dataclass(frozen=True)
class ExecutorSpec:
    """Which executor, and for Ray the cluster to join (None: start a local Ray instance sized to `workers`)."""

    kind: str = "local"
    ray_address: str | None = None

    @classmethod
    def of(cls, kind: str | None = None, ray_address: str | None = None,
           environ: Mapping[str, str] | None = None, config: Any = None) -> "ExecutorSpec":
        """Flags first, then $REEF_EXECUTOR / $REEF_RAY_ADDRESS (how `reef harness evolve` and CI jobs choose),
        then harness.yaml's gate.executor / gate.ray_address (`config`: the baseline's GateConfig)."""
        env = os.environ if environ is None else environ
        if ray_address and not kind:
            kind = "ray"  # an address says which executor
        kind = kind or env.get(ENV_EXECUTOR) or getattr(config, "executor", None) or "local"
        if kind not in KINDS:
            raise InvalidInput(f"unknown executor '{kind}'; use one of: {', '.join(KINDS)}")
        address = ray_address or env.get(ENV_RAY_ADDRESS) or getattr(config, "ray_address", None) or None
        if address and kind != "ray":
            raise InvalidInput("--ray-address needs --executor ray")
        return cls(kind, address)

    def make(self, workers: int):
        """The pool EpisodeRunner.run_many submits episodes to."""
        return make_executor(self, workers)


def read_tree(path: Path) -> dict[str, tuple[bytes, bool]]:
    """A materialised harness tree as {relative path: (bytes, executable)}: what travels to Ray workers."""
    out = {}
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            with open(full, "rb") as f:
                out[rel] = (f.read(), os.access(full, os.X_OK))
    return out


def worker_tree(key: str, tree: dict[str, tuple[bytes, bool]]) -> Path:
    """The tree `key` (a content id) as a read-only directory on this worker, built once per worker process (a
    directory per process: two workers never race to build the same one)."""
    import hashlib
    import tempfile

    from .episodes import materialise_readonly
    from .gitstore import MODE_EXEC, MODE_FILE, Entry

    base = Path(tempfile.gettempdir()) / f"reef-ray-trees-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    dest = base / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}-{os.getpid()}"
    files = {rel: Entry(data, MODE_EXEC if exe else MODE_FILE) for rel, (data, exe) in tree.items()}
    return materialise_readonly(dest, files)


def _run_episode(settings: dict, req, harness_key: str, harness: dict, suite_key: str, suite: dict) -> Any:
    """Runs in a Ray worker: a one-episode runner with the driver's settings, on harness and suite trees rebuilt
    from the object store (the driver's paths need not exist on this node). The trees are top-level arguments:
    Ray resolves object refs only there."""
    from dataclasses import replace

    from .episodes import EpisodeRunner

    req = replace(req, harness_dir=worker_tree(harness_key, harness))
    return EpisodeRunner(**{**settings, "suite_dir": worker_tree(suite_key, suite)}, workers=1).run_one(req)


_remote: dict[str, Any] = {}


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def ensure_ray(address: str | None, workers: int) -> Any:
    """Import Ray and connect (or start a local instance once per process)."""
    try:
        import ray
    except ImportError:
        raise InvalidInput("--executor ray needs Ray: pip install 'reef[ray]' (or ./install.sh --dev)") from None
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                                  "configure_logging": False}
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = max(1, workers)
        try:
            ray.init(**kwargs)
        except ConnectionError as exc:
            raise InvalidInput(f"--ray-address {address}: cannot connect to Ray ({exc})") from None
        _raylet_messages_to_stderr()
    if "episode" not in _remote:
        _remote["episode"] = ray.remote(max_retries=RAY_RETRIES, retry_exceptions=False, num_cpus=1)(_run_episode)
    return ray


def _raylet_messages_to_stderr() -> None:
    """Ray's driver prints cluster messages ("(raylet) A worker died ...") to stdout, which would corrupt
    `reef eval --json`; they are diagnostics, so they go to stderr. Ray has no setting for this (2.60), hence the
    wrap of its one printing function; if Ray renames it, messages stay on stdout and nothing else changes."""
    try:
        from ray._private import worker
    except ImportError:  # pragma: no cover
        return
    original = getattr(worker, "print_to_stdstream", None)
    if original is None or getattr(original, "_reef", False):
        return

    def to_stderr(data, ignore_prefix):
        return original({**data, "is_err": True}, ignore_prefix)

    to_stderr._reef = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


class RayExecutor:
    def __init__(self, workers: int, address: str | None = None) -> None:
        self.ray = ensure_ray(address, workers)
        self.refs: list[Any] = []
        self.trees: dict[str, Any] = {}

    def tree(self, key: str, path: Path) -> tuple:
        """(key, object ref) of a harness tree, put into Ray's object store once per run: content-addressed by
        `key`, so each tree crosses to the cluster once however many episodes use it."""
        if key not in self.trees:
            self.trees[key] = self.ray.put(read_tree(path))
        return key, self.trees[key]

    def submit(self, runner, req) -> Future:
        harness = self.tree(req.content_id, req.harness_dir)
        suite = self.tree(f"suite:{Path(runner.suite_dir).name}:{runner.suite_dir}", runner.suite_dir)
        ref = _remote["episode"].remote(runner.settings(), req, *harness, *suite)
        self.refs.append(ref)
        return ref.future()

    def shutdown(self, cancel: bool = False) -> None:
        if cancel:
            for ref in self.refs:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # already finished, or the cluster is gone: nothing left to stop
                    pass
        self.refs = []
        self.trees = {}


def make_executor(spec: ExecutorSpec | None, workers: int):
    spec = spec or ExecutorSpec()
    if spec.kind == "ray":
        return RayExecutor(workers, spec.ray_address)
    from .episodes import LocalPool

    return LocalPool(workers)
