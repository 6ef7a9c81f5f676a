"""Crash test: acknowledged rows survive ``kill -9`` (subprocess), and training uses them after restart."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.procs import free_port, spawn, wait_ready
from tests.waiting import wait_for


def log_of(data_dir: Path) -> Path:
    return data_dir.with_name(data_dir.name + "-trainer.log")


def start(data_dir: Path, port: int, interval: str) -> subprocess.Popen[bytes]:
    env = {"LATENCY_RETRAINING_INTERVAL_SEC": interval, "LATENCY_MIN_SAMPLES_FOR_RETRAIN": "100",
           "LATENCY_XGB_N_ESTIMATORS": "20", "LATENCY_TRAIN_THREADS": "1"}
    return spawn("trainer", ["--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)], env,
                 log_of(data_dir))


def test_kill_9_loses_no_acknowledged_row(tmp_path: Path, rows_of: Callable[..., list]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(tmp_path, port, "3600")
    acked = 0
    try:
        wait_ready(url, proc, log_of(tmp_path))
        with httpx.Client(base_url=url, timeout=30) as c:
            for i in range(10):
                r = c.post("/add_training_data_bulk", json={"entries": rows_of(250, seed=i)})
                assert r.status_code == 202
                acked += 250
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL

    proc = start(tmp_path, port, "0.5")
    try:
        wait_ready(url, proc, log_of(tmp_path))
        with httpx.Client(base_url=url, timeout=30) as c:
            status = c.get("/data/status").json()
            assert status["durable"]["rows"] == acked
            held = status["training_data"]["total_samples"] + status["test_data"]["total_samples"]
            assert held == acked
            wait_for(lambda: c.get("/data/status").json()["last_retrain"] is not None, timeout=20, interval=0.1,
                     what="a retrain after restart")
            manifest = c.get("/bundle/manifest").json()
            rows_used = sum(m["training_rows"] + m["holdout_rows"] for m in manifest["models"].values())
            assert rows_used == acked
    finally:
        proc.terminate()
        proc.wait(15)


def test_kill_9_during_ingest_keeps_every_acknowledged_row(tmp_path: Path, rows_of: Callable[..., list]) -> None:
    """SIGKILL while a client keeps posting: every 202 is on disk; at most the in-flight call is extra."""
    import threading

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(tmp_path, port, "3600")
    acked = 0
    stop = threading.Event()
    body = {"entries": rows_of(200)}

    def post_forever() -> None:
        nonlocal acked
        with httpx.Client(base_url=url, timeout=10) as c:
            while not stop.is_set():
                try:
                    if c.post("/add_training_data_bulk", json=body).status_code == 202:
                        acked += 200
                except httpx.TransportError:
                    return

    try:
        wait_ready(url, proc, log_of(tmp_path))
        thread = threading.Thread(target=post_forever)
        thread.start()
        deadline = time.monotonic() + 20
        while acked < 2000 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        stop.set()
    thread.join(15)
    assert acked >= 2000
    proc = start(tmp_path, port, "3600")
    try:
        wait_ready(url, proc, log_of(tmp_path))
        durable = httpx.get(f"{url}/data/status", timeout=10).json()["durable"]["rows"]
        assert acked <= durable <= acked + 200
    finally:
        proc.terminate()
        proc.wait(15)
