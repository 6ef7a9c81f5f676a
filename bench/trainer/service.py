"""Trainer benchmarks: durable ingest rate, retrain wall time, calibration vs a known p90, RSS.

Run: ``.venv/bin/python -m bench.trainer.service [--quick]``. Prints a markdown report and writes
it to ``bench/out/trainer.md``. Everything is measured in this run, against baselines in this run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from bench.common import synthetic
from bench.common.paths import OUT, REPO
from bench.common.procstat import cpu_s, free_port, rss_mb
from bench.common.prodenv import production_python
from shared.features import MODEL_NAMES, TARGET_OF
from shared.trainer_settings import TrainerSettings
from trainer.evaluate import score
from trainer.service import TrainerService
from trainer.store import LogLimits, SampleLog
from trainer.store.record import columns_to_matrix


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


def _cycle(svc: TrainerService) -> dict[str, Any]:
    load = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    version = svc.loop.run_cycle()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    records = {k: svc.history.retrains.records(k)[-1] for k in MODEL_NAMES}
    entries = {k: svc.retrainer.last_entries[k] for k in MODEL_NAMES}
    return {"load": load, "version": version, "wall": wall, "cpu": cpu, "records": records, "entries": entries}


def bench_retrain(tmp: Path, per_model: int, label: str) -> list[str]:
    """``RetrainLoop.run_cycle()`` on a full window: both models (every candidate's location, the multi-quantile
    booster, calibration), champion/challenger scoring, bundle write + reload — twice: the first cycle (no
    history) and the next one, after 10,000 more rows per model, with the fit budget adapted to the first."""
    svc = service(tmp / f"retrain{per_model}")
    feed(svc, per_model, 7)
    cycles = [_cycle(svc)]
    feed(svc, 10_000, 8)
    cycles.append(_cycle(svc))
    ours = accuracy_on_fresh(svc, 50_000, 77)
    counts = svc.window.counts()
    svc.stop()
    lines = [f"### Retrain cycle, {label}", "",
             f"Window: TTFT {counts['ttft']['train']:,} train + {counts['ttft']['test']:,} holdout rows, TPOT "
             f"{counts['tpot']['train']:,} + {counts['tpot']['test']:,}.", "",
             "| cycle | wall s | process CPU-s | load avg | model | chosen | location rows | rounds (loc + q) | fit s "
             "| fit CPU-s | decision |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, c in enumerate(cycles, 1):
        for kind in MODEL_NAMES:
            e, r = c["entries"][kind], c["records"][kind]
            rows = f"{e.location_fit_rows:,} of {e.fit_rows:,}"
            lines.append(f"| {i} | {c['wall']:.2f} | {c['cpu']:.2f} | {c['load']:.1f} | {kind} | "
                         f"{e.candidate} | {rows} | {e.location_rounds} + {e.quantile_rounds} | "
                         f"{r.fit_s:.2f} | {e.fit_cpu_seconds:.2f} | {r.decision} |")
    lines += ["", "Served (live bundle after cycle 2) on 50,000 fresh rows vs the analytic p90:", "",
              "| model | coverage | MAPE vs true p90 | pinball |", "|---|---|---|---|"]
    for kind in MODEL_NAMES:
        lines.append(f"| {kind} | {ours[kind]['coverage']:.3f} | {100 * ours[kind]['mape']:.2f} % | "
                     f"{ours[kind]['pinball']:.3f} |")
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


def start_server(data_dir: Path, port: int, env_extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LATENCY_LOG_LEVEL": "WARNING", "MALLOC_ARENA_MAX": "2", **env_extra}  # as in the image
    proc = subprocess.Popen([production_python(), "-m", "trainer", "--host", "127.0.0.1", "--port", str(port),
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


def bench_rss(tmp: Path, per_model: int) -> list[str]:
    port = free_port()
    proc = start_server(tmp / "rss", port, {"LATENCY_RETRAINING_INTERVAL_SEC": "1",
                                            "LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET": "100000"})
    try:
        idle, _ = rss_mb(proc.pid)
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
        rss, peak = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(20)
    window = status["training_data"]["total_samples"] + status["test_data"]["total_samples"]
    return [f"### Trainer RSS with a {window:,}-row window (server process, /proc/<pid>/status)", "",
            f"- idle after start-up (prior published): {idle:.0f} MB",
            f"- after ingesting {2 * per_model:,} rows and one retrain: **VmRSS {rss:.0f} MB, "
            f"peak VmHWM {peak:.0f} MB**"]


async def _paced(url: str, bodies: list[bytes], rows_per_s: float, seconds: float) -> tuple[int, int, float]:
    """Open-loop ingest: one 1,000-row bulk every 1000 / rows_per_s seconds, on up to 16 connections."""
    period, sent, late = 1000 / rows_per_s, 0, 0
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=16)) as c:
        gate = asyncio.Semaphore(16)

        async def post(body: bytes) -> None:
            nonlocal sent
            async with gate:
                r = await c.post("/add_training_data_bulk", content=body, headers={"content-type": "application/json"})
                assert r.status_code == 202, r.text
                sent += 1000

        started = time.perf_counter()
        tasks, k = [], 0
        while (due := started + k * period) < started + seconds:
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -period:
                late += 1
            tasks.append(asyncio.create_task(post(bodies[k % len(bodies)])))
            k += 1
        await asyncio.gather(*tasks)
        return sent, late, time.perf_counter() - started


def _gaps(times: list[float]) -> str:
    gaps = np.diff(sorted(times))
    if not len(gaps):
        return "n/a"
    return f"median {np.median(gaps):.1f} s, max {gaps.max():.1f} s ({len(gaps)} gaps)"


def bench_cadence(tmp: Path, rows_per_s: float, seconds: float) -> list[str]:
    """Retrain cadence while ``rows_per_s`` samples/s arrive for ``seconds`` (default settings: 10 s interval,
    the 100k-row window cap per model)."""
    rng = np.random.default_rng(13)  # fresh rows in every bulk: repeated rows would sit in both the fit and the
    bodies = [orjson.dumps({"entries": synthetic.mixed_rows(1000, rng)})  # stop rows and defeat early stopping
              for _ in range(int(rows_per_s * seconds / 1000) + 1)]
    port = free_port()
    proc = start_server(tmp / "cadence", port, {})
    url = f"http://127.0.0.1:{port}"
    load = os.getloadavg()[0]
    try:
        wall_started, cpu_before = time.time(), cpu_s(proc.pid)
        sent, late, wall = asyncio.run(_paced(url, bodies, rows_per_s, seconds))
        cpu = cpu_s(proc.pid) - cpu_before
        ui = httpx.get(f"{url}/ui/data", timeout=30).json()
        _, peak = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(20)
    records = {name: [r for r in ui["models"][name]["retrains"] if r["at"] >= wall_started] for name in MODEL_NAMES}
    cycles = sorted({round(r["at"], 1) for rs in records.values() for r in rs})
    published = sorted({r["version"]: r["at"] for rs in records.values() for r in rs
                        if r["decision"] == "published"}.values())
    lines = [f"### Retrain cadence under sustained ingest ({rows_per_s:,.0f} samples/s for {seconds:.0f} s, "
             f"default settings)", "",
             f"- ingest: {sent:,} rows in {wall:.1f} s = **{sent / wall:,.0f} rows/s** ({late} bulks sent late); "
             f"load average at start {load:.1f} on {os.cpu_count()} cores",
             f"- cycles that fitted: {len(cycles)}; between them: {_gaps(cycles)}",
             f"- bundles published: {len(published)}; between publishes: **{_gaps(published)}**",
             f"- trainer process CPU during the run: {cpu:.1f} CPU-s = {cpu / wall:.2f} cores",
             f"- trainer peak RSS (VmHWM): **{peak:.0f} MB** (production-like venv: no dev extras)", "",
             "| model | cycle | rows | location rows | holdout | rounds (loc + q) | fit s | decision | candidate |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in MODEL_NAMES:
        for i, r in enumerate(records[name]):
            lines.append(f"| {name} | {i + 1} | {r['rows']:,} | {r['location_fit_rows']:,} | {r['holdout_rows']:,} | "
                         f"{r['location_rounds']} + {r['quantile_rounds']} | {r['fit_s']:.2f} | {r['decision']} | "
                         f"{r['candidate']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.trainer.service", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (smoke)")
    parser.add_argument("--out", default=str(OUT / "trainer.md"))
    parser.add_argument("--only", choices=("ingest", "replay", "retrain", "accuracy", "rss", "cadence"),
                        action="append", help="run only these parts (repeatable; default all)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    try:
        report = [f"## Trainer benchmarks (machine: {os.cpu_count()} cores, python {sys.version.split()[0]})", ""]
        parts = set(args.only or ("ingest", "replay", "retrain", "accuracy", "rss", "cadence"))
        if "ingest" in parts:
            report += bench_ingest(tmp, 3 if args.quick else 8) + [""]
        if "replay" in parts:
            report += bench_replay(tmp, 2_000_000) + [""]
        if "retrain" in parts:
            report += bench_retrain(tmp, 50_000, "100k-row window (50k TTFT rows + 50k TPOT rows, the EPP's row mix)")
            report += [""] + bench_retrain(tmp, 100_000, "at the window cap: 100k rows per model") + [""]
        if "accuracy" in parts:
            report += bench_accuracy(tmp, 20_000, 2 if args.quick else 3) + [""]
        if "rss" in parts:
            report += bench_rss(tmp, 100_000) + [""]
        if "cadence" in parts:
            report += bench_cadence(tmp, 10_000, 20 if args.quick else 60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(report) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
