"""Threshold and pool-size tuning for a short/long pool pair, from what the router observes.

The design card's operators collect days of output lengths, per-pool preemptions and queue depth and
then move the total-token threshold and the pool sizes by hand. :class:`PoolTuner` does the same
arithmetic continuously (pure: no I/O, no clock, no metrics — the caller feeds observations and time):

- **Budgets** (every decision): prompt tokens, expected output and ``max_tokens``, kept for the last
  ``window`` decisions. A request is *eligible* for the short pool when prompt + ``max_tokens`` (or
  + expected output without a cap) fits the short pool's context and the expected output is within
  the output threshold — the classifier's context and output rules, which tuning never changes. Under
  a total threshold ``T`` an eligible request goes short iff prompt + expected output ≤ ``T``. Work of
  a request = prompt + expected output tokens; ``short_work_share(T)`` = work that goes short / all work.
- **Pressure** per pool over the last interval, unitless (≥ 1 = pressured): the largest of waiting
  requests per pod / ``queue_per_pod_high``, preemptions per 1k completions / ``preemptions_per_1k_high``
  and the share of decisions whose predicted TTFT exceeded the request's SLO (negative predicted
  headroom) / ``late_share_high``.
- **Threshold** (every ``interval_s``): when a pool is pressured and the pressures differ by more than
  ``hysteresis``, move ``step_work_share`` of the work away from the pressured pool: the new ``T`` is the
  budget at which ``short_work_share`` is the current share ± the step (raise ``T`` when the long pool
  is pressured, lower it when the short one is), at most ``max_step_tokens`` away and within
  ``[min_threshold_tokens, max_threshold_tokens]``. Otherwise the threshold holds: without pressure
  the router cannot tell which pool has spare capacity (their pods may differ in GPUs and limits).
- **Split** (same interval, same total pods): one pod towards the pressured pool under the same
  condition, else the current split; every pool keeps at least ``min_pods``. ``short_work_share`` at
  the recommended threshold is published alongside, for sizing by hand.

The router applies the threshold to its classifier when ``apply`` is set; a pool split cannot be
applied by a router (pods are deployments), it is published for an operator or an autoscaler.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from router_client.config import TuningConfig


@dataclass(frozen=True)
class Recommendation:
    """One tuning step: what the tuner recommends and why."""

    at: float
    threshold_tokens: int
    """Recommended total-token threshold (≥ the short context means: context rule only)."""
    previous_threshold_tokens: int
    split: dict[str, int]
    """Recommended pods per pool (same total as configured)."""
    short_share: float
    """Share of recent requests that would go short at the recommended threshold."""
    short_work_share: float
    pressure: dict[str, float]
    reason: str
    applied: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "threshold_tokens": self.threshold_tokens,
                "previous_threshold_tokens": self.previous_threshold_tokens, "split": dict(self.split),
                "short_share": round(self.short_share, 4), "short_work_share": round(self.short_work_share, 4),
                "pressure": {k: round(v, 3) for k, v in self.pressure.items()}, "reason": self.reason,
                "applied": self.applied}


@dataclass
class _PoolWindow:
    """What one pool showed during the current interval."""

    queue_sum: float = 0.0
    queue_samples: int = 0
    preemptions_first: int | None = None
    preemptions_last: int = 0
    completions: int = 0
    judged: int = 0
    late: int = 0

    def pressure(self, cfg: TuningConfig) -> float:
        queue = self.queue_sum / self.queue_samples if self.queue_samples else 0.0
        first = self.preemptions_last if self.preemptions_first is None else self.preemptions_first
        preempted = max(self.preemptions_last - first, 0)
        rate = 1000.0 * preempted / self.completions if self.completions else 0.0
        late = self.late / self.judged if self.judged else 0.0
        return max(queue / cfg.queue_per_pod_high, rate / cfg.preemptions_per_1k_high, late / cfg.late_share_high)


@dataclass
class _Budgets:
    prompt: deque[int]
    expected: deque[int]
    worst: deque[int]

    @classmethod
    def sized(cls, n: int) -> _Budgets:
        return cls(deque(maxlen=n), deque(maxlen=n), deque(maxlen=n))

    def __len__(self) -> int:
        return len(self.prompt)


@dataclass
class _Shares:
    """Eligible budgets sorted ascending with the cumulative share of requests and work going short."""

    totals: np.ndarray
    requests: np.ndarray
    work: np.ndarray

    def at(self, threshold: int) -> tuple[float, float]:
        """(request share, work share) that go short under ``threshold``."""
        n = int(np.searchsorted(self.totals, threshold, side="right"))
        return (float(self.requests[n - 1]), float(self.work[n - 1])) if n else (0.0, 0.0)

    def threshold_for(self, work_share: float, up: bool) -> int | None:
        """The smallest budget reaching ``work_share`` (up) / the largest staying at or below it (down)."""
        if up:
            n = int(np.searchsorted(self.work, work_share, side="left"))
            return int(self.totals[n]) if n < len(self.totals) else None
        n = int(np.searchsorted(self.work, work_share, side="right"))
        return int(self.totals[n - 1]) if n else None


class PoolTuner:
    """Recommends (and reports) the total-token threshold and the pod split of a short/long pair."""

    def __init__(self, cfg: TuningConfig, short: str, long: str, pods: dict[str, int], short_context: int,
                 output_threshold: int, threshold: int | None, now: float = 0.0) -> None:
        if short == long or short not in pods or long not in pods:
            raise ValueError(f"tuning needs two pools, got short={short!r} long={long!r} pools={sorted(pods)}")
        self.cfg = cfg
        self.short, self.long = short, long
        self.pods = dict(pods)
        self.short_context = short_context
        self.output_threshold = output_threshold
        self.max_threshold = min(cfg.max_threshold_tokens or short_context, short_context)
        self.min_threshold = min(cfg.min_threshold_tokens, self.max_threshold)
        self.threshold = self._clamp(short_context if threshold is None else threshold)
        self._budgets = _Budgets.sized(cfg.window)
        self._windows = {p: _PoolWindow() for p in pods}
        self._next_at = now + cfg.interval_s
        self.last: Recommendation | None = None
        self.updates = 0

    # -- observations ------------------------------------------------------------------------
    def observe_budget(self, prompt_tokens: int, expected_output: int, max_tokens: int | None) -> None:
        worst = max_tokens if max_tokens is not None and max_tokens > 0 else expected_output
        self._budgets.prompt.append(prompt_tokens)
        self._budgets.expected.append(expected_output)
        self._budgets.worst.append(worst)

    def observe_load(self, pool: str, waiting_per_pod: float, preemptions_total: int) -> None:
        """A sample of the pool's scraped queue depth (per pod) and its preemption counter (summed)."""
        w = self._windows.get(pool)
        if w is None:
            return
        w.queue_sum += waiting_per_pod
        w.queue_samples += 1
        if w.preemptions_first is None:
            w.preemptions_first = preemptions_total
        w.preemptions_last = preemptions_total

    def observe_headroom(self, pool: str, predicted_ttft_ms: float | None, slo_ttft_ms: float | None) -> None:
        """A decision's predicted TTFT against its SLO (skipped when either is missing)."""
        w = self._windows.get(pool)
        if w is None or predicted_ttft_ms is None or slo_ttft_ms is None:
            return
        w.judged += 1
        w.late += predicted_ttft_ms > slo_ttft_ms

    def observe_completion(self, pool: str) -> None:
        w = self._windows.get(pool)
        if w is not None:
            w.completions += 1

    # -- recommendation ----------------------------------------------------------------------
    def due(self, now: float) -> bool:
        return now >= self._next_at

    def update(self, now: float) -> Recommendation | None:
        """Once per interval: a new recommendation (None before enough budgets were seen)."""
        if not self.due(now):
            return None
        self._next_at = now + self.cfg.interval_s
        pressure = {p: w.pressure(self.cfg) for p, w in self._windows.items()}
        self._windows = {p: _PoolWindow() for p in self.pods}
        if len(self._budgets) < self.cfg.min_samples:
            return None
        shares = self._shares()
        direction = self._direction(pressure)
        target, reason = self._target(shares, direction)
        request_share, work_share = shares.at(target)
        rec = Recommendation(now, target, self.threshold, self._split(direction), request_share, work_share,
                             pressure, reason, applied=self.cfg.apply and target != self.threshold)
        if self.cfg.apply:
            self.threshold = target
        self.last = rec
        self.updates += 1
        return rec

    def _clamp(self, tokens: int) -> int:
        return int(min(max(tokens, self.min_threshold), self.max_threshold))

    def _shares(self) -> _Shares:
        b = self._budgets
        prompt = np.fromiter(b.prompt, dtype=np.int64, count=len(b))
        expected = np.fromiter(b.expected, dtype=np.int64, count=len(b))
        worst = np.fromiter(b.worst, dtype=np.int64, count=len(b))
        total = prompt + expected
        eligible = np.sort(total[(prompt + worst <= self.short_context) & (expected <= self.output_threshold)])
        work_all = float(total.sum()) or 1.0
        requests = np.arange(1, len(eligible) + 1, dtype=np.float64) / len(total)
        return _Shares(eligible, requests, np.cumsum(eligible, dtype=np.float64) / work_all)

    def _direction(self, pressure: dict[str, float]) -> int:
        """+1: relieve the long pool (raise T), -1: relieve the short pool, 0: hold."""
        p_short, p_long = pressure[self.short], pressure[self.long]
        if max(p_short, p_long) < 1.0 or abs(p_long - p_short) <= self.cfg.hysteresis:
            return 0
        return 1 if p_long > p_short else -1

    def _target(self, shares: _Shares, direction: int) -> tuple[int, str]:
        if direction == 0:
            return self.threshold, "hold: no pool pressured more than the other"
        _, current = shares.at(self.threshold)
        want = shares.threshold_for(current + direction * self.cfg.step_work_share, up=direction > 0)
        if want is None:
            want = self.max_threshold if direction > 0 else self.min_threshold
        step = self.cfg.max_step_tokens
        target = self._clamp(min(max(want, self.threshold - step), self.threshold + step))
        return target, "long pool pressured: raise" if direction > 0 else "short pool pressured: lower"

    def _split(self, direction: int) -> dict[str, int]:
        total = self.pods[self.short] + self.pods[self.long]
        n_short = self.pods[self.short] - direction
        n_short = min(max(n_short, self.cfg.min_pods), total - self.cfg.min_pods)
        return {self.short: int(n_short), self.long: int(total - n_short)}

    # -- introspection -----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "apply": self.cfg.apply, "threshold_tokens": self.threshold,
            "bounds": [self.min_threshold, self.max_threshold], "short_context": self.short_context,
            "pods": dict(self.pods), "budgets_seen": len(self._budgets), "updates": self.updates,
            "last": None if self.last is None else self.last.as_dict(),
        }

