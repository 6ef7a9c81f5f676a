"""router_client/README.md's configuration table lists every key of the router config with its default
and description, and nothing else (a row per field, nested sections as ``section.key``)."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from router_client.config import PluginSpec, PoolConfig, RouterConfig

README = (Path(__file__).resolve().parents[2] / "router_client" / "README.md").read_text()


def _default(field: FieldInfo) -> str | None:
    """The default as the table shows it; ``None`` for a nested section."""
    if field.is_required():
        return "`required`"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel) and not isinstance(value, PluginSpec):
        return None
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, list):
        value = [v.model_dump() if isinstance(v, BaseModel) else v for v in value]
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def _optional_section(field: FieldInfo) -> type[BaseModel] | None:
    """The model of an optional section (``Section | None = None``, e.g. ``pools[].discovery``)."""
    models = [a for a in typing.get_args(field.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return models[0] if len(models) == 1 and field.default is None else None


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        default = _default(field)
        out.append(f"| `{prefix}{name}` | {default or '(section)'} | {field.description} |")
        if default is None and field.annotation is not None:
            out += _rows(field.annotation, f"{name}.")
            if name == "scheduler":
                out += _rows(PluginSpec, "scheduler.*(plugin).")
        elif (section := _optional_section(field)) is not None:
            out += _rows(section, f"{prefix}{name}.")
    return out


EXPECTED = _rows(RouterConfig) + _rows(PoolConfig, "pools[].")


@pytest.mark.parametrize("row", EXPECTED, ids=[r.split("`")[1] for r in EXPECTED])
def test_every_config_key_is_documented(row: str) -> None:
    assert row in README.splitlines(), f"router_client/README.md lacks or misstates: {row}"


def test_no_stale_rows() -> None:
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows and [r for r in rows if r not in EXPECTED] == []
