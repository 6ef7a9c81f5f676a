"""Fixtures for the router-client tests: real loopback servers for the external boundaries."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn
from fastapi import FastAPI, Request, Response

from tests.procs import free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO / ".." / "shared" / "data"


class _Quiet(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run ``app`` with uvicorn on 127.0.0.1 (ephemeral port) in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    server = _Quiet(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=10, interval=0.01, what="the test server starts")
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@dataclass
class FakePredictor:
    """A predictor stand-in: ttft = 10 + input/10 + 50·waiting + 20·running (ms), tpot = 10 + running;
    with ``?quantiles=0.99`` also ``*_quantiles_ms`` at twice those values.

    ``mode``: "ok" | "slow" (sleeps ``delay_s``) | "500" | "503" | "short" (one prediction too few) | "garbage".
    """

    mode: str = "ok"
    delay_s: float = 0.5
    calls: list[int] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/predict/bulk/strict")
        async def strict(request: Request) -> Response:
            rows = orjson.loads(await request.body())["requests"]
            self.calls.append(len(rows))
            if self.mode == "slow":
                await asyncio.sleep(self.delay_s)
            if self.mode in ("500", "503"):
                return Response(orjson.dumps({"detail": "Models not ready"}), status_code=int(self.mode))
            if self.mode == "garbage":
                return Response(b"{not json", media_type="application/json")
            preds = [self.predict(r) for r in rows]
            if request.query_params.get("quantiles") == "0.99":
                for p in preds:
                    p.update(ttft_quantiles_ms={"0.99": 2 * p["ttft_ms"]}, tpot_quantiles_ms={"0.99": 2 * p["tpot_ms"]})
            if self.mode == "short":
                preds = preds[:-1]
            body = {"predictions": preds, "total_requests": len(rows), "successful_predictions": len(rows),
                    "failed_predictions": 0, "processing_time_ms": 0.1}
            return Response(orjson.dumps(body), media_type="application/json")

        return app

    @staticmethod
    def predict(r: dict[str, Any]) -> dict[str, Any]:
        ttft = 10 + r["input_token_length"] / 10 + 50 * r["num_request_waiting"] + 20 * r["num_request_running"]
        return {"ttft_ms": float(ttft), "tpot_ms": float(10 + r["num_request_running"]),
                "predicted_at": "2026-01-01T00:00:00+00:00", "model_type": "xgboost",
                "objective_type": "quantile", "quantile": 0.9, "last_model_load": None}


@dataclass
class FakeTrainer:
    """Collects POST /add_training_data_bulk rows; ``status`` is what it answers (202, 422, 500)."""

    status: int = 202
    entries: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/add_training_data_bulk")
        async def add(request: Request) -> Response:
            rows = orjson.loads(await request.body())["entries"]
            if self.status == 202:
                self.entries.extend(rows)
                msg = {"message": f"Accepted {len(rows)} training samples."}
            else:
                msg = {"detail": "nope"}
            return Response(orjson.dumps(msg), status_code=self.status, media_type="application/json")

        return app


@dataclass
class FakePod:
    """Serves a vLLM-style /metrics text with settable values."""

    waiting: int = 0
    running: int = 0
    kv: float = 0.0
    status: int = 200

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/metrics")
        async def metrics() -> Response:
            text = (
                "# HELP vllm:num_requests_waiting Waiting.\n# TYPE vllm:num_requests_waiting gauge\n"
                f'vllm:num_requests_waiting{{model_name="m"}} {float(self.waiting)}\n'
                f'vllm:num_requests_running{{model_name="m"}} {float(self.running)}\n'
                f'vllm:kv_cache_usage_perc{{model_name="m"}} {self.kv}\n'
                'vllm:num_preemptions_total{model_name="m"} 3.0\n'
            )
            return Response(text, status_code=self.status, media_type="text/plain")

        return app


@pytest.fixture
def fake_predictor() -> Iterator[tuple[FakePredictor, str]]:
    fp = FakePredictor()
    with serve(fp.app()) as url:
        yield fp, url


@pytest.fixture
def fake_trainer() -> Iterator[tuple[FakeTrainer, str]]:
    ft = FakeTrainer()
    with serve(ft.app()) as url:
        yield ft, url


@pytest.fixture
def kit() -> Any:
    """The helpers above for test modules (conftest is not importable under --import-mode=importlib)."""
    import types

    return types.SimpleNamespace(serve=serve, free_port=free_port, FakePod=FakePod, FakePredictor=FakePredictor,
                                 FakeTrainer=FakeTrainer)
