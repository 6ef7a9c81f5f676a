"""Proxy-side Prometheus metrics, served on ``/metrics`` after the router library's registry.

llm-d names (gateway-api-inference-extension EPP, ``inference_objective_*``) are used where the
EPP has an equivalent, with a ``pool`` label added; proxy-only series use ``latency_router_proxy_``.
The full table (names, labels, meaning) is in ``router_client/proxy/README.md``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)
_TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1)
_OBJ = ("model_name", "target_model_name", "pool")


class ProxyMetrics:
    """Counters and histograms of one proxy process (own registry; nothing global)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("inference_objective_request_total", "Requests routed to a pod.", _OBJ, registry=r)
        self.errors = Counter("inference_objective_request_error_total", "Requests that failed.",
                              (*_OBJ, "error_code"), registry=r)
        self.ttft = Histogram("inference_objective_request_ttft_seconds", "Measured TTFT.", _OBJ,
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.predicted_ttft = Histogram("inference_objective_request_predicted_ttft_seconds",
                                        "Predicted TTFT of the chosen pod.", _OBJ, buckets=_LATENCY_BUCKETS,
                                        registry=r)
        self.tpot = Histogram("inference_objective_request_tpot_seconds", "Measured TPOT.", _OBJ,
                              buckets=_TPOT_BUCKETS, registry=r)
        self.predicted_tpot = Histogram("inference_objective_request_predicted_tpot_seconds",
                                        "Predicted TPOT of the chosen pod.", _OBJ, buckets=_TPOT_BUCKETS, registry=r)
        self.input_tokens = Histogram("inference_objective_input_tokens", "Prompt tokens (pod usage).", _OBJ,
                                      buckets=_TOKEN_BUCKETS, registry=r)
        self.output_tokens = Histogram("inference_objective_output_tokens", "Completion tokens (pod usage).",
                                       _OBJ, buckets=_TOKEN_BUCKETS, registry=r)
        self.decisions = Counter("latency_router_proxy_decisions_total", "Routing decisions that picked a pod.",
                                 ("pool", "pod", "fallback"), registry=r)
        self.fallbacks = Counter("latency_router_proxy_fallbacks_total", "Decisions taken without predictions.",
                                 ("pool",), registry=r)
        self.shed = Counter("latency_router_proxy_shed_total", "Requests shed (429).", ("pool",), registry=r)
        self.stream_errors = Counter("latency_router_proxy_stream_errors_total",
                                     "Streams cut by the pod after the first byte.", ("pool", "pod"), registry=r)
        self.responses = Counter("latency_router_proxy_responses_total", "Responses sent to clients.",
                                 ("route", "code"), registry=r)
        self.relay_paths = Counter("latency_router_proxy_relay_streams_total",
                                   "Streams relayed, by downstream writer (direct = from the pod connection's "
                                   "callback; asgi = through the ASGI send).", ("path",), registry=r)
        self.overhead = Histogram("latency_router_proxy_overhead_seconds",
                                  "Request received to upstream request sent.", buckets=_OVERHEAD_BUCKETS, registry=r)

        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Counter | Histogram, *values: str) -> Any:
        """``metric.labels(*values)``, cached (label sets are few: pools, pods, codes; the lookup is
        a measurable share of the proxy's CPU per request otherwise)."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def decided(self, pool: str, pod: str | None, fallback: bool, shed: bool) -> None:
        if fallback:
            self.child(self.fallbacks, pool).inc()
        if shed:
            self.child(self.shed, pool).inc()
        elif pod is not None:
            self.child(self.decisions, pool, pod, "true" if fallback else "false").inc()

    def observe_predictions(self, labels: tuple[str, str, str], ttft_ms: float | None, tpot_ms: float | None) -> None:
        if ttft_ms is not None:
            self.child(self.predicted_ttft, *labels).observe(ttft_ms / 1000.0)
        if tpot_ms is not None:
            self.child(self.predicted_tpot, *labels).observe(tpot_ms / 1000.0)

    def observe_outcome(self, labels: tuple[str, str, str], outcome: Outcome) -> None:
        self.child(self.requests, *labels).inc()
        if outcome.error_code is not None:
            self.child(self.errors, *labels, outcome.error_code).inc()
            return
        if outcome.ttft_ms is not None:
            self.child(self.ttft, *labels).observe(outcome.ttft_ms / 1000.0)
        if outcome.tpot_ms is not None:
            self.child(self.tpot, *labels).observe(outcome.tpot_ms / 1000.0)
        if outcome.prompt_tokens is not None:
            self.child(self.input_tokens, *labels).observe(outcome.prompt_tokens)
        if outcome.output_tokens:
            self.child(self.output_tokens, *labels).observe(outcome.output_tokens)

    def render(self, *extra: CollectorRegistry) -> bytes:
        return b"".join(generate_latest(reg) for reg in extra) + generate_latest(self.registry)


class Outcome:
    """What one forwarded request measured (ms and token counts; ``error_code`` set on failure)."""

    __slots__ = ("ttft_ms", "e2e_ms", "output_tokens", "prompt_tokens", "error_code")

    def __init__(self, ttft_ms: float | None, e2e_ms: float, output_tokens: int, prompt_tokens: int | None,
                 error_code: str | None = None) -> None:
        self.ttft_ms = ttft_ms
        self.e2e_ms = e2e_ms
        self.output_tokens = output_tokens
        self.prompt_tokens = prompt_tokens
        self.error_code = error_code

    @property
    def tpot_ms(self) -> float | None:
        if self.ttft_ms is None or self.output_tokens < 2:
            return None
        return max(0.0, (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1))
