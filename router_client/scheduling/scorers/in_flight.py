"""in-flight-scorer: prefer the pod with the fewest requests the router has in flight on it.

score = (max − running) / (max − min) of the router-side in-flight counts (min-max normalised like
``queue-scorer``: the least busy pod scores 1, the busiest 0); all equal → 1 for every candidate. With a small
weight next to ``queue-scorer`` or ``kv-cache-utilization-scorer`` it is their tie-break (the replay's
``least-queue`` / ``least-kv``: fewest in flight among equal queues / KV usage), which matters on pods that
rarely queue, where the scraped waiting count is 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from router_client.scheduling.contracts import Candidate, SchedulingRequest
from router_client.scheduling.scorers.minmax import fewest_best


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InFlight:
    name = "in-flight-scorer"

    def __init__(self, params: Params) -> None:
        self.p = params

    def score(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[float]:
        return fewest_best([c.running for c in candidates])
