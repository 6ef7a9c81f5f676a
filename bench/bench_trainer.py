"""Trainer benchmarks: durable ingest rate, retrain wall time, calibration vs a known p90, RSS.

Run: ``.venv/bin/python -m bench.bench_trainer [--quick]``. Prints a markdown report and writes
it to ``bench/out/trainer.md``. Everything is measured in this run, against baselines in this run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from bench import synthetic
from shared.features import MODEL_NAMES, TARGET_OF
from shared.trainer_settings import TrainerSettings
from trainer.calibrate import calibrate
from trainer.evaluate import score
from trainer.fit import FitParams, design, fit_booster
from trainer.service import TrainerService
from trainer.store import LogLimits, SampleLog
from trainer.store.record import columns_to_matrix

REPO = Path(__file__).resolve().parents[1]
BASELINE = FitParams(rounds=1000, learning_rate=0.03, max_bin=256, max_depth=4, nthread=2)


def wire_matrix(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    cols, y = synthetic.draw(kind, n, rng)
    cols = dict(cols, pod_type=np.zeros(n), actual_ttft_ms=np.zeros(n), actual_tpot_ms=np.zeros(n))
    cols[TARGET_OF[kind]] = y
    return columns_to_matrix(cols)


def service(tmp: Path, **overrides: Any) -> TrainerService:
    values: dict[str, Any] = {"data_dir": str(tmp), "max_training_data_size_per_bucket": 100_000,
                              "log_level": "WARNING"}
    values.update(overrides)
    svc = TrainerService(TrainerSettings(**values))
    svc.start(run_loop=False)
    return svc


def feed(svc: TrainerService, per_model: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for kind in MODEL_NAMES:
        for start in range(0, per_model, 10_000):
            svc.ingestor.store(wire_matrix(kind, min(10_000, per_model - start), rng))


def accuracy_on_fresh(svc: TrainerService, n: int, seed: int) -> dict[str, dict[str, float]]:
    """Served (calibrated) predictions of the live bundle on fresh rows vs the true p90."""
    live = svc.live.get()
    assert live is not None
    rng = np.random.default_rng(seed)
    out = {}
    for kind in MODEL_NAMES:
        cols, y = synthetic.draw(kind, n, rng)
        cols = dict(cols, pod_type=np.zeros(n))
        pred = live.predict(kind, cols)
        truth = synthetic.true_quantile(kind, cols, svc.settings.quantile_alpha)
        out[kind] = {"coverage": float(np.mean(y <= pred)), "mape": float(np.mean(np.abs(pred / truth - 1))),
                     "pinball": score(pred, y, svc.settings.quantile_alpha).pinball}
    return out


def bench_accuracy(tmp: Path, rows: int, seeds: int) -> list[str]:
    lines = [f"### Calibration vs the analytic p90 ({rows:,} rows per model, fresh 50,000-row test sets)", "",
             "| seed | TTFT coverage | TTFT MAPE vs true p90 | TPOT coverage | TPOT MAPE vs true p90 |",
             "|---|---|---|---|---|"]
    for seed in range(seeds):
        svc = service(tmp / f"acc{seed}")
        feed(svc, rows, seed)
        svc.loop.run_cycle()
        acc = accuracy_on_fresh(svc, 50_000, 1000 + seed)
        lines.append(f"| {seed} | {acc['ttft']['coverage']:.3f} | {100 * acc['ttft']['mape']:.2f} % | "
                     f"{acc['tpot']['coverage']:.3f} | {100 * acc['tpot']['mape']:.2f} % |")
        svc.stop()
    return lines + ["", "Targets: coverage 0.90 ± 0.02, MAPE ≤ 5 %."]


def _baseline_scores(svc: TrainerService, seed: int) -> dict[str, dict[str, float]]:
    """The slow full-size fit on the same window, calibrated the same way, on the same fresh rows."""
    rng = np.random.default_rng(seed)
    out = {}
    for kind in MODEL_NAMES:
        train, hold = svc.window.snapshot(kind)
        started = time.perf_counter()
        booster = fit_booster(svc.spec, kind, train, replace(BASELINE, alpha=svc.params.alpha))
        seconds = time.perf_counter() - started
        xh, yh = design(svc.spec, kind, hold, svc.params)
        cal = calibrate(np.asarray(booster.inplace_predict(xh)), yh, svc.params.alpha, "quantile")
        cols, y = synthetic.draw(kind, 50_000, rng)
        cols = dict(cols, pod_type=np.zeros(50_000))
        pred = cal.apply(np.asarray(booster.inplace_predict(svc.spec.matrix(kind, cols)), dtype=np.float64))
        truth = synthetic.true_quantile(kind, cols)
        out[kind] = {"seconds": seconds, "coverage": float(np.mean(y <= pred)),
                     "mape": float(np.mean(np.abs(pred / truth - 1))), "pinball": score(pred, y, 0.9).pinball}
    return out


def bench_retrain(tmp: Path, per_model: int, label: str, baseline: bool = True) -> list[str]:
    svc = service(tmp / f"retrain{per_model}")
    feed(svc, per_model, 7)
    load = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    version = svc.loop.run_cycle()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    live = svc.live.get()
    assert live is not None
    fits = {k: live.bundle.model_entry(k).get("fit_seconds") for k in MODEL_NAMES}
    fit_cpu = {k: live.bundle.model_entry(k).get("fit_cpu_seconds") for k in MODEL_NAMES}
    ours = accuracy_on_fresh(svc, 50_000, 77)
    base = _baseline_scores(svc, 77) if baseline else {}
    counts = svc.window.counts()
    svc.stop()
    lines = [f"### Retrain wall time, {label}", "",
             f"Window: TTFT {counts['ttft']['train']:,} train + {counts['ttft']['test']:,} holdout rows, TPOT "
             f"{counts['tpot']['train']:,} + {counts['tpot']['test']:,}. Published v{version}.", "",
             f"- **full cycle (TTFT + TPOT fit, calibrate, score vs live, publish): {wall:.2f} s** "
             f"(fit TTFT {fits['ttft']:.2f} s, TPOT {fits['tpot']:.2f} s, fitted concurrently; 1-min load "
             f"average at start {load:.1f} on {os.cpu_count()} cores)",
             f"- CPU: whole cycle {cpu:.2f} CPU-s; fit TTFT {fit_cpu['ttft']:.2f} CPU-s, TPOT {fit_cpu['tpot']:.2f} "
             f"CPU-s (1 XGBoost thread each) ⇒ on two idle cores the cycle takes ≈ max of the two fits + "
             f"{max(0.0, cpu - fit_cpu['ttft'] - fit_cpu['tpot']):.2f} s of scoring/publishing = "
             f"**{max(fit_cpu.values()) + max(0.0, cpu - fit_cpu['ttft'] - fit_cpu['tpot']):.2f} s**",
             "", "| model | fit | coverage | MAPE vs true p90 | pinball (fresh rows) |", "|---|---|---|---|---|"]
    for kind in MODEL_NAMES:
        p = svc.params
        lines.append(f"| {kind} ours ({p.rounds} rounds, {p.max_bin} bins, depth {p.max_depth}) | {fits[kind]:.2f} s | "
                     f"{ours[kind]['coverage']:.3f} | {100 * ours[kind]['mape']:.2f} % | {ours[kind]['pinball']:.3f} |")
        if kind not in base:
            continue
        b = BASELINE
        lines.append(f"| {kind} baseline ({b.rounds} rounds, {b.max_bin} bins, depth {b.max_depth}, 2 threads) | "
                     f"{base[kind]['seconds']:.2f} s | "
                     f"{base[kind]['coverage']:.3f} | {100 * base[kind]['mape']:.2f} % | {base[kind]['pinball']:.3f} |")
    return lines


def bench_replay(tmp: Path, rows: int) -> list[str]:
    """Raw log append rate and start-up replay time at the default retention (2M rows)."""
    log = SampleLog(tmp / "replay" / "log", LogLimits())
    list(log.replay())
    rng = np.random.default_rng(3)
    mats = [wire_matrix(kind, 1000, rng) for kind in MODEL_NAMES]
    started = time.perf_counter()
    for i in range(rows // 1000):
        log.append_rows(mats[i % 2])
    append_s = time.perf_counter() - started
    size = log.total_bytes
    log.close()
    started = time.perf_counter()
    svc = service(tmp / "replay", max_training_data_size_per_bucket=500)  # start(): replay + publish prior
    replay_s = time.perf_counter() - started
    replayed = svc.log.rows
    counts = svc.window.counts()
    svc.stop()
    return [f"### Durable log: raw append and start-up replay ({rows:,} rows, default retention)", "",
            f"- append (1,000-row records, write + fdatasync each, no HTTP): {rows / append_s:,.0f} rows/s, "
            f"{size / 1e6:.0f} MB",
            f"- service start-up (replay into the window, default cap 500/bucket, + prior bundle): {replayed:,} rows "
            f"in {replay_s:.2f} s "
            f"→ window TTFT {counts['ttft']['train']:,} + {counts['ttft']['test']:,}, TPOT "
            f"{counts['tpot']['train']:,} + {counts['tpot']['test']:,} rows (/readyz must be 200 within ~30 s)"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: Path, port: int, env_extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LATENCY_LOG_LEVEL": "WARNING", **env_extra}
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "--host", "127.0.0.1", "--port", str(port),
                             "--data-dir", str(data_dir)], cwd=REPO, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("trainer did not start")


async def _blast(url: str, bodies: list[bytes], concurrency: int, seconds: float) -> tuple[int, float]:
    sent = 0
    stop = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=concurrency)) as c:
        async def worker(i: int) -> None:
            nonlocal sent
            k = i
            while time.perf_counter() < stop:
                r = await c.post("/add_training_data_bulk", content=bodies[k % len(bodies)],
                                 headers={"content-type": "application/json"})
                assert r.status_code == 202, r.text
                sent += 1000
                k += concurrency
        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        return sent, time.perf_counter() - started


def bench_ingest(tmp: Path, seconds: float) -> list[str]:
    rng = np.random.default_rng(5)
    bodies = [orjson.dumps({"entries": synthetic.mixed_rows(1000, rng)}) for _ in range(20)]
    port = free_port()
    proc = start_server(tmp / "ingest", port, {"LATENCY_RETRAINING_INTERVAL_SEC": "3600"})
    lines = ["### Durable ingest over loopback HTTP (1,000-row bulks, one write + fdatasync per request)", "",
             "| concurrent clients | rows/s | requests/s |", "|---|---|---|"]
    try:
        for concurrency in (1, 4, 8):
            rows, wall = asyncio.run(_blast(f"http://127.0.0.1:{port}", bodies, concurrency, seconds))
            lines.append(f"| {concurrency} | {rows / wall:,.0f} | {rows / 1000 / wall:,.0f} |")
        status = httpx.get(f"http://127.0.0.1:{port}/data/status").json()
        lines += ["", f"Durable log after the run: {status['durable']['rows']:,} rows, "
                      f"{status['durable']['bytes'] / 1e6:.0f} MB (every acknowledged row)."]
    finally:
        proc.terminate()
        proc.wait(20)
    return lines


def _rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def bench_rss(tmp: Path, per_model: int) -> list[str]:
    port = free_port()
    proc = start_server(tmp / "rss", port, {"LATENCY_RETRAINING_INTERVAL_SEC": "1",
                                            "LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET": "100000"})
    try:
        idle, _ = _rss_mb(proc.pid)
        rng = np.random.default_rng(11)
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=60) as c:
            for kind in MODEL_NAMES:
                for _ in range(per_model // 10_000):
                    body = orjson.dumps({"entries": synthetic.rows(kind, 10_000, rng)})
                    assert c.post("/add_training_data_bulk", content=body,
                                  headers={"content-type": "application/json"}).status_code == 202
            deadline = time.monotonic() + 120
            while c.get("/bundle/manifest").headers["x-bundle-version"] == "1":
                assert time.monotonic() < deadline
                time.sleep(0.2)
            time.sleep(3)  # one more (no-op) cycle
            status = c.get("/data/status").json()
        rss, peak = _rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(20)
    window = status["training_data"]["total_samples"] + status["test_data"]["total_samples"]
    return [f"### Trainer RSS with a {window:,}-row window (server process, /proc/<pid>/status)", "",
            f"- idle after start-up (prior published): {idle:.0f} MB",
            f"- after ingesting {2 * per_model:,} rows and one retrain: **VmRSS {rss:.0f} MB, "
            f"peak VmHWM {peak:.0f} MB**"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="shorter runs (smoke)")
    parser.add_argument("--out", default=str(REPO / "bench" / "out" / "trainer.md"))
    parser.add_argument("--only", choices=("ingest", "replay", "retrain", "accuracy", "rss"), action="append",
                        help="run only these parts (repeatable; default all)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    try:
        report = [f"## Trainer benchmarks (machine: {os.cpu_count()} cores, python {sys.version.split()[0]})", ""]
        parts = set(args.only or ("ingest", "replay", "retrain", "accuracy", "rss"))
        if "ingest" in parts:
            report += bench_ingest(tmp, 3 if args.quick else 8) + [""]
        if "replay" in parts:
            report += bench_replay(tmp, 2_000_000) + [""]
        if "retrain" in parts:
            report += bench_retrain(tmp, 50_000, "100k-row window (50k TTFT rows + 50k TPOT rows, the EPP's row mix)")
            report += [""] + bench_retrain(tmp, 100_000, "stress: 100k rows per model (200k rows)", False) + [""]
        if "accuracy" in parts:
            report += bench_accuracy(tmp, 20_000, 2 if args.quick else 3) + [""]
        if "rss" in parts:
            report += bench_rss(tmp, 50_000)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(report) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
