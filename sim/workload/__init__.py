"""Workload: trace loading and the synthetic session / shared-prefix model."""

from sim.workload.sessions import SessionModel, SessionModelConfig
from sim.workload.trace import TraceRequest, load_trace, output_length_sampler

__all__ = ["SessionModel", "SessionModelConfig", "TraceRequest", "load_trace", "output_length_sampler"]
