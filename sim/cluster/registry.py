"""Name -> factory registry for routing policies, open to external registration.

Other packages register with :func:`register_policy` at import time of their plugin module; the
replay CLI imports such modules with ``--policy-module pkg.mod`` (a module may also expose
``register_policies(registry)`` which is then called with the registry).
"""

from __future__ import annotations

import importlib

from sim.cluster.builtin import BUILTIN_POLICIES
from sim.cluster.policy import Policy, PolicyContext, PolicyFactory
from sim.engine.errors import ConfigError

PIPELINE_MODULES: dict[str, tuple[str, str]] = {
    "predicted-latency": ("sim.policies.predicted_latency", "predicted_latency"),
    "dual-pool": ("sim.policies.predicted_latency", "dual_pool"),
    "load-prefix": ("sim.policies.load_prefix", "load_prefix"),
    "dual-pool-round-robin": ("sim.policies.pool_round_robin", "DualPoolRoundRobin"),
    "pd-round-robin": ("sim.policies.pd.round_robin", "pd_round_robin"),
    "pd-load-prefix": ("sim.policies.pd.load_prefix", "pd_load_prefix"),
    "pd-predicted-latency": ("sim.policies.pd.predicted", "pd_predicted_latency"),
    "pd-predicted-latency-slo": ("sim.policies.pd.pairs", "pd_predicted_latency_slo"),
    "clairvoyant": ("sim.policies.clairvoyant", "clairvoyant"),
}
"""The pipeline policies of ``sim/policies`` (imported on first build: they load XGBoost)."""


def _lazy(module: str, attr: str) -> PolicyFactory:
    def build(ctx: PolicyContext) -> Policy:
        factory: PolicyFactory = getattr(importlib.import_module(module), attr)
        return factory(ctx)
    return build


PIPELINE_POLICIES: dict[str, PolicyFactory] = {name: _lazy(*where) for name, where in PIPELINE_MODULES.items()}


class PolicyRegistry:
    def __init__(self, with_builtins: bool = True) -> None:
        self._factories: dict[str, PolicyFactory] = {}
        if with_builtins:
            for name, factory in {**BUILTIN_POLICIES, **PIPELINE_POLICIES}.items():
                self.register(name, factory)

    def register(self, name: str, factory: PolicyFactory, *, replace: bool = False) -> None:
        if not name or "," in name:
            raise ConfigError(f"invalid policy name {name!r}")
        if name in self._factories and not replace:
            raise ConfigError(f"policy {name!r} already registered (pass replace=True to override)")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def build(self, name: str, ctx: PolicyContext) -> Policy:
        try:
            factory = self._factories[name]
        except KeyError:
            raise ConfigError(f"unknown policy {name!r}; available: {', '.join(self.names())}") from None
        try:
            return factory(ctx)
        except ValueError as exc:
            raise ConfigError(f"policy {name!r}: {exc}") from exc

    def load_module(self, module: str) -> None:
        """Import a plugin module; call its ``register_policies(registry)`` if it has one."""
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"cannot import policy module {module!r}: {exc}") from exc
        hook = getattr(mod, "register_policies", None)
        if callable(hook):
            hook(self)


_default_registry: PolicyRegistry | None = None


def default_registry() -> PolicyRegistry:
    """The process-wide registry used by the CLI (created on first use, builtins included)."""
    global _default_registry
    if _default_registry is None:
        _default_registry = PolicyRegistry()
    return _default_registry


def register_policy(name: str, factory: PolicyFactory, *, replace: bool = False) -> None:
    """Register ``factory`` under ``name`` in the default registry (plugin entry point)."""
    default_registry().register(name, factory, replace=replace)


def available_policies() -> list[str]:
    return default_registry().names()
