"""Real vLLM engines (``make engine``) behind the whole stack, shared by every engine test.

``engine_stack`` -- demo.stack.Stack with one pool of two real engines (CPU build, one core each, the default
                    tiny model), a trainer (retrain every 2 s from 20 samples), a predictor and the router proxy,
                    all subprocesses on loopback. Started once per session (~1 min: the engines load in
                    parallel); tests that kill an engine live in ``test_zz_*`` modules, which run last.

These tests carry the ``engine`` marker; ``make test`` deselects it, ``make test-engine`` (after ``make engine``)
selects only it, and ``.ci/run`` runs both. A missing engine fails the run with the command that builds it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # demo/ is a top-level folder, not an installed package
    sys.path.insert(0, str(REPO))

from demo.engine import EngineSpec  # noqa: E402
from demo.stack import PoolSpec, Stack, StackSpec  # noqa: E402
from tests.engine.engine_client import MAX_MODEL_LEN, POOL  # noqa: E402


@pytest.fixture(scope="session")
def engine_spec() -> EngineSpec:
    spec = EngineSpec(max_model_len=MAX_MODEL_LEN)
    spec.check()
    return spec


@pytest.fixture(scope="session")
def engine_stack(engine_spec: EngineSpec, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # The engines, trainer and predictor share two cores (and CI shares them with other work): these tests are
    # about the loop, not the hot path's speed, so the prediction budget is generous (a miss is a fallback).
    spec = StackSpec(pools=(PoolSpec(POOL, 2, MAX_MODEL_LEN, engine=engine_spec),), retrain_interval_s=2.0,
                     sync_interval_s=0.5, min_samples_for_retrain=20,
                     router={"predictor_timeout_ms": 2000.0, "predictor_http_timeout_ms": 2500.0,
                             "scraper": {"interval_s": 0.1}})
    with Stack(spec, tmp_path_factory.mktemp("engine-stack")) as stack:
        yield stack
