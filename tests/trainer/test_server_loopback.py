"""A real uvicorn server on 127.0.0.1 (ephemeral port): ingest → retrain → publish → metrics → pull API."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from shared.bundle import verify_bundle
from shared.model import load_bundle
from shared.trainer_settings import TrainerSettings
from tests.waiting import wait_for
from trainer.app import create_app

servers: list[Any] = []


@pytest.fixture
def server(settings_factory: Callable[..., TrainerSettings]) -> Iterator[str]:
    settings = settings_factory(retraining_interval_sec=0.5, min_samples_for_retrain=100)
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_for(lambda: srv.started and srv.servers, timeout=20, what="the trainer starts")
    port = srv.servers[0].sockets[0].getsockname()[1]
    servers.append(config.app)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(15)


def test_ingest_retrain_publish_pull(server: str, rows_of: Callable[..., list]) -> None:
    with httpx.Client(base_url=server, timeout=30) as c:
        assert c.get("/readyz").status_code == 200
        first = c.get("/bundle/manifest")
        assert first.status_code == 200 and first.headers["etag"] == '"v1"' and first.headers["x-bundle-version"] == "1"
        assert c.get("/bundle/manifest", headers={"If-None-Match": '"v1"'}).status_code == 304

        started = time.monotonic()
        r = c.post("/add_training_data_bulk", json={"entries": rows_of(3000)})
        assert r.status_code == 202
        held = c.get("/bundle/manifest", params={"wait_s": 10}, headers={"If-None-Match": '"v1"'})
        assert held.status_code == 200 and held.headers["etag"] == '"v2"'
        assert time.monotonic() - started < 10

        version = int(held.headers["x-bundle-version"])
        bundle = verify_bundle(held.content, lambda name: c.get(f"/bundle/v/{version}/{name}").content, None)
        assert load_bundle(bundle).version == 2
        assert c.get(f"/bundle/v/{version}/nope.ubj").status_code == 404
        assert c.get("/bundle/v/99/ttft.ubj").json() == {"detail": "File ttft.ubj of bundle v99 not found"}

        metrics = c.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "trainer_live_bundle_version 2.0" in metrics.text
        assert "trainer_retrain_duration_seconds_count" in metrics.text
        info = c.get("/model/ttft/info").json()
        assert f"/v{version:06d}/" in info["path"]

        t0 = time.monotonic()
        timeout = c.get("/bundle/manifest", params={"wait_s": 0.5}, headers={"If-None-Match": '"v2"'})
        assert timeout.status_code == 304 and 0.4 < time.monotonic() - t0 < 5
        status = c.get("/data/status").json()
        assert status["durable"]["rows"] == 3000 and status["last_retrain"] is not None


def test_held_long_poll_released_on_shutdown(server: str) -> None:
    """``LiveBundle.close()`` (called from the CLI's exit handler) answers held long-polls with 304 at once."""
    app = servers[-1]
    result: dict[str, Any] = {}

    def hold() -> None:
        t0 = time.monotonic()
        r = httpx.get(f"{server}/bundle/manifest", params={"wait_s": 25}, headers={"If-None-Match": '"v1"'},
                      timeout=40)
        result.update(status=r.status_code, seconds=time.monotonic() - t0)

    thread = threading.Thread(target=hold)
    thread.start()
    time.sleep(0.5)
    app.state.service.live.close()
    thread.join(10)
    assert result["status"] == 304 and result["seconds"] < 5
