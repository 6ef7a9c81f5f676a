"""The router's status over time, for the status page: one compact sample of ``Router.status()`` every
``every_s`` seconds (the proxy samples it in the background), the newest ``size`` kept.

Per sample and pool: sheds and fallbacks by reason (cumulative counts), the pool-wide predicted and
measured means per target, and per pod its traffic share, routed count, correction factors and the drift
series' means and coverage. Pure data (no clock, no I/O): the caller passes the document and the time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

TARGETS = ("ttft", "tpot")
_SERIES_KEYS = ("predicted_mean_ms", "measured_mean_ms", "coverage", "model_coverage", "alarm")


def _series(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: doc.get(k) for k in _SERIES_KEYS} if doc.get("pairs") else {}


def compact(status: Mapping[str, Any], at: float) -> dict[str, Any]:
    """The parts of one ``/status`` document that the page plots over time."""
    pools = {}
    for pool in status.get("pools", []):
        pods = {pod["url"]: {"share": pod.get("share"), "routed": pod.get("routed"),
                             **{t: {"correction": pod.get(t, {}).get("correction"), **_series(pod.get(t, {}))}
                                for t in TARGETS}}
                for pod in pool.get("pods", [])}
        pools[pool["name"]] = {"shed": dict(pool.get("shed", {})), "fallbacks": dict(pool.get("fallbacks", {})),
                               **{t: _series(pool.get(t, {})) for t in TARGETS}, "pods": pods}
    return {"at": at, "pools": pools}


class StatusHistory:
    def __init__(self, every_s: float = 2.0, size: int = 450) -> None:
        self.every_s = every_s
        self._samples: deque[dict[str, Any]] = deque(maxlen=size)

    def sample(self, status: Mapping[str, Any], at: float) -> None:
        self._samples.append(compact(status, at))

    def samples(self) -> list[dict[str, Any]]:
        return list(self._samples)
