"""Cluster configuration: pools of pods (each pool with its own engine config, or groups of pods
with different presets in one pool) and router knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError
from sim.engine.kv_transfer import KVLink

ROLES = ("", "prefill", "decode", "both")
"""Pod roles (llm-d's ``llm-d.ai/role`` label): ``""`` aggregated (no label), ``prefill`` (prefill legs of
disaggregated requests), ``decode`` / ``both`` (decode legs, and whole requests the decider keeps local).
See :mod:`sim.cluster.disagg`."""
PREFILL = "prefill"
POD_TYPES = {"prefill": "prefill", "decode": "decode"}
"""Role → the ``pod_type`` feature a router sends for the pod (``both`` and ``""`` serve whole requests: ``""``)."""


@dataclass(frozen=True)
class PodGroupSpec:
    """``count`` pods of one engine config inside a pool."""

    count: int
    engine: EngineConfig
    pod_class: str = ""
    """Label routers may learn per-class latency from (default: the preset name)."""

    @property
    def label(self) -> str:
        return self.pod_class or self.engine.preset


@dataclass(frozen=True)
class PoolSpec:
    name: str
    count: int
    engine: EngineConfig
    """The pool's engine (for a mixed pool: the first group's)."""
    groups: tuple[PodGroupSpec, ...] = ()
    """Mixed pool: the pods in order, group by group (``count`` is their total)."""
    pod_class: str = ""
    role: str = ""
    """Every pod of the pool plays this role (:data:`ROLES`)."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"pool {self.name!r}: role must be one of {[r for r in ROLES if r]}, got {self.role!r}")
        if self.groups and self.count != sum(g.count for g in self.groups):
            raise ConfigError(f"pool {self.name!r}: count {self.count} is not the sum of its groups' counts")

    @classmethod
    def mixed(cls, name: str, groups: tuple[PodGroupSpec, ...]) -> PoolSpec:
        if not groups:
            raise ConfigError(f"pool {name!r}: 'groups' must not be empty")
        return cls(name, sum(g.count for g in groups), groups[0].engine, groups)

    def members(self) -> list[tuple[EngineConfig, str]]:
        """``(engine, pod_class)`` of every pod of the pool, in pod-index order."""
        groups = self.groups or (PodGroupSpec(self.count, self.engine, self.pod_class),)
        return [(g.engine, g.label) for g in groups for _ in range(g.count)]


@dataclass(frozen=True)
class PodPlan:
    pod_id: str
    pool: str
    engine: EngineConfig
    pod_class: str
    role: str = ""


@dataclass(frozen=True)
class ClusterConfig:
    pools: tuple[PoolSpec, ...]
    scrape_interval_s: float = 0.05
    """Metrics the policy sees are as of the last scrape tick (0 = always fresh)."""
    router_prefix_blocks: int | None = None
    """Capacity of the router's per-pod prefix index (default: the pod's KV blocks)."""
    fast_forward: bool = True
    expose_output_length: bool = False
    """Oracle: ``RequestView.expected_output_tokens`` carries the generated output length."""
    kv_link: KVLink = KVLink()
    """The link decode pods pull prefill pods' KV over (P/D disaggregation only)."""

    def pod_ids(self) -> list[tuple[str, str]]:
        """``(pod_id, pool)`` pairs; ids are ``<pool>-<i>`` (``pod-<i>`` for a single default pool)."""
        return [(p.pod_id, p.pool) for p in self.pods()]

    def pods(self) -> list[PodPlan]:
        out = []
        for pool in self.pools:
            for i, (engine, pod_class) in enumerate(pool.members()):
                out.append(PodPlan(f"{pool.name}-{i}", pool.name, engine, pod_class, pool.role))
        return out


def single_pool(count: int, engine: EngineConfig, **kwargs: Any) -> ClusterConfig:
    return ClusterConfig(pools=(PoolSpec("pod", count, engine),), **kwargs)


def parse_pools(spec: str, default_preset: str, overrides: dict[str, Any]) -> tuple[PoolSpec, ...]:
    """Parse ``name:count[:preset],...`` (e.g. ``short:6:llama3-8b-a100,long:2``)."""
    pools = []
    for part in spec.split(","):
        fields = part.strip().split(":")
        if len(fields) not in (2, 3) or not fields[1].isdigit():
            raise ConfigError(f"bad pool spec {part!r}; expected name:count[:preset]")
        preset = fields[2] if len(fields) == 3 else default_preset
        pools.append(PoolSpec(fields[0], int(fields[1]), EngineConfig.from_preset(preset, **overrides)))
    check_unique(pools)
    return tuple(pools)


def parse_pd(spec: str, preset: str, overrides: dict[str, Any]) -> tuple[PoolSpec, ...]:
    """``P:D`` → a ``prefill`` pool of P prefill-role pods and a ``decode`` pool of D decode-role pods."""
    fields = spec.split(":")
    if len(fields) != 2 or not all(f.isdigit() and int(f) > 0 for f in fields):
        raise ConfigError(f"bad --pd spec {spec!r}; expected P:D with P, D >= 1 (e.g. 6:2)")
    engine = EngineConfig.from_preset(preset, **overrides)
    return (PoolSpec("prefill", int(fields[0]), engine, role="prefill"),
            PoolSpec("decode", int(fields[1]), engine, role="decode"))


def check_unique(pools: list[PoolSpec]) -> None:
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate pool names in {names}")
    if any(p.count < 1 for p in pools) or any(g.count < 1 for p in pools for g in p.groups):
        raise ConfigError("every pool and group needs at least one pod")
