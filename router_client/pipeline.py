"""The synchronous decision core shared by the async :class:`~router_client.router.Router` and the
replay policies: admission → balance overrides → filter/score/pick, per pool."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from router_client.admission import shed_reason
from router_client.balance import Balancer
from router_client.config import SchedulerConfig, SloConfig
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from router_client.scheduling.engine import Scheduler
from router_client.scheduling.registry import PluginRegistry


@dataclass(frozen=True)
class Outcome:
    index: int | None
    """Chosen candidate (None: shed / no endpoint)."""
    reason: str
    candidates: Sequence[Candidate]

    @property
    def row(self) -> int:
        return self.candidates[self.index].row if self.index is not None else -1

    @property
    def best(self) -> Candidate | None:
        """The candidate with the lowest predicted TTFT (for shed decisions)."""
        known = [c for c in self.candidates if c.predicted_ttft_ms is not None]
        return min(known, key=lambda c: c.predicted_ttft_ms or 0.0) if known else None


class DecisionCore:
    def __init__(self, scheduler: SchedulerConfig, slo: SloConfig, pools: Mapping[str, Sequence[str]],
                 registry: PluginRegistry | None = None) -> None:
        self.scheduler = Scheduler.from_config(scheduler, registry)
        self.slo = slo
        self.rng = random.Random(scheduler.seed)
        self.balancer = Balancer({k: list(v) for k, v in pools.items()}, scheduler.exploration,
                                 scheduler.min_share, scheduler.share_window)

    def decide(self, pool: str, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Outcome:
        if not candidates:
            return Outcome(None, "no_endpoint", candidates)
        shed = shed_reason(request, candidates)
        if shed is not None:
            return Outcome(None, f"shed:{shed}", candidates)
        forced = self.balancer.override(pool, candidates, self.rng)
        if forced is not None:
            index, reason = forced
        else:
            result = self.scheduler.schedule(request, candidates, self.rng)
            if result.index is None:
                return Outcome(None, result.reason, candidates)
            index, reason = result.index, result.reason
        self.balancer.record(pool, candidates[index].pod)
        return Outcome(index, reason, candidates)
