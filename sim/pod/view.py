"""Snapshot of a pod's engine state as the metrics collector reads it (shared by runtime and metrics)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineView:
    waiting: int
    running: int
    kv_usage: float
    preemptions: int
    prefix_queries: int
    prefix_hits: int
