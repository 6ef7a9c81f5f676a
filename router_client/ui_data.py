"""The router status page's data (the proxy's ``GET /ui/data``; ``GET /ui`` renders the same document).

``status`` is ``Router.status()`` unchanged (so the page's numbers are the ``/status`` numbers); next to
it: the pool classifier's thresholds, pool tuning's state when the router has it, the status sampled
over time (``status_history``), exact per-pool coverage since start, the newest requests' predicted
(at dispatch) vs measured latencies (``request_log``), per pool and model the physical base its predictors serve
now and at every bundle version seen (``bases``: the document ``shared.charts.coefficients`` renders; read by
``Router.models``) and, with P/D pools, what P/D routing did (``pd``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from router_client.request_log import TARGETS, RequestLog
from router_client.router import Router
from router_client.status_history import StatusHistory
from shared.charts.coefficients import base_history
from shared.timefmt import rfc3339

RECENT = 300


def _tuning(router: Router, status: dict[str, Any]) -> dict[str, Any] | None:
    """Pool tuning's state: in the status document when the router puts it there, else from the router's
    ``tuning_status()`` when it has one (None: no tuning configured)."""
    found = status.get("tuning") or status.get("pool_tuning")
    if isinstance(found, dict):
        return found
    getter: Callable[[], Any] | None = getattr(router, "tuning_status", None)
    doc = getter() if callable(getter) else None
    return doc if isinstance(doc, dict) else None


def _classifier(router: Router) -> dict[str, Any]:
    cfg = router.config.classifier
    contexts = {p.name: p.max_context for p in router.config.pools}
    return {"short_pool": cfg.short_pool, "long_pool": cfg.long_pool,
            "output_threshold_tokens": cfg.output_threshold_tokens,
            "total_threshold_tokens": cfg.total_threshold_tokens, "max_context": contexts}


def _recent(requests: RequestLog, pool: str, n: int) -> dict[str, Any]:
    records = [r for r in requests.recent(pool, n) if r.error is None]
    out: dict[str, Any] = {"n": len(records)}
    for t in TARGETS:
        pairs = [(getattr(r, f"predicted_{t}_ms"), getattr(r, f"raw_predicted_{t}_ms"), getattr(r, f"{t}_ms"))
                 for r in records]
        pairs = [p for p in pairs if p[0] is not None and p[2] is not None]
        out[t] = {"predicted": [p[0] for p in pairs], "raw": [p[1] for p in pairs], "measured": [p[2] for p in pairs]}
    return out


def _live(bundle: dict[str, Any], name: str) -> dict[str, Any] | None:
    """``name``'s base in ``bundle`` with the bundle's version (None: no such model, or the trees alone)."""
    base = bundle["models"].get(name, {}).get("base")
    return None if base is None else {"version": bundle["version"], **base}


def _bases(router: Router, pool: str) -> dict[str, Any]:
    """Per model of the pool's live bundle: its base now and at each version the router read (oldest first)."""
    status = router.models.status(pool)
    bundle = None if status is None else status["bundle"]
    if bundle is None:
        return {}
    history = router.models.history(pool)
    return {name: base_history(name, _live(bundle, name), [{"at": h["at"], "published": True, **base}
                                                           for h in history if (base := _live(h, name))])
            for name in bundle["models"]}


def ui_data(router: Router, history: StatusHistory, requests: RequestLog, recent: int = RECENT) -> dict[str, Any]:
    status = router.status()
    return {
        "generated_at": rfc3339(), "now": time.time(), "status": status,
        "classifier": _classifier(router), "tuning": _tuning(router, status),
        "totals": requests.totals(), "requests_logged": requests.last_seq,
        "recent": {p["name"]: _recent(requests, p["name"], recent) for p in status["pools"]},
        "bases": {p["name"]: _bases(router, p["name"]) for p in status["pools"]},
        "history": history.samples(), "history_every_s": history.every_s, "pd": status.get("pd"),
    }
