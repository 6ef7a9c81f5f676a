"""The HTTP pull source against a real tiny trainer stub on loopback (ETag, 304, long-poll, retries, down)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from predictor.app import create_app
from shared.predictor_settings import PredictorSettings
from tests.predictor.conftest import build_bundle
from tests.predictor.test_refusals import ROW, tampered, truncated
from tests.predictor.trainer_stub import TrainerStub
from tests.procs import free_port
from tests.waiting import wait_for


@pytest.fixture
def stub(bundle_root: Path) -> Iterator[TrainerStub]:
    trainer = TrainerStub(bundle_root, free_port())
    yield trainer
    trainer.stop()


def pull_settings(stub: TrainerStub, tmp_path: Path, **kw: Any) -> PredictorSettings:
    values: dict[str, Any] = {"training_server_url": stub.url, "local_model_dir": str(tmp_path / "local"),
                              "model_sync_interval_sec": 60.0, "long_poll": False, "http_timeout": 5.0}
    values.update(kw)
    return PredictorSettings(**values)


def test_pull_verify_swap_and_etag(stub: TrainerStub, bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    stub.start()
    with TestClient(create_app(pull_settings(stub, tmp_path))) as c:
        status = c.get("/status").json()
        assert status["is_ready"] and status["bundle"]["version"] == 1
        assert status["training_server_url"] == stub.url and status["sync"]["mode"] == "http_pull"
        assert (tmp_path / "local" / "v000001" / "ttft.ubj").is_file()
        body = c.post("/reload").json()
        assert (body["synced"], body["swapped"], body["version"]) == (False, False, 1)
        build_bundle(bundle_root, 2)
        body = c.post("/reload").json()
        assert (body["synced"], body["swapped"], body["version"]) == (True, True, 2)
        assert c.post("/predict", json=ROW).headers["x-model-version"] == "2"
    assert "/bundle/v/2/ttft.ubj" in stub.requests and "/bundle/v/2/tpot.ubj" in stub.requests


def test_periodic_sync_uses_if_none_match(stub: TrainerStub, bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    stub.start()
    with TestClient(create_app(pull_settings(stub, tmp_path, model_sync_interval_sec=0.05))) as c:
        wait_for(lambda: stub.requests.count("/bundle/manifest") >= 5)
        assert c.get("/status").json()["bundle"]["version"] == 1
        assert stub.requests.count("/bundle/v/1/ttft.ubj") == 1  # 304s: no re-download
        build_bundle(bundle_root, 2)
        wait_for(lambda: c.get("/status").json()["bundle"]["version"] == 2)


def test_long_poll_serves_new_bundle_without_waiting_for_the_poll(stub: TrainerStub, bundle_root: Path,
                                                                  tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    stub.start()
    settings = pull_settings(stub, tmp_path, long_poll=True, long_poll_wait_sec=5.0, model_sync_interval_sec=600)
    with TestClient(create_app(settings)) as c:
        wait_for(lambda: any("wait_s=5" in r for r in stub.requests))
        build_bundle(bundle_root, 2)
        wait_for(lambda: c.get("/status").json()["bundle"]["version"] == 2, timeout=8.0)


def test_retries_on_503(stub: TrainerStub, bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    stub.start()
    stub.fail_next = [503, 502, 504]
    with TestClient(create_app(pull_settings(stub, tmp_path, download_retries=3))) as c:
        assert c.get("/status").json()["bundle"]["version"] == 1
        build_bundle(bundle_root, 2)
        stub.fail_next = [503, 503]
        assert c.post("/reload").json()["version"] == 2
        stub.fail_next = [503] * 4  # 1 try + 3 retries
        body = c.post("/reload").json()
        assert body["synced"] is False and "503" in body["error"]
        assert c.get("/status").json()["sync"]["last_error"]


@pytest.mark.parametrize("bad", [tampered, truncated])
def test_bad_bundle_over_http_refused(stub: TrainerStub, bundle_root: Path, tmp_path: Path,
                                      bad: Callable[[Path, int], None]) -> None:
    build_bundle(bundle_root, 1)
    stub.start()
    with TestClient(create_app(pull_settings(stub, tmp_path))) as c:
        bad(bundle_root, 2)
        body = c.post("/reload").json()
        assert body["swapped"] is False and "sha256" in body["error"]
        assert c.post("/predict", json=ROW).headers["x-model-version"] == "1"
        assert c.get("/status").json()["refused"][0]["version"] == 2
        assert "predictor_bundles_refused_total 1.0" in c.get("/metrics").text
        assert not (tmp_path / "local" / "v000002").exists()


def test_wrong_hmac_over_http_refused(stub: TrainerStub, bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1, key=b"k")
    stub.start()
    with TestClient(create_app(pull_settings(stub, tmp_path, bundle_hmac_key="k"))) as c:
        build_bundle(bundle_root, 2, key=b"not-k")
        assert "HMAC" in c.post("/reload").json()["error"]
        assert c.get("/status").json()["bundle"]["version"] == 1


def test_trainer_down_at_start_up(stub: TrainerStub, bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    with TestClient(create_app(pull_settings(stub, tmp_path, model_sync_interval_sec=0.1))) as c:
        assert c.get("/readyz").status_code == 503
        assert c.post("/predict/bulk/strict", json={"requests": [ROW]}).status_code == 503
        assert c.post("/reload").json()["synced"] is False
        status = c.get("/status").json()
        assert status["is_ready"] is False and status["sync"]["last_error"]
        assert c.get("/healthz").status_code == 200
        stub.start()
        wait_for(lambda: c.get("/readyz").status_code == 200)
        assert c.post("/predict/bulk/strict", json={"requests": [ROW]}).headers["x-model-version"] == "1"


def _staleness(c: TestClient) -> float:
    line = next(x for x in c.get("/metrics").text.splitlines() if x.startswith("predictor_seconds_since_last_sync "))
    return float(line.split()[-1])


def test_trainer_down_mid_run(stub: TrainerStub, bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    stub.start()
    settings = pull_settings(stub, tmp_path, model_sync_interval_sec=0.1, long_poll=True, long_poll_wait_sec=1.0)
    with TestClient(create_app(settings)) as c:
        assert _staleness(c) < 1.0
        stub.stop()
        wait_for(lambda: _staleness(c) > 1.0)
        r = c.post("/predict/bulk/strict", json={"requests": [ROW] * 5})
        assert r.status_code == 200 and r.headers["x-model-version"] == "1"
        assert c.get("/readyz").status_code == 200
        status = c.get("/status").json()
        assert status["sync"]["failures_total"] > 0 and status["refused_total"] == 0
        build_bundle(bundle_root, 2)
        stub.start()
        wait_for(lambda: c.get("/status").json()["bundle"]["version"] == 2)
        assert _staleness(c) < 1.0
