"""Drift detection on live predictions: rolling coverage and pinball loss per pod and per pool, and an alarm.

For every served (prediction, actual) pair the monitor updates two series — the pod's and its pool's
(pod ``"all"``) — per target (``ttft``, ``tpot``). Each series holds exponentially time-weighted means
(half-life ``half_life_s``): coverage (share of actuals ≤ prediction) and pinball loss at the model's
quantile, both for the prediction the router acted on (after the per-pod correction) and for the raw
model, so a drifting pod (raw coverage low, corrected fine) can be told from a drifting model (both
low), plus the mean predicted and measured latency and the MAPE.

Alarm: once a series has ``min_pairs`` of effective weight, coverage of the acted-on prediction
outside ``[coverage_low, coverage_high]`` for ``alarm_after_s`` raises it (one WARNING line); back
inside for ``clear_after_s`` clears it (one INFO line). Clock-free: every call takes ``now``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass

from router_client.config import DriftConfig

log = logging.getLogger(__name__)

POOL_WIDE = "all"
"""The ``pod`` label of a pool's aggregate series."""


def pinball(predicted: float, actual: float, quantile: float) -> float:
    """Quantile (pinball) loss of one prediction, in the unit of the latencies (ms)."""
    diff = actual - predicted
    return quantile * diff if diff >= 0 else (quantile - 1.0) * diff


@dataclass(frozen=True)
class DriftState:
    """One series as metrics and ``/status`` show it (means are time-weighted)."""

    pairs: int
    weight: float
    coverage: float
    model_coverage: float
    pinball_ms: float
    model_pinball_ms: float
    mape: float
    predicted_ms: float
    actual_ms: float
    alarm: bool
    outside_since: float | None


class _Series:
    __slots__ = ("pairs", "at", "sums", "outside_since", "inside_since", "alarm")

    # sums: weight, covered, model covered, pinball, model pinball, ape, predicted, actual
    def __init__(self) -> None:
        self.pairs = 0
        self.at = -math.inf
        self.sums = [0.0] * 8
        self.outside_since: float | None = None
        self.inside_since: float | None = None
        self.alarm = False

    def add(self, now: float, half_life_s: float, values: tuple[float, ...]) -> None:
        decay = math.exp2(-max(now - self.at, 0.0) / half_life_s) if self.pairs else 0.0
        self.sums = [s * decay + v for s, v in zip(self.sums, (1.0, *values), strict=True)]
        self.at = max(now, self.at)
        self.pairs += 1

    def mean(self, j: int) -> float:
        return self.sums[j] / self.sums[0] if self.sums[0] > 0 else 0.0

    def state(self) -> DriftState:
        return DriftState(self.pairs, self.sums[0], self.mean(1), self.mean(2), self.mean(3), self.mean(4),
                          self.mean(5), self.mean(6), self.mean(7), self.alarm, self.outside_since)


class DriftMonitor:
    def __init__(self, config: DriftConfig, quantile: float) -> None:
        self.config = config
        self.quantile = quantile
        self._series: dict[tuple[str, str, str], _Series] = {}

    def observe(self, pool: str, pod: str, target: str, predicted_ms: float | None, raw_predicted_ms: float | None,
                actual_ms: float | None, now: float) -> None:
        """One served pair: ``predicted_ms`` is what the router acted on, ``raw_predicted_ms`` the model's."""
        if predicted_ms is None or actual_ms is None or actual_ms <= 0 or not math.isfinite(actual_ms):
            return
        raw = predicted_ms if raw_predicted_ms is None else raw_predicted_ms
        q = self.quantile
        values = (float(actual_ms <= predicted_ms), float(actual_ms <= raw), pinball(predicted_ms, actual_ms, q),
                  pinball(raw, actual_ms, q), abs(predicted_ms - actual_ms) / actual_ms, predicted_ms, actual_ms)
        for key in ((pool, pod, target), (pool, POOL_WIDE, target)):
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series()
            series.add(now, self.config.half_life_s, values)
            self._evaluate(key, series, now)

    def _evaluate(self, key: tuple[str, str, str], s: _Series, now: float) -> None:
        cfg = self.config
        if s.sums[0] < cfg.min_pairs:
            return
        coverage = s.mean(1)
        if coverage < cfg.coverage_low or coverage > cfg.coverage_high:
            s.inside_since = None
            if s.outside_since is None:
                s.outside_since = now
            if not s.alarm and now - s.outside_since >= cfg.alarm_after_s:
                s.alarm = True
                log.warning("drift alarm: pool=%s pod=%s target=%s coverage %.3f outside [%.2f, %.2f] for %.0f s "
                            "(raw model coverage %.3f, pinball %.1f ms, measured mean %.1f ms vs predicted %.1f ms)",
                            *key, coverage, cfg.coverage_low, cfg.coverage_high, now - s.outside_since, s.mean(2),
                            s.mean(3), s.mean(7), s.mean(6))
            return
        s.outside_since = None
        if not s.alarm:
            return
        if s.inside_since is None:
            s.inside_since = now
        if now - s.inside_since >= cfg.clear_after_s:
            s.alarm = False
            s.inside_since = None
            log.info("drift alarm cleared: pool=%s pod=%s target=%s coverage %.3f back inside [%.2f, %.2f] "
                     "(raw model coverage %.3f)", *key, coverage, cfg.coverage_low, cfg.coverage_high, s.mean(2))

    def state(self, pool: str, pod: str, target: str) -> DriftState | None:
        series = self._series.get((pool, pod, target))
        return None if series is None else series.state()

    def keys(self) -> Iterator[tuple[str, str, str]]:
        """Every (pool, pod, target) with at least one pair (pool aggregates have pod ``"all"``)."""
        return iter(list(self._series))
