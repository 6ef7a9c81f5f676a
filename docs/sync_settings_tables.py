"""Keep docs/configuration.md's settings tables equal to the settings classes:
``python docs/sync_settings_tables.py [ENV ...]``.

Existing rows get their default and description from the settings; a missing row is added at the end of
its server's table; env names given as arguments are removed. tests/shared/test_readme_config.py checks it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic.fields import FieldInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.predictor_settings import PredictorSettings  # noqa: E402
from shared.settings import CommonSettings  # noqa: E402
from shared.trainer_settings import TrainerSettings  # noqa: E402

TABLES = ((CommonSettings, "LATENCY_LOG_LEVEL"), (TrainerSettings, "LATENCY_BUNDLES_KEPT"),
          (PredictorSettings, "PREDICT_REFUSALS_KEPT"))


def row(info: FieldInfo) -> tuple[str, str]:
    alias = info.validation_alias.choices[0]  # type: ignore[union-attr]
    default = "(unset)" if hasattr(info.default, "get_secret_value") else str(info.default)
    return alias, f"| `{alias}` | `{default}` | {info.description} |"


def starts(lines: list[str], env: str) -> list[int]:
    return [i for i, line in enumerate(lines) if line.startswith(f"| `{env}` |")]


def table_end(lines: list[str], anchor: str) -> int:
    end = starts(lines, anchor)[0]
    while end + 1 < len(lines) and lines[end + 1].startswith("| `"):
        end += 1
    return end


def sync(lines: list[str], removed: set[str]) -> list[str]:
    out = [line for line in lines if not any(line.startswith(f"| `{env}` |") for env in removed)]
    for cls, anchor in TABLES:
        own = cls.model_fields if cls is CommonSettings else {
            k: v for k, v in cls.model_fields.items() if k not in CommonSettings.model_fields}
        for info in own.values():
            alias, text = row(info)
            found = starts(out, alias)
            if found:
                out[found[0]] = text
            else:
                out.insert(table_end(out, anchor) + 1, text)
    return out


def main(argv: list[str]) -> None:
    readme = ROOT / "docs" / "configuration.md"
    readme.write_text("\n".join(sync(readme.read_text().splitlines(), set(argv))) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
