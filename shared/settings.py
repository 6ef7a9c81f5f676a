"""Settings common to both servers: the LATENCY_* names of contract §7 plus ours.

Settings objects are built once at start-up (``X.from_env()``) and passed in; tests build
them with keyword arguments (field names). Booleans follow the contract: true iff the value
lower-cased equals ``"true"``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.columns import Bounds
from shared.features import FeatureSpec


def _contract_bool(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return value


Flag = Annotated[bool, BeforeValidator(_contract_bool)]


def env(name: str, default: Any, doc: str, **kwargs: Any) -> Any:
    """A settings field read from env var ``name`` (or its field name in code/tests)."""
    return Field(default, validation_alias=AliasChoices(name), description=doc, **kwargs)


class CommonSettings(BaseSettings):
    """What trainer and predictor must agree on (keep these equal on both servers)."""

    model_config = SettingsConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    model_type: Literal["xgboost"] = env(
        "LATENCY_MODEL_TYPE", "xgboost", "Model family; only xgboost is served (no pickled sklearn models).")
    objective_type: Literal["quantile", "mean"] = env(
        "LATENCY_OBJECTIVE_TYPE", "quantile", "quantile (reg:quantileerror) or mean (reg:squarederror).")
    quantile_alpha: float = env("LATENCY_QUANTILE_ALPHA", 0.9, "Target quantile.", gt=0.0, lt=1.0)
    ensemble_mode: Flag = env(
        "LATENCY_ENSEMBLE_MODE", True, "Reported for compatibility; queue gating is learned by the trees "
        "through is_queued, so no gated sub-models are published.")
    enable_token_in_flight_features: Flag = env(
        "LATENCY_ENABLE_TOKEN_IN_FLIGHT_FEATURES", True, "Use prefill/decode tokens in flight (columns 6–7).")
    enable_encoder_features: Flag = env(
        "LATENCY_ENABLE_ENCODER_FEATURES", True, "Use encoder sizes in the TTFT model (columns 8–9).")
    bundle_hmac_key: SecretStr | None = env(
        "LATENCY_BUNDLE_HMAC_KEY", None, "Shared key: bundles are signed (trainer) and must verify (predictor).")
    max_tokens: float = env("LATENCY_MAX_TOKENS", 1e7, "Largest plausible token count in a row.", gt=0)
    max_latency_ms: float = env("LATENCY_MAX_LATENCY_MS", 3.6e6, "Largest plausible latency (ms).", gt=0)
    log_level: str = env("LATENCY_LOG_LEVEL", "INFO", "Python logging level.")

    @field_validator("model_type", mode="before")
    @classmethod
    def _known_model_type(cls, value: Any) -> Any:
        if isinstance(value, str) and value in ("bayesian_ridge", "lightgbm"):
            raise ValueError(f"model_type {value!r} is part of the llm-d contract but not served here; "
                             "use xgboost")
        return value

    @classmethod
    def from_env(cls, **overrides: Any) -> Any:
        """Build from the process environment; keyword overrides win (used by CLIs)."""
        return cls(**{k: v for k, v in overrides.items() if v is not None})

    @property
    def feature_spec(self) -> FeatureSpec:
        return FeatureSpec(token_in_flight=self.enable_token_in_flight_features,
                           encoder=self.enable_encoder_features)

    @property
    def bounds(self) -> Bounds:
        return Bounds(max_tokens=self.max_tokens, max_latency_ms=self.max_latency_ms)

    @property
    def hmac_key(self) -> bytes | None:
        return self.bundle_hmac_key.get_secret_value().encode() if self.bundle_hmac_key else None
