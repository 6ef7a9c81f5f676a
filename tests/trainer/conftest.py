"""Fixtures for trainer tests: settings in tmp_path, wire rows with a known latency law, apps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.trainer_settings import TrainerSettings
from trainer.app import create_app


def make_rows(n: int, seed: int = 0, kind: str = "ttft") -> list[dict[str, Any]]:
    """``n`` EPP-shaped rows; TTFT grows with effective input tokens, TPOT with running requests."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        inp = int(rng.integers(10, 4000))
        prefix = float(rng.choice([0.0, 0.3, 0.8]))
        waiting = int(rng.choice([0, 0, 1, 4, 12]))
        running = int(rng.integers(1, 40))
        kv = float(rng.uniform(0, 1))
        noise = float(np.exp(0.2 * rng.standard_normal()))
        row = {"kv_cache_percentage": kv, "input_token_length": inp, "num_request_waiting": waiting,
               "num_request_running": running, "num_tokens_generated": 0, "prefix_cache_score": prefix,
               "prefill_tokens_in_flight": int(rng.integers(0, 5000)), "decode_tokens_in_flight": 0,
               "timestamp": "2026-08-22T10:11:12.123456789+02:00", "actual_ttft_ms": 0.0, "actual_tpot_ms": 0.0}
        if kind == "ttft":
            row["actual_ttft_ms"] = (20 + 0.05 * inp * (1 - prefix) + 30 * waiting) * noise
        else:
            row["prefix_cache_score"] = 0.0
            row["actual_tpot_ms"] = (5 + 0.3 * running + 4 * kv) * noise
        out.append(row)
    return out


def mixed_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    return make_rows(n - n // 2, seed, "ttft") + make_rows(n // 2, seed + 1, "tpot")


@pytest.fixture
def settings_factory(tmp_path: Path) -> Callable[..., TrainerSettings]:
    def build(**overrides: Any) -> TrainerSettings:
        values: dict[str, Any] = {"data_dir": str(tmp_path / "data"), "retraining_interval_sec": 3600.0,
                                  "xgb_n_estimators": 20, "train_threads": 1}
        values.update(overrides)
        return TrainerSettings(**values)
    return build


@pytest.fixture
def client_factory(settings_factory: Callable[..., TrainerSettings]) -> Iterator[Callable[..., TestClient]]:
    """Start in-process apps (lifespan included) with the retrain loop off; cycles run on demand."""
    clients: list[TestClient] = []

    def start(**overrides: Any) -> TestClient:
        client = TestClient(create_app(settings_factory(**overrides), run_loop=False))
        client.__enter__()
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(client_factory: Callable[..., TestClient]) -> TestClient:
    return client_factory()


def service_of(client: TestClient) -> Any:
    return client.app.state.service  # type: ignore[attr-defined]


@pytest.fixture
def rows_of() -> Callable[..., list[dict[str, Any]]]:
    """``rows_of(n, seed, kind)`` → wire rows (kind "ttft" | "tpot" | "mixed")."""
    def build(n: int, seed: int = 0, kind: str = "mixed") -> list[dict[str, Any]]:
        return mixed_rows(n, seed) if kind == "mixed" else make_rows(n, seed, kind)
    return build
