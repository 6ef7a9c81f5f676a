"""The proxy's status page routes and the background sampler behind its plots.

``GET /ui`` (HTML, reloads itself every ``?refresh=`` seconds, default 5, 0 = never), ``GET /ui/data``
(the page's data as JSON), ``GET /ui/requests?after=<seq>&limit=<n>`` (finished requests with their
predictions at dispatch, router-measured latencies and wall-clock stamps, oldest first: a client pages
through them with the last ``seq`` it saw). :class:`StatusSampler` records ``Router.status()`` every
``every_s`` seconds into a bounded :class:`StatusHistory` while the proxy runs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from router_client.proxy.errors import InvalidRequest
from router_client.proxy.http_errors import json_response
from router_client.request_log import RequestLog
from router_client.router import Router
from router_client.status_history import StatusHistory
from router_client.ui_data import RECENT, ui_data
from router_client.ui_page import render
from shared.jsonbody import dumps

MAX_REQUESTS = 10_000


@dataclass
class UiState:
    router: Router
    history: StatusHistory
    requests: RequestLog


class StatusSampler:
    """Samples the router's status into ``history`` every ``history.every_s`` seconds (a task on the loop;
    one status document costs well under a millisecond for tens of pods)."""

    def __init__(self, state: UiState) -> None:
        self._state = state
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="status-sampler")

    async def _run(self) -> None:
        while True:
            self._state.history.sample(self._state.router.status(), time.time())
            await asyncio.sleep(self._state.history.every_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"query parameter {name} must be an integer, got {raw!r}", param=name) from None
    if not low <= value <= high:
        raise InvalidRequest(f"query parameter {name} must be within [{low}, {high}], got {value}", param=name)
    return value


def _ui_state(request: Request) -> UiState:
    state: UiState = request.app.state.proxy.ui
    return state


async def ui(request: Request) -> Response:
    refresh = _int(request, "refresh", 5, 0, 3600)
    recent = _int(request, "recent", RECENT, 0, 5000)
    s = _ui_state(request)
    return HTMLResponse(render(ui_data(s.router, s.history, s.requests, recent), refresh))


async def ui_data_route(request: Request) -> Response:
    recent = _int(request, "recent", RECENT, 0, 5000)
    s = _ui_state(request)
    return Response(dumps(ui_data(s.router, s.history, s.requests, recent)), media_type="application/json")


async def ui_requests(request: Request) -> Response:
    after = _int(request, "after", 0, 0, 2**62)
    limit = _int(request, "limit", 1000, 1, MAX_REQUESTS)
    log = _ui_state(request).requests
    records = log.after(after, limit)
    return json_response(200, {"last_seq": log.last_seq, "requests": [r.as_dict() for r in records]})


ROUTES = [Route("/ui", ui, methods=["GET"]), Route("/ui/data", ui_data_route, methods=["GET"]),
          Route("/ui/requests", ui_requests, methods=["GET"])]
