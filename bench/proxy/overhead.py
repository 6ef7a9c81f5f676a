"""Proxy overhead per request: time to first byte through the router proxy minus direct to the pod.

    .venv/bin/python -m bench.proxy.overhead [--concurrency 50] [--duration 60] [--time-scale 1.0]
        [--pin 1:0] [--baseline DIR]

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
request from Linux schedstat. Writes bench/results/proxy/RESULTS-proxy.md (``--only A|B`` runs a subset, no file).

``--pin P:R`` pins the proxy process (all its threads) to CPU ``P`` and every other process of the
stack, and this load generator, to CPU ``R`` once the stack is up (Linux ``sched_setaffinity``).
``--baseline DIR`` runs every row a second time, right before this tree's, with the proxy started
from another checkout (``git archive main | tar -x -C DIR``; its ``../shared/data`` must resolve):
a before/after comparison in the same run, on the same machine state.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
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

from bench.common import paths
from bench.common.paths import REPO

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from demo.prom import metric_value  # noqa: E402
from demo.stack import PoolSpec, Stack, StackSpec  # noqa: E402

RESULTS = paths.RESULTS / "proxy" / "RESULTS-proxy.md"
THIS_TREE = "this branch"
KEEP_MARKER = "<!-- written by hand below: kept when the benchmark rewrites the part above -->"
IDLE_S = 5.0
"""Seconds without traffic before the measurement: the proxy's background CPU (scraper, reporter)."""
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


class BenchStack(Stack):
    """The stack, with the proxy optionally run from another checkout (``router_tree``)."""

    def __init__(self, spec: StackSpec, workdir: Path, router_tree: Path | None) -> None:
        super().__init__(spec, workdir)
        self.router_tree = router_tree

    def _start_router(self) -> None:
        if self.router_tree is None:
            super()._start_router()
            return
        port = self.ports.take()
        self.router_url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-P", "-m", "router_client", "--host", "127.0.0.1", "--port", str(port),
                "--config", str(self.config_path), "--log-level", "warning"]  # -P: PYTHONPATH's tree wins
        self.procs.start("router", argv, {"PYTHONPATH": str(self.router_tree)},
                         health_urls=[self.router_url + "/readyz"])


def _set_affinity(pid: int, cpus: set[int]) -> None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, PermissionError):
            continue  # thread exited


def pin(stack: Stack, proxy_cpu: int, rest_cpu: int) -> None:
    """The proxy on ``proxy_cpu``; every other child and this process on ``rest_cpu``."""
    for name, child in stack.procs.children.items():
        _set_affinity(child.pid, {proxy_cpu} if name == "router" else {rest_cpu})
    _set_affinity(os.getpid(), {rest_cpu})


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
    router_pid = stack.procs.children["router"].pid
    idle0, idle_t0 = schedstat(router_pid)[0], time.monotonic()
    await asyncio.sleep(IDLE_S)  # no traffic: the proxy's background work (scraper, reporter)
    idle_ms_per_s = (schedstat(router_pid)[0] - idle0) / (time.monotonic() - idle_t0) * 1e3
    predictor_url = stack.predictor_urls.get("short")
    async with httpx.AsyncClient() as client:
        before = (await client.get(stack.router_url + "/metrics")).text
        pred_before = (await client.get(predictor_url + "/metrics")).text if predictor_url else ""
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
    elapsed = time.monotonic() - wall0
    router_cpu = (cpu_seconds(router_pid) - cpu0) / elapsed
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
    result["router_idle_cpu_ms_per_s"] = idle_ms_per_s
    result["router_net_cpu_ms_per_req"] = (result["router_cpu_ms_per_req"]
                                           - idle_ms_per_s * elapsed / max(1, len(proxied)))
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


def _summary(runs: dict[str, dict[str, Any]]) -> str:
    lines = ["| run | proxy | overhead p50 ms (per window) | overhead p90 ms | proxy CPU ms / proxied req | "
             "… net of idle background | proxy idle CPU ms/s | proxy run-queue wait ms / req | machine busy | "
             "load avg (end) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in runs.items():
        row, _, tree = name.partition(" · ")
        windows = ", ".join(f"{w:.1f}" for w in r["overhead_p50_windows"])
        lines.append(f"| {row} | {tree or THIS_TREE} | **{r['overhead_p50']:.2f}** ({windows}) | "
                     f"{r['overhead_p90']:.2f} | **{r['router_cpu_ms_per_req']:.2f}** | "
                     f"{r['router_net_cpu_ms_per_req']:.2f} | {r['router_idle_cpu_ms_per_s']:.1f} | "
                     f"{r['router_wait_ms_per_req']:.2f} | {100 * r['machine_busy']:.0f} % | {r['loadavg']:.2f} |")
    return "\n".join(lines)


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


def write_results(runs: dict[str, dict[str, Any]], args: argparse.Namespace, command: str,
                  started: datetime.datetime) -> None:
    suffix = f" · {THIS_TREE}" if args.baseline else ""
    main = runs[f"{args.concurrency} streams, with predictor{suffix}"]
    limit = 1.0 if args.pin else 1.5  # issue 16: ≤ 1 ms where the proxy has its own core, else ≤ 1.5 ms
    target = "met" if main["overhead_p50"] <= limit else "NOT met"
    cpu_target = "met" if main["router_cpu_ms_per_req"] <= 1.2 else "NOT met"
    pinned = (f"proxy pinned to CPU {args.pin.split(':')[0]}, every other process (pods, trainer, predictor, "
              f"load generator) to CPU {args.pin.split(':')[1]}" if args.pin else
              "the client, the proxy, the sim pods, the trainer and the predictor all share those 2 cores")
    loads = "; ".join(f"{name}: {r['loadavg_before']}" for name, r in runs.items())
    text = f"""## Routing proxy (router_client/proxy)

Command: `{command}` — run {started:%Y-%m-%d %H:%M} UTC
Machine: 2 cores ({platform.machine()}, CPython {platform.python_version()}); {pinned}; the machine
is shared with other jobs (`/proc/loadavg` before each row: {loads}).

{_summary(runs)}

Method: one sim process with 2 pods (`--time-scale {args.time_scale}`), a trainer + predictor, and
`python -m router_client` on loopback; {args.concurrency} client workers loop for {args.duration:.0f} s,
each alternating a direct request (round-robin over the pods) and a proxied one after a random think
time (0–{THINK_S * 1000:.0f} ms, so arrivals are not phase-locked to the pods' engine steps);
~{args.concurrency} streams are in flight and both paths see the same pod load at the same moments.
Request: streamed completion, 64 token-id prompt, {args.output_tokens} output tokens (8 in the
1-stream runs, 20 s each). TTFB = connect → first SSE `data:` line, measured by a raw-socket
HTTP/1.1 client with `Connection: close` on both paths. "with predictor": every decision calls
the predictor (strict bulk over the library's keep-alive HTTP/1.1 client, opportunistic
coalescing); "no predictor":
router config without predictor URLs (composite score), isolating the proxy's own cost; "1 stream":
one worker, sequential, to show the overhead without CPU contention from the load itself.

| run | path | requests | TTFB p50 (ms) | TTFB p90 (ms) |
| --- | --- | ---: | ---: | ---: |
{_rows(runs)}

Targets at {args.concurrency} streams with the predictor ({THIS_TREE}): p50 overhead ≤ {limit:g} ms:
**{target}** ({main['overhead_p50']:.2f} ms); proxy CPU ≤ 1.2 ms per proxied request: **{cpu_target}**
({main['router_cpu_ms_per_req']:.2f} ms).

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
    old = RESULTS.read_text() if RESULTS.exists() else ""
    if KEEP_MARKER in old:
        text += "\n" + KEEP_MARKER + old.split(KEEP_MARKER, 1)[1]
    RESULTS.write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.proxy.overhead", description=__doc__.split("\n")[0])
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of measurement per run")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3, help="measurement windows per run (duration split evenly)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--only", default="", help="|-separated substrings: run only those rows (writes no RESULTS)")
    p.add_argument("--pods", type=int, default=2, help="sim pods behind the proxy (1: no routing choice)")
    p.add_argument("--pin", default="", help="PROXY_CPU:OTHERS_CPU, e.g. 1:0 (empty: no pinning)")
    p.add_argument("--baseline", default="", help="checkout whose proxy runs each row first, for before/after")
    p.add_argument("--baseline-label", default="main", help="name of the --baseline tree in the tables")
    args = p.parse_args(argv)
    command = ".venv/bin/python -m bench.proxy.overhead " + " ".join(argv if argv is not None else sys.argv[1:])
    pinning = tuple(int(c) for c in args.pin.split(":")) if args.pin else None
    trees: list[tuple[str, Path | None]] = [(THIS_TREE, None)]
    if args.baseline:
        trees.insert(0, (args.baseline_label, Path(args.baseline).resolve()))
    runs: dict[str, dict[str, Any]] = {}
    n = args.concurrency
    plan: list[tuple[str, bool, int, float, int]] = [
        (f"{n} streams, with predictor", True, n, args.duration, args.output_tokens),
        (f"{n} streams, no predictor", False, n, args.duration, args.output_tokens),
        ("1 stream, with predictor", True, 1, 20.0, 8),
        ("1 stream, no predictor", False, 1, 20.0, 8),
    ]
    if args.only:
        plan = [p for p in plan if any(key in p[0] for key in args.only.split("|"))]
    started = datetime.datetime.now(datetime.UTC)
    for row, predictors, concurrency, duration, output_tokens in plan:
        for label, tree in trees:
            name = f"{row} · {label}" if args.baseline else row
            spec = StackSpec(pools=(PoolSpec("short", args.pods, 4096, max_num_seqs=256),), time_scale=args.time_scale,
                             retrain_interval_s=10.0, predictors=predictors, router={"predictor_timeout_ms": 250.0})
            load_before = Path("/proc/loadavg").read_text().strip()
            with tempfile.TemporaryDirectory() as tmp, BenchStack(spec, Path(tmp), tree) as stack:
                if pinning:
                    pin(stack, *pinning)
                try:
                    runs[name] = asyncio.run(measure(stack, concurrency, duration, output_tokens, args.repeat))
                finally:
                    _set_affinity(os.getpid(), set(range(os.cpu_count() or 1)))
            runs[name]["loadavg_before"] = load_before
            print(name, orjson.dumps(runs[name]).decode(), flush=True)
    if not args.no_write and not args.only:
        write_results(runs, args, command.strip(), started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
