"""Plugin registry: name → (kind, factory, parameter model). Unknown names or parameters fail at start-up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from router_client.config import PluginSpec
from router_client.errors import RouterConfigError
from router_client.scheduling.contracts import Filter, Picker, Scorer
from router_client.scheduling.filters import prefix_affinity, slo_headroom
from router_client.scheduling.pickers import max_score, round_robin, weighted_random
from router_client.scheduling.scorers import (
    composite,
    in_flight,
    kv_utilization,
    latency_headroom,
    prefix_cache,
    queue_depth,
)


@dataclass(frozen=True)
class PluginType:
    kind: str
    """"filter" | "scorer" | "picker"."""
    factory: Callable[[Any], Any]
    params: type[BaseModel]


class PluginRegistry:
    def __init__(self) -> None:
        self._types: dict[str, PluginType] = {}

    def register(self, name: str, kind: str, factory: Callable[[Any], Any], params: type[BaseModel]) -> None:
        if name in self._types:
            raise RouterConfigError(f"plugin {name!r} already registered")
        self._types[name] = PluginType(kind, factory, params)

    def names(self, kind: str) -> list[str]:
        return sorted(n for n, t in self._types.items() if t.kind == kind)

    def _build(self, spec: PluginSpec, kind: str) -> Any:
        plugin = self._types.get(spec.name)
        if plugin is None or plugin.kind != kind:
            raise RouterConfigError(f"unknown {kind} plugin {spec.name!r}; available: {self.names(kind)}")
        try:
            params = plugin.params.model_validate(spec.params)
        except ValidationError as exc:
            raise RouterConfigError(f"{kind} {spec.name!r}: invalid params: {exc}") from None
        return plugin.factory(params)

    def filter(self, spec: PluginSpec) -> Filter:
        built: Filter = self._build(spec, "filter")
        return built

    def scorer(self, spec: PluginSpec) -> Scorer:
        built: Scorer = self._build(spec, "scorer")
        return built

    def picker(self, spec: PluginSpec) -> Picker:
        built: Picker = self._build(spec, "picker")
        return built


def default_registry() -> PluginRegistry:
    """A registry holding every built-in plugin (a new one per call: no module-level state)."""
    reg = PluginRegistry()
    reg.register("prefix-affinity", "filter", prefix_affinity.PrefixAffinity, prefix_affinity.Params)
    reg.register("slo-headroom", "filter", slo_headroom.SloHeadroom, slo_headroom.Params)
    reg.register("latency-headroom", "scorer", latency_headroom.LatencyHeadroom, latency_headroom.Params)
    reg.register("composite", "scorer", composite.Composite, composite.Params)
    reg.register("queue-scorer", "scorer", queue_depth.QueueDepth, queue_depth.Params)
    reg.register("kv-cache-utilization-scorer", "scorer", kv_utilization.KvUtilization, kv_utilization.Params)
    reg.register("prefix-cache-scorer", "scorer", prefix_cache.PrefixCache, prefix_cache.Params)
    reg.register("in-flight-scorer", "scorer", in_flight.InFlight, in_flight.Params)
    reg.register("weighted-random", "picker", weighted_random.WeightedRandom, weighted_random.Params)
    reg.register("max", "picker", max_score.MaxScore, max_score.Params)
    reg.register("round-robin", "picker", round_robin.RoundRobin, round_robin.Params)
    return reg
