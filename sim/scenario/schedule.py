"""Scenario files: a schedule of pod changes (TOML ``[[events]]`` tables).

```toml
[[events]]
at_fraction = 0.5      # or at_s = <virtual seconds since the first arrival / since pod start>
pod = "pod-0"          # pod id as in the per-request CSV
speed_factor = 2.0     # any keys of sim.scenario.change
```

Every event needs exactly one of ``at_fraction`` (share of the replayed arrival span, 0..1) or
``at_s``, a ``pod`` that exists, and at least one change. Errors name the event index and the key.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError
from sim.scenario.change import CHANGE_KEYS, PodChange, parse_change

EVENT_KEYS = frozenset({"at_fraction", "at_s", "pod"})


@dataclass(frozen=True)
class ScenarioEvent:
    index: int
    """Position in the file (0-based), used in error messages."""
    pod: str
    change: PodChange
    at_s: float | None = None
    at_fraction: float | None = None

    @property
    def where(self) -> str:
        return f"event {self.index}"


@dataclass(frozen=True)
class TimedEvent:
    """An event resolved to an absolute virtual time."""

    at_s: float
    index: int
    pod: str
    change: PodChange

    def describe(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 6), **self.change.as_dict()}


@dataclass(frozen=True)
class Scenario:
    events: tuple[ScenarioEvent, ...]
    source: str = "scenario"

    def check_pods(self, configs: Mapping[str, EngineConfig]) -> None:
        """Every event's pod exists in ``configs`` and its change fits that pod's engine."""
        for ev in self.events:
            if ev.pod not in configs:
                raise ConfigError(f"{self.source}: {ev.where}: 'pod' = {ev.pod!r} does not exist "
                                  f"(pods: {', '.join(configs)})")
            ev.change.check(configs[ev.pod], f"{self.source}: {ev.where}")

    def resolve(self, start_s: float, end_s: float | None) -> list[TimedEvent]:
        """Absolute times: ``start + at_s`` or ``start + at_fraction * (end - start)``, in time order.

        ``end_s`` None means no span is known (a live pod without ``--scenario-span-s``).
        """
        out = []
        for ev in self.events:
            if ev.at_s is not None:
                at = start_s + ev.at_s
            else:
                if end_s is None:
                    raise ConfigError(f"{self.source}: {ev.where}: 'at_fraction' needs a known span "
                                      "(sim.pod: pass --scenario-span-s, or use 'at_s')")
                at = start_s + (ev.at_fraction or 0.0) * (end_s - start_s)
            out.append(TimedEvent(at, ev.index, ev.pod, ev.change))
        return sorted(out, key=lambda e: (e.at_s, e.index))

    @property
    def pods(self) -> set[str]:
        return {ev.pod for ev in self.events}


def _time(raw: Mapping[str, Any], where: str) -> tuple[float | None, float | None]:
    given = [k for k in ("at_fraction", "at_s") if k in raw]
    if len(given) != 1:
        raise ConfigError(f"{where}: give exactly one of 'at_fraction' or 'at_s' (got {given or 'neither'})")
    key = given[0]
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: '{key}' must be a finite number, got {value!r}")
    if key == "at_fraction" and not 0.0 <= value <= 1.0:
        raise ConfigError(f"{where}: 'at_fraction' must be in [0, 1], got {value!r}")
    if key == "at_s" and value < 0:
        raise ConfigError(f"{where}: 'at_s' must be >= 0, got {value!r}")
    return (None, float(value)) if key == "at_fraction" else (float(value), None)


def parse_event(raw: Any, index: int, pod_ids: Collection[str] | None, source: str) -> ScenarioEvent:
    where = f"{source}: event {index}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = sorted(set(raw) - EVENT_KEYS - set(CHANGE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} "
                          f"(known: {', '.join(sorted(EVENT_KEYS | set(CHANGE_KEYS)))})")
    at_s, at_fraction = _time(raw, where)
    pod = raw.get("pod")
    if not isinstance(pod, str) or not pod:
        raise ConfigError(f"{where}: 'pod' must be a pod id string, got {pod!r}")
    if pod_ids is not None and pod not in pod_ids:
        raise ConfigError(f"{where}: 'pod' = {pod!r} does not exist (pods: {', '.join(pod_ids)})")
    change = parse_change(raw, where, EVENT_KEYS)
    return ScenarioEvent(index, pod, change, at_s, at_fraction)


def parse_scenario(data: Mapping[str, Any], pod_ids: Collection[str] | None = None,
                   source: str = "scenario") -> Scenario:
    unknown = sorted(set(data) - {"events"})
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r} (a scenario has only [[events]])")
    raw = data.get("events")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{source}: 'events' must be a non-empty list of [[events]] tables")
    return Scenario(tuple(parse_event(r, i, pod_ids, source) for i, r in enumerate(raw)), source)


def load_scenario(path: Path, pod_ids: Collection[str] | None = None) -> Scenario:
    """Read and validate a scenario TOML file (``pod_ids``: the pods that exist, if known)."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read scenario {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot parse scenario {path}: {exc}") from exc
    return parse_scenario(data, pod_ids, str(path))
