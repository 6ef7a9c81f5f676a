"""``pd-predicted-latency-slo``: score every (prefill, decode) pair by a blend of SLO headrooms.

For each decode pod the decider (``decider``: ``prefix`` as llm-d, ``always``, ``never``, ``predicted``: both)
says whether the request runs whole on it — an option ``(—, D)`` with the decode pod's whole-request
predictions — or is disaggregated — one option ``(P, D)`` per prefill pod, TTFT = P's prefill TTFT + D's decode-leg
TTFT, TPOT = D's. Every option scores ``w × h(TTFT, SLO_ttft) + (1 − w) × h(TPOT, SLO_tpot)`` with
``w = pair_ttft_weight`` (0.8) and the headroom ``h(v, SLO) = (SLO − v) / SLO``; without an SLO
``h = best / v`` over the options (as ``latency-headroom``). Options predicted to meet both SLOs go first;
the highest score wins (first in pod order on ties). Before the models' first fits it decides as
``pd-load-prefix``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.policies.pd.load_prefix import PdLoadPrefix
from sim.policies.pd.models import RoleModels
from sim.policies.pd.options import PdOptions
from sim.policies.pd.predicted import settings_of
from sim.policies.pd.roles import DECODE, PREFILL, WHOLE, role_row, split, uncached_tokens

EPS_MS = 1.0


@dataclass(frozen=True)
class Option:
    prefill: str | None
    decode: str
    ttft_ms: float
    tpot_ms: float


def headrooms(values: Sequence[float], slo: float | None) -> list[float]:
    if slo:
        return [(slo - v) / slo for v in values]
    best = min(values)
    return [(best + EPS_MS) / (v + EPS_MS) for v in values]


class PdPredictedLatencySlo:
    name = "pd-predicted-latency-slo"

    def __init__(self, ctx: PolicyContext) -> None:
        self.opts = PdOptions.parse(ctx.options)
        self.models = RoleModels(settings_of(self.opts), self.opts.trainers == "split")
        fallback = {"decider": "prefix" if self.opts.decider == "predicted" else self.opts.decider,
                    "pd_threshold": str(self.opts.pd_threshold)}
        self.fallback = PdLoadPrefix(PolicyContext(ctx.seed, ctx.pods, fallback, ctx.pod_classes, ctx.pod_roles))
        self._next_retrain = self.opts.retrain_interval_s

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        if request.arrival_s >= self._next_retrain:
            self.models.retrain(request.arrival_s)
            self._next_retrain = request.arrival_s + self.opts.retrain_interval_s
        options = self._options(request, pods)
        if not options:
            return self.fallback.choose(request, pods)
        best = self._best(request, options)
        return Decision.route(best.decode, best.ttft_ms, best.tpot_ms, prefill_pod_id=best.prefill)

    def on_complete(self, completion: Completion) -> None:
        self.models.observe(completion)

    def status(self) -> dict[str, object]:
        return {"retrains": self.models.retrains, "trainers": self.opts.trainers, "decider": self.opts.decider}

    def _options(self, request: RequestView, pods: Sequence[PodSnapshot]) -> list[Option]:
        prefill, decode = split(pods)
        legs = self.models.predict(DECODE, [role_row(request, p, DECODE) for p in decode])
        whole = self.models.predict(WHOLE, [role_row(request, p, WHOLE) for p in decode])
        pre = self.models.predict(PREFILL, [role_row(request, p, PREFILL) for p in prefill]) if prefill else []
        if legs is None or whole is None or pre is None:
            return []
        out = []
        for d, leg, alone in zip(decode, legs, whole, strict=True):
            local, remote = self._modes(request, d, bool(prefill))
            if local:
                out.append(Option(None, d.pod_id, alone[0], alone[1]))
            if remote:
                out += [Option(p.pod_id, d.pod_id, t + leg[0], leg[1]) for p, (t, _) in zip(prefill, pre, strict=True)]
        return out

    def _modes(self, request: RequestView, pod: PodSnapshot, have_prefill: bool) -> tuple[bool, bool]:
        """(whole on ``pod`` is an option, disaggregating onto ``pod`` is an option)."""
        mode = self.opts.decider
        if not have_prefill or mode == "never":
            return True, False
        if mode == "always":
            return False, True
        if mode == "predicted":
            return True, True
        remote = uncached_tokens(request, pod) >= self.opts.pd_threshold
        return not remote, remote

    def _best(self, request: RequestView, options: Sequence[Option]) -> Option:
        w = self.opts.pair_ttft_weight
        ttft = headrooms([o.ttft_ms for o in options], request.slo_ttft_ms)
        tpot = headrooms([o.tpot_ms for o in options], request.slo_tpot_ms)
        scored = [(min(a, b) >= 0.0, w * a + (1.0 - w) * b, -i)
                  for i, (a, b) in enumerate(zip(ttft, tpot, strict=True))]
        return options[-max(scored)[2]]


def pd_predicted_latency_slo(ctx: PolicyContext) -> PdPredictedLatencySlo:
    return PdPredictedLatencySlo(ctx)
