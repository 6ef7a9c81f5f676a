"""The README's configuration tables list every env var the settings read, with its default."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.predictor_settings import PredictorSettings
from shared.settings import CommonSettings
from shared.trainer_settings import TrainerSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _fields() -> list[tuple[str, str, object]]:
    seen: dict[str, tuple[str, str, object]] = {}
    for cls in (CommonSettings, TrainerSettings, PredictorSettings):
        for name, field in cls.model_fields.items():
            alias = field.validation_alias.choices[0]  # type: ignore[union-attr]
            seen[alias] = (alias, name, field.default)
    return list(seen.values())


@pytest.mark.parametrize(("env", "name", "default"), _fields(), ids=lambda v: str(v))
def test_env_var_documented_with_default(env: str, name: str, default: object) -> None:
    rows = [line for line in README.splitlines() if line.startswith(f"| `{env}` |")]
    assert rows, f"{env} ({name}) is read by the settings but missing from README's configuration tables"
    shown = "(unset)" if hasattr(default, "get_secret_value") else str(default)
    assert f"`{shown}`" in rows[0], f"README shows a stale default for {env}: {rows[0]}"
