"""Routing-policy contract for the cluster replay (the only module a policy needs to import).

A policy sees what a real router sees, never the simulator's hidden state:

- a :class:`RequestView` of the incoming request;
- one :class:`PodSnapshot` per candidate pod: :class:`ScrapedMetrics` (vLLM ``/metrics`` as of the
  last scrape, so up to ``scrape_interval_s`` stale) plus router-side state (in-flight requests,
  uncached prefill tokens in flight, the router's approximate prefix-cache score) and the pool.

It returns a :class:`Decision` (a pod, or shed with a reason; optional predicted TTFT/TPOT so the
replay can report prediction error) and receives a :class:`Completion` per finished request,
carrying the training sample a router would send to the trainer.

Policies are built by a :data:`PolicyFactory` from a :class:`PolicyContext` and registered by name
in :mod:`sim.cluster.registry`. ``choose`` must not raise for ordinary inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from router_client.candidates import pod_row
from shared.features import RAW_FEATURE_NAMES, TARGET_FIELDS, FeatureRow

FEATURE_FIELDS: tuple[str, ...] = RAW_FEATURE_NAMES
"""The PredictionRequest fields of the llm-d wire contract (section 2.1), then our extensions (``pod_class``),
in order (``shared.features``)."""

TRAINING_FIELDS: tuple[str, ...] = FEATURE_FIELDS + tuple(f.name for f in TARGET_FIELDS)
"""Keys of a TrainingEntry row (section 2.2) as written by the replay."""


@dataclass(frozen=True)
class RequestView:
    request_id: str
    arrival_s: float
    prompt_tokens: int
    expected_output_tokens: int | None
    """The output length the pod will generate: None unless the replay runs with the oracle
    ``--expose-output-length`` (a real router does not know it)."""
    max_output_tokens: int | None
    """The client's ``max_tokens`` (None: no cap); the pod generates at most this many tokens."""
    prefix_key: str
    """Session / conversation identity (stable across turns)."""
    block_hashes: tuple[int, ...]
    """Hashes of the prompt's full 16-token blocks, chained from the start."""
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None


@dataclass(frozen=True)
class ScrapedMetrics:
    num_requests_waiting: int
    num_requests_running: int
    kv_cache_usage: float
    """Fraction 0..1 (``vllm:kv_cache_usage_perc``)."""
    num_preemptions_total: int
    scraped_at_s: float


@dataclass(frozen=True)
class PodSnapshot:
    pod_id: str
    pool: str
    max_model_len: int
    metrics: ScrapedMetrics
    in_flight: int
    """Requests dispatched by the router to this pod and not completed yet."""
    prefill_tokens_in_flight: int
    """Uncached prompt tokens of in-flight requests that have not produced a first token."""
    prefix_cache_score: float
    """Router-side index: matched leading blocks / prompt blocks, 0..1."""
    pod_type: str = ""
    pod_class: str = ""
    """Hardware / engine class of the pod (the preset name unless the cluster file names it), sent as the
    ``pod_class`` extension feature so one model can serve a mixed pool ("" = unknown)."""

    def features(self, request: RequestView, num_tokens_generated: int = 1) -> FeatureRow:
        """The contract fields exactly as a router sends them for this (request, pod)
        (:func:`router_client.candidates.pod_row`, which the router's endpoint state uses too)."""
        return pod_row(prompt_tokens=request.prompt_tokens, kv_cache=self.metrics.kv_cache_usage,
                       waiting=self.metrics.num_requests_waiting, running=self.in_flight,
                       prefill_tokens_in_flight=self.prefill_tokens_in_flight, prefix_score=self.prefix_cache_score,
                       pod_type=self.pod_type, pod_class=self.pod_class, num_tokens_generated=num_tokens_generated)


@dataclass(frozen=True)
class Decision:
    pod_id: str | None
    """The pod that serves the request: on a P/D cluster the decode pod (it streams the tokens)."""
    shed_reason: str | None = None
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    prefill_pod_id: str | None = None
    """P/D clusters: a ``prefill`` pod to prefill on before ``pod_id`` decodes (None: ``pod_id`` does both)."""

    @classmethod
    def route(
        cls, pod_id: str, predicted_ttft_ms: float | None = None, predicted_tpot_ms: float | None = None,
        prefill_pod_id: str | None = None,
    ) -> Decision:
        return cls(pod_id, None, predicted_ttft_ms, predicted_tpot_ms, prefill_pod_id)

    @classmethod
    def shed(cls, reason: str) -> Decision:
        return cls(None, reason)


@dataclass(frozen=True)
class PrefillLeg:
    """The prefill half of a disaggregated request (:mod:`sim.cluster.disagg`)."""

    pod_id: str
    pool: str
    features: Mapping[str, float | int | str]
    """The prefill pod's features at dispatch (``pod_type`` ``prefill``)."""
    sample: Mapping[str, float | int | str]
    """Its TrainingEntry row: ``actual_ttft_ms`` = arrival → the prefill pod's one token, ``actual_tpot_ms`` 0."""
    ttft_ms: float


@dataclass(frozen=True)
class Completion:
    request: RequestView
    pod_id: str
    pool: str
    features: Mapping[str, float | int | str]
    """Features recorded at dispatch (``num_tokens_generated`` = 1, as sent for prediction)."""
    sample: Mapping[str, float | int | str]
    """TrainingEntry row: the features with ``num_tokens_generated`` = 0 plus the actuals."""
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    output_tokens: int
    prefix_hit_fraction: float
    preemptions: int
    finished_at_s: float
    prefill: PrefillLeg | None = None
    """Disaggregated requests: the prefill leg (then ``sample`` is the decode leg's row: ``actual_ttft_ms`` from
    reaching the decode pod to the first token, ``pod_type`` ``decode``; ``ttft_ms`` stays end to end)."""


@dataclass(frozen=True)
class PolicyContext:
    """Handed to a factory once per replay run."""

    seed: int
    pods: Sequence[tuple[str, str]]
    """``(pod_id, pool)`` of every pod in the cluster, in a stable order."""
    options: Mapping[str, str] = field(default_factory=dict)
    """Free-form ``--policy-opt key=value`` pairs; unknown keys should raise ValueError at build."""
    pod_classes: Mapping[str, str] = field(default_factory=dict)
    """``pod_id -> pod_class`` (see :attr:`PodSnapshot.pod_class`)."""
    pod_roles: Mapping[str, str] = field(default_factory=dict)
    """``pod_id -> role`` (``prefill``, ``decode``, ``both``, ``""``: :data:`sim.cluster.config.ROLES`)."""


@runtime_checkable
class Policy(Protocol):
    name: str

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        """Pick one of ``pods`` (never empty: the replay sheds when no pod fits) or shed."""
        ...

    def on_complete(self, completion: Completion) -> None:
        """Called once per completed request, in completion-time order."""
        ...


PolicyFactory = Callable[[PolicyContext], Policy]
