"""What a capacity search varies: the pools' shapes (engine per tensor-parallel degree), the pod counts
and, for two pools, the threshold between them.

- **single** (one pool ``pod``): pods × TP options;
- **dual** (pools ``short`` and ``long``): short pods × long pods × TP per pool × *thresholds*, a
  threshold being the short pool's ``max_model_len`` (the classifier's context rule: a request goes
  short iff prompt + ``max_tokens`` fits it) and optionally a total-token threshold (prompt + expected
  output) below it.

The three configurations of the paper's table (``--compare``, or ``--config``):

| config | pools |
| --- | --- |
| ``single-worst-case`` | one pool at the long context, ``worst-case`` provisioning (no preemption possible) |
| ``single-aggressive`` | one pool at the long context, ``aggressive`` (vLLM defaults, preemption by recompute) |
| ``dual-pool`` | ``short`` at a short context + ``long`` at the long context, both ``worst-case`` |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.cluster.config import PoolSpec
from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError

CONFIGS = ("single-worst-case", "single-aggressive", "dual-pool")
SINGLE, DUAL = "single", "dual"


@dataclass(frozen=True)
class PoolShape:
    """A pool whose pod count (and TP degree) the search chooses; its other engine keys are fixed."""

    name: str
    preset: str
    overrides: tuple[tuple[str, Any], ...] = ()
    tp_options: tuple[int, ...] = ()
    """Empty: the preset's / file's TP only."""
    fixed: EngineConfig | None = None
    """An engine read from a cluster file (TP cannot vary then)."""

    def tps(self) -> tuple[int, ...]:
        if self.tp_options:
            return self.tp_options
        return ((self.fixed or EngineConfig.from_preset(self.preset, **dict(self.overrides))).tensor_parallel_size,)

    def engine(self, tp: int, max_model_len: int | None = None) -> EngineConfig:
        """The pool's engine at ``tp`` (and ``max_model_len`` when a threshold sets it); ConfigError if invalid."""
        if self.fixed is not None:
            return self.fixed
        kw = dict(self.overrides)
        kw["tensor_parallel_size"] = tp
        if max_model_len is not None:
            kw["max_model_len"] = max_model_len
        return EngineConfig.from_preset(self.preset, **kw)


@dataclass(frozen=True)
class Threshold:
    """How requests split between the pools (dual only)."""

    short_context: int | None
    """The short pool's ``max_model_len`` (None: as configured)."""
    total_tokens: int | None = None
    """The classifier's ``total_threshold_tokens`` (None: the context rule alone)."""

    def as_dict(self) -> dict[str, int | None]:
        return {"short_max_model_len": self.short_context, "total_threshold_tokens": self.total_tokens}

    @property
    def label(self) -> str:
        total = "context" if self.total_tokens is None else str(self.total_tokens)
        return f"short {self.short_context or 'as configured'}, total {total}"


@dataclass(frozen=True)
class SearchSpace:
    config: str
    """``single-worst-case`` / ``single-aggressive`` / ``dual-pool`` (or ``single`` / ``dual`` from a file)."""
    family: str
    pools: tuple[PoolShape, ...]
    """One pool, or (short, long)."""
    policy: str
    """The policy as the table names it (``round-robin``, ``predicted-latency``, …)."""
    sim_policy: str
    """The replay policy that runs it (``dual-pool-round-robin`` for round-robin on two pools, …)."""
    thresholds: tuple[Threshold, ...] = (Threshold(None),)
    options: Mapping[str, str] = field(default_factory=dict)
    guesses: Mapping[str, int] = field(default_factory=dict)
    """Starting pod counts per pool (a file's counts, or an earlier search's answer)."""
    max_pods: int = 64

    def __post_init__(self) -> None:
        if self.max_pods < 1:
            raise ConfigError(f"--max-pods must be >= 1, got {self.max_pods}")
        if self.family == DUAL and len(self.pools) != 2:
            raise ConfigError(f"pools: dual-pool needs exactly two pools (short, long), got {len(self.pools)}")
        if self.family == SINGLE and len(self.pools) != 1:
            raise ConfigError(f"pools: a single-pool search needs exactly one pool, got {len(self.pools)}")

    def policy_options(self, threshold: Threshold) -> dict[str, str]:
        opts = dict(self.options)
        if self.family == DUAL:
            opts["short_pool"], opts["long_pool"] = self.pools[0].name, self.pools[1].name
            opts["total_threshold"] = "none" if threshold.total_tokens is None else str(threshold.total_tokens)
        return opts

    def engine_of(self, i: int, threshold: Threshold, tp: int) -> EngineConfig:
        """Pool ``i``'s engine at ``tp`` under ``threshold`` (ConfigError if that combination is invalid)."""
        ctx = threshold.short_context if self.family == DUAL and i == 0 else None
        return self.pools[i].engine(tp, ctx)

    def pool_specs(self, threshold: Threshold, counts: tuple[tuple[int, int], ...]) -> tuple[PoolSpec, ...]:
        """``counts`` = (tp, pods) per pool, in pool order."""
        return tuple(PoolSpec(shape.name, n, self.engine_of(i, threshold, tp))
                     for i, (shape, (tp, n)) in enumerate(zip(self.pools, counts, strict=True)))


def sim_policy_for(policy: str, family: str) -> str:
    """Which replay policy runs ``policy`` on this family (two pools need the classifier in front)."""
    if family == DUAL:
        return {"round-robin": "dual-pool-round-robin", "predicted-latency": "dual-pool"}.get(policy, policy)
    if policy in ("dual-pool", "dual-pool-round-robin"):
        raise ConfigError(f"--policy {policy!r} needs two pools (--config dual-pool or a two-pool cluster file)")
    return policy


def preset_space(config: str, policy: str, preset: str, long_context: int, short_contexts: tuple[int, ...],
                 total_thresholds: tuple[int | None, ...], tp_options: tuple[int, ...],
                 options: Mapping[str, str], max_pods: int, extra: Mapping[str, Any] | None = None) -> SearchSpace:
    """One of the table's configurations on a preset."""
    if config not in CONFIGS:
        raise ConfigError(f"--config must be one of {', '.join(CONFIGS)}, got {config!r}")
    base = dict(extra or {})
    if config == "dual-pool":
        short = PoolShape("short", preset, _items(base, provisioning="worst-case"), tp_options)
        long = PoolShape("long", preset, _items(base, provisioning="worst-case", max_model_len=long_context),
                         tp_options)
        thresholds = tuple(Threshold(c, t) for c in short_contexts for t in total_thresholds
                           if t is None or t <= c)
        if not thresholds:
            raise ConfigError("--total-thresholds: every value exceeds every --short-contexts value")
        return SearchSpace(config, DUAL, (short, long), policy, sim_policy_for(policy, DUAL), thresholds,
                           options, max_pods=max_pods)
    rule = "worst-case" if config == "single-worst-case" else "aggressive"
    pool = PoolShape("pod", preset, _items(base, provisioning=rule, max_model_len=long_context), tp_options)
    return SearchSpace(config, SINGLE, (pool,), policy, sim_policy_for(policy, SINGLE), options=options,
                       max_pods=max_pods)


def file_space(pools: tuple[PoolSpec, ...], policy: str, total_thresholds: tuple[int | None, ...],
               options: Mapping[str, str], max_pods: int) -> SearchSpace:
    """The pools of a ``--cluster-config`` file: one pool → single, two → dual (short first; its context is
    the file's ``max_model_len``, only the total-token threshold varies)."""
    if any(p.groups for p in pools):
        raise ConfigError("pools: mixed pools ([[pools.groups]]) cannot be searched; give one engine per pool")
    family = SINGLE if len(pools) == 1 else DUAL
    shapes = tuple(PoolShape(p.name, p.engine.preset, fixed=p.engine) for p in pools)
    guesses = {p.name: p.count for p in pools}
    if family == SINGLE:
        return SearchSpace(SINGLE, family, shapes, policy, sim_policy_for(policy, family), options=options,
                           guesses=guesses, max_pods=max_pods)
    thresholds = tuple(Threshold(None, t) for t in total_thresholds)
    return SearchSpace(DUAL, family, shapes, policy, sim_policy_for(policy, family), thresholds, options,
                       guesses, max_pods)


def _items(base: Mapping[str, Any], **more: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted({**base, **more}.items()))
