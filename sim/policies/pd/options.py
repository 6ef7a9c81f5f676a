"""Options of the predicted P/D policies: the replay policies' options plus the decider and the trainers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from router_client.config import PluginSpec, SchedulerConfig
from sim.policies.options import ReplayOptions


class PdOptions(ReplayOptions):
    """``power`` and ``exploration`` default greedier than the aggregated policies' (4, 0.02): on a conv slice the
    bench does not report (70B TP 4, 4P:2D, x2.5, seed 1) P99 TTFT was 1,442 ms with them, 1,196 ms with 16 and 0
    (``pd-load-prefix``: 1,238 ms; ``max`` picker: 5,345 ms, it herds on tied predictions).
    See bench/results/pd/RESULTS-pd.md.
    """

    power: float = Field(default=16.0, description="weighted-random exponent (both roles).", gt=0)
    exploration: float = Field(default=0.0, description="Exploration share (both roles).", ge=0, le=1)
    decider: Literal["prefix", "always", "never", "predicted"] = Field(
        default="prefix", description="prefix (llm-d's prefix-based-pd-decider), always, never, or predicted "
        "(disaggregate iff the best pair's predicted TTFT beats the decode pod's predicted TTFT serving it whole).")
    pd_threshold: int = Field(
        default=512, description="prefix decider: disaggregate iff the decode pod lacks >= this many prompt tokens.",
        ge=1)
    trainers: Literal["shared", "split"] = Field(
        default="shared", description="shared: one model for every role, pod_type a feature; split: one per role.")
    decode_ttft_weight: float = Field(
        default=0.0, description="Weight of the decode leg's predicted TTFT against its TPOT when picking the decode "
        "pod (0: TPOT only).", ge=0, le=1)
    pair_ttft_weight: float = Field(
        default=0.8, description="pd-predicted-latency-slo: TTFT headroom weight of a pair's score (TPOT: 1 - it).",
        ge=0, le=1)


    def role_scheduler(self, seed: int, ttft_weight: float, prefix_affinity: bool) -> SchedulerConfig:
        """One role's pipeline: [prefix-affinity], slo-headroom, latency-headroom(ttft_weight), the picker."""
        filters = [PluginSpec(name="prefix-affinity")] if prefix_affinity else []
        filters.append(PluginSpec(name="slo-headroom"))
        picker_params = {"power": self.power} if self.picker == "weighted-random" else {}
        return SchedulerConfig(
            filters=filters, scorers=[PluginSpec(name="latency-headroom", params={"ttft_weight": ttft_weight})],
            picker=PluginSpec(name=self.picker, params=picker_params), exploration=self.exploration,
            min_share=self.min_share, seed=seed)
