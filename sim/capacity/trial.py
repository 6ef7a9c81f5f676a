"""One replay of a candidate configuration, reduced to what the search needs, and the memo of pool points.

The pool classifier decides short vs long from the request alone (prompt, ``max_tokens``, output
history), so with two pools each pool serves the same requests whatever the other pool's size: one
trial at (short pods, long pods) measures one *point* of each pool's curve, and any combination of
measured points can be judged by merging their per-request TTFTs (the search confirms its final
combination with a run of its own). Requests no pool took (shed before routing) are kept apart and
count as misses in every merge.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sim.capacity.guard import UNROUTED, MissGuard
from sim.capacity.slo import Slo, Verdict, judge
from sim.capacity.space import SearchSpace, Threshold
from sim.capacity.workload import Window
from sim.cluster.config import ClusterConfig
from sim.cluster.simulation import Controller
from sim.replay.runner import run_policy

Counts = tuple[tuple[int, int], ...]
"""(tensor-parallel degree, pods) per pool, in pool order."""


@dataclass(frozen=True)
class PoolPoint:
    """What one pool showed at (tp, pods) in one window."""

    ttft_ms: np.ndarray
    """Per judged request routed to the pool (NaN: not completed)."""
    preemptions: int
    failed: bool = False
    """The replay stopped early because this pool alone missed more than the window may (no TTFTs kept)."""


@dataclass
class TrialResult:
    window: str
    threshold: Threshold
    counts: Counts
    gpus: int
    points: dict[str, PoolPoint]
    unrouted: np.ndarray
    span_s: float
    wall_s: float
    verdict: Verdict
    extra: dict[str, object] = field(default_factory=dict)


Log = Callable[[str], None]
FAILED = Verdict(0, 0, 0, float("inf"), 0.0, False)
"""The verdict of any combination holding a failed point."""


class TrialRunner:
    """Runs trials and remembers every pool point (and each window's unrouted requests)."""

    def __init__(self, space: SearchSpace, slo: Slo, seed: int, log: Log) -> None:
        self.space = space
        self.slo = slo
        self.seed = seed
        self.log = log
        self.points: dict[tuple[str, Threshold, str, int, int], PoolPoint] = {}
        self.unrouted: dict[tuple[str, Threshold], np.ndarray] = {}
        self.trials: list[dict[str, object]] = []
        self.results: dict[tuple[str, Threshold, Counts], TrialResult] = {}

    def measured(self, window: Window, threshold: Threshold, counts: Counts) -> TrialResult | None:
        """The trial of exactly this configuration, if one ran."""
        return self.results.get((window.name, threshold, counts))

    def point(self, window: Window, threshold: Threshold, pool: str, tp: int, n: int) -> PoolPoint | None:
        return self.points.get((window.name, threshold, pool, tp, n))

    def run(self, window: Window, threshold: Threshold, counts: Counts, stage: str,
            controller: Controller | None = None) -> TrialResult:
        space = self.space
        cfg = ClusterConfig(pools=space.pool_specs(threshold, counts))
        guard = MissGuard(self.slo, window.judged_from, window.judged) if controller is None else None
        t0 = time.perf_counter()
        summary, result = run_policy(cfg, window.items, space.sim_policy, self.seed,
                                     options=space.policy_options(threshold), slo_ttft_ms=self.slo.ttft_ms,
                                     controller=controller, stop=guard)
        wall = time.perf_counter() - t0
        if guard is not None and guard.failed:
            return self._stopped(window, threshold, counts, guard, result.span_s, wall, stage)
        judged = result.records[window.judged_from:]
        ttft = np.array([np.nan if r.ttft_ms is None else r.ttft_ms for r in judged], dtype=np.float64)
        pools = np.array([r.pool or "" for r in judged])
        preempt = np.array([r.preemptions for r in judged], dtype=np.int64)
        points = {}
        for shape, (tp, n) in zip(space.pools, counts, strict=True):
            mask = pools == shape.name
            points[shape.name] = PoolPoint(ttft[mask], int(preempt[mask].sum()))
            if controller is None:
                self.points[(window.name, threshold, shape.name, tp, n)] = points[shape.name]
        unrouted = ttft[pools == ""]
        self.unrouted.setdefault((window.name, threshold), unrouted)
        verdict = judge(ttft, self.slo)
        gpus = sum(tp * n for tp, n in counts)
        res = TrialResult(window.name, threshold, counts, gpus, points, unrouted, result.span_s, wall, verdict,
                          dict(result.extra))
        if "policy_status" in summary:
            res.extra["policy_status"] = summary["policy_status"]
        if controller is None:
            self.results[(window.name, threshold, counts)] = res
        self._record(res, stage)
        return res

    def _stopped(self, window: Window, threshold: Threshold, counts: Counts, guard: MissGuard, span_s: float,
                 wall: float, stage: str) -> TrialResult:
        """A replay the guard ended: the pools that failed alone are recorded as failed points."""
        points = {}
        for shape, (tp, n) in zip(self.space.pools, counts, strict=True):
            if shape.name in guard.failed or UNROUTED in guard.failed:
                points[shape.name] = PoolPoint(np.empty(0), 0, failed=True)
                self.points[(window.name, threshold, shape.name, tp, n)] = points[shape.name]
        misses = sum(guard.misses.values())
        verdict = Verdict(window.judged, 0, 0, float("inf"), 1.0 - misses / max(window.judged, 1), False)
        res = TrialResult(window.name, threshold, counts, sum(tp * n for tp, n in counts), points, np.empty(0),
                          span_s, wall, verdict, {"stopped": True})
        self._record(res, stage)
        return res

    def _record(self, res: TrialResult, stage: str) -> None:
        v = res.verdict
        pods = ", ".join(f"{s.name} {n}x TP{tp}" for s, (tp, n) in zip(self.space.pools, res.counts, strict=True))
        where = "" if self.space.family == "single" else f" [{res.threshold.label}]"
        p99 = f"{v.p99_ttft_ms:.0f}" if np.isfinite(v.p99_ttft_ms) else "inf"
        if res.extra.get("stopped"):
            failed = ", ".join(sorted(n for n, p in res.points.items() if p.failed)) or "unrouted"
            outcome = f"miss: stopped early, {failed} over the miss budget"
        else:
            outcome = f"P99 TTFT {p99} ms, attainment {v.attainment:.4f} -> {'ok' if v.ok else 'miss'}"
        self.log(f"{stage:<8} {res.window:<6} {pods}{where}: {res.gpus} GPUs, {outcome} ({res.wall_s:.1f} s)")
        self.trials.append({"stage": stage, "window": res.window, "threshold": res.threshold.as_dict(),
                            "pools": [{"name": s.name, "tp": tp, "pods": n}
                                      for s, (tp, n) in zip(self.space.pools, res.counts, strict=True)],
                            "gpus": res.gpus, **v.as_dict(), "stopped_early": bool(res.extra.get("stopped")),
                            "wall_s": round(res.wall_s, 2)})


def merged_verdict(runner: TrialRunner, window: Window, threshold: Threshold, counts: Counts,
                   alone: int | None = None) -> Verdict | None:
    """Judge a combination from memoised pool points (None if a point is missing). ``alone=i``: only pool
    ``i``'s misses count (the other pools' requests count as served in time) — a lower bound test."""
    pools = runner.space.pools
    counted = [i for i in range(len(pools)) if alone is None or i == alone]
    points = {}
    for i in counted:
        tp, n = counts[i]
        point = runner.point(window, threshold, pools[i].name, tp, n)
        if point is None:
            return None
        if point.failed:
            return FAILED
        points[i] = point
    parts = []
    for i, shape in enumerate(pools):
        if i in points:
            parts.append(points[i].ttft_ms)
            continue
        other = _any_point(runner, window, threshold, shape.name)
        if other is None:
            return None
        parts.append(np.zeros(len(other.ttft_ms)))
    unrouted = runner.unrouted.get((window.name, threshold))
    if unrouted is None:
        return None
    parts.append(unrouted)
    return judge(np.concatenate(parts), runner.slo)


def _any_point(runner: TrialRunner, window: Window, threshold: Threshold, pool: str) -> PoolPoint | None:
    """A complete point of ``pool`` (its request count is the same at every size)."""
    for (w, th, p, _, _), point in runner.points.items():
        if w == window.name and th == threshold and p == pool and not point.failed:
            return point
    return None
