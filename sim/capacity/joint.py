"""The joint SLO of the aggregated-vs-P/D comparison: TTFT P99 **and** TPOT P99, judged on one replay.

Over the judged requests of a window: a request that never completed (shed, aborted, unfinished) counts as an
infinite TTFT (so it lands in the tail rather than vanishing from it); TPOT is taken over completed requests with
more than one output token (a one-token answer has none). The SLO is met iff ``p99 TTFT <= ttft_ms`` and
``p99 TPOT <= tpot_ms``. Disaggregation trades one for the other — prefill pods take prompts off the decode
pods' steps (TPOT) while the KV transfer and a smaller prefill fleet add to TTFT — so a GPU count is only
enough when both hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.cluster.simulation import RequestRecord
from sim.engine.errors import ConfigError

PERCENTILE = 99.0


@dataclass(frozen=True)
class JointSlo:
    ttft_ms: float
    tpot_ms: float

    def __post_init__(self) -> None:
        if not (self.ttft_ms > 0 and self.tpot_ms > 0):
            raise ConfigError(f"--slo-ttft-ms and --slo-tpot-ms must be > 0, got {self.ttft_ms}, {self.tpot_ms}")

    def as_dict(self) -> dict[str, float]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "percentile": PERCENTILE}


@dataclass(frozen=True)
class JointVerdict:
    requests: int
    completed: int
    p99_ttft_ms: float
    p99_tpot_ms: float
    p50_ttft_ms: float
    p50_tpot_ms: float
    ttft_ok: bool
    tpot_ok: bool

    @property
    def ok(self) -> bool:
        return self.ttft_ok and self.tpot_ok

    def as_dict(self) -> dict[str, object]:
        return {"requests": self.requests, "completed": self.completed, "p99_ttft_ms": _round(self.p99_ttft_ms),
                "p99_tpot_ms": _round(self.p99_tpot_ms, 2), "p50_ttft_ms": _round(self.p50_ttft_ms),
                "p50_tpot_ms": _round(self.p50_tpot_ms, 2), "ttft_ok": self.ttft_ok, "tpot_ok": self.tpot_ok,
                "ok": self.ok}


def _round(v: float, digits: int = 1) -> float | None:
    return round(v, digits) if math.isfinite(v) else None


def _pct(values: np.ndarray, q: float) -> float:
    """numpy's linear percentile; interpolating between two infinite TTFTs (inf - inf) is infinite too."""
    if not len(values):
        return math.inf
    with np.errstate(invalid="ignore"):
        v = float(np.percentile(values, q))
    return math.inf if math.isnan(v) else v


def judge_joint(records: Sequence[RequestRecord], slo: JointSlo) -> JointVerdict:
    ttft = np.array([math.inf if r.ttft_ms is None else r.ttft_ms for r in records], dtype=np.float64)
    tpot = np.array([r.tpot_ms for r in records if r.ttft_ms is not None and r.tpot_ms is not None
                     and r.output_tokens > 1], dtype=np.float64)
    completed = int(np.count_nonzero(np.isfinite(ttft)))
    p99_ttft, p99_tpot = _pct(ttft, PERCENTILE), _pct(tpot, PERCENTILE)
    return JointVerdict(len(records), completed, p99_ttft, p99_tpot, _pct(ttft, 50.0), _pct(tpot, 50.0),
                        p99_ttft <= slo.ttft_ms, p99_tpot <= slo.tpot_ms or not len(tpot))
