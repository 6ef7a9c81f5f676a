"""Scale-out figures for docs/scaling.md: bundle size, long-poll fan-out cost, predictor CPU per call, scrape cost.

Run: ``.venv/bin/python -m bench.bench_fanout [--only bundle|longpoll|predictor|scrape]``. Each part takes one to
two minutes on 2 cores, writes ``bench/out/fanout-<part>.json`` and re-renders ``bench/RESULTS-fanout.md`` from the
parts present (hand-written text below the marker line in that file is kept). ``longpoll`` and ``predictor`` use
the bundle and data dir that ``bundle`` leaves in ``bench/out/fanout-work/``.

* **bundle**: a bundle as the trainer publishes it today: the in-process ``TrainerService`` (default fit
  settings), fed synthetic rows up to the 100,000-row window cap per model, one ``RetrainLoop.run_cycle()``;
  the files it writes, their sizes (raw and gzip) and the cycle's wall and CPU time.
* **longpoll**: the trainer (``create_app`` as ``python -m trainer`` builds it, on that data dir: the full window
  replayed, the fitted bundle live; retrain loop off) holding N idle long-polls from N raw asyncio HTTP/1.1
  clients that send the predictor's requests (``predictor/sources.py``: ``GET /bundle/manifest?wait_s=20`` with
  ``If-None-Match: "v<N>"``, then every listed file on the same keep-alive connection). Measured: trainer CPU-s
  per minute and RSS while they wait, then per publish (the live models carried into a new version, as a
  cycle that publishes does) the time until every client has downloaded the new bundle and the trainer's CPU.
* **predictor**: ``python -m predictor --bundle-dir`` serving that bundle; ``wrk`` closed loop on
  ``/predict/bulk/strict`` with 1, 16 and 100 rows per call; server CPU per call from ``/proc``.
* **scrape**: ``python -m router_client`` (no traffic, no trainer, no predictor) scraping K simulated pods' vLLM
  ``/metrics`` at the default 10 Hz; router and pod-process CPU per pod.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from bench import synthetic
from shared.bundle import manifest_files
from shared.features import MODEL_NAMES, TARGET_OF, feature_row
from shared.trainer_settings import TrainerSettings
from trainer.service import TrainerService
from trainer.store.record import columns_to_matrix

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"
WORK = OUT / "fanout-work"
RESULTS = REPO / "bench" / "RESULTS-fanout.md"
HAND_MARKER = "<!-- written by hand below: kept when the benchmark rewrites the part above -->"
PARTS = ("bundle", "longpoll", "predictor", "scrape")
WAIT_S = 20.0  # PREDICT_LONG_POLL_WAIT_SEC default
CAP_ROWS = 100_000  # LATENCY_WINDOW_MAX_ROWS default (per model)
TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- helpers

def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """utime + stime of every thread of ``pid`` (exited threads included), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> tuple[float, float]:
    status = Path(f"/proc/{pid}/status").read_text()

    def get(key: str) -> float:
        found = re.search(rf"{key}:\s+(\d+) kB", status)
        return int(found[1]) / 1024 if found else float("nan")
    return get("VmRSS"), get("VmHWM")


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout:g} s")


@contextmanager
def process(cmd: list[str], ready_url: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "LATENCY_LOG_LEVEL": "WARNING", **(env or {})},
                            stdout=subprocess.DEVNULL)
    try:
        wait_ready(ready_url, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def save(part: str, data: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    data = {"part": part, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cores": os.cpu_count(), **data}
    (OUT / f"fanout-{part}.json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def stats(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if not len(a):
        return {"p50": float("nan"), "p90": float("nan"), "max": float("nan")}
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)), "max": float(a.max())}


# ---------------------------------------------------------------------------------------------- 1. bundle

def wire_matrix(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    cols, y = synthetic.draw(kind, n, rng)
    cols = dict(cols, pod_type=np.zeros(n), actual_ttft_ms=np.zeros(n), actual_tpot_ms=np.zeros(n))
    cols[TARGET_OF[kind]] = y
    return columns_to_matrix(cols)


def bench_bundle(rows_per_model: Sequence[int]) -> dict[str, Any]:
    """Fit and publish one bundle per window size; the largest one's data dir stays for the other parts."""
    results = []
    for per_model in rows_per_model:
        data_dir = WORK / f"trainer-{per_model}"
        shutil.rmtree(data_dir, ignore_errors=True)
        svc = TrainerService(TrainerSettings(data_dir=str(data_dir), max_training_data_size_per_bucket=CAP_ROWS,
                                             log_level="WARNING"))
        svc.start(run_loop=False)
        try:
            rng = np.random.default_rng(7)
            for kind in MODEL_NAMES:
                for start in range(0, per_model, 10_000):
                    svc.ingestor.store(wire_matrix(kind, min(10_000, per_model - start), rng))
            before = load()
            started, cpu0 = time.perf_counter(), time.process_time()
            version = svc.loop.run_cycle()
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
            assert version is not None, "the trainer published nothing"
            live = svc.live.get()
            assert live is not None
            counts = svc.window.counts()
            vdir = svc.publisher.root / f"v{version:06d}"
            files = {}
            for path in sorted(vdir.iterdir()):
                raw = path.read_bytes()
                files[path.name] = {"bytes": len(raw), "gzip_bytes": len(gzip.compress(raw, 6))}
            entries = {k: dict(live.bundle.model_entry(k)) for k in MODEL_NAMES}
        finally:
            svc.stop()
        served = [n for n in files if n != "manifest.sha256"]  # what a predictor downloads (manifest + boosters)
        results.append({
            "rows_per_model": per_model, "window": counts, "version": version, "load_before": before,
            "load_after": load(), "cycle_wall_s": wall, "cycle_cpu_s": cpu,
            "fit_cpu_s": {k: entries[k].get("fit_cpu_seconds") for k in MODEL_NAMES},
            "models": {k: {key: entries[k].get(key) for key in ("candidate", "location_rounds", "quantile_rounds",
                                                                  "quantiles", "training_rows")}
                       for k in MODEL_NAMES},
            "files": files, "download_bytes": sum(files[n]["bytes"] for n in served),
            "download_gzip_bytes": sum(files[n]["gzip_bytes"] for n in served),
            "data_dir": str(data_dir), "bundle_root": str(svc.publisher.root)})
        print(f"bundle @ {per_model:,} rows/model: v{version}, {results[-1]['download_bytes']:,} bytes, "
              f"cycle {wall:.2f} s wall / {cpu:.2f} CPU-s", flush=True)
    return {"runs": results}


# ---------------------------------------------------------------------------------------------- 2. long-poll

def serve(data_dir: str, port: int) -> None:
    """The trainer app exactly as ``python -m trainer`` builds it (retrain loop off) + two bench-only routes:
    ``POST /_bench/publish`` (carry the live models into a new version: write, fsync, load, swap, wake the
    long-polls, as a cycle that publishes does) and ``GET /_bench/cpu`` (this process's CPU seconds)."""
    import uvicorn
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    from trainer.app import create_app

    settings = TrainerSettings.from_env(host="127.0.0.1", port=port, data_dir=data_dir)
    logging.basicConfig(level="WARNING")
    app = create_app(settings, run_loop=False)
    service: TrainerService = app.state.service

    def republish() -> dict[str, float]:
        t0, c0 = time.monotonic(), time.thread_time()
        version = service.retrainer._publish({})  # no challenger: both live models carried into vN+1
        return {"version": version, "t_start": t0, "t_live": time.monotonic(), "publish_cpu_s": time.thread_time() - c0}

    async def bench_publish() -> JSONResponse:
        return JSONResponse(await run_in_threadpool(republish))

    async def bench_cpu() -> JSONResponse:
        return JSONResponse({"cpu_s": time.process_time(), "threads": threading.active_count()})

    app.add_api_route("/_bench/publish", bench_publish, methods=["POST"])
    app.add_api_route("/_bench/cpu", bench_cpu, methods=["GET"])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    server.run()


class Conn:
    """A minimal HTTP/1.1 keep-alive client connection (Content-Length, chunked, 304 without body)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def request(self, method: str, target: str, headers: Sequence[str] = ()) -> tuple[int, dict[str, str], bytes]:
        extra = ["Content-Length: 0"] if method == "POST" else []
        head = "\r\n".join([f"{method} {target} HTTP/1.1", f"Host: {self.host}", "Accept: */*", *headers, *extra,
                            "", ""])
        self.writer.write(head.encode("latin-1"))
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        h = {}
        for line in lines:
            if ":" in line:
                k, v = line.split(":", 1)
                h[k.strip().lower()] = v.strip()
        if status in (204, 304) or status < 200:
            return status, h, b""
        if "content-length" in h:
            return status, h, await self.reader.readexactly(int(h["content-length"]))
        if h.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    return status, h, b"".join(parts)
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
        return status, h, await self.reader.read()

    def close(self) -> None:
        self.writer.close()


@dataclass
class Poller:
    """One simulated predictor: the long-poll loop of ``predictor/sync.py`` against the pull API."""

    host: str
    port: int
    holding: bool = False
    renewals: int = 0
    downloads: dict[int, tuple[float, float, int]] = field(default_factory=dict)  # version → (t_manifest, t_done, B)
    error: str | None = None

    async def run(self, delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            conn = await Conn.open(self.host, self.port)
        except OSError as exc:
            self.error = repr(exc)
            return
        try:
            status, h, _ = await conn.request("GET", "/bundle/manifest")
            assert status == 200, status
            etag = h["etag"]
            while True:
                self.holding = True
                status, h, body = await conn.request("GET", f"/bundle/manifest?wait_s={WAIT_S:g}",
                                                     [f"If-None-Match: {etag}"])
                self.holding = False
                if status == 304:
                    self.renewals += 1
                    continue
                assert status == 200, status
                t_manifest, version, size = time.monotonic(), int(h["x-bundle-version"]), len(body)
                for name in manifest_files(body):
                    fstatus, _, data = await conn.request("GET", f"/bundle/v/{version}/{name}")
                    assert fstatus == 200, (name, fstatus)
                    size += len(data)
                self.downloads[version] = (t_manifest, time.monotonic(), size)
                etag = h["etag"]
        except (OSError, asyncio.IncompleteReadError, AssertionError) as exc:
            self.error = repr(exc)
        finally:
            conn.close()


async def _control(port: int, method: str, path: str) -> dict[str, Any]:
    """A bench control call on a fresh connection (an idle one is closed by uvicorn after 5 s)."""
    conn = await Conn.open("127.0.0.1", port)
    try:
        status, _, body = await conn.request(method, path)
    finally:
        conn.close()
    assert status == 200, (path, status, body[:200])
    result: dict[str, Any] = orjson.loads(body)
    return result


async def _longpoll_round(port: int, pid: int, n: int, idle_s: float, publishes: int) -> dict[str, Any]:
    host = "127.0.0.1"
    pollers = [Poller(host, port) for _ in range(n)]
    tasks = [asyncio.create_task(p.run(1.0 * i / max(1, n))) for i, p in enumerate(pollers)]
    deadline = time.monotonic() + 30
    while not all(p.holding or p.error for p in pollers) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # every held request registered on the trainer
    errors = [p.error for p in pollers if p.error]
    held = sum(p.holding for p in pollers)
    row: dict[str, Any] = {"n": n, "held": held, "connect_errors": errors[:3], "load_start": load()}

    renew0 = sum(p.renewals for p in pollers)
    cpu0, client0, t0 = (await _control(port, "GET", "/_bench/cpu"))["cpu_s"], time.process_time(), time.monotonic()
    await asyncio.sleep(idle_s)
    cpu1, client1, t1 = (await _control(port, "GET", "/_bench/cpu"))["cpu_s"], time.process_time(), time.monotonic()
    rss, hwm = rss_mb(pid)
    row.update(idle_s=t1 - t0, idle_cpu_s=cpu1 - cpu0, idle_cpu_s_per_min=(cpu1 - cpu0) / (t1 - t0) * 60,
               idle_client_cpu_s=client1 - client0, renewals=sum(p.renewals for p in pollers) - renew0,
               rss_idle_mb=rss, hwm_idle_mb=hwm)

    fanouts = []
    for _ in range(publishes):
        while not all(p.holding or p.error for p in pollers):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        cpu0, client0 = (await _control(port, "GET", "/_bench/cpu"))["cpu_s"], time.process_time()
        pub = await _control(port, "POST", "/_bench/publish")
        version = int(pub["version"])
        deadline = time.monotonic() + 120
        while not all(version in p.downloads or p.error for p in pollers) and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        t_all = time.monotonic()
        cpu1, client1 = (await _control(port, "GET", "/_bench/cpu"))["cpu_s"], time.process_time()
        got = [p.downloads[version] for p in pollers if version in p.downloads]
        done = [d[1] - pub["t_live"] for d in got]
        fanouts.append({
            "version": version, "clients_done": len(got), "publish_wall_s": pub["t_live"] - pub["t_start"],
            "publish_cpu_s": pub["publish_cpu_s"], "trainer_cpu_s": cpu1 - cpu0,
            "serving_cpu_s": cpu1 - cpu0 - pub["publish_cpu_s"], "client_cpu_s": client1 - client0,
            "first_manifest_s": stats([d[0] - pub["t_live"] for d in got]), "done_s": stats(done),
            "all_done_s": (t_all - pub["t_live"]) if n else 0.0, "bytes_per_client": got[0][2] if got else 0,
            "bytes_total": sum(d[2] for d in got)})
    rss, hwm = rss_mb(pid)
    row.update(fanouts=fanouts, rss_after_mb=rss, hwm_after_mb=hwm, load_end=load(),
               errors=[p.error for p in pollers if p.error][:3])
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(2.0)  # the trainer sees the disconnects (checked every second)
    return row


def bench_longpoll(ns: Sequence[int], idle_s: float, publishes: int) -> dict[str, Any]:
    bundle = json.loads((OUT / "fanout-bundle.json").read_text())
    run = max(bundle["runs"], key=lambda r: r["rows_per_model"])
    port = free_port()
    env = {"LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET": str(CAP_ROWS)}
    cmd = [sys.executable, "-m", "bench.bench_fanout", "serve", "--data-dir", run["data_dir"], "--port", str(port)]
    rows = []
    with process(cmd, f"http://127.0.0.1:{port}/readyz", env) as proc:
        time.sleep(2.0)
        rss0 = rss_mb(proc.pid)
        import uvloop
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            for n in ns:
                row = runner.run(_longpoll_round(port, proc.pid, n, idle_s, publishes))
                rows.append(row)
                f = row["fanouts"]
                print(f"long-poll N={n}: held {row['held']}, idle {row['idle_cpu_s_per_min']:.2f} CPU-s/min, "
                      f"RSS {row['rss_idle_mb']:.0f} MB; fan-out max " +
                      ", ".join(f"{x['done_s']['max']:.3f} s / {x['serving_cpu_s']:.3f} CPU-s" for x in f), flush=True)
    return {"rows_per_model": run["rows_per_model"], "wait_s": WAIT_S, "rss_start_mb": rss0, "rounds": rows}


# ---------------------------------------------------------------------------------------------- 3. predictor

def request_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [feature_row({
        "kv_cache_percentage": round(float(rng.random()), 4), "input_token_length": int(rng.integers(10, 8000)),
        "num_request_waiting": int(rng.integers(0, 8)), "num_request_running": int(rng.integers(0, 40)),
        "num_tokens_generated": 0, "prefix_cache_score": round(float(rng.random()), 4),
        "prefill_tokens_in_flight": int(rng.integers(0, 9000)), "pod_class": "a100-tp1"}) for _ in range(n)]


def wrk(url: str, body: bytes, conns: int, seconds: int, script: Path) -> dict[str, float]:
    script.write_text('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                      f"wrk.body = [==[{body.decode()}]==]\n")
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", "-s", str(script), url],
                         capture_output=True, text=True, check=True).stdout
    unit = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    pct = {int(m[0]): float(m[1]) * unit[m[2]] for m in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)}
    total = re.search(r"(\d+) requests in", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    assert total is not None, out
    return {"p50_ms": pct[50], "p99_ms": pct[99], "requests": int(total[1]), "non2xx": int(bad[1]) if bad else 0}


def reference_bundle(root: Path) -> Path:
    """The bundle RESULTS-predictor.md was measured with: one ``reg:quantileerror`` booster of 200 trees, depth 6,
    per model (20,000 rows, as ``bench.bench_predictor.train_files`` builds it), no location booster, one quantile."""
    import xgboost as xgb

    from shared.bundle import assemble, encode_model, write_bundle
    from shared.columns import to_columns
    from shared.features import FeatureSpec
    from shared.timefmt import rfc3339

    shutil.rmtree(root, ignore_errors=True)
    spec, rng = FeatureSpec(), np.random.default_rng(0)
    cols = to_columns(request_rows(20_000), ["body", "requests"])
    models = {}
    for name in MODEL_NAMES:
        x = spec.matrix(name, cols)
        y = x[:, 2] * 0.03 + x[:, 3] * 20 + x[:, 5] * 0.01 + rng.gamma(2, 5, len(x))
        booster = xgb.train({"objective": "reg:quantileerror", "quantile_alpha": 0.9, "max_depth": 6, "nthread": 2,
                             "tree_method": "hist"}, xgb.DMatrix(x, label=y), 200)
        models[name] = encode_model(booster, name, spec.columns(name), {
            "quantiles": [0.9], "calibration": {"scale": 1.0, "offset": 0.0}})
    meta = {"feature_flags": spec.as_dict(), "model_type": "xgboost", "objective_type": "quantile", "quantile": 0.9}
    write_bundle(root, *assemble(1, rfc3339(), models, meta, None))
    return root


def bench_predictor(sizes: Sequence[int], seconds: int, conns: int, rounds: int) -> dict[str, Any]:
    """The current trainer-published bundle and the reference bundle of RESULTS-predictor.md, both servers up at
    once, runs interleaved (round by round, size by size, variant by variant) so background load hits both alike;
    medians over rounds."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found (apt-get install wrk)")
    bundle = json.loads((OUT / "fanout-bundle.json").read_text())
    run = max(bundle["runs"], key=lambda r: r["rows_per_model"])
    roots = {"current": Path(run["bundle_root"]), "reference": reference_bundle(WORK / "reference-bundle")}
    bodies = {n: orjson.dumps({"requests": request_rows(n)}) for n in sizes}
    samples: dict[str, dict[int, list[dict[str, Any]]]] = {v: {n: [] for n in sizes} for v in roots}
    with ExitStack() as stack:
        procs, urls, evaluators = {}, {}, {}
        for variant, root in roots.items():
            port = free_port()
            cmd = [sys.executable, "-m", "predictor", "--host", "127.0.0.1", "--port", str(port), "--bundle-dir",
                   str(root)]
            env = {"PREDICT_LONG_POLL": "false", "OMP_NUM_THREADS": "1",
                   "LOCAL_MODEL_DIR": str(WORK / f"predictor-local-{variant}")}
            procs[variant] = stack.enter_context(process(cmd, f"http://127.0.0.1:{port}/readyz", env))
            urls[variant] = f"http://127.0.0.1:{port}/predict/bulk/strict"
            evaluators[variant] = httpx.get(f"http://127.0.0.1:{port}/status").json()["bundle"]["evaluator"]
            for n in sizes:
                ok = httpx.post(urls[variant], content=bodies[n], headers={"content-type": "application/json"})
                assert ok.status_code == 200, ok.text[:200]
                wrk(urls[variant], bodies[n], conns, 1, WORK / "warm.lua")
        for _ in range(rounds):
            for n in sizes:
                for variant, proc in procs.items():
                    before, c0, t0 = load(), cpu_s(proc.pid), time.monotonic()
                    res = wrk(urls[variant], bodies[n], conns, seconds, WORK / f"post-{n}.lua")
                    cpu, wall = cpu_s(proc.pid) - c0, time.monotonic() - t0
                    samples[variant][n].append({**res, "wall_s": wall, "server_cpu_s": cpu, "load": before})
        rss = {v: rss_mb(proc.pid) for v, proc in procs.items()}
    variants = {}
    for variant, by_size in samples.items():
        out = []
        for n, runs in by_size.items():
            per_call = [r["server_cpu_s"] / r["requests"] * 1e3 for r in runs]
            med = float(np.median(per_call))
            out.append({"rows": n, "cpu_ms_per_call": med, "cpu_ms_per_call_rounds": per_call,
                        "rows_per_cpu_s": n / med * 1e3,
                        "calls_per_s": float(np.median([r["requests"] / r["wall_s"] for r in runs])),
                        "server_busy": float(np.median([r["server_cpu_s"] / r["wall_s"] for r in runs])),
                        "p50_ms": float(np.median([r["p50_ms"] for r in runs])),
                        "p99_ms": float(np.median([r["p99_ms"] for r in runs])),
                        "non2xx": sum(r["non2xx"] for r in runs), "loads": [r["load"] for r in runs]})
            print(f"predictor {variant} {n} rows/call: {med:.3f} ms CPU per call (rounds "
                  f"{', '.join(f'{x:.3f}' for x in per_call)}), {n / med * 1e3:,.0f} rows per CPU-s", flush=True)
        variants[variant] = {"evaluator": evaluators[variant], "rss_mb": rss[variant][0], "hwm_mb": rss[variant][1],
                             "sizes": out}
    return {"conns": conns, "seconds": seconds, "rounds": rounds, "variants": variants, "load_end": load(),
            "rows_per_model": run["rows_per_model"], "models": run["models"]}


# ---------------------------------------------------------------------------------------------- 4. scrape

async def _scrape_in_process(pods: Sequence[str], seconds: float) -> dict[str, float]:
    """The router library's ``MetricsScraper`` alone on this process's event loop, passes counted: the loop
    ``BackgroundLoop`` runs (one pass over every pod, then ``interval_s``)."""
    from prometheus_client import CollectorRegistry

    from router_client.config import ScraperConfig
    from router_client.endpoints import EndpointState
    from router_client.http1 import Http1Pool
    from router_client.live_metrics import RouterMetrics
    from router_client.scraper import MetricsScraper

    cfg = ScraperConfig()
    http = Http1Pool(connect_timeout_s=cfg.timeout_s)
    state = EndpointState(pods, cfg.stale_after_s, time.monotonic)
    scraper = MetricsScraper(http, state, cfg, RouterMetrics(CollectorRegistry()))
    for _ in range(5):  # connections open, first parse done
        await scraper.scrape_once()
    passes, c0, t0 = 0, time.process_time(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        await scraper.scrape_once()
        passes += 1
        await asyncio.sleep(cfg.interval_s)
    cpu, wall = time.process_time() - c0, time.monotonic() - t0
    await http.aclose()
    scrapes = passes * len(pods)
    return {"seconds": wall, "scrapes_per_s": scrapes / wall, "scrapes_per_pod_s": passes / wall,
            "cpu_us_per_scrape": cpu / scrapes * 1e6, "cpu_ms_per_s": cpu / wall * 1e3}


def bench_scrape(counts: Sequence[int], seconds: float) -> dict[str, Any]:
    out = []
    for k in counts:
        pod_port = free_port()
        router_port = free_port()
        while pod_port <= router_port < pod_port + k:
            router_port = free_port()
        pods = [f"http://127.0.0.1:{pod_port + i}" for i in range(k)]
        cfg = WORK / f"router-scrape-{k}.json"
        cfg.write_text(json.dumps({"pools": [{"name": "short", "pods": pods, "max_context": 4096}]}))
        sim_cmd = [sys.executable, "-m", "sim.pod", "--host", "127.0.0.1", "--port", str(pod_port), "--count", str(k),
                   "--max-model-len", "4096", "--log-level", "warning"]
        router_cmd = [sys.executable, "-m", "router_client", "--host", "127.0.0.1", "--port", str(router_port),
                      "--config", str(cfg), "--log-level", "warning"]
        with process(sim_cmd, f"{pods[-1]}/health") as sim:
            payload = len(httpx.get(f"{pods[0]}/metrics").content)
            with process(router_cmd, f"http://127.0.0.1:{router_port}/healthz") as router:
                time.sleep(3.0)
                before = load()
                r0, s0, t0 = cpu_s(router.pid), cpu_s(sim.pid), time.monotonic()
                time.sleep(seconds)
                r1, s1, t1 = cpu_s(router.pid), cpu_s(sim.pid), time.monotonic()
                router_rss = rss_mb(router.pid)[0]
            wall = t1 - t0
            lib = asyncio.run(_scrape_in_process(pods, seconds))
            out.append({"pods": k, "seconds": wall, "router_cpu_ms_per_s": (r1 - r0) / wall * 1e3,
                        "router_cpu_ms_per_pod_s": (r1 - r0) / wall * 1e3 / k,
                        "pods_cpu_ms_per_pod_s": (s1 - s0) / wall * 1e3 / k, "metrics_bytes": payload,
                        "router_rss_mb": router_rss, "library": lib, "load_before": before, "load_after": load()})
        print(f"scrape {k} pods: proxy {out[-1]['router_cpu_ms_per_s']:.1f} ms/s; library "
              f"{lib['scrapes_per_pod_s']:.1f} scrapes/s per pod, {lib['cpu_us_per_scrape']:.0f} µs CPU per scrape",
              flush=True)
    return {"interval_s": 0.1, "runs": out}


# ---------------------------------------------------------------------------------------------- report

def num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def _part(name: str) -> dict[str, Any] | None:
    path = OUT / f"fanout-{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def render() -> str:
    lines = ["# Bundle fan-out and scale-out figures (bench/bench_fanout.py)", "",
             "Inputs of [docs/scaling.md](../docs/scaling.md). Command: `.venv/bin/python -m bench.bench_fanout "
             "--only <part>` (parts: bundle, longpoll, predictor, scrape; one to two minutes each). Machine: "
             f"**{os.cpu_count()} cores** (x86_64, CPython {sys.version.split()[0]}), loopback HTTP, shared with other "
             "engineers' jobs: the 1-minute / 5-min / 15-min load average is recorded next to every figure.", ""]
    b = _part("bundle")
    if b:
        lines += [f"## 1. Bundle size as the trainer publishes it (measured {b['measured_at']})", "",
                  "In-process `TrainerService`, default fit settings (candidates `depth6,depth3-monotone`, location "
                  "booster + one p50/p90/p99 booster per model, 20,000 quantile-fit rows), fed `bench/synthetic.py` "
                  "rows (half TTFT, half TPOT kind), one `RetrainLoop.run_cycle()`.", "",
                  "| rows per model | window TTFT / TPOT (train + holdout) | chosen TTFT / TPOT | rounds loc + q "
                  "TTFT / TPOT | manifest.json | ttft.ubj + ttft-location.ubj | tpot.ubj + tpot-location.ubj | "
                  "**download per predictor** (raw / gzip) | cycle wall | cycle CPU | load avg |",
                  "|--:|---|---|---|--:|--:|--:|--:|--:|--:|---|"]
        for r in b["runs"]:
            f, w, m = r["files"], r["window"], r["models"]

            def kb(*names: str, f: dict[str, Any] = f) -> str:
                return f"{sum(f.get(n, {}).get('bytes', 0) for n in names) / 1024:,.0f} KiB"
            lines.append(
                f"| {r['rows_per_model']:,} | {w['ttft']['train']:,} + {w['ttft']['test']:,} / "
                f"{w['tpot']['train']:,} + {w['tpot']['test']:,} | {m['ttft']['candidate']} / {m['tpot']['candidate']} "
                f"| {m['ttft']['location_rounds']} + {m['ttft']['quantile_rounds']} / {m['tpot']['location_rounds']} + "
                f"{m['tpot']['quantile_rounds']} | {kb('manifest.json')} | {kb('ttft.ubj', 'ttft-location.ubj')} | "
                f"{kb('tpot.ubj', 'tpot-location.ubj')} | **{r['download_bytes'] / 2**20:.2f} MiB** / "
                f"{r['download_gzip_bytes'] / 2**20:.2f} MiB | {r['cycle_wall_s']:.2f} s | "
                f"{r['cycle_cpu_s']:.2f} CPU-s | {r['load_before']} → {r['load_after']} |")
        lines += ["", "Download = `manifest.json` + the four `.ubj` files (what `predictor/sources.py` fetches); "
                  "gzip -6 for an object store or a compressing relay (the pull API sends them uncompressed). "
                  "Cycle CPU = process CPU of the whole cycle (both models' candidates, quantile boosters, "
                  "calibration, champion/challenger, write + fsync + load).", ""]
    lp = _part("longpoll")
    if lp:
        lines += [f"## 2. Trainer holding N long-polls; fan-out of a new bundle (measured {lp['measured_at']})", "",
                  f"Trainer = `trainer.app.create_app` served by uvicorn as `python -m trainer` does, on the data dir "
                  f"of part 1 ({lp['rows_per_model']:,} rows per model replayed into the window, the fitted bundle "
                  f"live), retrain loop off. RSS at start {lp['rss_start_mb'][0]:.0f} MB. N clients in one separate "
                  f"uvloop process, one keep-alive connection each, the predictor's requests: `GET "
                  f"/bundle/manifest?wait_s={lp['wait_s']:g}` + `If-None-Match`, on 304 again at once, on 200 every "
                  "file of the manifest in turn. Connections opened over 1 s, so renewals are spread like those of "
                  "independent predictors. Publish = `POST /_bench/publish` (bench-only route): the live models "
                  "carried into version N+1 through the trainer's own `Retrainer._publish` (write + fsync + load + "
                  "swap + wake), as a cycle that publishes does — the fit itself is not in these figures.", "",
                  "**Idle** (all N held, no publish):", "",
                  "| N | held | window s | trainer CPU-s per minute | per 100 connections | renewals (304) in window | "
                  "trainer RSS MB | client CPU-s per minute | load avg |",
                  "|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
        base = next((r["idle_cpu_s_per_min"] for r in lp["rounds"] if r["n"] == 0), 0.0)
        for r in lp["rounds"]:
            per100 = (r["idle_cpu_s_per_min"] - base) / r["n"] * 100 if r["n"] else float("nan")
            lines.append(f"| {r['n']} | {r['held']} | {r['idle_s']:.1f} | {r['idle_cpu_s_per_min']:.3f} | "
                         f"{'–' if not r['n'] else f'{per100:.3f}'} | {r['renewals']} | {r['rss_idle_mb']:.0f} | "
                         f"{r['idle_client_cpu_s'] / r['idle_s'] * 60:.2f} | {r['load_start']} |")
        lines += ["", "Per 100 connections = (CPU at N − CPU at N = 0) / N × 100. A held request wakes once a second "
                  "(`trainer/live.py` SLICE_S: it checks whether the client is gone) and is renewed every "
                  f"{lp['wait_s']:g} s.", "", "**Fan-out** (one publish at a time, every client holding):", "",
                  "| N | publish | clients done | first manifest p50 / max s | download done p50 / p90 / max s | "
                  "trainer CPU: publish / serving s | serving CPU per client ms | MiB sent | trainer RSS / HWM after "
                  "MB | client CPU s | load avg (end) |",
                  "|--:|--:|--:|---|---|---|--:|--:|---|--:|---|"]
        for r in lp["rounds"]:
            for x in r["fanouts"]:
                fm, dn = x["first_manifest_s"], x["done_s"]
                per = x["serving_cpu_s"] / r["n"] * 1e3 if r["n"] else float("nan")
                lines.append(
                    f"| {r['n']} | v{x['version']} | {x['clients_done']} | {num(fm['p50'])} / {num(fm['max'])} | "
                    f"{num(dn['p50'])} / {num(dn['p90'])} / **{num(dn['max'])}** | {x['publish_cpu_s']:.3f} / "
                    f"{x['serving_cpu_s']:.3f} | {'–' if not r['n'] else f'{per:.2f}'} | "
                    f"{x['bytes_total'] / 2**20:,.0f} | {r['rss_after_mb']:.0f} / {r['hwm_after_mb']:.0f} | "
                    f"{x['client_cpu_s']:.2f} | {r['load_end']} |")
        lines += ["", "Times from the moment the new version was live on the trainer (same monotonic clock in both "
                  "processes). Serving CPU = trainer process CPU from just before the publish until the last client "
                  "had every file, minus the publish thread's own CPU. The clients share the 2 cores with the "
                  "trainer, so the fan-out times are upper bounds for a trainer on its own cores.", ""]
    p = _part("predictor")
    if p:
        m = p["models"]
        lines += [f"## 3. Predictor CPU per bulk call, current bundle format (measured {p['measured_at']})", "",
                  f"`python -m predictor --bundle-dir` serving part 1's bundle ({p['rows_per_model']:,} rows per "
                  f"model: TTFT {m['ttft']['candidate']} {m['ttft']['location_rounds']} + "
                  f"{m['ttft']['quantile_rounds']} rounds, TPOT {m['tpot']['candidate']} "
                  f"{m['tpot']['location_rounds']} + {m['tpot']['quantile_rounds']} rounds, p50/p90/p99), default "
                  f"settings; `wrk -t1 -c{p['conns']} -d{p['seconds']}s` on `POST /predict/bulk/strict` (closed "
                  "loop; wrk is a separate C process). Server CPU from `/proc/<pid>/stat` over each run. The same "
                  f"runs, interleaved with these ({p['rounds']} rounds, medians), on the **reference bundle** that "
                  "[RESULTS-predictor.md](RESULTS-predictor.md) was measured with (one `reg:quantileerror` booster "
                  "of 200 trees, depth 6, one output, per model).", "",
                  "| bundle | evaluator | rows per call | calls/s | p50 ms | p99 ms | server busy (cores) | "
                  "**server CPU ms per call** (per round) | **rows per CPU-second** | non-2xx | RSS / peak MB | "
                  "load avg (first round) |",
                  "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|"]
        names = {"current": "current (trainer-published)", "reference": "reference (RESULTS-predictor.md)"}
        for key, v in p["variants"].items():
            ev = "/".join(sorted(set(v["evaluator"].values())))
            for s in v["sizes"]:
                rounds_ms = ", ".join(f"{x:.2f}" for x in s["cpu_ms_per_call_rounds"])
                lines.append(f"| {names[key]} | {ev} | {s['rows']} | {s['calls_per_s']:,.0f} | {s['p50_ms']:.2f} | "
                             f"{s['p99_ms']:.2f} | {s['server_busy']:.2f} | **{s['cpu_ms_per_call']:.3f}** "
                             f"({rounds_ms}) | **{s['rows_per_cpu_s']:,.0f}** | {s['non2xx']} | {v['rss_mb']:.0f} / "
                             f"{v['hwm_mb']:.0f} | {s['loads'][0]} |")
        lines += ["", "Rows per CPU-second = rows per call ÷ server CPU per call: what one fully busy predictor "
                  "process (one core) serves at that call size.", ""]
    s = _part("scrape")
    if s:
        lines += [f"## 4. Router scrape cost per pod (measured {s['measured_at']})", "",
                  "K simulated pods (`python -m sim.pod --count K`, one process). (a) `python -m router_client` with "
                  "one pool of those K pods, no trainer, no predictor, no traffic: its CPU is its background work, "
                  f"mostly the `/metrics` scrape of every pod every {s['interval_s']:g} s (`scraper.interval_s` "
                  "default). (b) Right after, the router library's `MetricsScraper` alone in the bench process "
                  "(same code, passes counted): achieved scrape rate and CPU per scrape. CPU from `/proc/<pid>/stat` "
                  "and `time.process_time()`.", "",
                  "| pods | (a) proxy CPU ms/s | (a) per pod | (b) scrapes/s per pod | (b) **CPU µs per scrape** | (b) "
                  "CPU ms/s | pod process CPU ms/s per pod (serving /metrics) | /metrics bytes | proxy RSS MB | "
                  "load avg |", "|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
        for r in s["runs"]:
            lib = r["library"]
            lines.append(f"| {r['pods']} | {r['router_cpu_ms_per_s']:.1f} | {r['router_cpu_ms_per_pod_s']:.2f} | "
                         f"{lib['scrapes_per_pod_s']:.1f} | **{lib['cpu_us_per_scrape']:.0f}** | "
                         f"{lib['cpu_ms_per_s']:.1f} | {r['pods_cpu_ms_per_pod_s']:.2f} | {r['metrics_bytes']:,} | "
                         f"{r['router_rss_mb']:.0f} | {r['load_before']} → {r['load_after']} |")
        lines += ["", "Scrapes per pod fall below the nominal 10/s when a pass over all pods takes a while (the next "
                  "pass starts `interval_s` after the previous one ended). The simulator's exposition is the size "
                  "shown; a real vLLM `/metrics` (histograms per model name) may be larger — not measured here.", ""]
    return "\n".join(lines)


def write_results() -> None:
    hand = ""
    if RESULTS.exists():
        text = RESULTS.read_text()
        if HAND_MARKER in text:
            hand = text[text.index(HAND_MARKER):]
    RESULTS.write_text(render() + "\n" + (hand or HAND_MARKER + "\n"))
    print(f"wrote {RESULTS.relative_to(REPO)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="cmd")
    srv = sub.add_parser("serve", help="internal: the trainer server used by the long-poll part")
    srv.add_argument("--data-dir", required=True)
    srv.add_argument("--port", type=int, required=True)
    parser.add_argument("--only", choices=PARTS, action="append", help="run only these parts (repeatable)")
    parser.add_argument("--bundle-rows", type=int, nargs="+", default=[20_000, CAP_ROWS],
                        help="rows per model of each fitted bundle (the largest is used by the other parts)")
    parser.add_argument("--clients", type=int, nargs="+", default=[0, 50, 200, 500], help="long-poll clients N")
    parser.add_argument("--idle-s", type=float, default=WAIT_S, help="idle measuring window per N")
    parser.add_argument("--publishes", type=int, default=2, help="fan-outs measured per N")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 100], help="predictor rows per call")
    parser.add_argument("--wrk-s", type=int, default=3, help="seconds per predictor run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved predictor rounds (medians)")
    parser.add_argument("--pods", type=int, nargs="+", default=[8, 64], help="scraped pods K")
    parser.add_argument("--scrape-s", type=float, default=15.0)
    parser.add_argument("--render", action="store_true", help="only re-render RESULTS-fanout.md")
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        serve(args.data_dir, args.port)
        return
    WORK.mkdir(parents=True, exist_ok=True)
    if not args.render:
        for part in args.only or PARTS:
            if part == "bundle":
                save(part, bench_bundle(args.bundle_rows))
            elif part == "longpoll":
                save(part, bench_longpoll(args.clients, args.idle_s, args.publishes))
            elif part == "predictor":
                save(part, bench_predictor(args.rows, args.wrk_s, 4, args.rounds))
            else:
                save(part, bench_scrape(args.pods, args.scrape_s))
    write_results()


if __name__ == "__main__":
    main()
