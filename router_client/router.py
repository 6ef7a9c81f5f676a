"""The router-client facade: what a router (or the OpenAI-compatible proxy) embeds.

Per request: :meth:`Router.decide` picks the pool by token budget, builds one feature row per
pod of that pool from the endpoint snapshot (scraped metrics + router-side in-flight + prefix
index), asks the pool's predictors for all of them in one coalesced bulk call (falling back to a
composite score when that fails or is late), runs filter → score → pick, and admits or sheds.
After the stream, :meth:`Router.on_first_token` and :meth:`Router.on_complete` report what was
seen so the models keep learning. ``decide`` never raises for predictor trouble.

A pool's pods are read from :class:`~router_client.membership.Membership` once per decision (discovered pools
change when :class:`~router_client.discovery.Discovery` resolves their name again); per-pod state is kept for
pods that stay and dropped for a pod that left once its in-flight requests have finished.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from router_client.candidates import candidates as build_candidates
from router_client.classifier import Budget, PoolClassifier
from router_client.config import PoolConfig, RouterConfig
from router_client.correction import PodCorrection
from router_client.discovery import Discovery
from router_client.drift import DriftMonitor
from router_client.endpoints import EndpointState
from router_client.errors import PredictionUnavailable
from router_client.http1 import Http1Pool
from router_client.live_metrics import AdaptiveCollector, MembershipCollector, RouterMetrics
from router_client.membership import LEAVING, Change, Membership
from router_client.model_watch import ModelWatch
from router_client.pd import decider
from router_client.pd.config import PdConfig
from router_client.pd.metrics import PdMetrics
from router_client.pd.profiles import DECODE, PREFILL, WHOLE, role_scheduler
from router_client.pipeline import DecisionCore, Outcome
from router_client.predictor_client import Prediction, PredictorClient
from router_client.prefix_index import PrefixIndex, text_block_hashes
from router_client.reporter import SampleReporter, training_row
from router_client.request import RequestInfo
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from router_client.scraper import MetricsScraper
from router_client.status import StatusSources, build_status
from router_client.tuning_hook import RouterTuning

__all__ = ["Decision", "RequestInfo", "Router"]

log = logging.getLogger(__name__)

Features = dict[str, float | int | str]


@dataclass(frozen=True)
class Decision:
    """Where a request goes (or why it is shed), with what was predicted and dispatched."""

    request_id: str
    pool: str
    pod_url: str | None
    shed: bool
    reason: str
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    """Predictions the decision acted on: the model's, times the pod's correction factor."""
    fallback: bool = False
    features: Mapping[str, float | int | str] = field(default_factory=dict)
    dispatched_at: float = 0.0
    prompt_tokens: int = 0
    """Prompt tokens used for the decision (exact or estimated)."""
    prompt_tokens_estimated: bool = False
    expected_output_tokens: int = 0
    uncached_prefill_tokens: int = 0
    retry_after_s: float | None = None
    """Set on shed decisions (the proxy answers 429 with ``Retry-After``)."""
    info: RequestInfo | None = None
    dispatch_id: int = 0
    """Router-internal key of the in-flight entry (request ids supplied by clients may repeat)."""
    raw_predicted_ttft_ms: float | None = None
    raw_predicted_tpot_ms: float | None = None
    """The model's own predictions for the chosen pod (before the per-pod correction)."""
    prefill: Decision | None = None
    """P/D pool, disaggregated: the prefill leg (its pool, pod, predictions, features); this decision is the decode
    leg (``pod_url`` the decode pod, predictions and features of the decode leg, ``pod_type`` decode)."""
    pd_choice: str = ""
    """P/D pool: the decider's choice (``router_client.pd.decider``: disaggregated, decode_holds_prefix, ...)."""


class Router:
    """Build with a :class:`RouterConfig`; ``await start()`` before ``decide``; ``await aclose()`` at the end."""

    def __init__(self, config: RouterConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self.metrics_registry = CollectorRegistry()
        self._metrics = RouterMetrics(self.metrics_registry)
        self._pools = MappingProxyType({p.name: p for p in config.pools})
        self.members = Membership(config.pools)
        self.correction = PodCorrection(config.correction, config.prediction_quantile, self.members.peers)
        self.drift = DriftMonitor(config.drift, config.prediction_quantile)
        self.metrics_registry.register(AdaptiveCollector(self.correction, self.drift, self.members.pool_of, clock))
        self.metrics_registry.register(MembershipCollector(self.members))
        self._classifier = PoolClassifier(config.classifier, config.serving_pools())
        self._state = EndpointState(self.members.scrape_targets(), config.scraper.stale_after_s, clock)
        self._prefix = PrefixIndex(self.members.scrape_targets(), config.prefix.capacity_blocks)
        self._core = DecisionCore(config.scheduler, config.slo, {p.name: p.pods for p in config.pools})
        self._role_cores = {(p.name, role): DecisionCore(role_scheduler(p.pd, role, config.scheduler), config.slo,
                                                         {q.name: q.pods for q in config.pools})
                            for p in config.pools if p.pd is not None for role in (DECODE, PREFILL)}
        self.pd = PdMetrics(self.metrics_registry)
        """What P/D routing did (decider choices, pairs, prefill and KV hand-over times): metrics and status."""
        self.discovery = Discovery(config.pools, self.members, self._on_change, self._metrics, clock=clock)
        self.models = ModelWatch({p.name: p.predictor_urls for p in config.pools}, config.model_status)
        """Each pool's live models (bundle version, per model its base) as its predictors report them."""
        self._http: httpx.AsyncClient | None = None
        self._scrape_pool: Http1Pool | None = None
        self._scraper: MetricsScraper | None = None
        self._reporter: SampleReporter | None = None
        self._predictors: dict[str, PredictorClient] = {}
        self._anon = 0
        self._dispatches = 0
        self._routed: dict[str, int] = {}
        self._tuning: RouterTuning | None = None
        if config.tuning.enabled:
            self._tuning = RouterTuning(config, self._classifier, self._state, clock(), self.members.pods)
            self._tuning.register(self.metrics_registry)

    @property
    def pools(self) -> Mapping[str, PoolConfig]:
        return self._pools

    async def start(self) -> None:
        """Resolve the discovered pools once, open the HTTP client and start discovery, the scraper, the reporter,
        the predictor clients and the reads of the predictors' status (``models``)."""
        cfg = self.config
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64,
                              keepalive_expiry=cfg.reporter.max_idle_s)
        self._http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(5.0))
        for pool in cfg.pools:
            if pool.predictor_urls:
                self._predictors[pool.name] = PredictorClient(
                    None, pool.predictor_urls, timeout_s=cfg.predictor_http_timeout_ms / 1e3,
                    window_s=cfg.coalesce_window_ms / 1e3, max_rows=cfg.max_coalesced_rows,
                    backoff_s=cfg.predictor_backoff_s, clock=self._clock, quantile=cfg.slo.admission_quantile,
                    max_idle_s=cfg.predictor_max_idle_s)
        self._scrape_pool = Http1Pool(connect_timeout_s=cfg.scraper.timeout_s)
        self._scraper = MetricsScraper(self._scrape_pool, self._state, cfg.scraper, self._metrics,
                                       self.members.scrape_targets, self.members.scraped)
        self._reporter = SampleReporter(self._http, {p.name: p.trainer_url for p in cfg.pools}, cfg.reporter,
                                        self._metrics)
        await self.discovery.refresh_all()
        self.discovery.start()
        self._scraper.start()
        self._reporter.start()
        self.models.start(self._http)

    async def aclose(self) -> None:
        """Stop background tasks, flush what the reporter holds (best effort) and close connections."""
        await self.discovery.stop()
        await self.models.stop()
        if self._scraper is not None:
            await self._scraper.stop()
        if self._scrape_pool is not None:
            await self._scrape_pool.aclose()
        if self._reporter is not None:
            await self._reporter.stop()
        for client in self._predictors.values():
            await client.aclose()
        if self._http is not None:
            await self._http.aclose()
        self._http = None

    # -- the hot path ------------------------------------------------------------------------
    async def decide(self, info: RequestInfo) -> Decision:
        """Choose pool and pod for ``info`` (or shed it). Never raises for predictor trouble."""
        started = self._clock()
        if not info.request_id:
            self._anon += 1
            info = replace(info, request_id=f"router-{self._anon}")
        budget = self._classifier.classify(info)
        pool = budget.pool
        hashes = text_block_hashes(info.prefix_text, self.config.prefix.block_bytes,
                                   self.config.prefix.max_blocks_per_request)
        pool_cfg = self._pools[pool]
        pods = self.members.pods(pool)  # this decision's pods, whatever discovery does while it awaits
        rows = self._state.feature_rows(pool_cfg, pods, budget.prompt_tokens, self._prefix.scores(pods, hashes))
        raw, fallback_reason = await self._predict(pool, rows, started) if pods else (None, None)
        predictions = None if raw is None else self.correction.apply(pods, raw, self._clock())
        request = SchedulingRequest(
            info.request_id, budget.prompt_tokens,
            info.slo_ttft_ms if info.slo_ttft_ms is not None else self.config.slo.default_ttft_ms,
            info.slo_tpot_ms if info.slo_tpot_ms is not None else self.config.slo.default_tpot_ms,
            info.sheddable)
        candidates = self._live(pool, pods, build_candidates(pods, rows, predictions))
        pd = pool_cfg.pd
        if pd is not None:
            request = replace(request, slo_ttft_ms=None)  # the decode pod is judged on TPOT (as llm-d's P/D profile)
        outcome = self._role_cores.get((pool, DECODE), self._core).decide(pool, request, candidates)
        decision = self._finish(info, budget, rows, outcome, fallback_reason, raw)
        if pd is not None and decision.pod_url is not None:
            decision = await self._pd_split(decision, pd, budget, hashes)
        if decision.pod_url is not None:
            self._dispatched(decision, hashes)
        self._metrics.decided(pool, decision.shed, decision.reason, self._clock() - started)
        if self._tuning is not None:
            self._tuning.on_decision(budget, info.max_tokens, decision.predicted_ttft_ms, request.slo_ttft_ms,
                                     self._clock())
        return decision

    def _dispatched(self, decision: Decision, hashes: Sequence[int]) -> None:
        pod = decision.pod_url or ""
        self._routed[pod] = self._routed.get(pod, 0) + 1
        self._state.dispatch(decision.dispatch_id, pod, decision.uncached_prefill_tokens)
        self._prefix.record(pod, hashes)

    # -- prefill/decode disaggregation ---------------------------------------------------------
    async def _pd_split(self, decode: Decision, pd: PdConfig, budget: Budget, hashes: Sequence[int]) -> Decision:
        """The decider on the chosen decode pod, then (disaggregated) the prefill pod of ``pd.prefill_pool``."""
        score = float(decode.features.get("prefix_cache_score", 0.0))
        choice = decider.decide(pd.decider, pd.pd_threshold, budget.prompt_tokens, score)
        info = decode.info
        disaggregate = choice == decider.DISAGGREGATED and info is not None
        prefill = await self._prefill_leg(info, pd.prefill_pool, budget, hashes) if info and disaggregate else None
        if choice == decider.DISAGGREGATED and prefill is None:
            choice = decider.NO_PREFILL_POD
        self.pd.chose(decode.pool, choice, None if prefill is None else prefill.pod_url, decode.pod_url or "")
        if prefill is None:
            return replace(await self.serve_whole(decode), pd_choice=choice)
        self._dispatched(prefill, hashes)
        self._metrics.decided(prefill.pool, False, prefill.reason, 0.0)
        return replace(decode, prefill=prefill, pd_choice=choice, uncached_prefill_tokens=0)

    async def _prefill_leg(self, info: RequestInfo, pool: str, budget: Budget,
                           hashes: Sequence[int]) -> Decision | None:
        """The prefill pod for a disaggregated request (judged on TTFT, never shed); None without one. The leg's
        decision carries no ``info``: its one-token answer teaches the classifier nothing."""
        started = self._clock()
        pods = self.members.pods(pool)
        if not pods:
            return None
        scores = self._prefix.scores(pods, hashes)
        rows = self._state.feature_rows(self._pools[pool], pods, budget.prompt_tokens, scores)
        raw, fallback_reason = await self._predict(pool, rows, started)
        predictions = None if raw is None else self.correction.apply(pods, raw, self._clock())
        candidates = self._live(pool, pods, build_candidates(pods, rows, predictions))
        request = SchedulingRequest(info.request_id, budget.prompt_tokens, info.slo_ttft_ms, None, False)
        outcome = self._role_cores[(budget.pool, PREFILL)].decide(pool, request, candidates)
        if outcome.index is None:
            return None
        leg = self._finish(info, replace(budget, pool=pool), rows, outcome, fallback_reason, raw)
        return replace(leg, info=None)

    async def serve_whole(self, decision: Decision) -> Decision:
        """``decision``'s decode pod serving the request whole (the decider kept it, or its prefill pod failed):
        ``pod_type`` "" in its features and, when the pool has predictors, that row's predictions."""
        row = {**decision.features, "pod_type": WHOLE}
        whole = replace(decision, features=row, prefill=None)
        if decision.pool not in self._predictors or decision.pod_url is None:
            return whole
        raw, _ = await self._predict(decision.pool, [row], self._clock())
        if raw is None:
            return replace(whole, predicted_ttft_ms=None, predicted_tpot_ms=None, raw_predicted_ttft_ms=None,
                           raw_predicted_tpot_ms=None)
        ttft, tpot = self.correction.apply([decision.pod_url], raw, self._clock())[0][:2]
        return replace(whole, predicted_ttft_ms=ttft, predicted_tpot_ms=tpot, raw_predicted_ttft_ms=raw[0].ttft_ms,
                       raw_predicted_tpot_ms=raw[0].tpot_ms)

    def _live(self, pool: str, pods: tuple[str, ...], candidates: list[Candidate]) -> list[Candidate]:
        """Drop pods that left the pool while the decision awaited its predictions, and pods whose scrapes have
        failed for longer than ``stale_after_s`` (down or unreachable). When that drops them all, only the pods
        whose scrapes lag the freshest one's by more than ``stale_after_s`` go (a dead pod among slow ones)."""
        now = self.members.pods(pool)
        if now is not pods:
            current = set(now)
            candidates = [c for c in candidates if c.pod in current] or candidates
        stale = self._state.stale(pods)
        if not stale:
            return candidates
        if len(stale) == len(pods):
            stale = self._state.lagging(pods)
        live = [c for c in candidates if c.pod not in stale]
        return live if live else candidates

    async def _predict(self, pool: str, rows: list[Features],
                       started: float) -> tuple[list[Prediction] | None, str | None]:
        client = self._predictors.get(pool)
        if client is None:
            self._metrics.fallback(pool, "no_predictor")
            return None, "no_predictor"
        deadline = started + self.config.predictor_timeout_ms / 1e3
        try:
            return await client.predict(rows, deadline), None
        except PredictionUnavailable as exc:
            self._metrics.fallback(pool, exc.reason)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("pool %s: fallback (%s) %s", pool, exc.reason, exc.message)
            return None, exc.reason

    def _finish(self, info: RequestInfo, budget: Budget, rows: list[Features], outcome: Outcome,
                fallback_reason: str | None, raw: list[Prediction] | None) -> Decision:
        if outcome.index is None:
            best = outcome.best
            return Decision(request_id=info.request_id, pool=budget.pool, pod_url=None, shed=True,
                            reason=outcome.reason, predicted_ttft_ms=best.predicted_ttft_ms if best else None,
                            predicted_tpot_ms=best.predicted_tpot_ms if best else None,
                            fallback=fallback_reason is not None, dispatched_at=self._clock(),
                            prompt_tokens=budget.prompt_tokens, prompt_tokens_estimated=budget.estimated,
                            expected_output_tokens=budget.expected_output, retry_after_s=self.config.slo.retry_after_s,
                            info=info)
        chosen = outcome.candidates[outcome.index]
        self._dispatches += 1
        reason = outcome.reason if fallback_reason is None else f"{outcome.reason};fallback={fallback_reason}"
        raw_ttft, raw_tpot = (raw[chosen.row].ttft_ms, raw[chosen.row].tpot_ms) if raw is not None else (None, None)
        return Decision(request_id=info.request_id, pool=budget.pool, pod_url=chosen.pod, shed=False, reason=reason,
                        predicted_ttft_ms=chosen.predicted_ttft_ms, predicted_tpot_ms=chosen.predicted_tpot_ms,
                        fallback=fallback_reason is not None, features=rows[outcome.row], dispatched_at=self._clock(),
                        prompt_tokens=budget.prompt_tokens, prompt_tokens_estimated=budget.estimated,
                        expected_output_tokens=budget.expected_output,
                        uncached_prefill_tokens=round(budget.prompt_tokens * (1.0 - chosen.prefix_score)), info=info,
                        dispatch_id=self._dispatches, raw_predicted_ttft_ms=raw_ttft, raw_predicted_tpot_ms=raw_tpot)

    # -- after dispatch ----------------------------------------------------------------------
    def on_first_token(self, decision: Decision) -> None:
        """The first streamed token arrived: its uncached prefill tokens are no longer in flight."""
        if decision.pod_url is not None:
            self._state.first_token(decision.dispatch_id)

    def on_complete(self, decision: Decision, ttft_ms: float, e2e_ms: float, output_tokens: int,
                    prompt_tokens: int | None = None, error: bool = False) -> None:
        """The response ended: release in-flight state, learn bytes/token and output history, and
        (unless ``error``) queue the training sample. When a first token was seen (a stream), the
        (prediction, actual) pairs also feed the per-pod correction and drift detection."""
        if decision.pod_url is None:
            return
        streamed = self._state.complete(decision.dispatch_id)
        self._retire_if_idle(decision.pod_url)
        if self._tuning is not None:
            self._tuning.on_complete(decision.pool)
        info = decision.info
        if info is not None and not error:
            self._classifier.observe(info, prompt_tokens, output_tokens)
        if error or ttft_ms <= 0:
            return
        tpot_ms = (e2e_ms - ttft_ms) / (output_tokens - 1) if output_tokens > 1 else 0.0
        row = training_row(decision.features, ttft_ms, max(tpot_ms, 0.0), prompt_tokens)
        if self._reporter is not None:
            self._reporter.add(decision.pool, row)
        tpot = tpot_ms if output_tokens > 1 else None
        if decision.features.get("pod_type") != PREFILL:  # SLOs are the whole request's, not a prefill leg's
            slo_ttft = info.slo_ttft_ms if info and info.slo_ttft_ms is not None else self.config.slo.default_ttft_ms
            slo_tpot = info.slo_tpot_ms if info and info.slo_tpot_ms is not None else self.config.slo.default_tpot_ms
            self._metrics.slo(decision.pool, ttft_ms, tpot, slo_ttft, slo_tpot)
        if streamed:
            self._learn(decision, ttft_ms, tpot)

    def _learn(self, d: Decision, ttft_ms: float, tpot_ms: float | None) -> None:
        now, pod = self._clock(), d.pod_url or ""
        for target, predicted, raw, actual in (("ttft", d.predicted_ttft_ms, d.raw_predicted_ttft_ms, ttft_ms),
                                               ("tpot", d.predicted_tpot_ms, d.raw_predicted_tpot_ms, tpot_ms)):
            self.correction.observe(pod, target, raw, actual, now)
            self.drift.observe(d.pool, pod, target, predicted, raw, actual, now)

    # -- membership changes ------------------------------------------------------------------
    def _on_change(self, change: Change) -> None:
        """Discovery changed a pool: track the pods that joined, retire those that left once idle."""
        for pod in change.joined:
            self._state.add(pod)
        for pod in change.left:
            self._retire_if_idle(pod)

    def _retire_if_idle(self, pod: str) -> None:
        """Forget a pod that left its pool and has nothing in flight any more (its correction and drift series
        are kept: a pod that comes back with the same address resumes with them)."""
        if self.members.state(pod) != LEAVING or self._state.running(pod) > 0:
            return
        pool = self.members.retire(pod)
        if pool is None:
            return
        self._state.drop(pod)
        self._prefix.forget(pod)
        for core in (self._core, *self._role_cores.values()):
            core.balancer.forget(pool, pod)
        self._routed.pop(pod, None)
        if self._scraper is not None:
            self._scraper.forget(pod)
        self._metrics.forget_pod(pod)

    # -- introspection (tests, /status of the proxy) -------------------------------------------
    def fallback_counts(self) -> dict[tuple[str, str], float]:
        """Fallbacks so far by (pool, reason)."""
        return self._metrics.fallback_counts()

    def shed_counts(self) -> dict[tuple[str, str], float]:
        """Decisions without a pod so far by (pool, reason code)."""
        return self._metrics.shed_counts()

    def share(self, pool: str, pod: str) -> float:
        """The pod's recent share of its pool's decisions (decayed over ``scheduler.share_window``)."""
        return self._core.balancer.share(pool, pod)

    def status(self) -> dict[str, Any]:
        """The JSON document of the proxy's ``GET /status`` (see ``router_client/status.py``)."""
        sources = StatusSources(self.config, self.correction, self.drift, self._state, self.share, self._routed,
                                self._metrics.fallback_counts(), self._metrics.shed_counts(), self.members,
                                self.discovery.status, self.models.status)
        status = build_status(sources, self._clock())
        if self._role_cores:
            status = {**status, "pd": self.pd.status()}
        tuning = self.tuning_status()
        return status if tuning is None else {**status, "tuning": tuning}

    def tuning_status(self) -> dict[str, Any] | None:
        """Pool tuning's state and last recommendation (None when ``tuning.enabled`` is off)."""
        return None if self._tuning is None else self._tuning.status()

    def in_flight(self, pod_url: str) -> int:
        return self._state.running(pod_url)

    def pod_urls(self) -> list[str]:
        """Every pod of every pool now (resolved, then leaving)."""
        return self.members.all_pods()

