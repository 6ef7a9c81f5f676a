"""The ``pd`` section of a pool: its pods are the decode pods, ``prefill_pool`` names the prefill pods' pool."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Policy = Literal["predicted-latency", "load-prefix"]
DeciderMode = Literal["prefix", "always", "never"]
OnPrefillFailure = Literal["aggregate", "error"]


class PdConfig(BaseModel):
    """Prefill/decode disaggregation of one pool (``router_client/pd/``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_pool: str = Field(
        description="Pool whose pods are the prefill pods (pod_type 'prefill'; its own pods or discovery, trainer "
        "and predictors); the classifier never sends requests to it directly.", min_length=1)
    policy: Policy = Field(
        default="predicted-latency", description="predicted-latency: decode pod by predicted TPOT, prefill pod by "
        "predicted TTFT (prefix affinity on the prefill side); load-prefix: llm-d's stock P/D profile (queue x 2 + "
        "KV x 2 + prefix x 3 scorers, max picker, on both roles).")
    decider: DeciderMode = Field(
        default="prefix", description="prefix: disaggregate iff the chosen decode pod lacks >= pd_threshold prompt "
        "tokens (llm-d's prefix-based-pd-decider); always; never.")
    pd_threshold: int = Field(
        default=512, description="prefix decider: uncached prompt tokens on the decode pod from which a request is "
        "disaggregated.", ge=1)
    decode_ttft_weight: float = Field(
        default=0.0, description="predicted-latency: weight of the decode leg's predicted TTFT against its TPOT when "
        "picking the decode pod (0: TPOT only).", ge=0, le=1)
    on_prefill_failure: OnPrefillFailure = Field(
        default="aggregate", description="A prefill pod that fails (unreachable, error status, no kv_transfer_params, "
        "timeout): aggregate = the decode pod serves the request whole; error = the client gets 502 prefill_failed.")
    prefill_timeout_s: float = Field(
        default=60.0, description="Longest wait for the prefill pod's one-token answer; then it counts as failed.",
        gt=0)
