"""Ends a replay as soon as its verdict is certain to be a miss (overloaded candidates are the slowest
to simulate: their queues grow without bound).

A request that has no first token ``ttft_ms`` after its arrival is a certain miss, and so is a shed
one. Once a pool's certain misses plus those of requests no pool took exceed what the whole judged
window may miss (``(1 − attainment) × judged requests``), that pool fails even if every other pool
were perfect: the replay stops and the pool's point is recorded as failed (see
:mod:`sim.capacity.trial`). Only judged requests (after the warm-up) count.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.capacity.slo import Slo
from sim.cluster.simulation import RequestRecord

UNROUTED = ""


class MissGuard:
    def __init__(self, slo: Slo, judged_from: int, judged: int) -> None:
        self.ttft_s = slo.ttft_ms / 1e3
        self.allowed = (1.0 - slo.attainment) * judged + 1e-9
        self._next = judged_from
        self.misses: dict[str, int] = {}
        self.failed: set[str] = set()

    def __call__(self, now: float, records: Sequence[RequestRecord]) -> bool:
        horizon = now - self.ttft_s
        while self._next < len(records) and records[self._next].arrival_s <= horizon:
            r = records[self._next]
            self._next += 1
            if r.first_token_s is not None and r.first_token_s - r.arrival_s <= self.ttft_s:
                continue
            key = r.pool or UNROUTED
            self.misses[key] = self.misses.get(key, 0) + 1
            unrouted = self.misses.get(UNROUTED, 0)
            for pool, n in self.misses.items():
                if n + (unrouted if pool != UNROUTED else 0) > self.allowed:
                    self.failed.add(pool)
        return bool(self.failed)
