"""Scale-out figures for docs/scaling.md: bundle size, long-poll fan-out cost, predictor CPU per call, scrape cost.

Run: ``.venv/bin/python -m bench.scaling.fanout [--only bundle|longpoll|predictor|scrape]``. Each part takes one to
two minutes on 2 cores, writes ``bench/out/fanout-<part>.json`` and re-renders
``bench/results/scaling/RESULTS-fanout.md`` from the parts present (hand-written text below the marker line in that
file is kept). ``longpoll`` and ``predictor`` use
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
import shutil
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from bench.common.procstat import cpu_s, free_port, loadavg, rss_mb
from bench.predictor.service import publish, train_files, wrk
from bench.scaling.fanout_common import CAP_ROWS, PARTS, WAIT_S, WORK, largest_bundle_run, process, save
from bench.scaling.fanout_longpoll import bench_longpoll, serve
from bench.scaling.fanout_report import write_results
from bench.trainer.service import wire_matrix
from shared.features import MODEL_NAMES, feature_row
from shared.trainer_settings import TrainerSettings
from trainer.service import TrainerService

# ---------------------------------------------------------------------------------------------- 1. bundle

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
            before = loadavg()
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
            entries = {k: live.bundle.model_entry(k) for k in MODEL_NAMES}
        finally:
            svc.stop()
        served = [n for n in files if n != "manifest.sha256"]  # what a predictor downloads (manifest + boosters)
        results.append({
            "rows_per_model": per_model, "window": counts, "version": version, "load_before": before,
            "load_after": loadavg(), "cycle_wall_s": wall, "cycle_cpu_s": cpu,
            "fit_cpu_s": {k: entries[k].fit_cpu_seconds for k in MODEL_NAMES},
            "models": {k: entries[k].written("candidate", "location_rounds", "quantile_rounds", "quantiles",
                                             "training_rows") for k in MODEL_NAMES},
            "files": files, "download_bytes": sum(files[n]["bytes"] for n in served),
            "download_gzip_bytes": sum(files[n]["gzip_bytes"] for n in served),
            "data_dir": str(data_dir), "bundle_root": str(svc.publisher.root)})
        print(f"bundle @ {per_model:,} rows/model: v{version}, {results[-1]['download_bytes']:,} bytes, "
              f"cycle {wall:.2f} s wall / {cpu:.2f} CPU-s", flush=True)
    return {"runs": results}


# ---------------------------------------------------------------------------------------------- 3. predictor

def request_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [feature_row({
        "kv_cache_percentage": round(float(rng.random()), 4), "input_token_length": int(rng.integers(10, 8000)),
        "num_request_waiting": int(rng.integers(0, 8)), "num_request_running": int(rng.integers(0, 40)),
        "num_tokens_generated": 0, "prefix_cache_score": round(float(rng.random()), 4),
        "prefill_tokens_in_flight": int(rng.integers(0, 9000)), "pod_class": "a100-tp1"}) for _ in range(n)]


def reference_bundle(root: Path) -> Path:
    """The bundle RESULTS-predictor.md was measured with (``bench.predictor.service.train_files``: one
    ``reg:quantileerror`` booster of 200 trees, depth 6, per model, no location booster, one quantile)."""
    shutil.rmtree(root, ignore_errors=True)
    publish(root, 1, train_files())
    return root


def bench_predictor(sizes: Sequence[int], seconds: int, conns: int, rounds: int) -> dict[str, Any]:
    """The current trainer-published bundle and the reference bundle of RESULTS-predictor.md, both servers up at
    once, runs interleaved (round by round, size by size, variant by variant) so background load hits both alike;
    medians over rounds."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found (apt-get install wrk)")
    run = largest_bundle_run()
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
                wrk(urls[variant], bodies[n], conns, 1, WORK)
        for _ in range(rounds):
            for n in sizes:
                for variant, proc in procs.items():
                    before, c0, t0 = loadavg(), cpu_s(proc.pid), time.monotonic()
                    res = wrk(urls[variant], bodies[n], conns, seconds, WORK)
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
                        "p50_ms": float(np.median([r["p50"] for r in runs])),
                        "p99_ms": float(np.median([r["p99"] for r in runs])),
                        "non2xx": int(sum(r["errors"] for r in runs)), "loads": [r["load"] for r in runs]})
            print(f"predictor {variant} {n} rows/call: {med:.3f} ms CPU per call (rounds "
                  f"{', '.join(f'{x:.3f}' for x in per_call)}), {n / med * 1e3:,.0f} rows per CPU-s", flush=True)
        variants[variant] = {"evaluator": evaluators[variant], "rss_mb": rss[variant][0], "hwm_mb": rss[variant][1],
                             "sizes": out}
    return {"conns": conns, "seconds": seconds, "rounds": rounds, "variants": variants, "load_end": loadavg(),
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
                before = loadavg()
                r0, s0, t0 = cpu_s(router.pid), cpu_s(sim.pid), time.monotonic()
                time.sleep(seconds)
                r1, s1, t1 = cpu_s(router.pid), cpu_s(sim.pid), time.monotonic()
                router_rss = rss_mb(router.pid)[0]
            wall = t1 - t0
            lib = asyncio.run(_scrape_in_process(pods, seconds))
            out.append({"pods": k, "seconds": wall, "router_cpu_ms_per_s": (r1 - r0) / wall * 1e3,
                        "router_cpu_ms_per_pod_s": (r1 - r0) / wall * 1e3 / k,
                        "pods_cpu_ms_per_pod_s": (s1 - s0) / wall * 1e3 / k, "metrics_bytes": payload,
                        "router_rss_mb": router_rss, "library": lib, "load_before": before, "load_after": loadavg()})
        print(f"scrape {k} pods: proxy {out[-1]['router_cpu_ms_per_s']:.1f} ms/s; library "
              f"{lib['scrapes_per_pod_s']:.1f} scrapes/s per pod, {lib['cpu_us_per_scrape']:.0f} µs CPU per scrape",
              flush=True)
    return {"interval_s": 0.1, "runs": out}


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
