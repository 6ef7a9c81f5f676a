"""Latency percentiles and throughput of a run, and the real-vs-simulated rows of ``sim_fidelity``.

TTFT and E2E are per request from its send time; TPOT is ``(e2e - ttft) / (tokens - 1)`` per request
(single-token requests have none); percentiles are linear-interpolated (numpy's default). Throughput is
completed requests over the time from the first arrival to the last completion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.engine.openloop import OpenLoopResult

METRICS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "e2e_p50", "e2e_p90",
           "e2e_p99", "throughput_rps")
QUANTILES = (50, 90, 99)


@dataclass(frozen=True)
class Outcome:
    arrival_s: float
    ttft_s: float
    tpot_s: float | None
    e2e_s: float


def from_sim(results: Sequence[OpenLoopResult]) -> list[Outcome]:
    return [Outcome(r.arrival_s, r.ttft_s, r.tpot_s, r.e2e_s) for r in results]


def summarize(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """Every metric of :data:`METRICS`; latencies in ms."""
    if not outcomes:
        raise ValueError("no outcomes to summarize")
    series = {
        "ttft": [o.ttft_s for o in outcomes],
        "tpot": [o.tpot_s for o in outcomes if o.tpot_s is not None],
        "e2e": [o.e2e_s for o in outcomes],
    }
    out: dict[str, float] = {}
    for name, values in series.items():
        for q in QUANTILES:
            out[f"{name}_p{q}"] = float(np.percentile(values, q)) * 1e3 if values else float("nan")
    first = min(o.arrival_s for o in outcomes)
    last = max(o.arrival_s + o.e2e_s for o in outcomes)
    out["throughput_rps"] = len(outcomes) / (last - first)
    return out


def compare(load: float, real: Mapping[str, float], sim: Mapping[str, float]) -> list[dict[str, Any]]:
    return [{"load": load, "metric": m, "real": round(real[m], 4), "sim": round(sim[m], 4),
             "rel_err": round((sim[m] - real[m]) / real[m], 4)} for m in METRICS]


def noise(load: float, first: Mapping[str, float], second: Mapping[str, float]) -> list[dict[str, Any]]:
    """The same load played twice on the engine: ``rel_diff = (second - first) / first``."""
    return [{"load": load, "metric": m, "first": round(first[m], 4), "second": round(second[m], 4),
             "rel_diff": round((second[m] - first[m]) / first[m], 4)} for m in METRICS]
