"""Simulated vLLM pods over HTTP (``python -m sim.pod``).

For tests: ``with run_pods([PodConfig(...)]) as pods: pods.urls`` (see :mod:`sim.pod.launch`), or
``build_app(PodConfig(...))`` for an in-process ASGI app.
"""

from sim.pod.app import build_app
from sim.pod.config import PodConfig
from sim.pod.launch import PodGroup, RunningPods, run_pods

__all__ = ["PodConfig", "PodGroup", "RunningPods", "build_app", "run_pods"]
