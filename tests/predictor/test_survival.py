"""A predictor that survives its trainer: local bundles at start-up, fallback past bad versions, manifest integrity
without an HMAC key, and sync failures in the log (rate-limited)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from predictor.app import create_app
from predictor.ratelog import RateLimitedLog
from shared.bundle import CURRENT, MANIFEST, MANIFEST_SHA, current_pointer, set_current, version_dir
from tests.predictor.conftest import build_bundle, dir_settings
from tests.predictor.test_pull import pull_settings
from tests.predictor.test_refusals import ROW, tampered
from tests.predictor.trainer_stub import TrainerStub
from tests.procs import free_port, predictor, trainer
from tests.trainer.conftest import mixed_rows
from tests.waiting import wait_for


def test_restart_with_the_trainer_down_serves_the_newest_local_bundle(tmp_path: Path) -> None:
    """Trainer #1 publishes, the predictor pulls and keeps it; trainer #1 goes away; the restarted predictor is
    ready from its local copy; trainer #2 (same data dir, same port) comes back and a new publish is pulled."""
    port = free_port()
    env = {"LATENCY_MIN_SAMPLES_FOR_RETRAIN": "100", "LATENCY_RETRAINING_INTERVAL_SEC": "0.5"}
    with trainer(tmp_path / "data", env, port=port) as (trainer_url, _):
        httpx.post(f"{trainer_url}/add_training_data_bulk", json={"entries": mixed_rows(400)}, timeout=30)
        wait_for(lambda: httpx.get(f"{trainer_url}/readyz", timeout=5).json()["bundle_version"] >= 2, timeout=60)
        with predictor(tmp_path, ["--training-url", trainer_url]) as (url, _):
            pulled = wait_for(lambda: httpx.get(f"{url}/status", timeout=5).json()["bundle"]["version"] >= 2)
            version = httpx.get(f"{url}/status", timeout=5).json()["bundle"]["version"]
    assert pulled and (tmp_path / "local" / f"v{version:06d}" / MANIFEST_SHA).is_file()

    with predictor(tmp_path, ["--training-url", trainer_url]) as (url, _):  # trainer down
        status = httpx.get(f"{url}/status", timeout=5).json()
        assert status["is_ready"] and status["bundle"]["version"] == version
        assert status["bundle"]["source"].endswith("(local copy)")
        assert httpx.post(f"{url}/predict", json=ROW, timeout=5).headers["x-model-version"] == str(version)
        assert "Connect" in wait_for(lambda: httpx.get(f"{url}/status", timeout=5).json()["sync"]["last_error"])

        with trainer(tmp_path / "data", {"LATENCY_RETRAINING_INTERVAL_SEC": "0.5"}, port=port) as (again, _):
            httpx.post(f"{again}/add_training_data_bulk", json={"entries": mixed_rows(200, seed=5)}, timeout=30)
            newer = wait_for(lambda: httpx.get(f"{again}/readyz", timeout=5).json()["bundle_version"] > version,
                             timeout=60)
            assert newer
            wait_for(lambda: httpx.get(f"{url}/status", timeout=5).json()["bundle"]["version"] > version, timeout=30)
            assert httpx.get(f"{url}/status", timeout=5).json()["sync"]["last_error"] is None


def test_bad_current_falls_back_to_the_newest_valid_version(bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    build_bundle(bundle_root, 2)
    tampered(bundle_root, 3)  # CURRENT → v3, whose ttft.ubj no longer matches its hash
    with predictor(tmp_path, ["--bundle-dir", str(bundle_root)]) as (url, _):
        status = httpx.get(f"{url}/status", timeout=5).json()
        assert status["bundle"]["version"] == 2
        assert [(r["version"], "sha256" in r["reason"]) for r in status["refused"]] == [(3, True)]
        build_bundle(bundle_root, 4)
        wait_for(lambda: httpx.get(f"{url}/status", timeout=5).json()["bundle"]["version"] == 4)
        assert len(httpx.get(f"{url}/status", timeout=5).json()["refused"]) == 1  # v3 was not retried


def _edit_manifest(path: Path, scale: float) -> None:
    manifest = orjson.loads((path / MANIFEST).read_bytes())
    for entry in manifest["models"].values():
        entry["calibration"]["scale"] *= scale
    (path / MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))


def test_manifest_edited_in_place_is_refused(bundle_root: Path) -> None:
    build_bundle(bundle_root, 1)
    built = build_bundle(bundle_root, 2, calibration=(0.5, 0.0))
    _edit_manifest(built.path, 2.0)  # scale 1.0: plausible, but CURRENT and the sidecar know the old sha256
    assert current_pointer(bundle_root) is not None and current_pointer(bundle_root)[1] is not None  # type: ignore[index]
    with TestClient(create_app(dir_settings(bundle_root))) as c:
        status = c.get("/status").json()
        assert status["bundle"]["version"] == 1
        assert "edited in place" in status["refused"][0]["reason"]


def test_calibration_out_of_bounds_is_refused_even_without_recorded_hashes(bundle_root: Path) -> None:
    build_bundle(bundle_root, 1)
    built = build_bundle(bundle_root, 2)
    _edit_manifest(built.path, 40.0)  # TTFT ×40: beyond the accepted 16
    (built.path / MANIFEST_SHA).unlink()
    set_current(bundle_root, 2)  # an old-style plain "2": no sha256 to compare with
    assert (bundle_root / CURRENT).read_text() == "2"
    with TestClient(create_app(dir_settings(bundle_root))) as c:
        status = c.get("/status").json()
        assert status["bundle"]["version"] == 1
        assert "calibration scale 40" in status["refused"][0]["reason"]


def test_pulled_manifest_must_match_the_announced_sha256(bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    stub = TrainerStub(bundle_root, free_port())
    stub.manifest_sha = "0" * 64
    stub.start()
    try:
        with TestClient(create_app(pull_settings(stub, tmp_path))) as c:
            status = c.get("/status").json()
            assert not status["is_ready"] and "X-Manifest-SHA256" in status["refused"][0]["reason"]
            stub.manifest_sha = None  # the stub then sends the right one
            build_bundle(bundle_root, 2)
            assert c.post("/reload").json()["version"] == 2
    finally:
        stub.stop()


def test_local_copy_edited_on_disk_is_skipped(bundle_root: Path, tmp_path: Path) -> None:
    build_bundle(bundle_root, 1)
    build_bundle(bundle_root, 2)
    stub = TrainerStub(bundle_root, free_port()).start()
    settings = pull_settings(stub, tmp_path, keep_local_bundles=2)
    try:
        with TestClient(create_app(settings)) as c:
            assert c.get("/status").json()["bundle"]["version"] == 2
        shutil.copytree(version_dir(bundle_root, 1), version_dir(tmp_path / "local", 1))
    finally:
        stub.stop()
    _edit_manifest(version_dir(tmp_path / "local", 2), 3.0)
    with TestClient(create_app(settings)) as c:  # trainer down: v2's local copy is refused, v1 serves
        status = c.get("/status").json()
        assert status["bundle"]["version"] == 1 and status["refused"][0]["version"] == 2


def test_sync_failures_are_logged_rate_limited(bundle_root: Path, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    dead = TrainerStub(bundle_root, free_port())  # never started
    settings = pull_settings(dead, tmp_path, model_sync_interval_sec=0.05)
    with caplog.at_level(logging.WARNING, logger="predictor.holder"), TestClient(create_app(settings)) as c:
        wait_for(lambda: c.get("/status").json()["sync"]["failures_total"] >= 10)
    lines = [r.getMessage() for r in caplog.records if "bundle sync failed" in r.getMessage()]
    assert len(lines) == 1 and "ConnectError" in lines[0]


def test_rate_limited_log_counts_what_it_suppressed(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("t"), interval_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        assert limited("failed: %s", "a") and limited("failed: %s", "b")
        assert not limited("failed: %s", "a")
        now[0] = 61.0
        assert limited("failed: %s", "a")
    assert [r.getMessage() for r in caplog.records] == ["failed: a", "failed: b",
                                                       "failed: a (1 more since the last line)"]
