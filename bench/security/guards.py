"""Trust-boundary benchmarks (issue 11): what the guards cost on the predictor's hot path, how fast an oversized
body is refused and what it costs in memory, and how fast a predictor is ready after a restart with the trainer
down.

    python -m bench.security.guards                      # all three parts
    python -m bench.security.guards --only hotpath --baseline-ref 8bb50bd

* hotpath: the predictor app (ASGI, in-process: middleware + routing + handler, no network) answering bulk-100
  strict and single calls, this tree vs ``--baseline-ref`` (exported with ``git archive``), rounds interleaved,
  medians of per-round medians of the calling thread's CPU time per call (the machine is shared: wall time would
  measure the neighbours). Same bundle, same bodies.
* oversize: real ``python -m trainer`` / ``python -m predictor`` subprocesses; a request head declaring 100 MB →
  time until the 413 head arrives (then the 100 MB are sent anyway), and a 100 MB chunked upload; VmHWM growth.
* restart: a predictor pulls from a trainer, the trainer stops, the predictor restarts: spawn → /readyz 200.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import httpx

from bench.common.paths import REPO

sys.path.insert(0, str(REPO))

from shared.bundle import set_current  # noqa: E402
from tests.predictor.conftest import build_bundle, random_rows  # noqa: E402
from tests.procs import peak_rss_kib, predictor, spawn, stop, trainer, wait_ready  # noqa: E402

ASGI_DRIVER = r'''
import asyncio, json, statistics, sys, time
from pathlib import Path
from predictor.app import create_app
from shared.predictor_settings import PredictorSettings

bundle_dir, rounds, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bodies = {name: Path(p).read_bytes() for name, p in json.loads(sys.argv[4]).items()}
app = create_app(PredictorSettings(bundle_dir=bundle_dir, long_poll=False, model_sync_interval_sec=3600))

async def call(path, body):
    sent = False
    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}
    status = []
    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "server": ("x", 80),
             "client": ("127.0.0.1", 1), "headers": [(b"content-type", b"application/json"),
                                                       (b"content-length", str(len(body)).encode())]}
    await app(scope, receive, send)
    assert status == [200], status

async def main():
    async with app.router.lifespan_context(app):
        out = {}
        for name, body in bodies.items():
            path = "/predict/bulk/strict" if name.startswith("bulk") else "/predict"
            for _ in range(200):
                await call(path, body)
            medians = []
            for _ in range(rounds):
                times = []
                for _ in range(calls):
                    start = time.thread_time()  # CPU time of this thread: other processes on the machine do not count
                    await call(path, body)
                    times.append(time.thread_time() - start)
                medians.append(statistics.median(times) * 1e6)
            out[name] = medians
        print(json.dumps(out))

asyncio.run(main())
'''


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def export_tree(ref: str, into: Path) -> Path:
    data = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def hotpath(baseline_ref: str, rounds: int, calls: int, alternations: int = 6) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_bundle(root / "bundles", 1, trees=200, depth=6, seed=3)
        set_current(root / "bundles", 1)  # the plain form: older trees cannot read "1 <sha256>"
        bodies = {"bulk100": root / "bulk.json", "single": root / "single.json"}
        bodies["bulk100"].write_bytes(json.dumps({"requests": random_rows(100, seed=1)}).encode())
        bodies["single"].write_bytes(json.dumps(random_rows(1, seed=2)[0]).encode())
        trees = {"this tree": REPO, f"baseline {baseline_ref}": export_tree(baseline_ref, root / "base")}
        results: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        start_load = loadavg()
        for _ in range(alternations):  # interleaved: A B A B ...
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
                proc = subprocess.run([sys.executable, "-c", ASGI_DRIVER, str(root / "bundles"), str(rounds),
                                       str(calls), json.dumps({k: str(v) for k, v in bodies.items()})],
                                      cwd=tree, env=env, capture_output=True, text=True, check=False)
                assert proc.returncode == 0, proc.stderr[-3000:]
                out = proc.stdout
                for key, medians in json.loads(out.splitlines()[-1]).items():
                    results[name].setdefault(key, []).extend(medians)
    table = {name: {key: {"median": round(statistics.median(v), 1), "min": round(min(v), 1)}
                    for key, v in per.items()} for name, per in results.items()}
    return {"cpu_us_per_call_over_round_medians": table, "load": f"{start_load} → {loadavg()}"}


def _time_to_413(url: str, path: str, size: int) -> float:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        start = time.perf_counter()
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
        head = sock.recv(65536)
        elapsed = time.perf_counter() - start
        assert head.startswith(b"HTTP/1.1 413"), head[:80]
        chunk = b"0" * (1 << 20)
        try:
            for _ in range(size // len(chunk)):
                sock.sendall(chunk)
        except OSError:
            pass
    return elapsed * 1e3


def _chunked(url: str, path: str, size: int, headers: dict[str, str]) -> float:
    chunk = b"[" + b"0," * (1 << 19)
    start = time.perf_counter()
    response = httpx.post(url + path, content=iter([chunk] * (size // len(chunk))), headers=headers, timeout=120)
    assert response.status_code == 413, response.status_code
    return (time.perf_counter() - start) * 1e3


def oversize(tries: int) -> dict[str, Any]:
    size = 100 << 20
    out: dict[str, Any] = {"load_start": loadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_bundle(root / "bundles", 1)
        with trainer(root / "data") as (t_url, t_proc), \
                predictor(root, ["--bundle-dir", str(root / "bundles")]) as (p_url, p_proc):
            for name, url, proc, path in (("trainer ingest", t_url, t_proc, "/add_training_data_bulk"),
                                          ("predictor bulk", p_url, p_proc, "/predict/bulk/strict")):
                before = peak_rss_kib(proc.pid)
                times = [_time_to_413(url, path, size) for _ in range(tries)]
                declared = peak_rss_kib(proc.pid)
                chunked_ms = _chunked(url, path, size, {})
                out[name] = {"ms_to_413_p50": round(statistics.median(times), 2), "ms_to_413_max": round(max(times), 2),
                             "vmhwm_growth_declared_mib": round((declared - before) / 1024, 1),
                             "chunked_100MB_ms": round(chunked_ms, 1),
                             "vmhwm_growth_chunked_mib": round((peak_rss_kib(proc.pid) - declared) / 1024, 1)}
    out["load_end"] = loadavg()
    return out


def restart(repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with trainer(root / "data") as (t_url, _):
            with predictor(root, ["--training-url", t_url]):
                pass
            up = [_spawn_ready(root, t_url) for _ in range(repeats)]
        down = [_spawn_ready(root, t_url) for _ in range(repeats)]
    return {"trainer_up_s": round(statistics.median(up), 2), "trainer_down_s": round(statistics.median(down), 2),
            "trainer_down_max_s": round(max(down), 2), "load": loadavg()}


def _spawn_ready(root: Path, trainer_url: str) -> float:
    port = int(socket.create_server(("127.0.0.1", 0)).getsockname()[1])
    log = root / "restart.log"
    start = time.monotonic()
    proc = spawn("predictor", ["--host", "127.0.0.1", "--port", str(port), "--training-url", trainer_url],
                 {"LOCAL_MODEL_DIR": str(root / "local"), "HTTP_TIMEOUT": "5"}, log)
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc, log, timeout=60)
        return time.monotonic() - start
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["hotpath", "oversize", "restart"])
    parser.add_argument("--baseline-ref", default="main", help="git ref of the hot-path baseline (default: main)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--tries", type=int, default=10)
    args = parser.parse_args()
    parts = {"hotpath": lambda: hotpath(args.baseline_ref, args.rounds, args.calls),
             "oversize": lambda: oversize(args.tries), "restart": lambda: restart(3)}
    for name, run in parts.items():
        if args.only in (None, name):
            print(name, json.dumps(run(), indent=1), flush=True)


if __name__ == "__main__":
    main()
