"""``python -m sim.pod`` as a real subprocess: N pods on consecutive ports, clean SIGTERM exit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from sim.engine import EngineConfig
from sim.pod import PodConfig, run_pods

REPO = Path(__file__).resolve().parents[2]


def _consecutive_free_ports(n: int) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        socks = []
        try:
            for i in range(n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no consecutive free ports")


def _wait_healthy(url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{url} never became healthy")


def test_cli_serves_count_pods_on_consecutive_ports() -> None:
    base = _consecutive_free_ports(2)
    cmd = [sys.executable, "-m", "sim.pod", "--host", "127.0.0.1", "--port", str(base), "--count", "2",
           "--time-scale", "0.05", "--max-model-len", "1024", "--pool", "short"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        urls = [f"http://127.0.0.1:{base + i}" for i in range(2)]
        for url in urls:
            _wait_healthy(url, deadline)
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
        deadline = time.monotonic() + 5
        running = 1.0
        while time.monotonic() < deadline:
            text = httpx.get(url + "/metrics", timeout=5).text
            running = float(next(line for line in text.splitlines()
                                 if line.startswith("vllm:num_requests_running{")).rsplit(" ", 1)[1])
            if running == 0:
                break
            time.sleep(0.05)
        assert running == 0
