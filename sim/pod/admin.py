"""``/admin/scenario``: read or change a running pod's condition (demos and tests).

``POST`` takes one scenario change as JSON (the keys of a TOML ``[[events]]`` table without
``at_fraction`` / ``at_s``; ``pod`` is optional and must name this pod) and applies it now;
``GET`` returns the current condition, the changes applied so far and the scheduled ones left.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request

from sim.engine.errors import ConfigError
from sim.pod.runtime import PodRuntime
from sim.scenario import PodChange, parse_change

WHERE = "request body"


def parse_admin_change(body: bytes, pod_id: str) -> PodChange:
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{WHERE}: invalid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{WHERE}: must be a JSON object")
    for key in ("at_s", "at_fraction"):
        if key in raw:
            raise ConfigError(f"{WHERE}: '{key}' is not accepted here (the change applies now)")
    if "pod" in raw and raw["pod"] != pod_id:
        raise ConfigError(f"{WHERE}: 'pod' = {raw['pod']!r} is not this pod ({pod_id!r})")
    return parse_change(raw, WHERE, frozenset({"pod"}))


def add_admin_routes(app: FastAPI, runtime: PodRuntime) -> None:
    @app.get("/admin/scenario")
    async def scenario_state() -> dict[str, Any]:
        return runtime.scenario_state()

    @app.post("/admin/scenario")
    async def scenario_change(request: Request) -> dict[str, Any]:
        change = parse_admin_change(await request.body(), runtime.cfg.pod_id)
        return runtime.apply_now(change)
