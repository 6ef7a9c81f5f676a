"""``python -m sim.pod`` as a real subprocess: N pods on consecutive ports, clean SIGTERM exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from demo.procs import free_port_block
from sim.engine import EngineConfig
from sim.pod import PodConfig, run_pods
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_cli_serves_count_pods_on_consecutive_ports() -> None:
    base = free_port_block(2)
    cmd = [sys.executable, "-m", "sim.pod", "--host", "127.0.0.1", "--port", str(base), "--count", "2",
           "--time-scale", "0.05", "--max-model-len", "1024", "--pool", "short"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        urls = [f"http://127.0.0.1:{base + i}" for i in range(2)]
        wait_for(lambda: all(_healthy(url) for url in urls), timeout=20, interval=0.1, what="both pods healthy")
        for url in urls:
            r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 3}, timeout=10)
            assert r.json()["usage"]["completion_tokens"] == 3
            assert httpx.get(url + "/v1/models", timeout=5).json()["data"][0]["max_model_len"] == 1024
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=5)
            raise
    assert proc.returncode == 0, err.decode()
    assert str(base + 1) in err.decode()


def test_client_disconnect_aborts_request() -> None:
    cfg = EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096)
    with run_pods([PodConfig(cfg, time_scale=0.05)]) as pods:
        url = pods.urls[0]
        with httpx.stream("POST", url + "/v1/completions",
                          json={"prompt": "x", "output_tokens": 3000, "stream": True}, timeout=10) as r:
            for i, _line in enumerate(r.iter_lines()):
                if i > 4:
                    break

        def running() -> float:
            text = httpx.get(url + "/metrics", timeout=5).text
            return float(next(line for line in text.splitlines()
                              if line.startswith("vllm:num_requests_running{")).rsplit(" ", 1)[1])

        wait_for(lambda: running() == 0, timeout=5, interval=0.05, what="the aborted request leaves the batch")
