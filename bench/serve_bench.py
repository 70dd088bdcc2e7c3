"""reef serve's cost: added latency per call and requests/s at 64 concurrent clients, against the same fake upstream
measured straight (no gateway) in the same run, and against LiteLLM's proxy when it is installed in its own venv.

    .venv/bin/python bench/serve_bench.py [--requests 400] [--concurrency 64] [--per-client 20]
                                          [--litellm-venv /tmp/litellm-venv] [--tmp /dev/shm] [--realtime]
                                          [--compare-asyncio] [--floor]

The upstream is a small aiohttp server in its own process answering OpenAI chat completions (JSON, or 5 SSE events
with usage then [DONE]) at once, so what is measured is the gateway. Every request through reef is durably
recorded (group-committed fsyncs); the run checks the ledger holds exactly one record per request and verifies.
LiteLLM: `python3 -m venv V && V/bin/pip install 'litellm[proxy]'`, then --litellm-venv V; skipped (and said so)
when absent. Targets: added p50 <= 1 ms, p99 <= 5 ms, >= 2x LiteLLM's requests/s.

--realtime (root): the latency phase runs every process of the measurement (this client, the upstream, the
gateways, LiteLLM) under SCHED_FIFO, so that on a machine shared with other work a sequential call is not charged
for the scheduler's queue (several ms per wake-up at a load of 8 on 2 cores); the baseline gets the same priority
in the same run. The throughput phase always runs at normal priority. --compare-asyncio adds a second gateway on
asyncio's own loop (`reef serve --loop asyncio`) to the latency phase, to show what uvloop is worth. --floor adds
bare pass-through proxies that record nothing (bench/serve_floor.py: aiohttp's application server, aiohttp's
low-level server, an asyncio.Protocol proxy parsing with httptools) to the latency phase: how much of reef's added
latency is the HTTP stack itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHUNK = ('{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake-model",'
         '"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}')
LITELLM_KEY = "sk-reef-bench-only-4f0c2a9e7d1b"  # a throwaway master key for the local LiteLLM proxy
USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


def upstream_main(port: int) -> None:
    """The fake upstream (its own process)."""
    from aiohttp import web

    completion = json.dumps({"id": "chatcmpl-b", "object": "chat.completion", "created": 1, "model": "fake-model",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "DONE"},
                                          "finish_reason": "stop"}], "usage": USAGE}).encode()
    events = b"".join(b"data: " + e.encode() + b"\n\n" for e in (
        CHUNK % ('{"role":"assistant","content":""}', "null"), CHUNK % ('{"content":"DONE"}', "null"),
        CHUNK % ("{}", '"stop"'),
        '{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake-model","choices":[],'
        '"usage":' + json.dumps(USAGE) + "}", "[DONE]"))

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.Response(body=completion, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(events)
        await resp.write_eof()
        return resp

    async def models(_request):
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 90) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up in {timeout:g} s")
            time.sleep(0.2)


FLOOR_KINDS = ("aiohttp-app", "aiohttp-low", "low+reef", "raw+client", "uvicorn+reef", "protocol")
# --floor-ledger: the same with one durable append per call (the best a recording gateway on each stack can do)
FLOOR_LEDGER_KINDS = ("aiohttp-app+ledger", "low+reef+ledger", "uvicorn+reef+ledger", "protocol+ledger")
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "say DONE"}]}


async def one(session, url: str, stream: bool, headers: dict) -> None:
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}} if stream else BODY
    async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as resp:
        data = await resp.read()
        if resp.status != 200 or (stream and not data.endswith(b"[DONE]\n\n")):
            raise RuntimeError(f"{url}: status {resp.status}: {data[:200]!r}")


def set_priority(pids: list[int], realtime: bool) -> None:
    """SCHED_FIFO (priority 10) or back to normal for every thread of each process."""
    policy, param = (os.SCHED_FIFO, os.sched_param(10)) if realtime else (os.SCHED_OTHER, os.sched_param(0))
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setscheduler(int(tid), policy, param)
            except ProcessLookupError:  # a thread that just ended
                pass


async def latencies(targets: dict[str, tuple[str, dict]], n: int, stream: bool) -> dict[str, list[float]]:
    """Sequential calls, the targets interleaved so drift hits all alike."""
    import aiohttp

    out = {name: [] for name in targets}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        for name, (url, h) in targets.items():  # warm up connections and caches
            for _ in range(20):
                await one(session, url, stream, h)
        for _ in range(n):
            for name, (url, h) in targets.items():
                t0 = time.perf_counter()
                await one(session, url, stream, h)
                out[name].append((time.perf_counter() - t0) * 1000)
    return out


async def throughput(url: str, headers: dict, concurrency: int, per_client: int, stream: bool) -> float:
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(one(session, url, stream, headers) for _ in range(concurrency)))  # warm
        async def client():
            for _ in range(per_client):
                await one(session, url, stream, headers)
        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return concurrency * per_client / (time.perf_counter() - t0)


def append_latency(path: Path, n: int) -> list[float]:
    """The floor under every receipt: one durable append, sequential, on the disk the gateway's ledger uses."""
    sys.path.insert(0, str(REPO))
    from reef_cli.ledger import Ledger

    out = []
    with Ledger(path, "default") as ledger:
        for i in range(n):
            t0 = time.perf_counter()
            ledger.append("interaction", {"n": i, "bench": True}, release_id=None, content_id=None)
            out.append((time.perf_counter() - t0) * 1000)
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (robust to a machine busy with other work)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_line(asked: bool) -> str:
    """How this machine's idle CPUs wait, which sets what every wake-up costs (bench/RESULTS.md, session 11)."""
    from reef_cli.serve import cpu_latency

    base = Path("/sys/devices/system/cpu/cpuidle")
    driver = (base / "current_driver").read_text().strip() if (base / "current_driver").exists() else "unknown"
    poll = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    halt = f", guest_halt_poll_ns={poll.read_text().strip()}" if poll.exists() else ""
    limit = cpu_latency.current()
    held = ("CPU latency limit 0 us: idle CPUs poll" if limit == 0 else
            f"CPU latency limit {'none' if limit in (None, 2000000000) else f'{limit} us'}: idle CPUs may sleep")
    note = " (--low-latency: NOT in effect, see the gateway's log)" if asked and limit != 0 else ""
    return f"cpuidle {driver}{halt}; {held}{note}"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def start_litellm(venv: Path, upstream: str, tmp: Path):
    exe = venv / "bin" / "litellm"
    if not exe.exists():
        return None, f"skipped: no LiteLLM at {exe} (python3 -m venv {venv} && {venv}/bin/pip install 'litellm[proxy]')"
    port = free_port()
    cfg = tmp / "litellm.yaml"
    cfg.write_text("model_list:\n  - model_name: fake-model\n    litellm_params:\n      model: openai/fake-model\n"
                   f"      api_base: {upstream}/v1\n      api_key: dummy\n"
                   "litellm_settings:\n  telemetry: false\n  drop_params: true\n")
    env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False", "NO_DOCS": "True",
           "LITELLM_MASTER_KEY": LITELLM_KEY}
    proc = subprocess.Popen([str(exe), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=tmp)
    try:
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", timeout=180)
    except RuntimeError as exc:
        proc.kill()
        return None, f"skipped: LiteLLM did not start ({exc})"
    return (proc, f"http://127.0.0.1:{port}"), None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400, help="sequential calls per target for latency")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--per-client", type=int, default=20, help="calls per concurrent client")
    ap.add_argument("--litellm-venv", default=os.environ.get("REEF_LITELLM_VENV", "/tmp/litellm-venv"))
    ap.add_argument("--tmp", help="where the bench project lives (default: the system temp dir; a tmpfs such as "
                    "/dev/shm shows the gateway's cost without the disk's syncs)")
    ap.add_argument("--realtime", action="store_true", help="latency phase under SCHED_FIFO for every process "
                    "measured, baseline included (root; for a machine shared with other work)")
    ap.add_argument("--low-latency", action="store_true", help="start reef's gateway(s) with --low-latency (idle "
                    "CPUs kept polling while they run; the direct call shares the machine, so it gets the same)")
    ap.add_argument("--compare-asyncio", action="store_true", help="also measure a gateway on asyncio's loop")
    ap.add_argument("--floor", action="store_true", help="also measure bare pass-through proxies that record "
                    "nothing, one per HTTP stack (bench/serve_floor.py)")
    ap.add_argument("--floor-ledger", action="store_true", help="with --floor: also each bare proxy with one "
                    "durable ledger append per call")
    ap.add_argument("--floor-kinds", help="with --floor: only these proxies, comma-separated (fewer processes "
                    "taking turns keep each one's caches warmer, as a gateway alone has them)")
    ap.add_argument("--upstream-only", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.upstream_only:
        upstream_main(args.upstream_only)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="serve-bench-", dir=args.tmp))
    procs = []
    try:
        up_port = free_port()
        procs.append(subprocess.Popen([sys.executable, __file__, "--upstream-only", str(up_port)]))
        upstream = f"http://127.0.0.1:{up_port}"
        wait_http(upstream + "/v1/models")
        project = tmp / "proj"
        project.mkdir()
        reef = str(Path(sys.executable).parent / "reef")
        subprocess.run([reef, "init"], cwd=project, check=True, capture_output=True)
        gw_port = free_port()
        low = ["--low-latency"] if args.low_latency else []
        gw = subprocess.Popen([reef, "serve", "--upstream", upstream, "--port", str(gw_port), *low], cwd=project,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(gw)
        through = f"http://127.0.0.1:{gw_port}"
        wait_http(through + "/healthz")
        gws = {"reef": gw}
        if args.compare_asyncio:  # a second project, so each ledger's count stays exact
            project2 = tmp / "proj-asyncio"
            project2.mkdir()
            subprocess.run([reef, "init"], cwd=project2, check=True, capture_output=True)
            port2 = free_port()
            gws["reef-asyncio"] = subprocess.Popen([reef, "serve", "--upstream", upstream, "--port", str(port2),
                                                    "--loop", "asyncio", *low], cwd=project2, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL)
            procs.append(gws["reef-asyncio"])
            wait_http(f"http://127.0.0.1:{port2}/healthz")
        floors, floor_urls = {}, {}
        if args.floor:
            import importlib.util

            kinds = FLOOR_KINDS + (FLOOR_LEDGER_KINDS if args.floor_ledger else ())
            if args.floor_kinds:
                kinds = tuple(k for k in args.floor_kinds.split(",") if k)
                unknown = sorted(set(kinds) - set(FLOOR_KINDS + FLOOR_LEDGER_KINDS))
                if unknown:
                    ap.error(f"--floor-kinds: unknown {', '.join(unknown)} (known: "
                             f"{', '.join(FLOOR_KINDS + FLOOR_LEDGER_KINDS)})")
            for kind in kinds:
                if kind.startswith("uvicorn") and importlib.util.find_spec("uvicorn") is None:
                    print(f"floor {kind}: skipped (uvicorn is not installed here: pip install uvicorn)")
                    continue
                fport = free_port()
                floors[kind] = subprocess.Popen([sys.executable, str(REPO / "bench" / "serve_floor.py"), kind,
                                                 str(fport), upstream, str(tmp / f"floor-{len(floors)}.jsonl")])
                procs.append(floors[kind])
                floor_urls[kind] = f"http://127.0.0.1:{fport}"
                wait_http(floor_urls[kind] + "/v1/models")
        litellm, why = start_litellm(Path(args.litellm_venv), upstream, tmp)
        if litellm:
            procs.append(litellm[0])
        targets = {"direct": (upstream, {}), "reef": (through, {})}
        if args.compare_asyncio:
            targets["reef-asyncio"] = (f"http://127.0.0.1:{port2}", {})
        for kind, url in floor_urls.items():
            targets[kind] = (url, {})
        if litellm:
            targets["litellm"] = (litellm[1], {"Authorization": f"Bearer {LITELLM_KEY}"})
        watched = {**gws, **floors}

        sent = 0
        measured = [os.getpid()] + [p.pid for p in procs]
        if args.realtime:
            try:
                set_priority(measured, True)
                print("latency phase under SCHED_FIFO (client, upstream, gateways" + (", LiteLLM)" if litellm else ")"))
            except PermissionError:
                args.realtime = False
                print("--realtime: not permitted (needs root); measuring at normal priority")
        print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"{idle_line(args.low_latency)}")
        appends = append_latency(project / ".reef" / "scenarios" / "default" / "bench-append.jsonl", args.requests)
        print(f"one durable ledger append alone, same disk (ms): p50 {pct(appends, .5):.3f}  p99 {pct(appends, .99):.3f}")
        print(f"latency, {args.requests} sequential calls per target (ms):")
        lat_rows = {}
        for stream in (False, True):
            before = {name: cpu_s(p.pid) for name, p in watched.items()}
            lat = asyncio.run(latencies(targets, args.requests, stream))
            sent += args.requests + 20
            kind = "stream" if stream else "json"
            for name, xs in lat.items():
                cpu = (f"  CPU per call {(cpu_s(watched[name].pid) - before[name]) / (args.requests + 20) * 1e6:5.0f} us"
                       if name in watched else "")
                print(f"  {kind:6} {name:19} p50 {pct(xs, .5):7.3f}  p99 {pct(xs, .99):7.3f}{cpu}")
            if args.compare_asyncio:
                print(f"  {kind:6} reef-asyncio adds p50 {pct(lat['reef-asyncio'], .5) - pct(lat['direct'], .5):+.3f} ms"
                      f"  p99 {pct(lat['reef-asyncio'], .99) - pct(lat['direct'], .99):+.3f} ms")
            for name in floors:
                print(f"  {kind:6} floor {name:19} adds p50 {pct(lat[name], .5) - pct(lat['direct'], .5):+.3f} ms"
                      f"  p99 {pct(lat[name], .99) - pct(lat['direct'], .99):+.3f} ms"
                      f"  ({'one durable append' if name.endswith('+ledger') else 'records nothing'})")
            for q, label in ((.5, "p50"), (.99, "p99")):
                lat_rows[(kind, label)] = pct(lat["reef"], q) - pct(lat["direct"], q)
            print(f"  {kind:6} reef adds  p50 {lat_rows[(kind, 'p50')]:+.3f} ms  p99 {lat_rows[(kind, 'p99')]:+.3f} ms"
                  f"  (beyond the durable append: p50 {lat_rows[(kind, 'p50')] - pct(appends, .5):+.3f} ms)")
        if args.realtime:
            set_priority(measured, False)
        targets.pop("reef-asyncio", None)
        for kind in floors:
            targets.pop(kind)
        print(f"requests/s at {args.concurrency} concurrent clients ({args.per_client} calls each):")
        rps = {}
        cpu_per_call = {}
        pids = {"reef": gw.pid, "litellm": litellm[0].pid if litellm else None}
        for stream in (False, True):
            kind = "stream" if stream else "json"
            for name, (url, h) in targets.items():
                before = cpu_s(pids[name]) if pids.get(name) else None
                rps[(kind, name)] = asyncio.run(throughput(url, h, args.concurrency, args.per_client, stream))
                calls = args.concurrency * (args.per_client + 1)
                if before is not None:
                    cpu_per_call[(kind, name)] = (cpu_s(pids[name]) - before) / calls * 1e6
                if name == "reef":
                    sent += calls
            line = "  ".join(f"{name} {rps[(kind, name)]:7.0f}" for name in targets)
            ratio = (f"  reef/litellm {rps[(kind, 'reef')] / rps[(kind, 'litellm')]:.2f}x" if litellm else "")
            print(f"  {kind:6} {line}  reef/direct {rps[(kind, 'reef')] / rps[(kind, 'direct')]:.2f}x{ratio}")
        for (kind, name), us in sorted(cpu_per_call.items()):
            print(f"  {kind:6} {name:8} CPU per call {us:7.0f} us (the whole process: relay, record, log)")
        if not litellm:
            print(f"LiteLLM: {why}")
        for p in gws.values():
            p.terminate()
            p.wait(timeout=60)
        from reef_cli.ledger import Ledger

        ledger = Ledger(project / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
        recorded = sum(1 for r in ledger.iter_records() if r.kind == "inference")
        result = ledger.verify()
        print(f"ledger: {recorded} records for {sent} requests through reef; verify {'ok' if result.ok else 'FAILED'}")
        ok = recorded == sent and result.ok
        if args.compare_asyncio:
            other = Ledger(project2 / ".reef" / "scenarios" / "default" / "ledger.jsonl", "default")
            got, want = sum(1 for r in other.iter_records() if r.kind == "inference"), 2 * (args.requests + 20)
            print(f"ledger (asyncio gateway): {got} records for {want} requests; verify "
                  f"{'ok' if other.verify().ok else 'FAILED'}")
            ok = ok and got == want and other.verify().ok
        worst = max(lat_rows[(k, "p50")] for k in ("json", "stream")), max(lat_rows[(k, "p99")] for k in ("json", "stream"))
        print(f"targets: added p50 {worst[0]:.3f} ms (<= 1), p99 {worst[1]:.3f} ms (<= 5)" +
              (f", reef/litellm json {rps[('json', 'reef')] / rps[('json', 'litellm')]:.2f}x stream "
               f"{rps[('stream', 'reef')] / rps[('stream', 'litellm')]:.2f}x (>= 2)" if litellm else ""))
        return 0 if ok else 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
