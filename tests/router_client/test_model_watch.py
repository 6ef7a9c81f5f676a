"""The router learns each pool's live models from a real predictor's ``/status`` (``router_client.model_watch``):
bundle version, candidate and physical base per model, every version kept; failed reads are counted, shown and
never raised; the status page shows the coefficients (``Router.status`` → ``ui_data`` → ``ui_page``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Response

from predictor.app import create_app
from router_client.config import ModelStatusConfig, RouterConfig
from router_client.model_watch import ModelWatch, StatusUnreadable, parse_bundle
from router_client.request_log import RequestLog
from router_client.router import Router
from router_client.status_history import StatusHistory
from router_client.ui_data import ui_data
from router_client.ui_page import render
from tests.predictor.conftest import build_bundle, dir_settings
from tests.predictor.uvicorn_thread import serving
from tests.procs import free_port
from tests.waiting import wait_for_async

BASE_V1 = {"terms": ["1", "num_request_running"], "coefficients": [20.0, 0.5], "rows": 600, "source": "fit"}
BASE_V2 = {"terms": ["1", "num_request_running"], "coefficients": [24.0, 0.25], "rows": 900, "source": "fit"}


def _named(base: dict[str, Any]) -> dict[str, Any]:
    return {"coefficients": dict(zip(base["terms"], base["coefficients"], strict=True)), "rows": base["rows"],
            "source": base["source"]}


@pytest.fixture
def predictor(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real predictor on loopback serving bundle v1 (candidate depth3, base ``BASE_V1``) from ``tmp_path``."""
    build_bundle(tmp_path, 1, entry_patch={"candidate": "depth3", "base": BASE_V1})
    with serving(create_app(dir_settings(tmp_path, model_sync_interval_sec=0.2))) as url:
        yield tmp_path, url


async def _until_serving(http: httpx.AsyncClient, url: str, version: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (await http.get(url + "/status")).json()["bundle"]["version"] != version:
        assert time.monotonic() < deadline, f"the predictor did not load v{version}"
        await asyncio.sleep(0.05)


def test_reads_each_pools_bundle_and_bases_and_keeps_every_version(predictor: tuple[Path, str]) -> None:
    root, url = predictor
    dead = f"http://127.0.0.1:{free_port()}"

    async def main() -> tuple[dict[str, Any] | None, list[dict[str, Any]], Any, Any]:
        watch = ModelWatch({"short": [dead, url], "long": []}, ModelStatusConfig(interval_s=3600, timeout_s=2))
        async with httpx.AsyncClient() as http:
            watch.start(http)  # the first read runs at once
            await wait_for_async(lambda: (watch.status("short") or {}).get("bundle"), what="the first read")
            build_bundle(root, 2, entry_patch={"candidate": "base", "base": BASE_V2})
            await _until_serving(http, url, 2)
            await watch.read_all()
            await watch.read_all()  # the same version again: not a new point
            await watch.stop()
        return watch.status("short"), watch.history("short"), watch.status("long"), watch.history("long")

    status, history, long_status, long_history = asyncio.run(main())
    assert status is not None and status["url"] == url and status["errors"] == 0 and status["last_error"] is None
    bundle = status["bundle"]
    assert bundle["version"] == 2 and bundle["prior"] is False
    assert bundle["models"] == {n: {"candidate": "base", "base": _named(BASE_V2)} for n in ("ttft", "tpot")}
    assert [h["version"] for h in history] == [1, 2] and history[0]["at"] <= history[1]["at"]
    assert history[0]["models"]["tpot"] == {"candidate": "depth3", "base": _named(BASE_V1)}
    assert long_status is None and long_history == []  # a pool without predictors is not read


class Switch:
    """Answers ``/status`` with ``body``: a real predictor's, then something else."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/status")
        async def status() -> Response:
            return Response(self.body, media_type="application/json")

        return app


def test_failed_reads_are_counted_shown_and_keep_the_last_models(predictor: tuple[Path, str], kit: Any) -> None:
    switch = Switch(httpx.get(predictor[1] + "/status", timeout=10).content)
    dead = f"http://127.0.0.1:{free_port()}"

    async def main(url: str) -> list[dict[str, Any]]:
        watch = ModelWatch({"short": [url, dead]}, ModelStatusConfig(interval_s=3600, timeout_s=1))
        seen = []
        async with httpx.AsyncClient() as http:
            watch.start(http)
            await wait_for_async(lambda: (watch.status("short") or {}).get("bundle"), what="the first read")
            await watch.stop()
            seen.append(dict(watch.status("short") or {}))
            switch.body = b'{"bundle": {"version": "seven"}}'
            await watch.read_all()  # junk, then no answer: one failed read
            seen.append(dict(watch.status("short") or {}))
            switch.body = (await http.get(predictor[1] + "/status")).content
            await watch.read_all()
            seen.append(dict(watch.status("short") or {}))
        return seen

    with kit.serve(switch.app()) as switch_url:
        good, failed, again = asyncio.run(main(switch_url))
    assert good["errors"] == 0 and good["bundle"]["version"] == 1 and good["url"] == switch_url
    assert failed["errors"] == 1 and failed["bundle"] == good["bundle"]  # the last models are kept
    assert "bundle version 'seven'" in failed["last_error"] and f"{dead}: ConnectError" in failed["last_error"]
    assert again["errors"] == 1 and again["last_error"] is None and again["read_at"] >= good["read_at"]


@pytest.mark.parametrize(("body", "problem"), [
    (b"<html>", "not a predictor status"),
    (b'{"is_ready": true}', "KeyError"),
    (b'{"bundle": {"version": 3, "models": {"ttft": {"base": {"terms": ["1"], "coefficients": [1, 2]}}}}}',
     "base is not terms"),
    (b'{"bundle": {"version": 3, "models": {"ttft": {"base": {"terms": ["1"], "coefficients": [-1.0]}}}}}',
     "base is not terms"),
    (b'{"bundle": {"version": 3, "models": {"ttft": {"base": {"terms": ["1"], "coefficients": [true]}}}}}',
     "base is not terms"),
    (b'{"bundle": {"version": 3, "models": {"ttft": {"base": {"terms": ["1"], "coefficients": [1], "rows": "x"}}}}}',
     "rows / source"),
    (b'{"bundle": {"version": 3, "models": {"ttft": "depth6"}}}', "AttributeError"),
])
def test_a_body_that_is_not_a_predictor_status_is_refused(body: bytes, problem: str) -> None:
    with pytest.raises(StatusUnreadable, match=problem):
        parse_bundle(body)


def test_a_predictor_without_a_bundle_or_bases_reads_as_such() -> None:
    assert parse_bundle(b'{"bundle": null, "is_ready": false}') is None
    bundle = parse_bundle(orjson.dumps({"bundle": {"version": 4, "models": {"ttft": {"features": []}}}}))
    assert bundle == {"version": 4, "prior": False, "created_at": None,
                      "models": {"ttft": {"candidate": "", "base": None}}}


def test_the_router_status_and_page_show_each_pools_base(predictor: tuple[Path, str], kit: Any) -> None:
    _, url = predictor
    pod = kit.FakePod()
    with kit.serve(pod.app()) as pod_url:
        config = RouterConfig.model_validate({
            "pools": [{"name": "short", "pods": [pod_url], "predictor_urls": [url]},
                      {"name": "long", "pods": [pod_url]}],
            "model_status": {"interval_s": 0.2}})

        async def main() -> dict[str, Any]:
            router = Router(config)
            await router.start()
            try:
                await wait_for_async(lambda: router.status()["pools"][0]["model"]["bundle"], what="the first read")
                return ui_data(router, StatusHistory(), RequestLog())
            finally:
                await router.aclose()

        doc = asyncio.run(main())
    short, long = doc["status"]["pools"]
    assert short["model"]["bundle"]["models"]["ttft"] == {"candidate": "depth3", "base": _named(BASE_V1)}
    assert long["model"] is None and doc["bases"]["long"] == {}
    ttft = doc["bases"]["short"]["ttft"]
    assert ttft["terms"] == ["1", "num_request_running"] and ttft["live"] == {"version": 1, **_named(BASE_V1)}
    assert [(p["version"], p["published"]) for p in ttft["series"]] == [(1, True)]
    html = render(doc, 5)
    for name in ("ttft", "tpot"):
        assert f'data-key="bases.short.{name}.live.coefficients.1" data-value="20.0">20<' in html
        assert f'data-key="bases.short.{name}.live.coefficients.num_request_running" data-value="0.5">0.5<' in html
        for label in ("constant", "num_request_running"):
            assert f'aria-label="short {name.upper()} base: {label}"' in html
    assert 'data-key="status.pools.0.model.bundle.version" data-value="1"' in html and "ms/request" in html
    assert "pool long: live models" not in html
