"""The SLO a capacity search must meet, and how a run is judged against it.

Over the requests of the judged window (every request of the trace, or of the coarse slice after its
warm-up), with TTFT = time from arrival to the first token:

- ``attainment`` = requests whose TTFT ≤ ``ttft_ms`` / all requests (a request that was shed, aborted
  or never completed counts as a miss);
- ``p99_ttft_ms`` = the 99th percentile (numpy's linear interpolation) of the TTFT of the completed
  requests (infinite when none completed);
- the SLO is met iff ``p99_ttft_ms`` ≤ ``ttft_ms`` **and** ``attainment`` ≥ ``attainment`` (the target).

Both conditions are needed: the percentile alone ignores requests that never completed, the
attainment alone allows a tail far beyond ``ttft_ms`` when the target is below 0.99.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.engine.errors import ConfigError


@dataclass(frozen=True)
class Slo:
    ttft_ms: float = 2000.0
    attainment: float = 0.99
    percentile: float = 99.0

    def __post_init__(self) -> None:
        if not self.ttft_ms > 0:
            raise ConfigError(f"--slo-ttft-ms must be > 0, got {self.ttft_ms!r}")
        if not 0.0 < self.attainment <= 1.0:
            raise ConfigError(f"--attainment must be in (0, 1], got {self.attainment!r}")

    def as_dict(self) -> dict[str, float]:
        return {"ttft_ms": self.ttft_ms, "attainment": self.attainment, "percentile": self.percentile}


@dataclass(frozen=True)
class Verdict:
    requests: int
    completed: int
    within: int
    p99_ttft_ms: float
    attainment: float
    ok: bool

    def as_dict(self) -> dict[str, object]:
        p99 = self.p99_ttft_ms if math.isfinite(self.p99_ttft_ms) else None
        return {"requests": self.requests, "p99_ttft_ms": None if p99 is None else round(p99, 1),
                "attainment": round(self.attainment, 5), "ok": self.ok}


def judge(ttft_ms: np.ndarray, slo: Slo) -> Verdict:
    """``ttft_ms`` holds one entry per request (NaN: not completed)."""
    n = len(ttft_ms)
    done = ttft_ms[~np.isnan(ttft_ms)]
    within = int(np.count_nonzero(done <= slo.ttft_ms))
    attainment = within / n if n else 1.0
    tail = float(np.percentile(done, slo.percentile)) if len(done) else math.inf
    ok = tail <= slo.ttft_ms and attainment >= slo.attainment
    return Verdict(n, len(done), within, tail, attainment, ok)
