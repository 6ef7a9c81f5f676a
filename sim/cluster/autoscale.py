"""A KEDA-like per-pool autoscaler for the replay, scaling on ``vllm:num_requests_waiting``.

Per pool, every ``poll_interval_s`` (KEDA's ``pollingInterval``) the scaler reads the pool's scraped
waiting requests (summed over its pods) and computes, as the HPA does for an ``AverageValue`` target,
``desired = ceil(waiting / target_waiting_per_pod)`` clamped to ``[min_pods, max_pods]``, with the
HPA's 10 % tolerance around the current count. Scale-up applies at once (HPA default: stabilization
0 s), at most ``max(4 pods, 100 %)`` per poll; scale-down takes the largest desired count of the last
``scale_down_stabilization_s`` (HPA default 300 s).

- A new pod is paid from the moment it is requested and serves after ``startup_s`` (node, image and
  weights ready: vLLM loading 141 GB of Llama-3-70B weights is minutes, not seconds).
- A removed pod (the one with the fewest requests in flight) takes no new requests, finishes what it
  holds (draining) and is paid until its last request completes; it restarts with an empty cache.

GPU time = Σ over pods of the time they were starting, serving or draining × their TP degree. The
pool starts with ``initial`` pods serving; the cluster must hold ``max_pods`` pods of the pool (the
rest start off).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sim.cluster.simulation import SimPod
from sim.engine.errors import ConfigError

OFF, STARTING, SERVING, DRAINING = "off", "starting", "serving", "draining"
TOLERANCE = 0.1
"""HPA: no change while desired/current is within 10 % of 1."""
EVENT_LIMIT = 2000


@dataclass(frozen=True)
class AutoscaleConfig:
    poll_interval_s: float = 30.0
    """KEDA ``pollingInterval`` default."""
    target_waiting_per_pod: float = 2.0
    """Trigger threshold: waiting requests per pod the pool is scaled for."""
    startup_s: float = 180.0
    """Request to serving (weights of a 70B model loaded from local disk / cache)."""
    scale_down_stabilization_s: float = 300.0
    """HPA ``behavior.scaleDown.stabilizationWindowSeconds`` default."""
    min_pods: int = 1

    def __post_init__(self) -> None:
        for key in ("poll_interval_s", "target_waiting_per_pod"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"autoscale: {key!r} must be > 0, got {getattr(self, key)!r}")
        for key in ("startup_s", "scale_down_stabilization_s"):
            if getattr(self, key) < 0:
                raise ConfigError(f"autoscale: {key!r} must be >= 0, got {getattr(self, key)!r}")
        if self.min_pods < 1:
            raise ConfigError(f"autoscale: 'min_pods' must be >= 1, got {self.min_pods!r}")


@dataclass
class _Member:
    pod: SimPod
    state: str
    since: float
    ready_at: float = 0.0


@dataclass
class _PoolScaler:
    name: str
    members: list[_Member]
    recent: deque[tuple[float, int]] = field(default_factory=deque)
    gpu_s: float = 0.0
    ups: int = 0
    downs: int = 0
    peak: int = 0
    events: list[dict[str, object]] = field(default_factory=list)
    """``{"at_s", "pod", "state"}`` for every change of a pod's state (bounded by ``EVENT_LIMIT``)."""

    def note(self, at: float, m: _Member) -> None:
        if len(self.events) < EVENT_LIMIT:
            self.events.append({"at_s": round(at, 3), "pod": m.pod.pod_id, "state": m.state})

    def count(self, *states: str) -> int:
        return sum(1 for m in self.members if m.state in states)


class Autoscaler:
    """One scaler per pool named in ``initial`` (pools not named keep all their pods)."""

    def __init__(self, cfg: AutoscaleConfig, initial: Mapping[str, int]) -> None:
        self.cfg = cfg
        self.initial = dict(initial)
        self.pools: dict[str, _PoolScaler] = {}
        self._next_poll = 0.0

    def attach(self, pods: Sequence[SimPod], start_s: float) -> None:
        for name, n in self.initial.items():
            mine = [p for p in pods if p.pool == name]
            if not mine:
                raise ConfigError(f"autoscale: no pool {name!r} in the cluster")
            if not self.cfg.min_pods <= n <= len(mine):
                raise ConfigError(f"autoscale: pool {name!r} starts with {n} pods, outside "
                                  f"[min_pods={self.cfg.min_pods}, max={len(mine)}]")
            members = []
            for i, pod in enumerate(mine):
                on = i < n
                pod.routable = on
                if not on:
                    pod.engine.fail(start_s)
                members.append(_Member(pod, SERVING if on else OFF, start_s))
            self.pools[name] = _PoolScaler(name, members, peak=n)
        self._next_poll = start_s + self.cfg.poll_interval_s

    def tick(self, now: float) -> None:
        for pool in self.pools.values():
            self._progress(pool, now)
        while now >= self._next_poll:
            at = self._next_poll
            self._next_poll += self.cfg.poll_interval_s
            for pool in self.pools.values():
                self._poll(pool, at)

    def finish(self, end_s: float) -> dict[str, object]:
        out: dict[str, object] = {}
        for pool in self.pools.values():
            for m in pool.members:
                if m.state != OFF:
                    pool.gpu_s += max(end_s - m.since, 0.0) * m.pod.tp
                    m.since = end_s
            out[pool.name] = {"gpu_hours": round(pool.gpu_s / 3600.0, 4), "scale_ups": pool.ups,
                              "scale_downs": pool.downs, "peak_pods": pool.peak,
                              "final_pods": pool.count(STARTING, SERVING), "events": pool.events}
        return out

    # -- internals ---------------------------------------------------------------------------
    def _progress(self, pool: _PoolScaler, now: float) -> None:
        for m in pool.members:
            if m.state == STARTING and now >= m.ready_at:
                m.pod.engine.restore(m.ready_at)
                m.pod.routable = True
                m.state = SERVING
                pool.note(now, m)
            elif m.state == DRAINING and not m.pod.active and not m.pod.engine.has_work():
                end = max(m.pod.engine.clock, m.since)
                pool.gpu_s += (end - m.since) * m.pod.tp
                m.pod.engine.fail(end)
                m.state, m.since = OFF, end
                pool.note(end, m)

    def _poll(self, pool: _PoolScaler, at: float) -> None:
        current = pool.count(STARTING, SERVING)
        serving = [m.pod for m in pool.members if m.state == SERVING]
        waiting = sum(p.scraped.num_requests_waiting for p in serving)
        desired = math.ceil(waiting / self.cfg.target_waiting_per_pod)
        if current and abs(desired / current - 1.0) <= TOLERANCE:
            desired = current
        desired = min(max(desired, self.cfg.min_pods), len(pool.members))
        pool.recent.append((at, desired))
        while pool.recent and pool.recent[0][0] < at - self.cfg.scale_down_stabilization_s:
            pool.recent.popleft()
        if desired > current:
            self._scale_up(pool, at, min(desired, current + max(4, current)))
        else:
            target = max(d for _, d in pool.recent)
            if target < current:
                self._scale_down(pool, at, current - target)

    def _scale_up(self, pool: _PoolScaler, at: float, target: int) -> None:
        for m in pool.members:
            if pool.count(STARTING, SERVING) >= target:
                break
            if m.state == OFF:
                m.state, m.since, m.ready_at = STARTING, at, at + self.cfg.startup_s
                pool.ups += 1
                pool.note(at, m)
        pool.peak = max(pool.peak, pool.count(STARTING, SERVING))

    def _scale_down(self, pool: _PoolScaler, at: float, n: int) -> None:
        """Not-yet-ready pods go first (as a ReplicaSet deletes them first), then the least busy."""
        starting = [m for m in pool.members if m.state == STARTING]
        serving = sorted((m for m in pool.members if m.state == SERVING), key=lambda m: len(m.pod.active))
        for m in (starting + serving)[:n]:
            pool.downs += 1
            if m.state == STARTING:
                pool.gpu_s += (at - m.since) * m.pod.tp
                m.state, m.since = OFF, at
                pool.note(at, m)
                continue
            m.pod.routable = False
            m.state = DRAINING
            pool.note(at, m)
