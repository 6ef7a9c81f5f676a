"""Deny by default, on the real apps: every route of the trainer, the predictor and the router proxy (the
app objects their servers run, routes enumerated here independently of ``shared.auth.served_routes``) is
declared exactly once in its access policy, at the level the trust tests expect; an undeclared route makes
both ``create_app`` and start-up fail, naming it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

import predictor.app
import router_client.proxy.app
import trainer.app
from predictor import access as predictor_access
from router_client.config import RouterConfig
from router_client.proxy import access as proxy_access
from shared.auth import AccessPolicy, Level, RouteAccessError, Rule
from shared.predictor_settings import PredictorSettings
from shared.trainer_settings import TrainerSettings
from trainer import access as trainer_access

W, R, P = Level.WRITE, Level.READ, Level.PUBLIC
TRAINER = {  # tests/trainer/test_trust_boundary.py: ingest and /flush write, model downloads read, the rest open
    ("POST", "/add_training_data_bulk"): W, ("POST", "/flush"): W,
    ("GET", "/model/export"): R, ("GET", "/model/{name}/download"): R, ("GET", "/model/{name}/xgb/json"): R,
    ("GET", "/bundle/manifest"): R, ("GET", "/bundle/v/{version}/{filename}"): R,
    ("POST", "/predict"): P, ("GET", "/healthz"): P, ("GET", "/readyz"): P, ("GET", "/"): P,
    ("GET", "/model/download/info"): P, ("GET", "/models/list"): P, ("GET", "/model/{name}/info"): P,
    ("GET", "/data/status"): P, ("GET", "/debug/prefix_distribution"): P, ("GET", "/metrics"): P,
    ("GET", "/ui"): P, ("GET", "/ui/data"): P, ("GET", "/openapi.json"): P,
}
PREDICTOR = {  # tests/predictor/test_trust_boundary.py: /reload writes, predictions stay open
    ("POST", "/reload"): W,
    ("POST", "/predict"): P, ("POST", "/predict/bulk"): P, ("POST", "/predict/bulk/strict"): P,
    ("GET", "/status"): P, ("GET", "/healthz"): P, ("GET", "/readyz"): P, ("GET", "/"): P, ("GET", "/metrics"): P,
    ("GET", "/openapi.json"): P,
}
PROXY = {  # no token at the proxy: a completion's Authorization header is the pod's to check
    ("POST", "/v1/completions"): P, ("POST", "/v1/chat/completions"): P, ("GET", "/v1/models"): P,
    ("GET", "/healthz"): P, ("GET", "/readyz"): P, ("GET", "/metrics"): P, ("GET", "/status"): P,
    ("GET", "/ui"): P, ("GET", "/ui/data"): P, ("GET", "/ui/requests"): P,
}
CONCRETE = {  # requests the trust tests send, as the guard sees them
    "trainer": {("GET", "/bundle/v/1/ttft.ubj"): R, ("GET", "/model/ttft/download"): R,
                ("GET", "/model/tpot/xgb/json"): R, ("GET", "/model/ttft/info"): P, ("HEAD", "/healthz"): P},
    "predictor": {("HEAD", "/status"): P},
    "proxy": {},
}


def proxy_config() -> RouterConfig:
    return RouterConfig.model_validate({"pools": [{"name": "short", "pods": ["http://127.0.0.1:9"],
                                                   "max_context": 4096, "predictor_urls": []}]})


def served(app: Starlette) -> Iterator[tuple[str, str]]:
    """(method, path) of every route, FastAPI's included routers walked; a GET route's HEAD is its GET."""
    def walk(routes: list[Any]) -> Iterator[tuple[str, str]]:
        for route in routes:
            if isinstance(route, APIRoute | Route):
                methods = set(route.methods or {"*"})
                yield from ((m, route.path) for m in methods - ({"HEAD"} if "GET" in methods else set()))
            elif hasattr(route, "original_router"):  # FastAPI's lazy wrapper of an included router
                assert route.include_context.prefix == ""
                yield from walk(route.original_router.routes)
            else:
                raise AssertionError(f"route of unknown kind: {route!r}")
    yield from walk(app.routes)
    yield from ((s.method, s.path) for s in getattr(app, "direct_routes", ()))


APPS: dict[str, tuple[Callable[[Path], Starlette], AccessPolicy, dict[tuple[str, str], Level]]] = {
    "trainer": (lambda tmp: trainer.app.create_app(TrainerSettings(data_dir=str(tmp)), run_loop=False),
                trainer_access.ACCESS, TRAINER),
    "predictor": (lambda tmp: predictor.app.create_app(PredictorSettings(bundle_dir=str(tmp))),
                  predictor_access.ACCESS, PREDICTOR),
    "proxy": (lambda tmp: router_client.proxy.app.create_app(proxy_config()), proxy_access.ACCESS, PROXY),
}


@pytest.mark.parametrize("name", APPS)
def test_every_route_is_declared_exactly_once_at_the_expected_level(name: str, tmp_path: Path) -> None:
    build, policy, expected = APPS[name]
    routes = list(served(build(tmp_path)))
    assert len(routes) == len(set(routes))
    assert set(routes) == set(expected), "the app's routes changed: declare them in the policy and here"
    for (method, path), level in expected.items():
        rules = [r for r in policy.rules if (r.method, r.path) == (method, path)]
        assert [r.level for r in rules] == [level], (method, path)
        assert policy.level_of(method, path) is level, (method, path)
    assert len(policy.rules) == len(expected)
    for (method, path), level in CONCRETE[name].items():
        assert policy.level_of(method, path) is level, (method, path)


async def _wipe(request: Request) -> Response:
    return Response(b"wiped")


def _extra_ui_router(original: Callable[..., APIRouter]) -> Callable[..., APIRouter]:
    def build(service: Any) -> APIRouter:
        router = original(service)
        router.add_api_route("/admin/wipe", _wipe, methods=["POST"])
        return router
    return build


def _add_route_in_factory(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Give app ``name`` one more route (``POST /admin/wipe``) inside its factory."""
    if name == "trainer":
        monkeypatch.setattr(trainer.app, "build_ui_router", _extra_ui_router(trainer.app.build_ui_router))
    elif name == "predictor":
        original = predictor.app.PredictorApp.routes
        monkeypatch.setattr(predictor.app.PredictorApp, "routes",
                            lambda self: [*original(self), Route("/admin/wipe", _wipe, methods=["POST"])])
    else:
        monkeypatch.setattr(router_client.proxy.app, "UI_ROUTES",
                            [*router_client.proxy.app.UI_ROUTES, Route("/admin/wipe", _wipe, methods=["POST"])])


@pytest.mark.parametrize("name", APPS)
def test_an_undeclared_route_fails_app_construction(name: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _add_route_in_factory(monkeypatch, name)
    with pytest.raises(RouteAccessError, match=r"refuses to start: route '_wipe' \(POST /admin/wipe\) is not "
                                               r"declared public, read or write"):
        APPS[name][0](tmp_path)


@pytest.mark.parametrize("name", APPS)
def test_a_route_added_after_construction_fails_start_up(name: str, tmp_path: Path) -> None:
    app = APPS[name][0](tmp_path)
    if isinstance(app, FastAPI):
        app.add_api_route("/admin/wipe", _wipe, methods=["POST"])
    else:
        app.router.routes.append(Route("/admin/wipe", _wipe, methods=["POST"]))
    with pytest.raises(RouteAccessError, match=r"route '_wipe' \(POST /admin/wipe\) is not declared"):
        with TestClient(app):
            pass


def test_the_proxy_refuses_a_route_it_cannot_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = [r for r in proxy_access.ACCESS.rules if r.path != "/ui/requests"]
    guarded = AccessPolicy([*rules, Rule("GET", "/ui/requests", Level.READ, "ui_requests")])
    monkeypatch.setattr(proxy_access, "ACCESS", guarded)
    with pytest.raises(RouteAccessError, match="GET /ui/requests declared read or write, but the proxy holds no token"):
        router_client.proxy.app.create_app(proxy_config())
