"""Per-pod engine model: scheduler, KV blocks, prefix cache, preemption and step time."""

from sim.engine.config import PRESETS, EngineConfig, GpuSpec, ModelSpec
from sim.engine.engine import FINISHED, FIRST_TOKEN, Engine, EngineStats, Event, StepResult
from sim.engine.errors import ConfigError, PodFailed, PromptTooLong, RequestRejected, SimError
from sim.engine.sequence import Sequence
from sim.engine.steptime import StepTimeModel

__all__ = [
    "FINISHED",
    "FIRST_TOKEN",
    "PRESETS",
    "ConfigError",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "Event",
    "GpuSpec",
    "ModelSpec",
    "PodFailed",
    "PromptTooLong",
    "RequestRejected",
    "Sequence",
    "SimError",
    "StepResult",
    "StepTimeModel",
]
