"""Per-pod correction of the model's predictions: an online residual model per (pod, target).

The pool's model sees load, not the pod: a throttled GPU or a noisy neighbour makes one pod slower
than its features say, and the model (one per pool) cannot learn that. The router sees every
(prediction, actual) pair per pod, so it keeps, per pod and target (``ttft``, ``tpot``), the recent
ratios ``r = actual / raw prediction`` and multiplies later predictions for that pod by

    factor = clamp(Q_q(r), min_factor, max_factor) ** (2 ** (-(now - t_last) / half_life_s))

* ``Q_q`` is the time-weighted ``q``-quantile (``q`` = the model's quantile, 0.9) of the last
  ``max_samples`` ratios, each weighted ``2 ** (-age / half_life_s)``: a pod whose actuals sit under
  its predictions 90 % of the time keeps factor 1; a pod 2× slower than predicted gets ≈ 2.
  A high quantile reacts fast to a slowdown (a tenth of the weight suffices) and slowly to recovery.
* Without new pairs the factor decays geometrically to 1 with the same half-life.
* Below ``min_samples`` pairs the factor is 1, and so is it while there is no evidence that the model is
  off for this pod: its weighted raw coverage (share of ratios ≤ 1, effective sample size ``(Σw)² / Σw²``)
  lies within ``evidence_z`` binomial standard errors of ``q`` — or, relative (the default), of the
  pooled coverage of the other pods of its pool (a two-sample test; 1 until another pod of the pool has
  a fit; a pod alone in its pool is judged against ``q``): a load burst that fools the model on every pod is the
  model's to learn, not one pod's to dodge.
* The fit is redone after every ``REFIT_EVERY`` pairs, or on the first pair more than ``REFIT_AFTER_S``
  after the last fit (bounded CPU per pair).

* **Relative to the pool** (``relative``, on by default): the factor applied to a pod is its own divided by
  the median factor of its pool (``peers``). The pool's model, retrained and calibrated every cycle, owns
  what all pods share (a load burst, a level shift of the whole pool); the correction only corrects what
  sets one pod apart — a common-mode error would otherwise be chased pod by pod, adding noise to every
  decision (measured: +7.5 % P99 TTFT without drift, bench/bench_drift.py).

The ratio is always taken against the **raw** (uncorrected) prediction, so the correction never feeds
on itself. Pure and clock-free: every call takes ``now`` (monotonic seconds live, virtual seconds in
the replay), so the live router and ``sim.policies`` use the same code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from router_client.config import CorrectionConfig

TARGETS: tuple[str, ...] = ("ttft", "tpot")
REFIT_EVERY = 4
REFIT_AFTER_S = 1.0
_MIN_PREDICTION_MS = 1e-3


@dataclass(frozen=True)
class FactorState:
    """What the correction of one (pod, target) holds, for metrics and ``/status``."""

    factor: float
    samples: int
    updated_at: float | None


class _Residuals:
    """Ring buffer of (time, log ratio) of one (pod, target) and the log factor fitted at ``updated_at``."""

    __slots__ = ("times", "logs", "count", "next", "pending", "log_factor", "updated_at", "covered", "n_eff")

    def __init__(self, size: int) -> None:
        self.times = np.zeros(size)
        self.logs = np.zeros(size)
        self.count = 0
        self.next = 0
        self.pending = 0
        self.log_factor = 0.0
        self.updated_at = -math.inf
        self.covered = 0.0
        """Weighted share of ratios ≤ 1 (the raw model's coverage for this pod) at the last fit."""
        self.n_eff = 0.0

    def add(self, now: float, log_ratio: float) -> None:
        size = len(self.times)
        self.times[self.next] = now
        self.logs[self.next] = log_ratio
        self.next = (self.next + 1) % size
        self.count = min(self.count + 1, size)
        self.pending += 1

    def due(self, now: float) -> bool:
        return self.pending >= REFIT_EVERY or now - self.updated_at >= REFIT_AFTER_S

    def fit(self, now: float, quantile: float, half_life_s: float, bounds: tuple[float, float]) -> None:
        times, logs = self.times[: self.count], self.logs[: self.count]
        weights = np.exp2(-np.maximum(now - times, 0.0) / half_life_s)
        self.updated_at = now
        self.pending = 0
        total = float(weights.sum())
        self.covered = float(weights[logs <= 0.0].sum()) / total
        self.n_eff = total * total / float((weights * weights).sum())
        order = np.argsort(logs)
        cumulative = np.cumsum(weights[order])
        at = int(np.searchsorted(cumulative, quantile * total))
        self.log_factor = min(max(float(logs[order[min(at, self.count - 1)]]), bounds[0]), bounds[1])


def _median(values: list[float]) -> float:
    """The median of a pool's few log factors (pure Python: ``np.median`` costs ~20 µs on 16 floats)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


class PodCorrection:
    """Multiplicative factors per (pod, target); ``observe`` pairs, ``apply`` to predictions."""

    def __init__(self, config: CorrectionConfig, quantile: float,
                 peers: Callable[[str], Sequence[str]] | None = None) -> None:
        self.config = config
        self.quantile = quantile
        self._peers = peers if config.relative else None
        """The pods of a pod's pool (its own included): factors are taken relative to their median."""
        self._bounds = (math.log(config.min_factor), math.log(config.max_factor))
        self._inv_half_life = 1.0 / config.half_life_s
        self._residuals: dict[tuple[str, str], _Residuals] = {}

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def observe(self, pod: str, target: str, raw_predicted_ms: float | None, actual_ms: float | None,
                now: float) -> None:
        """Record one pair: the model's uncorrected prediction for ``pod`` and what was measured."""
        if (not self.config.enabled or raw_predicted_ms is None or actual_ms is None or actual_ms <= 0
                or not math.isfinite(actual_ms) or not math.isfinite(raw_predicted_ms)):
            return
        key = (pod, target)
        res = self._residuals.get(key)
        if res is None:
            res = self._residuals[key] = _Residuals(self.config.max_samples)
        res.add(now, math.log(actual_ms / max(raw_predicted_ms, _MIN_PREDICTION_MS)))
        if res.count >= self.config.min_samples and res.due(now):
            res.fit(now, self.quantile, self.config.half_life_s, self._bounds)

    def _fitted(self, pod: str, target: str) -> _Residuals | None:
        res = self._residuals.get((pod, target))
        return res if res is not None and math.isfinite(res.updated_at) else None

    def _own_log(self, res: _Residuals, now: float) -> float:
        if now <= res.updated_at:
            return res.log_factor
        return res.log_factor * math.exp2((res.updated_at - now) * self._inv_half_life)

    def _group(self, peers: Sequence[str], target: str, now: float) -> dict[str, float]:
        """The log factor applied to each pod of ``peers`` (one pool, or one pod alone when not relative): 0
        without evidence that the model is off for it, else its own log factor (minus the pool's median one,
        when relative). One pass over the pool: the pooled coverage of "the others" is the pool's total minus
        the pod's own share, so a decision over n pods costs O(n), not O(n²)."""
        fitted = {p: r for p in peers if (r := self._fitted(p, target)) is not None}
        out = dict.fromkeys(peers, 0.0)
        if not fitted:
            return out
        own = {p: self._own_log(r, now) for p, r in fitted.items()}
        if len(peers) == 1:
            pod, res = next(iter(fitted.items()))
            q, z = self.quantile, self.config.evidence_z
            if abs(res.covered - q) > z * math.sqrt(q * (1.0 - q) / res.n_eff):
                out[pod] = own[pod]
            return out
        if len(fitted) < 2:
            return out  # nothing to compare with yet
        total_n = sum(r.n_eff for r in fitted.values())
        total_covered = sum(r.covered * r.n_eff for r in fitted.values())
        pool_log = _median([*own.values(), *([0.0] * (len(peers) - len(fitted)))])
        z = self.config.evidence_z
        for pod, res in fitted.items():
            rest_n = total_n - res.n_eff
            rest_covered = (total_covered - res.covered * res.n_eff) / rest_n
            p = min(max((res.covered * res.n_eff + rest_covered * rest_n) / total_n, 0.01), 0.99)
            if abs(res.covered - rest_covered) > z * math.sqrt(p * (1 - p) * (1 / res.n_eff + 1 / rest_n)):
                out[pod] = own[pod] - pool_log
        return out

    def _peers_of(self, pod: str) -> Sequence[str]:
        peers = () if self._peers is None else self._peers(pod)
        return peers if pod in peers and len(peers) > 1 else (pod,)

    def factor(self, pod: str, target: str, now: float) -> float:
        """The factor applied to ``pod``'s ``target`` predictions now."""
        return math.exp(self._group(self._peers_of(pod), target, now)[pod])

    def apply(self, pods: Sequence[str], predictions: Sequence[tuple[float | None, ...]],
              now: float) -> list[tuple[float | None, ...]]:
        """Each pod's predictions — ``(ttft, tpot)``, optionally followed by the admission quantile's
        ``(ttft, tpot)`` — multiplied by that pod's TTFT / TPOT factors (unchanged when disabled)."""
        if not self.config.enabled or not self._residuals:
            return [tuple(p) for p in predictions]
        logs: dict[str, list[float]] = {}
        for pod in pods:
            if pod not in logs:
                peers = self._peers_of(pod)
                groups = [self._group(peers, t, now) for t in TARGETS]
                for peer in peers:
                    logs[peer] = [g[peer] for g in groups]
        out = []
        for pod, p in zip(pods, predictions, strict=True):
            factors = [math.exp(v) for v in logs[pod]]
            out.append(tuple(None if v is None else v * factors[j % 2] for j, v in enumerate(p)))
        return out

    def state(self, pod: str, target: str, now: float) -> FactorState:
        res = self._residuals.get((pod, target))
        if res is None:
            return FactorState(1.0, 0, None)
        fitted = res.updated_at if math.isfinite(res.updated_at) else None
        return FactorState(self.factor(pod, target, now), res.count, fitted)

    def keys(self) -> Iterator[tuple[str, str]]:
        """Every (pod, target) with at least one pair."""
        return iter(list(self._residuals))
