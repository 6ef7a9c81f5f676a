"""The replay's policy names as router scheduler configs, run by the proxy itself.

``predicted-latency`` is the router's default scheduler with the pool's predictor; every other policy is a
heuristic profile of the router's own plugins with no predictor: the router then has no predictions and runs
the *fallback* scorers, so each heuristic lists its scorers as both ``scorers`` and ``fallback_scorers``, has
no exploration and no anti-starvation, and is exactly itself:

* ``round-robin``: the ``round-robin`` picker (replay: pods in turn).
* ``least-queue``: queue-scorer + 0.001 × in-flight-scorer, max picker (replay: fewest scraped waiting, then
  fewest in flight).
* ``least-kv``: kv-cache-utilization-scorer + 0.001 × in-flight-scorer, max (replay: lowest scraped KV usage,
  then fewest in flight).
* ``load-prefix``: 2 × queue + 2 × kv + 3 × prefix-cache-scorer, max (``sim/policies/load_prefix.py``: the same).
* ``prefix-affinity``: the prefix-affinity filter (min_score 0.25, keep_ratio 1, max_queue_gap 4) + least-queue
  (replay, ``sim/cluster/builtin.py``: the best prefix score if ≥ 0.25 and within a load gap of 4, else
  least-queue; the same choices on two pods, on more they differ only when the best-prefix pod is over the gap).

The in-flight tie-break (weight 0.001) never outweighs a score difference of the primary scorer on these pools
(min-max normalised queues differ by ≥ 1 / (max − min) ≫ 0.001).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RouterPolicy:
    name: str
    scheduler: dict[str, Any] | None
    """The router config's ``scheduler`` section (None: the router's default)."""
    predictor: bool
    """The pool gets a predictor (``predictor_urls``); without one every decision is a fallback decision."""


TIE_BREAK = {"name": "in-flight-scorer", "weight": 0.001}


def _heuristic(scorers: list[dict[str, Any]], picker: str = "max",
               filters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"filters": filters or [], "scorers": scorers, "fallback_scorers": scorers, "picker": {"name": picker},
            "exploration": 0.0, "min_share": 0.0}


POLICIES: dict[str, RouterPolicy] = {p.name: p for p in (
    RouterPolicy("round-robin", _heuristic([], picker="round-robin"), predictor=False),
    RouterPolicy("least-queue", _heuristic([{"name": "queue-scorer"}, TIE_BREAK]), predictor=False),
    RouterPolicy("least-kv", _heuristic([{"name": "kv-cache-utilization-scorer"}, TIE_BREAK]), predictor=False),
    RouterPolicy("load-prefix", _heuristic([{"name": "queue-scorer", "weight": 2.0},
                                            {"name": "kv-cache-utilization-scorer", "weight": 2.0},
                                            {"name": "prefix-cache-scorer", "weight": 3.0}]), predictor=False),
    RouterPolicy("prefix-affinity", _heuristic(
        [{"name": "queue-scorer"}, TIE_BREAK],
        filters=[{"name": "prefix-affinity", "params": {"min_score": 0.25, "keep_ratio": 1.0, "max_queue_gap": 4}}]),
        predictor=False),
    RouterPolicy("predicted-latency", None, predictor=True),
)}


def router_overrides(policy: RouterPolicy, seed: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Top-level router-config keys for ``demo.stack.StackSpec.router``."""
    scheduler = dict(policy.scheduler or {})
    scheduler["seed"] = seed
    return {"scheduler": scheduler, **(extra or {})}
