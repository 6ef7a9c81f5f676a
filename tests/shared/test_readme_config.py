"""docs/configuration.md's tables list every env var the settings read, with its default; the few rows README.md's
"Configuration" section repeats show the same defaults, and the README links to the full tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.predictor_settings import PredictorSettings
from shared.settings import CommonSettings
from shared.trainer_settings import TrainerSettings

REPO = Path(__file__).resolve().parents[2]
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text()
README = (REPO / "README.md").read_text()


def _fields() -> list[tuple[str, str, object]]:
    seen: dict[str, tuple[str, str, object]] = {}
    for cls in (CommonSettings, TrainerSettings, PredictorSettings):
        for name, field in cls.model_fields.items():
            alias = str(field.validation_alias.choices[0])  # type: ignore[union-attr]
            seen[alias] = (alias, name, field.default)
    return list(seen.values())


FIELDS = _fields()
DEFAULTS = {env: default for env, _, default in FIELDS}


def _shown(default: object) -> str:
    return "(unset)" if hasattr(default, "get_secret_value") else str(default)


@pytest.mark.parametrize(("env", "name", "default"), FIELDS, ids=lambda v: str(v))
def test_env_var_documented_with_default(env: str, name: str, default: object) -> None:
    rows = [line for line in CONFIGURATION.splitlines() if line.startswith(f"| `{env}` |")]
    assert rows, f"{env} ({name}) is read by the settings but missing from docs/configuration.md's tables"
    assert f"`{_shown(default)}`" in rows[0], f"docs/configuration.md shows a stale default for {env}: {rows[0]}"


README_ROWS = [line for line in README.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0].splitlines()
               if line.startswith("| `")]


def test_the_readme_summarises_and_links_the_configuration() -> None:
    section = README.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    assert README_ROWS and "(docs/configuration.md)" in section


@pytest.mark.parametrize("row", README_ROWS, ids=[r.split("`")[1] for r in README_ROWS])
def test_readme_rows_show_the_settings_default(row: str) -> None:
    env = row.split("`")[1]
    assert env in DEFAULTS, f"README's configuration summary lists {env}, which no settings class reads"
    assert f"`{_shown(DEFAULTS[env])}`" in row, f"README shows a stale default for {env}: {row}"
