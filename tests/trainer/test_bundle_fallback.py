"""A trainer restarted over a live bundle that no longer verifies serves the newest older one that does (instead
of starting over from the prior); the calibration bounds the predictor enforces are the trainer's clamp."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from shared import model
from shared.bundle import current_pointer, version_dir
from tests.trainer.conftest import mixed_rows, service_of
from trainer import calibrate


def test_restart_over_a_tampered_live_bundle_falls_back(client_factory: Callable[..., TestClient]) -> None:
    first = client_factory(min_samples_for_retrain=50)
    first.post("/add_training_data_bulk", json={"entries": mixed_rows(400)})
    assert service_of(first).loop.run_cycle() == 2
    root = service_of(first).publisher.root
    first.__exit__(None, None, None)
    path = version_dir(root, 2) / "ttft.ubj"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))

    second: Any = client_factory(min_samples_for_retrain=50)  # the second instance, same data dir
    assert second.get("/readyz").json()["bundle_version"] == 1
    pointer = current_pointer(root)
    assert pointer is not None and pointer[0] == 1 and pointer[1] is not None


def test_the_predictor_accepts_every_scale_the_trainers_clamp_allows() -> None:
    assert model.SCALE_BOUNDS[0] <= calibrate.SCALE_BOUNDS[0] < calibrate.SCALE_BOUNDS[1] <= model.SCALE_BOUNDS[1]
