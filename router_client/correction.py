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
  after the last fit (bounded CPU per pair). What a decision needs from the fits — which pods of a pool are
  fitted, which show evidence, their applied log factors at the pool's latest fit — changes only at a refit or
  when the pool's pods change, so it is kept per (pool's pods, target) (:class:`_Plan`: dropped when one of its
  pods is refitted, rebuilt right after that fit). All fitted factors decay at the same rate, so a decision
  multiplies the kept log factors by one decay factor (equal to decaying each and taking the median again, up
  to rounding); one where no pod shows evidence leaves the predictions as they are.

* **Relative to the pool** (``relative``, on by default): the factor applied to a pod is its own divided by
  the median factor of its pool (``peers``). The pool's model, retrained and calibrated every cycle, owns
  what all pods share (a load burst, a level shift of the whole pool); the correction only corrects what
  sets one pod apart — a common-mode error would otherwise be chased pod by pod, adding noise to every
  decision (measured: +7.5 % P99 TTFT without drift, bench/router/drift.py).

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
_MAX_PLANS = 4096


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


@dataclass(frozen=True, slots=True)
class _Plan:
    """One pool's (``peers``) fitted pods for one target as of their last fits, and those of them whose evidence
    says the model is off for them (``flagged``: pod and index into ``fitted``)."""

    fitted: tuple[_Residuals, ...]
    flagged: tuple[tuple[str, int], ...]
    unfitted: int
    """Pods of the pool without a fit (their log factor, 0, counts in the pool's median)."""
    as_of: float
    """The latest fit of ``fitted`` (-inf: none)."""
    logs_as_of: tuple[tuple[str, float], ...]
    """Each flagged pod's applied log factor at ``as_of``. Every fitted log factor decays by the same
    ``2 ** (-(now - as_of) / half_life_s)`` from then on, and so does their median: at any ``now ≥ as_of`` the
    applied log factors are these times that one number (equal to decaying each pod's own and taking the median
    again, up to rounding)."""


_PlanKey = tuple[tuple[str, ...], str]


def _scaled(prediction: Sequence[float | None], factors: tuple[float, float]) -> tuple[float | None, ...]:
    """``(ttft, tpot[, admit_ttft, admit_tpot])`` times the (TTFT, TPOT) factors (even positions are TTFTs)."""
    ttft, tpot = factors
    if len(prediction) == 4:  # what the predictor client answers (a Prediction)
        a, b, c, d = prediction
        return (None if a is None else a * ttft, None if b is None else b * tpot,
                None if c is None else c * ttft, None if d is None else d * tpot)
    return tuple(None if v is None else v * (tpot if j & 1 else ttft) for j, v in enumerate(prediction))


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
        self._plans: dict[_PlanKey, _Plan] = {}
        """Per (pool's pods, target): valid until one of those pods is refitted for that target."""
        self._plans_with: dict[tuple[str, str], set[_PlanKey]] = {}
        """(pod, target) → the keys of the plans that pod is in (dropped when it is refitted)."""

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
            self._refitted(pod, target)

    def _refitted(self, pod: str, target: str) -> None:
        """A fit changed ``pod``'s evidence: drop every plan it is in, and plan its pool's again now (at the fit,
        not at the next decision)."""
        for key in self._plans_with.pop((pod, target), ()):
            self._plans.pop(key, None)
        self._plan(tuple(self._peers_of(pod)), target)

    def _logs(self, peers: Sequence[str], target: str, now: float) -> dict[str, float]:
        """The log factors applied to pods of ``peers`` (one pool, or one pod alone when not relative) that have
        evidence that the model is off for them: their own log factor decayed to ``now`` (minus the pool's median
        one, when relative). Every other pod of ``peers`` gets 0."""
        plan = self._plan(tuple(peers), target)
        if not plan.flagged:
            return {}
        inv, exp2 = self._inv_half_life, math.exp2
        if now >= plan.as_of:
            decay = exp2((plan.as_of - now) * inv)
            return {pod: decay * log for pod, log in plan.logs_as_of}
        own = [r.log_factor if now <= r.updated_at else r.log_factor * exp2((r.updated_at - now) * inv)
               for r in plan.fitted]
        if len(peers) == 1:
            return {plan.flagged[0][0]: own[0]}
        pool_log = _median([*own, *([0.0] * plan.unfitted)])
        return {pod: own[i] - pool_log for pod, i in plan.flagged}

    def _plan(self, peers: tuple[str, ...], target: str) -> _Plan:
        key = (peers, target)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()  # mostly pools whose pods have changed since: never asked for again
                self._plans_with.clear()
            plan = self._plans[key] = self._evidence(peers, target)
            for pod in peers:
                self._plans_with.setdefault((pod, target), set()).add(key)
        return plan

    def _evidence(self, peers: tuple[str, ...], target: str) -> _Plan:
        """Which pods of ``peers`` are fitted and which of them the model is off for: their weighted raw coverage
        lies more than ``evidence_z`` standard errors from ``q`` (a pod alone) or from the pooled coverage of the
        other fitted pods of the pool (a two-sample test; none before two pods have a fit). One pass over the
        pool: the others' pooled coverage is the pool's total minus the pod's own share."""
        residuals, isfinite = self._residuals, math.isfinite
        names: list[str] = []
        fitted: list[_Residuals] = []
        for pod in peers:
            res = residuals.get((pod, target))
            if res is not None and isfinite(res.updated_at):
                names.append(pod)
                fitted.append(res)
        z, sqrt = self.config.evidence_z, math.sqrt
        flagged: list[tuple[str, int]] = []
        if len(peers) == 1 and fitted:
            q, res = self.quantile, fitted[0]
            if abs(res.covered - q) > z * sqrt(q * (1.0 - q) / res.n_eff):
                flagged.append((names[0], 0))
        elif len(fitted) >= 2:
            total_n = sum(r.n_eff for r in fitted)
            total_covered = sum(r.covered * r.n_eff for r in fitted)
            for i, res in enumerate(fitted):
                n, covered = res.n_eff, res.covered
                rest_n = total_n - n
                rest_covered = (total_covered - covered * n) / rest_n
                p = (covered * n + rest_covered * rest_n) / total_n
                p = 0.99 if p > 0.99 else 0.01 if p < 0.01 else p
                if abs(covered - rest_covered) > z * sqrt(p * (1 - p) * (1 / n + 1 / rest_n)):
                    flagged.append((names[i], i))
        return self._planned(tuple(fitted), tuple(flagged), len(peers) - len(fitted))

    def _planned(self, fitted: tuple[_Residuals, ...], flagged: tuple[tuple[str, int], ...], unfitted: int) -> _Plan:
        as_of = max((r.updated_at for r in fitted), default=-math.inf)
        inv, exp2 = self._inv_half_life, math.exp2
        own = [r.log_factor if as_of <= r.updated_at else r.log_factor * exp2((r.updated_at - as_of) * inv)
               for r in fitted]
        if len(fitted) + unfitted == 1:
            logs = tuple((pod, own[i]) for pod, i in flagged)
        else:
            pool_log = _median([*own, *([0.0] * unfitted)]) if flagged else 0.0
            logs = tuple((pod, own[i] - pool_log) for pod, i in flagged)
        return _Plan(fitted, flagged, unfitted, as_of, logs)

    def _peers_of(self, pod: str) -> Sequence[str]:
        peers = () if self._peers is None else self._peers(pod)
        return peers if pod in peers and len(peers) > 1 else (pod,)

    def factor(self, pod: str, target: str, now: float) -> float:
        """The factor applied to ``pod``'s ``target`` predictions now."""
        return math.exp(self._logs(self._peers_of(pod), target, now).get(pod, 0.0))

    def apply(self, pods: Sequence[str], predictions: Sequence[tuple[float | None, ...]],
              now: float) -> list[tuple[float | None, ...]]:
        """Each pod's predictions — ``(ttft, tpot)``, optionally followed by the admission quantile's
        ``(ttft, tpot)`` — multiplied by that pod's TTFT / TPOT factors (the same tuple when both are 1, and
        when disabled)."""
        if not self.config.enabled or not self._residuals:
            return list(predictions)
        factors = self._factors(pods, now)
        if not factors:
            return list(predictions)
        get = factors.get
        return [p if (f := get(pod)) is None else _scaled(p, f) for pod, p in zip(pods, predictions, strict=True)]

    def _factors(self, pods: Sequence[str], now: float) -> dict[str, tuple[float, float]]:
        """The (TTFT, TPOT) factors of the pods of ``pods`` whose factors are not both 1 (a factor of 1 leaves a
        prediction as it is), one pass per pool among them (usually one: ``pods`` is the pool)."""
        factors: dict[str, tuple[float, float]] = {}
        if not pods:
            return factors
        peers = self._peers_of(pods[0])
        pools = [peers] if len(peers) == len(pods) and peers == tuple(pods) else self._pools_of(pods)
        exp = math.exp
        for peers in pools:
            ttft, tpot = self._logs(peers, "ttft", now), self._logs(peers, "tpot", now)
            for pod, a in ttft.items():
                factors[pod] = (exp(a), exp(tpot.get(pod, 0.0)))
            for pod, b in tpot.items():
                if pod not in ttft:
                    factors[pod] = (1.0, exp(b))
        return factors

    def _pools_of(self, pods: Sequence[str]) -> list[Sequence[str]]:
        seen: set[str] = set()
        pools = []
        for pod in pods:
            if pod not in seen:
                peers = self._peers_of(pod)
                seen.update(peers)
                pools.append(peers)
        return pools

    def state(self, pod: str, target: str, now: float) -> FactorState:
        res = self._residuals.get((pod, target))
        if res is None:
            return FactorState(1.0, 0, None)
        fitted = res.updated_at if math.isfinite(res.updated_at) else None
        return FactorState(self.factor(pod, target, now), res.count, fitted)

    def keys(self) -> Iterator[tuple[str, str]]:
        """Every (pod, target) with at least one pair."""
        return iter(list(self._residuals))
