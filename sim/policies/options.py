"""``--policy-opt key=value`` options of the replay policies (unknown keys fail at build)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from router_client.config import ClassifierConfig, CorrectionConfig, PluginSpec, SchedulerConfig, TuningConfig


class PolicyOptions(BaseModel):
    """A policy's ``--policy-opt`` strings validated against its fields (unknown keys refused); a bad value is a
    ``ValueError`` naming the field, which the replay CLI reports."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Self:
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            raise ValueError(str(exc)) from None


class ReplayOptions(PolicyOptions):

    retrain_interval_s: float = Field(default=20.0, description="Virtual seconds between retrains.", gt=0)
    min_samples: int = Field(default=100, description="Rows per model before trees join the physical base.", ge=1)
    min_fresh: int = Field(default=10, description="Rows per model before the first fit (its base alone).", ge=2)
    rounds: int = Field(default=60, description="Boosting rounds per fit.", ge=1)
    bucket_cap: int = Field(default=500, description="Rows per (queue, KV, prefix) bucket of the window.", ge=1)
    alpha: float = Field(default=0.9, description="Quantile of the latency models.", gt=0, lt=1)
    adapt_rate: float = Field(default=0.2, description="Adaptive calibration step (LATENCY_CALIBRATION_ADAPT_RATE; "
                              "0: calibrate at alpha).", ge=0, le=1)
    exploration: float = Field(default=0.02, description="Exploration share.", ge=0, le=1)
    min_share: float = Field(default=0.5, description="Anti-starvation bound (× fair share).", ge=0, le=1)
    picker: str = Field(default="weighted-random", description="Picker plugin.")
    power: float = Field(default=4.0, description="weighted-random exponent.", gt=0)
    ttft_weight: float = Field(default=0.8, description="latency-headroom TTFT weight.", ge=0, le=1)
    prefix_affinity: bool = Field(default=True, description="Run the prefix-affinity filter.")
    sheddable: bool = Field(default=False, description="Requests may be shed when no pod meets the SLO.")
    correction: bool = Field(
        default=True, description="Per-pod correction of predictions (router_client/correction.py, virtual time).")
    short_pool: str = Field(default="short", description="dual-pool: short pool name.")
    long_pool: str = Field(default="long", description="dual-pool: long pool name.")
    output_threshold: int = Field(default=512, description="dual-pool: expected output above → long.", ge=0)
    total_threshold: int | None = Field(
        default=2048, description="dual-pool: prompt+output above → long ('none': context rule only).", ge=0)
    tuning: bool = Field(default=False, description="dual-pool: run the router's pool tuner (threshold, split).")
    tuning_apply: bool = Field(default=True, description="dual-pool tuning: apply the recommended threshold.")
    tuning_interval_s: float = Field(default=60.0, description="dual-pool tuning: virtual s between steps.", gt=0)
    router_config: Path | None = Field(
        default=None, description="JSON file with any of the sections \"scheduler\", \"classifier\", \"correction\", "
        "\"tuning\" (each replaces the one built from the options above).")

    @field_validator("total_threshold", mode="before")
    @classmethod
    def _none_threshold(cls, value: object) -> object:
        return None if isinstance(value, str) and value.lower() in ("none", "null", "") else value


    def scheduler(self, seed: int) -> SchedulerConfig:
        file = self._file()
        if "scheduler" in file:
            return SchedulerConfig.model_validate({"seed": seed, **file["scheduler"]})
        filters = [PluginSpec(name="prefix-affinity")] if self.prefix_affinity else []
        filters.append(PluginSpec(name="slo-headroom"))
        picker_params = {"power": self.power} if self.picker == "weighted-random" else {}
        return SchedulerConfig(
            filters=filters, scorers=[PluginSpec(name="latency-headroom", params={"ttft_weight": self.ttft_weight})],
            picker=PluginSpec(name=self.picker, params=picker_params), exploration=self.exploration,
            min_share=self.min_share, seed=seed)

    def classifier(self) -> ClassifierConfig:
        file = self._file()
        if "classifier" in file:
            return ClassifierConfig.model_validate(file["classifier"])
        return ClassifierConfig(short_pool=self.short_pool, long_pool=self.long_pool,
                                output_threshold_tokens=self.output_threshold,
                                total_threshold_tokens=self.total_threshold)

    def correction_config(self) -> CorrectionConfig:
        file = self._file()
        if "correction" in file:
            return CorrectionConfig.model_validate(file["correction"])
        return CorrectionConfig(enabled=self.correction)

    def tuning_config(self) -> TuningConfig | None:
        """The pool tuner's config (None: tuning off); a ``tuning`` section of ``router_config`` wins."""
        file = self._file()
        if "tuning" in file:
            cfg = TuningConfig.model_validate(file["tuning"])
            return cfg if cfg.enabled else None
        if not self.tuning:
            return None
        return TuningConfig(enabled=True, apply=self.tuning_apply, interval_s=self.tuning_interval_s)

    def _file(self) -> dict[str, Any]:
        if self.router_config is None:
            return {}
        data = orjson.loads(self.router_config.read_bytes())
        unknown = set(data) - {"scheduler", "classifier", "correction", "tuning"}
        if unknown:
            raise ValueError(f"{self.router_config}: unknown keys {sorted(unknown)}")
        return dict(data)
