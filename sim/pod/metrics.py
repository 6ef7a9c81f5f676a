"""vLLM-named Prometheus metrics for one pod, in a registry of its own (no global state).

Gauges and counters derived from engine state are produced at scrape time by a collector;
latency histograms are observed by the engine thread as tokens are emitted. Times are simulated
seconds (equal to wall seconds when ``time_scale`` is 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sim.engine.sequence import Sequence
from sim.pod.view import EngineView

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0)


class _StateCollector(Collector):
    def __init__(self, model: str, view: Callable[[], EngineView]) -> None:
        self.model = model
        self.view = view

    def collect(self) -> Iterator[Metric]:
        v = self.view()
        lab = ["model_name"]
        gauges = [
            ("vllm:num_requests_waiting", "Requests waiting to be processed.", v.waiting),
            ("vllm:num_requests_running", "Requests in model execution batches.", v.running),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", v.kv_usage),
            ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage (legacy name), fraction 0..1.", v.kv_usage),
        ]
        for name, doc, value in gauges:
            g = GaugeMetricFamily(name, doc, labels=lab)
            g.add_metric([self.model], float(value))
            yield g
        counters = [
            ("vllm:num_preemptions", "Cumulative number of preemptions.", v.preemptions),
            ("vllm:prefix_cache_queries", "Prefix-cache queries, in tokens.", v.prefix_queries),
            ("vllm:prefix_cache_hits", "Prefix-cache hits, in tokens.", v.prefix_hits),
        ]
        for name, doc, value in counters:
            c = CounterMetricFamily(name, doc, labels=lab)
            c.add_metric([self.model], float(value))
            yield c


class PodMetrics:
    def __init__(self, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry(auto_describe=False)
        lab = ["model_name"]
        reg = self.registry
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", lab,
                              registry=reg, buckets=TTFT_BUCKETS).labels(model)
        self.tpot = Histogram("vllm:time_per_output_token_seconds", "Time per output token.", lab,
                              registry=reg, buckets=TPOT_BUCKETS).labels(model)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.", lab,
                             registry=reg, buckets=E2E_BUCKETS).labels(model)
        self._success = Counter("vllm:request_success", "Finished requests.",
                                ["model_name", "finished_reason"], registry=reg)
        for reason in ("stop", "length", "abort"):
            self._success.labels(model, reason)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed.", lab,
                                     registry=reg).labels(model)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generation tokens processed.", lab,
                                         registry=reg).labels(model)
        self.kv_transfer = Histogram("vllm:nixl_xfer_time_seconds", "KV transfer time of do_remote_prefill "
                                     "requests (vLLM's NIXL name; simulated: queueing on the link + bytes / "
                                     "bandwidth + latency).", lab, registry=reg, buckets=TTFT_BUCKETS).labels(model)
        self.kv_bytes = Counter("vllm:nixl_bytes_transferred", "KV bytes pulled from prefill pods.", lab,
                                registry=reg).labels(model)

    def attach_state(self, view: Callable[[], EngineView]) -> None:
        self.registry.register(_StateCollector(self.model, view))

    def observe_first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def observe_transfer(self, seconds: float, nbytes: float) -> None:
        self.kv_transfer.observe(seconds)
        self.kv_bytes.inc(nbytes)

    def observe_token_gap(self, seconds: float) -> None:
        self.tpot.observe(seconds)

    def observe_finished(self, seq: Sequence, reason: str) -> None:
        self._success.labels(self.model, reason).inc()
        self.prompt_tokens.inc(seq.prompt_len)
        self.generation_tokens.inc(seq.num_output)
        if seq.finish_time is not None:
            self.e2e.observe(seq.finish_time - seq.arrival)

    def render(self) -> bytes:
        return generate_latest(self.registry)
