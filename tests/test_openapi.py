"""Truthful OpenAPI for both servers: each document lists exactly the real routes, and a bounded, seeded schema
fuzz run (schemathesis) against real subprocess servers on loopback finds no server error and no response that
disagrees with the document (status code, content type, body schema, headers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import schemathesis
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.routing import Route

from predictor.app import create_app as create_predictor
from shared.predictor_settings import PredictorSettings
from shared.trainer_settings import TrainerSettings
from tests.predictor.conftest import build_bundle
from tests.procs import predictor, trainer
from trainer.app import create_app as create_trainer

TOKEN = "fuzz-" + "8" * 20
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]
EXAMPLES = 20
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


def _operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}


def _api_routes(routes: list[Any]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):  # FastAPI's wrapper of an included router
            yield from _api_routes(route.original_router.routes)


def test_trainer_document_lists_exactly_its_routes(tmp_path: Path) -> None:
    app = create_trainer(TrainerSettings(data_dir=str(tmp_path)))
    routes = {(m, r.path) for r in _api_routes(app.routes) for m in r.methods}
    assert len(routes) > 15
    assert _operations(app.openapi()) == routes
    body = app.openapi()["paths"]["/add_training_data_bulk"]["post"]["requestBody"]["content"]["application/json"]
    entry = app.openapi()["components"]["schemas"]["TrainingEntry"]
    assert body["schema"]["properties"]["entries"]["maxItems"] == 100_000
    assert entry["properties"]["prefill_tokens_in_flight"] == {"type": "integer", "minimum": 0,
                                                               "maximum": 1e7, "default": 0}
    assert set(entry["required"]) >= {"actual_ttft_ms", "actual_tpot_ms", "kv_cache_percentage"}
    ok = app.openapi()["paths"]["/data/status"]["get"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"]["type"] == "object" and "durable" in ok["schema"]["required"]  # not FastAPI's "string"


def test_predictor_document_lists_exactly_its_routes(tmp_path: Path) -> None:
    app = create_predictor(PredictorSettings(bundle_dir=str(tmp_path)))
    routes = {(m, r.path) for r in app.routes if isinstance(r, Route) for m in (r.methods or ()) if m != "HEAD"}
    parsed = orjson.loads(app.state.predictor.openapi)
    assert _operations(parsed) == routes
    assert parsed["paths"]["/reload"]["post"]["security"] == [{"writeToken": []}, {}]
    row = parsed["components"]["schemas"]["PredictionRequest"]
    assert row["properties"]["kv_cache_percentage"]["maximum"] == 1.0 and row["additionalProperties"] is True


@pytest.fixture(scope="module")
def trainer_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fuzz-trainer")
    with trainer(root / "data", {"LATENCY_WRITE_TOKEN": TOKEN}) as (url, _):
        yield url


@pytest.fixture(scope="module")
def predictor_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fuzz-predictor")
    build_bundle(root / "bundles", 1, trees=10)
    with predictor(root, ["--bundle-dir", str(root / "bundles")], {"LATENCY_WRITE_TOKEN": TOKEN}) as (url, _):
        yield url


def fuzz(base_url: str) -> list[str]:
    """Every operation of the server's document, positive then negative cases, ``EXAMPLES`` each (seeded);
    returns the operations exercised. A failed check raises with the offending case (shrunk by Hypothesis)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    seen = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @FUZZ
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                if case.query and "wait_s" in case.query:
                    case.query["wait_s"] = 0  # a held long-poll would only make the run slow, not more thorough
                case.call_and_validate(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"},
                                       checks=CHECKS, timeout=30)

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # nothing to negate (no body, no params)
        seen.append(operation.label)
    return seen


def test_fuzz_trainer(trainer_url: str) -> None:
    assert len(fuzz(trainer_url)) == 19  # every operation (incl. GET /ui, /ui/data) but GET /openapi.json


def test_fuzz_predictor(predictor_url: str) -> None:
    assert len(fuzz(predictor_url)) == 9  # every operation but GET /openapi.json, which schemathesis skips
