"""Proxy overhead per request: time to first byte through the router proxy minus direct to the pod.

    .venv/bin/python -m bench.bench_proxy [--concurrency 50] [--duration 40] [--time-scale 1.0]

Setup (all child processes on 127.0.0.1): one sim process with 2 pods, a trainer + predictor,
and the proxy (``python -m router_client``) whose decisions call the predictor (strict bulk,
default config: opportunistic coalescing, predictor budget raised so no decision falls back).
``--concurrency`` client workers each loop for ``--duration`` seconds, alternating a direct
request (round-robin over the pods) and a proxied one after a random think time (so arrivals
are not phase-locked to engine steps); ~50 streams are in flight and both paths see the same
pod load at the same moments. Each request is a streamed completion (token-id
prompt, fixed ``output_tokens``); TTFB = connect + send → first SSE ``data:`` line, measured by
a minimal raw-socket HTTP/1.1 client (``Connection: close`` for both paths) so client overhead is
small and identical on both paths. Overhead = p50(proxied) − p50(direct) (also p90), plus the
proxy's own parse+decide histogram from ``/metrics``, predictor calls per decision, and per process
(proxy, predictor, sim pods, load generator) the CPU time and the CPU run-queue wait per proxied
request from Linux schedstat. Writes bench/RESULTS-proxy.md (``--only A|B`` runs a subset, no file).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from demo.prom import metric_value  # noqa: E402
from demo.stack import PoolSpec, Stack, StackSpec  # noqa: E402

RESULTS = REPO / "bench" / "RESULTS-proxy.md"
THINK_S = 0.05
"""Random think time before each request, so arrivals are not phase-locked to the pods' engine steps."""


async def ttfb(host: str, port: int, body: bytes) -> float | None:
    """Seconds from connect to the first SSE data line; None on failure. Reads the stream to its end."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    writer.write(head + body)
    buf = b""
    first: float | None = None
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if first is None:
                buf += data
                if b"200 OK" not in buf[:20]:
                    return None
                if b"\r\ndata: " in buf or b"\ndata: " in buf:
                    first = time.perf_counter() - started
    finally:
        writer.close()
    return first


async def worker(i: int, pods: list[tuple[str, int]], proxy: tuple[str, int], body: bytes, stop: float,
                 direct: list[float], proxied: list[float], failures: list[int]) -> None:
    via_proxy = i % 2 == 1
    n = 0
    rng = random.Random(i)
    while time.monotonic() < stop:
        await asyncio.sleep(rng.uniform(0.0, THINK_S))
        target = proxy if via_proxy else pods[(i + n) % len(pods)]
        got = await ttfb(*target, body)
        if got is None:
            failures.append(i)
        else:
            (proxied if via_proxy else direct).append(got)
        via_proxy = not via_proxy
        n += 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def schedstat(pid: int) -> tuple[float, float, int]:
    """(CPU s, run-queue wait s, time slices) summed over the threads of ``pid`` (Linux schedstat)."""
    run = wait = slices = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            a, b, c = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue  # thread exited
        run, wait, slices = run + int(a), wait + int(b), slices + int(c)
    return run / 1e9, wait / 1e9, slices


def _machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _sched_snapshot(stack: Stack) -> dict[str, tuple[float, float, int]]:
    names = {"router": "router", "predictor": "predictor-short", "pods": "sim-short"}
    out = {k: schedstat(stack.procs.children[v].pid) for k, v in names.items() if v in stack.procs.children}
    out["client"] = schedstat(os.getpid())
    return out


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 2 else float("nan")


async def _window(concurrency: int, duration: float, pods: list[tuple[str, int]], proxy: tuple[str, int],
                  body: bytes) -> tuple[list[float], list[float], int]:
    direct: list[float] = []
    proxied: list[float] = []
    failures: list[int] = []
    stop = time.monotonic() + duration
    await asyncio.gather(*(worker(i, pods, proxy, body, stop, direct, proxied, failures)
                           for i in range(concurrency)))
    return direct, proxied, len(failures)


async def measure(stack: Stack, concurrency: int, duration: float, output_tokens: int,
                  repeat: int) -> dict[str, Any]:
    pods = [(u.split("//")[1].split(":")[0], int(u.rsplit(":", 1)[1])) for u in stack.pod_urls["short"]]
    proxy = (stack.router_url.split("//")[1].split(":")[0], int(stack.router_url.rsplit(":", 1)[1]))
    body = orjson.dumps({"model": "m", "prompt": [7] * 64, "stream": True, "output_tokens": output_tokens,
                         "max_tokens": output_tokens})
    await _window(concurrency, 3.0, pods, proxy, body)
    predictor_url = stack.predictor_urls.get("short")
    async with httpx.AsyncClient() as client:
        before = (await client.get(stack.router_url + "/metrics")).text
        pred_before = (await client.get(predictor_url + "/metrics")).text if predictor_url else ""
    router_pid = stack.procs.children["router"].pid
    cpu0, wall0 = cpu_seconds(router_pid), time.monotonic()
    sched0, busy0 = _sched_snapshot(stack), _machine_busy()
    direct: list[float] = []
    proxied: list[float] = []
    failures = 0
    per_window = []
    for _ in range(repeat):
        d, p, f = await _window(concurrency, duration / repeat, pods, proxy, body)
        per_window.append((statistics.median(p) - statistics.median(d)) * 1000.0)
        direct += d
        proxied += p
        failures += f
    router_cpu = (cpu_seconds(router_pid) - cpu0) / (time.monotonic() - wall0)
    sched1, busy1 = _sched_snapshot(stack), _machine_busy()
    async with httpx.AsyncClient() as client:
        after = (await client.get(stack.router_url + "/metrics")).text
        pred_after = (await client.get(predictor_url + "/metrics")).text if predictor_url else ""
    result = _result(direct, proxied, failures, per_window, before, after, router_cpu)
    calls = (metric_value(pred_after, "predictor_request_duration_seconds_count", endpoint="predict_bulk_strict")
             - metric_value(pred_before, "predictor_request_duration_seconds_count", endpoint="predict_bulk_strict"))
    server_s = (metric_value(pred_after, "predictor_request_duration_seconds_sum", endpoint="predict_bulk_strict")
                - metric_value(pred_before, "predictor_request_duration_seconds_sum", endpoint="predict_bulk_strict"))
    result["predictor_calls"] = calls
    result["predictor_server_ms"] = server_s / calls * 1e3 if calls else float("nan")
    result["machine_busy"] = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])
    for name, (run1, wait1, n1) in sched1.items():
        run0, wait0, n0 = sched0[name]
        result[f"{name}_cpu_ms_per_req"] = (run1 - run0) / max(1, len(proxied)) * 1e3
        result[f"{name}_wait_ms_per_req"] = (wait1 - wait0) / max(1, len(proxied)) * 1e3
        result[f"{name}_wait_ms_per_slice"] = (wait1 - wait0) / max(1, n1 - n0) * 1e3
    return result


def _result(direct: list[float], proxied: list[float], failures: int, per_window: list[float], before: str,
            after: str, router_cpu: float) -> dict[str, Any]:
    ms = 1000.0
    result: dict[str, Any] = {
        "direct_n": len(direct), "proxied_n": len(proxied), "failures": failures,
        "direct_p50": statistics.median(direct) * ms, "proxied_p50": statistics.median(proxied) * ms,
        "direct_p90": _pct(direct, 90) * ms, "proxied_p90": _pct(proxied, 90) * ms,
        "overhead_p50_windows": [round(w, 2) for w in per_window],
    }
    result["overhead_p50"] = result["proxied_p50"] - result["direct_p50"]
    result["overhead_p90"] = result["proxied_p90"] - result["direct_p90"]
    for key, name in (("inner", "latency_router_proxy_overhead_seconds"), ("decide", "router_decision_seconds")):
        count = metric_value(after, name + "_count") - metric_value(before, name + "_count")
        total = metric_value(after, name + "_sum") - metric_value(before, name + "_sum")
        result[f"{key}_mean"] = total / count * ms if count else float("nan")
    result["fallbacks"] = (metric_value(after, "latency_router_proxy_fallbacks_total")
                           - metric_value(before, "latency_router_proxy_fallbacks_total"))
    result["router_cpu"] = router_cpu
    result["loadavg"] = _loadavg()
    return result


def _rows(runs: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, r in runs.items():
        for label, key in (("direct to pod", "direct"), ("through proxy", "proxied")):
            lines.append(f"| {name} | {label} | {r[key + '_n']:.0f} | {r[key + '_p50']:.2f} | {r[key + '_p90']:.2f} |")
        windows = ", ".join(f"{w:.1f}" for w in r["overhead_p50_windows"])
        lines.append(f"| {name} | **overhead** (per window: {windows}) | | **{r['overhead_p50']:.2f}** | "
                     f"{r['overhead_p90']:.2f} |")
    return "\n".join(lines)


def _inner(runs: dict[str, dict[str, Any]]) -> str:
    return "\n".join(
        f"- {name}: parse + decide (request received → upstream request sent) mean {r['inner_mean']:.2f} ms, "
        f"`router_decision_seconds` mean {r['decide_mean']:.2f} ms, fallbacks {r['fallbacks']:.0f}, failures "
        f"{r['failures']:.0f}; proxy process CPU {100 * r['router_cpu']:.0f} % of one core; machine CPU busy "
        f"{100 * r.get('machine_busy', float('nan')):.0f} % of 2 cores; load average at the end {r['loadavg']:.1f}"
        + (f"; {r['proxied_n'] / r['predictor_calls']:.2f} decisions per predictor call, predictor server-side "
           f"time {r['predictor_server_ms']:.2f} ms per call." if r.get("predictor_calls") else ".")
        for name, r in runs.items())


def _sched(runs: dict[str, dict[str, Any]]) -> str:
    """Per proxied request: CPU time and run-queue wait (Linux schedstat) of each process."""
    lines = ["| run | process | CPU ms / proxied req | run-queue wait ms / proxied req | wait ms per time slice |",
             "| --- | --- | ---: | ---: | ---: |"]
    for name, r in runs.items():
        for proc in ("router", "predictor", "pods", "client"):
            if f"{proc}_cpu_ms_per_req" in r:
                lines.append(f"| {name} | {proc} | {r[proc + '_cpu_ms_per_req']:.3f} | "
                             f"{r[proc + '_wait_ms_per_req']:.3f} | {r[proc + '_wait_ms_per_slice']:.3f} |")
    return "\n".join(lines)


def write_results(runs: dict[str, dict[str, Any]], args: argparse.Namespace, command: str) -> None:
    main = runs[f"{args.concurrency} streams, with predictor"]
    target = "met" if main["overhead_p50"] <= 1.0 else "NOT met"
    text = f"""## Routing proxy (router_client/proxy)

Command: `{command}`
Machine: 2 cores ({platform.machine()}, CPython {platform.python_version()}); the client, the proxy, the sim
pods, the trainer and the predictor all share those 2 cores (and the machine was shared with other jobs).

Method: one sim process with 2 pods (`--time-scale {args.time_scale}`), a trainer + predictor, and
`python -m router_client` on loopback; {args.concurrency} client workers loop for {args.duration:.0f} s,
each alternating a direct request (round-robin over the pods) and a proxied one after a random think
time (0–{THINK_S * 1000:.0f} ms, so arrivals are not phase-locked to the pods' engine steps);
~{args.concurrency} streams are in flight and both paths see the same pod load at the same moments.
Request: streamed completion, 64 token-id prompt, {args.output_tokens} output tokens (8 in the
1-stream runs, 20 s each). TTFB = connect → first SSE `data:` line, measured by a raw-socket
HTTP/1.1 client with `Connection: close` on both paths. "with predictor": every decision calls
the predictor (strict bulk over the library's keep-alive HTTP/1.1 client, default opportunistic
coalescing; "coalesce_window_ms 1" rows: the former fixed 1 ms window, same client); "no predictor":
router config without predictor URLs (composite score), isolating the proxy's own cost; "1 stream":
one worker, sequential, to show the overhead without CPU contention from the load itself.

| run | path | requests | TTFB p50 (ms) | TTFB p90 (ms) |
| --- | --- | ---: | ---: | ---: |
{_rows(runs)}

Target p50 overhead ≤ 1 ms including the predictor call: **{target}** on this machine.

{_inner(runs)}

Where the time goes: CPU time and CPU run-queue wait (time runnable but waiting for a core; Linux
`/proc/<pid>/task/*/schedstat`) of each process during the measurement, divided by the proxied
requests. "router" = the proxy process (decisions + relaying), "predictor" = the predictor
process (only proxied requests call it), "pods" = the sim process and "client" = the load generator
(both serve direct and proxied requests alike).

{_sched(runs)}

Reading: the proxy's own cost (parse, relay, keep-alive forward; "no predictor" rows) is the
overhead without the decision; the gap between "with predictor" and "no predictor" is the router
library's decision time (`router_decision_seconds`: strict-bulk round trip to the predictor +
scheduling). At {args.concurrency} streams every extra process hop (client → proxy → predictor →
proxy → pod) also waits for a CPU: see the run-queue wait per time slice above.
"""
    RESULTS.write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_proxy", description=__doc__.split("\n")[0])
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of measurement per run")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3, help="measurement windows per run (duration split evenly)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--only", default="", help="|-separated substrings: run only those rows (writes no RESULTS)")
    args = p.parse_args(argv)
    command = ".venv/bin/python -m bench.bench_proxy " + " ".join(argv if argv is not None else sys.argv[1:])
    runs: dict[str, dict[str, Any]] = {}
    n = args.concurrency
    window = {"coalesce_window_ms": 1.0}
    plan: list[tuple[str, bool, int, float, int, dict[str, Any]]] = [
        (f"{n} streams, with predictor", True, n, args.duration, args.output_tokens, {}),
        (f"{n} streams, with predictor, coalesce_window_ms 1", True, n, args.duration, args.output_tokens, window),
        (f"{n} streams, no predictor", False, n, args.duration, args.output_tokens, {}),
        ("1 stream, with predictor", True, 1, 20.0, 8, {}),
        ("1 stream, with predictor, coalesce_window_ms 1", True, 1, 20.0, 8, window),
        ("1 stream, no predictor", False, 1, 20.0, 8, {}),
    ]
    if args.only:
        plan = [p for p in plan if any(key in p[0] for key in args.only.split("|"))]
    for name, predictors, concurrency, duration, output_tokens, router in plan:
        spec = StackSpec(pools=(PoolSpec("short", 2, 4096, max_num_seqs=256),), time_scale=args.time_scale,
                         retrain_interval_s=10.0, predictors=predictors,
                         router={"predictor_timeout_ms": 250.0, **router})
        with tempfile.TemporaryDirectory() as tmp, Stack(spec, Path(tmp)) as stack:
            runs[name] = asyncio.run(measure(stack, concurrency, duration, output_tokens, args.repeat))
        print(name, orjson.dumps(runs[name]).decode(), flush=True)
    if not args.no_write and not args.only:
        write_results(runs, args, command.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
