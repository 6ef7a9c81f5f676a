"""Hot swap while a real server on loopback answers a steady stream of bulk calls."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from predictor.app import create_app
from shared.predictor_settings import PredictorSettings
from tests.predictor.conftest import Built, build_bundle, dir_settings, random_rows
from tests.predictor.trainer_stub import TrainerStub
from tests.predictor.uvicorn_thread import serving
from tests.procs import free_port

ROWS = random_rows(40, seed=5)


class Load:
    """An httpx client in a thread posting /predict/bulk/strict back to back."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[tuple[int, str | None, list[float]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10.0) as client:
            while not self.stop.is_set():
                r = client.post("/predict/bulk/strict", json={"requests": ROWS})
                preds = r.json().get("predictions", []) if r.status_code == 200 else []
                self.results.append((r.status_code, r.headers.get("x-model-version"),
                                     [p["ttft_ms"] for p in preds]))

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _served_version(url: str) -> int | None:
    bundle = httpx.get(f"{url}/status", timeout=5).json()["bundle"]
    return None if bundle is None else int(bundle["version"])


def _publish_three_under_load(url: str, root: Path, first: Built) -> None:
    built = {1: first}
    with Load(url) as load:
        for v in (2, 3, 4):
            time.sleep(0.3)
            built[v] = build_bundle(root, v, trees=10 + v, depth=4)
            deadline = time.monotonic() + 10
            while _served_version(url) != v:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        time.sleep(0.3)
    statuses = [status for status, _, _ in load.results]
    assert len(statuses) > 20 and set(statuses) == {200}, "zero failed requests"
    versions = [int(v) for _, v, _ in load.results if v is not None]
    assert len(versions) == len(load.results) and versions == sorted(versions) and set(versions) == {1, 2, 3, 4}
    expected = {v: b.expected(ROWS)["ttft"].tolist() for v, b in built.items()}
    for _, version, ttft in load.results:  # the header names the model that actually answered
        assert version is not None
        np.testing.assert_array_equal(ttft, expected[int(version)])


def test_swap_under_load_bundle_dir(bundle_root: Path) -> None:
    first = build_bundle(bundle_root, 1, trees=11, depth=4)
    app = create_app(dir_settings(bundle_root, model_sync_interval_sec=0.05))
    with serving(app) as url:
        _publish_three_under_load(url, bundle_root, first)


@pytest.mark.parametrize("long_poll", [True, False])
def test_swap_under_load_http_pull(bundle_root: Path, tmp_path: Path, long_poll: bool) -> None:
    first = build_bundle(bundle_root, 1, trees=11, depth=4)
    stub = TrainerStub(bundle_root, free_port()).start()
    try:
        settings = PredictorSettings(training_server_url=stub.url, local_model_dir=str(tmp_path / "local"),
                                     model_sync_interval_sec=600 if long_poll else 0.1, long_poll=long_poll,
                                     long_poll_wait_sec=5.0)
        with serving(create_app(settings)) as url:
            _publish_three_under_load(url, bundle_root, first)
    finally:
        stub.stop()
