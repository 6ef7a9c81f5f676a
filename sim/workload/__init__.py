"""Workload: trace loading, client request budgets and the synthetic session / shared-prefix model."""

from sim.workload.budgets import DEFAULT_MAX_TOKENS_POLICY, MaxTokensPolicy
from sim.workload.sessions import SessionModel, SessionModelConfig
from sim.workload.trace import TraceRequest, load_trace, output_length_sampler

__all__ = [
    "DEFAULT_MAX_TOKENS_POLICY",
    "MaxTokensPolicy",
    "SessionModel",
    "SessionModelConfig",
    "TraceRequest",
    "load_trace",
    "output_length_sampler",
]
