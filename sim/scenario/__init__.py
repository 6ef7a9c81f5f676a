"""Scenarios: scheduled or on-demand changes of a pod's condition (speed, failure, cache, KV size)."""

from sim.scenario.apply import apply_change, pod_condition
from sim.scenario.change import CHANGE_KEYS, PodChange, parse_change
from sim.scenario.schedule import Scenario, ScenarioEvent, TimedEvent, load_scenario, parse_scenario

__all__ = [
    "CHANGE_KEYS",
    "PodChange",
    "Scenario",
    "ScenarioEvent",
    "TimedEvent",
    "apply_change",
    "load_scenario",
    "parse_change",
    "parse_scenario",
    "pod_condition",
]
