"""The configurations the aggregated-vs-P/D comparison replays, at equal GPUs.

One engine (preset, tensor-parallel degree, engine overrides) for every pod, so GPUs = pods × TP in both:

- **aggregated**: one pool of ``n`` pods serving whole requests;
- **P/D** ``P:D``: ``P`` prefill-role pods + ``D`` decode-role pods (``P + D = n``), the KV shipped over
  ``link`` (:mod:`sim.cluster.disagg`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.cluster.config import ClusterConfig, PoolSpec
from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError
from sim.engine.kv_transfer import KVLink

AGGREGATED, PD = "aggregated", "pd"
Pods = tuple[int, ...]
"""``(n,)`` aggregated, ``(P, D)`` disaggregated."""


@dataclass(frozen=True)
class PdSpace:
    preset: str
    tp: int | None = None
    """None: the preset's."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    link: KVLink = KVLink()
    policy: str = "load-prefix"
    """The aggregated replay's policy."""
    pd_policy: str = "pd-load-prefix"
    options: Mapping[str, str] = field(default_factory=dict)
    pd_options: Mapping[str, str] = field(default_factory=dict)
    max_pods: int = 64

    def __post_init__(self) -> None:
        if self.max_pods < 2:
            raise ConfigError(f"--max-pods must be >= 2 to hold a prefill and a decode pod, got {self.max_pods}")
        self.engine()

    def engine(self) -> EngineConfig:
        kw = dict(self.overrides)
        if self.tp is not None:
            kw["tensor_parallel_size"] = self.tp
        return EngineConfig.from_preset(self.preset, **kw)

    @property
    def gpus_per_pod(self) -> int:
        return self.engine().tensor_parallel_size

    def cluster(self, pods: Pods) -> ClusterConfig:
        engine = self.engine()
        if len(pods) == 1:
            return ClusterConfig(pools=(PoolSpec("pod", pods[0], engine),), kv_link=self.link)
        p, d = pods
        return ClusterConfig(pools=(PoolSpec("prefill", p, engine, role="prefill"),
                                    PoolSpec("decode", d, engine, role="decode")), kv_link=self.link)

    def policy_of(self, pods: Pods) -> tuple[str, dict[str, str]]:
        return (self.policy, dict(self.options)) if len(pods) == 1 else (self.pd_policy, dict(self.pd_options))


def label(pods: Pods) -> str:
    return f"{pods[0]} pods" if len(pods) == 1 else f"{pods[0]}P:{pods[1]}D"
