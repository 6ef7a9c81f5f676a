"""Configuration of one simulated pod server."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sim.engine.config import EngineConfig
from sim.engine.kv_transfer import KVLink
from sim.scenario import TimedEvent


@dataclass(frozen=True)
class PodConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    time_scale: float = 1.0
    """Real seconds per simulated second: 0.1 runs ten times faster than real time."""
    output_trace: Path | None = None
    """Trace whose output lengths are drawn when a request gives neither output_tokens nor max_tokens."""
    max_queue: int = 10_000
    """Requests waiting in the engine beyond this are refused with 503."""
    pool: str = ""
    """Free-form pool label (shown in /health)."""
    pod_id: str = "pod-0"
    """Identity in scenario files and ``/admin/scenario`` (``sim.pod`` names pod ``i`` ``pod-<i>``)."""
    scenario: tuple[TimedEvent, ...] = ()
    """Scheduled changes; ``at_s`` = virtual seconds since the pod started (events of other pods ignored)."""
    max_lag_s: float = 0.025
    """Real seconds the engine may run behind the wall clock (GIL / CPU jitter) before its simulated
    clock is pushed forward; larger keeps simulated latencies exact under CPU contention, smaller keeps
    client-observed latencies closer to the simulated ones."""
    role: str = "both"
    """P/D role (``prefill``, ``decode``, ``both``; shown in /health): a prefill pod refuses ``do_remote_prefill``
    requests, a decode pod ``do_remote_decode`` ones; ordinary requests go to every role (``sim/pod/transfer.py``)."""
    kv_link: KVLink = field(default_factory=KVLink)
    """The ingress link prompt KV of ``do_remote_prefill`` requests arrives over."""
