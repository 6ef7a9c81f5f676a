"""``python -m demo``'s load: by default the trace's busiest stretch, so that the router's classifier sends every
pool the pairs its verdict needs; the real-engine demo keeps the trace's start at its own, lower rate."""

from __future__ import annotations

from collections import Counter

from demo.__main__ import parse_args
from demo.stack import LONG, SHORT
from demo.workload import load_trace
from router_client.classifier import PoolClassifier
from router_client.config import ClassifierConfig, PoolConfig
from router_client.request import RequestInfo

ROUTE = "/v1/chat/completions"


def _pools_chosen(argv: list[str]) -> Counter[str]:
    """The pool the router's classifier (the demo's configuration: its defaults) picks for each request of the
    demo's load, learning output lengths as requests finish (here: in arrival order)."""
    args = parse_args(argv)
    pools = [PoolConfig(name=p.name, pods=[f"http://{p.name}"], max_context=p.max_model_len) for p in (SHORT, LONG)]
    classifier = PoolClassifier(ClassifierConfig(), pools)
    chosen: Counter[str] = Counter()
    for row in load_trace(args.trace, args.rate_scale, args.duration, args.trace_start):
        info = RequestInfo(ROUTE, 4 * row.prompt_tokens, row.prompt_tokens, row.output_tokens)
        chosen[classifier.classify(info).pool] += 1
        classifier.observe(info, row.prompt_tokens, row.output_tokens)
    return chosen


def test_the_default_load_sends_at_least_200_requests_to_each_pool() -> None:
    chosen = _pools_chosen([])
    assert chosen["long"] >= 200 and chosen["short"] >= 200, chosen
    assert sum(chosen.values()) < 1200, chosen  # the rate the stack serves on two cores (~17 requests/s)
    assert _pools_chosen(["--trace-start", "0", "--rate-scale", "3"])["long"] < 100  # the trace's start: too few


def test_the_engine_demo_keeps_the_trace_start_at_its_own_rate() -> None:
    args = parse_args(["--engines", "2"])
    assert (args.trace_start, args.rate_scale, args.duration) == (0.0, 0.2, 120.0)
    sim = parse_args([])
    assert (sim.trace_start, sim.rate_scale, sim.duration) == (1500.0, 2.5, 60.0)
