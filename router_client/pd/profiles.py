"""Each role's scheduling pipeline, per P/D policy (the same pipelines as the simulator's ``pd-*`` policies).

``load-prefix`` (llm-d's stock P/D profile, as ``sim/policies/load_prefix.py``): ``queue-scorer`` x 2 +
``kv-cache-utilization-scorer`` x 2 + ``prefix-cache-scorer`` x 3 with the ``max`` picker on both roles, with or
without predictions. ``predicted-latency`` (as ``sim/policies/pd/predicted.py``): decode pods by ``slo-headroom`` +
``latency-headroom`` weighted ``decode_ttft_weight`` on TTFT (default: TPOT only, no prefix affinity); prefill pods by
``prefix-affinity`` + ``slo-headroom`` + ``latency-headroom`` on TTFT alone; the router's picker, exploration,
anti-starvation and composite fallback from the ``scheduler`` section.
"""

from __future__ import annotations

from router_client.config import PluginSpec, SchedulerConfig
from router_client.pd.config import PdConfig

PREFILL = "prefill"
DECODE = "decode"
WHOLE = ""
"""``pod_type`` of a request a decode pod serves whole (the decider kept it there, or the prefill pod failed)."""


def load_prefix(queue_weight: float = 2.0, kv_weight: float = 2.0, prefix_weight: float = 3.0) -> SchedulerConfig:
    scorers = [PluginSpec(name="queue-scorer", weight=queue_weight),
               PluginSpec(name="kv-cache-utilization-scorer", weight=kv_weight),
               PluginSpec(name="prefix-cache-scorer", weight=prefix_weight)]
    return SchedulerConfig(filters=[], scorers=scorers, fallback_scorers=scorers, picker=PluginSpec(name="max"),
                           exploration=0.0, min_share=0.0)


def predicted(base: SchedulerConfig, ttft_weight: float, prefix_affinity: bool) -> SchedulerConfig:
    filters = [PluginSpec(name="prefix-affinity")] if prefix_affinity else []
    filters.append(PluginSpec(name="slo-headroom"))
    scorers = [PluginSpec(name="latency-headroom", params={"ttft_weight": ttft_weight})]
    return base.model_copy(update={"filters": filters, "scorers": scorers})


def role_scheduler(pd: PdConfig, role: str, base: SchedulerConfig) -> SchedulerConfig:
    """The pipeline that picks ``role``'s pod (``prefill`` or ``decode``) under ``pd.policy``."""
    if pd.policy == "load-prefix":
        return load_prefix().model_copy(update={"seed": base.seed})
    if role == PREFILL:
        return predicted(base, 1.0, True)
    return predicted(base, pd.decode_ttft_weight, False)
