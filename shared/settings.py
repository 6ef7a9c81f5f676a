"""Settings common to both servers: the LATENCY_* names of contract §7 plus ours.

Settings objects are built once at start-up (``X.from_env()``) and passed in; tests build
them with keyword arguments (field names). Booleans follow the contract: true iff the value
lower-cased equals ``"true"``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.columns import Bounds
from shared.features import FeatureSpec
from shared.keepalive import SERVER_KEEPALIVE_S


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
    write_token: SecretStr | None = env(
        "LATENCY_WRITE_TOKEN", None, "Bearer token every state-changing endpoint requires (trainer: ingest incl. "
        "?partial=true, /flush; predictor: /reload): 401 without it, 403 with another. Unset (and no file): writes "
        "are open as upstream, with one warning at start-up.")
    write_token_file: str | None = env(
        "LATENCY_WRITE_TOKEN_FILE", None, "File holding the write token (e.g. a mounted Kubernetes Secret; "
        "surrounding whitespace ignored), re-read when it changes. Not together with LATENCY_WRITE_TOKEN.")
    read_token: SecretStr | None = env(
        "LATENCY_READ_TOKEN", None, "Bearer token for model downloads (trainer: /model/*, /bundle/*; the write token "
        "is accepted too); the predictor sends it when pulling. Unset: downloads are open.")
    read_token_file: str | None = env(
        "LATENCY_READ_TOKEN_FILE", None, "File holding the read token, re-read when it changes. Not together with "
        "LATENCY_READ_TOKEN.")
    max_body_bytes: int = env(
        "LATENCY_MAX_BODY_BYTES", 1 << 20, "Largest request body (bytes) of a POST endpoint without a limit of its own "
        "(Content-Length checked before reading, a chunked body cut off at the limit): 413 naming the limit.",
        ge=1024)
    max_json_depth: int = env(
        "LATENCY_MAX_JSON_DEPTH", 32, "Deepest JSON nesting accepted in a request body (valid bodies need 3); deeper: "
        "422 naming the limit.", ge=4, le=1000)
    strict_fields: Flag = env(
        "LATENCY_STRICT_FIELDS", False, "Reject unknown request fields with 422 naming the field. Default: accepted "
        "(llm-d compatibility), counted per name in a metric and logged once per name.")
    keepalive_timeout_sec: int = env(
        "LATENCY_KEEPALIVE_TIMEOUT_SEC", SERVER_KEEPALIVE_S, "Seconds an idle keep-alive connection is kept open "
        "(uvicorn's default is 5). Keep it above every client's idle timeout: the llm-d Go client reuses connections "
        "idle up to 90 s and does not retry a POST the server closed under it; the router drops connections idle > "
        "60 s (`predictor_max_idle_s`, `reporter.max_idle_s`), the predictor's bundle puller > half of this.", ge=1)

    @model_validator(mode="after")
    def _one_token_source(self) -> CommonSettings:
        for kind in ("write", "read"):
            if getattr(self, f"{kind}_token") is not None and getattr(self, f"{kind}_token_file"):
                name = f"LATENCY_{kind.upper()}_TOKEN"
                raise ValueError(f"set {name} or {name}_FILE, not both")
        return self

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
