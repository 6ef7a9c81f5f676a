"""Prediction-server benchmark: our predictor vs a naive pydantic/DMatrix baseline, same run, loopback.

    .venv/bin/python -m bench.predictor.service [--duration 3] [--rounds 3] [--trials 5]

Model: TTFT + TPOT, 200 trees depth 6 each. Every variant is a real server subprocess (one
process each, all started up front; an idle one uses no CPU) and load comes from ``wrk`` (C,
1 thread, keep-alive, separate process). Rounds interleave the variants so load from other
processes on the machine hits them alike; figures are medians over rounds. Prints markdown:
latency/throughput per variant, RSS, new-bundle-to-served.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import xgboost as xgb

from bench.common.paths import REPO
from bench.common.procstat import free_port, rss_mb
from bench.common.prodenv import production_python
from predictor.hotpath import HotPath
from predictor.serving import build_serving
from shared.bundle import ModelFiles, assemble, encode_model, read_current, write_bundle
from shared.columns import Bounds, to_columns
from shared.features import MODEL_NAMES, FeatureSpec, feature_row
from shared.predictor_settings import PredictorSettings
from shared.timefmt import rfc3339

TREES, DEPTH = 200, 6
JSON_HEADERS = {"Content-Type": "application/json"}
UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [feature_row({
        "kv_cache_percentage": round(float(rng.random()), 4), "input_token_length": int(rng.integers(10, 8000)),
        "num_request_waiting": int(rng.integers(0, 8)), "num_request_running": int(rng.integers(0, 40)),
        "num_tokens_generated": 1, "prefix_cache_score": round(float(rng.random()), 4),
        "pod_type": ["", "prefill", "decode"][i % 3], "prefill_tokens_in_flight": int(rng.integers(0, 9000))})
        for i in range(n)]


def train_files(seed: int = 0) -> ModelFiles:
    """model name → (UBJSON bytes, manifest entry) of a bench-sized quantile model (shared.bundle codec)."""
    spec, rng = FeatureSpec(), np.random.default_rng(seed)
    cols = to_columns(rows(20_000, seed), ["body", "requests"])
    models = {}
    for name in MODEL_NAMES:
        x = spec.matrix(name, cols)
        y = x[:, 2] * 0.03 + x[:, 3] * 20 + x[:, 5] * 0.01 + rng.gamma(2, 5, len(x))
        booster = xgb.train({"objective": "reg:quantileerror", "quantile_alpha": 0.9, "max_depth": DEPTH,
                             "nthread": 2, "tree_method": "hist"}, xgb.DMatrix(x, label=y), TREES)
        models[name] = encode_model(booster, name, spec.columns(name), {
            "quantiles": [0.9], "calibration": {"scale": 1.0, "offset": 0.0}})
    return models


def trainer_bundle(work: Path, per_model: int = 50_000) -> Path:
    """A bundle exactly as the trainer publishes it today (default settings: location + multi-quantile booster,
    p50/p90/p99, per-quantile calibration), fitted on ``per_model`` synthetic rows per model; returns its root."""
    from bench.trainer.service import feed, service
    svc = service(work / "trainer")
    try:
        feed(svc, per_model, 7)
        assert svc.loop.run_cycle() is not None, "the trainer published nothing"
        return svc.publisher.root
    finally:
        svc.stop()


def publish(root: Path, version: int, models: ModelFiles) -> None:
    spec = FeatureSpec()
    meta = {"feature_flags": spec.as_dict(), "model_type": "xgboost", "objective_type": "quantile", "quantile": 0.9}
    write_bundle(root, *assemble(version, rfc3339(), models, meta, None))


@contextmanager
def server(cmd: list[str], port: int, env: dict[str, str] | None = None,
           cwd: Path = REPO) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, "MALLOC_ARENA_MAX": "2", **(env or {})},  # the image's
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {cmd}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def ours(bundle_dir: Path, port: int, **env: str) -> Any:
    return server([production_python(), "-m", "predictor", "--host", "127.0.0.1", "--port", str(port), "--bundle-dir",
                   str(bundle_dir)], port, {"PREDICT_LONG_POLL": "false", **env})


def baseline(bundle_dir: Path, port: int) -> Any:
    return server([production_python(), "-m", "bench.predictor.baseline", "--bundle-dir", str(bundle_dir),
                   "--port", str(port)], port)


def wrk(url: str, body: bytes, conns: int, duration: float, workdir: Path) -> dict[str, float]:
    script = workdir / f"post-{len(body)}.lua"
    script.write_text('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                      f"wrk.body = [==[{body.decode()}]==]\n")
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{max(1, round(duration))}s", "--latency", "-s", str(script), url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    pct = {int(m[0]): float(m[1]) * UNIT[m[2]] for m in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)}
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert rps is not None, out
    total = re.search(r"(\d+) requests in", out)
    assert total is not None, out
    return {"p50": pct[50], "p99": pct[99], "rps": float(rps[1]), "requests": float(total[1]),
            "errors": float(bad[1]) if bad else 0.0}


SCENARIOS = (("strict100_c1", "/predict/bulk/strict", 1), ("strict100_c4", "/predict/bulk/strict", 4),
             ("single_c1", "/predict", 1), ("single_c8", "/predict", 8),
             ("strict100q_c1", "/predict/bulk/strict?quantiles=0.5,0.9,0.99", 1))


MULTI_QUANTILE = {"ours (trainer-published bundle, p50/p90/p99)"}


def load_rounds(urls: dict[str, str], duration: float, rounds: int, workdir: Path) -> dict[str, dict[str, Any]]:
    """Every scenario, ``rounds`` times, variants interleaved (A B C … A B C …): background load from
    other processes on the machine hits every variant alike. Returns the median of each figure."""
    strict = orjson.dumps({"requests": rows(100, 1)})
    bodies = {"/predict/bulk/strict": strict, "/predict": orjson.dumps(rows(1, 2)[0]),
              "/predict/bulk/strict?quantiles=0.5,0.9,0.99": strict}
    for url in urls.values():
        for _ in range(200):  # warm up
            assert httpx.post(f"{url}/predict/bulk/strict", content=bodies["/predict/bulk/strict"],
                              headers=JSON_HEADERS).status_code == 200
    runs: dict[str, dict[str, list[dict[str, float]]]] = {v: {s[0]: [] for s in SCENARIOS} for v in urls}
    for name, path, conns in SCENARIOS:
        for _ in range(rounds):
            for variant, url in urls.items():
                if "quantiles=" in path and variant not in MULTI_QUANTILE:
                    continue
                runs[variant][name].append(wrk(f"{url}{path}", bodies[path], conns, duration, workdir))
    return {v: {name: {k: (sum if k == "errors" else statistics.median)(r[k] for r in results) for k in results[0]}
                for name, results in per.items() if results} for v, per in runs.items()}


def wait_version(url: str, version: int, timeout: float = 30.0) -> float:
    start = time.monotonic()
    with httpx.Client(timeout=5) as client:
        while client.get(f"{url}/status").json()["bundle"]["version"] != version:
            if time.monotonic() - start > timeout:
                raise RuntimeError("bundle not served")
            time.sleep(0.005)
    return time.monotonic() - start


def freshness(root: Path, files: ModelFiles, trials: int) -> dict[str, list[float]]:
    """Seconds from publish to served: /reload (poll-to-serve), long-poll over HTTP, bundle-dir watch."""
    sys.path.insert(0, str(REPO))
    from tests.predictor.trainer_stub import TrainerStub
    stub = TrainerStub(root, free_port()).start()
    out: dict[str, list[float]] = {"reload_http": [], "long_poll_http": [], "watch_dir": []}
    version = 100
    try:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with server([sys.executable, "-m", "predictor", "--host", "127.0.0.1", "--port", str(port),
                     "--training-url", stub.url], port, {"PREDICT_LONG_POLL": "false",
                                                          "LOCAL_MODEL_DIR": str(root.parent / "local")}):
            for _ in range(trials):
                version += 1
                publish(root, version, files)
                start = time.monotonic()
                assert httpx.post(f"{url}/reload", timeout=30).json()["version"] == version
                out["reload_http"].append(time.monotonic() - start)
        modes = (("long_poll_http", ["--training-url", stub.url]), ("watch_dir", ["--bundle-dir", str(root)]))
        for mode, args in modes:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            with server([sys.executable, "-m", "predictor", "--host", "127.0.0.1", "--port", str(port), *args], port,
                        {"PREDICT_LONG_POLL": "true", "LOCAL_MODEL_DIR": str(root.parent / "local2")}):
                time.sleep(0.5)
                for _ in range(trials):
                    version += 1
                    publish(root, version, files)
                    out[mode].append(wait_version(url, version))
                    time.sleep(0.3)
    finally:
        stub.stop()
    return out


def micro(root: Path) -> dict[str, float]:
    """In-process µs per HotPath.strict call (100 rows) and per single call (numpy forest)."""
    bundle = read_current(root, None)
    assert bundle is not None
    hot = HotPath(Bounds(), 10_000)
    strict, single = orjson.dumps({"requests": rows(100, 1)}), orjson.dumps(rows(1, 2)[0])
    out = {}
    serving = build_serving(bundle, PredictorSettings(), "bench")
    for label, fn, body in (("strict100", hot.strict, strict), ("single", hot.single, single)):
        n = 300
        call = (lambda f, b, s: lambda: f(b, s))(fn, body, serving)
        out[label] = min(timeit.repeat(call, number=n, repeat=3)) / n * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.predictor.service", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-predictor-"))
    root = work / "bundles"
    files = train_files()
    publish(root, 1, files)
    trained = trainer_bundle(work)
    print(f"# bench.predictor.service — {TREES} trees depth {DEPTH}, machine: {os.cpu_count()} cores, "
          f"load average at start {os.getloadavg()[0]:.2f} (other processes share the machine)\n")
    print("## in-process hot path (µs per call)\n")
    print(", ".join(f"{k}: {v:.0f}" for k, v in micro(root).items()), "\n")
    variants = {
        "ours (default: numpy forest, inline)": lambda p: ours(root, p),
        "ours (threadpool)": lambda p: ours(root, p, PREDICT_INLINE_MAX_BYTES="0"),
        "ours (trainer-published bundle, p50/p90/p99)": lambda p: ours(trained, p),
        "baseline (pydantic + DMatrix)": lambda p: baseline(root, p),
    }
    print(f"## loopback HTTP, wrk -t1, {args.rounds} interleaved rounds × {args.duration:g} s, medians\n")
    print("| variant | strict-100 p50 ms | p99 ms | req/s c1 | rows/s c4 | p50 c4 ms | single p50 ms c1 "
          "| single p50 ms c8 | single req/s c8 | strict-100 ?quantiles=0.5,0.9,0.99 p50 ms | non-2xx | RSS MB "
          "| peak MB after a 10k-row call |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with contextlib.ExitStack() as stack:
        ports = {label: free_port() for label in variants}
        procs = {label: stack.enter_context(start(ports[label])) for label, start in variants.items()}
        results = load_rounds({k: f"http://127.0.0.1:{p}" for k, p in ports.items()}, args.duration, args.rounds,
                              work)
        for label, proc in procs.items():
            rss, _ = rss_mb(proc.pid)
            big = httpx.post(f"http://127.0.0.1:{ports[label]}/predict/bulk/strict", timeout=60,
                             content=orjson.dumps({"requests": rows(10_000, 3)}), headers=JSON_HEADERS)
            assert big.status_code == 200, big.status_code
            _, peak = rss_mb(proc.pid)
            r = results[label]
            s1, s4, q1, q8 = r["strict100_c1"], r["strict100_c4"], r["single_c1"], r["single_c8"]
            errors = sum(x["errors"] for x in r.values())
            multi = f"{r['strict100q_c1']['p50']:.3f}" if "strict100q_c1" in r else "–"
            print(f"| {label} | {s1['p50']:.3f} | {s1['p99']:.3f} | {s1['rps']:.0f} | {s4['rps'] * 100:,.0f} | "
                  f"{s4['p50']:.3f} | {q1['p50']:.3f} | {q8['p50']:.3f} | {q8['rps']:,.0f} | {multi} | {errors:.0f} | "
                  f"{rss:.0f} | {peak:.0f} |", flush=True)
    fresh = freshness(root, files, args.trials)
    print("\n## new bundle → served (s)\n")
    for mode, values in fresh.items():
        print(f"- {mode}: median {statistics.median(values):.3f}, max {max(values):.3f}, n={len(values)}")
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
