"""Settings both ways: every field of every settings class is read by code outside its declaration, and every
env var a README or docs/configuration.md documents in a configuration table is a field of a settings class.

"Read" is an attribute access ``<anything>.<field>`` in the product's packages (found with ``ast``, so comments,
strings and keyword arguments that only set a field do not count). The README side (documented with the right
default) is ``test_readme_config.py``; the router config's rows are ``tests/router_client/test_readme_config.py``.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest
from pydantic import BaseModel

from shared.predictor_settings import PredictorSettings
from shared.settings import CommonSettings
from shared.trainer_settings import TrainerSettings

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "trainer", "predictor", "router_client", "sim", "demo", "bench")
SERVER_SETTINGS: tuple[type[BaseModel], ...] = (CommonSettings, TrainerSettings, PredictorSettings)
DOCUMENTED_IN = ("README.md", "docs/configuration.md", "trainer/README.md", "predictor/README.md")
"""Files whose tables document env vars of our servers (deploy/README.md's tables are the llm-d EPP's env)."""
ENV_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.MULTILINE)


def _router_config_models() -> list[type[BaseModel]]:
    """Every section of the router config and every scheduling plugin's ``Params``."""
    modules = [importlib.import_module("router_client.config"), importlib.import_module("router_client.pd.config")]
    for path in sorted((REPO / "router_client" / "scheduling").rglob("*.py")):
        modules.append(importlib.import_module(".".join(path.relative_to(REPO).with_suffix("").parts)))
    return [obj for mod in modules for obj in vars(mod).values()
            if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == mod.__name__]


@cache
def _attributes_read() -> frozenset[str]:
    names: set[str] = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    names.add(node.attr)
    return frozenset(names)


FIELDS = sorted({(cls.__name__, name) for cls in (*SERVER_SETTINGS, *_router_config_models())
                 for name in cls.model_fields if name in cls.__annotations__})


def test_the_fields_are_found() -> None:
    assert len(FIELDS) > 100 and ("TrainerSettings", "retraining_interval_sec") in FIELDS


@pytest.mark.parametrize(("cls", "field"), FIELDS, ids=[f"{c}.{f}" for c, f in FIELDS])
def test_every_setting_is_read_by_code(cls: str, field: str) -> None:
    assert field in _attributes_read(), (
        f"{cls}.{field} is declared but no code in {', '.join(PACKAGES)} reads it: implement it or remove it "
        "(and its README row)")


def _env_names() -> set[str]:
    names: set[str] = set()
    for cls in SERVER_SETTINGS:
        for field in cls.model_fields.values():
            names.update(str(alias) for alias in field.validation_alias.choices)  # type: ignore[union-attr]
    return names


DOCUMENTED = sorted({(doc, env) for doc in DOCUMENTED_IN for env in ENV_ROW.findall((REPO / doc).read_text())})


def test_the_documented_env_vars_are_found() -> None:
    assert {doc for doc, _ in DOCUMENTED} >= {"docs/configuration.md", "predictor/README.md"}
    assert len(DOCUMENTED) > 80


@pytest.mark.parametrize(("doc", "env"), DOCUMENTED, ids=[f"{d}:{e}" for d, e in DOCUMENTED])
def test_every_documented_env_var_is_a_setting(doc: str, env: str) -> None:
    assert env in _env_names(), f"{doc} documents {env}, but no settings class reads it"


def test_the_contracts_fresh_threshold_is_the_bases(monkeypatch: pytest.MonkeyPatch) -> None:
    """LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH (llm-d contract §7, default 10) is the row count from which the physical
    base alone is refitted; LATENCY_MIN_SAMPLES_FOR_RETRAIN the one from which trees join (trainer/README.md)."""
    monkeypatch.setenv("LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH", "5")
    monkeypatch.setenv("LATENCY_MIN_SAMPLES_FOR_RETRAIN", "40")
    settings = TrainerSettings.from_env()
    assert settings.min_samples_for_retrain == 40 and settings.min_samples_for_retrain_fresh == 5
    monkeypatch.setenv("LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH", "1")
    with pytest.raises(ValueError, match="LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH"):
        TrainerSettings.from_env()
