"""``python -m predictor`` as a real subprocess; CLI flags over env."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from predictor.__main__ import parse_args
from tests.predictor.conftest import build_bundle
from tests.procs import free_port

REPO = Path(__file__).resolve().parents[2]


def test_cli_serves_from_bundle_dir(bundle_root: Path) -> None:
    build_bundle(bundle_root, 7)
    port = free_port()
    env = {**os.environ, "MODEL_SYNC_INTERVAL_SEC": "1", "PREDICT_LONG_POLL": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "predictor", "--host", "127.0.0.1", "--port", str(port),
                             "--bundle-dir", str(bundle_root)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
        root = httpx.get(f"http://127.0.0.1:{port}/", timeout=5).json()
        assert root["sync_interval"] == 1 and root["training_server"] == f"file://{bundle_root}"
        r = httpx.post(f"http://127.0.0.1:{port}/predict/bulk/strict", timeout=5, json={"requests": [{
            "kv_cache_percentage": 0.1, "input_token_length": 10, "num_request_waiting": 0,
            "num_request_running": 0, "num_tokens_generated": 1, "prefix_cache_score": 0.0}]})
        assert r.status_code == 200 and r.headers["x-model-version"] == "7"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def test_flags() -> None:
    args = parse_args(["--port", "9001", "--training-url", "http://t:8000"])
    assert (args.port, args.training_url, args.bundle_dir, args.host) == (9001, "http://t:8000", None, None)
    with pytest.raises(SystemExit):
        parse_args(["--training-url", "http://t", "--bundle-dir", "/x"])


def test_app_factory_reads_env(bundle_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.testclient import TestClient

    from predictor.app import app_from_env
    build_bundle(bundle_root, 4)
    monkeypatch.setenv("LATENCY_BUNDLE_DIR", str(bundle_root))
    monkeypatch.setenv("MODEL_SYNC_INTERVAL_SEC", "7")
    with TestClient(app_from_env()) as c:
        assert c.get("/readyz").status_code == 200
        assert c.get("/").json()["sync_interval"] == 7
