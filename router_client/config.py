"""Router configuration: one JSON file, validated at start-up (unknown keys fail).

Build with :meth:`RouterConfig.load` (a file path) or ``RouterConfig.model_validate(dict)`` in
tests. Every field carries a description; ``router_client/README.md`` lists them with defaults.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from router_client.errors import RouterConfigError
from router_client.pd.config import PdConfig
from shared.keepalive import CLIENT_MAX_IDLE_S

_STRICT = ConfigDict(extra="forbid", frozen=True)
_DNS_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def split_dns_target(target: str) -> tuple[str, int]:
    """``"NAME:PORT"`` → ``(NAME, PORT)``; ValueError naming the problem. NAME is a DNS name (its labels: letters,
    digits, ``-``, ``_``; a trailing dot allowed) or an IP literal (IPv6 in brackets)."""
    host, sep, port_text = target.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            name_ok = ipaddress.ip_address(host).version == 6
        except ValueError:
            name_ok = False
    else:
        labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
        name_ok = 0 < len(host) <= 253 and all(_DNS_LABEL.fullmatch(label) for label in labels)
    if not sep or not name_ok or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"discovery.dns must be NAME:PORT (e.g. vllm-short.latency-router.svc.cluster.local:8000), "
                         f"got {target!r}")
    return host, int(port_text)


class DiscoveryConfig(BaseModel):
    """A pool's pods found by name resolution instead of listed (``router_client/discovery.py``)."""

    model_config = _STRICT

    dns: str = Field(description="NAME:PORT; NAME (e.g. a headless Service) is resolved every refresh_s and every "
                     "address becomes a pod http://ADDR:PORT.")
    refresh_s: float = Field(default=5.0, description="Seconds between resolutions of NAME.", gt=0)

    @model_validator(mode="after")
    def _target(self) -> DiscoveryConfig:
        split_dns_target(self.dns)
        return self

    @property
    def host(self) -> str:
        return split_dns_target(self.dns)[0]

    @property
    def port(self) -> int:
        return split_dns_target(self.dns)[1]


class PoolConfig(BaseModel):
    """One pool of model servers sharing a configuration (and therefore one latency model)."""

    model_config = _STRICT

    name: str = Field(description="Pool name (e.g. 'short', 'long'); used in metrics and decisions.", min_length=1)
    pods: list[str] = Field(
        default_factory=list, description="Base URLs of the pool's model servers (http://host:port); give either "
        "pods or discovery.")
    discovery: DiscoveryConfig | None = Field(
        default=None, description="Find the pool's pods by resolving a name instead of listing them (see "
        "Discovery); give either pods or discovery.")
    max_context: int = Field(
        default=32768, description="Largest prompt + output tokens a pod of the pool accepts.", gt=0)
    trainer_url: str | None = Field(
        default=None, description="The pool's trainer; samples are flushed there (None: off).")
    predictor_urls: list[str] = Field(
        default_factory=list, description="Predictor replicas of the pool; bulk calls rotate over them "
        "(empty: always the composite fallback).")
    pod_type: str = Field(default="", description="llm-d role label sent as pod_type ('' = monolithic).")
    pod_class: str = Field(
        default="", description="Hardware / engine class of the pool's pods (e.g. 'a100-tp1'), sent as the "
        "pod_class feature so one model can serve pods that differ ('' = unknown).")
    pod_classes: dict[str, str] = Field(
        default_factory=dict, description="Per-pod pod_class overriding pod_class, by pod URL (a mixed pool: "
        "{\"http://10.0.0.5:8000\": \"h100-tp1\"}); every key must be one of pods (not with discovery: "
        "discovered pods take pod_class).")
    pd: PdConfig | None = Field(
        default=None, description="Prefill/decode disaggregation: this pool's pods decode, pd.prefill_pool's pods "
        "prefill; the router runs the two-phase request (see Prefill/decode disaggregation).")

    @model_validator(mode="after")
    def _pods_or_discovery(self) -> PoolConfig:
        if self.discovery is not None and self.pods:
            raise ValueError(f"pool {self.name!r}: give pods or discovery, not both")
        if self.discovery is None and not self.pods:
            raise ValueError(f"pool {self.name!r}: give pods (at least one URL) or discovery")
        if self.discovery is not None and self.pod_classes:
            raise ValueError(f"pool {self.name!r}: pod_classes is keyed by pod URL and discovered addresses change; "
                             "with discovery give pod_class (one class per discovered pool)")
        return self

    @model_validator(mode="after")
    def _classes_name_pods(self) -> PoolConfig:
        unknown = sorted(set(self.pod_classes) - set(self.pods))
        if unknown:
            raise ValueError(f"pool {self.name!r}: pod_classes names pods not in pods: {unknown}")
        return self

    def class_of(self, pod: str) -> str:
        """The pod_class sent for ``pod``."""
        return self.pod_classes.get(pod, self.pod_class)


class ClassifierConfig(BaseModel):
    """Pool choice by token budget. A request goes to the long pool iff its expected output exceeds
    ``output_threshold_tokens`` OR prompt + expected output exceeds ``total_threshold_tokens`` OR
    prompt + max_tokens (or + expected output when max_tokens is absent) does not fit the short
    pool's ``max_context``."""

    model_config = _STRICT

    short_pool: str = Field(
        default="short", description="Name of the short pool (if only one pool exists it takes all).")
    long_pool: str = Field(default="long", description="Name of the long pool.")
    output_threshold_tokens: int = Field(default=512, description="Expected output above this → long pool.", ge=0)
    total_threshold_tokens: int | None = Field(
        default=2048,
        description="Prompt + expected output above this → long pool (null: output threshold only).", ge=0)
    default_bytes_per_token: float = Field(
        default=4.0, description="Bytes of request body per prompt token before anything is learned.", gt=0)
    bytes_per_token_alpha: float = Field(
        default=0.05, description="EMA weight of each new usage.prompt_tokens observation (per route).", gt=0, le=1)
    default_output_tokens: int = Field(
        default=256, description="Expected output when max_tokens is absent and no history exists.", ge=1)
    output_percentile: float = Field(
        default=90.0,
        description="History percentile (per route / system-prompt hash) that caps max_tokens.", gt=0, le=100)
    history_size: int = Field(default=512, description="Recent output lengths kept per history key.", ge=1)
    history_min_samples: int = Field(default=20, description="Samples a history key needs before it is used.", ge=1)
    history_max_keys: int = Field(default=4096, description="Distinct system-prompt hashes tracked (LRU).", ge=1)


class PluginSpec(BaseModel):
    """A plugin by registry name, its weight (scorers only) and its parameters."""

    model_config = _STRICT

    name: str = Field(description="Registry name of the plugin.")
    weight: float = Field(default=1.0, description="Scorer weight (ignored for filters and pickers).", ge=0)
    params: dict[str, Any] = Field(default_factory=dict, description="Plugin parameters (validated by the plugin).")


class SchedulerConfig(BaseModel):
    """The filter → score → pick pipeline run inside the chosen pool."""

    model_config = _STRICT

    filters: list[PluginSpec] = Field(
        default_factory=lambda: [PluginSpec(name="prefix-affinity"), PluginSpec(name="slo-headroom")],
        description="Filters, in order (with predictions).")
    scorers: list[PluginSpec] = Field(
        default_factory=lambda: [PluginSpec(name="latency-headroom")],
        description="Scorers used when predictions are present.")
    fallback_scorers: list[PluginSpec] = Field(
        default_factory=lambda: [PluginSpec(name="composite")],
        description="Scorers used when predictions are missing.")
    picker: PluginSpec = Field(default_factory=lambda: PluginSpec(name="weighted-random"), description="Picker.")
    exploration: float = Field(
        default=0.02, description="Share of decisions routed to a uniformly random pod of the pool.", ge=0, le=1)
    min_share: float = Field(
        default=0.5, description="Anti-starvation bound: a pod whose recent share falls below min_share × fair share "
        "gets the next request of its pool (0 disables).", ge=0, le=1)
    share_window: int = Field(
        default=200,
        description="Decisions (per pool) over which recent shares are measured (exponential decay).", ge=2)
    seed: int | None = Field(default=None, description="Seed of the random choices (null: nondeterministic).")


class SloConfig(BaseModel):
    """SLO admission."""

    model_config = _STRICT

    default_ttft_ms: float | None = Field(default=None, description="TTFT SLO when a request carries none.", gt=0)
    default_tpot_ms: float | None = Field(default=None, description="TPOT SLO when a request carries none.", gt=0)
    retry_after_s: float = Field(default=1.0, description="Retry-After hint attached to shed decisions.", ge=0)
    admission_quantile: float | None = Field(
        default=None, description="Quantile SLO admission judges by (e.g. 0.99: a sheddable request is admitted "
        "only when some pod's p99 meets its SLO); the predictors are asked for it with ?quantiles=. Unset: the "
        "served quantile (p90) that routing uses.", gt=0, lt=1)


class PrefixConfig(BaseModel):
    """Approximate prefix-cache index (router-side)."""

    model_config = _STRICT

    block_bytes: int = Field(default=64, description="Bytes of prompt text per block (≈ 16 tokens).", ge=1)
    capacity_blocks: int = Field(default=65536, description="Block hashes remembered per pod (LRU).", ge=1)
    max_blocks_per_request: int = Field(default=2048, description="Leading blocks of a prompt that are hashed.", ge=1)


class ScraperConfig(BaseModel):
    """Background scrape of every pod's vLLM /metrics."""

    model_config = _STRICT

    interval_s: float = Field(default=0.1, description="Seconds between scrapes of each pod.", gt=0)
    timeout_s: float = Field(default=1.0, description="HTTP timeout of one scrape.", gt=0)
    stale_after_s: float = Field(
        default=2.0, description="A pod's metrics older than this count as stale (router_endpoint_staleness_seconds; "
        "the last values are still used, router-side in-flight is always current).", gt=0)


class ModelStatusConfig(BaseModel):
    """Background read of each pool's live models from a predictor's GET /status (``router_client/model_watch.py``)."""

    model_config = _STRICT

    interval_s: float = Field(default=5.0, description="Seconds between reads of each pool's predictor status.", gt=0)
    timeout_s: float = Field(default=2.0, description="HTTP timeout of one read; then the pool's next predictor URL.",
                             gt=0)
    history: int = Field(default=100, description="Bundle versions (with their model bases) kept per pool for the "
                         "status page.", ge=1)


class CorrectionConfig(BaseModel):
    """Per-pod correction: predictions for a pod are multiplied by a factor learned from that pod's recent
    actual / predicted ratios (``router_client/correction.py``)."""

    model_config = _STRICT

    enabled: bool = Field(default=True, description="Apply per-pod correction factors before scoring.")
    half_life_s: float = Field(
        default=30.0, description="Age at which a pair counts half; also the half-life of the decay to 1 while "
        "a pod gets no new pairs.", gt=0)
    min_factor: float = Field(default=0.5, description="Lower bound of a factor.", gt=0, le=1)
    max_factor: float = Field(default=4.0, description="Upper bound of a factor.", ge=1)
    min_samples: int = Field(default=20, description="Pairs a (pod, target) needs before its factor leaves 1.", ge=1)
    max_samples: int = Field(default=256, description="Recent pairs kept per (pod, target).", ge=1)
    evidence_z: float = Field(
        default=2.0, description="A factor stays 1 while the pod's raw coverage is within evidence_z binomial "
        "standard errors of the quantile (no evidence the model is off for that pod); 0: always fit.", ge=0)
    relative: bool = Field(
        default=True, description="Apply each pod's factor divided by the median factor of its pool: the pool's "
        "model owns what all pods share, the correction only what sets one pod apart.")

    @model_validator(mode="after")
    def _enough_room(self) -> CorrectionConfig:
        if self.max_samples < self.min_samples:
            raise ValueError(f"correction.max_samples ({self.max_samples}) < min_samples ({self.min_samples})")
        return self


class DriftConfig(BaseModel):
    """Drift detection on live predictions, per pod and per pool (``router_client/drift.py``)."""

    model_config = _STRICT

    half_life_s: float = Field(
        default=60.0, description="Coverage, pinball and means are time-weighted with this half-life.", gt=0)
    min_pairs: float = Field(
        default=20.0, description="Effective (time-weighted) pairs a series needs before the alarm is evaluated.",
        gt=0)
    coverage_low: float = Field(default=0.80, description="Coverage below this is out of band.", ge=0, le=1)
    coverage_high: float = Field(default=0.97, description="Coverage above this is out of band.", ge=0, le=1)
    alarm_after_s: float = Field(
        default=30.0, description="Seconds out of band before router_drift_alarm = 1 (one WARNING line).", ge=0)
    clear_after_s: float = Field(
        default=30.0, description="Seconds back in band before the alarm clears (one INFO line).", ge=0)

    @model_validator(mode="after")
    def _band(self) -> DriftConfig:
        if self.coverage_low > self.coverage_high:
            raise ValueError(f"drift.coverage_low ({self.coverage_low}) > coverage_high ({self.coverage_high})")
        return self


class ReporterConfig(BaseModel):
    """Training samples buffered per pool and flushed to the pool's trainer."""

    model_config = _STRICT

    flush_interval_s: float = Field(default=1.0, description="Seconds between flushes.", gt=0)
    max_buffer_rows: int = Field(
        default=20000, description="Rows kept per pool while the trainer is away (drop-oldest).",
                                 ge=1)
    max_flush_rows: int = Field(default=10000, description="Rows per POST /add_training_data_bulk.", ge=1)
    timeout_s: float = Field(default=5.0, description="HTTP timeout of a flush.", gt=0)
    max_idle_s: float = Field(
        default=CLIENT_MAX_IDLE_S, description="A kept-alive connection to a trainer idle longer than this is closed "
        "instead of reused; keep it below the trainers' LATENCY_KEEPALIVE_TIMEOUT_SEC (120).", gt=0)
    trainer_token: SecretStr | None = Field(
        default=None, description="Bearer token sent to every pool's trainer (its LATENCY_WRITE_TOKEN). Prefer "
        "trainer_token_file.", min_length=1)
    trainer_token_file: str | None = Field(
        default=None, description="File holding that token (e.g. a mounted Kubernetes Secret), re-read when it "
        "changes; while it is missing no token is sent.", min_length=1)

    @model_validator(mode="after")
    def _one_token_source(self) -> ReporterConfig:
        if self.trainer_token is not None and self.trainer_token_file is not None:
            raise ValueError("set reporter.trainer_token or reporter.trainer_token_file, not both")
        return self


class TuningConfig(BaseModel):
    """Threshold and pool-split tuning for a short/long pool pair (``router_client/pool_tuning.py``)."""

    model_config = _STRICT

    enabled: bool = Field(default=False, description="Observe budgets and pool pressure; publish recommendations.")
    apply: bool = Field(
        default=False, description="Apply the recommended total-token threshold to the classifier (the pool "
        "split is only recommended: pods are deployments).")
    interval_s: float = Field(default=60.0, description="Seconds between recommendations.", gt=0)
    window: int = Field(default=5000, description="Recent decisions whose token budgets are kept.", ge=10)
    min_samples: int = Field(default=500, description="Budgets needed before the first recommendation.", ge=1)
    min_threshold_tokens: int = Field(default=1024, description="Lowest total-token threshold recommended.", ge=1)
    max_threshold_tokens: int | None = Field(
        default=None, description="Highest total-token threshold recommended (null: the short pool's max_context).",
        ge=1)
    max_step_tokens: int = Field(default=1024, description="Largest threshold change per interval.", ge=1)
    queue_per_pod_high: float = Field(
        default=2.0, description="Waiting requests per pod (scraped) at which a pool counts as pressured.", gt=0)
    preemptions_per_1k_high: float = Field(
        default=5.0, description="Preemptions per 1,000 completions at which a pool counts as pressured.", gt=0)
    late_share_high: float = Field(
        default=0.05, description="Share of decisions predicted over their TTFT SLO at which a pool counts as "
        "pressured.", gt=0, le=1)
    hysteresis: float = Field(
        default=0.25, description="Pressure difference below which the pools count as balanced.", ge=0)
    step_work_share: float = Field(
        default=0.05, description="Share of all work (prompt + expected output tokens) one step moves between "
        "the pools.", gt=0, le=1)
    min_pods: int = Field(default=1, description="Pods every pool keeps in a recommended split.", ge=1)
    short_pool: str = Field(default="", description="Short pool ('' = classifier.short_pool).")
    long_pool: str = Field(default="", description="Long pool ('' = classifier.long_pool).")

    @model_validator(mode="after")
    def _bounds(self) -> TuningConfig:
        if self.max_threshold_tokens is not None and self.max_threshold_tokens < self.min_threshold_tokens:
            raise ValueError(f"tuning.max_threshold_tokens ({self.max_threshold_tokens}) < min_threshold_tokens "
                             f"({self.min_threshold_tokens})")
        return self


class RouterConfig(BaseModel):
    """The whole router-client configuration (the JSON file of ``--config``)."""

    model_config = _STRICT

    pools: list[PoolConfig] = Field(description="Pools (at least one).", min_length=1)
    classifier: ClassifierConfig = Field(default_factory=lambda: ClassifierConfig(), description="Pool classifier.")
    scheduler: SchedulerConfig = Field(default_factory=lambda: SchedulerConfig(), description="Scheduling pipeline.")
    slo: SloConfig = Field(default_factory=lambda: SloConfig(), description="SLO admission.")
    prefix: PrefixConfig = Field(default_factory=lambda: PrefixConfig(), description="Prefix index.")
    scraper: ScraperConfig = Field(default_factory=lambda: ScraperConfig(), description="Endpoint scraper.")
    reporter: ReporterConfig = Field(default_factory=lambda: ReporterConfig(), description="Sample reporter.")
    correction: CorrectionConfig = Field(
        default_factory=lambda: CorrectionConfig(), description="Per-pod correction of predictions.")
    drift: DriftConfig = Field(default_factory=lambda: DriftConfig(), description="Drift detection and alarm.")
    prediction_quantile: float = Field(
        default=0.9, description="Quantile the pools' models predict (the trainer's LATENCY_QUANTILE_ALPHA): the "
        "correction's target quantile and the pinball loss's.", gt=0, lt=1)
    tuning: TuningConfig = Field(default_factory=lambda: TuningConfig(), description="Threshold / pool-split tuning.")
    model_status: ModelStatusConfig = Field(
        default_factory=lambda: ModelStatusConfig(), description="Each pool's live models, read from its predictors.")
    predictor_timeout_ms: float = Field(
        default=5.0, description="Budget from the start of a decision to the predictions; then the fallback.", gt=0)
    predictor_http_timeout_ms: float = Field(
        default=250.0,
        description="Hard HTTP timeout of one bulk call; then its connection is closed (the decisions in it fall back "
        "at their own deadline, usually much earlier).", gt=0)
    coalesce_window_ms: float = Field(
        default=0.0,
        description="0: opportunistic coalescing (a decision is sent at once when no bulk call is in flight; "
        "decisions arriving meanwhile share the next call). > 0: the first queued decision waits this long for "
        "others to share its call.", ge=0)
    max_coalesced_rows: int = Field(
        default=10000, description="Row cap of one bulk call (contract limit).", ge=1, le=10000)
    predictor_backoff_s: float = Field(
        default=1.0, description="A predictor URL that failed is skipped for this long (unless all failed).", ge=0)
    predictor_max_idle_s: float = Field(
        default=CLIENT_MAX_IDLE_S, description="A kept-alive connection to a predictor idle longer than this is "
        "closed instead of reused; keep it below the predictors' LATENCY_KEEPALIVE_TIMEOUT_SEC (120; 4 for a "
        "server at uvicorn's default 5 s).", gt=0)

    @model_validator(mode="after")
    def _unique_pools(self) -> RouterConfig:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate pool names {names}")
        targets = [p.discovery.dns for p in self.pools if p.discovery is not None]
        if len(set(targets)) != len(targets):
            raise ValueError(f"two pools discover the same name: {targets}")
        return self

    @model_validator(mode="after")
    def _pd_pools(self) -> RouterConfig:
        names = {p.name for p in self.pools}
        for pool in self.pools:
            if pool.pd is None:
                continue
            target = pool.pd.prefill_pool
            if target not in names or target == pool.name or self.pool(target).pd is not None:
                raise ValueError(f"pool {pool.name!r}: pd.prefill_pool {target!r} must name another pool of pools "
                                 "without a pd section of its own")
            if pool.pod_type != "decode" or self.pool(target).pod_type != "prefill":
                raise ValueError(f"pool {pool.name!r} has a pd section: give it pod_type 'decode' and its prefill "
                                 f"pool {target!r} pod_type 'prefill' (the roles' training rows carry them)")
        if not self.serving_pools():
            raise ValueError("every pool is some pool's pd.prefill_pool: no pool is left to serve requests")
        return self

    @model_validator(mode="after")
    def _tuning_pools(self) -> RouterConfig:
        if not self.tuning.enabled:
            return self
        names = {p.name for p in self.pools}
        pair = self.tuning_pools()
        missing = sorted(set(pair) - names)
        if len(names) < 2 or missing or pair[0] == pair[1]:
            raise ValueError(f"tuning needs a short and a long pool; tuning pools {list(pair)}, "
                             f"configured {sorted(names)}")
        return self

    def tuning_pools(self) -> tuple[str, str]:
        """(short, long) pool names tuning works on."""
        t, c = self.tuning, self.classifier
        return (t.short_pool or c.short_pool, t.long_pool or c.long_pool)

    def prefill_pools(self) -> frozenset[str]:
        """Pools that only prefill for a P/D pool (the classifier never picks them)."""
        return frozenset(p.pd.prefill_pool for p in self.pools if p.pd is not None)

    def serving_pools(self) -> list[PoolConfig]:
        """The pools the classifier chooses from: all but the prefill pools."""
        prefill = self.prefill_pools()
        return [p for p in self.pools if p.name not in prefill]

    def pool(self, name: str) -> PoolConfig:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    @classmethod
    def load(cls, path: str | Path) -> RouterConfig:
        """Read and validate a JSON config file; raise ``RouterConfigError`` naming the problem."""
        try:
            data = orjson.loads(Path(path).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise RouterConfigError(f"cannot read router config {path}: {exc}") from None
        return cls.parse(data)

    @classmethod
    def parse(cls, data: Any) -> RouterConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise RouterConfigError(f"invalid router config: {exc}") from None
