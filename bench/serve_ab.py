"""Two versions of `reef serve` side by side in one run: added latency and CPU per call of a base checkout's gateway
and this checkout's, against the same fake upstream, the three targets interleaved call by call so the machine's
noise hits all alike. What the commits of issue 11 were measured with.

    git archive REV reef_cli harness_templates recipes adapters | tar -x -C /tmp/base
    .venv/bin/python bench/serve_ab.py --base /tmp/base [--requests 300] [--tmp /dev/shm] [--realtime]

--realtime (root) runs every process of the measurement under SCHED_FIFO, as in bench/serve_bench.py.
--raw-client measures with a plain blocking socket client (one keep-alive connection per target, the base and this
gateway alternating which goes first) instead of aiohttp's client, whose own parsing costs more than the difference
being measured: what session 7's changes were measured with.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_bench as sb  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a directory holding the base version's reef_cli (and templates)")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--tmp", help="where the two projects live (default: the system temp dir)")
    ap.add_argument("--realtime", action="store_true")
    ap.add_argument("--raw-client", action="store_true", help="a plain socket client instead of aiohttp's")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="serve-ab-", dir=args.tmp))
    port = sb.free_port()
    procs = [subprocess.Popen([sys.executable, sb.__file__, "--upstream-only", str(port)])]
    try:
        upstream = f"http://127.0.0.1:{port}"
        sb.wait_http(upstream + "/v1/models")
        reef = str(Path(sys.executable).parent / "reef")
        gws = {}
        for name, path in (("base", str(Path(args.base).resolve())), ("this", None)):
            project = tmp / name
            project.mkdir()
            subprocess.run([reef, "init"], cwd=project, check=True, capture_output=True)
            gw_port = sb.free_port()
            env = {**os.environ, **({"PYTHONPATH": path} if path else {})}
            code = "import sys; from reef_cli.cli.entry import main; sys.argv = ['reef'] + sys.argv[1:]; main()"
            proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--upstream", upstream, "--port",
                                     str(gw_port)], cwd=project, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            procs.append(proc)
            gws[name] = (proc, f"http://127.0.0.1:{gw_port}")
            sb.wait_http(gws[name][1] + "/healthz")
        if args.realtime:
            sb.set_priority([os.getpid()] + [p.pid for p in procs], True)
        print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        targets = {"direct": (upstream, {}), **{name: (url, {}) for name, (_p, url) in gws.items()}}
        for stream in (False, True):
            before = {name: sb.cpu_s(p.pid) for name, (p, _u) in gws.items()}
            lat = (raw_latencies(targets, args.requests, stream) if args.raw_client
                   else asyncio.run(sb.latencies(targets, args.requests, stream)))
            direct = lat["direct"]
            row = [f"{'stream' if stream else 'json':6} direct p50 {sb.pct(direct, .5):.3f} ms"]
            for name, (p, _u) in gws.items():
                cpu = (sb.cpu_s(p.pid) - before[name]) / (args.requests + 20) * 1e6
                row.append(f"{name} adds p50 {sb.pct(lat[name], .5) - sb.pct(direct, .5):+.3f} p99 "
                           f"{sb.pct(lat[name], .99) - sb.pct(direct, .99):+.3f} ms, CPU {cpu:.0f} us/call")
            print(" | ".join(row), flush=True)
        return 0
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def raw_latencies(targets: dict[str, tuple[str, dict]], n: int, stream: bool) -> dict[str, list[float]]:
    """Sequential calls over one keep-alive socket per target, in ms; base and this alternate their order."""
    import json
    import socket
    import time

    body = {**sb.BODY, "stream": True, "stream_options": {"include_usage": True}} if stream else sb.BODY
    data = json.dumps(body).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%b" % (len(data), data))

    def call(sock: socket.socket) -> None:
        sock.sendall(request)
        buf = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the connection closed mid-answer")
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if not sep:
                continue
            if not head.startswith(b"HTTP/1.1 200 "):
                raise RuntimeError(f"status: {head[:60]!r}")
            if b"chunked" in head.lower():
                if rest.endswith(b"0\r\n\r\n"):
                    return
            else:
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                if len(rest) >= length:
                    return

    socks = {}
    for name, (url, _headers) in targets.items():
        host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
        socks[name] = socket.create_connection((host, int(port)))
        socks[name].setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for sock in socks.values():
            for _ in range(20):
                call(sock)
        out = {name: [] for name in targets}
        order = list(targets)
        for i in range(n):
            for name in (order if i % 2 else [order[0], *reversed(order[1:])]):
                started = time.perf_counter()
                call(socks[name])
                out[name].append((time.perf_counter() - started) * 1000)
        return out
    finally:
        for sock in socks.values():
            sock.close()


if __name__ == "__main__":
    sys.exit(main())
